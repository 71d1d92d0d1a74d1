import Foundation
import Testing
@testable import Jotter

/// Issue 5: who may talk to Jotter, and what never leaks.
@Suite struct HostAndOriginTests {
    private func post(_ server: TestServer, headers: [(String, String)]) throws -> RawHTTP.Response {
        try server.route("POST", "/send", headers: [("Content-Type", "text/plain")] + headers,
                         body: Array("a memo".utf8))
    }

    @Test func refusesEveryForeignHostForm() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) { $0.allowedHosts = ["jotter.test"] }
        defer { server.stop() }
        let port = server.port
        // A malformed port ("localhost:PORTx") is 400, not 403: HostileClientTests.
        for host in ["evil.example:\(port)", "", ":\(port)", "localhost.evil.com:\(port)", "127.0.0.1:1",
                     "localhost", "127.0.0.1.evil.com:\(port)", "[::2]:\(port)",
                     "jotter.test.evil:\(port)", "0x7f000001:\(port)"] {
            let response = try post(server, headers: [("Host", host)])
            #expect(response.status == 403, "Host: \(host)")
            #expect(response.errorCode == "forbidden_host", "Host: \(host)")
        }
        #expect(try server.outbox.history.counts().values.reduce(0, +) == 0)
        for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST:\(port)", "[::1]:\(port)",
                     "127.0.0.2:\(port)", "jotter.test:\(port)", "localhost.:\(port)"] {
            #expect(try post(server, headers: [("Host", host)]).status == 204, "Host: \(host)")
        }
    }

    /// The HTTP layer refuses these before the policy sees them: over a socket.
    @Test func refusesMissingAndDuplicateHost() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let noHost = try server.raw("POST /send HTTP/1.1\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
        #expect(noHost.status == 400)
        let twoHosts = try server.raw("POST /send HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\n"
            + "Host: evil.example\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
        #expect(twoHosts.status == 400)
    }

    /// Without `--lan` there are no device tokens, so another machine gets nothing, even when `--host`
    /// listens on every interface (the policy does not look at it; the test server stays on loopback, and
    /// the peers are given to the router) and the request claims `Host: localhost`.
    @Test func withoutLANModeOnlyThisMachineIsAnswered() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) { $0.allowedHosts = ["mybox.local"] }
        defer { server.stop() }
        for peer in ["192.168.1.33", "10.0.0.7", "fe80::1", "::ffff:192.168.1.33", "2001:db8::5", ""] {
            for host in ["localhost:\(server.port)", "127.0.0.1:\(server.port)", "mybox.local:\(server.port)"] {
                for (method, path, body) in [("POST", "/send", "stolen memo"), ("GET", "/history", ""), ("GET", "/", ""),
                                             ("DELETE", "/history/00000000-0000-7000-8000-000000000000", "")] {
                    let response = try server.route(method, path, headers: [("Host", host), ("Content-Type", "text/plain")],
                                                    body: Array(body.utf8), from: peer)
                    #expect(response.status == 403, "\(method) \(path) from \(peer) as \(host)")
                    #expect(response.errorCode == "local_only", "\(method) \(path) from \(peer) as \(host)")
                    #expect(response.header("Cache-Control") == "no-store")
                }
            }
        }
        #expect(try server.outbox.history.counts().values.reduce(0, +) == 0, "nothing from another machine was stored")
        for peer in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            let sent = try server.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                        body: Array("from here".utf8), from: peer)
            #expect(sent.status == 204, "from \(peer)")
        }
    }

    @Test func refusesCrossOriginWritesAndHistoryReads() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let own = "http://127.0.0.1:\(server.port)"
        let refused: [[(String, String)]] = [
            [("Sec-Fetch-Site", "cross-site")], [("Sec-Fetch-Site", "same-site")], [("Origin", "null")],
            [("Origin", "http://evil.example")], [("Origin", "http://127.0.0.1:\(server.port + 1)")],
            [("Origin", "https://127.0.0.1:\(server.port)")], [("Origin", own + ".evil.com")],
            [("Origin", own), ("Origin", "http://evil.example")],
            [("Origin", own), ("Sec-Fetch-Site", "cross-site")],
        ]
        for headers in refused {
            let response = try post(server, headers: headers)
            #expect(response.status == 403, "\(headers)")
            #expect(response.errorCode == "cross_origin", "\(headers)")
            for path in ["/history", "/history/00000000-0000-0000-0000-000000000000", "/rating"] {
                #expect(try server.route("GET", path, headers: headers).status == 403, "\(path) \(headers)")
            }
        }
        #expect(try server.outbox.history.counts().values.reduce(0, +) == 0, "a refused post stores nothing")
        #expect(try post(server, headers: [("Origin", own), ("Sec-Fetch-Site", "same-origin")]).status == 204)
        #expect(try post(server, headers: []).status == 204, "curl sends neither header")
        #expect(try server.route("GET", "/history", headers: [("Sec-Fetch-Site", "same-origin")]).status == 200)
        // The page itself may be opened from anywhere (a link), it changes nothing.
        #expect(try server.route("GET", "/", headers: [("Sec-Fetch-Site", "cross-site")]).status == 200)
    }

    @Test func neverSendsCORSHeadersAndForbidsFraming() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let responses = [
            try server.route("GET", "/"), try server.route("OPTIONS", "/send", headers: [
                ("Origin", "http://evil.example"), ("Access-Control-Request-Method", "POST")]),
            try post(server, headers: [("Origin", "http://evil.example")]), try post(server, headers: []),
            try server.route("GET", "/history"), try server.route("GET", "/nowhere"),
        ]
        for response in responses {
            #expect(!response.headers.contains { $0.name.lowercased().hasPrefix("access-control-") })
            #expect(response.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true)
        }
    }
}

