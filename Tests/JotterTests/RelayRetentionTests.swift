import Foundation
import Testing
@testable import Jotter

/// A relay does not keep what it delivered forever: a delivered message's record (its status for
/// `GET /v1/messages/{id}`, and which device sent it) stays for the retention, then housekeeping
/// deletes it — on SQLite and on PostgreSQL alike. Messages still on their way are never forgotten.
@Suite(.holdingSharedPostgres) struct RelayRetentionTests {
    @Test(arguments: RelayStoreKind.available)
    func deliveredMessagesAreForgottenAfterTheirRetention(store kind: RelayStoreKind) async throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let clock = ManualClock(milliseconds: 1_764_581_405_000)
        let scheduler = ManualScheduler(clock: clock)
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, clock: clock,
                                    scheduler: scheduler) {
            $0.limits.devicePerMinute = nil
            $0.messageRetentionMilliseconds = 7 * 86_400_000
        }
        defer { relay.stop() }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        let sent = try relay.send(device.secret, to: "me@example.com", body: "kept a week")
        let id = try #require((sent.json as? [String: Any])?["id"] as? String)
        #expect(TestServer.waitUntil(timeout: 30) { (try? relay.messages.record(id: id))??.status == .sent })

        clock.advance(milliseconds: 6 * 86_400_000)
        try relay.application.service.purge()
        #expect(try relay.json("GET", "/v1/messages/\(id)", secret: device.secret).status == 200, "kept for the week")

        // A message accepted now, but still waiting (its first attempt is an hour away) is kept.
        let waiting = try await relay.messages.enqueue(MemoDraft(subject: "s", body: "later", undoMilliseconds: 3_600_000,
                                                           recipient: "me@example.com"))
        clock.advance(milliseconds: 2 * 86_400_000)
        try relay.application.service.purge()
        #expect(try relay.json("GET", "/v1/messages/\(id)", secret: device.secret).status == 404, "then forgotten")
        #expect(try relay.messages.record(id: id) == nil)
        #expect(try relay.messages.record(id: waiting.id) != nil, "a message on its way is never forgotten")
    }
}
