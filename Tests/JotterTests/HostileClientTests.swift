import Foundation
import Synchronization
import Testing
@testable import Jotter

/// Issue 10, items 1–6: the HTTP edge under clients that half-close, trickle, hold bodies, play with
/// paths and send framing two parsers could read differently. Live tests use raw sockets (`Peer`), from
/// chosen 127.x.y.z source addresses where the client's address matters.

// MARK: Path normalisation (item 4)

@Suite struct PathNormalisationTests {
    @Test func collapsesEmptyAndDotSegments() {
        let cases: [(String, String)] = [
            ("/", "/"), ("//", "/"), ("/history", "/history"), ("//history", "/history"),
            ("/./history", "/history"), ("/history/", "/history"), ("///history//x/.//", "/history/x"),
            ("/i18n/%65n.json", "/i18n/en.json"), ("/%2e/history", "/history"), ("/caf%C3%A9", "/café"),
            ("/a:b@c!$&'()*+,;=-._~", "/a:b@c!$&'()*+,;=-._~"), ("/...", "/..."), ("/a./.b/..c", "/a./.b/..c"),
            ("/.well-known", "/.well-known"), ("/history/./", "/history"), ("/history/.", "/history"),
        ]
        for (raw, canonical) in cases {
            #expect(RequestPath.normalize(raw) == .success(canonical), "\(raw)")
        }
    }

    @Test func refusesWhatCouldMeanTwoPaths() {
        let cases: [(String, RequestPath.Refusal)] = [
            ("/../history", .dotSegment), ("/history/..", .dotSegment), ("/a/%2e%2e/b", .dotSegment),
            ("/a/.%2E/b", .dotSegment), ("/history%2F", .encodedSeparator), ("/%2fhistory", .encodedSeparator),
            ("/a%5Cb", .encodedSeparator), ("/a%00", .badEscape), ("/a%0A", .badEscape), ("/a%7f", .badEscape),
            ("/a%zz", .badEscape), ("/a%2", .badEscape), ("/a%", .badEscape), ("/%FF", .badEscape),
            ("/a b", .badCharacter), ("/a\\b", .badCharacter), ("/a\u{7F}", .badCharacter), ("/é", .badCharacter),
            ("/a#b", .badCharacter), ("/a\"b", .badCharacter), ("/a<b>", .badCharacter), ("*", .notAPath),
            ("http://127.0.0.1/history", .notAPath), ("", .notAPath), ("history", .notAPath),
        ]
        for (raw, refusal) in cases {
            #expect(RequestPath.normalize(raw) == .failure(refusal), "\(raw.debugDescription)")
        }
    }

    /// The policy and the router see the same path: a cross-site read of `//history` is refused like one
    /// of `/history`, at the router level (no socket) and live.
    @Test func policyAndRouterAgreeOnEveryPath() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        #expect(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                   body: Array("private subject".utf8)).status == 204)
        let crossSite = [("Sec-Fetch-Site", "cross-site")]
        for path in ["/history", "//history", "/./history", "/history/", "///history", "/%2E/history",
                     "//history?limit=5", "//rating", "/history//", "//history/00000000-0000-0000-0000-000000000000"] {
            for response in [try server.route("GET", path, headers: crossSite),
                             try server.request("GET", path, headers: crossSite)] {
                #expect(response.status == 403, "\(path)")
                #expect(response.errorCode == "cross_origin", "\(path)")
                #expect(!response.text.contains("private subject"), "\(path)")
            }
        }
        for path in ["/history%2F", "/%2Fhistory", "/history/..", "/x/../history", "/history%00", "/history/..%2Fetc"] {
            for response in [try server.route("GET", path, headers: crossSite), try server.request("GET", path)] {
                #expect(response.status == 400, "\(path)")
                #expect(response.errorCode == "bad_path", "\(path)")
                #expect(response.header("Cache-Control") == "no-store", "\(path)")
            }
        }
        // Same origin, the collapsed path is the real one.
        for response in [try server.route("GET", "//history"), try server.request("GET", "//history")] {
            #expect(response.status == 200)
            #expect(response.text.contains("private subject"))
        }
        #expect(try server.request("GET", "/./healthz").status == 200)
    }
}

// MARK: Framing (item 5)

@Suite struct FramingCheckTests {
    @Test func hostMustBeANameAndDigits() {
        for host in ["127.0.0.1:7373", "localhost", "LOCALHOST:80", "[::1]:7373", "[::ffff:127.0.0.1]", "", ":7373",
                     "jotter.test:", "a-b.c_d~e%41!$&'()*+,;="] {
            #expect(RequestFraming.isValidHost(host), "\(host)")
        }
        for host in ["127.0.0.1:+7373", "127.0.0.1: 7373", "127.0.0.1:7373x", "127.0.0.1:-1", "127.0.0.1:7373 ",
                     "127.0.0.1:0x1cc5", "127.0.0.1:１２", "[::1]x", "[::1", "[]", "[::g]", "a b", "a/b", "a@b:1",
                     "a:1:2", "ex\u{E9}mple"] {
            #expect(!RequestFraming.isValidHost(host), "\(host)")
        }
    }

    @Test func namesAreTokensAndValuesHaveNoControls() {
        for name in ["Host", "X-A", "a!#$%&'*+-.^_`|~9"] {
            #expect(Array(name.utf8).withUnsafeBytes { RequestFraming.isToken($0) }, "\(name)")
        }
        for name in ["", "Host ", "X\tA", "X:A", "X(A)", "Ẋ"] {
            #expect(!Array(name.utf8).withUnsafeBytes { RequestFraming.isToken($0) }, "\(name.debugDescription)")
        }
        for value in ["", "a b\tc", "obs-text \u{E9}", "!~"] {
            #expect(Array(value.utf8).withUnsafeBytes { RequestFraming.isFieldValue($0) }, "\(value)")
        }
        for value in ["a\rb", "a\nb", "a\u{0}b", "a\u{1}", "a\u{7F}"] {
            #expect(!Array(value.utf8).withUnsafeBytes { RequestFraming.isFieldValue($0) }, "\(value.debugDescription)")
        }
    }

