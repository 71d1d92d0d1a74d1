import Foundation
import Synchronization
import Testing
@testable import Jotter

/// `openapi.yaml` and `openapi-relay.yaml` against the servers: every documented operation answers a
/// success at least once, and every answer a test provokes (successes and the errors that need no
/// second machine or full disk) is declared there — its status for that path and method, and its error
/// code among the codes the response's description lists, when it lists any. Answers given before a
/// route (the Host and origin checks, LAN tokens, unknown paths, framing) must be among the `STATUS
/// code` pairs of the file's `info.description`. The YAML is read by Debian's Python (`yaml`).
@Suite struct OpenAPIConformanceTests {
    /// What a file declares: path → method → status → the error codes its description lists.
    final class Spec: Sendable {
        let file: String
        let operations: [String: [String: [String: [String]]]]
        /// `"403 forbidden_host"`, …: what any request may get before it reaches its route.
        let beforeRoute: Set<String>
        /// Operations ("GET /about") that answered a success.
        private let succeeded = Mutex<Set<String>>([])

        init(_ file: String) throws {
            self.file = file
            let output = try Python.run("""
                import json, re, sys, yaml
                spec = yaml.safe_load(open(sys.argv[1]))
                def resolve(node):
                    while isinstance(node, dict) and '$ref' in node:
                        target = spec
                        for part in node['$ref'][2:].split('/'):
                            target = target[part]
                        node = target
                    return node
                code = re.compile(r'`([a-z][a-z0-9_]*)`')
                paths = {}
                for path, item in spec['paths'].items():
                    for method, operation in item.items():
                        statuses = {}
                        for status, response in operation['responses'].items():
                            text = resolve(response).get('description', '')
                            statuses[str(status)] = sorted(set(code.findall(text))) if int(status) >= 400 else []
                        paths.setdefault(path, {})[method.upper()] = statuses
                pairs = re.findall(r'`([0-9]{3})\\s+([a-z][a-z0-9_]*)`', spec['info']['description'])
                print(json.dumps({'paths': paths, 'before_route': sorted(set(s + ' ' + c for s, c in pairs))}))
                """, arguments: [Repository.root + "/" + file])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
            operations = try #require(object["paths"] as? [String: [String: [String: [String]]]])
            beforeRoute = Set(try #require(object["before_route"] as? [String]))
        }

        /// The documented path `path` (with a query, or ids) falls under: an exact one first, else a template.
        func documentedPath(_ path: String) -> String? {
            let bare = String(path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
            if operations[bare] != nil { return bare }
            let segments = bare.split(separator: "/")
            return operations.keys.sorted().first { template in
                let parts = template.split(separator: "/")
                return parts.count == segments.count && zip(parts, segments).allSatisfy { part, segment in
                    (part.hasPrefix("{") && part.hasSuffix("}")) || part == segment
                }
            }
        }

        /// `response` to `method path` is `status` (with error `code`), and the file declares it there.
        func expect(_ method: String, _ path: String, _ response: RawHTTP.Response, is status: Int, code: String? = nil,
                    sourceLocation: SourceLocation = #_sourceLocation) {
            let label = "\(file): \(method) \(path) → \(response.status) \(response.errorCode ?? "")"
            #expect(response.status == status, "\(label), expected \(status): \(response.text.prefix(300))",
                    sourceLocation: sourceLocation)
            if let code {
                #expect(response.errorCode == code, "\(label), expected \(code)", sourceLocation: sourceLocation)
            }
            guard let documented = documentedPath(path) else {
                Issue.record("\(label): the path is not documented", sourceLocation: sourceLocation)
                return
            }
            let verb = method == "HEAD" ? "GET" : method
            guard let statuses = operations[documented]?[verb] else {
                Issue.record("\(label): \(verb) \(documented) is not documented", sourceLocation: sourceLocation)
                return
            }
            guard let codes = statuses[String(response.status)] else {
                Issue.record("\(label): \(verb) \(documented) does not declare \(response.status)",
                             sourceLocation: sourceLocation)
                return
            }
            if response.status < 400 {
                succeeded.withLock { _ = $0.insert("\(verb) \(documented)") }
            } else {
                let given = response.errorCode
                #expect(given != nil, "\(label): an error without a JSON code", sourceLocation: sourceLocation)
                if let given, !codes.isEmpty {
                    #expect(codes.contains(given), "\(label): \(verb) \(documented) \(response.status) lists \(codes)",
                            sourceLocation: sourceLocation)
                }
            }
        }

