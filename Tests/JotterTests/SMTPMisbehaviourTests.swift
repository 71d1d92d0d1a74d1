import Foundation
import Testing
@testable import Jotter

/// What real mail servers do that a well-behaved one (aiosmtpd) is never made to, scripted on cue
/// (`Tests/Fixtures/scripted_smtp.py`): refuse this client in the greeting or EHLO, refuse the one
/// configured recipient, take a whole message and hang up, refuse a message as too big, close an idle
/// connection with `421`. None of it may fail memos one after another, nor copy one without end.
@Suite struct SMTPMisbehaviourTests {
    /// A scripted server and a Jotter delivering to it.
    struct Fixture {
        let directory = TemporaryDirectory()
        let smtp: FixtureProcess
        let server: TestServer

        init(_ control: [String: Any] = [:], noReplyRetryMilliseconds: Int64 = 60_000) throws {
            try FileManager.default.createDirectory(atPath: directory.file("smtp"), withIntermediateDirectories: true)
            smtp = try FixtureProcess(script: "scripted_smtp.py", arguments: [directory.file("smtp")],
                                      errorPath: directory.file("smtp.stderr"))
            do {
                let relay = "smtp://127.0.0.1:\(smtp.port)?tls=none&from=jotter@example.com&to=me@example.com"
                server = try TestServer(dataDirectory: directory.file("data"), relay: relay) { configuration in
                    configuration.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 1000)
                    configuration.delivery.refusedRetestMilliseconds = 300
                    configuration.delivery.noReplyRetryMilliseconds = noReplyRetryMilliseconds
                }
            } catch {
                smtp.stop()
                throw error
            }
            try script(control)
        }

        func stop() {
            server.stop()
            smtp.stop()
        }

        /// Rewrites the server's script (read at every step).
        func script(_ control: [String: Any]) throws {
            let temporary = directory.file("smtp/control.json.tmp")
            try JSONSerialization.data(withJSONObject: control).write(to: URL(fileURLWithPath: temporary))
            #expect(rename(temporary, directory.file("smtp/control.json")) == 0)
        }

        var events: [String] {
            ((try? String(contentsOfFile: directory.file("smtp/events.log"), encoding: .utf8)) ?? "")
                .split(separator: "\n").map(String.init)
        }