    /// Addresses as libmicrohttpd 0.9.75 leaves them for `GET / HTTP/1.1␍␊Host: h␍␊X:  v␍␊␍␊` at 1000.
    @Test func layoutOfIntactFoldedAndNulHeaders() {
        typealias Span = RequestFraming.FieldSpan
        // "GET / " ends at 1006, "HTTP/1.1" 1006..<1014, CR LF; "Host" at 1016, ": ", "h" at 1022, CR LF;
        // "X" at 1025, ":  ", "v" at 1029, CR LF CR LF: 1034 is the first byte after the head.
        let intact = [Span(name: 1016, nameLength: 4, value: 1022, valueLength: 1),
                      Span(name: 1025, nameLength: 1, value: 1029, valueLength: 1)]
        #expect(RequestFraming.layoutIsIntact(requestLineEnd: 1014, fields: intact, headerEnd: 1034))
        // Bare LF line ends: one byte each.
        let bareLF = [Span(name: 1015, nameLength: 4, value: 1021, valueLength: 1),
                      Span(name: 1023, nameLength: 1, value: 1026, valueLength: 1)]
        #expect(RequestFraming.layoutIsIntact(requestLineEnd: 1014, fields: bareLF, headerEnd: 1029))
        #expect(RequestFraming.layoutIsIntact(requestLineEnd: 1014, fields: [], headerEnd: 1018))
        // A folded line: the name moved to a fresh allocation (`Xb`), the value stayed.
        let folded = [Span(name: 1016, nameLength: 4, value: 1022, valueLength: 1),
                      Span(name: 9000, nameLength: 2, value: 1029, valueLength: 1)]
        #expect(!RequestFraming.layoutIsIntact(requestLineEnd: 1014, fields: folded, headerEnd: 1037))
        // `Host: h<NUL>zz`: the value ends early, the next line starts three bytes later than it could.
        let nul = [Span(name: 1016, nameLength: 4, value: 1022, valueLength: 1),
                   Span(name: 1028, nameLength: 1, value: 1032, valueLength: 1)]
        #expect(!RequestFraming.layoutIsIntact(requestLineEnd: 1014, fields: nul, headerEnd: 1037))
        // A NUL in the last value: the blank line comes too late.
        #expect(!RequestFraming.layoutIsIntact(requestLineEnd: 1014, fields: intact, headerEnd: 1040))
        #expect(RequestFraming.checksLayout, "Debian 12's libmicrohttpd is 0.9.75")
    }
}

// MARK: Connection limits and deadlines (item 2), body budget (item 3): no sockets

@Suite struct ConnectionRegistryTests {
    static let second: UInt64 = 1_000_000_000

    final class Closed: Sendable {
        let descriptors = Mutex<[Int32]>([])
        var list: [Int32] { descriptors.withLock { $0 } }
    }

    static func registry(perClient: Int = 16, total: Int = 64, header: UInt64 = 10, request: UInt64 = 60,
                         checked: Closed = Closed()) -> (ConnectionRegistry, Closed) {
        let closed = Closed()
        let registry = ConnectionRegistry(
            limits: .init(perClient: perClient, total: total, headerTimeout: header * second,
                          requestTimeout: request * second),
            closeSocket: { fd in closed.descriptors.withLock { $0.append(fd) } },
            endIfPeerFinished: { fd in
                checked.descriptors.withLock { $0.append(fd) }
                return false
            })
        return (registry, closed)
    }

    /// Only a connection's first request is checked for an end-of-file inline; after each later one the
    /// sweep looks once, while the connection waits for its next request, never during one.
    @Test func theSweepLooksForAFinishedPeerOnceAfterEachLaterRequest() {
        let checked = Closed()
        let (registry, _) = Self.registry(checked: checked)
        let idle = registry.opened(descriptor: 10, client: "a", now: 0)
        let busy = registry.opened(descriptor: 11, client: "a", now: 0)
        let fresh = registry.opened(descriptor: 12, client: "a", now: 0)
        #expect(registry.answering(idle).first, "a first request")
        registry.requestEnded(idle, now: 1)
        registry.answering(busy)
        registry.requestEnded(busy, now: 1)
        registry.headersReceived(busy)  // its second request is arriving
        registry.sweep(now: 2)
        #expect(checked.list == [10], "the idle one, not one in a request, not one never served")
        registry.sweep(now: 3)
        #expect(checked.list == [10], "once per request")
        #expect(!registry.answering(idle).first, "a later request")
        registry.sweep(now: 4)
        #expect(checked.list == [10], "not while it is being answered")
        registry.requestEnded(idle, now: 5)
        registry.sweep(now: 6)
        #expect(checked.list == [10, 10], "and again after that request")
        #expect(registry.answering(fresh).first)
    }

