import Foundation
import Testing
@testable import Jotter

/// Delivery through an HTTP mail API (`resend://`) to a scripted relay (`Tests/Fixtures/scripted_relay.py`)
/// that fails on cue and implements Resend's idempotency: whatever the relay does, every memo ends in
/// the right state in `/history`, nothing is lost, and the relay sends no email twice.
@Suite struct HTTPRelayTests {
    static let apiKey = "re_Zq7SecretApiKey_4f19"

    private static func jotter(_ directory: TemporaryDirectory, relay: String, slots: Int = 2,
                               base: Int64 = 50, cap: Int64 = 1000, probe: Int64 = 200,
                               transport: (any Transport)? = nil) throws -> TestServer {
        try TestServer(dataDirectory: directory.file("data"), transport: transport, relay: relay) { configuration in
            configuration.delivery.retryPolicy = RetryPolicy(baseMilliseconds: base, capMilliseconds: cap)
            configuration.delivery.offlineProbeMilliseconds = probe
            configuration.delivery.slots = slots
        }
    }

    private static func messageID(_ id: String) -> String { "<\(id)@example.com>" }

    /// One scripted situation and where it must end.
    struct Scenario: Sendable, CustomTestStringConvertible {
        let name: String
        let script: [ScriptedRelay.Step]
        var timeout = 2
        /// The final status in `/history`.
        let status: String
        /// `last_error` of a failed memo.
        var lastError: String?
        /// The failure kind a transient attempt logs before the memo is sent.
        var loggedKind: String?
        /// Requests the relay receives in all.
        let requests: Int
        /// Emails the relay sends.
        let emails: Int

        var testDescription: String { name }
    }

    static let scenarios: [Scenario] = [
        Scenario(name: "500 is retried, then sent", script: [.status(500)], status: "sent",
                 loggedKind: "server_error", requests: 2, emails: 1),
        Scenario(name: "500, 502, 503 are retried, then sent", script: [.status(500), .status(502), .status(503)],
                 status: "sent", loggedKind: "server_error", requests: 4, emails: 1),
        Scenario(name: "429 without Retry-After is retried, then sent", script: [.status(429)], status: "sent",
                 loggedKind: "rate_limited", requests: 2, emails: 1),
        Scenario(name: "a hang past the timeout is a timeout, then sent", script: [.hang(seconds: 3)], timeout: 1,
                 status: "sent", loggedKind: "timeout", requests: 2, emails: 1),
        Scenario(name: "a connection reset is retried, then sent", script: [.reset], status: "sent",
                 loggedKind: "network", requests: 2, emails: 1),
        Scenario(name: "accepted but the answer lost: the retry is recognised, one email",
                 script: [.acceptThenDrop], status: "sent", loggedKind: "network", requests: 2, emails: 1),
        Scenario(name: "409 concurrent_idempotent_requests is retried, then sent",
                 script: [.status(409, name: "concurrent_idempotent_requests")], status: "sent",
                 loggedKind: "conflict", requests: 2, emails: 1),
        Scenario(name: "409 invalid_idempotent_request fails as conflict",
                 script: [.status(409, name: "invalid_idempotent_request")], status: "failed", lastError: "conflict",
                 requests: 1, emails: 0),
        Scenario(name: "401 holds as auth", script: [.status(401, name: "missing_api_key")], status: "held",
                 lastError: "auth", requests: 1, emails: 0),
        Scenario(name: "403 holds as auth", script: [.status(403, name: "invalid_api_key")], status: "held",
                 lastError: "auth", requests: 1, emails: 0),
        // The configuration's fault (from=, to=, base=): every memo would fail alike, so they wait, held.
        Scenario(name: "422 holds as configuration", script: [.status(422, name: "validation_error")], status: "held",
                 lastError: "configuration", requests: 1, emails: 0),
        Scenario(name: "404 (a wrong base=) holds as configuration", script: [.status(404, name: "not_found")],
                 status: "held", lastError: "configuration", requests: 1, emails: 0),
        Scenario(name: "a redirect, not followed, holds as configuration", script: [.status(307)],
                 status: "held", lastError: "configuration", requests: 1, emails: 0),
        Scenario(name: "413 fails as too_large", script: [.status(413)], status: "failed", lastError: "too_large",
                 requests: 1, emails: 0),
        Scenario(name: "400 fails as rejected", script: [.status(400, name: "validation_error")], status: "failed",
                 lastError: "rejected", requests: 1, emails: 0),
    ]

