import Foundation
import Testing
@testable import Jotter

/// What `/healthz` and `/history` say while the relay is down or refusing: every waiting memo says
/// why it waits, and health is `degraded` with the relay's state.
@Suite struct RelayStateTests {
    private static func json(_ response: RawHTTP.Response) -> [String: Any] {
        (response.json as? [String: Any]) ?? [:]
    }

    @Test func aRefusingRelayShowsInHealthAndInEveryWaitingMemo() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.fail(DeliveryFailure(.auth, permanent: true)))
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        #expect(Self.json(try server.route("GET", "/healthz"))["status"] as? String == "ok")
        for index in 0..<3 {
            #expect(try server.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                     body: Array("memo \(index)".utf8)).status == 204)
        }
        #expect(server.waitUntil(timeout: 30) { (try? server.outbox.history.counts())?[.held] == 3 })
        let health = Self.json(try server.route("GET", "/healthz"))
        #expect(health["status"] as? String == "degraded")
        let relay = health["relay"] as? [String: Any]
        #expect(relay?["state"] as? String == "refused")
        #expect(relay?["reason"] as? String == "auth")
        #expect(relay?["since"] as? String != nil)
        let history = (try server.route("GET", "/history").json as? [[String: Any]]) ?? []
        #expect(history.count == 3)
        for entry in history {
            #expect(entry["status"] as? String == "held")
            #expect(entry["last_error"] as? String == "auth")
            #expect(entry["waiting_for"] as? String == "relay_refused")
        }
        #expect(transport.messages.count == 1, "one failed login")
    }

    @Test func anUnreachableRelayShowsAsOfflineOnEveryWaitingMemo() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.fail(DeliveryFailure(.unreachable, permanent: false)))
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        for index in 0..<3 {
            #expect(try server.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                     body: Array("memo \(index)".utf8)).status == 204)
        }
        #expect(server.waitUntil(timeout: 30) {
            Self.json((try? server.route("GET", "/healthz")) ?? RawHTTP.Response(status: 0, headers: [], body: []))["status"]
                as? String == "degraded"
        })
        let relay = Self.json(try server.route("GET", "/healthz"))["relay"] as? [String: Any]
        #expect(relay?["state"] as? String == "offline")
        // The attempt that found the relay gone is recorded a moment after the relay is marked offline.
        let everyOneSaysWhy = server.waitUntil(timeout: 30) {
            let history = ((try? server.route("GET", "/history"))?.json as? [[String: Any]]) ?? []
            return history.count == 3 && history.allSatisfy { $0["waiting_for"] as? String == "relay_offline" }
        }
        let shown = ((try? server.route("GET", "/history"))?.text) ?? ""
        #expect(everyOneSaysWhy, "every waiting memo says why, not only the one that was tried: \(shown)")
        transport.release()
        #expect(server.waitUntil(timeout: 30) { (try? server.outbox.history.counts())?[.sent] == 3 })
        #expect(Self.json(try server.route("GET", "/healthz"))["status"] as? String == "ok")
    }

    /// A memo not delivered after --warn-after: /healthz is degraded with the count and the oldest
    /// age, and the log says so once per memo (not once per minute).
    @Test func aMemoStuckPastTheWarningShowsInHealthAndIsLoggedOnce() throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock(milliseconds: SystemClock().nowMilliseconds())
        let transport = ControlledTransport(.fail(DeliveryFailure(.serverError, permanent: false)))
        let server = try TestServer(dataDirectory: directory.path, transport: transport, clock: clock) {
            $0.delivery.warnAfterMilliseconds = 600_000
        }
        defer { server.stop() }
        #expect(try server.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                 body: Array("stuck".utf8)).status == 204)
        #expect(transport.waitUntilReceived(count: 1, timeout: 30))
        let before = Self.json(try server.route("GET", "/healthz"))
        #expect(before["status"] as? String == "ok")
        #expect((before["stuck"] as? [String: Any])?["count"] as? Int == 0)
        clock.advance(milliseconds: 601_000)
        let after = Self.json(try server.route("GET", "/healthz"))
        #expect(after["status"] as? String == "degraded")
        let stuck = after["stuck"] as? [String: Any]
        #expect(stuck?["count"] as? Int == 1)
        #expect((stuck?["oldest_seconds"] as? Int).map { $0 >= 601 } == true)
        #expect(stuck?["warn_after_seconds"] as? Int == 600)
        let id = try #require(try server.outbox.history.latest(limit: 1).first?.id)
        let warning = "memo not delivered in time"
        for _ in 0..<3 { server.application.worker.wake() }
        #expect(server.waitUntil(timeout: 30) { server.logs.captured.contains(warning) })
        server.application.worker.wake()
        #expect(server.waitUntil(timeout: 30) { transport.messages.count >= 1 })
        let lines = server.logs.captured.split(separator: "\n").filter { $0.contains(warning) }
        #expect(lines.count == 1, "once per memo: \(lines.count)")
        #expect(lines.first?.contains(id) == true)
        #expect(!server.logs.captured.contains("stuck\n"), "never the memo's text")
    }

    @Test func onlyThisMachineIsToldWhereMemosGo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let local = Self.json(try server.route("GET", "/healthz"))
        #expect(local["destination"] as? String == "maildir:\(server.maildir)")
        let other = Self.json(try server.route("GET", "/healthz", from: "192.168.1.50"))
        #expect(other["destination"] == nil)
    }
}