    @Test func thisMachineIsOneClient() {
        for address in ["127.0.0.1", "127.0.1.7", "127.255.255.254", "::1", "::ffff:127.0.0.1", "::FFFF:127.9.9.9"] {
            #expect(ConnectionRegistry.client(address: address) == "this machine", "\(address)")
        }
        #expect(ConnectionRegistry.client(address: "192.168.1.20") == "192.168.1.20")
        #expect(ConnectionRegistry.client(address: "::ffff:192.168.1.20") == "192.168.1.20")
        #expect(ConnectionRegistry.client(address: "2001:db8:1:2:aaaa::1")
                == ConnectionRegistry.client(address: "2001:db8:1:2:bbbb::99"), "one /64")
        #expect(ConnectionRegistry.client(address: "2001:db8:1:2::1")
                != ConnectionRegistry.client(address: "2001:db8:1:3::1"))
    }

    /// A client at its limit loses its longest-waiting connection to a new one, never one being answered.
    @Test func aNewConnectionClosesTheClientsLongestWaiting() {
        let (registry, closed) = Self.registry(perClient: 16)
        var ids: [Int] = []
        for index in 0..<16 {
            ids.append(registry.opened(descriptor: Int32(100 + index), client: "this machine", now: UInt64(index)))
        }
        registry.answering(ids[0])
        let other = registry.opened(descriptor: 300, client: "192.168.1.20", now: 50)
        #expect(closed.list.isEmpty, "another client has its own limit")
        let newest = registry.opened(descriptor: 200, client: "this machine", now: 100)
        #expect(closed.list == [101], "the oldest not being answered")
        #expect(registry.closing(ids[1]) == .crowded)
        #expect(registry.closing(newest) == nil)
        #expect(registry.count(client: "this machine") == 16)
        #expect(registry.closing(other) == nil)
        registry.closed(ids[1])
        #expect(registry.count() == 17)
    }

    @Test func aNewConnectionIsRefusedOnlyWhenAllAreBeingAnswered() {
        let (registry, closed) = Self.registry(perClient: 16, total: 20)
        let ids = (0..<16).map { registry.opened(descriptor: Int32($0), client: "a", now: 0) }
        ids.forEach { registry.answering($0) }
        let refused = registry.opened(descriptor: 99, client: "a", now: 1)
        #expect(registry.closing(refused) == .refused)
        #expect(closed.list == [99])
        // The total: any client's longest-waiting connection makes room.
        let others = (0..<4).map { registry.opened(descriptor: Int32(40 + $0), client: "b\($0)", now: 2 + UInt64($0)) }
        #expect(registry.count() == 20)
        let late = registry.opened(descriptor: 50, client: "c", now: 10)
        #expect(registry.closing(others[0]) == .crowded)
        #expect(registry.closing(late) == nil)
    }

    /// Deadlines count from the request's start whatever arrives meanwhile; being answered stops them.
    @Test func deadlinesIgnoreTricklingAndSpareAnswers() {
        let (registry, closed) = Self.registry(header: 10, request: 60)
        let second = Self.second
        let slowHeaders = registry.opened(descriptor: 1, client: "a", now: 0)
        let slowBody = registry.opened(descriptor: 2, client: "a", now: 0)
        let answered = registry.opened(descriptor: 3, client: "a", now: 0)
        let keptAlive = registry.opened(descriptor: 4, client: "a", now: 0)
        registry.headersReceived(slowBody)
        registry.headersReceived(answered)
        registry.answering(answered)
        registry.requestEnded(keptAlive, now: 55 * second)
        #expect(registry.sweep(now: 10 * second).isEmpty, "not yet past 10 s")
        #expect(registry.sweep(now: 10 * second + 1) == [.headerTimeout: 1])
        #expect(registry.closing(slowHeaders) == .headerTimeout)
        #expect(registry.sweep(now: 60 * second + 1) == [.requestTimeout: 1])
        #expect(registry.closing(slowBody) == .requestTimeout)
        #expect(registry.sweep(now: 65 * second + 1) == [.headerTimeout: 1], "an idle keep-alive connection")
        #expect(registry.closing(keptAlive) == .headerTimeout)
        #expect(registry.sweep(now: 1000 * second).isEmpty)
        #expect(registry.closing(answered) == nil)
        #expect(closed.list.sorted() == [1, 2, 4])
    }

    /// The posting and failed-token limits count clients the same way.
    @Test func rateLimitsCountThisMachineAsOneClient() {
        let limiter = RateLimiter(limits: .init(burst: 2, perSecond: 0.001), clock: ManualClock())
        #expect(limiter.retryAfter(client: "127.0.0.1") == nil)
        #expect(limiter.retryAfter(client: "127.0.1.9") == nil)
        #expect(limiter.retryAfter(client: "::1") != nil, "a third from this machine")
        #expect(limiter.retryAfter(client: "2001:db8:0:1::5") == nil)
        #expect(limiter.retryAfter(client: "2001:db8:0:1::6") == nil)
        #expect(limiter.retryAfter(client: "2001:db8:0:1:ffff::7") != nil, "a third from the same /64")
        #expect(limiter.retryAfter(client: "192.0.2.1") == nil)
    }

    @Test func theBodyBudgetReservesAndReleases() {
        let budget = BodyBudget(limit: 1000)
        #expect(budget.reserve(600))
        #expect(!budget.reserve(401))
        #expect(budget.reserve(400))
        #expect(budget.reserved == 1000)
        budget.release(600)
        #expect(budget.reserve(500))
        #expect(budget.reserved == 900)
        budget.release(900)
        #expect(budget.reserved == 0)
        budget.trimIfIdle()
    }

    /// One client (an address, a /64) holds at most its share: sixteen connections announcing 2 MiB each
    /// from one address held a relay's whole budget. This machine's own clients are not counted apart.
    @Test func oneClientHoldsAtMostItsShareOfTheBodyBudget() {
        let budget = BodyBudget(limit: 1000, perClient: 300)
        let stranger = ConnectionRegistry.client(address: "2001:db8:0:1::5")
        #expect(budget.reserve(200, client: stranger))
        #expect(!budget.reserve(101, client: ConnectionRegistry.client(address: "2001:db8:0:1:ffff::7")),
                "the same /64: past its share")
        #expect(budget.reserved == 200 && budget.reserved(by: stranger) == 200, "a refusal holds nothing")
        #expect(budget.reserve(100, client: stranger))
        #expect(budget.reserve(300, client: "192.0.2.1"), "another client has a share of its own")
        #expect(budget.reserve(400, client: ConnectionRegistry.client(address: "127.0.0.1")), "this machine: no share")
        #expect(budget.reserved == 1000)
        #expect(!budget.reserve(1, client: "192.0.2.2"), "the whole is spent")
        #expect(budget.reserved(by: "192.0.2.2") == 0, "a refusal by the whole takes nothing from the share")
        budget.release(300, client: stranger)
        #expect(budget.reserved(by: stranger) == 0)
        #expect(budget.reserve(300, client: stranger), "its share back")
    }
}

// MARK: Raw sockets

/// A client socket to 127.0.0.1 from a chosen loopback address, for bytes no HTTP client would send.
final class Peer {
    private(set) var descriptor: Int32