        /// The messages whose end of DATA the server received.
        var received: Int {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.file("smtp"))) ?? [])
                .filter { $0.hasSuffix(".eml") }.count
        }

        func health() throws -> [String: Any] {
            try #require(try server.route("GET", "/healthz").json as? [String: Any])
        }
    }

    /// A server that refuses this client before any memo (`554` greeting, a refused EHLO) or refuses the one
    /// recipient every memo goes to: one attempt for all memos, held with a hint, /healthz degraded; once
    /// it accepts again, every memo goes, once. Before, each memo failed `rejected`, for good.
    @Test(arguments: [
        ["greeting": "554 5.7.1 Service unavailable; client host [127.0.0.1] blocked using zen.spamhaus.org"],
        ["greeting": "521 5.3.2 scripted.test does not accept mail"],
        ["ehlo": "550 5.7.1 Access denied"],
        ["rcpt": "554 5.7.1 <me@example.com>: Relay access denied"],
    ])
    func aServerRefusingThisClientHoldsEveryMemo(refusal: [String: String]) throws {
        let fixture = try Fixture(refusal)
        defer { fixture.stop() }
        let server = fixture.server
        let ids = try (1...3).map { try DeliveryKit.send(server, body: "memo \($0)") }
        for id in ids {
            let entry = try DeliveryKit.wait(server, id, timeout: 30) { $0.status == "held" }
            #expect(entry.status == "held" && entry.lastError == "configuration", "\(refusal): \(entry)")
        }
        let health = try fixture.health()
        let relay = try #require(health["relay"] as? [String: Any])
        #expect(health["status"] as? String == "degraded" && relay["state"] as? String == "refused", "\(health)")
        #expect((relay["hint"] as? String)?.contains("refuses") == true, "\(relay)")
        #expect(!server.logs.captured.contains("spamhaus") && !server.logs.captured.contains("Relay access"))

        try fixture.script([:])
        for id in ids {
            #expect(try DeliveryKit.wait(server, id, timeout: 60) { $0.status == "sent" }.status == "sent", "\(refusal)")
        }
        #expect(fixture.received == 3, "each once: \(fixture.events)")
    }

    /// A server that takes the whole message and hangs up without a reply may have queued it: tried once
    /// more a minute later, not on the one-second ladder, and then failed `no_reply` (its owner looks in
    /// the inbox and presses Retry) — two copies at most, where there were five in 25 s.
    @Test func aMessageTakenWithoutAReplyIsCopiedTwiceAtMost() throws {
        let minute = try Fixture(["drop_after_data": true])
        defer { minute.stop() }
        let waited = try DeliveryKit.send(minute.server, body: "taken, never answered")
        let first = try DeliveryKit.wait(minute.server, waited, timeout: 30) { $0.lastError != nil }
        #expect(first.status == "retrying" && first.lastError == "no_reply", "\(first)")
        let next = try #require(first.nextAttemptAt.flatMap { Timestamp.milliseconds(rfc3339: $0) })
        #expect(next - Int64(Date().timeIntervalSince1970 * 1000) > 45_000,
                "a minute away, not a second (and above the ladder's 1 s cap): \(first)")
        #expect(minute.received == 1)

        // The same with the minute made a second: the one more try is taken without a reply too, and the
        // memo fails rather than be copied a third time.
        let fixture = try Fixture(["drop_after_data": true], noReplyRetryMilliseconds: 1000)
        defer { fixture.stop() }
        let server = fixture.server
        let id = try DeliveryKit.send(server, body: "taken, never answered")
        let second = try DeliveryKit.wait(server, id, timeout: 30) { $0.status == "failed" }
        #expect(second.status == "failed" && second.lastError == "no_reply" && second.attempts == 2, "\(second)")
        #expect(fixture.received == 2)
        // Pressed again, with the server well again: delivered.
        try fixture.script([:])
        #expect(try server.route("POST", "/history/\(id)/retry").status == 202)
        #expect(try DeliveryKit.wait(server, id, timeout: 30) { $0.status == "sent" }.status == "sent")
    }

    /// `552 5.3.4` (and `5.2.3`) at the end of DATA refuses the message as too big: failed `too_large` after
    /// one upload. A `552` without that code (or `5.2.2`) is a full mailbox, retried.
    @Test func aMessageTooBigFailsAtOnceAndAFullMailboxWaits() throws {
        let fixture = try Fixture(["eod": "552 5.3.4 Error: message file too big"])
        defer { fixture.stop() }
        let server = fixture.server
        let big = try DeliveryKit.send(server, body: "too big")
        let failed = try DeliveryKit.settle(server, big, timeout: 30)
        #expect(failed.status == "failed" && failed.lastError == "too_large" && failed.attempts == 1, "\(failed)")
        try fixture.script(["eod": "552-5.2.3 Message length exceeds\r\n552 5.2.3 administrative limit"])
        let limit = try DeliveryKit.send(server, body: "over the limit")
        let refused = try DeliveryKit.settle(server, limit, timeout: 30)
        #expect(refused.status == "failed" && refused.lastError == "too_large", "\(refused)")
        try fixture.script(["eod": "552 5.2.2 Mailbox full"])
        let full = try DeliveryKit.send(server, body: "to a full mailbox")
        let waiting = try DeliveryKit.wait(server, full, timeout: 30) { $0.lastError != nil }
        #expect(waiting.status == "retrying" && waiting.lastError == "mailbox_full", "\(waiting)")
        #expect(fixture.events.filter { $0 == "EOD 552" }.count >= 3)
    }

    /// A server that closes an idle connection with `421` (Postfix after its idle timeout): the next memo
    /// goes on a fresh connection at its first attempt, with no failure logged.
    @Test func anIdleConnectionClosedWith421CostsNoAttempt() throws {
        let fixture = try Fixture(["idle_421_after": 1.0])
        defer { fixture.stop() }
        let server = fixture.server
        let first = try DeliveryKit.send(server, body: "first")
        #expect(try DeliveryKit.wait(server, first, timeout: 30) { $0.status == "sent" }.status == "sent")
        #expect(server.waitUntil(timeout: 30) { fixture.events.contains("IDLE421") })
        let second = try DeliveryKit.send(server, body: "second")
        let sent = try DeliveryKit.wait(server, second, timeout: 30) { $0.status == "sent" }
        #expect(sent.status == "sent" && sent.attempts == 1 && sent.lastError == nil, "\(sent)")
        #expect(!server.logs.captured.contains("delivery failed"), "\(server.logs.captured)")
    }

    /// A server that names its largest message in EHLO (`SIZE`, as aiosmtpd and Postfix do) and answers a
    /// larger one with a bare `552` after the whole upload: such a memo is not sent at all and fails
    /// `too_large` at once, on a fresh connection and on a reused one (not greeted again); smaller memos go.
    @Test func aMemoLargerThanTheAdvertisedSizeIsNotSent() throws {
        let fixture = try Fixture(["size": 4000])
        defer { fixture.stop() }
        let server = fixture.server
        let large = String(repeating: "a long line of a long memo\n", count: 250)  // 7,000 bytes
        let first = try DeliveryKit.send(server, body: large)
        let refused = try DeliveryKit.settle(server, first, timeout: 30)
        #expect(refused.status == "failed" && refused.lastError == "too_large" && refused.attempts == 1, "\(refused)")
        let small = try DeliveryKit.send(server, body: "small")
        #expect(try DeliveryKit.wait(server, small, timeout: 30) { $0.status == "sent" }.status == "sent")
        let again = try DeliveryKit.send(server, body: large + "again")
        let refusedAgain = try DeliveryKit.settle(server, again, timeout: 30)
        #expect(refusedAgain.status == "failed" && refusedAgain.lastError == "too_large" && refusedAgain.attempts == 1,
                "\(refusedAgain)")
        #expect(fixture.received == 1, "only the small memo was uploaded")
        #expect(!fixture.events.contains("EOD 552"))
        // The server stops naming a limit: a new connection's greeting forgets the old one, and the memo goes.
        try fixture.script(["size": NSNull()])
        let unlimited = try DeliveryKit.send(server, body: large + "now taken")
        let sent = try DeliveryKit.wait(server, unlimited, timeout: 30) { $0.status != "queued" && $0.status != "sending" }
        #expect(sent.status == "sent" && sent.attempts == 1, "\(sent)")
    }

    @Test func sizeLimitsAreReadFromEHLOLines() {
        func limit(_ line: String) -> Int? {
            Array(line.utf8).withUnsafeBytes { EasyHandle.sizeLimit(inEHLOLine: $0) }
        }
        #expect(limit("250-SIZE 10240000\r\n") == 10_240_000)
        #expect(limit("250 SIZE 52428800\r\n") == 52_428_800)
        #expect(limit("250-size 1000\r\n") == 1_000)
        #expect(limit("250 SIZE\r\n") == 0, "no number: no fixed limit")
        #expect(limit("250-SIZEX 5\r\n") == nil)
        #expect(limit("250-SIZE ten\r\n") == nil)
        #expect(limit("250-8BITMIME\r\n") == nil)
        #expect(limit("550 SIZE 5\r\n") == nil)
        #expect(limit("Content-Length: 5\r\n") == nil)
    }

    @Test func enhancedStatusCodesAreReadFromReplyLines() {
        func status(_ line: String) -> String? {
            Array(line.utf8).withUnsafeBytes { EasyHandle.enhancedStatus(inReply: $0) }
        }
        #expect(status("552 5.3.4 Error: message file too big\r\n") == "5.3.4")
        #expect(status("552-5.2.3 Message length exceeds\r\n") == "5.2.3")
        #expect(status("250 2.0.0 Ok: queued as 1234\r\n") == "2.0.0")
        #expect(status("450 4.7.1 <x>: Recipient address rejected: Greylisted\r\n") == "4.7.1")
        #expect(status("552 Requested mail action aborted\r\n") == nil)
        #expect(status("552 4.3.4 class differs\r\n") == nil)
        #expect(status("552 5.3\r\n") == nil)
        #expect(status("Content-Type: text/plain\r\n") == nil)
    }

    /// A sendmail's exit status (`sysexits.h`): the MTA's trouble is retried, its configuration or login
    /// holds every memo, the message's refusal fails this one.
    @Test func sendmailExitStatusesMeanWhatSysexitsSays() {
        for status: Int32 in [75, 70, 71, 72, 73, 74, 76, 68] {
            let failure = SendmailTransport.exitFailure(status, recipientIsFixed: true)
            #expect(!failure.isPermanent, "\(status)")
        }
        for status: Int32 in [64, 78, 67] {
            let failure = SendmailTransport.exitFailure(status, recipientIsFixed: true)
            #expect(failure.refusesTheRelay && failure.kind == .configuration && failure.hint != nil, "\(status)")
        }
        #expect(SendmailTransport.exitFailure(77, recipientIsFixed: true).kind == .auth)
        #expect(SendmailTransport.exitFailure(77, recipientIsFixed: true).refusesTheRelay)
        #expect(SendmailTransport.exitFailure(67, recipientIsFixed: false).kind == .rejected, "a relay's own recipient")
        for status: Int32 in [65, 69, 1] {
            #expect(SendmailTransport.exitFailure(status, recipientIsFixed: true).kind == .rejected, "\(status)")
        }
    }
}