        /// `response` is `status code`, an answer `info.description` says any request may get.
        func expectBeforeRoute(_ response: RawHTTP.Response, is status: Int, code: String, _ what: String,
                               sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(response.status == status && response.errorCode == code,
                    "\(file): \(what) → \(response.status) \(response.errorCode ?? ""), expected \(status) \(code)",
                    sourceLocation: sourceLocation)
            #expect(beforeRoute.contains("\(status) \(code)"),
                    "\(file): info.description does not list `\(status) \(code)` (\(what))", sourceLocation: sourceLocation)
        }

        /// Every documented operation answered a success.
        func expectEveryOperationSucceeded(sourceLocation: SourceLocation = #_sourceLocation) {
            let all = Set(operations.flatMap { path, methods in methods.keys.map { "\($0) \(path)" } })
            let missing = all.subtracting(succeeded.withLock { $0 }).sorted()
            #expect(missing.isEmpty, "\(file): never answered a success: \(missing)", sourceLocation: sourceLocation)
        }
    }

    static let json = [("Content-Type", "application/json")]
    static let text = [("Content-Type", "text/plain")]
    static let form = [("Content-Type", "application/x-www-form-urlencoded")]

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    static func bytes(_ object: [String: Any]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: object))
    }

    // MARK: jotter serve

    @Test("openapi.yaml declares what jotter serve answers")
    func serve() throws {
        let spec = try Spec("openapi.yaml")
        let directory = TemporaryDirectory()
        // Deliveries fail at once, so a memo can be retried.
        let transport = ControlledTransport(.fail(DeliveryFailure(.rejected, permanent: true)))
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 8192, transport: transport) {
            $0.rateLimit = RateLimiter.Limits(burst: 60, perSecond: 0.001)
        }
        defer { server.stop() }

        // The page and its files.
        spec.expect("GET", "/", try server.route("GET", "/"), is: 200)
        spec.expect("HEAD", "/", try server.route("HEAD", "/?lang=ja"), is: 200)
        spec.expect("GET", "/about", try server.route("GET", "/about"), is: 200)
        spec.expect("GET", "/favicon.ico", try server.route("GET", "/favicon.ico"), is: 204)
        for name in ["icon.svg", "icon-192.png", "icon-512.png", "manifest.webmanifest"] {
            spec.expect("GET", "/" + name, try server.route("GET", "/" + name), is: 200)
        }
        spec.expect("GET", "/i18n/en.json", try server.route("GET", "/i18n/en.json"), is: 200)
        spec.expect("GET", "/i18n/xx.json", try server.route("GET", "/i18n/xx.json"), is: 404, code: "not_found")
        spec.expect("GET", "/healthz", try server.route("GET", "/healthz"), is: 200)

        // Sending.
        let stored = try server.route("POST", "/", headers: Self.text, body: Self.bytes("buy milk"))
        spec.expect("POST", "/", stored, is: 204)
        let memo = try #require(stored.header("X-Message-Id"))
        let keyed = Self.text + [("Idempotency-Key", "k-1")]
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: keyed, body: Self.bytes("one")), is: 204)
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: keyed, body: Self.bytes("two")),
                    is: 409, code: "idempotency_conflict")
        let navigate = Self.form + [("Sec-Fetch-Mode", "navigate")]
        let posted = try server.route("POST", "/send?lang=de", headers: navigate, body: Self.bytes("body=from+a+form"))
        spec.expect("POST", "/send", posted, is: 303)
        #expect(posted.header("Location") == "/?lang=de" && posted.header("X-Message-Id") != nil)
        let empty = try server.route("POST", "/", headers: Self.form + [("Accept", "text/html")], body: Self.bytes("body="))
        spec.expect("POST", "/", empty, is: 303)
        #expect(empty.header("Location") == "/" && empty.header("X-Message-Id") == nil)
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: Self.text, body: Self.bytes("  ")),
                    is: 400, code: "empty")
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: Self.text + [("Undo-Seconds", "601")],
                                                      body: Self.bytes("x")), is: 400, code: "invalid_undo_seconds")
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: Self.text + [("Idempotency-Key", "")],
                                                      body: Self.bytes("x")), is: 400, code: "invalid_idempotency_key")
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: [("Content-Type", "text/plain"),
                                                                                 ("Content-Type", "text/html")],
                                                      body: Self.bytes("x")), is: 400, code: "bad_request")
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: [("Content-Type", "application/xml")],
                                                      body: Self.bytes("<x/>")), is: 415, code: "unsupported_media_type")
        spec.expect("POST", "/", try server.route("POST", "/", headers: Self.text + [("Content-Encoding", "gzip")],
                                                  body: Self.bytes("x")), is: 415, code: "unsupported_encoding")
        spec.expect("POST", "/send", try server.request("POST", "/send", headers: Self.text,
                                                        body: [UInt8](repeating: 0x61, count: 9000)),
                    is: 413, code: "too_large")

        // History.
        spec.expect("GET", "/history", try server.route("GET", "/history?limit=2"), is: 200)
        spec.expect("GET", "/history", try server.route("GET", "/history?limit=0"), is: 400, code: "invalid_limit")
        spec.expect("GET", "/history/{id}", try server.route("GET", "/history/\(memo)"), is: 200)
        let unknown = UUID().uuidString.lowercased()
        spec.expect("GET", "/history/{id}", try server.route("GET", "/history/\(unknown)"), is: 404, code: "not_found")
        let undoable = try server.route("POST", "/send", headers: Self.text + [("Undo-Seconds", "600")],
                                        body: Self.bytes("take me back"))
        spec.expect("POST", "/send", undoable, is: 204)
        let undoID = try #require(undoable.header("X-Message-Id"))
        spec.expect("POST", "/history/{id}/retry", try server.route("POST", "/history/\(undoID)/retry"),
                    is: 409, code: "not_failed")
        spec.expect("DELETE", "/history/{id}", try server.route("DELETE", "/history/\(undoID)"), is: 200)
        spec.expect("DELETE", "/history/{id}", try server.route("DELETE", "/history/\(unknown)"), is: 404, code: "not_found")
        #expect(server.waitUntil {
            ((try? server.route("GET", "/history/\(memo)"))?.json as? [String: Any])?["status"] as? String == "failed"
        })
        spec.expect("DELETE", "/history/{id}", try server.route("DELETE", "/history/\(memo)"),
                    is: 409, code: "undo_window_closed")
        spec.expect("POST", "/history/{id}/retry", try server.route("POST", "/history/\(memo)/retry"), is: 202)
        spec.expect("POST", "/history/{id}/retry", try server.route("POST", "/history/\(unknown)/retry"),
                    is: 404, code: "not_found")

        // Rating.
        spec.expect("GET", "/rating", try server.route("GET", "/rating"), is: 200)
        spec.expect("POST", "/rating", try server.route("POST", "/rating", headers: Self.json,
                                                        body: Self.bytes("{\"event\":\"shown\"}")), is: 204)
        spec.expect("POST", "/rating", try server.route("POST", "/rating", headers: Self.json,
                                                        body: Self.bytes("{\"event\":\"liked\"}")), is: 400, code: "invalid_event")
        spec.expect("POST", "/rating", try server.route("POST", "/rating", headers: Self.json,
                                                        body: Self.bytes("{\"event\":\"rated\",\"stars\":6}")),
                    is: 400, code: "invalid_stars")
        spec.expect("POST", "/rating", try server.route("POST", "/rating", headers: Self.text, body: Self.bytes("shown")),
                    is: 415, code: "unsupported_media_type")

        // Without a Jotter relay, and without LAN mode.
        spec.expect("GET", "/destination", try server.route("GET", "/destination"), is: 404, code: "not_jotter_relay")
        spec.expect("POST", "/destination", try server.route("POST", "/destination", headers: Self.json,
                                                             body: Self.bytes("{\"address\":\"a@example.com\"}")),
                    is: 404, code: "not_jotter_relay")
        spec.expect("POST", "/destination/confirm", try server.route("POST", "/destination/confirm", headers: Self.json,
                                                                     body: Self.bytes("{\"code\":\"123456\"}")),
                    is: 404, code: "not_jotter_relay")
        spec.expect("POST", "/pair", try server.route("POST", "/pair", headers: Self.json,
                                                      body: Self.bytes("{\"pairing_token\":\"x\"}")),
                    is: 404, code: "not_lan_mode")
        spec.expect("POST", "/pair/link", try server.route("POST", "/pair/link"), is: 404, code: "not_lan_mode")
        spec.expect("GET", "/pairing", try server.route("GET", "/pairing"), is: 404, code: "not_lan_mode")
        spec.expect("GET", "/jotter-ca.crt", try server.route("GET", "/jotter-ca.crt"), is: 404, code: "not_lan_mode")
        spec.expect("GET", "/jotter-ca.mobileconfig", try server.route("GET", "/jotter-ca.mobileconfig"),
                    is: 404, code: "not_lan_mode")

        // Before any route.
        spec.expectBeforeRoute(try server.route("GET", "/healthz", headers: [("Host", "evil.example")]),
                               is: 403, code: "forbidden_host", "a foreign Host")
        spec.expectBeforeRoute(try server.route("POST", "/send", headers: Self.text + [("Origin", "http://evil.example")],
                                                body: Self.bytes("x")), is: 403, code: "cross_origin", "a foreign Origin")
        spec.expectBeforeRoute(try server.route("GET", "/destination", headers: [("Sec-Fetch-Site", "cross-site")]),
                               is: 403, code: "cross_origin", "a cross-site read")
        spec.expectBeforeRoute(try server.route("GET", "/healthz", from: "192.0.2.5"),
                               is: 403, code: "local_only", "another machine without --lan")
        spec.expectBeforeRoute(try server.route("GET", "/nothing-here"), is: 404, code: "not_found", "an unknown path")
        let notAllowed = try server.route("PUT", "/history")
        spec.expectBeforeRoute(notAllowed, is: 405, code: "method_not_allowed", "PUT /history")
        #expect(notAllowed.header("Allow") == "GET, HEAD")
        spec.expectBeforeRoute(try server.route("GET", "/i18n/../healthz"), is: 400, code: "bad_path", "a dot-dot path")
        spec.expectBeforeRoute(try server.raw("POST /send HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nContent-Length: 1\r\n"
                                              + "Content-Length: 1\r\nConnection: close\r\n\r\nx"),
                               is: 400, code: "bad_request", "two Content-Length")
        spec.expectBeforeRoute(try server.raw("POST /send HTTP/1.0\r\nHost: 127.0.0.1:\(server.port)\r\n"
                                              + "Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"),
                               is: 400, code: "bad_request", "Transfer-Encoding in HTTP/1.0")
        spec.expectBeforeRoute(try server.raw("POST /send HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\n"
                                              + "Transfer-Encoding: gzip\r\nConnection: close\r\n\r\n"),
                               is: 501, code: "not_implemented", "Transfer-Encoding: gzip")
        spec.expectBeforeRoute(try server.request("GET", "/healthz", headers: [("Content-Length", "9000")]),
                               is: 413, code: "too_large", "a Content-Length over --max-body")

        // Last: the memo limit (an empty memo counts too, and stores nothing).
        var limited: RawHTTP.Response?
        for _ in 0..<100 {
            let response = try server.route("POST", "/send", headers: Self.text, body: [])
            if response.status != 400 {
                limited = response
                break
            }
        }
        spec.expect("POST", "/send", try #require(limited), is: 429, code: "rate_limited")
        try lanAndRelay(spec)
        spec.expectEveryOperationSucceeded()
    }

    /// LAN mode (HTTPS, and plain HTTP for the socket), and a composer that goes through a Jotter relay.
    func lanAndRelay(_ spec: Spec) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("lan")) {
            $0.lan = true
            $0.lanAddresses = ["192.0.2.10"]
        }
        defer { server.stop() }
        let phone = "192.0.2.50", guesser = "192.0.2.99"
        let registry = try #require(server.application.devices)
        func pair(_ body: String, from peer: String = phone, bearer: String? = nil) throws -> RawHTTP.Response {
            try server.route("POST", "/pair", headers: Self.json + (bearer.map { [("Authorization", "Bearer \($0)")] } ?? []),
                             body: Self.bytes(body), from: peer)
        }
        let link = try server.route("POST", "/pair/link")
        spec.expect("POST", "/pair/link", link, is: 201)
        let token = try #require((link.json as? [String: Any])?["token"] as? String)
        spec.expect("POST", "/pair/link", try server.route("POST", "/pair/link", from: phone), is: 403, code: "not_this_machine")
        spec.expect("POST", "/pair", try pair("{\"pairing_token\":\"\(token)\"}", from: "127.0.0.1"), is: 409, code: "this_machine")
        spec.expect("POST", "/pair", try pair("{}"), is: 400, code: "invalid_pairing")
        spec.expect("POST", "/pair", try pair("{\"pairing_token\":\"\(token)\",\"request_id\":\"short\"}"),
                    is: 400, code: "invalid_request_id")
        spec.expect("POST", "/pair", try pair("{\"pairing_token\":\"\(String(repeating: "x", count: 5000))\"}"),
                    is: 413, code: "too_large")
        let paired = try pair("{\"pairing_token\":\"\(token)\"}")
        spec.expect("POST", "/pair", paired, is: 201)
        let deviceToken = try #require((paired.json as? [String: Any])?["device_token"] as? String)
        spec.expect("POST", "/pair", try pair("{\"pairing_token\":\"\(token)\"}"), is: 410, code: "pairing_link_used")
        spec.expect("POST", "/pair", try pair("{\"pairing_token\":\"\(try registry.issuePairingToken().token)\"}",
                                              bearer: deviceToken), is: 200)
        spec.expect("POST", "/pair", try pair("{\"pairing_token\":\"no-such-link-0123456789\"}"),
                    is: 401, code: "pairing_link_invalid")
        spec.expect("GET", "/pairing", try server.route("GET", "/pairing", from: phone), is: 200)
        spec.expect("GET", "/jotter-ca.crt", try server.route("GET", "/jotter-ca.crt", from: phone), is: 200)
        spec.expect("GET", "/jotter-ca.mobileconfig", try server.route("GET", "/jotter-ca.mobileconfig", from: phone), is: 200)
        spec.expect("POST", "/send", try server.route("POST", "/send", headers: Self.text + [("Authorization", "Bearer \(deviceToken)")],
                                                      body: Self.bytes("from the phone"), from: phone), is: 204)
        spec.expectBeforeRoute(try server.route("GET", "/history", from: phone), is: 401, code: "not_paired", "no token")
        let bogus = [("Authorization", "Bearer not-a-token")]
        spec.expectBeforeRoute(try server.route("GET", "/history", headers: bogus, from: phone),
                               is: 401, code: "invalid_token", "a token not issued here")
        let device = try #require(try registry.list().first?.id)
        #expect(try registry.revoke(id: device))
        let revoked = try server.route("GET", "/healthz", headers: [("Authorization", "Bearer \(deviceToken)")], from: phone)
        spec.expectBeforeRoute(revoked, is: 401, code: "device_revoked", "a revoked device")
        #expect(revoked.header("WWW-Authenticate") == "Bearer")
        var locked: RawHTTP.Response?
        for _ in 0..<11 {
            locked = try server.route("GET", "/history", headers: bogus, from: guesser)
        }
        spec.expectBeforeRoute(try #require(locked), is: 429, code: "too_many_attempts", "the eleventh invalid token")
        spec.expect("GET", "/pairing", try server.route("GET", "/pairing", headers: bogus, from: guesser),
                    is: 429, code: "too_many_attempts")
        spec.expect("POST", "/pair", try pair("{\"pairing_token\":\"K7Q2-M9XD\"}", from: guesser),
                    is: 429, code: "too_many_attempts")

        // Plain HTTP, over a socket: a pairing request too large for its head.
        let plain = try TestServer(dataDirectory: directory.file("plain")) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanAddresses = ["192.0.2.10"]
        }
        defer { plain.stop() }
        spec.expect("POST", "/pair/link", try plain.request("POST", "/pair/link", body: [UInt8](repeating: 0x20, count: 5000)),
                    is: 413, code: "too_large")
        spec.expect("GET", "/jotter-ca.crt", try plain.route("GET", "/jotter-ca.crt"), is: 404, code: "no_certificate_authority")

        // Through a Jotter relay.
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        let composer = try TestServer(dataDirectory: directory.file("composer"), relay: "jotter+http://127.0.0.1:\(relay.port)")
        defer { composer.stop() }
        func page(_ path: String, _ body: String, type: [(String, String)] = Self.json) throws -> RawHTTP.Response {
            try composer.route("POST", path, headers: type + [("Sec-Fetch-Site", "same-origin")], body: Self.bytes(body))
        }
        let address = "ana@example.com"
        spec.expect("GET", "/destination", try composer.route("GET", "/destination"), is: 200)
        spec.expect("POST", "/destination/confirm", try page("/destination/confirm", "{\"code\":\"123456\"}"),
                    is: 409, code: "no_pending_address")
        spec.expect("POST", "/destination", try page("/destination", address, type: Self.text), is: 415, code: "unsupported_media_type")
        spec.expect("POST", "/destination", try page("/destination", "{"), is: 400, code: "invalid_json")
        spec.expect("POST", "/destination", try page("/destination", "{}"), is: 400, code: "missing_field")
        spec.expect("POST", "/destination", try page("/destination", "{\"address\":\"\(address)\",\"to\":1}"),
                    is: 400, code: "unknown_field")
        spec.expect("POST", "/destination", try page("/destination", "{\"address\":\"\(address)\",\"address\":\"\(address)\"}"),
                    is: 400, code: "repeated_field")
        spec.expect("POST", "/destination", try page("/destination", "{\"address\":\"not an address\"}"),
                    is: 400, code: "invalid_address")
        spec.expect("POST", "/destination/confirm", try page("/destination/confirm", "123456", type: Self.text),
                    is: 415, code: "unsupported_media_type")
        spec.expect("POST", "/destination/confirm", try page("/destination/confirm", "{}"), is: 400, code: "missing_field")
        spec.expect("POST", "/destination/confirm", try page("/destination/confirm", "{\"code\":123456}"),
                    is: 400, code: "invalid_field")
        let known = try relay.mailFiles(to: address)
        spec.expect("POST", "/destination", try page("/destination", "{\"address\":\"\(address)\"}"), is: 202)
        let code = try relay.newCode(to: address, known: known)
        spec.expect("POST", "/destination", try page("/destination", "{\"address\":\"\(address)\"}"),
                    is: 429, code: "code_cooldown")
        spec.expect("POST", "/destination/confirm", try page("/destination/confirm", "{\"code\":\"12\"}"),
                    is: 400, code: "malformed_code")
        spec.expect("POST", "/destination/confirm", try page("/destination/confirm",
                                                             "{\"code\":\"\(code == "000000" ? "000001" : "000000")\"}"),
                    is: 400, code: "invalid_code")
        spec.expect("POST", "/destination/confirm", try page("/destination/confirm", "{\"code\":\"\(code)\"}"), is: 200)
        spec.expect("POST", "/send", try composer.route("POST", "/send", headers: Self.text,
                                                        body: [UInt8](repeating: 0x61, count: 300_000)),
                    is: 413, code: "too_large")
    }

    // MARK: jotter relay

    @Test("openapi-relay.yaml declares what jotter relay answers")
    func relay() throws {
        let spec = try Spec("openapi-relay.yaml")
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay")) {
            $0.limits.devicePerMinute = 3
        }
        defer { relay.stop() }
        func call(_ method: String, _ path: String, secret: String? = nil, _ body: String? = nil,
                  headers: [(String, String)] = [], from client: String = "127.0.0.1") throws -> RawHTTP.Response {
            try relay.route(method, path, headers: headers + (body == nil ? [] : Self.json)
                                + (secret.map { [("Authorization", "Bearer \($0)")] } ?? []),
                            body: body.map(Self.bytes) ?? [], from: client)
        }

        // Devices.
        let registered = try call("POST", "/v1/devices")
        spec.expect("POST", "/v1/devices", registered, is: 201)
        let secret = try #require((registered.json as? [String: Any])?["secret"] as? String)
        let proposed = "jrs_" + String(repeating: "A", count: 43)
        spec.expect("POST", "/v1/devices", try call("POST", "/v1/devices", "{\"secret\":\"\(proposed)\"}"), is: 201)
        spec.expect("POST", "/v1/devices", try call("POST", "/v1/devices", "{\"secret\":\"jrs_short\"}"),
                    is: 400, code: "invalid_secret")
        spec.expect("POST", "/v1/devices", try relay.route("POST", "/v1/devices", headers: Self.text, body: Self.bytes("x")),
                    is: 415, code: "unsupported_media_type")

        // Destinations.
        let address = "ana@example.com", other = "bo@example.com"
        let known = try relay.mailFiles(to: address)
        spec.expect("POST", "/v1/destinations", try call("POST", "/v1/destinations", secret: secret, "{\"address\":\"\(address)\"}"),
                    is: 202)
        let code = try relay.newCode(to: address, known: known)
        let again = try call("POST", "/v1/destinations", secret: secret, "{\"address\":\"\(address)\"}")
        spec.expect("POST", "/v1/destinations", again, is: 429, code: "code_cooldown")
        #expect(again.header("Retry-After") != nil)
        spec.expect("POST", "/v1/destinations", try call("POST", "/v1/destinations", secret: secret, "{\"address\":\"nope\"}"),
                    is: 400, code: "invalid_address")
        spec.expect("POST", "/v1/destinations", try relay.route("POST", "/v1/destinations",
                                                                headers: Self.text + [("Authorization", "Bearer \(secret)")],
                                                                body: Self.bytes(address)),
                    is: 415, code: "unsupported_media_type")
        func confirm(_ body: String) throws -> RawHTTP.Response {
            try call("POST", "/v1/destinations/confirm", secret: secret, body)
        }
        spec.expect("POST", "/v1/destinations/confirm", try confirm("{\"address\":\"\(address)\",\"code\":\"12\"}"),
                    is: 400, code: "malformed_code")
        spec.expect("POST", "/v1/destinations/confirm", try confirm("{\"address\":\"\(other)\",\"code\":\"123456\"}"),
                    is: 400, code: "no_code")
        spec.expect("POST", "/v1/destinations/confirm",
                    try confirm("{\"address\":\"\(address)\",\"code\":\"\(code == "000000" ? "000001" : "000000")\"}"),
                    is: 400, code: "invalid_code")
        spec.expect("POST", "/v1/destinations/confirm", try confirm("{\"address\":\"\(address)\",\"code\":\"123456\",\"x\":1}"),
                    is: 400, code: "unknown_field")
        spec.expect("POST", "/v1/destinations/confirm", try confirm("{\"code\":\"123456\"}"), is: 400, code: "missing_field")
        spec.expect("POST", "/v1/destinations/confirm", try relay.route("POST", "/v1/destinations/confirm",
                                                                        headers: Self.text + [("Authorization", "Bearer \(secret)")],
                                                                        body: Self.bytes(code)),
                    is: 415, code: "unsupported_media_type")
        spec.expect("POST", "/v1/destinations/confirm", try confirm("{\"address\":\"\(address)\",\"code\":\"\(code)\"}"), is: 200)
        spec.expect("GET", "/v1/destinations", try call("GET", "/v1/destinations", secret: secret), is: 200)

        // Messages.
        func send(_ body: [String: Any], key: String? = nil) throws -> RawHTTP.Response {
            try relay.route("POST", "/v1/messages", headers: Self.json + [("Authorization", "Bearer \(secret)")]
                                + (key.map { [("Idempotency-Key", $0)] } ?? []), body: try Self.bytes(body))
        }
        let accepted = try send(["to": address, "body": "hello"], key: "k-1")
        spec.expect("POST", "/v1/messages", accepted, is: 202)
        let id = try #require((accepted.json as? [String: Any])?["id"] as? String)
        let replayed = try send(["to": address, "body": "hello"], key: "k-1")
        spec.expect("POST", "/v1/messages", replayed, is: 202)
        #expect(replayed.header("Idempotent-Replayed") == "true")
        spec.expect("POST", "/v1/messages", try send(["to": address, "body": "other"], key: "k-1"),
                    is: 409, code: "idempotency_conflict")
        spec.expect("POST", "/v1/messages", try send(["to": address, "body": "x"], key: " "), is: 400, code: "invalid_idempotency_key")
        spec.expect("POST", "/v1/messages", try send(["to": address, "body": " "]), is: 400, code: "empty")
        spec.expect("POST", "/v1/messages", try send(["to": address, "body": "x", "cc": "y"]), is: 400, code: "unknown_field")
        spec.expect("POST", "/v1/messages", try send(["to": other, "body": "x"]), is: 403, code: "destination_unverified")
        spec.expect("POST", "/v1/messages", try send(["to": address, "body": String(repeating: "a", count: 300_000)]),
                    is: 413, code: "too_large")
        spec.expect("POST", "/v1/messages", try relay.route("POST", "/v1/messages",
                                                            headers: Self.text + [("Authorization", "Bearer \(secret)")],
                                                            body: Self.bytes("hello")),
                    is: 415, code: "unsupported_media_type")
        var limited: RawHTTP.Response?
        for index in 0..<10 {
            let response = try send(["to": address, "body": "message \(index)"])
            if response.status != 202 {
                limited = response
                break
            }
        }
        spec.expect("POST", "/v1/messages", try #require(limited), is: 429, code: "rate_limited")
        spec.expect("GET", "/v1/messages/{id}", try call("GET", "/v1/messages/\(id)", secret: secret), is: 200)
        let unknown = UUID().uuidString.lowercased()
        spec.expect("GET", "/v1/messages/{id}", try call("GET", "/v1/messages/\(unknown)", secret: secret), is: 404, code: "not_found")
        spec.expect("POST", "/v1/messages/{id}/retry", try call("POST", "/v1/messages/\(id)/retry", secret: secret), is: 200)
        spec.expect("POST", "/v1/messages/{id}/retry", try call("POST", "/v1/messages/\(unknown)/retry", secret: secret),
                    is: 404, code: "not_found")

        // Every authenticated route: no secret, a wrong one, and then too many wrong ones from one client.
        let authenticated: [(String, String, String?)] = [
            ("GET", "/v1/destinations", nil), ("POST", "/v1/destinations", "{\"address\":\"\(address)\"}"),
            ("POST", "/v1/destinations/confirm", "{\"address\":\"\(address)\",\"code\":\"123456\"}"),
            ("DELETE", "/v1/destinations/\(address)", nil), ("POST", "/v1/destinations/forget", "{\"address\":\"\(address)\"}"),
            ("DELETE", "/v1/devices/me", nil),
            ("POST", "/v1/messages", "{\"to\":\"\(address)\",\"body\":\"x\"}"), ("GET", "/v1/messages/\(id)", nil),
            ("POST", "/v1/messages/\(id)/retry", nil),
        ]
        let wrong = "jrs_" + String(repeating: "B", count: 43), guesser = "192.0.2.77"
        for (method, path, body) in authenticated {
            spec.expect(method, path, try call(method, path, body), is: 401, code: "missing_credentials")
            spec.expect(method, path, try call(method, path, secret: wrong, body), is: 401, code: "invalid_credentials")
        }
        for _ in 0..<10 { _ = try call("GET", "/v1/destinations", secret: wrong, from: guesser) }
        for (method, path, body) in authenticated {
            let refused = try call(method, path, secret: wrong, body, from: guesser)
            spec.expect(method, path, refused, is: 429, code: "too_many_attempts")
            #expect(refused.header("Retry-After") != nil)
        }
        spec.expect("POST", "/v1/devices", try call("POST", "/v1/devices", "{\"invite\":\"jri_x\"}", from: guesser),
                    is: 429, code: "too_many_attempts")

        // Forgetting, revoking, and the revoked secret.
        func forget(_ body: String) throws -> RawHTTP.Response { try call("POST", "/v1/destinations/forget", secret: secret, body) }
        spec.expect("POST", "/v1/destinations/forget", try forget("{\"address\":\"nope\"}"), is: 400, code: "invalid_address")
        spec.expect("POST", "/v1/destinations/forget", try forget("{\"address\":\"\(address)\",\"x\":1}"),
                    is: 400, code: "unknown_field")
        spec.expect("POST", "/v1/destinations/forget", try forget("{\"address\":\"\(other)\"}"),
                    is: 404, code: "destination_not_found")
        spec.expect("POST", "/v1/destinations/forget",
                    try relay.route("POST", "/v1/destinations/forget",
                                    headers: [("Authorization", "Bearer \(secret)"), ("Content-Type", "text/plain")],
                                    body: Array("{\"address\":\"\(address)\"}".utf8)),
                    is: 415, code: "unsupported_media_type")
        spec.expect("DELETE", "/v1/destinations/{address}", try call("DELETE", "/v1/destinations/nope", secret: secret),
                    is: 400, code: "invalid_address")
        spec.expect("DELETE", "/v1/destinations/{address}", try call("DELETE", "/v1/destinations/\(other)", secret: secret),
                    is: 404, code: "destination_not_found")
        spec.expect("DELETE", "/v1/destinations/{address}", try call("DELETE", "/v1/destinations/\(address)", secret: secret),
                    is: 204)
        // A pending address (a code asked for, none typed) is forgotten too.
        let third = "cy@example.com"
        #expect(try call("POST", "/v1/destinations", secret: secret, "{\"address\":\"\(third)\"}").status == 202)
        spec.expect("POST", "/v1/destinations/forget", try forget("{\"address\":\"\(third)\"}"), is: 204)
        spec.expect("DELETE", "/v1/devices/me", try call("DELETE", "/v1/devices/me", secret: secret), is: 204)
        spec.expect("POST", "/v1/devices", try call("POST", "/v1/devices", "{\"secret\":\"\(secret)\"}"),
                    is: 409, code: "secret_revoked")

        // Before any route.
        spec.expectBeforeRoute(try call("GET", "/v1/destinations", secret: proposed, headers: [("Origin", "https://evil.example")]),
                               is: 403, code: "browser_request", "a web page")
        spec.expectBeforeRoute(try call("GET", "/v1/nothing"), is: 404, code: "not_found", "an unknown path")
        spec.expectBeforeRoute(try call("GET", "/v1/messages"), is: 405, code: "method_not_allowed", "GET /v1/messages")
        spec.expectBeforeRoute(try call("GET", "/v1/../v1/destinations"), is: 400, code: "bad_path", "a dot-dot path")
        spec.expectBeforeRoute(try RawHTTP.request(port: relay.port, method: "POST", path: "/v1/devices",
                                                   headers: [("Content-Length", String(2 * 1024 * 1024 + 1))]),
                               is: 413, code: "too_large", "a body over 2 MiB")
        spec.expectBeforeRoute(try RawHTTP.exchange(port: relay.port, request: Self.bytes(
            "POST /v1/devices HTTP/1.1\r\nHost: 127.0.0.1:\(relay.port)\r\nContent-Length: 0\r\nContent-Length: 0\r\n"
                + "Connection: close\r\n\r\n")), is: 400, code: "bad_request", "two Content-Length")

        // Invite-only registration.
        let invites = try RelayServer(dataDirectory: directory.file("invites")) { $0.registration = .invite }
        defer { invites.stop() }
        spec.expect("POST", "/v1/devices", try invites.route("POST", "/v1/devices"), is: 403, code: "invite_required")
        spec.expect("POST", "/v1/devices", try invites.route("POST", "/v1/devices", headers: Self.json,
                                                             body: Self.bytes("{\"invite\":\"jri_wrong\"}")),
                    is: 403, code: "invite_invalid")
        spec.expectEveryOperationSucceeded()
    }
}