    init(port: Int, from source: String = "127.0.0.1") throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw RawHTTP.Failure(description: "socket failed") }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = UInt16(port).bigEndian
        remote.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        let connected = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, connected == 0 else {
            close(descriptor)
            throw RawHTTP.Failure(description: "connect from \(source) failed")
        }
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
    }

    /// Writes everything it can; false once the server has closed.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }

    @discardableResult
    func send(_ text: String) -> Bool {
        send(Array(text.utf8))
    }

    /// `shutdown(SHUT_WR)`, as `nc -N` does after its input: "that was all, I am still listening".
    func halfClose() {
        shutdown(descriptor, Int32(SHUT_WR))
    }

    /// Closes with a reset (SO_LINGER 0): the client is gone for good.
    func reset() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close(descriptor)
        descriptor = -1
    }

    /// Everything the server sends until it closes or `timeout` seconds pass; `closed` tells which.
    func readAll(timeout: Double = 30) -> (bytes: [UInt8], closed: Bool) {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return (received, false) }
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, Int32(min(left, 1) * 1000)) <= 0 { continue }
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count <= 0 { return (received, true) }
            received += buffer[0..<count]
        }
    }

    /// One whole response (headers and a `Content-Length` body), without waiting for the server to close.
    func nextResponse(timeout: Double = 30) -> RawHTTP.Response? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(timeout)
        while deadline.timeIntervalSinceNow > 0 {
            if let response = RawHTTP.parse(received),
               response.body.count >= Int(response.header("Content-Length") ?? "0") ?? 0 {
                return response
            }
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 1000) <= 0 { continue }
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count <= 0 { return nil }
            received += buffer[0..<count]
        }
        return nil
    }

    /// The first response the server sent before closing (nil if it sent none).
    func response(timeout: Double = 30) -> RawHTTP.Response? {
        RawHTTP.parse(readAll(timeout: timeout).bytes)
    }

    /// Whether the server closed the connection within `timeout` seconds (reading and dropping bytes).
    func closedByServer(timeout: Double) -> Bool {
        readAll(timeout: timeout).closed
    }

    /// How many status lines `bytes` holds.
    static func statusLines(_ bytes: [UInt8]) -> Int {
        String(decoding: bytes, as: UTF8.self).components(separatedBy: "HTTP/1.1 ").count - 1
    }
}

/// Writes a byte to every socket every `interval` seconds on its own thread, until stopped.
final class Trickle: Sendable {
    private let stopped = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    init(_ descriptors: [Int32], interval: Double = 0.2, byte: UInt8 = UInt8(ascii: "x")) {
        let thread = Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                for fd in descriptors {
                    var value = byte
                    _ = Glibc.send(fd, &value, 1, Int32(MSG_NOSIGNAL))
                }
                Thread.sleep(forTimeInterval: interval)
            }
            finished.signal()
        }
        thread.start()
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        finished.wait()
    }
}

extension TestServer {
    var http: HTTPServer { application.server }

    /// Memos in the outbox, whatever their state.
    func storedCount() throws -> Int {
        try outbox.history.counts().values.reduce(0, +)
    }

    func post(_ text: String) -> String {
        "POST /send HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: text/plain\r\n"
            + "Content-Length: \(text.utf8.count)\r\n\r\n" + text
    }
}

// MARK: Every complete request gets exactly one answer (item 1)

@Suite struct HalfCloseTests {
    /// A server whose deadlines are two minutes away: a connection that ends must end because its
    /// answer ended it, not a timeout.
    static func serverWithDistantDeadlines(_ directory: TemporaryDirectory) throws -> TestServer {
        try TestServer(dataDirectory: directory.file("data")) {
            $0.http.headerTimeoutSeconds = 120
            $0.http.idleTimeoutSeconds = 120
        }
    }

    /// Clients that send a complete POST and then half-close (`nc -N`), many at once and with other
    /// connections open: each gets its 204, and exactly the answered memos are stored.
    @Test func halfClosedPostsAllGetTheirAnswers() throws {
        let directory = TemporaryDirectory()
        let server = try Self.serverWithDistantDeadlines(directory)
        defer { server.stop() }
        let idle = try (0..<4).map { _ in try Peer(port: server.port) }
        let peers = try (0..<40).map { index in
            let peer = try Peer(port: server.port)
            #expect(peer.send(server.post("half-closed memo \(index)")))
            peer.halfClose()
            return peer
        }
        var ids: Set<String> = []
        for (index, peer) in peers.enumerated() {
            let (bytes, closed) = peer.readAll(timeout: 30)
            let response = RawHTTP.parse(bytes)
            #expect(response?.status == 204, "memo \(index): \(String(describing: response?.status))")
            #expect(closed, "memo \(index): the connection ends with its answer")
            if let id = response?.header("X-Message-Id") { ids.insert(id) }
        }
        for index in 0..<5 {  // and a request answered at once, not after a commit
            let peer = try Peer(port: server.port)
            peer.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\n\r\n")
            peer.halfClose()
            let (bytes, closed) = peer.readAll(timeout: 30)
            #expect(RawHTTP.parse(bytes)?.status == 200, "GET \(index)")
            #expect(closed, "GET \(index): the connection ends with its answer")
        }
        #expect(ids.count == 40)
        #expect(try server.storedCount() == ids.count, "as many memos stored as answered")
        withExtendedLifetime(idle) {}
        #expect(!server.logs.captured.contains("status=aborted"))
    }

    /// A keep-alive client whose later request comes with its end-of-file (its first came alone) gets
    /// its answer, and the connection ends soon after, not at a timeout (they are two minutes away here).
    /// Later requests are not checked inline; the registry's sweep looks once after each.
    @Test func aHalfCloseAfterALaterRequestEndsTheConnection() throws {
        let directory = TemporaryDirectory()
        let server = try Self.serverWithDistantDeadlines(directory)
        defer { server.stop() }
        let healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\n\r\n"
        for (later, status) in [(healthz, 200), (server.post("a later memo"), 204)] {
            let peer = try Peer(port: server.port)
            #expect(peer.send(healthz))
            #expect(peer.nextResponse(timeout: 30)?.status == 200, "the first answer; the connection stays")
            #expect(peer.send(later))
            peer.halfClose()
            let (bytes, closed) = peer.readAll(timeout: 30)
            #expect(RawHTTP.parse(bytes)?.status == status)
            #expect(closed, "the connection ends after its answer")
        }
        #expect(try server.storedCount() == 1)
        #expect(!server.logs.captured.contains("status=aborted"))
    }

