import CSQLite

/// The current row of a stepping statement; valid only inside the mapping closure.
public struct Row {
    let statement: Statement

    /// True when the column holds NULL.
    public func isNull(_ column: Int32) -> Bool {
        sqlite3_column_type(statement.handle, column) == SQLITE_NULL
    }

    /// The column as an integer (0 for NULL).
    public func int64(_ column: Int32) -> Int64 {
        sqlite3_column_int64(statement.handle, column)
    }

    /// The column as an optional integer.
    public func optionalInt64(_ column: Int32) -> Int64? {
        isNull(column) ? nil : int64(column)
    }

    /// The column as text, or nil for NULL.
    public func text(_ column: Int32) -> String? {
        guard let pointer = sqlite3_column_text(statement.handle, column) else { return nil }
        return String(cString: pointer)
    }

    /// The column as bytes, or nil for NULL.
    public func blob(_ column: Int32) -> [UInt8]? {
        if isNull(column) { return nil }
        let count = Int(sqlite3_column_bytes(statement.handle, column))
        guard count > 0, let pointer = sqlite3_column_blob(statement.handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
