import Foundation
import Synchronization
import Testing
@testable import Jotter

/// Issue 10, items 1–6: the HTTP edge under clients that half-close, trickle, hold bodies, play with
/// paths and send framing two parsers could read differently.

// MARK: Path normalisation (item 4)

@Suite struct PathNormalisationTests {
    @Test func collapsesEmptyAndDotSegments() {
        let cases: [(String, String)] = [
            ("/", "/"), ("//", "/"), ("/history", "/history"), ("//history", "/history"),
            ("/./history", "/history"), ("/history/", "/history"), ("///history//x/.//", "/history/x"),
            ("/i18n/%65n.json", "/i18n/en.json"), ("/%2e/history", "/history"), ("/caf%C3%A9", "/café"),
            ("/a:b@c!$&'()*+,;=-._~", "/a:b@c!$&'()*+,;=-._~"),
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
    /// of `/history`.
    @Test func policyAndRouterAgreeOnEveryPath() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        #expect(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                   body: Array("private subject".utf8)).status == 204)
        let crossSite = [("Sec-Fetch-Site", "cross-site")]
        for path in ["/history", "//history", "/./history", "/history/", "///history", "/%2E/history",
                     "//history?limit=5", "//rating", "/history//", "//history/00000000-0000-0000-0000-000000000000"] {
            let response = try server.route("GET", path, headers: crossSite)
            #expect(response.status == 403, "\(path)")
            #expect(response.errorCode == "cross_origin", "\(path)")
            #expect(!response.text.contains("private subject"), "\(path)")
        }
        for path in ["/history%2F", "/%2Fhistory", "/history/..", "/x/../history", "/history%00", "/history/..%2Fetc"] {
            let response = try server.route("GET", path, headers: crossSite)
            #expect(response.status == 400, "\(path)")
            #expect(response.errorCode == "bad_path", "\(path)")
            #expect(response.header("Cache-Control") == "no-store", "\(path)")
        }
        // Same origin, the collapsed path is the real one.
        let history = try server.route("GET", "//history")
        #expect(history.status == 200)
        #expect(history.text.contains("private subject"))
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

    static func registry(perClient: Int = 16, total: Int = 64, header: UInt64 = 10, request: UInt64 = 60)
        -> (ConnectionRegistry, Closed) {
        let closed = Closed()
        let registry = ConnectionRegistry(
            limits: .init(perClient: perClient, total: total, headerTimeout: header * second,
                          requestTimeout: request * second),
            closeSocket: { fd in closed.descriptors.withLock { $0.append(fd) } })
        return (registry, closed)
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
}