@Suite struct RateLimitTests {
    @Test func postingBeyondTheLimitIs429AndKeepsWhatWasAccepted() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.rateLimit = RateLimiter.Limits(burst: 3, perSecond: 0.01)
        }
        defer { server.stop() }
        var ids: [String] = []
        for index in 0..<3 {
            let response = try server.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                            body: Array("memo \(index)".utf8))
            #expect(response.status == 204)
            ids += response.header("X-Message-Id").map { [$0] } ?? []
        }
        let limited = try server.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                       body: Array("one too many".utf8))
        #expect(limited.status == 429)
        #expect(limited.errorCode == "rate_limited")
        #expect(Int(limited.header("Retry-After") ?? "") ?? 0 >= 1)
        #expect(server.waitUntil { server.deliveredFiles().count == 3 })
        // The file lands a moment before the outcome is recorded.
        #expect(try server.waitUntil { try ids.allSatisfy { try server.outbox.history.record(id: $0)?.status == .sent } })
    }

    @Test func tokenBucketRefills() {
        let clock = ManualClock()
        let limiter = RateLimiter(limits: .init(burst: 2, perSecond: 1), clock: clock)
        #expect(limiter.retryAfter(client: "a") == nil)
        #expect(limiter.retryAfter(client: "a") == nil)
        #expect(limiter.retryAfter(client: "a") == 1)
        #expect(limiter.retryAfter(client: "b") == nil, "clients are limited separately")
        clock.advance(milliseconds: 1000)
        #expect(limiter.retryAfter(client: "a") == nil)
    }

    /// The wall clock set back an hour (NTP, a person) takes nothing from anyone's bucket: a client that
    /// posted a moment before may post again at once.
    @Test func aClockSetBackRefusesNoOne() {
        let clock = ManualClock()
        let limiter = RateLimiter(limits: .init(burst: 2, perSecond: 1), clock: clock)
        #expect(limiter.retryAfter(client: "a") == nil)
        clock.set(byMilliseconds: -3_600_000)
        #expect(limiter.retryAfter(client: "a") == nil)
        #expect(limiter.retryAfter(client: "a") == 1, "the burst is spent; one more second, not an hour")
    }
}

