import Foundation
import Testing
@testable import Jotter

/// The VFS every database opens with (`CoalescingVFS`): a durable commit's WAL frames reach the file in
/// one write, and what a commit wrote is there for the other connection and after a `kill -9`.
@Suite struct CoalescingVFSTests {
    static let relayDown = "smtp://127.0.0.1:1?tls=none&to=me@example.com&from=me@example.com"

    /// A database queue with a table of blobs.
    static func open(_ path: String) throws -> DatabaseQueue {
        let queue = try DatabaseQueue(path: path)
        try queue.write { try $0.execute("CREATE TABLE IF NOT EXISTS blobs (id INTEGER PRIMARY KEY, bytes BLOB)") }
        return queue
    }

    static func insert(_ blobs: [[UInt8]], into queue: DatabaseQueue, durable: Bool) throws
        -> (requested: Int, issued: Int) {
        let before = try #require(try queue.write { $0.walWriteCounts })
        try queue.write(durable: durable) { database in
            for blob in blobs { try database.run("INSERT INTO blobs (bytes) VALUES (?)", [.blob(blob)]) }
        }
        // A transaction that changes nothing writes no frame: it only reads the counts.
        let after = try #require(try queue.write { $0.walWriteCounts })
        return (after.requested - before.requested, after.issued - before.issued)
    }

    static func blobs(in queue: DatabaseQueue) throws -> [[UInt8]] {
        try queue.read { try $0.statement("SELECT bytes FROM blobs ORDER BY id").rows([]) { $0.blob(0) ?? [] } }
    }

    @Test func aDurableCommitReachesTheWALInOneWrite() throws {
        let directory = TemporaryDirectory()
        let queue = try Self.open(directory.file("jotter.db"))
        defer { queue.close() }
        // Three rows of 3,000 bytes: at least three pages, each a frame header and a page for SQLite.
        let rows = (0..<3).map { index in [UInt8](repeating: UInt8(index + 1), count: 3_000) }
        let counts = try Self.insert(rows, into: queue, durable: true)
        #expect(counts.requested >= 6, "\(counts)")
        #expect(counts.issued == 1, "\(counts)")
        // The reader connection sees exactly what was committed, at once.
        #expect(try Self.blobs(in: queue) == rows)
    }

    @Test func aCommitThatDoesNotSyncWritesAsItGoes() throws {
        let directory = TemporaryDirectory()
        let queue = try Self.open(directory.file("jotter.db"))
        defer { queue.close() }
        let rows = (0..<3).map { index in [UInt8](repeating: UInt8(index + 1), count: 3_000) }
        let counts = try Self.insert(rows, into: queue, durable: false)
        // Nothing syncs such a commit before SQLite publishes its frames, so nothing may wait in a buffer.
        #expect(counts.requested >= 6 && counts.issued == counts.requested, "\(counts)")
        #expect(try Self.blobs(in: queue) == rows)
    }

    @Test func aTransactionLargerThanTheBufferIsWrittenWhole() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let queue = try Self.open(path)
        // 3 MiB of random bytes, far more than the 64 KiB gathered at most, and two small rows around it.
        var generator = SystemRandomNumberGenerator()
        let big = (0..<(3 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let rows = [[1, 2, 3], big, [4, 5, 6]]
        let counts = try Self.insert(rows, into: queue, durable: true)
        #expect(counts.issued > 1 && counts.issued < counts.requested, "\(counts)")
        #expect(try Self.blobs(in: queue) == rows)
        queue.close()

        let reopened = try Self.open(path)
        defer { reopened.close() }
        #expect(try Self.blobs(in: reopened) == rows)
        #expect(try reopened.read { try $0.pragma("integrity_check") } == "ok")
    }

    /// Every memo answered `204` is in the database after the server is killed without a chance to write
    /// anything more (the WAL is all there is: no checkpoint, no clean close).
    @Test func everyAcceptedMemoSurvivesAKill() throws {
        let directory = TemporaryDirectory()
        let server = try ServeProcess(directory: directory, arguments: ["--relay", Self.relayDown])
        var ids: [String] = []
        for index in 0..<40 {
            let response = try RawHTTP.request(port: server.port, method: "POST", path: "/send",
                                               headers: [("Content-Type", "text/plain")],
                                               body: Array("memo \(index) of a killed server".utf8))
            #expect(response.status == 204)
            ids.append(try #require(response.header("X-Message-Id")))
        }
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()

        let database = try Database(path: server.data + "/jotter.db", readOnly: true)
        defer { database.close() }
        let stored = try database.statement("SELECT id FROM messages").rows([]) { $0.text(0) ?? "" }
        #expect(Set(stored) == Set(ids))
        #expect(try database.pragma("integrity_check") == "ok")
    }
}
