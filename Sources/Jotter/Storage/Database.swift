import CSQLite
import Glibc

/// One SQLite connection. Not thread-safe: its owner serialises every use (see `Outbox`).
public final class Database {
    private let connection: OpaquePointer
    private var statements: [String: Statement] = [:]
    /// The database file's path.
    public let path: String

    /// Opens (creating if needed) the database at `path`, through the VFS named `vfs` (SQLite's default
    /// when nil).
    public init(path: String, readOnly: Bool = false, vfs: String? = nil) throws {
        SQLiteLibrary.configured
        var connection: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))
            | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &connection, flags, vfs)
        guard code == SQLITE_OK, let connection else {
            let error = DatabaseError(code: code, connection: connection)
            sqlite3_close_v2(connection)
            throw error
        }
        sqlite3_extended_result_codes(connection, 1)
        self.connection = connection
        self.path = path
        if !readOnly { Self.restrictToOwner(path) }
    }

    /// Takes group and other access away from the database file and its `-wal` and `-shm` files (SQLite
    /// creates the database 0644 less the umask, and the other two with the database's mode): the memos
    /// in it are sealed, but when they came, went and failed is nobody else's business either. Only the
    /// owner's own files; a file it cannot change is left as it is. By path, never by opening the file:
    /// closing a descriptor of a file drops every POSIX lock this process holds on it, the locks of the
    /// other connections of this process included.
    private static func restrictToOwner(_ path: String) {
        for file in [path, path + "-wal", path + "-shm"] {
            var info = stat()
            guard stat(file, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(),
                  info.st_mode & 0o077 != 0 else { continue }
            _ = chmod(file, info.st_mode & 0o700)
        }
    }

    deinit {
        close()
    }

    private var isClosed = false

    /// Stops what runs on a connection, from another thread: the statement under way ends with
    /// `SQLITE_INTERRUPT`. `@unchecked`: `sqlite3_interrupt` is the one call SQLite makes safe from any
    /// thread; its holder must not use it once the connection is closed.
    public struct Interrupter: @unchecked Sendable {
        fileprivate let connection: OpaquePointer

        public func interrupt() {
            sqlite3_interrupt(connection)
        }
    }

    /// This connection's interrupter (valid until `close`).
    public var interrupter: Interrupter { Interrupter(connection: connection) }

    /// Finalizes cached statements and closes the connection; further use is a programming error.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        statements.removeAll()
        sqlite3_close_v2(connection)
    }

    /// Runs one or more SQL statements without parameters.
    public func execute(_ sql: String) throws {
        try checkOpen(sql)
        let code = sqlite3_exec(connection, sql, nil, nil, nil)
        guard code == SQLITE_OK else {
            throw DatabaseError(code: sqlite3_extended_errcode(connection), connection: connection, sql: sql)
        }
    }

    /// A prepared statement for `sql`, cached for the connection's life.
    public func statement(_ sql: String) throws -> Statement {
        try checkOpen(sql)
        if let cached = statements[sql] { return cached }
        let statement = try Statement(connection: connection, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Runs `sql` with `values` bound.
    public func run(_ sql: String, _ values: [DatabaseValue] = []) throws {
        try statement(sql).execute(values)
    }

    /// A late caller (a delivery finishing after shutdown) gets an error, never a closed handle.
    private func checkOpen(_ sql: String) throws {
        if isClosed { throw DatabaseError(code: SQLITE_MISUSE, message: "the database is closed", sql: sql) }
    }

    /// A write on this connection erased memo text (`noteErasure`) since `DatabaseQueue` last emptied the
    /// WAL: the pages that held it are still in earlier frames of the WAL until then.
    private(set) var erasedSinceWALTruncation = false

    /// Records that the write under way erases memo text (a body, a subject, a message deleted), so that
    /// `DatabaseQueue.truncateWALAfterErasure` empties the WAL that still holds it.
    func noteErasure() {
        erasedSinceWALTruncation = true
    }

    /// The WAL was emptied: nothing erased before is left in it.
    func noteWALTruncated() {
        erasedSinceWALTruncation = false
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    public var changes: Int {
        Int(sqlite3_changes(connection))
    }

    /// Reads a PRAGMA's first column as text.
    public func pragma(_ name: String) throws -> String? {
        (try statement("PRAGMA \(name)").firstRow { $0.text(0) }) ?? nil
    }

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`, rolling back if it throws. BEGIN and COMMIT are
    /// prepared once (`sqlite3_exec` would parse them again for every transaction).
    public func write<T>(_ body: (Database) throws -> T) throws -> T {
        try run("BEGIN IMMEDIATE")
        do {
            let result = try body(self)
            do {
                try run("COMMIT")
            } catch var error as DatabaseError {
                error.duringCommit = true
                throw error
            }
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Runs `body` with the WAL writes of its commit gathered into one write (see `CoalescingVFS`): only for
    /// a commit that syncs (`synchronous=FULL`), whose sync writes them before SQLite publishes the frames.
    /// Ending the gathering writes whatever is left, which no commit depends on: a successful commit's
    /// frames went out with its sync, a failed one's are past the end SQLite will ever read.
    func gatheringWALWrites<T>(_ body: () throws -> T) rethrows -> T {
        _ = CoalescingVFS.setGathering(true, file: walFile())
        // Asked again: the connection's WAL as it is then, never a file closed meanwhile.
        defer { _ = CoalescingVFS.setGathering(false, file: walFile()) }
        return try body()
    }

    /// Writes SQLite asked of this connection's WAL and writes that reached the file, when it is open
    /// through `CoalescingVFS`.
    var walWriteCounts: (requested: Int, issued: Int)? {
        CoalescingVFS.writeCounts(file: walFile())
    }

    func walFile() -> UnsafeMutablePointer<sqlite3_file>? {
        // A closed connection is freed: asking it anything would read freed memory. (A delivery that
        // outlived a shutdown may still record its outcome; the write then fails as `checkOpen` says.)
        guard !isClosed else { return nil }
        var file: UnsafeMutableRawPointer?
        guard sqlite3_file_control(connection, "main", SQLITE_FCNTL_JOURNAL_POINTER, &file) == SQLITE_OK else {
            return nil
        }
        return file?.assumingMemoryBound(to: sqlite3_file.self)
    }

    /// Runs `body` inside a read transaction, so it sees one consistent snapshot.
    public func read<T>(_ body: (Database) throws -> T) throws -> T {
        try run("BEGIN")
        defer { try? run("COMMIT") }
        return try body(self)
    }
}

@available(*, unavailable)
extension Database: Sendable {}