@Suite struct LANModeTests {
    /// LAN mode over plain HTTP on loopback, with loopback not trusted, so every check is exercised.
    private func lanServer(_ directory: TemporaryDirectory, clock: any WallClock = SystemClock()) throws -> TestServer {
        try TestServer(dataDirectory: directory.file("data"), clock: clock) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanTrustsLoopback = false
            $0.http.host = "127.0.0.1"
        }
    }

    private func send(_ server: TestServer, token: String?) throws -> RawHTTP.Response {
        try server.route("POST", "/send", headers: [("Content-Type", "text/plain")]
            + (token.map { [("Authorization", "Bearer \($0)")] } ?? []), body: Array("from the phone".utf8))
    }

    private func pair(_ server: TestServer, _ token: String) throws -> RawHTTP.Response {
        try server.route("POST", "/pair", headers: [("Content-Type", "application/json")],
                         body: Array("{\"pairing_token\":\"\(token)\",\"name\":\"phone\"}".utf8))
    }

    @Test func pairingThenTokenRequiredForEverythingButThePage() throws {
        let directory = TemporaryDirectory()
        let server = try lanServer(directory)
        defer { server.stop() }
        let pairing = try #require(server.application.lanInfo?.pairingToken)
        #expect(try server.route("GET", "/").status == 200)
        #expect(try server.route("GET", "/manifest.webmanifest").status != 401)
        #expect(try send(server, token: nil).status == 401)
        #expect(try send(server, token: "wrong").status == 401)
        #expect(try server.route("GET", "/history").status == 401)
        #expect(try server.route("GET", "/healthz").status == 401)

        let paired = try pair(server, pairing)
        #expect(paired.status == 201)
        let object = try #require(paired.json as? [String: Any])
        let device = try #require(object["device_token"] as? String)
        #expect(try send(server, token: device).status == 204)
        #expect(try server.route("GET", "/history", headers: [("Authorization", "Bearer \(device)")]).status == 200)

        let reused = try pair(server, pairing)
        #expect(reused.status == 410 && reused.errorCode == "pairing_link_used", "a pairing token works once")
        #expect(!server.logs.captured.contains(pairing))
        #expect(!server.logs.captured.contains(device))
    }

    /// The default: this machine needs no token, a phone on the LAN does. The peer's address decides,
    /// not the Host it names (router-level, so the phone can have a LAN address).
    @Test func thisMachineIsTrustedAndAPhoneOnTheLANIsNot() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.allowedHosts = ["jotter.lan"]
            $0.http.host = "127.0.0.1"
        }
        defer { server.stop() }
        let phone = "192.168.1.50", host = [("Host", "jotter.lan:\(server.port)")]
        let memo = [("Content-Type", "text/plain")], body = Array("a memo".utf8)
        for machine in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            #expect(try server.route("POST", "/send", headers: host + memo, body: body, from: machine).status == 204,
                    "from \(machine)")
        }
        let state = try server.route("GET", "/pairing", headers: host).json as? [String: Any]
        #expect(state?["state"] as? String == "this_machine")

        let refused = try server.route("POST", "/send", headers: host + memo, body: body, from: phone)
        #expect(refused.status == 401 && refused.errorCode == "not_paired")
        #expect(try server.route("GET", "/history", headers: host, from: phone).status == 401)
        #expect(try server.route("GET", "/", headers: host, from: phone).status == 200, "the page is public")
        let phoneState = try server.route("GET", "/pairing", headers: host, from: phone).json as? [String: Any]
        #expect(phoneState?["state"] as? String == "not_paired")
        #expect(phoneState?["can_pair_others"] as? Bool == false)
        let link = try server.route("POST", "/pair/link", headers: host, from: phone)
        #expect(link.status == 403 && link.errorCode == "not_this_machine", "links are for this machine only")

        let pairing = try #require(server.application.lanInfo?.pairingToken)
        let paired = try server.route("POST", "/pair", headers: host + [("Content-Type", "application/json")],
                                      body: Array("{\"pairing_token\":\"\(pairing)\"}".utf8), from: phone)
        #expect(paired.status == 201)
        let device = try #require((paired.json as? [String: Any])?["device_token"] as? String)
        let bearer = [("Authorization", "Bearer \(device)")]
        #expect(try server.route("POST", "/send", headers: host + memo + bearer, body: body, from: phone).status == 204)
        #expect(try server.route("GET", "/history", headers: host + bearer, from: phone).status == 200)
    }

    @Test func expiredPairingTokenAndRevokedDeviceAreRefused() throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock(milliseconds: 1_800_000_000_000)
        let server = try lanServer(directory, clock: clock)
        defer { server.stop() }
        let pairing = try #require(server.application.lanInfo?.pairingToken)
        clock.advance(milliseconds: DeviceRegistry.pairingLifetime + 1)
        let late = try pair(server, pairing)
        #expect(late.status == 410 && late.errorCode == "pairing_link_expired", "expired after 10 minutes")

        let registry = try #require(server.application.devices)
        let fresh = try registry.issuePairingToken().token
        let device = try #require((try pair(server, fresh).json as? [String: Any])?["device_token"] as? String)
        #expect(try send(server, token: device).status == 204)
        let listed = try registry.list()
        #expect(listed.count == 1)
        #expect(try registry.revoke(id: listed[0].id))
        let revoked = try send(server, token: device)
        #expect(revoked.status == 401 && revoked.errorCode == "device_revoked", "revoked")
    }

    @Test func repeatedFailuresAreRateLimited() throws {
        let directory = TemporaryDirectory()
        let server = try lanServer(directory)
        defer { server.stop() }
        var statuses: [Int] = []
        for _ in 0..<12 { statuses.append(try send(server, token: "guess").status) }
        #expect(statuses.prefix(10).allSatisfy { $0 == 401 })
        #expect(statuses.last == 429)
        #expect(try pair(server, "guess").status == 429, "pairing guesses count too")
    }

    /// TLS: over a socket.
    @Test func servesHTTPSWithTheCertificateFromTheDataDirectory() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.http.host = "127.0.0.1"
        }
        defer { server.stop() }
        let fingerprint = try #require(server.application.lanInfo?.fingerprint)
        let script = """
            import hashlib, ssl, sys
            def digest(pem):
                der = ssl.PEM_cert_to_DER_cert(pem)
                return ':'.join('%02X' % b for b in hashlib.sha256(der).digest())
            print(digest(ssl.get_server_certificate(('127.0.0.1', int(sys.argv[1])))))
            print(digest(open(sys.argv[2] + '/cert.pem').read()))
            print(digest(open(sys.argv[2] + '/ca.pem').read()))
            """
        let lines = try Python.run(script, arguments: [String(server.port), directory.file("data/tls")])
            .split(separator: "\n").map(String.init)
        try #require(lines.count == 3)
        #expect(lines[0] == lines[1], "serves data/tls/cert.pem")
        #expect(lines[2] == fingerprint, "the fingerprint shown is the local CA's, which the phone trusts")
        let keyMode = try FileManager.default.attributesOfItem(atPath: directory.file("data/tls/key.pem"))[.posixPermissions] as? Int
        #expect(keyMode == 0o600)
    }
}

