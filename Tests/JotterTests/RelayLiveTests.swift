import Foundation
import Testing
@testable import Jotter

/// The relay over real sockets: the built `jotter relay` binary end to end, a relay delivering
/// through an HTTP mail API (the scripted Resend stand-in) with the message id as its
/// `Idempotency-Key`, and logs that hold no content. On both stores, SQLite and PostgreSQL.
@Suite(.holdingSharedPostgres) struct RelayLiveTests {
    /// A body is judged on the request's head, before memory is set aside for it: only a message with
    /// credentials may be large. Anyone could announce 2 MiB on `POST /v1/devices` and hold it (sixteen such
    /// held the relay's whole budget, every message answered `503 busy`); now that is `413` at once, and a
    /// message without credentials `401` at once, both without waiting for a byte of the body.
    @Test func aLargeBodyIsRefusedOnItsHeadUnlessItIsAMessageWithCredentials() throws {
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        let host = "Host: 127.0.0.1:\(relay.port)\r\n"
        func answer(_ head: String) throws -> RawHTTP.Response? {
            let peer = try Peer(port: relay.port)
            peer.send(head)
            return peer.response(timeout: 20)
        }
        let announced = "Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n{"
        let devices = try answer("POST /v1/devices HTTP/1.1\r\n" + host + announced)
        #expect(devices?.status == 413 && devices?.errorCode == "too_large")
        let chunked = try answer("POST /v1/destinations HTTP/1.1\r\n" + host
            + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n")
        #expect(chunked?.status == 413)
        let anonymous = try answer("POST /v1/messages HTTP/1.1\r\n" + host + announced)
        #expect(anonymous?.status == 401 && anonymous?.errorCode == "missing_credentials")
        #expect(anonymous?.header("WWW-Authenticate") == "Bearer")
        // What fits is still served: a registration with a small body, a message with its credentials.
        let (_, secret) = try relay.register()
        let proposed = "jrs_" + String(repeating: "A", count: 43)
        #expect(try relay.request("POST", "/v1/devices", ["secret": proposed]).status == 201, "a small body")
        let address = "me@example.com"
        try relay.verify(secret, address)
        #expect(try relay.send(secret, to: address, body: String(repeating: "x", count: 100_000)).status == 202)
    }

    @Test(arguments: RelayStoreKind.available)
    func overASocketWithLimitsInTheHeaders(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store) {
            $0.limits.devicePerMinute = 1
        }
        defer { relay.stop() }
        let registered = try relay.request("POST", "/v1/devices")
        #expect(registered.status == 201 && registered.header("Cache-Control") == "no-store")
        let secret = try #require((registered.json as? [String: Any])?["secret"] as? String)
        let known = try relay.mailFiles(to: "me@example.com")
        let requested = try relay.request("POST", "/v1/destinations", secret: secret, ["address": "me@example.com"])
        #expect(requested.status == 202)
        let code = try relay.newCode(to: "me@example.com", known: known)
        #expect(try relay.request("POST", "/v1/destinations/confirm", secret: secret,
                                  ["address": "me@example.com", "code": code]).status == 200)
        let sent = try relay.request("POST", "/v1/messages", secret: secret, ["to": "me@example.com", "body": "hi"],
                                     headers: [("Idempotency-Key", "socket-1")])
        #expect(sent.status == 202)
        let limited = try relay.request("POST", "/v1/messages", secret: secret, ["to": "me@example.com", "body": "2"])
        #expect(limited.status == 429 && limited.header("Retry-After") != nil)
        #expect(limited.header("RateLimit-Policy")?.hasPrefix("\"device-minute\";q=1;w=60") == true)
        #expect(limited.header("Content-Type") == "application/json")
    }

    @Test(arguments: RelayStoreKind.available)
    func theLogsHoldNoAddressCodeSecretSubjectOrBody(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        let known = try relay.mailFiles(to: "private.person@example.org")
        #expect(try relay.requestCode(device.secret, "private.person@example.org", language: "fr").status == 202)
        let code = try relay.newCode(to: "private.person@example.org", known: known)
        #expect(try relay.confirm(device.secret, "private.person@example.org", "000000").status == 400
            || code == "000000")
        #expect(try relay.confirm(device.secret, "private.person@example.org", code).status == 200)
        let sent = try relay.send(device.secret, to: "private.person@example.org", subject: "Secret subject",
                                  body: "secret body text", key: "key-in-the-log?")
        let id = try #require((sent.json as? [String: Any])?["id"] as? String)
        #expect(TestServer.waitUntil(timeout: 20) { relay.status(device.secret, of: id) == "sent" })
        _ = try relay.send(device.secret, to: "stranger@example.org")
        let logs = relay.logs.captured
        #expect(logs.contains("message accepted") && logs.contains(id), "the log says what happened, by id")
        for secret in ["private.person", "example.org", code, device.secret, String(device.secret.dropFirst(4)),
                       "Secret subject", "secret body", "key-in-the-log", "stranger"] {
            #expect(!logs.contains(secret), "the log holds \(secret)")
        }
    }

    @Test(arguments: RelayStoreKind.available)
    func throughAnHTTPMailAPIWithTheMessageIdAsIdempotencyKey(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        // The code mail is accepted; the message's first attempt fails, its retry is accepted.
        let api = try ScriptedRelay(script: [.accept, .status(500), .accept], directory: directory.file("api"))
        defer { api.stop() }
        let mail = "resend://re_test_key?from=Relay%20%3Crelay@example.com%3E&base=\(api.baseURL)&timeout=2"
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store) { $0.mail = mail }
        defer { relay.stop() }
        let device = try relay.register()
        #expect(try relay.requestCode(device.secret, "me@example.com", language: "ja").status == 202)
        #expect(TestServer.waitUntil(timeout: 20) { api.emails.count == 1 })
        let codeMail = try #require(api.emails.first?.json)
        #expect(codeMail["to"] as? [String] == ["me@example.com"])
        #expect(codeMail["from"] as? String == "Relay <relay@example.com>")
        #expect(codeMail["reply_to"] as? String == "me@example.com")
        #expect((codeMail["headers"] as? [String: Any])?["Auto-Submitted"] as? String == "auto-generated")
        let code = try #require(RelayServer.code(in: codeMail["text"] as? String ?? ""))
        #expect(codeMail["subject"] as? String == VerificationMail.render(code: code, language: "ja").subject)
        #expect(try relay.confirm(device.secret, "me@example.com", code).status == 200)

        let sent = try relay.send(device.secret, to: "me@example.com", subject: "Via the API", body: "once")
        let id = try #require((sent.json as? [String: Any])?["id"] as? String)
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(device.secret, of: id) == "sent" })
        let attempts = api.requests.filter { $0.idempotencyKey == id }
        #expect(attempts.count == 2, "the failed attempt and its retry, under one key")
        let emails = api.emails.filter { $0.key == id }
        #expect(emails.count == 1)
        #expect(emails.first?.json?["to"] as? [String] == ["me@example.com"], "the message's own recipient")
        #expect(emails.first?.json?["subject"] as? String == "Via the API")
        #expect(!api.requests.contains { String(decoding: $0.body, as: UTF8.self).contains("relay.invalid") },
                "the placeholder recipient never reaches the API")
    }

    @Test(arguments: RelayStoreKind.available)
    func theBinaryRunsARelayEndToEnd(store kind: RelayStoreKind) throws {
        let binary = LiveServerTests.JotterBinary.self
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let data = directory.file("relay")
        let relay = try ServeProcess(directory: directory,
                                     command: ["relay", "--port", "0", "--registration", "invite"] + store.arguments,
                                     data: data, environment: ["JOTTER_RELAY_DATA_DIR": data])
        let port = relay.port

        let invited = try binary.run(["relay", "invite", "--data-dir", data] + store.arguments)
        #expect(invited.status == 0, "\(invited.standardError)")
        let invite = try #require(invited.standardOutput.split(separator: "\n").first.map(String.init))
        func call(_ method: String, _ path: String, secret: String? = nil, _ object: [String: Any]? = nil)
            throws -> RawHTTP.Response {
            var headers: [(String, String)] = secret.map { [("Authorization", "Bearer \($0)")] } ?? []
            var body: [UInt8] = []
            if let object {
                headers.append(("Content-Type", "application/json"))
                body = Array(try JSONSerialization.data(withJSONObject: object))
            }
            return try RawHTTP.request(port: port, method: method, path: path, headers: headers, body: body)
        }
        #expect(try call("POST", "/v1/devices").errorCode == "invite_required")
        let registered = try call("POST", "/v1/devices", ["invite": invite])
        #expect(registered.status == 201)
        let secret = try #require((registered.json as? [String: Any])?["secret"] as? String)
        #expect(try call("POST", "/v1/destinations", secret: secret, ["address": "me@example.com"]).status == 202)
        var code: String?
        #expect(TestServer.waitUntil(timeout: 20) {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: data + "/Maildir/new")) ?? []
            code = files.compactMap { try? Python.parseMessage(atPath: data + "/Maildir/new/" + $0) }
                .compactMap { RelayServer.code(in: $0["body"] as? String ?? "") }.first
            return code != nil
        })
        #expect(try call("POST", "/v1/destinations/confirm", secret: secret,
                         ["address": "me@example.com", "code": code ?? ""]).status == 200)
        let sent = try call("POST", "/v1/messages", secret: secret,
                            ["to": "me@example.com", "subject": "From the binary", "body": "binary canary"])
        let id = try #require((sent.json as? [String: Any])?["id"] as? String)
        #expect(TestServer.waitUntil(timeout: 20) {
            (try? call("GET", "/v1/messages/\(id)", secret: secret).json as? [String: Any])?["status"] as? String
                == "sent"
        })

        #expect(relay.stop(timeout: 20), "did not exit 0 within 20 s of SIGTERM")
        let logs = relay.standardError
        #expect(logs.contains("message accepted"))
        for secretText in ["me@example.com", "binary canary", "From the binary", secret, invite, code ?? "-"] {
            #expect(!logs.contains(secretText), "the log holds \(secretText)")
        }
        #expect(throws: (any Error).self) { try call("GET", "/v1/destinations", secret: secret) }
    }
}
