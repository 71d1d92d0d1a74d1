import Dispatch
import Synchronization

/// The one way into the database: every write on one serial queue over one connection, every read on
/// a second connection that never waits for the writer (WAL). The outbox, settings, history and device
/// stores all go through it, so there is one writer and one order of writes.
///
/// A write is durable (`synchronous=FULL`: on disk at COMMIT) unless asked otherwise; `durable: false`
/// commits with `synchronous=NORMAL`, so the commit rides on the next durable commit or checkpoint
/// (see DESIGN, "Power loss").
///
/// `@unchecked Sendable`: `writer` is touched only on `queue` (asserted), `reader` only while holding `readerLock`.
public final class DatabaseQueue: @unchecked Sendable {
    private let writer: Database
    private let reader: Database
    private let readerLock = Mutex(())
    private let queue = DispatchQueue(label: "jotter.database.writer", qos: .userInitiated)
    private let onWriter = DispatchSpecificKey<Bool>()
    /// The database file.
    public let path: String
    /// The VFS its connections are opened with (nil: SQLite's default), for a connection of one's own.
    let vfs: String?

    /// How long a connection waits for another process's lock (the writer restores it after a checkpoint
    /// that must not wait).
    private static let busyTimeout = "PRAGMA busy_timeout = 5000"

    /// Opens the database at `path` (creating and migrating it), with WAL, `synchronous=FULL` (read
    /// back: the 204 promise depends on it) and `secure_delete`.
    public init(path: String) throws {
        let vfs = CoalescingVFS.isAvailable ? CoalescingVFS.name : nil
        let writer = try Database(path: path, vfs: vfs)
        try Self.configure(writer)
        try Migrations.migrate(writer)
        let reader = try Database(path: path, vfs: vfs)
        try reader.execute(Self.busyTimeout)
        self.writer = writer
        self.reader = reader
        self.path = path
        self.vfs = vfs
        queue.setSpecific(key: onWriter, value: true)
    }

    /// True on the writer queue (where `sync` and `write` must not be called).
    public var isWriterQueue: Bool { DispatchQueue.getSpecific(key: onWriter) == true }

    private static func configure(_ database: Database) throws {
        try database.execute(Self.busyTimeout)
        let mode = try database.pragma("journal_mode = WAL")
        guard mode?.lowercased() == "wal" else {
            throw DatabaseError(code: 1, message: "could not enable WAL (journal_mode is \(mode ?? "unknown"))")
        }
        try database.execute("PRAGMA synchronous = FULL; PRAGMA secure_delete = ON; PRAGMA foreign_keys = ON")
        guard try database.pragma("synchronous") == "2" else {
            throw DatabaseError(code: 1, message: "could not set synchronous=FULL")
        }
        guard try database.pragma("secure_delete") == "1" else {
            throw DatabaseError(code: 1, message: "could not set secure_delete")
        }
    }

    /// Runs `body` in a write transaction on the writer queue and waits for it. Never call it from the
    /// writer queue itself (use `transaction` there).
    public func write<T: Sendable>(durable: Bool = true, _ body: (Database) throws -> T) throws -> T {
        dispatchPrecondition(condition: .notOnQueue(queue))
        return try queue.sync { try transaction(durable: durable, body) }
    }

    /// Runs `work` on the writer queue and waits for it: on the calling thread when the queue is idle
    /// (GCD runs a `sync` block in place), so an idle writer costs no thread switch.
    public func sync(_ work: () -> Void) {
        dispatchPrecondition(condition: .notOnQueue(queue))
        queue.sync(execute: work)
    }

    /// Runs `work` on the writer queue later (a group commit gathers its batch there).
    public func async(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    /// A write transaction, on the writer queue (asserted): for work already running there.
    public func transaction<T>(durable: Bool = true, _ body: (Database) throws -> T) throws -> T {
        dispatchPrecondition(condition: .onQueue(queue))
        if durable { return try writer.gatheringWALWrites { try writer.write(body) } }
        try writer.run("PRAGMA synchronous = NORMAL")
        defer { try? writer.run("PRAGMA synchronous = FULL") }
        return try writer.write(body)
    }

    /// Runs `body` in a read transaction (one consistent snapshot) on the reader connection.
    public func read<T: Sendable>(_ body: (Database) throws -> T) throws -> T {
        try readerLock.withLock { _ in try reader.read(body) }
    }

    /// Empties the WAL (`PRAGMA wal_checkpoint(TRUNCATE)`) when a write erased memo text since it was last
    /// emptied; returns false when it could not be emptied yet (call again later). `secure_delete` zeroes
    /// erased text in the database file, but the WAL keeps every earlier version of a page in frames of
    /// its own: a delivered memo's sealed body stayed in `jotter.db-wal` for the next 150 to 200 memos, and
    /// a copy of the data directory (the key beside it) gave it back. Not after every commit: a WAL
    /// truncated and grown again costs each commit that grows it a sync of the file's size too.
    ///
    /// On the writer queue, so accepts wait behind it: it copies the WAL's frames not yet in the database
    /// (at most the auto-checkpoint's 1,000 pages, 4 MiB), syncs the database file and truncates the WAL,
    /// which is milliseconds on an idle disk. It does not wait for a reader (busy_timeout 0 meanwhile): a
    /// reader still using the WAL (a history page being read, the daily integrity check) leaves it to the
    /// next call.
    @discardableResult
    func truncateWALAfterErasure() -> Bool {
        dispatchPrecondition(condition: .notOnQueue(queue))
        return queue.sync {
            guard writer.erasedSinceWALTruncation else { return true }
            guard (try? writer.execute("PRAGMA busy_timeout = 0")) != nil else { return false }
            defer { try? writer.execute(Self.busyTimeout) }
            // One row: whether a reader or writer was in the way (1), the WAL's frames, the frames copied.
            let blocked = try? writer.statement("PRAGMA wal_checkpoint(TRUNCATE)").firstRow { $0.int64(0) }
            guard blocked == 0 else { return false }
            writer.noteWALTruncated()
            return true
        }
    }

    /// Makes the writer's next `count` WAL syncs fail after their frames are written, as on a disk whose
    /// fsync fails (for tests).
    func failWALSyncs(_ count: Int) {
        queue.sync { CoalescingVFS.failSyncs(count, of: writer.walFile()) }
    }

    /// Closes both connections after the writer has finished what it was given.
    public func close() {
        queue.sync { writer.close() }
        readerLock.withLock { _ in reader.close() }
    }
}