@Suite struct SlowClientTests {
    /// A client holding the per-IP maximum of connections open, dripping a byte a second, does not
    /// stop another client from being served promptly.
    @Test func drippingConnectionsDoNotStarveOthers() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) { $0.http.perIPConnectionLimit = 16 }
        defer { server.stop() }
        var sockets: [Int32] = []
        defer { sockets.forEach { close($0) } }
        for _ in 0..<16 {
            let fd = try Drip.connect(port: server.port, from: "127.0.0.2")
            Drip.write(fd, "POST /send HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nContent-Length: 1000\r\n\r\n")
            sockets.append(fd)
        }
        let stop = Drip.start(sockets)
        defer { stop() }
        // Not a fixed wait: until the server holds all sixteen slow requests (their headers are in).
        #expect(server.waitUntil { server.application.server.activeRequests.load(ordering: .acquiring) == 16 })
        let started = Date()
        let response = try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                          body: Array("still served".utf8))
        #expect(response.status == 204)
        // Not after a slow upload (1 byte a second) gives up its slot; with room for a loaded machine.
        #expect(Date().timeIntervalSince(started) < 5, "served promptly")
        #expect(server.waitUntil { server.deliveredFiles().count == 1 })
    }
}

/// Raw sockets from a chosen loopback source address, writing a byte at a time.
enum Drip {
    static func connect(port: Int, from source: String) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        _ = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = UInt16(port).bigEndian
        remote.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw RawHTTP.Failure(description: "connect from \(source) failed")
        }
        return fd
    }

    static func write(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Sends one byte a second on every socket until the returned closure is called.
    static func start(_ sockets: [Int32]) -> () -> Void {
        let running = NSLock()
        nonisolated(unsafe) var stopped = false
        let thread = Thread {
            while true {
                let done = running.withLock { stopped }
                if done { return }
                for fd in sockets { write(fd, "x") }
                Thread.sleep(forTimeInterval: 1)
            }
        }
        thread.start()
        return { running.withLock { stopped = true } }
    }
}

