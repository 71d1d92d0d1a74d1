import CSQLite

/// A failed SQLite call: the result code, SQLite's message and the statement's SQL.
///
/// Bound values are never part of the error, so an error can be logged without leaking a memo.
public struct DatabaseError: Error, CustomStringConvertible, Sendable {
    /// The extended SQLite result code.
    public let code: Int32
    /// SQLite's own message for the code (it names tables and constraints, never bound values).
    public let message: String
    /// The SQL text of the statement that failed, if any.
    public let sql: String?

    init(code: Int32, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    init(code: Int32, connection: OpaquePointer?, sql: String? = nil) {
        let message = connection.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
            ?? String(cString: sqlite3_errstr(code))
        self.init(code: code, message: message, sql: sql)
    }

    /// The primary result code (`SQLITE_FULL`, `SQLITE_CONSTRAINT`, …).
    public var primaryCode: Int32 { code & 0xFF }

    /// True when the disk (or the database's size limit) is full.
    public var isDiskFull: Bool { primaryCode == SQLITE_FULL }

    /// A short kind for logs: the SQLite result code's name.
    public var kind: String { String(cString: sqlite3_errstr(code)) }

    public var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " — \($0)" } ?? "")
    }
}
