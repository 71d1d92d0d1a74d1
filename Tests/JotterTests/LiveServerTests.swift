import Foundation
import Synchronization
import Testing
@testable import Jotter

/// Jotter as a browser, `curl` or a mail client would notice it. Every test starts its own server on its
/// own data directory and stops it before returning. Most answer at the router (`TestServer.route`):
/// the request policy and routes exactly as served, without a socket. Those about the HTTP layer
/// itself (framing, the body cap, chunked uploads, what it refuses before routing) and the `jotter`
/// binary go over a real socket.
@Suite struct LiveServerTests {
    // MARK: Helpers

    static let formType = "application/x-www-form-urlencoded"

    /// A POST answered at the router.
    static func post(_ server: TestServer, _ path: String = "/send", type: String?, body: [UInt8],
                     headers: [(String, String)] = []) throws -> RawHTTP.Response {
        try server.route("POST", path, headers: (type.map { [("Content-Type", $0)] } ?? []) + headers, body: body)
    }

    static func post(_ server: TestServer, _ path: String = "/send", type: String?, _ text: String,
                     headers: [(String, String)] = []) throws -> RawHTTP.Response {
        try post(server, path, type: type, body: Array(text.utf8), headers: headers)
    }

    /// A POST over a socket, with `Content-Length`: for what the HTTP layer decides (the body cap).
    static func postOnTheWire(_ server: TestServer, _ path: String = "/send", type: String?, body: [UInt8],
                              headers: [(String, String)] = []) throws -> RawHTTP.Response {
        try server.request("POST", path, headers: (type.map { [("Content-Type", $0)] } ?? []) + headers, body: body)
    }

    static func postOnTheWire(_ server: TestServer, _ path: String = "/send", type: String?, _ text: String,
                              headers: [(String, String)] = []) throws -> RawHTTP.Response {
        try postOnTheWire(server, path, type: type, body: Array(text.utf8), headers: headers)
    }

    /// The delivered file for message `id`, once it is in `new/`.
    static func deliveredFile(_ server: TestServer, id: String, timeout: Double = 10) -> String? {
        var found: String?
        _ = server.waitUntil(timeout: timeout) {
            found = server.deliveredFiles().first { $0.contains(".\(id).") }
            return found != nil
        }
        return found
    }