@Suite struct RekeyTests {
    /// Memos left queued (the relay refuses), re-sealed under a new key with a crash in the middle,
    /// then delivered intact by a server on the new key; idempotency keys still recognised.
    @Test func rekeySurvivesACrashMidwayAndEverythingStillOpens() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let failing = ControlledTransport(.fail(DeliveryFailure(.serverError, permanent: true)))
        var bodies: [String: String] = [:]
        let firstKey: Data
        do {
            let server = try TestServer(dataDirectory: data, transport: failing)
            for index in 0..<7 {
                let body = "memo \(index) 日本語 🔑"
                let response = try server.route("POST", "/send", headers: [
                    ("Content-Type", "text/plain"), ("Idempotency-Key", "key-\(index)")], body: Array(body.utf8))
                bodies[try #require(response.header("X-Message-Id"))] = body
            }
            #expect(server.waitUntil { (try? server.outbox.history.counts()[.failed]) == 7 })
            server.stop()
            firstKey = try #require(FileManager.default.contents(atPath: data + "/key"))
        }
        // Crash after three rows: key.new exists, rows are under two keys.
        _ = try Rekey.run(dataDirectory: data, batchSize: 3, stopAfterBatches: 1)
        #expect(FileManager.default.fileExists(atPath: data + "/key.new"))
        #expect(throws: Application.StartFailure.self) { _ = try TestServer(dataDirectory: data) }
        let report = try Rekey.run(dataDirectory: data, batchSize: 3)
        #expect(report.resumed)
        #expect(!FileManager.default.fileExists(atPath: data + "/key.new"))
        #expect(FileManager.default.contents(atPath: data + "/key") != firstKey)

        let server = try TestServer(dataDirectory: data, relay: "maildir:" + data + "/Maildir")
        defer { server.stop() }
        // A new relay configuration re-queues the failed memos; all open under the new key.
        #expect(server.waitUntil { server.deliveredFiles().count == 7 })
        var delivered: [String: String] = [:]
        for file in server.deliveredFiles() {
            let parsed = try Python.parseMessage(atPath: file)
            let id = String((parsed["message_id"] as? String ?? "").dropFirst().prefix(36))
            delivered[id] = (parsed["body"] as? String ?? "").replacingOccurrences(of: "\r\n", with: "\n")
        }
        for (id, body) in bodies { #expect(delivered[id] == body + "\n") }
        let replay = try server.route("POST", "/send", headers: [
            ("Content-Type", "text/plain"), ("Idempotency-Key", "key-0")], body: Array("memo 0 日本語 🔑".utf8))
        #expect(replay.status == 204)
        #expect(bodies[replay.header("X-Message-Id") ?? ""] != nil, "the keyed hashes survived the rekey")
    }
}

@Suite struct CanaryTests {
    static let canary = "CANARY-7f3a9c-do-not-leak"

    /// The canary rides in memo bodies through success and every failure path; it must never show up
    /// in the logs, in /history, or in the raw bytes of the database files. Over a socket: the HTTP
    /// layer's refusal (413) and its request log are among those paths.
    @Test func canaryNeverLeaks() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let transport = ControlledTransport(.fail(DeliveryFailure(.serverError, permanent: false)),
                                            forwardingTo: MaildirTransport(path: data + "/Maildir"))
        let server = try TestServer(dataDirectory: data, maxBodyBytes: 4096, transport: transport) {
            $0.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 200)
        }
        defer { server.stop() }
        let memo = Array("first line\n\(Self.canary)".utf8)
        let text = [("Content-Type", "text/plain")]
        var statuses: [Int] = []
        // Accepted (subject given explicitly, so the subject is not the canary line).
        statuses.append(try server.request("POST", "/send", headers: [("Content-Type", "application/json"),
            ("Idempotency-Key", "canary-1")], body: Array("{\"subject\":\"plain\",\"body\":\"x \(Self.canary)\"}".utf8)).status)
        // Conflict on the same key with another canary payload.
        statuses.append(try server.request("POST", "/send", headers: [("Content-Type", "application/json"),
            ("Idempotency-Key", "canary-1")], body: Array("{\"body\":\"y \(Self.canary)\"}".utf8)).status)
        statuses.append(try server.request("POST", "/send", headers: [("Content-Type", "text/html")], body: memo).status)
        statuses.append(try server.request("POST", "/send", headers: [("Content-Type", "application/json")],
                                           body: Array("{\"body\": \(Self.canary)}".utf8)).status)
        statuses.append(try server.request("POST", "/send", headers: text,
                                           body: memo + Array(repeating: 0x41, count: 5000)).status)
        statuses.append(try server.request("POST", "/send", headers: text, body: memo + [0xFF, 0xFE]).status)
        statuses.append(try server.request("POST", "/send", headers: text + [("Origin", "http://evil.example")],
                                           body: memo).status)
        statuses.append(try server.request("POST", "/send", headers: text + [("Host", "evil.example")], body: memo).status)
        statuses.append(try server.request("POST", "/send?\(Self.canary)=1", headers: text, body: memo).status)
        #expect(statuses == [204, 409, 415, 400, 413, 400, 403, 403, 204])

