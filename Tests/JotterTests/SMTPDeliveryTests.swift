import Foundation
import Testing
@testable import Jotter

/// Real SMTP delivery: Jotter (started whole, in-process) delivers through libcurl to a real SMTP
/// server (Debian's aiosmtpd, `Tests/Fixtures/smtp_server.py`) in plain, STARTTLS and implicit-TLS
/// modes, with certificates made at test time; Python's `email` package reads what arrived.
@Suite struct SMTPDeliveryTests {
    /// A test's SMTP server, certificates and Jotter, all in one temporary directory.
    private struct Fixture {
        let directory = TemporaryDirectory()
        let certificates: TestCertificates?
        let smtp: SMTPServer

        init(mode: SMTPServer.Mode, auth: (user: String, password: String)? = nil,
             delayMilliseconds: Int = 0, certificateNames: String? = nil, requireFQDNHelo: Bool = false) throws {
            certificates = mode == .plain ? nil
                : try TestCertificates.make(in: directory.file("certs"), names: certificateNames)
            smtp = try SMTPServer(mode: mode, directory: directory.file("smtp"), certificates: certificates,
                                  auth: auth, delayMilliseconds: delayMilliseconds, requireFQDNHelo: requireFQDNHelo)
        }

        /// The relay URL for this server's mode: `tls=none` for plain, the test CA for TLS.
        func relay(userInfo: String? = nil, caFile: String? = nil, requireTLS: Bool = false) -> String {
            let user = userInfo.map { $0 + "@" } ?? ""
            let envelope = "from=J%C3%B6tter%20%3Cjotter@example.com%3E&to=me@example.com"
            switch smtp.mode {
            case .plain:
                let tls = requireTLS ? "" : "tls=none&"
                return "smtp://\(user)127.0.0.1:\(smtp.port)?\(tls)\(envelope)"
            case .starttls:
                return "smtp://\(user)127.0.0.1:\(smtp.port)?ca=\(caFile ?? certificates!.caFile)&\(envelope)"
            case .tls:
                return "smtps://\(user)127.0.0.1:\(smtp.port)?ca=\(caFile ?? certificates!.caFile)&\(envelope)"
            }
        }

        func jotter(relay: String, slots: Int = 2) throws -> TestServer {
            try TestServer(dataDirectory: directory.file("data"), relay: relay) { configuration in
                configuration.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 1000)
                configuration.delivery.offlineProbeMilliseconds = 200
                configuration.delivery.slots = slots
            }
        }

