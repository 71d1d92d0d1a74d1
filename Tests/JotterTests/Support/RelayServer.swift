import Foundation
import Synchronization
import Testing
@testable import Jotter

/// A whole `jotter relay` (outbox, worker, store, API; HTTP on 127.0.0.1:0) started in-process by a
/// test, its mail in a Maildir in its data directory and its logs in memory. `route` answers without
/// a socket (as `TestServer.route` does); `request` goes over one. The data directory outlives a
/// `stop()`, and so does `store` (its PostgreSQL database), so a test can restart the relay on them.
final class RelayServer: @unchecked Sendable {
    let application: RelayApplication
    let dataDirectory: String
    let logs: LogSink

    /// A relay on `store` (SQLite in `dataDirectory` when nil), then `configure`d.
    init(dataDirectory: String, store: RelayTestStore? = nil, clock: any WallClock = SystemClock(),
         scheduler: any Scheduler = DispatchScheduler(), transport: (any Transport)? = nil,
         configure: (inout RelayConfiguration) -> Void = { _ in }) throws {
        var configuration = RelayConfiguration(dataDirectory: dataDirectory)
        configuration.http.host = "127.0.0.1"
        configuration.http.port = 0
        configuration.logLevel = .debug
        // On manual time a batch window would wait for the test to move the clock: memos go out as soon
        // as they are due (the window has tests of its own, in DeliveryWorkerTests).
        if scheduler is ManualScheduler { configuration.delivery.batchWindowMilliseconds = 0 }
        if let store { configuration.store = store.location }
        configure(&configuration)
        let logs = LogSink.memory()
        self.logs = logs
        self.dataDirectory = dataDirectory
        application = try RelayApplication(configuration: configuration, transport: transport, clock: clock,
                                           scheduler: scheduler, logSink: logs)
        try application.start()
    }

    var port: Int { application.port }
    /// The relay's outbox, whichever store keeps it.
    var messages: any MessageOutbox { application.outbox }
    /// The SQLite outbox of a relay on the default store, read directly (a test on PostgreSQL reads
    /// `messages`). Prefer what the API and the Maildir show.
    var outbox: Outbox { application.outbox as! Outbox }
    var maildir: String { dataDirectory + "/Maildir" }

    func stop() {
        application.stop()
    }

    /// Makes deliveries final, so a test can count what arrived without sleeping: waits until the
    /// relay's outbox (either store) has nothing queued, retrying or sending, then stops its worker,
    /// which lets a send in flight finish. Call it last: the worker does not start again.
    func finishDeliveries(timeout: Double = 20) throws -> Bool {
        let settled = try TestServer.waitUntil(timeout: timeout) { try messages.nextDueAt() == nil }
        application.worker.stop()
        return settled
    }

    // MARK: Requests

    /// The relay's answer without a socket: policy and router exactly as the server runs them.
    func route(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = [],
               from address: String = "127.0.0.1", timeout: Double = 30) throws -> RawHTTP.Response {
        var fields = HTTPHeaders(headers.map { (name: $0.0, value: $0.1) })
        if fields["Host"] == nil { fields.add(name: "Host", value: "127.0.0.1:\(port)") }
        let request = HTTPRequest(method: method, path: path, headers: fields, body: body, remoteAddress: address)
        let answer = Mutex<HTTPResponse?>(nil)
        let done = DispatchSemaphore(value: 0)
        application.handle(request) { response in
            answer.withLock { $0 = response }
            done.signal()
        }
        guard done.wait(timeout: .now() + timeout) == .success, let response = answer.withLock({ $0 }) else {
            throw TestServer.RouteTimeout(method: method, path: path)
        }
        return RawHTTP.Response(status: response.status, headers: response.headers.fields, body: response.body)
    }

    /// The headers and body of a JSON request to the relay's API: `object` as the body, and the
    /// device's bearer secret when given.
    static func jsonRequest(secret: String?, _ object: [String: Any]?,
                            headers: [(String, String)]) throws -> (headers: [(String, String)], body: [UInt8]) {
        var all = headers
        if let secret { all.append(("Authorization", "Bearer \(secret)")) }
        guard let object else { return (all, []) }
        all.append(("Content-Type", "application/json"))
        return (all, Array(try JSONSerialization.data(withJSONObject: object)))
    }

    /// A JSON request at the router, with the device's bearer secret when given.
    func json(_ method: String, _ path: String, secret: String? = nil, _ object: [String: Any]? = nil,
              headers: [(String, String)] = [], from address: String = "127.0.0.1") throws -> RawHTTP.Response {
        let request = try Self.jsonRequest(secret: secret, object, headers: headers)
        return try route(method, path, headers: request.headers, body: request.body, from: address)
    }

    /// The same over a socket.
    func request(_ method: String, _ path: String, secret: String? = nil, _ object: [String: Any]? = nil,
                 headers: [(String, String)] = []) throws -> RawHTTP.Response {
        let request = try Self.jsonRequest(secret: secret, object, headers: headers)
        return try RawHTTP.request(port: port, method: method, path: path, headers: request.headers, body: request.body)
    }

    /// A message's `status` as `GET /v1/messages/{id}` tells the device that sent it (nil if unreadable).
    func status(_ secret: String, of id: String) -> String? {
        ((try? json("GET", "/v1/messages/\(id)", secret: secret))?.json as? [String: Any])?["status"] as? String
    }

    // MARK: The journey