        // While the relay fails: queued/retrying, sealed on disk.
        #expect(server.waitUntil { transport.messages.count >= 3 })
        try assertNoCanary(server, data: data, stage: "while retrying")
        transport.fail(with: DeliveryFailure(.auth, permanent: true))
        #expect(server.waitUntil { (try? server.outbox.history.counts()[.held]) == 2 })
        try assertNoCanary(server, data: data, stage: "after a permanent failure")
        transport.release()
        for record in try server.outbox.history.latest(limit: 10) {
            _ = try server.request("POST", "/history/\(record.id)/retry")
        }
        #expect(server.waitUntil { server.deliveredFiles().count == 2 })
        #expect(server.waitUntil { (try? server.outbox.history.counts()[.sent]) == 2 })
        try assertNoCanary(server, data: data, stage: "after delivery")
    }

    private func assertNoCanary(_ server: TestServer, data: String, stage: String) throws {
        #expect(!server.logs.captured.contains(Self.canary), "logs \(stage)")
        let history = try server.request("GET", "/history").text
        #expect(!history.contains(Self.canary), "history \(stage)")
        for name in ["jotter.db", "jotter.db-wal", "jotter.db-shm"] {
            guard let bytes = FileManager.default.contents(atPath: data + "/" + name) else { continue }
            #expect(bytes.range(of: Data(Self.canary.utf8)) == nil, "\(name) \(stage)")
        }
    }
}

@Suite struct DevicesCommandTests {
    /// After an interrupted `jotter rekey`, `jotter devices` says what `serve` says: run rekey again (not
    /// "restore the key", which would be wrong advice).
    /// Killed while writing `key.new` (created, its 32 bytes not yet there): nothing was sealed under it,
    /// so the next `rekey` makes it again and finishes, and the server starts on the new key. Before,
    /// `rekey` said "restore the key" and `serve` said "run rekey again".
    @Test func aRekeyCutOffWhileWritingItsKeyStartsOver() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        var ids: [String] = []
        do {
            let server = try TestServer(dataDirectory: data, transport: ControlledTransport(.fail(DeliveryFailure(.serverError, permanent: true))))
            for index in 0..<3 {
                let response = try server.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                                body: Array("memo \(index)".utf8))
                ids.append(try #require(response.header("X-Message-Id")))
            }
            server.stop()
        }
        for cut in [0, 17] {
            #expect(FileManager.default.createFile(atPath: data + "/key.new", contents: Data(repeating: 7, count: cut),
                                                   attributes: [.posixPermissions: 0o600]))
            #expect(throws: Application.StartFailure.self) { _ = try TestServer(dataDirectory: data) }
            let report = try Rekey.run(dataDirectory: data)
            #expect(!report.resumed && report.resealed == 3, "\(cut) bytes: made again, every row re-sealed")
            #expect(!FileManager.default.fileExists(atPath: data + "/key.new"))
        }
        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        for id in ids { #expect(try server.outbox.history.record(id: id) != nil) }
    }

    @Test func anInterruptedRekeyIsNamed() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        do {
            let server = try TestServer(dataDirectory: data)
            server.stop()
        }
        #expect(FileManager.default.createFile(atPath: data + "/key.new", contents: Data(count: 32)))
        let error = try #require(throws: Application.StartFailure.self) {
            _ = try DevicesCommand.run(dataDirectory: data, action: .list)
        }
        #expect("\(error)".contains("jotter rekey"), "\(error)")
    }

    @Test func listsAndRevokesPairedDevices() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let token: String
        do {
            let server = try TestServer(dataDirectory: data) {
                $0.lan = true
                $0.insecureHTTP = true
                $0.lanTrustsLoopback = false
                $0.http.host = "127.0.0.1"
            }
            defer { server.stop() }
            let pairing = try #require(server.application.lanInfo?.pairingToken)
            let response = try server.route("POST", "/pair", headers: [("Content-Type", "application/json")],
                                            body: Array("{\"pairing_token\":\"\(pairing)\",\"name\":\"Kitchen phone\"}".utf8))
            token = try #require((response.json as? [String: Any])?["device_token"] as? String)
        }
        let listing = try DevicesCommand.run(dataDirectory: data, action: .list)
        #expect(listing.contains("Kitchen phone"))
        #expect(!listing.contains(token), "the listing never shows a token")
        let id = String(listing.prefix(8))
        #expect(throws: CommandLineOptions.UsageError.self) {
            _ = try DevicesCommand.run(dataDirectory: data, action: .revoke("no-such-device"))
        }
        _ = try DevicesCommand.run(dataDirectory: data, action: .revoke(id))
        #expect(try DevicesCommand.run(dataDirectory: data, action: .list).contains("revoked"))

        let server = try TestServer(dataDirectory: data) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanTrustsLoopback = false
            $0.http.host = "127.0.0.1"
        }
        defer { server.stop() }
        let refused = try server.route("POST", "/send", headers: [("Content-Type", "text/plain"),
                                                                  ("Authorization", "Bearer \(token)")],
                                       body: Array("after revoke".utf8))
        #expect(refused.status == 401)
    }

    @Test func bannerPrintsTheLinkAndAQRCode() throws {
        let info = LANInfo(addresses: ["192.0.2.7"], scheme: "https", fingerprint: "AB:CD", pairingToken: "tok", port: 7373)
        let banner = LANBanner.text(info)
        #expect(banner.contains("https://192.0.2.7:7373/#pair=tok"))
        #expect(banner.contains("AB:CD"))
        let code = try #require(QRCode.terminalLines("https://192.0.2.7:7373/#pair=tok"))
        #expect(code.count > 10)
        #expect(Set(code.map { $0.filter { $0 == "▀" }.count }).count == 1, "a square code: every line as wide")
        #expect(banner.contains(code[code.count / 2]))
    }
}

