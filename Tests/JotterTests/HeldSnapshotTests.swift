import Foundation
import Testing
@testable import Jotter

/// The writer's read transaction held from one write to the next (`Database.holdSnapshotBetweenWrites`):
/// what another connection writes is still seen and never overwritten, a writer waiting for the lock still
/// waits, and the WAL is still checkpointed and rewritten from its start.
@Suite struct HeldSnapshotTests {
    static func open(_ path: String) throws -> DatabaseQueue {
        let queue = try DatabaseQueue(path: path)
        try queue.write { try $0.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT)") }
        return queue
    }

    static func count(_ database: Database) throws -> Int64 {
        try database.statement("SELECT count(*) FROM notes").firstRow { $0.int64(0) } ?? -1
    }

    @Test func theSnapshotOutlivesACommit() throws {
        let directory = TemporaryDirectory()
        let queue = try Self.open(directory.file("jotter.db"))
        defer { queue.close() }
        try queue.write { try $0.run("INSERT INTO notes (text) VALUES ('one')") }
        #expect(try queue.write { $0.holdsSnapshot }, "the read begun in the last write is still open")
        #expect(try queue.read { try Self.count($0) } == 1)
    }

    /// The writer lets its snapshot go once no write came for a while, so another connection (`sqlite3`, a
    /// backup script) can checkpoint and truncate an idle server's WAL.
    @Test func anIdleWriterLetsOthersCheckpoint() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let queue = try Self.open(path)
        defer { queue.close() }
        let other = try Database(path: path)
        defer { other.close() }
        func truncate() throws -> Int64? { try other.statement("PRAGMA wal_checkpoint(TRUNCATE)").firstRow { $0.int64(0) } }
        try queue.write { try $0.run("INSERT INTO notes (text) VALUES ('one')") }
        #expect(try truncate() == 1, "busy: the writer holds the snapshot of its write")
        let deadline = Date().addingTimeInterval(60)
        var busy = try truncate()
        while busy != 0 && Date() < deadline {
            usleep(20_000)
            busy = try truncate()
        }
        #expect(busy == 0, "an idle writer let it go")
        let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int64
        #expect(size == 0, "the WAL was truncated")
        #expect(try queue.read { try Self.count($0) } == 1)
    }

    /// Another connection (another process, `jotter devices`) commits between two writes: the held snapshot
    /// is stale, so the next write begins on a fresh one, sees that row and keeps it.
    @Test func anotherConnectionsCommitIsSeenByTheNextWrite() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let queue = try Self.open(path)
        defer { queue.close() }
        try queue.write { try $0.run("INSERT INTO notes (text) VALUES ('first')") }
        #expect(try queue.write { $0.holdsSnapshot })

        let other = try Database(path: path)
        defer { other.close() }
        try other.execute("PRAGMA busy_timeout = 5000")
        try other.write { try $0.run("INSERT INTO notes (text) VALUES ('from elsewhere')") }

        let seen = try queue.write { database in
            try database.run("INSERT INTO notes (text) VALUES ('third')")
            return try Self.count(database)
        }
        #expect(seen == 3, "the write saw the other connection's row")
        let texts = try queue.read { try $0.statement("SELECT text FROM notes ORDER BY id").rows([]) { $0.text(0) ?? "" } }
        #expect(texts == ["first", "from elsewhere", "third"])
    }

    /// While another connection holds the write lock, a write waits for it (the busy timeout), as it does
    /// with no snapshot held, instead of failing with SQLITE_BUSY at once.
    @Test func aWriteWaitsForAnotherWritersLock() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let queue = try Self.open(path)
        defer { queue.close() }
        try queue.write { try $0.run("INSERT INTO notes (text) VALUES ('first')") }
        #expect(try queue.write { $0.holdsSnapshot })

        let locked = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            defer { done.signal() }
            guard let other = try? Database(path: path) else { return }
            defer { other.close() }
            try? other.execute("BEGIN IMMEDIATE")
            try? other.run("INSERT INTO notes (text) VALUES ('while locked')")
            locked.signal()
            release.wait()
            try? other.execute("COMMIT")
        }
        try #require(locked.wait(timeout: .now() + 30) == .success)
        // Let the lock go shortly after the write below has begun to wait for it.
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) { release.signal() }
        let seen = try queue.write { database in
            try database.run("INSERT INTO notes (text) VALUES ('after')")
            return try Self.count(database)
        }
        done.wait()
        #expect(seen == 3)
    }

    /// SQLite's autocheckpoint cannot pass a held read mark; the checkpoint run in its place keeps the WAL
    /// at about 1,000 pages, as SQLite's own would.
    @Test func theWALIsStillCheckpointedAndReused() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let queue = try Self.open(path)
        let text = String(repeating: "x", count: 3_000)  // a page of its own for every row
        var largest: Int64 = 0
        for _ in 0..<3_000 {
            try queue.write(durable: false) { try $0.run("INSERT INTO notes (text) VALUES (?)", [.text(text)]) }
            let size = ((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int64) ?? 0
            largest = max(largest, size)
        }
        // 1,000 frames of 4,096 + 24 bytes, and one transaction's; 3,000 rows unchecked would be 3× that.
        #expect(largest > 0 && largest < 1_100 * 4_120, "largest WAL \(largest) bytes")
        #expect(try queue.read { try Self.count($0) } == 3_000)
        queue.close()
        let reopened = try Self.open(path)
        defer { reopened.close() }
        #expect(try reopened.read { try $0.pragma("integrity_check") } == "ok")
        #expect(try reopened.read { try Self.count($0) } == 3_000)
    }
}