    @Test(arguments: scenarios)
    func everyScriptedFailureEndsInTheRightStateWithNothingLostOrSentTwice(scenario: Scenario) throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(script: scenario.script, directory: directory.file("relay"))
        defer { relay.stop() }
        let server = try Self.jotter(directory, relay: relay.relayURL(key: Self.apiKey, timeout: scenario.timeout))
        defer { server.stop() }

        let subject = "scenario memo"
        let body = "Ünïcödé body for the relay — 本文"
        let id = try DeliveryKit.send(server, subject: subject, body: body)
        let entry = try DeliveryKit.settle(server, id, timeout: 15)
        #expect(entry.status == scenario.status, "\(entry)")
        if scenario.status == "failed" || scenario.status == "held" {
            #expect(entry.lastError == scenario.lastError)
            #expect(entry.nextAttemptAt == nil, "nothing scheduled")
            #expect(try server.finishDeliveries(), "nothing left to deliver")
            #expect(try DeliveryKit.entry(server, id).attempts == 1, "a permanent failure is not retried")
        } else {
            #expect(entry.lastError == nil)
            #expect(entry.attempts == scenario.requests)
        }
        if let kind = scenario.loggedKind {
            #expect(server.logs.captured.contains("error.kind=\(kind)"))
        }

        let requests = relay.requests
        #expect(requests.count == scenario.requests, "\(requests.map(\.action))")
        #expect(relay.emails.count == scenario.emails, "emails actually sent")
        for request in requests {
            #expect(request.method == "POST" && request.path == "/emails")
            #expect(request.idempotencyKey == id)
            #expect(request.body == requests[0].body, "every retry sends byte-identical JSON")
            #expect(request.headers["authorization"] == "Bearer \(Self.apiKey)")
            #expect(request.headers["content-type"] == "application/json")
        }
        if let first = requests.first?.json {
            #expect(first["subject"] as? String == subject)
            #expect(first["text"] as? String == body)
            #expect(first["from"] as? String == "Jotter <jotter@example.com>")
            #expect(first["to"] as? [String] == ["me@example.com"])
            #expect((first["headers"] as? [String: String])?["Message-ID"] == Self.messageID(id))
        }
        for email in relay.emails {
            #expect(email.messageID == Self.messageID(id))
        }
        let logs = server.logs.captured
        #expect(!logs.contains(Self.apiKey), "the API key reached the log")
        #expect(!logs.contains("scripted failure"), "the relay's error text reached the log")
        #expect(!entry.raw.contains("scripted failure"), "the relay's error text reached /history")
        #expect(!entry.raw.contains(Self.apiKey))
    }

    @Test func everyMemoReachesTheAPIExactlyAsWritten() throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(directory: directory.file("relay"))
        defer { relay.stop() }
        let server = try Self.jotter(directory, relay: relay.relayURL())
        defer { server.stop() }

        let memos = DeliveryKit.hardMemos + [
            ("JSON \"quotes\" \\ and </script>", "tab\there \"quoted\" back\\slash\nline\u{2028}separator \u{7F} \u{1} end"),
        ]
        let ids = try memos.map { try DeliveryKit.send(server, subject: $0.subject, body: $0.body) }
        for id in ids {
            #expect(try DeliveryKit.settle(server, id).status == "sent")
        }
        let emails = relay.emails
        #expect(emails.count == memos.count)
        for (memo, id) in zip(memos, ids) {
            let email = try #require(emails.first { $0.key == id })
            #expect(email.json?["subject"] as? String == memo.subject)
            #expect(email.json?["text"] as? String == memo.body, "text of \(memo.subject)")
            #expect(email.messageID == Self.messageID(id))
        }
    }

    @Test func aFailedMemoIsSentAgainWhenTheRelayConfigurationChanges() throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(script: [.status(401, name: "invalid_api_key")], directory: directory.file("relay"))
        defer { relay.stop() }
        let first = try Self.jotter(directory, relay: relay.relayURL(key: "re_revoked_key"))
        let id = try DeliveryKit.send(first, body: "waits for a good key")
        #expect(try DeliveryKit.settle(first, id).lastError == "auth")
        first.stop()

        // The same configuration again: the memo stays held (kept; the relay is tested again only on
        // its slow schedule or a Retry, not at every start).
        let same = try Self.jotter(directory, relay: relay.relayURL(key: "re_revoked_key"))
        // start() releases (or not) before it returns: with nothing due, the worker has nothing to claim.
        #expect(try same.outbox.nextDueAt() == nil, "nothing re-queued")
        #expect(try DeliveryKit.entry(same, id).status == "held")
        same.stop()
        #expect(relay.requests.count == 1)

        let fixed = try Self.jotter(directory, relay: relay.relayURL(key: "re_fixed_key"))
        defer { fixed.stop() }
        let entry = try DeliveryKit.settle(fixed, id)
        #expect(entry.status == "sent", "\(entry)")
        let requests = relay.requests
        #expect(requests.count == 2)
        #expect(requests.last?.headers["authorization"] == "Bearer re_fixed_key")
        #expect(relay.emails.count == 1)
    }

    /// `Retry-After` in either form; a date no calendar holds, or one past any sane horizon, is not a crash
    /// (the year 300,000,000 ended the process, again at every restart, as the memo was claimed again).
    @Test func retryAfterReadsBothFormsAndNeverOverflows() {
        let now: Int64 = 784_111_777_000  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(RetryAfter.milliseconds("120", now: now) == 120_000)
        #expect(RetryAfter.milliseconds("Sun, 06 Nov 1994 08:51:37 GMT", now: now) == 120_000)
        #expect(RetryAfter.milliseconds("Sun, 06 Nov 1994 08:00:00 GMT", now: now) == 0, "in the past")
        #expect(RetryAfter.milliseconds("99999999999999999999", now: now) == nil, "not an Int64: not a number here")
        #expect(RetryAfter.milliseconds("9223372036854775807", now: now) == RetryAfter.longestMilliseconds)
        #expect(RetryAfter.milliseconds("Fri, 31 Dec 9999 23:59:59 GMT", now: now) == RetryAfter.longestMilliseconds)
        for hostile in ["Sun, 06 Nov 300000000 08:49:37 GMT", "Sun, 06 Nov -2147483648 08:49:37 GMT",
                        "Sun, 06 Nov 9223372036854775807 08:49:37 GMT", "Sun, 99 Nov 1994 08:49:37 GMT",
                        "Sun, 06 Nov 1994 99:49:37 GMT", "Sun, 06 Nov 1994 08:49:99 GMT", "-5"] {
            #expect(RetryAfter.milliseconds(hostile, now: now) == nil, "\(hostile)")
        }
        #expect(RetryAfter.milliseconds("Sun, 06 Nov 1994 08:51:37 GMT", now: .min) == RetryAfter.longestMilliseconds)
        #expect(RetryAfter.milliseconds("Sun, 06 Nov 1994 08:51:37 GMT", now: .max) == 0)
    }

    /// On a Jotter relay each message has its own recipient: a `422` for one address the API will not take
    /// fails that message alone (a device asking a code for such an address held every code mail of the
    /// relay, again at every retest). A 422 naming `from` is still the configuration's.
    @Test func aValidationErrorForAMessagesOwnRecipientFailsThatMessageOnly() {
        let recipient = Array(#"{"name":"validation_error","message":"Invalid `to` field."}"#.utf8)
        let own = ResendTransport.failure(status: 422, body: recipient, retryAfter: nil, recipientIsFixed: false)
        #expect(own.kind == .rejected && own.isPermanent && !own.refusesTheRelay)
        let sender = Array(#"{"name":"validation_error","message":"Invalid `from` field."}"#.utf8)
        let configured = ResendTransport.failure(status: 422, body: sender, retryAfter: nil, recipientIsFixed: false)
        #expect(configured.kind == .configuration && configured.refusesTheRelay)
        let fixed = ResendTransport.failure(status: 422, body: recipient, retryAfter: nil)
        #expect(fixed.kind == .configuration, "the configuration's to= is the configuration's")
    }

    /// A `422` (a from= the key may not send from) is the configuration's: every memo waits, held, with one
    /// request made; /healthz says the relay refuses and what to check; a fixed configuration sends them all.
    @Test func aRequestTheAPIWillNotProcessHoldsEveryMemoAndSaysWhatToCheck() throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(script: [.status(422, name: "validation_error")], directory: directory.file("relay"))
        defer { relay.stop() }
        let first = try Self.jotter(directory, relay: relay.relayURL(key: Self.apiKey))
        let ids = try (0..<3).map { try DeliveryKit.send(first, body: "memo \($0) while from= is wrong") }
        for id in ids { #expect(try DeliveryKit.settle(first, id).lastError == "configuration") }
        #expect(relay.requests.count == 1, "one refusal, not one per memo")
        let health = try #require(try first.route("GET", "/healthz").json as? [String: Any])
        let state = health["relay"] as? [String: Any]
        #expect(health["status"] as? String == "degraded" && state?["state"] as? String == "refused", "\(health)")
        #expect((state?["hint"] as? String)?.contains("check from=") == true, "\(health)")
        first.stop()

        let fixed = try Self.jotter(directory, relay: relay.relayURL(key: "re_other_key"))
        defer { fixed.stop() }
        for id in ids { #expect(try DeliveryKit.settle(fixed, id).status == "sent") }
        #expect(relay.emails.count == 3)
    }

    // MARK: HTTPS

    @Test func overHTTPSTheRelaysCertificateIsVerifiedBeforeTheKeyIsSent() throws {
        let directory = TemporaryDirectory()
        let certificates = try TestCertificates.make(in: directory.file("certs"))
        let stranger = try TestCertificates.make(in: directory.file("other-ca"))
        let relay = try ScriptedRelay(directory: directory.file("relay"), certificates: certificates)
        defer { relay.stop() }

        let untrusting = try Self.jotter(directory, relay: relay.relayURL(key: Self.apiKey, caFile: stranger.caFile))
        let refused = try DeliveryKit.send(untrusting, body: "only to a verified API")
        let entry = try DeliveryKit.settle(untrusting, refused)
        #expect(entry.status == "held" && entry.lastError == "tls", "\(entry)")
        untrusting.stop()
        #expect(relay.requests.isEmpty, "no request, so no key, reached an unverified server")

        // The right CA is a configuration change: the failed memo goes again, over verified TLS.
        let trusting = try Self.jotter(directory, relay: relay.relayURL(key: Self.apiKey))
        defer { trusting.stop() }
        let id = try DeliveryKit.send(trusting, body: "over https")
        #expect(try DeliveryKit.settle(trusting, id).status == "sent")
        #expect(try DeliveryKit.settle(trusting, refused).status == "sent")
        #expect(relay.emails.count == 2)
        #expect(relay.requests.allSatisfy { $0.headers["authorization"] == "Bearer \(Self.apiKey)" })
    }

    // MARK: Retry-After

    struct RetryAfterCase: Sendable, CustomTestStringConvertible {
        let status: Int
        /// `nil`: an HTTP-date two seconds ahead (computed when the test runs).
        let seconds: String?
        let kind: String

        var testDescription: String { "\(status) + Retry-After: \(seconds ?? "HTTP-date")" }
    }

    @Test(arguments: [
        RetryAfterCase(status: 503, seconds: "1", kind: "server_error"),
        RetryAfterCase(status: 429, seconds: "1", kind: "rate_limited"),
        RetryAfterCase(status: 429, seconds: nil, kind: "rate_limited"),
    ])
    func retryAfterIsHonoured(retryAfterCase: RetryAfterCase) throws {
        let directory = TemporaryDirectory()
        let dateTarget = Int64(Date().timeIntervalSince1970) + 2
        let header = retryAfterCase.seconds ?? ScriptedRelay.httpDate(epochSeconds: dateTarget)
        let relay = try ScriptedRelay(script: [.status(retryAfterCase.status, retryAfter: header)],
                                      directory: directory.file("relay"))
        defer { relay.stop() }
        // The backoff alone would retry after 50–63 ms; the cap leaves room for Retry-After.
        let server = try Self.jotter(directory, relay: relay.relayURL(), cap: 5000)
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "wait as told")
        let waiting = try DeliveryKit.wait(server, id) { $0.status == "retrying" || $0.status == "sent" }
        #expect(waiting.status == "retrying", "\(waiting)")
        #expect(waiting.lastError == retryAfterCase.kind)
        let firstRequest = try #require(relay.requests.first)
        let firstAt = Int64((firstRequest.time * 1000).rounded())
        let nextAttempt = try #require(waiting.nextAttemptMilliseconds)
        let expected = retryAfterCase.seconds == nil ? dateTarget * 1000 : firstAt + 1000
        #expect(nextAttempt >= expected - 20, "next_attempt_at \(nextAttempt - expected) ms before Retry-After")
        #expect(nextAttempt <= expected + 1000, "next_attempt_at \(nextAttempt - expected) ms after Retry-After")

        let sent = try DeliveryKit.settle(server, id, timeout: 10)
        #expect(sent.status == "sent", "\(sent)")
        let requests = relay.requests
        try #require(requests.count == 2, "\(requests.map(\.action))")
        let gap = requests[1].time - requests[0].time
        let expectedGap = Double(expected - firstAt) / 1000
        #expect(gap >= expectedGap - 0.05, "retried \(gap) s after the first attempt, Retry-After said \(expectedGap)")
        #expect(gap <= expectedGap + 1.5, "retried \(gap) s after the first attempt, Retry-After said \(expectedGap)")
        #expect(relay.emails.count == 1)
    }

    // MARK: A lost response

    @Test func aRetryAfterALostResponseCarriesTheSameKeyAndBytesSoTheRelaySendsOneEmail() throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(script: [.acceptThenDrop], directory: directory.file("relay"))
        defer { relay.stop() }
        let server = try Self.jotter(directory, relay: relay.relayURL())
        defer { server.stop() }

        let id = try DeliveryKit.send(server, subject: "exactly once", body: "even when the answer is lost\n.\nend")
        #expect(try DeliveryKit.settle(server, id).status == "sent")
        let requests = relay.requests
        try #require(requests.count == 2)
        #expect(requests.map(\.action) == ["accept_then_drop", "replay"])
        #expect(requests[0].idempotencyKey == id && requests[1].idempotencyKey == id)
        #expect(requests[0].body == requests[1].body)
        let emails = relay.emails
        try #require(emails.count == 1, "one email, not two")
        #expect(emails[0].key == id)
        #expect(emails[0].messageID == Self.messageID(id))
        #expect(emails[0].json?["text"] as? String == "even when the answer is lost\n.\nend")
    }

    @Test func aTimeoutWhileTheRelayIsStillWorkingMeetsA409ConcurrentThenTheStoredAnswer() throws {
        let directory = TemporaryDirectory()
        // The relay takes 1.5 s to send; Jotter gives up after 1 s and retries while it still works.
        let relay = try ScriptedRelay(script: [.acceptSlowly(milliseconds: 1500)], directory: directory.file("relay"))
        defer { relay.stop() }
        let server = try Self.jotter(directory, relay: relay.relayURL(timeout: 1))
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "slow but sure")
        let entry = try DeliveryKit.settle(server, id, timeout: 15)
        #expect(entry.status == "sent", "\(entry)")
        let actions = relay.requests.map(\.action)
        #expect(actions.first == "accept")
        #expect(actions.last == "replay", "\(actions)")
        #expect(actions.dropFirst().dropLast().allSatisfy { $0 == "concurrent" }, "\(actions)")
        #expect(actions.contains("concurrent"), "\(actions)")
        #expect(relay.emails.count == 1, "one email however many retries")
        let logs = server.logs.captured
        #expect(logs.contains("error.kind=timeout") && logs.contains("error.kind=conflict"))
    }

    // MARK: A reused connection

    /// The API closed the kept-alive connection while it sat idle, and the next memo's request crossed
    /// the close: it reached no one and nothing came back. libcurl sends such a request again by itself, on
    /// a fresh connection, rewinding the body it had already read: with no way to rewind it, it gave up
    /// ("necessary data rewind wasn't possible") and the memo waited for a second attempt.
    @Test(arguments: [false, true])
    func aMemoWhoseKeptAliveConnectionWasClosedIsSentAgainWholeOnAFreshOneAtTheFirstAttempt(reset: Bool) throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(script: [.acceptThenCloseWhenIdle(reset: reset)],
                                      directory: directory.file("relay"))
        defer { relay.stop() }
        // One slot, one easy handle: the second memo goes out on the first one's connection.
        let server = try Self.jotter(directory, relay: relay.relayURL(timeout: 10), slots: 1)
        defer { server.stop() }

        let first = try DeliveryKit.send(server, body: "kept alive")
        #expect(try DeliveryKit.settle(server, first, timeout: 30).status == "sent")
        // Larger than one read: every byte must be sent again, from the start.
        let text = "sent again whole: Ünïcödé — 本文\n.\nend " + String(repeating: "0123456789", count: 20_000)
        let second = try DeliveryKit.send(server, subject: "on a closed connection", body: text)
        let entry = try DeliveryKit.settle(server, second, timeout: 30)
        #expect(entry.status == "sent", "\(entry)")
        #expect(entry.attempts == 1, "sent at the first attempt: \(entry)")
        #expect(!server.logs.captured.contains("error.kind="), "no attempt failed")

        let requests = relay.requests
        try #require(requests.count == 3, "\(requests.map(\.action))")
        #expect(requests.map(\.action) == ["accept", "closed_idle", "accept"])
        #expect(requests[1].connection == requests[0].connection,
                "the second memo went out on the first one's kept-alive connection")
        #expect(requests[2].connection != requests[1].connection, "and again on a fresh one")
        #expect(requests[1].idempotencyKey == second && requests[2].idempotencyKey == second)
        #expect(requests[2].body == requests[1].body, "the body sent again is the body sent first, byte for byte")
        #expect(requests[2].body.count == Int(requests[2].headers["content-length"] ?? ""))
        let emails = relay.emails
        try #require(emails.count == 2)
        #expect(emails[1].key == second)
        #expect(emails[1].body == requests[1].body)
        #expect(emails[1].json?["text"] as? String == text)
        #expect(emails[1].json?["subject"] as? String == "on a closed connection")
    }

    // MARK: Offline

    @Test func memosTakenWhileTheRelayIsDownAreFlushedWhenItReturnsWithoutWaitingOutBackoff() throws {
        let directory = TemporaryDirectory()
        let first = try ScriptedRelay(directory: directory.file("relay-before"))
        let port = first.port
        first.stop()  // now the port refuses connections

        // A 20 s backoff: a memo that walked the ladder could not arrive within this test's bounds.
        let relayURL = "resend://\(Self.apiKey)?to=me@example.com&from=jotter@example.com"
            + "&base=http://127.0.0.1:\(port)&timeout=2"
        let probes = ProbeCounter(try RelayURL(relayURL).transport)
        let server = try Self.jotter(directory, relay: relayURL, base: 20_000, cap: 60_000, probe: 200,
                                     transport: probes)
        defer { server.stop() }

        var ids: [String] = []
        for number in 1...5 {
            ids.append(try DeliveryKit.send(server, body: "offline memo \(number)"))  // 204: on disk
        }
        #expect(server.waitUntil { server.logs.captured.contains("relay unreachable; probing") })
        #expect(server.waitUntil { probes.failedProbes >= 3 }, "several failed probes")
        for id in ids {
            let entry = try DeliveryKit.entry(server, id)
            #expect(["queued", "retrying"].contains(entry.status), "\(entry)")
            if entry.status == "retrying" {
                #expect(entry.lastError == "unreachable")
            }
        }

        let relay = try ScriptedRelay(directory: directory.file("relay-after"), port: port)
        defer { relay.stop() }
        let back = Date()
        let delivered = try server.waitUntil(timeout: 15) {
            try ids.allSatisfy { try DeliveryKit.entry(server, $0).status == "sent" }
        }
        let elapsed = Date().timeIntervalSince(back)
        #expect(delivered)
        // Well under the 20 s backoff, with room for a loaded machine.
        #expect(elapsed < 10, "flushed \(elapsed) s after the relay returned (probe every 0.2 s, backoff 20 s)")
        #expect(server.logs.captured.contains("relay reachable again; flushing"))
        let keys = relay.requests.compactMap(\.idempotencyKey)
        #expect(keys.count == ids.count, "no memo sent twice: \(keys.count) requests")
        #expect(Set(keys) == Set(ids))
        #expect(relay.emails.count == ids.count)
    }

    // MARK: Slots

    @Test func fourSlotsNeverDeliverTheSameMemoTwice() throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(directory: directory.file("relay"), delayMilliseconds: 50)
        defer { relay.stop() }
        let server = try Self.jotter(directory, relay: relay.relayURL(), slots: 4)
        defer { server.stop() }

        let ids = try (1...50).map { try DeliveryKit.send(server, body: "memo \($0)") }
        #expect(try server.waitUntil(timeout: 30) { try server.outbox.history.counts()[.sent] == ids.count })
        for id in ids {
            #expect(try DeliveryKit.entry(server, id).status == "sent")
        }
        let requests = relay.requests
        #expect(requests.count == ids.count, "one request per memo, none repeated")
        #expect(Set(requests.compactMap(\.idempotencyKey)) == Set(ids))
        let messageIDs = relay.emails.compactMap(\.messageID)
        #expect(messageIDs.count == ids.count)
        #expect(Set(messageIDs) == Set(ids.map(Self.messageID)), "every memo exactly once")
        let busiest = requests.map(\.concurrent).max() ?? 0
        #expect(busiest <= 4, "at most four deliveries at once, saw \(busiest)")
        #expect(busiest >= 2, "the slots deliver in parallel, saw \(busiest)")
    }

    @Test func everySlotSendsAtOnceWhenTheRelayIsSlow() throws {
        let directory = TemporaryDirectory()
        // Each answer takes 3 s (within a 20 s timeout): ample time for the eight posts to land, even on a
        // busy machine.
        let relay = try ScriptedRelay(directory: directory.file("relay"), delayMilliseconds: 3000)
        defer { relay.stop() }
        let server = try Self.jotter(directory, relay: relay.relayURL(timeout: 20), slots: 8)
        defer { server.stop() }
        // Until the relay has taken a memo, one slot; then all eight.
        let first = try DeliveryKit.send(server, body: "the first, alone")
        #expect(try server.waitUntil(timeout: 30) { try DeliveryKit.entry(server, first).status == "sent" })
        let ids = try (1...8).map { try DeliveryKit.send(server, body: "memo \($0)") }
        #expect(try server.waitUntil(timeout: 30) { try server.outbox.history.counts()[.sent] == ids.count + 1 })
        // Eight slots are eight requests at once (on Dispatch's threads, a 2-CPU machine had sent two or
        // three at a time).
        let busiest = relay.requests.map(\.concurrent).max() ?? 0
        #expect(busiest == 8, "eight slots, \(busiest) requests at once")
        #expect(relay.requests.count == ids.count + 1, "one request per memo")
    }

    // MARK: The key

    @Test func theAPIKeyTravelsOnlyAsABearerToken() throws {
        let directory = TemporaryDirectory()
        let relay = try ScriptedRelay(script: [.status(500), .status(401)], directory: directory.file("relay"))
        defer { relay.stop() }
        let server = try Self.jotter(directory, relay: relay.relayURL(key: Self.apiKey))
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "key handling")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held" && entry.lastError == "auth", "\(entry)")
        let requests = relay.requests
        #expect(requests.count == 2)
        for request in requests {
            #expect(request.headers["authorization"] == "Bearer \(Self.apiKey)")
            #expect(!String(decoding: request.body, as: UTF8.self).contains(Self.apiKey))
            #expect(!request.path.contains(Self.apiKey))
        }
        let texts = [server.logs.captured, try server.route("GET", "/history").text,
                     try server.route("GET", "/history/" + id).text, try server.route("GET", "/healthz").text]
        for text in texts {
            #expect(!text.contains(Self.apiKey) && !text.contains("SecretApiKey"))
        }
        #expect(!DeliveryKit.directory(server.dataDirectory, contains: "SecretApiKey"), "the key is not stored")
    }
}