@Suite struct HeaderLimitTests {
    /// Headers past the per-connection memory (16 KiB) are refused (431) without harming the server;
    /// ordinary large headers (a few KB, as browsers send) pass. The HTTP layer's limit: over a socket.
    @Test func oversizedHeadersAreRefusedAndTheServerCarriesOn() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let huge = try server.request("POST", "/send", headers: [("Content-Type", "text/plain"),
                                                                ("X-Filler", String(repeating: "a", count: 20_000))],
                                      body: Array("never stored".utf8))
        #expect(huge.status == 431)
        let ordinary = try server.request("POST", "/send", headers: [("Content-Type", "text/plain"),
                                                                    ("X-Filler", String(repeating: "a", count: 8_000))],
                                          body: Array("stored".utf8))
        #expect(ordinary.status == 204)
        #expect(try server.outbox.history.counts().values.reduce(0, +) == 1)
    }
}

/// `jotter rekey` and where the key lives.
@Suite struct RekeyCredentialTests {
    /// A service given its key as a systemd credential reads that key, not the data directory's: a
    /// rekey of the data directory's copy would leave the service unable to read its memos.
    @Test func rekeyRefusesAKeyThatComesFromACredential() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let server = try TestServer(dataDirectory: data)
        _ = try server.route("POST", "/send", headers: [("Content-Type", "text/plain")], body: Array("kept".utf8))
        server.stop()
        let credentials = directory.file("credentials")
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: data + "/key", toPath: credentials + "/jotter.key")
        let key = FileManager.default.contents(atPath: data + "/key")
        #expect(throws: Rekey.Failure.credentialKey) { _ = try Rekey.run(dataDirectory: data, credentialsDirectory: credentials) }
        #expect(FileManager.default.contents(atPath: data + "/key") == key, "the key was left as it was")
        #expect(!FileManager.default.fileExists(atPath: data + "/key.new"))

        // Run from a shell, which has no CREDENTIALS_DIRECTORY: the server that used the credential said so.
        var configuration = Configuration(dataDirectory: data, publicDirectory: Repository.publicDirectory)
        configuration.http.host = "127.0.0.1"
        configuration.http.port = 0
        let service = try Application(configuration: configuration, logSink: LogSink.memory(), credentialsDirectory: credentials)
        try service.start()
        service.stop()
        #expect(throws: Rekey.Failure.credentialKey) { _ = try Rekey.run(dataDirectory: data) }
        #expect(FileManager.default.contents(atPath: data + "/key") == key)
        // `jotter devices` from that shell, when the data directory keeps no key of its own (as a system
        // service's does not): it says how to give the credential, not "restore your key"; given it, it works.
        try FileManager.default.moveItem(atPath: data + "/key", toPath: directory.file("key.aside"))
        let refused = try #require(throws: CommandLineOptions.UsageError.self) {
            _ = try DevicesCommand.run(dataDirectory: data, action: .list)
        }
        #expect(refused.description.contains("CREDENTIALS_DIRECTORY") && !refused.description.contains("restore"),
                "\(refused)")
        #expect(try DevicesCommand.run(dataDirectory: data, action: .list, credentialsDirectory: credentials).isEmpty == false)
        try FileManager.default.moveItem(atPath: directory.file("key.aside"), toPath: data + "/key")
        // Started again without the credential, the data directory's key is the one: rekey may rotate it.
        let plain = try Application(configuration: configuration, logSink: LogSink.memory())
        try plain.start()
        plain.stop()
        #expect(try Rekey.run(dataDirectory: data).resealed == 1)
    }
}

