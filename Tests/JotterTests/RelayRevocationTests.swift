import Foundation
import Testing
@testable import Jotter

/// A device forgets an address it no longer reads, and a lost composer is revoked: on both stores.
/// Nothing accepted before is lost either way.
@Suite(.holdingSharedPostgres) struct RelayRevocationTests {
    /// A relay on manual time with two devices that both verified me@example.com.
    private final class Fixture {
        let store: RelayTestStore
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let relay: RelayServer
        let device: (id: String, secret: String)
        let other: (id: String, secret: String)

        init(_ kind: RelayStoreKind) throws {
            store = try RelayTestStore(kind)
            relay = try store.relay(in: directory, scheduler: scheduler) { _ in }
            do {
                device = try relay.register()
                other = try relay.register()
                try relay.verify(device.secret, "me@example.com")
                scheduler.clock.advance(milliseconds: 61_000)  // an address's next code waits a minute
                try relay.verify(other.secret, "me@example.com")
            } catch {
                relay.stop()
                store.release()
                throw error
            }
        }

        func stop() {
            relay.stop()
            store.release()
        }
    }

    @Test(arguments: RelayStoreKind.available)
    func aForgottenAddressNeedsVerifyingAgainAndOthersAreUntouched(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let relay = fixture.relay, device = fixture.device, other = fixture.other
        #expect(try relay.send(device.secret, to: "me@example.com", body: "before").status == 202)

        // The address in the body (no access log keeps it), in other letters' case.
        let removed = try relay.json("POST", "/v1/destinations/forget", secret: device.secret, ["address": "ME@example.com"])
        #expect(removed.status == 204, "\(removed.text)")
        #expect(try relay.json("DELETE", "/v1/destinations/me@example.com", secret: device.secret).errorCode
                == "destination_not_found", "once")
        #expect(try relay.json("POST", "/v1/destinations/forget", secret: device.secret, ["address": "me@example.com"])
                .errorCode == "destination_not_found", "once")
        #expect(try relay.json("DELETE", "/v1/destinations/not-an-address", secret: device.secret).errorCode
                == "invalid_address")
        #expect(try relay.json("DELETE", "/v1/destinations/me@example.com").status == 401)
        #expect(!(try relay.json("GET", "/v1/destinations", secret: device.secret).text.contains("me@example.com")))
        #expect(try relay.send(device.secret, to: "me@example.com", body: "after").errorCode == "destination_unverified")
        #expect(try relay.send(other.secret, to: "me@example.com", body: "another device's").status == 202,
                "another device's verification stands")
        #expect(TestServer.waitUntil(timeout: 20) {
            let bodies = ((try? relay.mails(to: "me@example.com")) ?? []).map { $0.message["body"] }
            return bodies.contains { RelayServer.sameBody($0, "before") } && bodies.contains { RelayServer.sameBody($0, "another device's") }
        }, "what was accepted is delivered")
        fixture.scheduler.clock.advance(milliseconds: 61_000)
        try relay.verify(device.secret, "me@example.com")
        #expect(try relay.send(device.secret, to: "me@example.com", body: "again").status == 202)
    }

    @Test(arguments: RelayStoreKind.available)
    func aRevokedDeviceIsRefusedAndItsMessagesStillGoOut(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let relay = fixture.relay, device = fixture.device, other = fixture.other
        let sent = try relay.send(device.secret, to: "me@example.com", body: "sent before the revocation")
        let id = try #require((sent.json as? [String: Any])?["id"] as? String)

        #expect(try relay.json("DELETE", "/v1/devices/me", secret: device.secret).status == 204)
        for response in [try relay.json("GET", "/v1/destinations", secret: device.secret),
                         try relay.send(device.secret, to: "me@example.com", body: "after"),
                         try relay.json("DELETE", "/v1/devices/me", secret: device.secret)] {
            #expect(response.status == 401 && response.header("WWW-Authenticate") == "Bearer", "\(response.text)")
        }
        #expect(try relay.json("GET", "/v1/destinations", secret: other.secret).text.contains("me@example.com"),
                "another device is untouched")
        #expect(TestServer.waitUntil(timeout: 20) {
            ((try? relay.mails(to: "me@example.com")) ?? []).contains { RelayServer.sameBody($0.message["body"], "sent before the revocation") }
        }, "message \(id) is delivered")
    }

    /// Registering again with a revoked device's secret (a client that kept it, or a retry after the
    /// revocation) is told the secret is spent, the same way every time: it was a 503 with Retry-After,
    /// forever. It costs no registration, and a new secret registers.
    @Test(arguments: RelayStoreKind.available)
    func aRevokedSecretCannotRegisterAgainAndCostsNoRegistration(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        let directory = TemporaryDirectory()
        let relay = try store.relay(in: directory, scheduler: ManualScheduler()) { $0.limits.registrationsPerIPHour = 2 }
        defer {
            relay.stop()
            store.release()
        }
        let device = try relay.register()
        #expect(try relay.json("DELETE", "/v1/devices/me", secret: device.secret).status == 204)
        for _ in 0..<3 {
            let again = try relay.json("POST", "/v1/devices", ["secret": device.secret])
            #expect(again.status == 409 && again.errorCode == "secret_revoked", "\(again.text)")
            #expect(again.header("Retry-After") == nil)
        }
        #expect(try relay.json("GET", "/v1/destinations", secret: device.secret).status == 401, "still revoked")
        let fresh = try relay.json("POST", "/v1/devices", ["secret": try RelayKeys.newSecret(prefix: "jrs_")])
        #expect(fresh.status == 201, "the second of two registrations an hour: \(fresh.text)")
        #expect(try relay.json("POST", "/v1/devices", [:]).errorCode == "rate_limited", "and a third is one too many")
    }
}