        func stop() {
            smtp.stop()
        }
    }

    private static func messageID(_ id: String) -> String { "<\(id)@example.com>" }

    // MARK: Every mode delivers every memo exactly once, exactly

    @Test(arguments: SMTPServer.Mode.allCases)
    func eachMemoArrivesOnceAndReadsBackExactly(mode: SMTPServer.Mode) throws {
        let fixture = try Fixture(mode: mode)
        defer { fixture.stop() }
        let server = try fixture.jotter(relay: fixture.relay(userInfo: mode == .plain ? "user" : nil))
        defer { server.stop() }

        let memos = DeliveryKit.hardMemos
        var ids: [String] = []
        for memo in memos {
            ids.append(try DeliveryKit.send(server, subject: memo.subject, body: memo.body))
        }
        for id in ids {
            let entry = try DeliveryKit.settle(server, id, timeout: 20)
            #expect(entry.status == "sent", "\(entry) — \(fixture.smtp.standardError)")
        }

        let received = fixture.smtp.received
        #expect(received.count == memos.count, "each memo exactly once")
        let readBack = try DeliveryKit.parseAll(received.map(\.path))
        for (memo, id) in zip(memos, ids) {
            let copies = zip(received, readBack).filter { $0.1.messageID == Self.messageID(id) }
            try #require(copies.count == 1, "memo \(memo.subject): \(copies.count) copies")
            let (message, parsed) = copies[0]
            #expect(parsed.subject == memo.subject)
            #expect(DeliveryKit.sameText(parsed.body, memo.body), "body of \(memo.subject) differs")
            #expect(parsed.defects.isEmpty, "\(parsed.defects)")
            #expect(parsed.from == "Jötter <jotter@example.com>")
            #expect(parsed.to == "me@example.com")
            #expect(message.mailFrom == "jotter@example.com")
            #expect(message.recipients == ["me@example.com"])
            #expect(message.tls == (mode != .plain), "mode \(mode)")
        }
        // The dot lines went through SMTP as they are (dot-stuffed by libcurl, unstuffed by the server).
        let dots = try #require(received.first { String(decoding: $0.bytes, as: UTF8.self).contains("end of dots") })
        #expect(String(decoding: dots.bytes, as: UTF8.self).contains("\r\n.\r\n..\r\n.hidden line\r\n...\r\n"))
        let mails = fixture.smtp.events.filter { $0.hasPrefix("MAIL") }
        #expect(mails.count == memos.count)
        if mode != .plain {
            #expect(mails.allSatisfy { $0 == "MAIL tls=1" }, "nothing in clear: \(mails)")
        }
        let logs = server.logs.captured
        for memo in memos {
            #expect(!logs.contains(memo.subject), "a subject reached the log")
        }
    }

    // MARK: EHLO

    /// A server that refuses a bare host name in EHLO (Postfix's `reject_non_fqdn_helo_hostname`) gets a
    /// domain name or an address literal, and the memo arrives; the machine's bare name is not sent.
    @Test(arguments: [SMTPServer.Mode.plain, .starttls])
    func ehloNamesAFullyQualifiedNameOrAnAddressLiteral(mode: SMTPServer.Mode) throws {
        let fixture = try Fixture(mode: mode, requireFQDNHelo: true)
        defer { fixture.stop() }
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }
        let id = try DeliveryKit.send(server, subject: "helo", body: "a memo through a strict server")
        let entry = try DeliveryKit.settle(server, id, timeout: 20)
        #expect(entry.status == "sent", "\(entry) — \(fixture.smtp.events)")
        let helo = try #require(fixture.smtp.received.first?.helo)
        let machine = NetworkInterfaces.hostName().lowercased()
        #expect(helo == EHLOName.choose(hostName: machine, localAddress: "127.0.0.1"))
        if !machine.contains(".") {
            #expect(helo == "[127.0.0.1]", "the address the connection left from, not the bare name \(machine)")
        }
    }

    @Test(arguments: [
        ("mail.example.com", "192.168.1.20", "mail.example.com"),
        ("Ana-Laptop.Example.ORG", "192.168.1.20", "ana-laptop.example.org"),
        ("vm", "192.168.1.20", "[192.168.1.20]"),
        ("ana-laptop", nil, "[127.0.0.1]"),
        ("ana-laptop.local", "10.0.0.5", "[10.0.0.5]"),
        ("localhost.localdomain", "10.0.0.5", "[10.0.0.5]"),
        ("box.lan", "10.0.0.5", "[10.0.0.5]"),
        ("192.168.1.20", "192.168.1.20", "[192.168.1.20]"),
        ("under_score.example.com", "10.0.0.5", "[10.0.0.5]"),
        ("trailing.", "10.0.0.5", "[10.0.0.5]"),
        ("", "fd00::5", "[IPv6:fd00::5]"),
        ("-bad.example.com", "10.0.0.5", "[10.0.0.5]"),
        ("box.home.arpa", "10.0.0.5", "[10.0.0.5]"),
    ] as [(String, String?, String)])
    func theEHLONameIsChosenAsMailProgramsDo(host: String, local: String?, expected: String) {
        #expect(EHLOName.choose(hostName: host, localAddress: local) == expected)
    }

    @Test func theSourceAddressOfALoopbackConnectionIsLoopback() {
        #expect(EHLOName.sourceAddress(to: "127.0.0.1", port: 25) == "127.0.0.1")
        #expect(EHLOName.sourceAddress(to: "[::1]", port: 25).map { $0 == "::1" } ?? true, "no IPv6 here is fine")
        #expect(SMTPTransport.pathSegment("[IPv6:fd00::5]") == "%5BIPv6%3Afd00%3A%3A5%5D")
    }

    // MARK: Transient and permanent refusals

    @Test(arguments: [SMTPServer.Stage.rcpt, .data])
    func aTemporaryRefusalIsRetriedWithTheSameMessageID(stage: SMTPServer.Stage) throws {
        let fixture = try Fixture(mode: .plain)
        defer { fixture.stop() }
        try fixture.smtp.refuse(stage, reply: "451 4.3.0 Mailbox busy, try again later", count: 1)
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }

        let id = try DeliveryKit.send(server, subject: "retry me", body: "once, and only once")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "sent", "\(entry)")
        #expect(entry.attempts == 2)
        #expect(fixture.smtp.events.filter { $0.hasSuffix("refused 451") }.count == 1)
        let received = fixture.smtp.received
        try #require(received.count == 1, "exactly one message")
        let delivered = try DeliveryKit.parse(atPath: received[0].path)
        #expect(delivered.messageID == Self.messageID(id))
        #expect(delivered.subject == "retry me")
        if stage == .data {
            // The refused attempt's bytes reached the server: it carried the very same Message-ID.
            let refused = fixture.smtp.rejected
            try #require(refused.count == 1)
            #expect(try DeliveryKit.parse(atPath: refused[0]).messageID == delivered.messageID)
        }
        #expect(server.logs.captured.contains("error.kind=server_error"))
    }

    /// A full mailbox (552 to RCPT, as RFC 5321 asks, and at the end of DATA too: a memo is small) is
    /// waited out, not a refusal that fails the memo: it arrives once there is room.
    @Test(arguments: [SMTPServer.Stage.rcpt, .data])
    func aFullMailboxIsWaitedOut(stage: SMTPServer.Stage) throws {
        let fixture = try Fixture(mode: .plain)
        defer { fixture.stop() }
        try fixture.smtp.refuse(stage, reply: "552 5.2.2 Mailbox full", count: 2)
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }
        let id = try DeliveryKit.send(server, body: "when there is room")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "sent", "\(entry)")
        #expect(entry.attempts == 3)
        #expect(fixture.smtp.received.count == 1)
        #expect(server.logs.captured.contains("error.kind=mailbox_full"))
    }

    @Test(arguments: [SMTPServer.Stage.data])
    func aPermanentRefusalFailsKeepsTheMemoAndRetryOnRequestDeliversOnce(stage: SMTPServer.Stage) throws {
        let fixture = try Fixture(mode: .plain)
        defer { fixture.stop() }
        try fixture.smtp.refuse(stage, reply: "554 5.7.1 Message refused: example refusal text")
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }

        let id = try DeliveryKit.send(server, subject: "refused", body: "a memo the server refuses")
        let failed = try DeliveryKit.settle(server, id)
        #expect(failed.status == "failed", "\(failed)")
        #expect(failed.lastError == "rejected")
        #expect(failed.attempts == 1)
        // Permanent: not retried on its own (nothing is scheduled, so the worker has nothing to claim),
        // and kept (not deleted).
        #expect(failed.nextAttemptAt == nil)
        #expect(try server.outbox.nextDueAt() == nil, "nothing left to deliver")
        let later = try DeliveryKit.entry(server, id)
        #expect(later.status == "failed" && later.attempts == 1, "\(later)")
        #expect(later.subject == "refused")
        #expect(fixture.smtp.received.isEmpty)
        #expect(!server.logs.captured.contains("example refusal text"), "server text reached the log")
        #expect(!later.raw.contains("example refusal text"), "server text reached /history")

        try fixture.smtp.acceptAll()
        let retry = try server.route("POST", "/history/\(id)/retry")
        #expect(retry.status == 202, "\(retry.text)")
        let requeued = try DeliveryKit.entry(from: retry)
        #expect(["queued", "sending", "sent"].contains(requeued.status), "\(requeued)")
        #expect(requeued.lastError == nil)

        let sent = try DeliveryKit.settle(server, id)
        #expect(sent.status == "sent", "\(sent)")
        #expect(sent.attempts == 2)
        let received = fixture.smtp.received
        try #require(received.count == 1, "exactly one delivery")
        #expect(try DeliveryKit.parse(atPath: received[0].path).messageID == Self.messageID(id))

        // A sent memo cannot be retried, an unknown one is not found; neither sends anything.
        #expect(try server.route("POST", "/history/\(id)/retry").status == 409)
        #expect(try server.route("POST", "/history/00000000-0000-4000-8000-000000000000/retry").status == 404)
        #expect(try server.finishDeliveries())
        #expect(fixture.smtp.received.count == 1)
    }

    // MARK: Connection reuse

    @Test func aPlainConnectionTheServerClosedWhileIdleIsNotReused() throws {
        try checkIdleConnectionIsNotReused(mode: .plain)
    }

    @Test(arguments: [SMTPServer.Mode.starttls, .tls])
    func aTLSConnectionTheServerClosedWhileIdleIsNotReused(mode: SMTPServer.Mode) throws {
        try checkIdleConnectionIsNotReused(mode: mode)
    }

    /// Two memos a second apart, to a server that hangs up on connections idle for half a second:
    /// each must go through on its first attempt.
    private func checkIdleConnectionIsNotReused(mode: SMTPServer.Mode) throws {
        let directory = TemporaryDirectory()
        let certificates = mode == .plain ? nil : try TestCertificates.make(in: directory.file("certs"))
        let smtp = try SMTPServer(mode: mode, directory: directory.file("smtp"), certificates: certificates,
                                  idleTimeoutSeconds: 0.5)
        defer { smtp.stop() }
        let envelope = "from=jotter@example.com&to=me@example.com"
        let relay = switch mode {
        case .plain: "smtp://127.0.0.1:\(smtp.port)?tls=none&\(envelope)"
        case .starttls: "smtp://127.0.0.1:\(smtp.port)?ca=\(certificates!.caFile)&\(envelope)"
        case .tls: "smtps://127.0.0.1:\(smtp.port)?ca=\(certificates!.caFile)&\(envelope)"
        }
        let server = try TestServer(dataDirectory: directory.file("data"), relay: relay) { configuration in
            configuration.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 1000)
            configuration.delivery.slots = 1
        }
        defer { server.stop() }

        let first = try DeliveryKit.send(server, body: "first")
        #expect(try DeliveryKit.settle(server, first).attempts == 1)
        // The server hangs up on the idle connection Jotter keeps for reuse.
        #expect(server.waitUntil { smtp.events.contains("TIMEOUT") }, "the server hung up")
        let second = try DeliveryKit.send(server, body: "second")
        let entry = try DeliveryKit.settle(server, second)
        #expect(entry.status == "sent", "\(entry)")
        #expect(entry.attempts == 1, "\(entry)")
        #expect(!server.logs.captured.contains("delivery failed"))
        #expect(smtp.received.count == 2)
    }

    // MARK: TLS is never optional unless the URL says so (and then only on loopback)

    @Test func smtpWithoutTLSNoneRefusesAServerThatDoesNotOfferSTARTTLS() throws {
        let fixture = try Fixture(mode: .plain)
        defer { fixture.stop() }
        let server = try fixture.jotter(relay: fixture.relay(requireTLS: true))
        defer { server.stop() }

        let id = try DeliveryKit.send(server, subject: "secret plans", body: "must never cross the wire in clear")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held", "the relay's failure: held until it is fixed \(entry)")
        #expect(entry.lastError == "tls")
        #expect(try server.finishDeliveries())
        #expect(try DeliveryKit.entry(server, id).attempts == 1, "a TLS failure is permanent")
        #expect(fixture.smtp.events.filter { $0.hasPrefix("MAIL") }.isEmpty, "no MAIL FROM in clear")
        #expect(fixture.smtp.received.isEmpty)
    }

    @Test(arguments: [SMTPServer.Mode.starttls, .tls])
    func aCertificateFromAnotherCAIsRefused(mode: SMTPServer.Mode) throws {
        let fixture = try Fixture(mode: mode)
        defer { fixture.stop() }
        let stranger = try TestCertificates.make(in: fixture.directory.file("other-ca"))
        let server = try fixture.jotter(relay: fixture.relay(caFile: stranger.caFile))
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "only for a verified server")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held", "the relay's failure: held until it is fixed \(entry)")
        #expect(entry.lastError == "tls")
        #expect(fixture.smtp.events.filter { $0.hasPrefix("MAIL") }.isEmpty)
        #expect(fixture.smtp.received.isEmpty)
    }

    @Test(arguments: [SMTPServer.Mode.starttls, .tls])
    func aCertificateForOtherNamesSaysWhichNamesItHas(mode: SMTPServer.Mode) throws {
        // Trusted CA, wrong names: 127.0.0.1 is configured, the certificate is for mail.example.net.
        let fixture = try Fixture(mode: mode, certificateNames: "DNS:mail.example.net, DNS:*.example.net")
        defer { fixture.stop() }
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "only for the right host")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held" && entry.lastError == "tls", "\(entry)")
        let hint = "the certificate is for mail.example.net, *.example.net — not 127.0.0.1"
        let relay = try #require(DeliveryKit.relay(server, reason: "tls"), "the relay never showed as refused")
        #expect(relay["reason"] as? String == "tls")
        #expect(relay["hint"] as? String == hint, "\(relay)")
        #expect(server.logs.captured.contains("hint=\"\(hint)\""), "the log names the certificate's names")
        #expect(fixture.smtp.events.filter { $0.hasPrefix("MAIL") }.isEmpty, "no mail to the wrong host")
        #expect(fixture.smtp.received.isEmpty)
    }

    /// A TLS handshake cut once (a reset after the ClientHello: a flaky network, a server restarting) is
    /// tried again on a fresh connection: the memo arrives once, and nothing is held. It held every memo for
    /// the 15-minute retest, as a refusal of the server's certificate would. Cut twice running, it is the
    /// server's answer, and held as before.
    @Test(arguments: [1, 2])
    func aHandshakeCutOnceIsTriedAgain(cuts: Int) throws {
        let fixture = try Fixture(mode: .tls)
        defer { fixture.stop() }
        let cutter = try FixtureProcess(script: "handshake_cutter.py", arguments: [String(fixture.smtp.port), String(cuts)],
                                        errorPath: fixture.directory.file("cutter.stderr"))
        defer { cutter.stop() }
        let relay = fixture.relay().replacingOccurrences(of: "127.0.0.1:\(fixture.smtp.port)", with: "127.0.0.1:\(cutter.port)")
        let server = try fixture.jotter(relay: relay)
        defer { server.stop() }
        let id = try DeliveryKit.send(server, body: "across a cut handshake")
        let entry = try DeliveryKit.settle(server, id, timeout: 30)
        let cut = ((try? String(contentsOfFile: fixture.directory.file("cutter.stderr"), encoding: .utf8)) ?? "")
            .split(separator: "\n").filter { $0 == "cut" }.count
        #expect(cut == cuts, "the proxy cut \(cut) handshakes: \(entry)")
        if cuts == 1 {
            #expect(entry.status == "sent", "\(entry)")
            #expect(try DeliveryKit.parseAll(fixture.smtp.received.map(\.path)).map(\.messageID) == [Self.messageID(id)])
            let health = try server.route("GET", "/healthz")
            #expect((health.json as? [String: Any])?["status"] as? String == "ok", "\(health.text)")
        } else {
            #expect(entry.status == "held" && entry.lastError == "tls", "\(entry)")
            #expect(fixture.smtp.received.isEmpty)
        }
    }

    @Test func anUntrustedCertificateGetsNoNameHint() throws {
        let fixture = try Fixture(mode: .tls)
        defer { fixture.stop() }
        let stranger = try TestCertificates.make(in: fixture.directory.file("other-ca"))
        let server = try fixture.jotter(relay: fixture.relay(caFile: stranger.caFile))
        defer { server.stop() }
        _ = try DeliveryKit.settle(server, try DeliveryKit.send(server, body: "x"))
        let relay = try #require(DeliveryKit.relay(server, reason: "tls"), "the relay never showed as refused")
        #expect(relay["hint"] == nil, "the names are not the problem: \(relay)")
    }

    @Test func certificateNamesReadFromLibcurlsDescription() {
        #expect(CertificateNames.names(certificateInfo: [
            "Subject:CN = mail.example.net", "X509v3 Subject Alternative Name:DNS:mail.example.net, IP Address:192.0.2.7",
        ]) == ["mail.example.net", "192.0.2.7"])
        #expect(CertificateNames.names(certificateInfo: ["Subject:O = Example, CN = smtp.example.org"]) == ["smtp.example.org"])
        #expect(CertificateNames.names(certificateInfo: ["Subject:O = Example"]).isEmpty)
    }

    // MARK: Credentials

    @Test(arguments: [SMTPServer.Mode.starttls, .tls])
    func authenticatesOverTLSAndTheSecretStaysOutOfLogsAndHistory(mode: SMTPServer.Mode) throws {
        let password = "Pw-S3cr3t:tango@42"
        let fixture = try Fixture(mode: mode, auth: ("jotter", password))
        defer { fixture.stop() }
        let encoded = "Pw-S3cr3t%3Atango%4042"
        let server = try fixture.jotter(relay: fixture.relay(userInfo: "jotter:" + encoded))
        defer { server.stop() }

        let id = try DeliveryKit.send(server, subject: "authenticated", body: "hello")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "sent", "\(entry) \(fixture.smtp.standardError)")
        let received = fixture.smtp.received
        try #require(received.count == 1)
        #expect(received[0].login == "jotter")
        #expect(received[0].tls)

        let texts = [server.logs.captured, try server.route("GET", "/history").text, entry.raw,
                     try server.route("GET", "/healthz").text]
        for text in texts {
            #expect(!text.contains(password) && !text.contains(encoded) && !text.contains("S3cr3t"))
        }
        #expect(!DeliveryKit.directory(server.dataDirectory, contains: "S3cr3t"), "the password is not stored")
    }

    @Test func anAddressAsTheUserNameIsAlsoTheEnvelope() throws {
        let fixture = try Fixture(mode: .starttls, auth: ("me@example.com", "pw"))
        defer { fixture.stop() }
        let relay = "smtp://me%40example.com:pw@127.0.0.1:\(fixture.smtp.port)?ca=\(fixture.certificates!.caFile)"
        let server = try fixture.jotter(relay: relay)
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "note to self")
        #expect(try DeliveryKit.settle(server, id).status == "sent")
        let received = fixture.smtp.received
        try #require(received.count == 1)
        #expect(received[0].login == "me@example.com")
        #expect(received[0].mailFrom == "me@example.com")
        #expect(received[0].recipients == ["me@example.com"])
        #expect(try DeliveryKit.parse(atPath: received[0].path).messageID == Self.messageID(id))
    }

    @Test func aWrongPasswordFailsAsAuthAndIsNotRetried() throws {
        let fixture = try Fixture(mode: .starttls, auth: ("jotter", "right-password"))
        defer { fixture.stop() }
        let server = try fixture.jotter(relay: fixture.relay(userInfo: "jotter:Wr0ngSecret"))
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "hello")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held", "the relay's failure: held until it is fixed \(entry)")
        #expect(entry.lastError == "auth")
        #expect(try server.finishDeliveries())
        #expect(try DeliveryKit.entry(server, id).attempts == 1)
        #expect(fixture.smtp.received.isEmpty)
        #expect(fixture.smtp.events.contains { $0.hasPrefix("AUTH") && $0.hasSuffix("refused") })
        #expect(!server.logs.captured.contains("Wr0ngSecret"))
    }

    /// A sender the server will not take (553 to MAIL FROM: an address this account may not send as)
    /// refuses every memo alike: they wait, held as a configuration problem with a hint, after one
    /// attempt — not one failed memo after another — and go out once the server takes the sender.
    @Test func aRefusedSenderHoldsTheMemosAsAConfigurationProblem() throws {
        let fixture = try Fixture(mode: .plain)
        defer { fixture.stop() }
        try fixture.smtp.refuse(.mail, reply: "553 5.7.1 <jotter@example.com>: Sender address rejected: not owned by user")
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }

        let first = try DeliveryKit.send(server, body: "first")
        let held = try DeliveryKit.settle(server, first)
        #expect(held.status == "held", "\(held)")
        #expect(held.lastError == "configuration")
        let second = try DeliveryKit.send(server, body: "second")
        #expect(try DeliveryKit.wait(server, second, timeout: 30) { $0.status == "held" }.status == "held")
        #expect(fixture.smtp.events.filter { $0 == "MAIL refused 553" }.count == 1, "one attempt for all: \(fixture.smtp.events)")
        let health = try #require(try server.route("GET", "/healthz").json as? [String: Any])
        let relay = try #require(health["relay"] as? [String: Any])
        #expect(relay["state"] as? String == "refused" && relay["reason"] as? String == "configuration")
        #expect((relay["hint"] as? String)?.contains("from=") == true, "\(relay)")
        #expect(!server.logs.captured.contains("not owned by user"), "server text reached the log")

        try fixture.smtp.acceptAll()
        #expect(try server.route("POST", "/history/\(first)/retry").status == 202)
        for id in [first, second] {
            #expect(try DeliveryKit.wait(server, id, timeout: 30) { $0.status == "sent" }.status == "sent")
        }
        #expect(fixture.smtp.received.count == 2)
    }

    /// A login missing or refused, answered at MAIL FROM (`530 5.7.57 Client not authenticated`), is the
    /// password's problem, not the sender's: held as `auth`.
    @Test func aLoginRefusedAtMailFromIsAuth() throws {
        let fixture = try Fixture(mode: .plain)
        defer { fixture.stop() }
        try fixture.smtp.refuse(.mail, reply: "530 5.7.57 Client not authenticated to send mail")
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }
        let id = try DeliveryKit.send(server, body: "needs a login")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held" && entry.lastError == "auth", "\(entry)")
    }

    /// A composer's memos all go to its one `to=`: a refused recipient refuses every memo alike, so they
    /// wait, held with a hint to check `to=` (one attempt for all), and go once it is taken. A relay's
    /// recipients differ from message to message: there it stays that message's refusal.
    @Test func aRefusedRecipientHoldsAComposersMemosButFailsARelaysMessage() throws {
        let fixture = try Fixture(mode: .plain)
        defer { fixture.stop() }
        try fixture.smtp.refuse(.rcpt, reply: "550 5.1.1 <me@example.com>: Recipient address rejected: User unknown")
        let server = try fixture.jotter(relay: fixture.relay())
        defer { server.stop() }
        let id = try DeliveryKit.send(server, body: "to nobody")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held" && entry.lastError == "configuration", "\(entry)")
        let health = try #require(try server.route("GET", "/healthz").json as? [String: Any])
        let relay = health["relay"] as? [String: Any]
        #expect(relay?["state"] as? String == "refused" && (relay?["hint"] as? String)?.contains("to=") == true, "\(health)")
        try fixture.smtp.acceptAll()
        #expect(try server.route("POST", "/history/\(id)/retry").status == 202)
        #expect(try DeliveryKit.wait(server, id, timeout: 30) { $0.status == "sent" }.status == "sent")
        #expect(fixture.smtp.received.count == 1)
        let relayMessage = SMTPTransport.failure(curl: CurlError(code: 55), reply: 550, refused: "RCPT", recipientIsFixed: false)
        #expect(relayMessage.kind == .rejected && relayMessage.isPermanent)
    }

    // MARK: Offline

    @Test func memosTakenWhileTheSMTPServerIsDownAreFlushedWhenItReturns() throws {
        let directory = TemporaryDirectory()
        let before = try SMTPServer(mode: .plain, directory: directory.file("smtp-before"))
        let port = before.port
        before.stop()  // the port refuses connections now
        let relay = "smtp://127.0.0.1:\(port)?tls=none&from=jotter@example.com&to=me@example.com"
        let probes = ProbeCounter(try RelayURL(relay).transport)
        let server = try TestServer(dataDirectory: directory.file("data"), transport: probes,
                                    relay: relay) { configuration in
            // A memo that walked this ladder could not arrive within the test's bounds.
            configuration.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 20_000, capMilliseconds: 60_000)
            configuration.delivery.offlineProbeMilliseconds = 200
            configuration.delivery.slots = 2
        }
        defer { server.stop() }

        let ids = try (1...3).map { try DeliveryKit.send(server, body: "written offline \($0)") }
        #expect(server.waitUntil { server.logs.captured.contains("relay unreachable; probing") })
        #expect(server.waitUntil { probes.failedProbes >= 2 }, "failed probes, and the memos wait")
        for id in ids {
            let entry = try DeliveryKit.entry(server, id)
            #expect(["queued", "retrying"].contains(entry.status), "\(entry)")
        }

        let smtp = try SMTPServer(mode: .plain, directory: directory.file("smtp-after"), port: port)
        defer { smtp.stop() }
        let back = Date()
        #expect(try server.waitUntil(timeout: 15) { try ids.allSatisfy { try DeliveryKit.entry(server, $0).status == "sent" } })
        #expect(Date().timeIntervalSince(back) < 10, "flushed on the first good probe, not after a 20 s backoff")
        let identifiers = try DeliveryKit.parseAll(smtp.received.map(\.path)).map(\.messageID)
        #expect(identifiers.sorted() == ids.map(Self.messageID).sorted(), "each exactly once")
    }

    // MARK: Slots

    @Test func fourSlotsAgainstASlowServerDeliverEveryMemoExactlyOnce() throws {
        let fixture = try Fixture(mode: .plain, delayMilliseconds: 30)
        defer { fixture.stop() }
        let server = try fixture.jotter(relay: fixture.relay(), slots: 4)
        defer { server.stop() }

        var ids: [String] = []
        for number in 1...30 {
            ids.append(try DeliveryKit.send(server, body: "memo number \(number)"))
        }
        #expect(server.waitUntil(timeout: 20) { fixture.smtp.received.count >= ids.count })
        #expect(try server.finishDeliveries())
        let identifiers = try DeliveryKit.parseAll(fixture.smtp.received.map(\.path)).map(\.messageID)
        #expect(identifiers.count == ids.count)
        #expect(Set(identifiers) == Set(ids.map(Self.messageID)), "each memo exactly once")
        for id in ids {
            #expect(try DeliveryKit.entry(server, id).status == "sent")
        }
    }

    /// A busy server's checks after the end of DATA take longer than `timeout=`: by then the memo may
    /// be queued, so Jotter waits for the reply (RFC 5321's 10 minutes) rather than give up and send
    /// it a second time.
    @Test func aSlowReplyToTheEndOfTheMessageIsAwaitedNotRetried() throws {
        let fixture = try Fixture(mode: .plain, delayMilliseconds: 5_000)
        defer { fixture.stop() }
        let server = try fixture.jotter(relay: fixture.relay() + "&timeout=2")
        defer { server.stop() }
        let id = try DeliveryKit.send(server, body: "checked slowly")
        #expect(server.waitUntil(timeout: 60) { (try? DeliveryKit.entry(server, id).status) == "sent" },
                "\((try? DeliveryKit.entry(server, id).status) ?? "?")")
        #expect(try server.finishDeliveries())
        let identifiers = try DeliveryKit.parseAll(fixture.smtp.received.map(\.path)).map(\.messageID)
        #expect(identifiers == [Self.messageID(id)], "exactly once")
        #expect(try DeliveryKit.entry(server, id).attempts == 1)
    }

    /// Before the end of the message `timeout=` still holds: a server that stalls on RCPT is given up
    /// on after it (and the memo retried), not after the ten minutes kept for the final reply.
    @Test func aServerThatStallsBeforeTheMessageTimesOutAfterTheTimeout() throws {
        let directory = TemporaryDirectory()
        let smtp = try SMTPServer(mode: .plain, directory: directory.file("smtp"), rcptDelayMilliseconds: 120_000)
        defer { smtp.stop() }
        let server = try TestServer(dataDirectory: directory.file("data"),
                                    relay: "smtp://127.0.0.1:\(smtp.port)?tls=none&timeout=2&from=a@example.com&to=b@example.com") {
            $0.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 600_000, capMilliseconds: 600_000)
        }
        defer { server.stop() }
        let id = try DeliveryKit.send(server, body: "to a stalling server")
        #expect(server.waitUntil(timeout: 60) { (try? DeliveryKit.entry(server, id))?.lastError == "timeout" },
                "\((try? DeliveryKit.entry(server, id).raw) ?? "?")")
        #expect(smtp.received.isEmpty)
    }

    // MARK: Plain text only to loopback

    @Test(arguments: ["127.0.0.1", "127.0.0.2", "localhost", "[::1]"])
    func tlsNoneIsAllowedToLoopback(host: String) throws {
        let relay = try RelayURL("smtp://\(host):2525?tls=none&from=a@example.com&to=b@example.com")
        #expect(relay.scheme == "smtp")
    }

    @Test(arguments: [
            "smtp://u:p@127.0.0.1.example.com:25?tls=none&from=a@example.com&to=b@example.com",
            "smtp://u:p@127.attacker.example?tls=none&from=a@example.com&to=b@example.com",
            "resend://re_key?to=b@example.com&base=http://127.0.0.1.nip.io:8080",
          ])
    func plainTextIsRefusedToAHostThatOnlyLooksLikeLoopback(relay: String) throws {
        #expect(throws: RelayURL.Failure.self) { try RelayURL(relay) }
    }

    // MARK: Relay URLs never repeat a secret

    @Test(arguments: [
        "smtp://u:secret@host",
        "smtp://u:secret@host:587?to=me@example.com",
        "smtps://u:secret@host?to=not-an-address&from=me@example.com",
        "smtp://u:secret@example.com?tls=none&from=me@example.com&to=me@example.com",
        "smtp://u:secret@?from=me@example.com&to=me@example.com",
        "smtp://u:secret@host?from=me@example.com&to=a@b@c",
        "resend://secret",
        "resend://secret?to=me@example.com&base=http://api.example.com",
        "resend://secret?to=me@example.com&from=bad<address",
        "imap://u:secret@host",
        "smtp//u:secret@host",
    ])
    func relayURLErrorsNeverRepeatTheSecret(relay: String) throws {
        let error = try #require(throws: RelayURL.Failure.self) { try RelayURL(relay) }
        for text in [error.description, "\(error)", String(reflecting: error), error.localizedDescription] {
            #expect(!text.contains("secret"), "\(text)")
        }
    }
}