/// `serve` holds memos in the clear while it seals and delivers them: a crash must not leave them in a
/// core file (they were there, with `ulimit -c unlimited`).
@Suite struct CoreDumpTests {
    @Test func theServerForbidsCoreFilesOfItself() throws {
        let directory = TemporaryDirectory()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "ulimit -c unlimited && exec \"$@\"", "sh",
                             LiveServerTests.JotterBinary.path, "serve", "--port", "0", "--data-dir", directory.file("data")]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        let line = LiveServerTests.JotterBinary.readLine(pipe.fileHandleForReading.fileDescriptor, timeout: 60)
        #expect(line?.hasPrefix("Listening on http://127.0.0.1:") == true, "\(line ?? "no line")")
        let limits = try String(contentsOfFile: "/proc/\(process.processIdentifier)/limits", encoding: .utf8)
        let core = limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }
        #expect(core?.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).prefix(2) == ["0", "0"],
                "soft and hard limit 0: \(core ?? "no line")")
    }
}

/// `serve`'s standard output names a person (the SMTP user, the recipient) only to a terminal: the
/// journal under systemd, a log file, a pipe or `docker logs` keep it, as the log never may.
@Suite struct JournalOutputTests {
    enum Output { case terminal, pipe, journal }

    @Test func theStartLinesNameAPersonOnlyToATerminal() throws {
        let directory = TemporaryDirectory()
        /// The second line `serve` prints to `output` (a journal: a pipe named by JOURNAL_STREAM).
        func start(_ output: Output) throws -> String {
            let pipe = Pipe()
            var reading = pipe.fileHandleForReading, writing = pipe.fileHandleForWriting
            if output == .terminal {
                // A pseudo-terminal, as posix_openpt/unlockpt/ptsname make one (Swift imports none of them,
                // nor the ioctl macros: TIOCSPTLCK and TIOCGPTN as Linux defines them on x86_64 and arm64).
                let primary = open("/dev/ptmx", O_RDWR | O_NOCTTY)
                var unlock: CInt = 0, number: CInt = 0
                #expect(primary >= 0 && ioctl(primary, 0x4004_5431, &unlock) == 0
                        && ioctl(primary, 0x8004_5430, &number) == 0)
                let secondary = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY)
                try #require(secondary >= 0)
                var settings = termios()
                tcgetattr(secondary, &settings)
                settings.c_oflag &= ~tcflag_t(OPOST)  // lines end in "\n", as from a pipe
                tcsetattr(secondary, TCSANOW, &settings)
                reading = FileHandle(fileDescriptor: primary, closeOnDealloc: true)
                writing = FileHandle(fileDescriptor: secondary, closeOnDealloc: true)
            }
            var info = stat()
            #expect(fstat(writing.fileDescriptor, &info) == 0)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: LiveServerTests.JotterBinary.path)
            process.arguments = ["serve", "--port", "0", "--data-dir", directory.file("data-\(output)"), "--relay",
                                 "smtp://ana%40example.com:pw@127.0.0.1:1?tls=none&to=bo@example.com"]
            process.environment = LiveServerTests.JotterBinary.environment()
                .merging(output == .journal ? ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino)"] : [:]) { $1 }
            process.standardOutput = writing
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer {
                kill(process.processIdentifier, SIGKILL)  // SIGTERM stays pending: Process passes on a blocked mask
                process.waitUntilExit()
            }
            var lines: [String] = []
            while lines.count < 2,
                  let line = LiveServerTests.JotterBinary.readLine(reading.fileDescriptor, timeout: 60) {
                lines.append(line)
            }
            return lines.last ?? ""
        }
        let terminal = try start(.terminal)
        #expect(terminal == "Delivering to smtp://127.0.0.1:1 as ana@example.com → bo@example.com", "\(terminal)")
        for output in [Output.pipe, .journal] {
            let line = try start(output)
            #expect(line == "Delivering to smtp://127.0.0.1:1", "\(output): \(line)")
        }
    }
}
