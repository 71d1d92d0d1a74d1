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

    /// A message's record (its owner, so its status and its Retry) lives as long as the message does: one
    /// still retrying after the retention is still answered for, not a 404 with its sealed body kept
    /// for good. A failed one (its composer still has the memo) is forgotten whole after the retention,
    /// body and record together.
    @Test(arguments: RelayStoreKind.available)
    func aMessageAndItsRecordAreForgottenTogether(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let clock = ManualClock(milliseconds: 1_764_581_405_000)
        let scheduler = ManualScheduler(clock: clock)
        let mail = RelayServer.steeredMail(directory.file("relay"))
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, clock: clock,
                                    scheduler: scheduler, transport: mail) {
            $0.limits.devicePerMinute = nil
            $0.limits.devicePerDay = nil
        }
        defer { relay.stop() }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        mail.fail(with: DeliveryFailure(.serverError, permanent: false))
        let retrying = try relay.sendID(device.secret, to: "me@example.com", body: "still on its way")
        #expect(TestServer.waitUntil(timeout: 30) { (try? relay.messages.record(id: retrying))??.status == .retrying })
        clock.advance(milliseconds: 31 * 86_400_000)
        try relay.application.service.purge()
        let asked = try relay.json("GET", "/v1/messages/\(retrying)", secret: device.secret)
        let status = (asked.json as? [String: Any])?["status"] as? String ?? "-"
        #expect(asked.status == 200 && ["queued", "sending", "retrying"].contains(status),
                "a message on its way keeps its record: \(asked.status) \(asked.text)")

        mail.fail(with: DeliveryFailure(.rejected, permanent: true))
        let failed = try relay.sendID(device.secret, to: "me@example.com", body: "refused by the provider")
        #expect(TestServer.waitUntil(timeout: 30) { (try? relay.messages.record(id: failed))??.status == .failed })
        clock.advance(milliseconds: 29 * 86_400_000)
        try relay.application.service.purge()
        #expect(try relay.json("GET", "/v1/messages/\(failed)", secret: device.secret).status == 200, "within the retention")
        clock.advance(milliseconds: 2 * 86_400_000)
        try relay.application.service.purge()
        #expect(try relay.json("GET", "/v1/messages/\(failed)", secret: device.secret).status == 404)
        #expect(try relay.messages.record(id: failed) == nil, "its sealed body goes with its record")
    }

    /// The relay keeps a message's text only until it is delivered: no subject is kept on its own for a
    /// history (a subject is often the memo's first line; a code mail's holds the code).
    @Test(arguments: RelayStoreKind.available)
    func nothingOfAMessagesTextOutlivesItsDelivery(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        let sent = try relay.send(device.secret, to: "me@example.com", subject: "First line of a memo", body: "private")
        let id = try #require((sent.json as? [String: Any])?["id"] as? String)
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(device.secret, of: id) == "sent" })
        #expect(try store.messagesHoldingText(on: relay) == 0, "the code mail and the memo, once delivered")
    }

    /// Open registration lets anyone make devices: one that never verifies an address (or drops its
    /// last one) is forgotten a week after it registered, once no address it asked for is younger
    /// than a week or has a live code; one that is revoked, after the message retention. A verified
    /// device is kept however long it idles.
    @Test(arguments: RelayStoreKind.available)
    func devicesWithoutAnAddressAreForgottenAfterAWeek(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let clock = ManualClock(milliseconds: 1_764_581_405_000)
        let scheduler = ManualScheduler(clock: clock)
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, clock: clock,
                                    scheduler: scheduler) { $0.limits.registrationsPerIPHour = nil }
        defer { relay.stop() }
        let idle = try relay.register(), asked = try relay.register(), late = try relay.register()
        let verified = try relay.register(), dropped = try relay.register(), revoked = try relay.register()
        #expect(try relay.requestCode(asked.secret, "asked@example.com").status == 202)
        try relay.verify(verified.secret, "kept@example.com")
        clock.advance(milliseconds: 60_000)
        try relay.verify(dropped.secret, "dropped@example.com")
        #expect(try relay.json("DELETE", "/v1/destinations/dropped@example.com", secret: dropped.secret).status == 204)
        #expect(try relay.json("DELETE", "/v1/devices/me", secret: revoked.secret).status == 204)
        func known(_ device: (id: String, secret: String)) throws -> Bool {
            let status = try relay.json("GET", "/v1/destinations", secret: device.secret).status
            #expect(status == 200 || status == 401)
            return status == 200
        }

        // Six days on, everyone not revoked is still known.
        clock.advance(milliseconds: 6 * 86_400_000)
        try relay.application.service.purge()
        #expect(try [idle, asked, late, verified, dropped].allSatisfy(known))
        #expect(try store.deviceCount(on: relay) == 6)

        // A week and a minute after registering: a code asked for just now keeps its device until it expires.
        clock.advance(milliseconds: 86_400_000)
        #expect(try relay.requestCode(late.secret, "late@example.com").status == 202)
        try relay.application.service.purge()
        #expect(try known(verified) && known(late))
        #expect(try ![idle, asked, dropped].contains(where: known), "a device without an address outlived its week")
        #expect(try relay.requestCode(idle.secret, "idle@example.com").status == 401)
        #expect(try store.deviceCount(on: relay) == 3, "the verified, the late and the revoked device")
        // Its code expired unconfirmed, but the address it asked for is kept a week, and the device with it.
        clock.advance(milliseconds: 10 * 60_000 + 1)
        try relay.application.service.purge()
        #expect(try known(late))
        clock.advance(milliseconds: 7 * 86_400_000)
        try relay.application.service.purge()
        #expect(try !known(late), "a week after its last address was asked for")
        #expect(try store.deviceCount(on: relay) == 2)

        // The revoked device's record goes with its messages' retention (30 days); the verified one stays.
        clock.advance(milliseconds: 30 * 86_400_000)
        try relay.application.service.purge()
        #expect(try store.deviceCount(on: relay) == 1)
        #expect(try known(verified))
        #expect(try relay.send(verified.secret, to: "kept@example.com").status == 202)
    }
}
