import Foundation
import Testing
@testable import Jotter

/// The undo window: a memo held for N seconds can be taken back (`DELETE /history/{id}`) and then is
/// never delivered and keeps no text; after the window it is `409`, and delivery starts exactly then.
@Suite struct UndoTests {
    static func send(_ server: TestServer, _ text: String, undo: Int? = nil) throws -> String {
        var headers = [("Content-Type", "application/json")]
        if let undo { headers.append(("Undo-Seconds", String(undo))) }
        let response = try server.route("POST", "/send", headers: headers,
                                        body: Array("{\"subject\":\"s \(text)\",\"body\":\"\(text)\"}".utf8))
        #expect(response.status == 204)
        return try #require(response.header("X-Message-Id"))
    }

    @Test func theAnswerSaysTheMemosWindow() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path, transport: ControlledTransport(.deliver)) {
            $0.undoMilliseconds = 10_000
        }
        defer { server.stop() }
        let text = [("Content-Type", "text/plain")]
        #expect(try server.route("POST", "/send", headers: text, body: Array("a".utf8)).header("Undo-Seconds") == "10")
        #expect(try server.route("POST", "/send", headers: text + [("Undo-Seconds", "30")], body: Array("b".utf8))
                .header("Undo-Seconds") == "30", "the request's own window")
        #expect(try server.route("POST", "/send", headers: text + [("Undo-Seconds", "0")], body: Array("c".utf8))
                .header("Undo-Seconds") == nil, "no window, no header")
    }

    /// A replay (the same Idempotency-Key: a page or script whose first answer was lost) is answered with
    /// what is left of the window the memo got when it was stored, not with the window the replay asks for.
    @Test func aReplayIsAnsweredWithTheStoredMemosWindow() throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock(milliseconds: SystemClock().nowMilliseconds())
        let server = try TestServer(dataDirectory: directory.path, transport: ControlledTransport(.deliver), clock: clock)
        defer { server.stop() }
        func post(_ key: String, undo: Int?) throws -> RawHTTP.Response {
            var headers = [("Content-Type", "text/plain"), ("Idempotency-Key", key)]
            if let undo { headers.append(("Undo-Seconds", String(undo))) }
            return try server.route("POST", "/send", headers: headers, body: Array("memo \(key)".utf8))
        }
        let first = try post("with-window", undo: 60)
        #expect(first.header("Undo-Seconds") == "60")
        clock.advance(milliseconds: 20_500)
        let replay = try post("with-window", undo: nil)
        #expect(replay.status == 204 && replay.header("X-Message-Id") == first.header("X-Message-Id"))
        #expect(replay.header("Undo-Seconds") == "39", "what is left of its own window, rounded down")
        #expect(try post("with-window", undo: 5).header("Undo-Seconds") == "39", "not the replay's")

        let none = try post("no-window", undo: nil)
        #expect(none.header("Undo-Seconds") == nil)
        #expect(try post("no-window", undo: 30).header("Undo-Seconds") == nil, "it never had one: it is on its way")

        let id = try #require(first.header("X-Message-Id"))
        #expect(try server.route("DELETE", "/history/\(id)").status == 200)
        #expect(try post("with-window", undo: 60).header("Undo-Seconds") == nil, "taken back: nothing left to undo")
    }

    @Test func aMemoTakenBackInsideItsWindowIsNeverDeliveredAndKeepsNoText() throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler(clock: ManualClock(milliseconds: SystemClock().nowMilliseconds()))
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport, clock: scheduler.clock,
                                    scheduler: scheduler) { $0.undoMilliseconds = 10_000 }
        defer { server.stop() }
        let id = try Self.send(server, "oops, not that")
        let accepted = try #require(try server.outbox.history.record(id: id))
        // Delivery waits for the window, and not a moment longer: the worker's timer is set for its end.
        #expect(accepted.nextAttemptAt == accepted.createdAt + 10_000)
        #expect(TestServer.waitUntil(timeout: 20) { scheduler.nextDeadline == accepted.createdAt + 10_000 })
        scheduler.advance(milliseconds: 9_000)
        let undone = try server.route("DELETE", "/history/\(id)")
        #expect(undone.status == 200)
        #expect((undone.json as? [String: Any])?["status"] as? String == "cancelled")
        #expect((undone.json as? [String: Any])?["subject"] is NSNull)
        scheduler.advance(milliseconds: 120_000)
        server.application.worker.wake()
        let second = try Self.send(server, "this one goes")  // proves the worker is alive
        let due = try #require(try server.outbox.history.record(id: second)?.nextAttemptAt)
        // The worker arms its timer for the second memo's window a moment after the 204: wait for it.
        #expect(TestServer.waitUntil(timeout: 20) { scheduler.nextDeadline == due })
        scheduler.advance(milliseconds: 10_000)
        #expect(transport.waitUntilReceived(count: 1, timeout: 30))
        #expect(transport.messages.map(\.id) == [second], "the taken-back memo was never handed to the relay")
        #expect(try server.route("DELETE", "/history/\(id)").status == 200, "twice (the first answer lost): still taken back")
        let database = try Database(path: server.dataDirectory + "/jotter.db")
        defer { database.close() }
        let payload = try database.statement("SELECT sealed_payload IS NULL AND sealed_subject IS NULL FROM messages WHERE id = ?")
            .firstRow([.text(id)]) { $0.int64(0) }
        #expect(payload == 1, "no sealed text left")
    }

    @Test func afterTheWindowItIsTooLateAndTheMemoGoesOut() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let plain = try Self.send(server, "no window")
        let tooLate = try server.route("DELETE", "/history/\(plain)")
        #expect(tooLate.status == 409)
        #expect(tooLate.errorCode == "undo_window_closed")
        let windowed = try Self.send(server, "short window", undo: 1)
        #expect(transport.waitUntilReceived(count: 2, timeout: 30), "delivered once the second has passed")
        #expect(try server.route("DELETE", "/history/\(windowed)").status == 409)
        #expect(try server.route("DELETE", "/history/00000000-0000-4000-8000-000000000000").status == 404)
        #expect(try server.route("POST", "/send", headers: [("Content-Type", "text/plain"), ("Undo-Seconds", "601")],
                                 body: Array("x".utf8)).status == 400)
        let health = try server.route("GET", "/healthz").json as? [String: Any]
        #expect(health?["undo_seconds"] as? Int == 0)
    }
}
