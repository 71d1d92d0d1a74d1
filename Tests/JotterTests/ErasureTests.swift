import Foundation
import Testing
@testable import Jotter

/// What the outbox erases (a delivered memo's body, a subject past its retention, a memo taken back, a
/// relay's message forgotten) is gone from the files of the data directory, not only from the table: the
/// WAL kept every earlier version of a page, and a copy of a running server's data directory, the key
/// beside the database, gave back memos the README calls erased.
@Suite struct ErasureTests {
    /// A memo's sealed body and subject as stored (nil where there is none).
    private static func sealed(_ id: String, in outbox: Outbox) throws -> [[UInt8]] {
        try outbox.database.read { database in
            try database.statement("SELECT sealed_payload, sealed_subject FROM messages WHERE id = ?")
                .firstRow([.text(id)]) { [$0.blob(0), $0.blob(1)].compactMap { $0 } } ?? []
        }
    }

    /// Which of `blobs` the database file or its WAL still holds, byte for byte.
    private static func kept(_ blobs: [[UInt8]], by databasePath: String) -> [[UInt8]] {
        let files = [databasePath, databasePath + "-wal"].compactMap { FileManager.default.contents(atPath: $0) }
        return blobs.filter { blob in files.contains { $0.range(of: Data(blob)) != nil } }
    }

    @Test func aDeliveredMemoAndOneTakenBackAreGoneFromTheWALAfterTheMinutelyPurge() async throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let scheduler = ManualScheduler()
        let outbox = try Outbox(path: path, key: SymmetricKey.random(), clock: scheduler.clock)
        let worker = try DeliveryWorker.started(outbox: outbox, queue: outbox, transport: ControlledTransport(.deliver),
                                                scheduler: scheduler) { $0.subjectRetentionMilliseconds = 60_000 }
        defer {
            worker.stop()
            outbox.close()
        }
        // The worker's first pump (its first purge) is over before anything is erased.
        #expect(TestServer.waitUntil(timeout: 20) { scheduler.nextDeadline != nil })
        // Both wait out an undo window, so that what they are stored as can be read first.
        let delivered = try await outbox.enqueue(MemoDraft(body: "delivered, then erased", undoMilliseconds: 10_000)).id
        let takenBack = try await outbox.enqueue(MemoDraft(body: "taken back", undoMilliseconds: 10_000)).id
        let blobs = try Self.sealed(delivered, in: outbox) + Self.sealed(takenBack, in: outbox)
        #expect(blobs.count == 4, "each memo's body and subject")
        let cancelled = await withCheckedContinuation { continuation in
            outbox.cancel(id: takenBack) { continuation.resume(returning: $0) }
        }
        guard case .success(.cancelled) = cancelled else {
            Issue.record("Undo during the window: \(cancelled)")
            return
        }
        scheduler.advance(milliseconds: 10_000)
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: delivered))??.status == .sent })
        #expect(try Self.sealed(delivered, in: outbox).count == 1, "the body erased, the subject kept for the history")
        #expect(try Self.sealed(takenBack, in: outbox).isEmpty)
        #expect(Self.kept(blobs, by: path).count == 4, "erased from the table, still in the WAL until the purge")
        // The next minutely purge (past the subject's retention too) leaves none of them in either file.
        #expect(TestServer.waitUntil(timeout: 20) { scheduler.nextDeadline != nil })
        scheduler.advance(milliseconds: 61_000)
        #expect(TestServer.waitUntil(timeout: 20) { Self.kept(blobs, by: path).isEmpty },
                "\(Self.kept(blobs, by: path).count) of the 4 sealed fields still in jotter.db or jotter.db-wal")
        #expect(try Self.sealed(delivered, in: outbox).isEmpty, "the subject purged")
    }

    /// A reader still in the WAL (another connection's open read, as the daily integrity check's) keeps it
    /// from being emptied: the purge does not wait for it (the writer, and so every accept, would wait
    /// with it), and the next purge empties the WAL once the reader is done.
    @Test func aReaderInTheWayPutsItOffToTheNextPurgeWithoutWaiting() async throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let clock = ManualClock()
        let outbox = try Outbox(path: path, key: SymmetricKey.random(), clock: clock)
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(body: "read while it is erased")).id
        let blobs = Array(try Self.sealed(id, in: outbox).prefix(1))  // its body (the subject stays 7 days)
        #expect(try outbox.claimDue(limit: 1, maxBytes: .max, leaseMilliseconds: 60_000, excluding: []).map(\.id) == [id])
        try outbox.markSent(id: id)
        let reader = try Database(path: path)
        defer { reader.close() }
        try reader.execute("BEGIN")
        #expect(try reader.statement("SELECT COUNT(*) FROM messages").firstRow { $0.int64(0) } == 1)
        let started = Date()
        try outbox.purgeSubjects(deliveredBefore: 0)
        #expect(Date().timeIntervalSince(started) < 2, "it did not wait for the reader (busy_timeout is 5 s)")
        #expect(Self.kept(blobs, by: path).count == 1, "the reader still sees the WAL the body is in")
        try reader.execute("COMMIT")
        try outbox.purgeSubjects(deliveredBefore: 0)
        #expect(Self.kept(blobs, by: path).count == 0, "gone at the next purge")
    }

    /// A relay's outbox (no subjects kept): a failed message it forgets is gone from the WAL at the next purge.
    @Test func aMessageTheRelayForgetsIsGoneFromTheWALAfterThePurge() async throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let clock = ManualClock()
        let outbox = try Outbox(path: path, key: SymmetricKey.random(), clock: clock, recordsSubjects: false)
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(body: "for a recipient who refuses it")).id
        let blobs = try Self.sealed(id, in: outbox)
        #expect(blobs.count == 1, "a body, no subject")
        #expect(try outbox.claimDue(limit: 1, maxBytes: .max, leaseMilliseconds: 60_000, excluding: []).map(\.id) == [id])
        try outbox.transition(id: id) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.attemptFailed(DeliveryFailure(.rejected, permanent: true), now: clock.nowMilliseconds(),
                                        policy: RetryPolicy(), random: 0)
        }
        clock.advance(milliseconds: 1)
        #expect(try outbox.forgetFinished(before: clock.nowMilliseconds(), failedToo: true) == 1)
        #expect(Self.kept(blobs, by: path).count == 1, "deleted from the table, still in the WAL")
        try outbox.purgeSubjects(deliveredBefore: clock.nowMilliseconds())
        #expect(Self.kept(blobs, by: path).count == 0, "gone from jotter.db and jotter.db-wal")
    }
}
