import CSQLite

/// One prepared SQLite statement; finalizes itself when released.
public final class Statement {
    let handle: OpaquePointer
    /// The SQL text, kept for error messages.
    public let sql: String
    private let connection: OpaquePointer

    init(connection: OpaquePointer, sql: String) throws {
        var handle: OpaquePointer?
        let code = sqlite3_prepare_v2(connection, sql, -1, &handle, nil)
        guard code == SQLITE_OK, let handle else {
            sqlite3_finalize(handle)
            throw DatabaseError(code: code, connection: connection, sql: sql)
        }
        self.handle = handle
        self.connection = connection
        self.sql = sql
    }

    deinit {
        sqlite3_finalize(handle)
    }

    /// Resets the statement and binds `values` to its parameters, in order.
    public func bind(_ values: [DatabaseValue]) throws {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .null:
                code = sqlite3_bind_null(handle, index)
            case .integer(let integer):
                code = sqlite3_bind_int64(handle, index, integer)
            case .real(let real):
                code = sqlite3_bind_double(handle, index, real)
            case .text(let text):
                code = sqlite3_bind_text(handle, index, text, -1, jotter_sqlite_transient())
            case .blob(let bytes):
                code = bytes.withUnsafeBytes { raw in
                    // A zero-length blob must still be a blob, not NULL: pass a valid pointer.
                    sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1),
                                      Int32(raw.count), jotter_sqlite_transient())
                }
            }
            guard code == SQLITE_OK else {
                throw DatabaseError(code: code, connection: connection, sql: sql)
            }
        }
    }

    /// Steps once: `true` when a row is available, `false` when done.
    @discardableResult
    public func step() throws -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw DatabaseError(code: sqlite3_extended_errcode(connection), connection: connection, sql: sql)
        }
    }

    /// Runs the statement to completion with `values` bound.
    public func execute(_ values: [DatabaseValue] = []) throws {
        try bind(values)
        defer { sqlite3_reset(handle) }  // also after an error (a COMMIT refused as busy, say)
        while try step() {}
    }

    /// Runs the statement and maps each row.
    public func rows<T>(_ values: [DatabaseValue] = [], _ map: (Row) throws -> T) throws -> [T] {
        try bind(values)
        defer { sqlite3_reset(handle) }
        var result: [T] = []
        while try step() {
            result.append(try map(Row(statement: self)))
        }
        return result
    }

    /// The first row, mapped, or nil.
    public func firstRow<T>(_ values: [DatabaseValue] = [], _ map: (Row) throws -> T) throws -> T? {
        try bind(values)
        defer { sqlite3_reset(handle) }
        return try step() ? try map(Row(statement: self)) : nil
    }
}

@available(*, unavailable)
extension Statement: Sendable {}
