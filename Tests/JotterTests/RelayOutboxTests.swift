import Foundation
import Testing
@testable import Jotter

/// The outbox's one addition for the relay: a memo may carry its own recipient, sealed with its
/// content, delivered to it, and erased with the body. A composer's memo is stored and hashed as before.
/// The relay's outbox on both stores: the node's SQLite `Outbox` and the shared `PostgresOutbox`.
@Suite(.holdingSharedPostgres) struct RelayOutboxTests {
    @Test func storedFormReadsBackWithAndWithoutARecipient() throws {
        let plain = MemoContent(subject: "s", body: "b")
        #expect(plain.encoded().first == 1, "a memo without its own recipient keeps the old stored form")
        #expect(MemoContent(encoded: plain.encoded()) == plain)
        let addressed = MemoContent(subject: "ñ subject", body: "body\nlines", recipient: "a@example.com")
        #expect(addressed.encoded().first == 2)
        #expect(MemoContent(encoded: addressed.encoded()) == addressed)
        var truncated = addressed.encoded()
        truncated.removeLast(truncated.count - 12)
        #expect(MemoContent(encoded: truncated) == nil, "a recipient length past the end does not read")
        for written in [MemoContent(subject: "s", body: "b", recipient: "a@example.com", writtenAt: 1_764_581_405_123),
                        MemoContent(subject: "", body: "", recipient: "a@example.com", writtenAt: -1),
                        MemoContent(subject: "s", body: "body", writtenAt: Int64.max)] {
            #expect(written.encoded().first == 3)
            #expect(MemoContent(encoded: written.encoded()) == written, "\(written)")
            var short = written.encoded()
            short.removeLast(written.body.utf8.count + 1)
            #expect(MemoContent(encoded: short) == nil, "a written time cut short does not read")
        }
    }

    /// `jotter serve` and `jotter relay` keep their outboxes alike, so each refuses the other's data
    /// directory by name instead of delivering what it holds: a relay's messages into a composer's
    /// Maildir, or a person's memos through a relay's mail account. A directory from before the owner was
    /// recorded is known by what it holds.
    @Test func serveAndRelayRefuseEachOthersDataDirectory() throws {
        let composerDirectory = TemporaryDirectory(), relayDirectory = TemporaryDirectory()
        let composer = try TestServer(dataDirectory: composerDirectory.path)
        #expect(try composer.route("POST", "/send", headers: [("Content-Type", "text/plain")], body: Array("mine".utf8))
            .status == 204)
        composer.stop()
        #expect {
            _ = try RelayServer(dataDirectory: composerDirectory.path)
        } throws: { error in
            "\(error)".contains("data directory of a 'jotter serve'") && "\(error)".contains("--data-dir")
        }

        let store = try RelayTestStore(.sqlite)
        defer { store.release() }
        let relay = try RelayServer(dataDirectory: relayDirectory.path, store: store)
        relay.stop()
        #expect {
            _ = try TestServer(dataDirectory: relayDirectory.path)
        } throws: { error in
            "\(error)".contains("data directory of a 'jotter relay'")
        }
        // Recorded from before: a composer's directory without the setting, known by its memos.
        let database = try Database(path: composerDirectory.path + "/jotter.db")
        try database.run("DELETE FROM settings WHERE name = 'data_directory_owner'")
        database.close()
        #expect(throws: DataDirectoryOwner.Refusal.self) { _ = try RelayServer(dataDirectory: composerDirectory.path) }
        // Each still opens its own.
        try TestServer(dataDirectory: composerDirectory.path).stop()
        try RelayServer(dataDirectory: relayDirectory.path, store: store).stop()
    }

    @Test(arguments: RelayStoreKind.available)
    func aMemoWithItsOwnRecipientGoesThereAndItsPayloadHashesIt(store kind: RelayStoreKind) async throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let transport = ControlledTransport()
        let outbox = try Self.outbox(on: store, in: directory)
        let worker = DeliveryWorker(outbox: outbox, transport: transport)
        outbox.setOnAccepted { worker.wake() }
        try worker.start()
        defer {
            worker.stop()
            outbox.close()
        }
        let addressed = try await outbox.enqueue(MemoDraft(subject: "s", body: "b", idempotencyKey: "k",
                                                           recipient: "someone@example.com"))
        let plain = try await outbox.enqueue(MemoDraft(subject: "s", body: "b"))
        #expect(transport.waitUntilReceived(count: 2, timeout: 20))
        let byID = Dictionary(transport.messages.map { ($0.id, $0.to.address) }, uniquingKeysWith: { a, _ in a })
        #expect(byID[addressed.id] == "someone@example.com")
        #expect(byID[plain.id] == DeliveryWorker.Configuration().to.address)
        // The same key with another recipient is another payload.
        await #expect(throws: Outbox.EnqueueError.idempotencyConflict) {
            try await outbox.enqueue(MemoDraft(subject: "s", body: "b", idempotencyKey: "k",
                                               recipient: "other@example.com"))
        }
        #expect(try await outbox.enqueue(MemoDraft(subject: "s", body: "b", idempotencyKey: "k",
                                                   recipient: "someone@example.com")) == .replayed(id: addressed.id))
    }

    /// A claim takes due memos in order while their sealed contents fit its byte budget, and always the
    /// first; what it leaves stays due and is claimed next, on both stores.
    @Test(arguments: RelayStoreKind.available)
    func aClaimStopsAtItsByteBudgetAndAlwaysTakesOne(store kind: RelayStoreKind) async throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let outbox = try Self.outbox(on: store, in: directory)
        defer { outbox.close() }
        var ids: [String] = []
        for index in 0..<5 {
            ids.append(try await outbox.enqueue(MemoDraft(body: String(repeating: "\(index)", count: 1_000))).id)
        }
        let one = try outbox.claimDue(limit: 10, maxBytes: 10, leaseMilliseconds: 60_000)
        #expect(one.map(\.id) == [ids[0]], "the first memo is taken whatever its size")
        // Each sealed memo is a little over 1,000 bytes: two fit in 2,500, a third does not.
        let two = try outbox.claimDue(limit: 10, maxBytes: 2_500, leaseMilliseconds: 60_000)
        #expect(two.map(\.id) == [ids[1], ids[2]])
        let rest = try outbox.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(rest.map(\.id) == [ids[3], ids[4]], "left by the budget, claimed next, in order")
        #expect((one + two + rest).allSatisfy { $0.attempt == 1 && $0.content?.body.utf8.count == 1_000 })
        #expect(try outbox.claimDue(limit: 10, leaseMilliseconds: 60_000).isEmpty, "each claimed once")
    }

    /// A fresh outbox with a new key: in `store`'s PostgreSQL database, or a SQLite file in `directory`.
    private static func outbox(on store: RelayTestStore, in directory: TemporaryDirectory) throws -> any MessageOutbox {
        let key = try SymmetricKey.random()
        if let database = store.database {
            return try PostgresOutbox(url: database.url, key: key, keyPath: directory.file("jotter.key"))
        }
        return try Outbox(path: directory.file("jotter.db"), key: key)
    }
}