    /// Registers a device (open registration); returns its id and secret.
    func register(from address: String = "127.0.0.1") throws -> (id: String, secret: String) {
        let response = try json("POST", "/v1/devices", from: address)
        #expect(response.status == 201, "POST /v1/devices: \(response.status) \(response.text)")
        let object = try #require(response.json as? [String: Any])
        return (try #require(object["device_id"] as? String), try #require(object["secret"] as? String))
    }

    /// Asks for a code for `address`.
    func requestCode(_ secret: String, _ address: String, language: String? = nil,
                     from client: String = "127.0.0.1") throws -> RawHTTP.Response {
        var object: [String: Any] = ["address": address]
        if let language { object["language"] = language }
        return try json("POST", "/v1/destinations", secret: secret, object, from: client)
    }

    /// Presents `code` for `address`.
    func confirm(_ secret: String, _ address: String, _ code: String) throws -> RawHTTP.Response {
        try json("POST", "/v1/destinations/confirm", secret: secret, ["address": address, "code": code])
    }

    /// Asks for a code, reads it from the mail, presents it: `address` is then verified.
    func verify(_ secret: String, _ address: String) throws {
        let known = try mailFiles(to: address)
        let requested = try requestCode(secret, address)
        #expect(requested.status == 202, "code request: \(requested.status) \(requested.text)")
        let code = try newCode(to: address, known: known)
        let confirmed = try confirm(secret, address, code)
        #expect(confirmed.status == 200, "confirm: \(confirmed.status) \(confirmed.text)")
    }

    /// Posts a message.
    func send(_ secret: String, to: String, subject: String? = "s", body: String = "hello", key: String? = nil,
              from client: String = "127.0.0.1") throws -> RawHTTP.Response {
        var object: [String: Any] = ["to": to, "body": body]
        if let subject { object["subject"] = subject }
        return try json("POST", "/v1/messages", secret: secret, object,
                        headers: key.map { [("Idempotency-Key", $0)] } ?? [], from: client)
    }

    /// Posts a message and returns the id the relay accepted it under (the test fails without one).
    func sendID(_ secret: String, to: String, body: String = "hello") throws -> String {
        let sent = try send(secret, to: to, body: body)
        return try #require((sent.json as? [String: Any])?["id"] as? String, "not accepted: \(sent.status) \(sent.text)")
    }

    /// A transport a test steers, in front of the Maildir of the relay in `dataDirectory`: code mails
    /// arrive, and what comes after can be held or refused on cue.
    static func steeredMail(_ dataDirectory: String, maximumWait: Double = 30) -> ControlledTransport {
        ControlledTransport(.deliver, forwardingTo: MaildirTransport(path: dataDirectory + "/Maildir"),
                            maximumWait: maximumWait)
    }

    // MARK: Mail

    /// Every message delivered to `address` (its Maildir file name, and the message as Python's
    /// `email` package reads it). Files are read once each, and all new ones by one Python process:
    /// a test that waits for mail asks many times.
    func mails(to address: String) throws -> [(file: String, message: [String: Any])] {
        let directory = maildir + "/new/"
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
        let unread = read.withLock { read in names.filter { read[$0] == nil } }
        let parsed = try Python.parseMessages(atPaths: unread.map { directory + $0 })
        let messages = read.withLock { read in
            for (name, message) in zip(unread, parsed) { read[name] = ReadMessage(fields: message) }
            return names.compactMap { name in read[name].map { (file: name, message: $0) } }
        }
        return messages.map { ($0.file, $0.message.fields) }
            .filter { Self.recipient($0.1["to"] as? String) == address.lowercased() }
    }

    /// A message as Python read it. Immutable once read.
    private final class ReadMessage: @unchecked Sendable {
        let fields: [String: Any]
        init(fields: [String: Any]) { self.fields = fields }
    }

    /// What Python read in each file of the Maildir's `new/` so far, by name: a file appears there
    /// complete (linked from `tmp/`) and never changes.
    private let read = Mutex<[String: ReadMessage]>([:])

    /// The bare address of a `To` header as Python reads it (`<a@b>` or `a@b`), lowercased.
    static func recipient(_ header: String?) -> String? {
        guard var text = header?.trimmingCharacters(in: .whitespaces) else { return nil }
        if let open = text.lastIndex(of: "<"), text.hasSuffix(">") {
            text = String(text[text.index(after: open)..<text.index(before: text.endIndex)])
        }
        return text.lowercased()
    }

    /// The Maildir files of the mail `address` has received so far.
    func mailFiles(to address: String) throws -> Set<String> {
        Set(try mails(to: address).map(\.file))
    }

    /// Waits for a mail to `address` that is not one of `known`, and reads the code in it.
    func newCode(to address: String, known: Set<String>) throws -> String {
        var fresh: [(file: String, message: [String: Any])] = []
        _ = TestServer.waitUntil(timeout: 20) {
            fresh = ((try? self.mails(to: address)) ?? []).filter { !known.contains($0.file) }
            return !fresh.isEmpty
        }
        try #require(fresh.count == 1, "expected one new code mail to \(address), found \(fresh.count)")
        return try #require(Self.code(in: fresh[0].message["body"] as? String ?? ""), "no code in the mail")
    }

    /// Whether a body Python read is `expected` (the MIME encoding may add one final line break).
    static func sameBody(_ body: Any?, _ expected: String) -> Bool {
        let text = (body as? String)?.replacingOccurrences(of: "\r\n", with: "\n")
        return text == expected || text == expected + "\n"
    }

    /// The first run of exactly six digits in `text`.
    static func code(in text: String) -> String? {
        let scalars = Array(text.unicodeScalars)
        var index = 0
        while index < scalars.count {
            guard CharacterSet.decimalDigits.contains(scalars[index]), scalars[index].isASCII else {
                index += 1
                continue
            }
            var end = index
            while end < scalars.count, scalars[end].isASCII, CharacterSet.decimalDigits.contains(scalars[end]) {
                end += 1
            }
            if end - index == 6 { return String(String.UnicodeScalarView(scalars[index..<end])) }
            index = end
        }
        return nil
    }
}