    /// Pipelined requests sent at once and then the end-of-file (`printf '…' | nc -N`): every one gets
    /// its answer, in order, and then the connection ends, not at a timeout (two minutes away here). The
    /// first request's inline check sees the end-of-file but also that more was sent than that request.
    @Test func pipelinedRequestsBeforeAHalfCloseAreAllAnswered() throws {
        let directory = TemporaryDirectory()
        let server = try Self.serverWithDistantDeadlines(directory)
        defer { server.stop() }
        let healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\n\r\n"
        let cases: [(requests: [String], statuses: [Int])] = [
            ([healthz, healthz], [200, 200]),
            ([server.post("pipelined first"), healthz, server.post("pipelined last")], [204, 200, 204]),
        ]
        for (requests, statuses) in cases {
            let peer = try Peer(port: server.port)
            #expect(peer.send(requests.joined()))
            peer.halfClose()
            let (bytes, closed) = peer.readAll(timeout: 30)
            #expect(RawHTTP.responses(in: bytes).map(\.status) == statuses)
            #expect(closed, "the connection ends after the last answer")
        }
        #expect(try server.storedCount() == 2)
        #expect(!server.logs.captured.contains("status=aborted"))
    }

    /// A client that leaves for good (reset) while its memo is being stored: the memo stays stored, and
    /// the log names its id, so a retry without an Idempotency-Key can be recognised.
    @Test func anAbandonedAnswerIsLoggedWithItsMessageID() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        // Hold SQLite's write lock so the memo cannot be committed until the client is gone.
        let blocker = try Database(path: server.dataDirectory + "/jotter.db")
        try blocker.execute("PRAGMA busy_timeout = 20000")  // the server may be writing at this moment
        try blocker.execute("BEGIN IMMEDIATE")
        let peer = try Peer(port: server.port)
        #expect(peer.send(server.post("stored, never answered")))
        let handedOver = server.waitUntil(timeout: 20) { server.http.registry.answeringCount() == 1 }
        peer.reset()
        try blocker.execute("ROLLBACK")
        blocker.close()
        #expect(handedOver)
        var line: Substring?
        #expect(server.waitUntil(timeout: 20) {
            line = server.logs.captured.split(separator: "\n").first { $0.contains("client left before its answer") }
            return line != nil
        }, "\(server.logs.captured)")
        let id = try #require(line?.split(separator: " ").first { $0.hasPrefix("message.id=") }?.dropFirst(11))
        #expect(try server.outbox.history.record(id: String(id)) != nil, "the memo named in the log is stored")
        #expect(try server.storedCount() == 1)
    }
}

// MARK: Framing: refused on purpose, never a hang (items 5 and 6)

