import Foundation
import Synchronization
@testable import Jotter

/// The LAN addresses a test's "machine" has: a test changes them, then asks the server to look again
/// (`Application.refreshLANAddresses`).
final class TestInterfaces: Sendable {
    private let addresses: Mutex<[String]>
    init(_ addresses: [String]) { self.addresses = Mutex(addresses) }
    func set(_ new: [String]) { addresses.withLock { $0 = new } }
    var read: @Sendable () -> [String] { { self.addresses.withLock { $0 } } }
}

/// A whole Jotter (outbox, worker, HTTP on 127.0.0.1:0) started in-process by a test, with its logs
/// captured in memory. Stop it with `stop()`; the data directory outlives it so a test can restart.
final class TestServer: Sendable {
    let application: Application
    let dataDirectory: String
    let logs: LogSink

    init(dataDirectory: String, maxBodyBytes: Int = 256 * 1024, transport: (any Transport)? = nil,
         relay: String? = nil, clock: any WallClock = SystemClock(), scheduler: any Scheduler = DispatchScheduler(),
         interfaces: TestInterfaces? = nil, configure: (inout Configuration) -> Void = { _ in }) throws {
        var configuration = Configuration(dataDirectory: dataDirectory, publicDirectory: Repository.publicDirectory)
        configuration.http.host = "127.0.0.1"
        configuration.http.port = 0
        configuration.http.maxBodyBytes = maxBodyBytes
        configuration.relay = relay
        configuration.logLevel = .debug
        configure(&configuration)
        let logs = LogSink.memory()
        self.logs = logs
        self.dataDirectory = dataDirectory
        application = try Application(configuration: configuration, transport: transport, clock: clock,
                                      scheduler: scheduler, logSink: logs, interfaces: interfaces?.read)
        try application.start()
    }

    var port: Int { application.port }
    var outbox: Outbox { application.outbox }
    var maildir: String { dataDirectory + "/Maildir" }

    func stop() {
        application.stop()
    }

    /// The application's answer to a request, without a socket: the request policy and the router
    /// exactly as the server runs them, before HTTP framing (so: no `Content-Length`, and a HEAD still
    /// has its body). Same call as `request`: `path` may carry a query. `Host` is filled in unless
    /// given; the peer is `from` (loopback by default).
    func route(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = [],
               from address: String = "127.0.0.1", timeout: Double = 30) throws -> RawHTTP.Response {
        var fields = HTTPHeaders(headers.map { (name: $0.0, value: $0.1) })
        if fields["Host"] == nil { fields.add(name: "Host", value: "127.0.0.1:\(port)") }
        let parts = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let query: [(name: String, value: String)] = parts.count < 2 ? [] : parts[1].split(separator: "&").map { pair in
            let field = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map {
                String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0)
            }
            return (name: field[0], value: field.count > 1 ? field[1] : "")
        }
        let request = HTTPRequest(method: method, path: String(parts[0]), query: query, headers: fields, body: body,
                                  remoteAddress: address)
        let answer = Mutex<HTTPResponse?>(nil)
        let done = DispatchSemaphore(value: 0)
        application.handle(request) { response in
            answer.withLock { $0 = response }
            done.signal()
        }
        guard done.wait(timeout: .now() + timeout) == .success, let response = answer.withLock({ $0 }) else {
            throw RouteTimeout(method: method, path: path)
        }
        return RawHTTP.Response(status: response.status, headers: response.headers.fields, body: response.body)
    }

    struct RouteTimeout: Error, CustomStringConvertible {
        let method: String, path: String
        var description: String { "no answer to \(method) \(path)" }
    }

    /// Sends raw bytes and reads the whole response.
    func raw(_ request: String) throws -> RawHTTP.Response {
        try RawHTTP.exchange(port: port, request: Array(request.utf8))
    }

    /// A request built from parts, with `Host` and `Content-Length` filled in unless given.
    func request(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = [])
        throws -> RawHTTP.Response {
        try RawHTTP.request(port: port, method: method, path: path, headers: headers, body: body)
    }

    /// Polls `condition` until true or `timeout` seconds pass.
    func waitUntil(timeout: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
        try TestServer.waitUntil(timeout: timeout, condition)
    }

    static func waitUntil(timeout: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return true }
            usleep(10_000)
        }
        return try condition()
    }

    /// Makes deliveries final, so a test can count them without sleeping: waits until no memo is
    /// queued, retrying or sending, then stops the worker (which lets any send in flight finish).
    /// Nothing is left that could still be delivered. Call it last: the worker does not start again.
    func finishDeliveries(timeout: Double = 10) throws -> Bool {
        let settled = try waitUntil(timeout: timeout) { try outbox.nextDueAt() == nil }
        application.worker.stop()
        return settled
    }

    /// Files in the Maildir's `new/`.
    func deliveredFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: maildir + "/new")) ?? []).sorted()
            .map { maildir + "/new/" + $0 }
    }
}
