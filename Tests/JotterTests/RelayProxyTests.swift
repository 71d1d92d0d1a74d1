import Foundation
import Testing
@testable import Jotter

/// A relay for a family or a team: behind a TLS proxy (`--trust-proxy`, whose `X-Forwarded-For` then
/// names the client for per-IP limits) or serving HTTPS itself (`--tls-cert`/`--tls-key`). The per-IP
/// limits behind a proxy run on both stores; HTTPS is the transport's business, tested on SQLite.
@Suite(.holdingSharedPostgres) struct RelayProxyTests {
    static func request(from peer: String, forwardedFor: [String]) -> HTTPRequest {
        HTTPRequest(method: "POST", path: "/v1/messages",
                    headers: HTTPHeaders(forwardedFor.map { (name: "X-Forwarded-For", value: $0) }), remoteAddress: peer)
    }

    @Test func theClientIsTheLastHopTheTrustedProxiesVouchFor() {
        let proxies: Set<String> = ["127.0.0.1", "10.0.0.2"]
        // The proxy appends the address it saw; whatever the client wrote itself stays to the left.
        #expect(ForwardedFor.client(Self.request(from: "127.0.0.1", forwardedFor: ["6.6.6.6, 198.51.100.7"]),
                                    trusted: proxies) == "198.51.100.7")
        // Two proxies in a row: skip both.
        #expect(ForwardedFor.client(Self.request(from: "127.0.0.1", forwardedFor: ["198.51.100.7", "10.0.0.2"]),
                                    trusted: proxies) == "198.51.100.7")
        // Anyone else's header is not believed.
        #expect(ForwardedFor.client(Self.request(from: "203.0.113.9", forwardedFor: ["198.51.100.7"]),
                                    trusted: proxies) == "203.0.113.9")
        // No header, or nothing but garbage and proxies: the peer itself.
        #expect(ForwardedFor.client(Self.request(from: "127.0.0.1", forwardedFor: []), trusted: proxies) == "127.0.0.1")
        #expect(ForwardedFor.client(Self.request(from: "127.0.0.1", forwardedFor: ["evil.example, 10.0.0.2"]),
                                    trusted: proxies) == "127.0.0.1")
        #expect(ForwardedFor.client(Self.request(from: "127.0.0.1", forwardedFor: ["198.51.100.7:443"]),
                                    trusted: proxies) == "127.0.0.1", "a port is not an address")
        // Without --trust-proxy the header means nothing.
        #expect(ForwardedFor.client(Self.request(from: "127.0.0.1", forwardedFor: ["198.51.100.7"]), trusted: []) == "127.0.0.1")
        // IPv6 compares in one spelling.
        #expect(ForwardedFor.client(Self.request(from: "0:0::1", forwardedFor: ["2001:DB8::7"]), trusted: ["::1"])
                == "2001:db8::7")
    }

    /// A relay listening on `::` sees an IPv4 proxy as `::ffff:10.0.0.2`; whichever way round the
    /// proxy is named and seen, it is the same proxy, and the client it names is one client.
    @Test func anIPv4MappedProxyIsTheSameProxy() {
        #expect(ForwardedFor.client(Self.request(from: "::ffff:10.0.0.2", forwardedFor: ["198.51.100.7"]),
                                    trusted: ["10.0.0.2"]) == "198.51.100.7")
        #expect(ForwardedFor.client(Self.request(from: "10.0.0.2", forwardedFor: ["198.51.100.7"]),
                                    trusted: [ForwardedFor.canonical("::FFFF:10.0.0.2")]) == "198.51.100.7")
        #expect(ForwardedFor.client(Self.request(from: "::ffff:10.0.0.2", forwardedFor: ["198.51.100.7, ::ffff:10.0.0.3"]),
                                    trusted: ["10.0.0.2", "10.0.0.3"]) == "198.51.100.7")
        #expect(ForwardedFor.client(Self.request(from: "10.0.0.2", forwardedFor: ["::ffff:198.51.100.7"]),
                                    trusted: ["10.0.0.2"]) == "198.51.100.7")
        #expect(ForwardedFor.canonical("::ffff:c633:6407") == "198.51.100.7")
        #expect(ForwardedFor.canonical("::FFFF:1.2.3.4") == "1.2.3.4")
        #expect(ForwardedFor.canonical("0:0::1") == "::1")
        #expect(ForwardedFor.canonical("evil.example") == "evil.example")
    }

    @Test(arguments: RelayStoreKind.available)
    func perIPLimitsCountTheForwardedClientOnlyFromTheTrustedProxy(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.path, store: store) {
            $0.trustedProxies = ["127.0.0.1"]
            $0.limits.devicePerMinute = nil
            $0.limits.ipPerHour = 1
        }
        defer { relay.stop() }
        let secret = try relay.register().secret
        try relay.verify(secret, "me@example.com")
        func send(from peer: String, client: String) throws -> Int {
            try relay.json("POST", "/v1/messages", secret: secret, ["to": "me@example.com", "body": "hi"],
                           headers: [("X-Forwarded-For", client)], from: peer).status
        }
        #expect(try send(from: "127.0.0.1", client: "198.51.100.7") == 202)
        #expect(try send(from: "127.0.0.1", client: "198.51.100.8") == 202, "another client behind the proxy")
        #expect(try send(from: "127.0.0.1", client: "198.51.100.7") == 429, "the same client again")
        // A client that reaches the relay directly cannot pose as many.
        #expect(try send(from: "203.0.113.9", client: "192.0.2.1") == 202)
        #expect(try send(from: "203.0.113.9", client: "192.0.2.2") == 429)
    }

    @Test func theCommandLineTakesTLSFilesAndProxies() throws {
        let directory = TemporaryDirectory()
        let certificates = try TestCertificates.make(in: directory.file("certs"))
        let configuration = try RelayCommandLineTests.configuration([
            "--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile,
            "--trust-proxy", "127.0.0.1, ::1",
        ])
        #expect(configuration.http.tls?.certificatePEM.contains("BEGIN CERTIFICATE") == true)
        #expect(configuration.trustedProxies == ["127.0.0.1", "::1"])
        #expect(throws: CommandLineOptions.UsageError.self) {
            try RelayCommandLineTests.configuration(["--tls-cert", certificates.certificateFile])
        }
        #expect(throws: CommandLineOptions.UsageError.self) {
            try RelayCommandLineTests.configuration(["--tls-cert", directory.file("none"), "--tls-key", certificates.keyFile])
        }
        #expect(throws: CommandLineOptions.UsageError.self) {
            try RelayCommandLineTests.configuration(["--trust-proxy", "proxy.example.com"])
        }
    }

    @Test func aRelayServesHTTPSAndAComposerTrustsItWithCA() throws {
        let directory = TemporaryDirectory()
        let certificates = try TestCertificates.make(in: directory.file("certs"))
        let tls = try RelayCommandLineTests.configuration([
            "--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile,
        ]).http.tls
        let relay = try RelayServer(dataDirectory: directory.file("relay")) { $0.http.tls = tls }
        defer { relay.stop() }
        let composer = try TestServer(dataDirectory: directory.file("composer"),
                                      relay: "jotter+https://localhost:\(relay.port)?ca=\(certificates.caFile)")
        defer { composer.stop() }
        let known = try relay.mailFiles(to: "me@example.com")
        let asked = try composer.route("POST", "/destination", headers: [("Content-Type", "application/json")],
                                       body: Array(#"{"address":"me@example.com"}"#.utf8))
        #expect(asked.status == 202, "over HTTPS, verified with ?ca=: \(asked.status) \(asked.text)")
        let code = try relay.newCode(to: "me@example.com", known: known)
        let confirmed = try composer.route("POST", "/destination/confirm", headers: [("Content-Type", "application/json")],
                                           body: Array("{\"code\":\"\(code)\"}".utf8))
        #expect(confirmed.status == 200, "\(confirmed.text)")
        let sent = try composer.route("POST", "/send", headers: [("Content-Type", "text/plain")], body: Array("over TLS".utf8))
        let id = try #require(sent.header("X-Message-Id"))
        #expect(composer.waitUntil(timeout: 20) {
            ((try? composer.route("GET", "/history/\(id)").json as? [String: Any])?["status"] as? String) == "sent"
        })

        // Without ?ca= the relay's certificate is not trusted: the composer refuses to talk to it.
        let stranger = try TestServer(dataDirectory: directory.file("stranger"), relay: "jotter+https://localhost:\(relay.port)")
        defer { stranger.stop() }
        let refused = try stranger.route("POST", "/destination", headers: [("Content-Type", "application/json")],
                                         body: Array(#"{"address":"me@example.com"}"#.utf8))
        #expect(refused.status == 502 && refused.errorCode == "relay_refused", "\(refused.text)")
    }
}