@Suite struct FramingTests {
    /// Each of these gets a JSON error with the security headers, at once, and stores nothing.
    @Test func ambiguousFramingIsRefused() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let host = "Host: 127.0.0.1:\(server.port)\r\n"
        let post = "POST /send HTTP/1.1\r\n"
        let memo = "Content-Type: text/plain\r\nContent-Length: 4\r\n\r\nmemo"
        let chunked = "\r\n\r\n4\r\nmemo\r\n0\r\n\r\n"
        let cases: [(String, String, Int, String)] = [
            ("two Transfer-Encoding", post + host + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
                + chunked, 400, "bad_request"),
            ("Transfer-Encoding and Content-Length", post + host + "Content-Length: 4\r\nTransfer-Encoding: chunked"
                + chunked, 400, "bad_request"),
            ("two Content-Length", post + host + "Content-Length: 4\r\n" + memo, 400, "bad_request"),
            ("space before colon", post + host + "Content-Length : 4\r\n\r\nmemo", 400, "bad_request"),
            ("tab before colon", "GET /healthz HTTP/1.1\r\n" + host + "X-Note\t: a\r\n\r\n", 400, "bad_request"),
            ("folded header", "GET /healthz HTTP/1.1\r\n" + host + "X-Note: a\r\n b\r\n\r\n", 400, "bad_request"),
            ("tab-folded header", "GET /healthz HTTP/1.1\r\n" + host + "X-Note: a\r\n\tb\r\n\r\n", 400, "bad_request"),
            ("folded Content-Type", post + host + "Content-Type: text/plain;\r\n charset=utf-8\r\n"
                + "Content-Length: 4\r\n\r\nmemo", 400, "bad_request"),
            ("folded Transfer-Encoding", post + host + "Transfer-Encoding: chunked\r\n x" + chunked, 400,
             "bad_request"),
            ("NUL in a value", "GET /healthz HTTP/1.1\r\n" + host + "X-Note: a\u{0}b\r\n\r\n", 400, "bad_request"),
            ("NUL in the last value", "GET /healthz HTTP/1.1\r\nX-Note: a\r\n" + host.dropLast(2) + "\u{0}zz\r\n\r\n",
             400, "bad_request"),
            ("bare CR in a value", "GET /healthz HTTP/1.1\r\n" + host + "X-Note: a\rb\r\n\r\n", 400, "bad_request"),
            ("control character in a value", "GET /healthz HTTP/1.1\r\n" + host + "X-Note: a\u{1}b\r\n\r\n", 400,
             "bad_request"),
            ("NUL in the target", "GET /healthz\u{0}x HTTP/1.1\r\n" + host + "\r\n", 400, "bad_request"),
            ("space in the target", "GET /heal thz HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n", 400,
             "bad_path"),
            ("port with a plus", post + "Host: 127.0.0.1:+\(server.port)\r\n" + memo, 400, "bad_request"),
            ("port with letters", post + "Host: 127.0.0.1:\(server.port)x\r\n" + memo, 400, "bad_request"),
            ("port in hex", post + "Host: 127.0.0.1:0x\(String(server.port, radix: 16))\r\n" + memo, 400,
             "bad_request"),
            ("port with a trailing space", post + "Host: 127.0.0.1:\(server.port) \r\n" + memo, 400, "bad_request"),
            ("unknown transfer coding", post + host + "Transfer-Encoding: gzip\r\n\r\nmemo", 501, "not_implemented"),
            ("coding before chunked", post + host + "Transfer-Encoding: gzip, chunked" + chunked, 501,
             "not_implemented"),
            ("identity coding", post + host + "Transfer-Encoding: identity\r\n\r\nmemo", 501, "not_implemented"),
            ("chunked spelt with a Kelvin sign", post + host + "Transfer-Encoding: chun\u{212A}ed" + chunked, 501,
             "not_implemented"),
            ("chunked in other case", post + host + "Transfer-Encoding: chunked, CHUNKED" + chunked, 400,
             "bad_request"),
            ("Content-Length past Int64 but within 2^64", post + host + "Content-Type: text/plain\r\n"
                + "Content-Length: 10000000000000000000\r\n\r\nmemo", 413, "too_large"),
            ("chunked twice in one header", post + host + "Transfer-Encoding: chunked, chunked" + chunked, 400,
             "bad_request"),
            ("chunked with a trailing space", post + host + "Transfer-Encoding: chunked " + chunked, 400, "bad_request"),
            ("chunked with a trailing tab", post + host + "Transfer-Encoding: chunked\t" + chunked, 400, "bad_request"),
            ("empty Transfer-Encoding", post + host + "Transfer-Encoding:" + chunked, 400, "bad_request"),
            ("Transfer-Encoding of spaces", post + host + "Transfer-Encoding:   " + chunked, 400, "bad_request"),
            // A device that is not paired may GET the page; with a body it held memory bodies share.
            ("GET with a body", "GET / HTTP/1.1\r\n" + host + "Content-Length: 4\r\n\r\nmemo", 400, "bad_request"),
            ("GET with a chunked body", "GET /manifest.webmanifest HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked"
                + chunked, 400, "bad_request"),
            ("Transfer-Encoding in HTTP/1.0", "POST /send HTTP/1.0\r\n" + host + "Transfer-Encoding: chunked"
                + chunked, 400, "bad_request"),
            ("trailer fields", post + host + "Transfer-Encoding: chunked\r\n\r\n4\r\nmemo\r\n0\r\nX-After: 1\r\n\r\n",
             400, "bad_request"),
        ]
        for (name, request, status, code) in cases {
            let peer = try Peer(port: server.port)
            peer.send(request)
            let (bytes, closed) = peer.readAll(timeout: 20)
            let response = RawHTTP.parse(bytes)
            #expect(response?.status == status, "\(name)")
            #expect(response?.errorCode == code, "\(name): \(response?.text ?? "no answer")")
            #expect(response?.header("Content-Type") == "application/json", "\(name)")
            #expect(response?.header("X-Content-Type-Options") == "nosniff", "\(name)")
            #expect(response?.header("Cache-Control") == "no-store", "\(name)")
            #expect(Peer.statusLines(bytes) == 1, "\(name): one answer")
            #expect(closed, "\(name): connection closed")
        }
        // HEAD likewise (its answer has a status and no body).
        let head = try Peer(port: server.port)
        head.send("HEAD / HTTP/1.1\r\n" + host + "Content-Length: 4\r\n\r\nmemo")
        #expect(RawHTTP.parse(head.readAll(timeout: 20).0)?.status == 400, "HEAD with a body")
        #expect(try server.storedCount() == 0)
        // The same server still serves an honest request.
        #expect(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")], body: Array("ok".utf8))
            .status == 204)
    }

    /// What libmicrohttpd refuses by itself, before Jotter sees the request: answered and closed at once,
    /// nothing stored, but in its own words (README, "Security").
    @Test func libmicrohttpdsOwnRefusalsAreAnsweredAndClosed() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let host = "Host: 127.0.0.1:\(server.port)\r\n"
        let cases: [(String, String, Int)] = [
            ("Content-Length not a number", "POST /send HTTP/1.1\r\n" + host + "Content-Length: 4x\r\n\r\nmemo", 400),
            ("negative Content-Length", "POST /send HTTP/1.1\r\n" + host + "Content-Length: -4\r\n\r\nmemo", 400),
            ("Content-Length list", "POST /send HTTP/1.1\r\n" + host + "Content-Length: 4, 4\r\n\r\nmemo", 400),
            ("Content-Length past 2^64", "POST /send HTTP/1.1\r\n" + host
                + "Content-Length: 99999999999999999999999\r\n\r\nmemo", 413),
            ("a line without a colon", "GET /healthz HTTP/1.1\r\n" + host + "X-Note\r\n\r\n", 400),
            ("URI too long", "GET /" + String(repeating: "a", count: 40_000) + " HTTP/1.1\r\n" + host + "\r\n", 414),
            ("header too large", "GET /healthz HTTP/1.1\r\n" + host + "X-Filler: "
                + String(repeating: "a", count: 40_000) + "\r\n\r\n", 431),
            ("HTTP/2.0 request line", "GET /healthz HTTP/2.0\r\n" + host + "\r\n", 505),
        ]
        for (name, request, status) in cases {
            let peer = try Peer(port: server.port)
            peer.send(request)
            let (bytes, closed) = peer.readAll(timeout: 20)
            let response = RawHTTP.parse(bytes)
            #expect(response?.status == status, "\(name)")
            #expect(closed, "\(name): connection closed")
            #expect(response?.header("Connection") == "close", "\(name)")
            withKnownIssue("libmicrohttpd 0.9.75 builds these responses itself; no API adds headers or a body") {
                #expect(response?.header("X-Content-Type-Options") == "nosniff", "\(name)")
                #expect(response?.errorCode != nil, "\(name)")
            }
            if name.contains("Content-Length") {
                withKnownIssue("libmicrohttpd 0.9.75 sends its status line twice here (fixed in 1.0.0)") {
                    #expect(Peer.statusLines(bytes) == 1, "\(name)")
                }
            } else {
                #expect(Peer.statusLines(bytes) == 1, "\(name)")
            }
        }
        #expect(try server.storedCount() == 0)
        let log = server.logs.captured
        // Those after the request line are logged with their status (before it, libmicrohttpd tells nothing).
        #expect(log.contains("status=431") && log.contains("status=413"), "\(log)")
    }
}

// MARK: Slow clients (item 2)

@Suite struct SlowClientEdgeTests {
    static func trickling(_ server: TestServer, count: Int, network: Int, request: String) throws -> [Peer] {
        try (0..<count).map { index in
            let peer = try Peer(port: server.port, from: "127.0.\(network).\(1 + index % 8)")
            peer.send(request)
            return peer
        }
    }

