import Foundation
import Testing
@testable import Jotter

/// The relay's message limits on manual time: each layer at its boundary, every layer checked before
/// any is spent, `Retry-After` from the tightest layer, the RateLimit fields, and counters that
/// survive a restart. On both stores, SQLite and PostgreSQL.
@Suite(.holdingSharedPostgres) struct RelayLimitTests {
    /// A relay on manual time and a store of the given kind, with one device that has verified
    /// `me@example.com`.
    final class Fixture: @unchecked Sendable {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let store: RelayTestStore
        private(set) var relay: RelayServer
        let secret: String
        let configure: (inout RelayConfiguration) -> Void

        init(_ kind: RelayStoreKind, configure: @escaping (inout RelayConfiguration) -> Void) throws {
            self.configure = configure
            let store = try RelayTestStore(kind)
            self.store = store
            relay = try store.relay(in: directory, scheduler: scheduler, configure: configure)
            do {
                secret = try relay.register().secret
                try relay.verify(secret, "me@example.com")
            } catch {
                relay.stop()
                store.release()
                throw error
            }
        }

        var now: Int64 { scheduler.clock.nowMilliseconds() }

        /// Seconds until the current fixed window of `seconds` ends.
        func untilWindowEnds(_ seconds: Int64) -> Int64 {
            let width = seconds * 1000
            return (width - now % width + 999) / 1000
        }

        func send(_ secret: String? = nil, from client: String = "127.0.0.1") throws -> RawHTTP.Response {
            try relay.send(secret ?? self.secret, to: "me@example.com", from: client)
        }

        /// Sends `count` messages, each expected to be accepted.
        func accept(_ count: Int, _ secret: String? = nil, from client: String = "127.0.0.1") throws {
            for number in 1...count {
                let response = try send(secret, from: client)
                try #require(response.status == 202, "message \(number): \(response.status) \(response.text)")
            }
        }

        /// Stops the relay and starts it again on the same data directory and store.
        func restart() throws {
            relay.stop()
            relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, clock: scheduler.clock,
                                    scheduler: scheduler, configure: configure)
        }

