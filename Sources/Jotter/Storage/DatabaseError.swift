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
    /// True when it was the COMMIT of a write transaction that failed (`Database.write`).
    public internal(set) var duringCommit = false

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

    /// The disk's trouble, not the statement's (nil for a constraint, a bug, a misuse): `disk_full`,
    /// `read_only`, `io_error`, `damaged`, `cannot_open`, or `locked` (by another process, too long).
    public var storageTrouble: String? {
        switch primaryCode {
        case SQLITE_FULL: return "disk_full"
        case SQLITE_READONLY, SQLITE_PERM: return "read_only"
        case SQLITE_IOERR: return "io_error"
        case SQLITE_CORRUPT, SQLITE_NOTADB: return "damaged"
        case SQLITE_CANTOPEN: return "cannot_open"
        case SQLITE_BUSY, SQLITE_LOCKED, SQLITE_PROTOCOL: return "locked"
        default: return nil
        }
    }

    /// True when the disk could not read a page back (`SQLITE_IOERR_READ`, `SQLITE_IOERR_SHORT_READ`):
    /// unlike a failed write or sync, that says something of the pages themselves.
    /// (Swift does not import those two macros: each is `SQLITE_IOERR | (n << 8)`.)
    public var isFailedRead: Bool { code == SQLITE_IOERR | (1 << 8) || code == SQLITE_IOERR | (2 << 8) }

    /// The pages themselves are in doubt: SQLite cannot make sense of one, or the disk could not read one.
    public var meansDamage: Bool { storageTrouble == "damaged" || isFailedRead }

    /// The transaction may be on disk although its COMMIT failed: an I/O error after the commit's WAL
    /// frames were written (their sync failed, say), so they may be whole in the file and a restart's
    /// recovery would take them. Not so when the write of the frames itself failed (`SQLITE_IOERR_WRITE`:
    /// the frame that marks the commit is the last one written, and nothing of a failed write reaches the
    /// file) or when the disk was full (a frame cut short is never recovered).
    public var mayHaveCommitted: Bool {
        duringCommit && primaryCode == SQLITE_IOERR && code != SQLITE_IOERR | (3 << 8)
    }

    /// A short kind for logs: the SQLite result code's name.
    public var kind: String { String(cString: sqlite3_errstr(code)) }

    public var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " — \($0)" } ?? "")
    }
}