    /// Connections trickling their headers from many 127.0.1.x addresses (this machine, one client) hold
    /// at most the per-client share, and /healthz keeps answering promptly while they trickle.
    @Test func tricklersFromManyLoopbackAddressesDoNotStarveHealthz() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let peers = try Self.trickling(server, count: 80, network: 1,
                                       request: "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nX-Slow: ")
        let trickle = Trickle(peers.map(\.descriptor))
        defer { trickle.stop() }
        let limit = server.http.configuration.perIPConnectionLimit
        for probe in 0..<10 {
            let started = Date()
            let response = try server.request("GET", "/healthz")
            #expect(response.status == 200, "probe \(probe)")
            // Not after the 10 s header timeout frees a slot; with room for a loaded machine.
            #expect(Date().timeIntervalSince(started) < 8, "probe \(probe) answered promptly")
            #expect(server.http.registry.count(client: "this machine") <= limit)
            Thread.sleep(forTimeInterval: 0.2)  // pacing the probes, not deciding anything
        }
        // Closed as room was made; on a loaded machine the last of those closes may still be on its way.
        var closed = 0
        _ = server.waitUntil(timeout: 30) {
            closed = peers.filter { $0.closedByServer(timeout: 0.02) }.count
            return closed >= 80 - limit
        }
        #expect(closed >= 80 - limit, "room was made by closing the longest-waiting tricklers")
    }

    /// However steadily bytes arrive, headers not complete within the header timeout end the connection.
    @Test func headersMustArriveInTime() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) { $0.http.headerTimeoutSeconds = 2 }
        defer { server.stop() }
        let started = Date()
        let peers = try Self.trickling(server, count: 20, network: 2,
                                       request: "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nX-Slow: ")
        let trickle = Trickle(peers.map(\.descriptor))
        defer { trickle.stop() }
        for (index, peer) in peers.enumerated() {
            #expect(peer.closedByServer(timeout: 30), "trickler \(index) closed")
        }
        #expect(Date().timeIntervalSince(started) > 1.5, "not before the deadline")
        #expect(server.waitUntil(timeout: 20) { server.logs.captured.contains("header_timeout=") })
        #expect(server.waitUntil(timeout: 20) { server.http.registry.count() == 0 }, "their slots are free again")
        #expect(try server.request("GET", "/healthz").status == 200)
    }

    /// A body trickled a byte at a time cannot stretch a request past the request timeout.
    @Test func theWholeRequestMustArriveInTime() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) { $0.http.requestTimeoutSeconds = 2 }
        defer { server.stop() }
        let started = Date()
        let peer = try Peer(port: server.port, from: "127.0.3.1")
        peer.send("POST /send HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nContent-Type: text/plain\r\n"
                  + "Content-Length: 1000\r\n\r\nslow")
        let trickle = Trickle([peer.descriptor], interval: 0.1)
        defer { trickle.stop() }
        #expect(peer.closedByServer(timeout: 30))
        #expect(Date().timeIntervalSince(started) > 1.5, "not before the deadline")
        #expect(server.waitUntil(timeout: 20) { server.logs.captured.contains("status=request_timeout") })
        #expect(try server.storedCount() == 0)
    }
}

// MARK: Memory for bodies (item 3)

@Suite struct BodyBudgetLiveTests {
    /// Bodies held by unfinished requests count against one budget; beyond it a request gets 503 with
    /// Retry-After before its body is read (or, chunked, when it would outgrow it), and the budget comes
    /// back when the holders go.
    @Test func bodiesBeyondTheBudgetGet503() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 64 * 1024) {
            $0.http.bodyMemoryBytes = 128 * 1024
        }
        defer { server.stop() }
        let head = "POST /send HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nContent-Type: text/plain\r\n"
        let holders = try (0..<2).map { _ in
            let peer = try Peer(port: server.port)
            peer.send(head + "Content-Length: 60000\r\n\r\n" + String(repeating: "a", count: 1000))
            return peer
        }
        #expect(server.waitUntil(timeout: 20) { server.http.bodyBudget.reserved == 120_000 })
        let refused = try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                         body: Array(repeating: UInt8(ascii: "b"), count: 60_000))
        #expect(refused.status == 503)
        #expect(refused.errorCode == "busy")
        #expect(refused.header("Retry-After") == "2")
        #expect(refused.header("Cache-Control") == "no-store")
        let chunk = String(repeating: "c", count: 10_000)
        let chunked = try server.raw(head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                     + "2710\r\n\(chunk)\r\n2710\r\n\(chunk)\r\n0\r\n\r\n")
        #expect(chunked.status == 503, "a chunked body is counted as it grows")
        #expect(chunked.errorCode == "busy")
        holders.forEach { $0.reset() }
        #expect(server.waitUntil(timeout: 20) { server.http.bodyBudget.reserved == 0 }, "given back")
        let accepted = try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                          body: Array(repeating: UInt8(ascii: "d"), count: 30_000))
        #expect(accepted.status == 204)
        #expect(try server.storedCount() == 1)
    }
}

// MARK: Memory for bodies, and devices that are not paired

@Suite struct UnpairedBodyTests {
    /// In LAN mode a request with a body is judged on its head: a device that is not paired (or sends a
    /// wrong token, or a foreign Host) is refused before any of its body is read, so strangers cannot
    /// hold the memory bodies share and starve the paired phone. Pairing requests, the one thing a
    /// stranger may send with a body, may be only as large as a token and a name need.
    @Test func strangersAreRefusedBeforeTheirBodiesAndCannotHoldTheBudget() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 64 * 1024) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanTrustsLoopback = false
            $0.http.bodyMemoryBytes = 128 * 1024
        }
        defer { server.stop() }
        let pairing = try #require(server.application.lanInfo?.pairingToken)
        let paired = try server.request("POST", "/pair", headers: [("Content-Type", "application/json")],
                                        body: Array("{\"pairing_token\":\"\(pairing)\",\"name\":\"phone\"}".utf8))
        #expect(paired.status == 201)
        let token = try #require((paired.json as? [String: Any])?["device_token"] as? String)

        // Each stranger announces an almost-whole budget's worth and sends a little of it, then waits.
        let host = "Host: 127.0.0.1:\(server.port)\r\n"
        let post = "POST /send HTTP/1.1\r\n\(host)Content-Type: text/plain\r\n"
        let heads: [(head: String, code: String, status: Int)] = [
            (post + "Content-Length: 60000\r\n\r\n", "not_paired", 401),
            (post + "Authorization: Bearer not-a-token\r\nContent-Length: 60000\r\n\r\n", "invalid_token", 401),
            (post + "Transfer-Encoding: chunked\r\n\r\n2710\r\n", "not_paired", 401),
            ("POST /send HTTP/1.1\r\nHost: evil.example\r\nContent-Type: text/plain\r\n"
                + "Authorization: Bearer \(token)\r\nContent-Length: 60000\r\n\r\n", "forbidden_host", 403),
            ("POST /pair HTTP/1.1\r\n\(host)Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n",
             "too_large", 413),
            ("POST /pair HTTP/1.1\r\n\(host)Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + "2710\r\n", "too_large", 413),
        ]
        for (head, code, status) in heads {
            let stranger = try Peer(port: server.port)
            stranger.send(head + String(repeating: "a", count: 1000))
            let answer = stranger.response(timeout: 20)
            #expect(answer?.status == status, "\(code): answered before the body")
            #expect(answer?.errorCode == code)
            #expect(server.http.bodyBudget.reserved == 0, "\(code): nothing of the budget held")
        }

        // Two paired holders do hold it (so the check above means something), and get their memos in.
        let authorized = post + "Authorization: Bearer \(token)\r\nContent-Length: 60000\r\n\r\n"
        let holders = try (0..<2).map { _ in
            let peer = try Peer(port: server.port)
            peer.send(authorized + String(repeating: "b", count: 1000))
            return peer
        }
        #expect(server.waitUntil(timeout: 20) { server.http.bodyBudget.reserved == 120_000 })
        for holder in holders {
            holder.send(String(repeating: "b", count: 59_000))
            #expect(holder.nextResponse(timeout: 20)?.status == 204)
        }
        #expect(try server.storedCount() == 2, "only the paired device's memos are stored")
    }
}