        func stop() {
            relay.stop()
            store.release()
        }
    }

    /// `"name";r=N;t=T` items of a `RateLimit` field, by name.
    static func remaining(_ field: String?) -> [String: (r: Int, t: Int)] {
        var result: [String: (r: Int, t: Int)] = [:]
        for item in (field ?? "").split(separator: ",") {
            let parts = item.trimmingCharacters(in: .whitespaces).split(separator: ";")
            guard let name = parts.first?.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) else { continue }
            var r = -1, t = -1
            for parameter in parts.dropFirst() {
                let pair = parameter.split(separator: "=")
                if pair.first == "r" { r = Int(pair.last ?? "") ?? -1 }
                if pair.first == "t" { t = Int(pair.last ?? "") ?? -1 }
            }
            result[name] = (r, t)
        }
        return result
    }

    @Test(arguments: RelayStoreKind.available)
    func thirtyMessagesPerDevicePerMinuteThenRetryAfterTheMinute(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { _ in }
        defer { fixture.stop() }
        let first = try fixture.send()
        #expect(first.header("RateLimit-Policy") == "\"device-minute\";q=30;w=60, \"device-day\";q=200;w=86400, "
            + "\"ip-hour\";q=120;w=3600")
        let state = Self.remaining(first.header("RateLimit"))
        #expect(state["device-minute"]?.r == 29 && state["device-day"]?.r == 199 && state["ip-hour"]?.r == 119)
        #expect(state["device-minute"]?.t == Int(fixture.untilWindowEnds(60)))
        try fixture.accept(29)
        let refused = try fixture.send()
        #expect(refused.status == 429 && refused.errorCode == "rate_limited")
        #expect(refused.header("Retry-After") == String(fixture.untilWindowEnds(60)))
        let after = Self.remaining(refused.header("RateLimit"))
        #expect(after["device-minute"]?.r == 0 && after["device-day"]?.r == 170 && after["ip-hour"]?.r == 90,
                "the refusal spent nothing")
        // One millisecond before the minute ends it is still refused; at the minute, accepted.
        fixture.scheduler.clock.advance(milliseconds: 60_000 - fixture.now % 60_000 - 1)
        #expect(try fixture.send().status == 429)
        fixture.scheduler.clock.advance(milliseconds: 1)
        #expect(try fixture.send().status == 202)
    }

    @Test(arguments: RelayStoreKind.available)
    func twoHundredMessagesPerDevicePerDay(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { $0.limits.devicePerMinute = nil; $0.limits.ipPerHour = nil }
        defer { fixture.stop() }
        try fixture.accept(200)
        let refused = try fixture.send()
        #expect(refused.status == 429)
        #expect(refused.header("Retry-After") == String(fixture.untilWindowEnds(86_400)), "until midnight UTC")
        #expect(refused.header("RateLimit-Policy") == "\"device-day\";q=200;w=86400")
        fixture.scheduler.clock.advance(milliseconds: 86_400_000 - fixture.now % 86_400_000)
        #expect(try fixture.send().status == 202)
    }

    @Test(arguments: RelayStoreKind.available)
    func oneHundredTwentyMessagesPerIPAddressPerHour(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { $0.limits.devicePerMinute = nil; $0.limits.devicePerDay = nil }
        defer { fixture.stop() }
        let other = try fixture.relay.register()
        try fixture.relay.verify(other.secret, "other@example.com")
        try fixture.accept(60, from: "198.51.100.7")
        for _ in 1...60 {
            #expect(try fixture.relay.send(other.secret, to: "other@example.com", from: "198.51.100.7").status == 202)
        }
        let refused = try fixture.send(from: "198.51.100.7")
        #expect(refused.status == 429 && refused.header("Retry-After") == String(fixture.untilWindowEnds(3600)))
        #expect(try fixture.relay.send(other.secret, to: "other@example.com", from: "198.51.100.7").status == 429,
                "the address's hour is shared by its devices")
        #expect(try fixture.send(from: "198.51.100.8").status == 202, "another address has its own hour")
    }

    @Test(arguments: RelayStoreKind.available)
    func anIPv6ClientIsCountedByItsSlash64(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { $0.limits.devicePerMinute = nil; $0.limits.ipPerHour = 2 }
        defer { fixture.stop() }
        #expect(try fixture.send(from: "2001:db8:7:7::1").status == 202)
        #expect(try fixture.send(from: "2001:db8:7:7::2").status == 202)
        #expect(try fixture.send(from: "2001:db8:7:7:abcd::3").status == 429, "one subscriber's /64 is one client")
        #expect(try fixture.send(from: "2001:db8:7:8::1").status == 202)
        #expect(try fixture.send(from: "::ffff:192.0.2.1").status == 202)
        #expect(try fixture.send(from: "::ffff:192.0.2.1").status == 202)
        #expect(try fixture.send(from: "192.0.2.1").status == 429, "an IPv4-mapped address is its IPv4 address")
    }

    @Test(arguments: RelayStoreKind.available)
    func aRelayWideCeilingIsOffByDefaultAndShownOnlyWhenItRefuses(store kind: RelayStoreKind) throws {
        #expect(RelayLimits().globalPerDay == nil)
        // Five mails a day: the two code mails below count, as they spend the mail provider's quota too.
        let fixture = try Fixture(kind) { $0.limits.globalPerDay = 5 }
        defer { fixture.stop() }
        let other = try fixture.relay.register()
        try fixture.relay.verify(other.secret, "other@example.com")
        let first = try fixture.send()
        #expect(!(first.header("RateLimit-Policy") ?? "").contains("relay-day"), "its volume is nobody's business")
        try fixture.accept(1)
        #expect(try fixture.relay.send(other.secret, to: "other@example.com").status == 202)
        let refused = try fixture.relay.send(other.secret, to: "other@example.com", from: "192.0.2.9")
        #expect(refused.status == 429)
        #expect(refused.header("RateLimit-Policy")?.contains("\"relay-day\";q=5;w=86400") == true)
        #expect(Self.remaining(refused.header("RateLimit"))["relay-day"]?.r == 0)
        #expect(refused.header("Retry-After") == String(fixture.untilWindowEnds(86_400)))
        // And a code mail is refused by it too: it would go through the same mail account.
        let code = try fixture.relay.requestCode(other.secret, "third@example.com")
        #expect(code.status == 429, "\(code.status) \(code.text)")
    }

    @Test(arguments: RelayStoreKind.available)
    func everyLayerIsCheckedBeforeAnyIsSpent(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { $0.limits.devicePerMinute = 2; $0.limits.ipPerHour = 3 }
        defer { fixture.stop() }
        let other = try fixture.relay.register()
        try fixture.relay.verify(other.secret, "other@example.com")
        try fixture.accept(2)
        // The device's minute refuses: the address's hour keeps its last unit…
        let byDevice = try fixture.send()
        #expect(byDevice.status == 429)
        #expect(Self.remaining(byDevice.header("RateLimit"))["ip-hour"]?.r == 1)
        #expect(try fixture.relay.send(other.secret, to: "other@example.com").status == 202)
        // …and when the address's hour refuses, the other device's minute is not spent.
        let byAddress = try fixture.relay.send(other.secret, to: "other@example.com")
        #expect(byAddress.status == 429)
        let state = Self.remaining(byAddress.header("RateLimit"))
        #expect(state["device-minute"]?.r == 1 && state["ip-hour"]?.r == 0)
        #expect(try fixture.relay.send(other.secret, to: "other@example.com", from: "192.0.2.1").status == 202,
                "its minute still had one")
    }

    @Test(arguments: RelayStoreKind.available)
    func retryAfterComesFromTheTightestLayer(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { $0.limits.devicePerMinute = 2; $0.limits.devicePerDay = 2 }
        defer { fixture.stop() }
        try fixture.accept(2)
        let refused = try fixture.send()
        let state = Self.remaining(refused.header("RateLimit"))
        #expect(state["device-minute"]?.r == 0 && state["device-day"]?.r == 0)
        #expect(refused.header("Retry-After") == String(fixture.untilWindowEnds(86_400)),
                "waiting out the minute would not help: the day decides")
    }

    @Test(arguments: RelayStoreKind.available)
    func limitsCanBeTurnedOff(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) {
            $0.limits.devicePerMinute = nil; $0.limits.devicePerDay = nil; $0.limits.ipPerHour = nil
        }
        defer { fixture.stop() }
        try fixture.accept(40)
        #expect(try fixture.send().header("RateLimit-Policy") == nil)
    }

    @Test(arguments: RelayStoreKind.available)
    func countersSurviveARestart(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { $0.limits.devicePerMinute = 3 }
        defer { fixture.stop() }
        try fixture.accept(2)
        try fixture.restart()
        #expect(try fixture.send().status == 202)
        let refused = try fixture.send()
        #expect(refused.status == 429 && Self.remaining(refused.header("RateLimit"))["device-minute"]?.r == 0)
        // Codes' cooldown and the address caps survive too.
        let known = try fixture.relay.mailFiles(to: "new@example.com")
        #expect(try fixture.relay.requestCode(fixture.secret, "new@example.com").status == 202)
        _ = try fixture.relay.newCode(to: "new@example.com", known: known)
        try fixture.restart()
        #expect(try fixture.relay.requestCode(fixture.secret, "new@example.com").errorCode == "code_cooldown")
    }
}