    /// The delivered message for `id`, as Python's `email` package reads it.
    static func deliveredMessage(_ server: TestServer, id: String,
                                 sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
        let file = try #require(deliveredFile(server, id: id), "memo \(id) never arrived in the Maildir",
                                sourceLocation: sourceLocation)
        return try Python.parseMessage(atPath: file)
    }

    /// The body as a mail client shows it: the message's last line break is the format's, not the memo's.
    static func expectDelivered(_ message: [String: Any], subject: String, body: String, id: String,
                                sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(message["subject"] as? String == subject, sourceLocation: sourceLocation)
        // Line breaks as a reader shows them (a base64 body carries the canonical CRLF inside).
        let delivered = (message["body"] as? String)?.replacingOccurrences(of: "\r\n", with: "\n")
        #expect(delivered == body || delivered == body + "\n",
                "delivered body \(String(describing: delivered)) differs from \(body.debugDescription)",
                sourceLocation: sourceLocation)
        #expect((message["message_id"] as? String)?.hasPrefix("<\(id)@") == true, sourceLocation: sourceLocation)
        #expect(message["content_type"] as? String == "text/plain", sourceLocation: sourceLocation)
        #expect(message["charset"] as? String == "utf-8", sourceLocation: sourceLocation)
        #expect((message["defects"] as? [Any])?.isEmpty == true, "defects: \(message["defects"] ?? "none")",
                sourceLocation: sourceLocation)
    }

    static func object(_ response: RawHTTP.Response) -> [String: Any] {
        (response.json as? [String: Any]) ?? [:]
    }

    static func history(_ server: TestServer, _ query: String = "") throws -> [[String: Any]] {
        let response = try server.route("GET", "/history" + query)
        #expect(response.status == 200)
        return (response.json as? [[String: Any]]) ?? []
    }

    static func counts(_ server: TestServer) throws -> [String: Int] {
        let response = try server.route("GET", "/healthz")
        #expect(response.status == 200)
        return (object(response)["outbox"] as? [String: Int]) ?? [:]
    }

    /// `{"error":{"code","message"}}` with the given status and code.
    static func expectError(_ response: RawHTTP.Response, status: Int, code: String,
                            sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.status == status, sourceLocation: sourceLocation)
        #expect(response.header("Content-Type")?.hasPrefix("application/json") == true, sourceLocation: sourceLocation)
        let error = object(response)["error"] as? [String: Any]
        #expect(error?["code"] as? String == code, "body: \(response.text)", sourceLocation: sourceLocation)
        #expect((error?["message"] as? String)?.isEmpty == false, sourceLocation: sourceLocation)
        #expect(response.header("X-Message-Id") == nil, sourceLocation: sourceLocation)
    }

    /// The headers every response carries.
    static func expectSecurityHeaders(_ response: RawHTTP.Response, _ what: String,
                                      sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.header("Cache-Control") == "no-store", "\(what)", sourceLocation: sourceLocation)
        #expect(response.header("X-Content-Type-Options") == "nosniff", "\(what)", sourceLocation: sourceLocation)
        #expect(response.header("Referrer-Policy") == "no-referrer", "\(what)", sourceLocation: sourceLocation)
        let policy = response.header("Content-Security-Policy")
        #expect(policy != nil, "\(what) has no Content-Security-Policy", sourceLocation: sourceLocation)
        if let policy {
            #expect(!policy.lowercased().contains("http:") && !policy.lowercased().contains("https:"),
                    "\(what): CSP names an origin: \(policy)", sourceLocation: sourceLocation)
            #expect(!policy.contains("*"), "\(what): CSP has a wildcard: \(policy)", sourceLocation: sourceLocation)
        }
        for name in ["Cache-Control", "X-Content-Type-Options", "Referrer-Policy", "Content-Security-Policy"] {
            // Once: a response built ahead (the page) is not finished a second time per request.
            #expect(response.headers(name).count == 1, "\(what): \(name) \(response.headers(name).count) times",
                    sourceLocation: sourceLocation)
        }
        #expect(response.headers("Set-Cookie").isEmpty, "\(what) sets a cookie", sourceLocation: sourceLocation)
        #expect(!response.headers.contains { $0.name.lowercased().hasPrefix("access-control-") },
                "\(what) has a CORS header", sourceLocation: sourceLocation)
    }

    /// The memo's words never reach the log.
    static func expectNoLeak(_ server: TestServer, _ canaries: [String],
                             sourceLocation: SourceLocation = #_sourceLocation) {
        let logs = server.logs.captured
        for canary in canaries where !canary.isEmpty {
            #expect(!logs.contains(canary), "the log holds \(canary)", sourceLocation: sourceLocation)
        }
    }

    /// Nothing was stored: no row, no delivery.
    static func expectNothingStored(_ server: TestServer, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try history(server).isEmpty, sourceLocation: sourceLocation)
        #expect(server.deliveredFiles().isEmpty, sourceLocation: sourceLocation)
    }

    /// A hand-built chunked request.
    static func chunked(port: Int, path: String = "/send", type: String, chunks: [[UInt8]],
                        headers: [String] = []) -> [UInt8] {
        var head = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: \(type)\r\n"
        for header in headers { head += header + "\r\n" }
        head += "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        var bytes = Array(head.utf8)
        for chunk in chunks where !chunk.isEmpty {
            bytes += Array(String(chunk.count, radix: 16).utf8) + [13, 10] + chunk + [13, 10]
        }
        return bytes + Array("0\r\n\r\n".utf8)
    }

    static func canary(_ label: String) -> String {
        "\(label)-canary-\(UUID().uuidString.prefix(8).lowercased())"
    }

    // MARK: Every body form arrives intact

    /// One way of sending a memo, and what must arrive.
    struct MemoForm: Sendable, CustomTestStringConvertible {
        var name: String
        var path = "/send"
        var type: String?
        var body: [UInt8]
        var subject: String
        var text: String
        var canary: String
        var testDescription: String { name }
    }

    static let multipartBody = Array("""
        --XyZzY42\r
        Content-Disposition: form-data; name="subject"\r
        \r
        Multipart wombat-5\r
        --XyZzY42\r
        Content-Disposition: form-data; name="ignored"\r
        \r
        not part of the memo\r
        --XyZzY42\r
        Content-Disposition: form-data; name="body"; filename="memo.txt"\r
        Content-Type: text/plain\r
        \r
        first line\r
        second line\r
        --XyZzY42--\r

        """.utf8)

    static let forms: [MemoForm] = [
        MemoForm(name: "curl -d (form type, no fields)", type: formType, body: Array("buy milk wombat-1".utf8),
                 subject: "buy milk wombat-1", text: "buy milk wombat-1", canary: "wombat-1"),
        MemoForm(name: "form fields body and subject", type: formType,
                 body: Array("subject=Groceries+wombat-2&body=buy%20milk%0D%0Aand+eggs+%26+ham%E2%9C%93&x=1".utf8),
                 subject: "Groceries wombat-2", text: "buy milk\nand eggs & ham✓", canary: "wombat-2"),
        MemoForm(name: "text/plain", type: "text/plain; charset=utf-8",
                 body: Array("Käse ✓ wombat-3\r\nsecond line\n".utf8),
                 subject: "Käse ✓ wombat-3", text: "Käse ✓ wombat-3\nsecond line\n", canary: "wombat-3"),
        MemoForm(name: "JSON", type: "application/json",
                 body: Array(#"{"subject":"Grüße wombat-4","body":"line one\nline \"two\"\tend"}"#.utf8),
                 subject: "Grüße wombat-4", text: "line one\nline \"two\"\tend", canary: "wombat-4"),
        MemoForm(name: "multipart with a file part", type: "multipart/form-data; boundary=XyZzY42",
                 body: multipartBody, subject: "Multipart wombat-5", text: "first line\nsecond line",
                 canary: "wombat-5"),
        MemoForm(name: "POST / as text/plain", path: "/", type: "text/plain",
                 body: Array("posted to root wombat-6".utf8),
                 subject: "posted to root wombat-6", text: "posted to root wombat-6", canary: "wombat-6"),
        MemoForm(name: "POST / with form fields", path: "/", type: formType,
                 body: Array("body=root+form+wombat-7".utf8),
                 subject: "root form wombat-7", text: "root form wombat-7", canary: "wombat-7"),
        MemoForm(name: "no Content-Type", type: nil, body: Array("untyped wombat-8".utf8),
                 subject: "untyped wombat-8", text: "untyped wombat-8", canary: "wombat-8"),
        MemoForm(name: "long first line gets a cut subject", type: "application/json",
                 body: Array((#"{"body":"This is a rather long first line that goes on well past sixty "#
                                + #"characters wombat-9\nmore"}"#).utf8),
                 subject: "This is a rather long first line that goes on well past…",
                 text: "This is a rather long first line that goes on well past sixty characters wombat-9\nmore",
                 canary: "wombat-9"),
        MemoForm(name: "mostly non-ASCII (base64 body)", type: "text/plain; charset=UTF-8",
                 body: Array("Привет мир wombat-10\nвторая строка".utf8),
                 subject: "Привет мир wombat-10", text: "Привет мир wombat-10\nвторая строка",
                 canary: "wombat-10"),
    ]

    @Test(arguments: forms)
    func memoIsAcceptedAndDeliveredIntact(form: MemoForm) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let response = try Self.post(server, form.path, type: form.type, body: form.body)
        #expect(response.status == 204, "\(response.text)")
        #expect(response.body.isEmpty)
        let id = try #require(response.header("X-Message-Id"))
        #expect(Evidence.isLowercaseUUID(id))
        Self.expectSecurityHeaders(response, form.name)
        let message = try Self.deliveredMessage(server, id: id)
        Self.expectDelivered(message, subject: form.subject, body: form.text, id: id)
        #expect(server.deliveredFiles().count == 1)
        Self.expectNoLeak(server, [form.canary, form.subject])
    }

    @Test func chunkedUploadIsAcceptedAndDeliveredIntact() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let text = Array("chunked ✓ upload wombat-c\nsecond chunked line".utf8)
        // Split inside the three bytes of ✓ too: chunks are bytes, not characters.
        let chunks = [Array(text[0..<9]), Array(text[9..<10]), Array(text[10..<30]), Array(text[30...])]
        let response = try RawHTTP.exchange(
            port: server.port,
            request: Self.chunked(port: server.port, type: "text/plain; charset=utf-8", chunks: chunks))
        #expect(response.status == 204, "\(response.text)")
        let id = try #require(response.header("X-Message-Id"))
        #expect(Evidence.isLowercaseUUID(id))
        let message = try Self.deliveredMessage(server, id: id)
        Self.expectDelivered(message, subject: "chunked ✓ upload wombat-c",
                             body: "chunked ✓ upload wombat-c\nsecond chunked line", id: id)
        Self.expectNoLeak(server, ["wombat-c"])
    }

    @Test func chunkedJSONToTheRootIsAccepted() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let json = Array(#"{"subject":"chunky wombat-j","body":"streamed"}"#.utf8)
        let chunks = stride(from: 0, to: json.count, by: 7).map { Array(json[$0..<min($0 + 7, json.count)]) }
        let response = try RawHTTP.exchange(
            port: server.port,
            request: Self.chunked(port: server.port, path: "/", type: "application/json", chunks: chunks))
        #expect(response.status == 204, "\(response.text)")
        let id = try #require(response.header("X-Message-Id"))
        Self.expectDelivered(try Self.deliveredMessage(server, id: id), subject: "chunky wombat-j", body: "streamed",
                             id: id)
    }

    @Test func browserFormNavigationIsRedirectedToThePage() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let canary = Self.canary("navigate")
        let response = try Self.post(server, "/", type: Self.formType, "body=\(canary)",
                                     headers: [("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Site", "same-origin"),
                                               ("Accept", "text/html,application/xhtml+xml")])
        #expect(response.status == 303)
        #expect(response.header("Location") == "/")
        Self.expectSecurityHeaders(response, "303")
        let id = try #require(response.header("X-Message-Id"))
        Self.expectDelivered(try Self.deliveredMessage(server, id: id), subject: canary, body: canary, id: id)
        Self.expectNoLeak(server, [canary])
    }

    /// The no-JavaScript form always sends `subject=`; a blank subject means "derive one", and an empty
    /// memo sends the person back to the page instead of showing a JSON error.
    @Test func plainFormWithBlankSubjectAndEmptyMemo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let navigate = [("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Site", "same-origin"),
                        ("Accept", "text/html,application/xhtml+xml")]
        let sent = try Self.post(server, "/", type: Self.formType, "subject=+&body=first+line%0Asecond", headers: navigate)
        #expect(sent.status == 303)
        let id = try #require(sent.header("X-Message-Id"))
        Self.expectDelivered(try Self.deliveredMessage(server, id: id), subject: "first line",
                             body: "first line\nsecond", id: id)
        let empty = try Self.post(server, "/", type: Self.formType, "subject=&body=", headers: navigate)
        #expect(empty.status == 303)
        #expect(empty.header("Location") == "/")
        #expect(empty.header("X-Message-Id") == nil)
        #expect(try server.outbox.history.counts().values.reduce(0, +) == 1, "nothing stored for the empty memo")
    }

    /// Without JavaScript, a double click on Send posts the form twice, and the browser shows only the
    /// second answer: the same memo from the same client within seconds is one memo (the second post is
    /// answered as its replay). Scripts (no navigation) still store every post, and another memo is another.
    @Test func aDoubleClickedPlainFormStoresOneMemo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let navigate = [("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Site", "same-origin"),
                        ("Accept", "text/html,application/xhtml+xml")]
        let first = try Self.post(server, "/", type: Self.formType, "subject=&body=clicked+twice", headers: navigate)
        let second = try Self.post(server, "/", type: Self.formType, "subject=&body=clicked+twice", headers: navigate)
        #expect(first.status == 303 && second.status == 303)
        let id = try #require(first.header("X-Message-Id"))
        #expect(second.header("X-Message-Id") == id, "the second post is the first one's replay")
        let other = try Self.post(server, "/", type: Self.formType, "subject=&body=another+memo", headers: navigate)
        #expect(other.status == 303 && other.header("X-Message-Id") != id)
        for _ in 0..<2 {
            #expect(try Self.post(server, "/send", type: Self.formType, "body=clicked+twice").status == 204)
        }
        #expect(try server.outbox.history.counts().values.reduce(0, +) == 4, "one form memo, another, two from a script")
    }

    /// What the form's double-click guard remembers: per client and memo, for its window only.
    @Test func formPostsShareAKeyOnlyForTheSameClientAndMemoWithinTheWindow() throws {
        let clock = ManualClock()
        let recent = RecentFormPosts(windowMilliseconds: 10_000, clock: clock)
        let key = try recent.key(client: "192.0.2.1", subject: nil, body: "memo")
        #expect(try recent.key(client: "192.0.2.1", subject: nil, body: "memo") == key)
        #expect(try recent.key(client: "192.0.2.2", subject: nil, body: "memo") != key, "another client")
        #expect(try recent.key(client: "192.0.2.1", subject: "", body: "memo") != key, "another subject")
        #expect(try recent.key(client: "192.0.2.1", subject: nil, body: "memo ") != key, "another body")
        clock.advance(milliseconds: 9_999)
        #expect(try recent.key(client: "192.0.2.1", subject: nil, body: "memo") == key)
        clock.advance(milliseconds: 1)
        #expect(try recent.key(client: "192.0.2.1", subject: nil, body: "memo") != key, "sent again later: a new memo")
    }

    @Test func fetchFromThePageGets204NotARedirect() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let response = try Self.post(server, type: "application/json", #"{"body":"from fetch"}"#,
                                     headers: [("Sec-Fetch-Mode", "cors"), ("Sec-Fetch-Site", "same-origin")])
        #expect(response.status == 204)
        #expect(response.header("Location") == nil)
    }

    // MARK: Bad input: a clear error, nothing stored, nothing logged

    struct BadMemo: Sendable, CustomTestStringConvertible {
        var name: String
        var type: String?
        var body: [UInt8]
        var headers: [(String, String)] = []
        var status: Int
        var code: String
        var canary = ""
        var testDescription: String { name }
    }

    static let badMemos: [BadMemo] = [
        BadMemo(name: "empty text/plain", type: "text/plain", body: [], status: 400, code: "empty"),
        BadMemo(name: "blank text/plain", type: "text/plain", body: Array(" \r\n\t \n".utf8),
                status: 400, code: "empty"),
        BadMemo(name: "empty curl -d", type: formType, body: [], status: 400, code: "empty"),
        BadMemo(name: "empty form fields", type: formType, body: Array("body=&subject=".utf8),
                status: 400, code: "empty"),
        BadMemo(name: "blank form body", type: formType, body: Array("body=+%20+%0A".utf8), status: 400, code: "empty"),
        BadMemo(name: "empty JSON object", type: "application/json", body: Array("{}".utf8),
                status: 400, code: "empty"),
        BadMemo(name: "empty JSON fields", type: "application/json", body: Array(#"{"body":"","subject":" "}"#.utf8),
                status: 400, code: "empty"),
        BadMemo(name: "empty multipart body", type: "multipart/form-data; boundary=b0",
                body: Array("--b0\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\n\r\n--b0--\r\n".utf8),
                status: 400, code: "empty"),
        BadMemo(name: "empty without a type", type: nil, body: [], status: 400, code: "empty"),
        BadMemo(name: "text/plain not UTF-8", type: "text/plain", body: [0x77, 0x6F, 0x6D, 0xFF, 0xFE, 0x62],
                status: 400, code: "undecodable"),
        BadMemo(name: "form field not UTF-8", type: formType, body: Array("body=abc%FF%FEdef-wombat-e1".utf8),
                status: 400, code: "undecodable", canary: "wombat-e1"),
        BadMemo(name: "bad percent escape", type: formType, body: Array("body=wombat-e2%ZZ".utf8),
                status: 400, code: "undecodable", canary: "wombat-e2"),
        BadMemo(name: "not JSON", type: "application/json", body: Array("wombat-e3 is not json".utf8),
                status: 400, code: "undecodable", canary: "wombat-e3"),
        BadMemo(name: "JSON array", type: "application/json", body: Array(#"["wombat-e4"]"#.utf8),
                status: 400, code: "undecodable", canary: "wombat-e4"),
        BadMemo(name: "JSON body not a string", type: "application/json",
                body: Array(#"{"body":5,"subject":"wombat-e5"}"#.utf8), status: 400, code: "undecodable",
                canary: "wombat-e5"),
        BadMemo(name: "multipart without boundary", type: "multipart/form-data",
                body: Array("--b\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\nwombat-e6\r\n--b--\r\n".utf8),
                status: 400, code: "undecodable", canary: "wombat-e6"),
        BadMemo(name: "multipart without delimiters", type: "multipart/form-data; boundary=zz",
                body: Array("wombat-e7 but no parts".utf8), status: 400, code: "undecodable", canary: "wombat-e7"),
        BadMemo(name: "multipart without a body field", type: "multipart/form-data; boundary=zz",
                body: Array(("--zz\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\n"
                             + "wombat-e8\r\n--zz--\r\n").utf8),
                status: 400, code: "undecodable", canary: "wombat-e8"),
        BadMemo(name: "application/xml", type: "application/xml", body: Array("<memo>wombat-u1</memo>".utf8),
                status: 415, code: "unsupported_media_type", canary: "wombat-u1"),
        BadMemo(name: "image/png", type: "image/png", body: [0x89, 0x50, 0x4E, 0x47] + Array("wombat-u2".utf8),
                status: 415, code: "unsupported_media_type", canary: "wombat-u2"),
        BadMemo(name: "text/html", type: "text/html", body: Array("<p>wombat-u3</p>".utf8),
                status: 415, code: "unsupported_media_type", canary: "wombat-u3"),
        BadMemo(name: "text/plain in Latin-1", type: "text/plain; charset=iso-8859-1", body: Array("wombat-u4".utf8),
                status: 415, code: "unsupported_charset", canary: "wombat-u4"),
        BadMemo(name: "gzip-compressed", type: "text/plain", body: Array("wombat-z1".utf8),
                headers: [("Content-Encoding", "gzip")], status: 415, code: "unsupported_encoding", canary: "wombat-z1"),
        BadMemo(name: "brotli, said of a plain body", type: "text/plain", body: Array("wombat-z2".utf8),
                headers: [("Content-Encoding", "br")], status: 415, code: "unsupported_encoding", canary: "wombat-z2"),
        BadMemo(name: "octet-stream", type: "application/octet-stream", body: Array("wombat-u5".utf8),
                status: 415, code: "unsupported_media_type", canary: "wombat-u5"),
        BadMemo(name: "Idempotency-Key too long", type: "text/plain", body: Array("wombat-k1".utf8),
                headers: [("Idempotency-Key", String(repeating: "k", count: 257))],
                status: 400, code: "invalid_idempotency_key", canary: "wombat-k1"),
        BadMemo(name: "two Idempotency-Keys", type: "text/plain", body: Array("wombat-k2".utf8),
                headers: [("Idempotency-Key", "one"), ("Idempotency-Key", "two")],
                status: 400, code: "invalid_idempotency_key", canary: "wombat-k2"),
        BadMemo(name: "Idempotency-Key with a space", type: "text/plain", body: Array("wombat-k3".utf8),
                headers: [("Idempotency-Key", "has space")],
                status: 400, code: "invalid_idempotency_key", canary: "wombat-k3"),
    ]

    @Test(arguments: badMemos)
    func badMemoGetsAClearErrorAndIsNotStored(bad: BadMemo) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let response = try Self.post(server, type: bad.type, body: bad.body, headers: bad.headers)
        Self.expectError(response, status: bad.status, code: bad.code)
        Self.expectSecurityHeaders(response, bad.name)
        if !bad.canary.isEmpty {
            #expect(!response.text.contains(bad.canary), "the error echoes the memo")
        }
        try Self.expectNothingStored(server)
        #expect(try Self.counts(server).values.allSatisfy { $0 == 0 })
        Self.expectNoLeak(server, [bad.canary])
    }

    // MARK: Body size cap (the HTTP layer enforces it while reading: over a socket)

    @Test func contentLengthOverTheCapIs413() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 4096)
        defer { server.stop() }
        let canary = Self.canary("huge")
        let big = Array((canary + " " + String(repeating: "x", count: 5000)).utf8)
        let response = try Self.postOnTheWire(server, type: "text/plain", body: big)
        Self.expectError(response, status: 413, code: "too_large")
        #expect(!response.text.contains(canary))
        try Self.expectNothingStored(server)
        Self.expectNoLeak(server, [canary])
    }

    @Test func bodyExactlyAtTheCapIsAcceptedAndOneByteMoreIsNot() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 4096)
        defer { server.stop() }
        let fits = Array(String(repeating: "a", count: 4096).utf8)
        let accepted = try Self.postOnTheWire(server, type: "text/plain", body: fits)
        #expect(accepted.status == 204)
        let id = try #require(accepted.header("X-Message-Id"))
        let message = try Self.deliveredMessage(server, id: id)
        #expect((message["body"] as? String)?.hasPrefix(String(repeating: "a", count: 4096)) == true)
        let refused = try Self.postOnTheWire(server, type: "text/plain", body: fits + [0x61])
        Self.expectError(refused, status: 413, code: "too_large")
        #expect(try Self.history(server).count == 1)
    }

    @Test func chunkedBodyGrowingOverTheCapIs413AndTheServerCarriesOn() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 4096)
        defer { server.stop() }
        let canary = Self.canary("chunkhuge")
        let chunk = Array((canary + String(repeating: "y", count: 1500)).utf8)
        let request = Self.chunked(port: server.port, type: "text/plain", chunks: [chunk, chunk, chunk, chunk])
        let response = try RawHTTP.exchange(port: server.port, request: request)
        Self.expectError(response, status: 413, code: "too_large")
        #expect(response.header("X-Message-Id") == nil)
        #expect(!response.text.contains(canary))
        try Self.expectNothingStored(server)
        Self.expectNoLeak(server, [canary])
        #expect(try Self.postOnTheWire(server, type: "text/plain", "after the big one").status == 204,
                "the server carries on")
    }

    @Test func chunkedBodyExactlyAtTheCapIsAccepted() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 4096)
        defer { server.stop() }
        let chunks = Array(repeating: Array(repeating: UInt8(ascii: "b"), count: 1024), count: 4)
        let request = Self.chunked(port: server.port, type: "text/plain", chunks: chunks)
        let response = try RawHTTP.exchange(port: server.port, request: request)
        #expect(response.status == 204, "\(response.text)")
    }

    // MARK: Idempotency over HTTP

    @Test func retryWithTheSameKeyGetsTheSameIdAndOneDelivery() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let canary = Self.canary("retry")
        let headers = [("Idempotency-Key", "page-outbox-7f3a")]
        let first = try Self.post(server, type: "text/plain", canary, headers: headers)
        let second = try Self.post(server, type: "text/plain", canary, headers: headers)
        #expect(first.status == 204)
        #expect(second.status == 204)
        let id = try #require(first.header("X-Message-Id"))
        #expect(second.header("X-Message-Id") == id)
        _ = try Self.deliveredMessage(server, id: id)
        // After delivery the same retry still gets the same answer and sends nothing.
        let third = try Self.post(server, type: "text/plain", canary, headers: headers)
        #expect(third.status == 204)
        #expect(third.header("X-Message-Id") == id)
        #expect(try server.finishDeliveries())
        #expect(server.deliveredFiles().count == 1)
        #expect(try Self.history(server).count == 1)
        #expect(try Self.counts(server)["sent"] == 1)
        Self.expectNoLeak(server, [canary])
    }

    @Test func sameKeyWithAnotherMemoIs409() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let original = Self.canary("original")
        let other = Self.canary("other")
        let headers = [("Idempotency-Key", "key-409")]
        let first = try Self.post(server, type: "application/json", #"{"subject":"s","body":"\#(original)"}"#,
                                  headers: headers)
        #expect(first.status == 204)
        let id = try #require(first.header("X-Message-Id"))
        let differentBody = try Self.post(server, type: "application/json", #"{"subject":"s","body":"\#(other)"}"#,
                                          headers: headers)
        Self.expectError(differentBody, status: 409, code: "idempotency_conflict")
        Self.expectSecurityHeaders(differentBody, "409")
        let differentSubject = try Self.post(server, type: "application/json",
                                             #"{"subject":"t","body":"\#(original)"}"#, headers: headers)
        Self.expectError(differentSubject, status: 409, code: "idempotency_conflict")
        Self.expectDelivered(try Self.deliveredMessage(server, id: id), subject: "s", body: original, id: id)
        #expect(try Self.history(server).count == 1)
        #expect(server.deliveredFiles().count == 1)
        Self.expectNoLeak(server, [original, other])
    }

    // MARK: Security headers and the page

    @Test func everyResponseCarriesTheSecurityHeaders() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 4096)
        defer { server.stop() }
        var responses: [(String, Int, RawHTTP.Response)] = []
        func check(_ what: String, _ status: Int, _ response: RawHTTP.Response) {
            #expect(response.status == status, "\(what): \(response.text)")
            responses.append((what, status, response))
        }
        let sent = try Self.post(server, type: "text/plain", "a memo for the headers test")
        check("204 POST /send", 204, sent)
        let id = sent.header("X-Message-Id") ?? ""
        check("200 GET /", 200, try server.route("GET", "/"))
        check("200 GET /history", 200, try server.route("GET", "/history"))
        check("200 GET /history/{id}", 200, try server.route("GET", "/history/\(id)"))
        check("200 GET /healthz", 200, try server.route("GET", "/healthz"))
        check("303 form navigation", 303, try Self.post(server, "/", type: Self.formType, "body=nav",
                                                          headers: [("Sec-Fetch-Mode", "navigate")]))
        check("400 empty", 400, try Self.post(server, type: "text/plain", ""))
        check("400 bad limit", 400, try server.route("GET", "/history?limit=0"))
        check("404 unknown path", 404, try server.route("GET", "/nowhere"))
        check("404 unknown id", 404, try server.route("GET", "/history/\(UUID().uuidString.lowercased())"))
        let notAllowed = try server.route("DELETE", "/send")
        check("405 DELETE /send", 405, notAllowed)
        #expect(notAllowed.header("Allow")?.contains("POST") == true)
        check("405 GET /send", 405, try server.route("GET", "/send"))
        _ = try Self.post(server, type: "text/plain", "keyed", headers: [("Idempotency-Key", "hdr")])
        check("409 conflict", 409, try Self.post(server, type: "text/plain", "other",
                                                 headers: [("Idempotency-Key", "hdr")]))
        check("415 unsupported", 415, try Self.post(server, type: "application/xml", "<a/>"))
        for (what, _, response) in responses {
            Self.expectSecurityHeaders(response, what)
        }
    }

    /// The HTTP layer's own refusals, given before the router sees the request: over a socket.
    @Test
    func responsesRefusedBeforeRoutingCarryTheSecurityHeadersToo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 4096)
        defer { server.stop() }
        let tooLarge = try Self.postOnTheWire(server, type: "text/plain", body: Array(repeating: 0x61, count: 5000))
        #expect(tooLarge.status == 413)
        Self.expectSecurityHeaders(tooLarge, "413 (Content-Length)")
        let chunk = Array(repeating: UInt8(ascii: "z"), count: 2000)
        let chunkedTooLarge = try RawHTTP.exchange(
            port: server.port,
            request: Self.chunked(port: server.port, type: "text/plain", chunks: [chunk, chunk, chunk]))
        #expect(chunkedTooLarge.status == 413)
        Self.expectSecurityHeaders(chunkedTooLarge, "413 (chunked)")
        let twoLengths = try server.raw(
            "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n"
                + "Connection: close\r\n\r\nabc")
        #expect(twoLengths.status == 400)
        Self.expectSecurityHeaders(twoLengths, "400 (framing)")
    }

    /// HEAD is routed as GET; the HTTP layer sends the headers without the body (over a socket: at the
    /// router a HEAD still has its body).
    @Test func headGetsThePageHeadersWithoutTheBody() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let get = try server.request("GET", "/")
        let head = try server.request("HEAD", "/")
        #expect(head.status == 200)
        #expect(head.body.isEmpty)
        #expect(head.header("Content-Length") == String(get.body.count), "the length the GET would have")
        #expect(head.header("Content-Type") == get.header("Content-Type"))
        #expect(head.header("Content-Security-Policy") == get.header("Content-Security-Policy"))
        Self.expectSecurityHeaders(head, "HEAD /")
        // Each variant of the page is built once, at start: asked for again, plain or compressed, it
        // comes with the same headers, each of them once.
        for round in 1...2 {
            let plain = try server.request("GET", "/")
            let compressed = try server.request("GET", "/", headers: [("Accept-Encoding", "gzip")])
            #expect(compressed.header("Content-Encoding") == "gzip")
            #expect(plain.header("Content-Encoding") == nil)
            Self.expectSecurityHeaders(plain, "GET / (\(round))")
            Self.expectSecurityHeaders(compressed, "GET / gzip (\(round))")
            #expect(plain.body == get.body)
        }
    }

    @Test func pageFocusesTheTextareaAndAllowsOnlyItsOwnInlineCode() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let page = try server.route("GET", "/")
        #expect(page.status == 200)
        #expect(page.header("Content-Type")?.hasPrefix("text/html") == true)
        let html = page.text
        let textarea = try #require(html.range(of: #"<textarea[^>]*>"#, options: .regularExpression).map { html[$0] })
        #expect(textarea.range(of: #"\sautofocus[\s>=]"#, options: .regularExpression) != nil, "\(textarea)")
        let policy = try #require(page.header("Content-Security-Policy"))
        #expect(!policy.contains("unsafe-inline"))
        #expect(!policy.contains("unsafe-eval"))
        let directives = Dictionary(policy.split(separator: ";").map { directive -> (String, [String]) in
            let words = directive.split(separator: " ").map(String.init)
            return (words.first ?? "", Array(words.dropFirst()))
        }, uniquingKeysWith: { first, _ in first })
        let scriptSources = try #require(directives["script-src"])
        #expect(!scriptSources.isEmpty)
        #expect(scriptSources.allSatisfy { $0.hasPrefix("'sha256-") && $0.hasSuffix("'") }, "\(scriptSources)")
        #expect(directives["default-src"] == ["'none'"])
        Self.expectSecurityHeaders(page, "GET /")

        // A second, independent reader computes the hashes the browser will check.
        let hashes = try Python.run(#"""
            import base64, hashlib, json, re, sys
            html = sys.stdin.buffer.read().decode('utf-8')
            def contents(tag):
                return re.findall(r'<' + tag + r'[^>]*>(.*?)</' + tag + '>', html, re.S)
            def hashes(tag):
                return ["'sha256-" + base64.b64encode(hashlib.sha256(m.encode()).digest()).decode() + "'"
                        for m in contents(tag)]
            markup = re.sub(r'<(script|style)[^>]*>.*?</\1>', '', html, flags=re.S)
            handlers = re.findall(r'<[^>]*\son[a-z]+\s*=', markup)
            print(json.dumps({"script": hashes("script"), "style": hashes("style"), "handlers": handlers}))
            """#, input: page.body)
        let computed = try #require(try JSONSerialization.jsonObject(with: Data(hashes.utf8)) as? [String: [String]])
        #expect(Set(computed["script"] ?? []) == Set(scriptSources), "every inline script runs, nothing else")
        #expect(Set(computed["style"] ?? []).isSubset(of: Set(directives["style-src"] ?? [])))
        #expect(computed["handlers"] == [], "inline event handlers would be blocked by the CSP")
    }

    // MARK: History

    @Test func historyFollowsAMemoFromQueuedToSent() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.block)
        let server = try TestServer(dataDirectory: directory.file("data"), transport: transport) {
            $0.delivery.slots = 1
        }
        defer {
            transport.release()
            server.stop()
        }
        let firstCanary = Self.canary("first")
        let secondCanary = Self.canary("second")
        let first = try Self.post(server, type: "application/json",
                                  #"{"subject":"First \#(firstCanary)","body":"\#(firstCanary) body"}"#)
        let firstID = try #require(first.header("X-Message-Id"))
        #expect(transport.waitUntilBlocked())
        let second = try Self.post(server, type: "text/plain", "\(secondCanary) waits its turn")
        let secondID = try #require(second.header("X-Message-Id"))

        let listed = try Self.history(server)
        #expect(listed.compactMap { $0["id"] as? String } == [secondID, firstID], "newest first")
        #expect(listed.first?["status"] as? String == "queued")
        #expect(listed.last?["status"] as? String == "sending")
        let sending = Self.object(try server.route("GET", "/history/\(firstID)"))
        #expect(sending["id"] as? String == firstID)
        #expect(sending["status"] as? String == "sending")
        #expect(sending["attempts"] as? Int == 1)
        #expect(sending["subject"] as? String == "First \(firstCanary)")
        #expect(sending["delivered_at"] is NSNull)
        #expect(sending["created_at"] is String)
        let queued = Self.object(try server.route("GET", "/history/\(secondID)"))
        #expect(queued["status"] as? String == "queued")
        #expect(queued["attempts"] as? Int == 0)
        #expect(queued["last_error"] is NSNull)
        #expect(queued["next_attempt_at"] is String)
        #expect(queued["body"] == nil, "history never shows the body")
        let health = try Self.counts(server)
        #expect(health["queued"] == 1)
        #expect(health["sending"] == 1)
        #expect(health["sent"] == 0)

        transport.release()
        #expect(try server.waitUntil {
            try Self.history(server).allSatisfy { $0["status"] as? String == "sent" }
        })
        for id in [firstID, secondID] {
            let sent = Self.object(try server.route("GET", "/history/\(id)"))
            #expect(sent["status"] as? String == "sent")
            #expect(sent["delivered_at"] is String)
            #expect(sent["next_attempt_at"] is NSNull)
            #expect(sent["last_error"] is NSNull)
            #expect(sent["attempts"] as? Int == 1)
        }
        #expect(try Self.counts(server)["sent"] == 2)
        let delivered = transport.messages
        #expect(delivered.map(\.id) == [firstID, secondID])
        #expect(delivered.first?.body == "\(firstCanary) body")
        #expect(delivered.last?.body == "\(secondCanary) waits its turn")
        Self.expectNoLeak(server, [firstCanary, secondCanary])
    }

    @Test func failedAttemptShowsItsKindAndIsRetried() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.fail(DeliveryFailure(.serverError, permanent: false)))
        let server = try TestServer(dataDirectory: directory.file("data"), transport: transport)
        defer {
            transport.release()
            server.stop()
        }
        let response = try Self.post(server, type: "text/plain", "retry me")
        let id = try #require(response.header("X-Message-Id"))
        #expect(try server.waitUntil {
            Self.object(try server.route("GET", "/history/\(id)"))["status"] as? String == "retrying"
        })
        let retrying = Self.object(try server.route("GET", "/history/\(id)"))
        #expect(retrying["last_error"] as? String == "server_error")
        #expect(retrying["next_attempt_at"] is String)
        transport.release()
        #expect(try server.waitUntil {
            Self.object(try server.route("GET", "/history/\(id)"))["status"] as? String == "sent"
        })
        #expect(transport.messages.count == 2)
        #expect(transport.messages.map(\.id) == [id, id])
        #expect(transport.messages.map(\.attempt) == [1, 2])
    }

    @Test func historyPagesWithLimitAndLinkHeader() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        var ids: [String] = []
        for index in 0..<3 {
            let response = try Self.post(server, type: "text/plain", "page memo \(index)")
            ids.append(try #require(response.header("X-Message-Id")))
        }
        var seen: [String] = []
        var next: String? = "/history?limit=1"
        var pages = 0
        while let path = next, pages < 10 {
            let response = try server.route("GET", path)
            #expect(response.status == 200)
            let page = (response.json as? [[String: Any]]) ?? []
            #expect(page.count == 1)
            seen += page.compactMap { $0["id"] as? String }
            next = nil
            if let link = response.header("Link") {
                #expect(link.hasSuffix(#"; rel="next""#))
                let target = link.split(separator: ">").first.map { String($0.dropFirst()) }
                #expect(target?.contains("before=\(seen.last ?? "")") == true)
                #expect(target?.contains("limit=1") == true)
                next = target
            }
            pages += 1
        }
        #expect(seen == ids.reversed(), "newest first, each once")
        #expect(pages == 3, "the last page has no Link")
        let two = try server.route("GET", "/history?limit=2&before=\(ids[2])")
        #expect(((two.json as? [[String: Any]]) ?? []).compactMap { $0["id"] as? String } == [ids[1], ids[0]])
        #expect(two.header("Link") == nil)
        let all = try server.route("GET", "/history?limit=100000")
        #expect(all.status == 200)
        #expect(((all.json as? [[String: Any]]) ?? []).count == 3)
        // However many digits, a limit past the maximum is the maximum (as openapi.yaml says).
        let huge = try server.route("GET", "/history?limit=9999999999999999999999")
        #expect(huge.status == 200)
        #expect(((huge.json as? [[String: Any]]) ?? []).count == 3)
    }

    @Test(arguments: ["limit=0", "limit=-1", "limit=abc", "limit=1.5", "limit=", "limit=000", "limit=+5",
                      "before=not-an-id", "before=" + UUID().uuidString + "0", "limit=2&before=x"])
    func badHistoryQueryIs400(query: String) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let response = try server.route("GET", "/history?" + query)
        #expect(response.status == 400)
        let code = (Self.object(response)["error"] as? [String: Any])?["code"] as? String
        #expect(code == "invalid_limit" || code == "invalid_before", "\(response.text)")
        Self.expectSecurityHeaders(response, "400 /history?\(query)")
    }

    // An encoded slash ("..%2Fetc") is refused before routing: HostileClientTests.
    @Test(arguments: [UUID().uuidString.lowercased(), UUID().uuidString.uppercased(), "nope",
                      "00000000-0000-0000-0000-000000000000"])
    func unknownHistoryIdIs404(id: String) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        _ = try Self.post(server, type: "text/plain", "there is one memo")
        let response = try server.route("GET", "/history/\(id)")
        Self.expectError(response, status: 404, code: "not_found")
        Self.expectSecurityHeaders(response, "404 /history/\(id)")
    }

    @Test func healthzCountsWithoutContent() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.block)
        let server = try TestServer(dataDirectory: directory.file("data"), transport: transport)
        defer {
            transport.release()
            server.stop()
        }
        let empty = try server.route("GET", "/healthz")
        #expect(empty.status == 200)
        #expect(Self.object(empty)["status"] as? String == "ok")
        #expect(try Self.counts(server)
                == ["queued": 0, "sending": 0, "retrying": 0, "sent": 0, "failed": 0, "held": 0, "cancelled": 0])
        let canary = Self.canary("health")
        _ = try Self.post(server, type: "text/plain", canary)
        #expect(transport.waitUntilBlocked())
        let busy = try server.route("GET", "/healthz")
        #expect(!busy.text.contains(canary))
        #expect(try Self.counts(server)["sending"] == 1)
        transport.release()
        #expect(try server.waitUntil { try Self.counts(server)["sent"] == 1 })
    }

    // MARK: Durability across restarts

    @Test func restartedServerDeliversWhatWasLeftQueued() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let canary = Self.canary("restart")
        let id: String
        do {
            let failing = ControlledTransport(.fail(DeliveryFailure(.serverError, permanent: false)))
            let first = try TestServer(dataDirectory: data, transport: failing)
            defer { first.stop() }
            let response = try Self.post(first, type: "application/json",
                                         #"{"subject":"Survivor \#(canary)","body":"\#(canary) must arrive"}"#)
            #expect(response.status == 204)
            id = try #require(response.header("X-Message-Id"))
            #expect(failing.waitUntilReceived())
            #expect(try first.waitUntil {
                Self.object(try first.route("GET", "/history/\(id)"))["status"] as? String == "retrying"
            })
            #expect(first.deliveredFiles().isEmpty)
            Self.expectNoLeak(first, [canary])
        }
        // The same data directory, the real Maildir transport.
        let second = try TestServer(dataDirectory: data)
        defer { second.stop() }
        Self.expectDelivered(try Self.deliveredMessage(second, id: id), subject: "Survivor \(canary)",
                             body: "\(canary) must arrive", id: id)
        #expect(try second.waitUntil {
            Self.object(try second.route("GET", "/history/\(id)"))["status"] as? String == "sent"
        })
        #expect(try second.finishDeliveries())
        #expect(second.deliveredFiles().count == 1, "delivered once")
        Self.expectNoLeak(second, [canary])
    }

    @Test func queuedMemoIsInTheDatabaseAfterTheServerStops() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let id: String
        do {
            let failing = ControlledTransport(.fail(DeliveryFailure(.rejected, permanent: true)))
            let server = try TestServer(dataDirectory: data, transport: failing)
            defer { server.stop() }
            let response = try Self.post(server, type: "text/plain", "kept on disk")
            id = try #require(response.header("X-Message-Id"))
            #expect(try server.waitUntil {
                Self.object(try server.route("GET", "/history/\(id)"))["status"] as? String == "failed"
            })
        }
        let key = try KeyStore.load(path: data + "/key")
        let outbox = try Outbox(path: data + "/jotter.db", key: key)
        defer { outbox.close() }
        let record = try #require(try outbox.history.record(id: id))
        #expect(record.status == .failed)
        #expect(record.lastError == "rejected")
        #expect(record.subject == "kept on disk")
    }

    @Test func databaseFilesHoldNoPlaintextWhileAMemoIsQueued() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let transport = ControlledTransport(.block)
        let server = try TestServer(dataDirectory: data, transport: transport)
        defer {
            transport.release()
            server.stop()
        }
        let bodyCanary = Self.canary("diskbody")
        let subjectCanary = Self.canary("disksubject")
        let response = try Self.post(server, type: Self.formType, "subject=\(subjectCanary)&body=\(bodyCanary)",
                                     headers: [("Idempotency-Key", "disk-key-canary")])
        #expect(response.status == 204)
        #expect(transport.waitUntilBlocked())
        let files = ["jotter.db", "jotter.db-wal"].map { Evidence.fileBytes(data + "/" + $0) }
        #expect(files.contains { !$0.isEmpty })
        for canary in [bodyCanary, subjectCanary, "disk-key-canary"] {
            for (name, bytes) in zip(["jotter.db", "jotter.db-wal"], files) {
                #expect(!Evidence.contains(bytes, Array(canary.utf8)), "\(name) holds \(canary)")
            }
        }
        Self.expectNoLeak(server, [bodyCanary, subjectCanary])
    }

    @Test func tamperedRowIsHeldNeverDeliveredNeverDeleted() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        let goodCanary = Self.canary("good")
        let badCanary = Self.canary("tampered")
        let good: String
        let bad: String
        do {
            // Stored by an earlier run with the same key; no worker yet.
            let outbox = try Outbox(path: data + "/jotter.db", key: KeyStore.load(path: data + "/key"))
            good = try awaitEnqueue(outbox, MemoDraft(body: "\(goodCanary) arrives"))
            bad = try awaitEnqueue(outbox, MemoDraft(subject: badCanary, body: "\(badCanary) must not arrive"))
            outbox.close()
        }
        let database = try Database(path: data + "/jotter.db")
        var sealed = try #require(try database.statement("SELECT sealed_payload FROM messages WHERE id = ?")
            .firstRow([.text(bad)]) { $0.blob(0) } ?? nil)
        sealed[sealed.count / 2] ^= 0x04
        try database.run("UPDATE messages SET sealed_payload = ? WHERE id = ?", [.blob(sealed), .text(bad)])
        database.close()

        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        _ = try Self.deliveredMessage(server, id: good)
        #expect(try server.waitUntil {
            Self.object(try server.route("GET", "/history/\(bad)"))["status"] as? String == "held"
        })
        let held = Self.object(try server.route("GET", "/history/\(bad)"))
        #expect(held["last_error"] as? String == "corrupt")
        #expect(held["delivered_at"] is NSNull)
        #expect(try server.finishDeliveries())
        #expect(server.deliveredFiles().count == 1)
        #expect(server.deliveredFiles().first?.contains(good) == true)
        #expect(Self.object(try server.route("GET", "/history/\(bad)"))["status"] as? String == "held")
        #expect(try Self.counts(server)["held"] == 1)
        let check = try Database(path: data + "/jotter.db", readOnly: true)
        defer { check.close() }
        let stillThere = try check.statement("SELECT sealed_payload FROM messages WHERE id = ?")
            .firstRow([.text(bad)]) { $0.blob(0) } ?? nil
        #expect(stillThere == sealed, "the tampered row is kept as it was")
        Self.expectNoLeak(server, [goodCanary, badCanary])
    }

    /// `Outbox.enqueue` from synchronous test code.
    private func awaitEnqueue(_ outbox: Outbox, _ draft: MemoDraft) throws -> String {
        let result = Mutex<Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        outbox.enqueue(draft) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        done.wait()
        return try result.withLock { $0! }.get().id
    }

    // MARK: The request log (the HTTP layer writes it once a response is sent: over a socket)

    @Test func theRequestLogNamesTheRouteNeverThePath() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let secret = Self.canary("path")
        let sent = try Self.postOnTheWire(server, "/send?\(secret)=1", type: "text/plain", "logged by its id")
        let id = try #require(sent.header("X-Message-Id"))
        #expect(try server.request("GET", "/history/\(id)").status == 200)
        #expect(try server.request("BREW", "/\(secret)").status == 404)
        // Each line's metadata as a dictionary (its order is not fixed; no value holds a space).
        func requests() -> [[String: String]] {
            server.logs.captured.split(separator: "\n").filter { $0.contains(" http: request ") }.map { line in
                Dictionary(line.split(separator: " ").compactMap { field -> (String, String)? in
                    let pair = field.split(separator: "=", maxSplits: 1)
                    return pair.count == 2 ? (String(pair[0]), String(pair[1])) : nil
                }, uniquingKeysWith: { first, _ in first })
            }
        }
        #expect(server.waitUntil { requests().count == 3 }, "\(requests())")
        let lines = requests()
        #expect(lines.contains { $0["method"] == "POST" && $0["path"] == "/send" && $0["status"] == "204"
                && $0["message.id"] == id }, "\(lines)")
        #expect(lines.contains { $0["method"] == "GET" && $0["path"] == "/history/{id}" && $0["status"] == "200" },
                "\(lines)")
        #expect(lines.contains { $0["method"] == "OTHER" && $0["path"] == "-" && $0["status"] == "404" }, "\(lines)")
        Self.expectNoLeak(server, [secret])
    }

    // MARK: Framing the server refuses (the HTTP layer's, over a socket)

    static let badFraming: [(String, String)] = [
        ("no Host", "POST /send HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n"
            + "Connection: close\r\n\r\nwombat-f1"),
        ("two Host", "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nContent-Type: text/plain\r\n"
            + "Content-Length: 9\r\nConnection: close\r\n\r\nwombat-f2"),
        ("two Content-Length", "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            + "Content-Length: 9\r\nContent-Length: 9\r\nConnection: close\r\n\r\nwombat-f3"),
        ("two different Content-Length", "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            + "Content-Length: 9\r\nContent-Length: 4\r\nConnection: close\r\n\r\nwombat-f4"),
        ("Content-Length with chunked", "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            + "Content-Length: 9\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + "9\r\nwombat-f5\r\n0\r\n\r\n"),
        ("chunked with Content-Length", "POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            + "Transfer-Encoding: chunked\r\nContent-Length: 14\r\nConnection: close\r\n\r\n"
            + "9\r\nwombat-f6\r\n0\r\n\r\n"),
    ]

    @Test(arguments: badFraming.map(\.0))
    func ambiguousFramingIs400AndStoresNothing(name: String) throws {
        let request = try #require(Self.badFraming.first { $0.0 == name }?.1)
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        // Read until the server closes the connection: a request smuggled in the body would have been
        // answered on it by then, and a memo is answered only once stored.
        let responses = try RawHTTP.exchangeUntilClosed(port: server.port, request: Array(request.utf8))
        #expect(responses.count == 1, "\(name): \(responses.map(\.status))")
        let response = try #require(responses.first)
        #expect(response.status == 400, "\(name): \(response.status) \(response.text)")
        #expect(response.header("X-Message-Id") == nil)
        try Self.expectNothingStored(server)
        Self.expectNoLeak(server, ["wombat-f"])
        // A well-formed request right after still works.
        #expect(try Self.postOnTheWire(server, type: "text/plain", "well formed").status == 204)
    }

    // MARK: Startup refusals

    @Test(arguments: [0o644, 0o640] as [mode_t])
    func keyReadableByOthersStopsTheServer(mode: mode_t) throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        _ = try KeyStore.load(path: data + "/key")
        #expect(chmod(data + "/key", mode) == 0)
        let error = try #require(throws: KeyStore.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect(error == .insecurePermissions(path: data + "/key", mode: UInt32(mode)))
        #expect("\(error)".contains(data + "/key"))
        #expect("\(error)".contains("chmod 600"))
        // Fixed as the message says, the same directory starts (the failed start left no lock behind).
        #expect(chmod(data + "/key", 0o600) == 0)
        let server = try TestServer(dataDirectory: data)
        server.stop()
    }

    /// Another user's data directory that others may write to is refused: any of them could replace the
    /// outbox, the key or the mail under the server (it was used as it was). Needs root, to give it away.
    @Test(.enabled(if: geteuid() == 0)) func anotherUsersDirectoryThatOthersMayWriteIsRefused() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("shared")
        #expect(mkdir(data, 0o777) == 0 && chmod(data, 0o777) == 0 && chown(data, 65534, 65534) == 0)
        let error = try #require(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect("\(error)".contains("other users could replace"), "\(error)")
        #expect(chmod(data, 0o1777) == 0)  // sticky, as /tmp: a name not yet made is still anyone's to take
        #expect(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect(chmod(data, 0o775) == 0)  // its group may write, and it is not root's: refused
        #expect(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        // A service directory root owns and shares with a group of this process (root:jotter 0770; a
        // volume shared through its group): used, as before.
        #expect(chown(data, 0, getegid()) == 0 && chmod(data, 0o770) == 0)
        let shared = try TestServer(dataDirectory: data)
        shared.stop()
        #expect(chmod(data, 0o755) == 0 && chown(data, 65534, 65534) == 0)  // only its owner may write: used
        let server = try TestServer(dataDirectory: data)
        server.stop()
    }

    /// Who else may replace files in a directory this user does not own: sshd's rule.
    @Test func whoElseMayReplaceFilesInADirectory() {
        func directory(owner: uid_t, group: gid_t, mode: mode_t) -> stat {
            var info = stat()
            info.st_uid = owner
            info.st_gid = group
            info.st_mode = S_IFDIR | mode
            return info
        }
        let mine = getegid(), other: gid_t = mine == 54321 ? 54322 : 54321
        #expect(DataDirectory.othersMayReplaceFiles(directory(owner: 1000, group: mine, mode: 0o777)))
        #expect(DataDirectory.othersMayReplaceFiles(directory(owner: 0, group: mine, mode: 0o1777)), "sticky or not")
        #expect(DataDirectory.othersMayReplaceFiles(directory(owner: 1000, group: mine, mode: 0o770)), "not root's")
        #expect(DataDirectory.othersMayReplaceFiles(directory(owner: 0, group: other, mode: 0o770)), "another group's")
        #expect(!DataDirectory.othersMayReplaceFiles(directory(owner: 0, group: mine, mode: 0o2770)), "root:jotter 2770")
        #expect(!DataDirectory.othersMayReplaceFiles(directory(owner: 1000, group: other, mode: 0o755)))
    }

    @Test func dataDirectoryInUseIsRefused() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let first = try TestServer(dataDirectory: data)
        defer { first.stop() }
        let error = try #require(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect("\(error)".contains(data))
        // The `lock` file deleted (a cleanup of "stale" files, a restore with rsync --delete): the directory
        // is still in use, for a second server, for `jotter rekey` and for `jotter pair`. (Both ran beside
        // the live server: the rekey re-sealed under it, the second server sent its memos again.)
        #expect(unlink(data + "/lock") == 0)
        #expect(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect(throws: DataDirectory.Failure.self) { _ = try Rekey.run(dataDirectory: data) }
        #expect(DataDirectory.isInUse(path: data))
        first.stop()
        #expect(!DataDirectory.isInUse(path: data))
        let again = try TestServer(dataDirectory: data)
        again.stop()
    }
}

// MARK: - The `jotter` binary

extension LiveServerTests {
    /// The built executable, run as a user would run it.
    @Suite struct JotterBinary {
        static let path = Repository.root + "/.build/debug/jotter"

        struct Finished {
            var status: Int32
            var reason: Process.TerminationReason
            var standardOutput: String
            var standardError: String
        }

        static func environment() -> [String: String] {
            ProcessInfo.processInfo.environment.filter {
                !$0.key.hasPrefix("JOTTER_") && $0.key != "CREDENTIALS_DIRECTORY"
            }
        }

        /// Runs the binary (or another `executable`) to completion, killed after `timeout` seconds.
        /// `input`, when given, is written to its standard input (else it reads /dev/null).
        /// `environment` is added to the test's own, without its `JOTTER_` settings.
        static func run(_ arguments: [String], executable: String = path, input: [UInt8]? = nil,
                        environment extra: [String: String] = [:], timeout: Double = 30) throws -> Finished {
            try #require(FileManager.default.isExecutableFile(atPath: executable), "not found or not built: \(executable)")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            process.environment = environment().merging(extra) { $1 }
            process.currentDirectoryURL = URL(fileURLWithPath: NSTemporaryDirectory())
            let output = Pipe(), errors = Pipe()
            process.standardOutput = output
            process.standardError = errors
            let stdin = Pipe()
            process.standardInput = input == nil ? FileHandle.nullDevice : stdin
            try process.run()
            if let input {
                stdin.fileHandleForWriting.write(Data(input))
                try stdin.fileHandleForWriting.close()
            }
            let pid = process.processIdentifier
            let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
            let errorData = Mutex(Data())
            let group = DispatchGroup()
            DispatchQueue.global().async(group: group) {
                let data = errors.fileHandleForReading.readDataToEndOfFile()
                errorData.withLock { $0 = data }
            }
            let out = output.fileHandleForReading.readDataToEndOfFile()
            group.wait()
            process.waitUntilExit()
            watchdog.cancel()
            return Finished(status: process.terminationStatus, reason: process.terminationReason,
                            standardOutput: String(decoding: out, as: UTF8.self),
                            standardError: String(decoding: errorData.withLock { $0 }, as: UTF8.self))
        }

        /// Reads one line from `fd`, waiting at most `timeout` seconds.
        static func readLine(_ fd: Int32, timeout: Double) -> String? {
            var line: [UInt8] = []
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline {
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 100) >= 0 else { return nil }
                if poller.revents == 0 { continue }
                var byte: UInt8 = 0
                guard read(fd, &byte, 1) == 1 else { return nil }
                if byte == 10 { return String(decoding: line, as: UTF8.self) }
                line.append(byte)
            }
            return nil
        }

        /// Standard error that nobody reads (a paused terminal, `2>&1 | less`, a FIFO): SIGTERM still ends
        /// the server within seconds, its memos stored (it hung in the last flush of its log, forever).
        @Test func aStandardErrorNobodyReadsDoesNotHoldTheStop() throws {
            let directory = TemporaryDirectory()
            let script = """
                import http.client, os, signal, subprocess, sys, time
                jotter, data, fifo = sys.argv[1], sys.argv[2], sys.argv[3]
                os.mkfifo(fifo)
                reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held open, never read
                writer = os.open(fifo, os.O_WRONLY)
                server = subprocess.Popen([jotter, 'serve', '--host', '127.0.0.1', '--port', '0', '--data-dir', data,
                                           '--log-level', 'debug', '--rate-limit', 'off'],
                                          stdout=subprocess.PIPE, stderr=writer, text=True)
                port = int(server.stdout.readline().rsplit(':', 1)[1])
                connection = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
                accepted = 0
                deadline = time.monotonic() + 30
                while accepted < 3000 and time.monotonic() < deadline:  # well past the pipe's 64 KiB of log lines
                    try:
                        connection.request('POST', '/send', body=b'fifo memo', headers={'Content-Type': 'text/plain'})
                        response = connection.getresponse()
                        response.read()
                        accepted += response.status == 204
                    except Exception:
                        break
                started = time.monotonic()
                server.send_signal(signal.SIGTERM)
                try:
                    status = server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    status = 'hung'
                print(status, round(time.monotonic() - started, 1), accepted > 0)
                """
            let result = try Python.run(script, arguments: [JotterBinary.path, directory.file("data"), directory.file("stderr.fifo")])
            let fields = result.split(whereSeparator: \.isWhitespace).map(String.init)
            #expect(fields.first == "0", "exit status after SIGTERM: \(result)")
            #expect((Double(fields.count > 1 ? fields[1] : "") ?? 99) < 20, "\(result)")
            #expect(fields.last == "True", "memos were taken while the log backed up: \(result)")
        }

        @Test func servesOnTheAnnouncedPortAndExitsCleanlyOnSIGTERM() throws {
            let directory = TemporaryDirectory()
            let server = try ServeProcess(directory: directory)
            let data = server.data, port = server.port
            #expect(port > 0 && port != 7373)
            // The next line says where memos go (issue 13), secrets never in it.
            #expect(Self.readLine(server.output.fileDescriptor, timeout: 20) == "Delivering to maildir:\(data)/Maildir")

            let health = try RawHTTP.request(port: port, method: "GET", path: "/healthz")
            #expect(health.status == 200)
            let canary = "binary-canary-\(UUID().uuidString.prefix(8))"
            let sent = try RawHTTP.request(port: port, method: "POST", path: "/send",
                                           headers: [("Content-Type", "application/x-www-form-urlencoded")],
                                           body: Array("buy milk \(canary)".utf8))
            #expect(sent.status == 204)
            let id = try #require(sent.header("X-Message-Id"))
            let arrived = TestServer.waitUntil {
                ((try? FileManager.default.contentsOfDirectory(atPath: data + "/Maildir/new")) ?? [])
                    .contains { $0.contains(id) }
            }
            #expect(arrived)

            #expect(server.stop(timeout: 20), "did not exit 0 within 20 s of SIGTERM")
            #expect(!server.standardError.contains(canary))
            // Stopped: the port no longer answers.
            #expect(throws: (any Error).self) { try RawHTTP.request(port: port, method: "GET", path: "/healthz") }
        }

        /// The terminal `make run` or `jotter serve` ran in is closed (SIGHUP): the server stops as on SIGTERM,
        /// draining what is in flight, instead of dying on the spot mid-send (an SMTP memo then went twice).
        @Test func aClosedTerminalStopsTheServerCleanly() throws {
            let directory = TemporaryDirectory()
            let server = try ServeProcess(directory: directory)
            #expect(try RawHTTP.request(port: server.port, method: "GET", path: "/healthz").status == 200)
            #expect(server.stop(timeout: 20, signal: SIGHUP), "did not exit 0 within 20 s of SIGHUP")
            #expect(server.process.terminationReason == .exit, "killed by the signal")
        }

        @Test(arguments: [0o644, 0o640] as [mode_t])
        func insecureKeyFileMakesTheBinaryExitWithAClearMessage(mode: mode_t) throws {
            let directory = TemporaryDirectory()
            let data = directory.file("data")
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
            _ = try KeyStore.load(path: data + "/key")
            #expect(chmod(data + "/key", mode) == 0)
            let result = try Self.run(["serve", "--port", "0", "--data-dir", data])
            #expect(result.reason == .exit)
            #expect(result.status != 0)
            #expect(result.standardError.contains(data + "/key"), "\(result.standardError)")
            #expect(result.standardError.contains("chmod 600"), "\(result.standardError)")
            #expect(!result.standardOutput.contains("Listening"))
        }

        static let options = ["--host", "--port", "--data-dir", "--relay"]

        @Test func serveHelpMentionsEveryOption() throws {
            let result = try Self.run(["serve", "--help"])
            #expect(result.reason == .exit && result.status == 0)
            for option in Self.options {
                #expect(result.standardOutput.contains(option), "serve --help lacks \(option)")
            }
        }

        @Test
        func topLevelHelpMentionsEveryOption() throws {
            let result = try Self.run(["--help"])
            #expect(result.reason == .exit && result.status == 0)
            for option in Self.options {
                #expect(result.standardOutput.contains(option), "--help lacks \(option)")
            }
        }

        @Test func topLevelHelpExitsZeroAndPointsAtServeHelp() throws {
            let result = try Self.run(["--help"])
            #expect(result.reason == .exit && result.status == 0)
            #expect(result.standardOutput.contains("jotter serve"))
        }

        @Test(arguments: [["serve", "--port", "70000"], ["serve", "--bogus"], ["frobnicate"], ["serve", "--port"]])
        func badCommandLineExitsNonZeroWithAMessage(arguments: [String]) throws {
            let result = try Self.run(arguments)
            #expect(result.reason == .exit)
            #expect(result.status == 64, "EX_USAGE, as for jotter send")
            #expect(result.standardError.hasPrefix("jotter: "), "\(result.standardError)")
            #expect(!result.standardOutput.contains("Listening"))
        }
    }
}