// MARK: Stopping with answers outstanding

@Suite struct StoppingWithAnswersOutstandingTests {
    /// A request still waiting for its handler when the server stops (say `POST /destination` waiting on
    /// an unreachable relay) is answered `503 stopping`, and the process lives on: libmicrohttpd 0.9.75
    /// aborts the whole process when it is stopped with a connection asleep. A request whose handler
    /// answers during the drain gets that answer, and a handler answering after the stop reaches nobody —
    /// but a memo it stored after all is named in the log, and the 503 says it may have been.
    @Test func aRequestStillWaitingForItsHandlerIsAnswered503AndTheProcessLivesOn() throws {
        let pending = Mutex<[String: @Sendable (HTTPResponse) -> Void]>([:])
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        let sink = LogSink.memory()
        let server = HTTPServer(configuration: configuration, logger: Logger(label: "http", sink: sink)) { request, respond in
            if request.path == "/never" || request.path == "/later" {
                pending.withLock { $0[request.path] = respond }
            } else {
                respond(HTTPResponse(status: 204))
            }
        }
        try server.start()
        let host = "Host: 127.0.0.1:\(server.port)\r\n"
        let waiting = try Peer(port: server.port)
        waiting.send("GET /never HTTP/1.1\r\n\(host)\r\n")
        let answeredLater = try Peer(port: server.port)
        answeredLater.send("GET /later HTTP/1.1\r\n\(host)\r\n")
        #expect(TestServer.waitUntil(timeout: 20) { server.parking.count == 2 }, "both connections asleep")
        let stopped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            server.stop(drainTimeout: 3)
            stopped.signal()
        }
        // The second handler answers during the drain: its own answer goes out.
        let later = try #require(pending.withLock { $0["/later"] })
        later(HTTPResponse(status: 204))
        #expect(answeredLater.nextResponse(timeout: 20)?.status == 204)
        let refused = waiting.response(timeout: 20)
        #expect(refused?.status == 503)
        #expect(refused?.errorCode == "stopping")
        #expect(refused?.text.contains("may have been carried out") == true, "\(refused?.text ?? "")")
        #expect(refused?.header("Retry-After") == "5")
        #expect(stopped.wait(timeout: .now() + 30) == .success, "stop returned")
        #expect(server.parking.count == 0)
        // The first handler answers only now, after the daemon is gone: nothing to wake, nothing breaks.
        let never = try #require(pending.withLock { $0["/never"] })
        never(HTTPResponse(status: 204, messageID: "0199a1b2-late-stored"))
        #expect(sink.captured.contains("stored after the stopping server answered 503 message.id=0199a1b2-late-stored"),
                "\(sink.captured)")
        #expect(sink.captured.components(separatedBy: "stored after the stopping").count == 2, "only that one")
    }
}

// MARK: Command line

@Suite struct EdgeOptionTests {
    static func http(_ arguments: [String], environment: [String: String] = [:]) throws -> HTTPServer.Configuration {
        guard case .serve(let configuration) = try CommandLineOptions.parse(
            ["serve"] + arguments, environment: environment, sourceRoot: "/nonexistent/Sources/JotterCLI/main.swift")
        else { throw RawHTTP.Failure(description: "not serve") }
        return configuration.http
    }

    @Test func limitsComeFromFlagsOrTheEnvironment() throws {
        let defaults = try Self.http([])
        #expect(defaults.headerTimeoutSeconds == 10 && defaults.requestTimeoutSeconds == 60)
        #expect(defaults.bodyMemoryBytes == 32 << 20 && defaults.perIPConnectionLimit == 64)
        let flags = try Self.http(["--header-timeout", "5", "--request-timeout=30", "--body-memory", "8388608",
                                   "--connections-per-client", "2000"])
        #expect(flags.headerTimeoutSeconds == 5 && flags.requestTimeoutSeconds == 30)
        #expect(flags.bodyMemoryBytes == 8 << 20 && flags.perIPConnectionLimit == 2000)
        let environment = try Self.http([], environment: ["JOTTER_HEADER_TIMEOUT": "7", "JOTTER_REQUEST_TIMEOUT": "9",
                                                          "JOTTER_BODY_MEMORY": "2097152",
                                                          "JOTTER_CONNECTIONS_PER_CLIENT": "32"])
        #expect(environment.headerTimeoutSeconds == 7 && environment.requestTimeoutSeconds == 9)
        #expect(environment.bodyMemoryBytes == 2 << 20 && environment.perIPConnectionLimit == 32)
        for bad in [["--header-timeout", "0"], ["--request-timeout", "x"], ["--body-memory", "1000"],
                    ["--connections-per-client", "8"]] {
            #expect(throws: CommandLineOptions.UsageError.self, "\(bad)") { try Self.http(bad) }
        }
    }
}
