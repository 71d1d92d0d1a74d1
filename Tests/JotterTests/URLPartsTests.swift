import Testing
@testable import Jotter

/// The one URL parser: relay URLs (`smtp://`, `smtps://`, `resend://`), Resend's `base=`, and the
/// host and port the delivery worker probes while a relay is unreachable.
@Suite struct URLPartsTests {
    @Test func splitsEveryPart() throws {
        let url = try #require(URLParts("SMTP://me:pw@mail.example.com:2525/path?from=a@b.c&to=d@e.f&tls#frag"))
        #expect(url.scheme == "smtp")
        #expect(url.user == "me")
        #expect(url.password == "pw")
        #expect(url.host == "mail.example.com")
        #expect(url.port == 2525)
        #expect(url.path == "/path")
        #expect(url.query == [.init(name: "from", value: "a@b.c"), .init(name: "to", value: "d@e.f"),
                              .init(name: "tls", value: nil)])
        #expect(url.queryValue("tls") == "")
        #expect(url.queryValue("missing") == nil)
    }

    @Test(arguments: [
        ("smtp://[::1]:8025", "::1", 8025), ("http://[::1]:8025/emails", "::1", 8025),
        ("https://[2001:db8::1]/", "2001:db8::1", 443), ("smtp://[::ffff:127.0.0.1]", "::ffff:127.0.0.1", 587),
        ("smtp://[fe80::1%25eth0]:25", "fe80::1%eth0", 25),
    ])
    func ipv6LiteralsLoseTheirBrackets(text: String, host: String, port: Int) throws {
        let url = try #require(URLParts(text))
        #expect(url.host == host)
        #expect(url.portOrDefault == port)
    }

    @Test(arguments: [("http://h", 80), ("https://h", 443), ("smtp://h", 587), ("smtps://h", 465),
                      ("HTTPS://h/x", 443), ("https://h:8443", 8443), ("http://h:", 80)])
    func defaultPortsPerScheme(text: String, port: Int) throws {
        #expect(try #require(URLParts(text)).portOrDefault == port)
    }

    @Test func aSchemeWithoutADefaultHasNoPort() throws {
        let url = try #require(URLParts("resend://re_123?to=me@example.com"))
        #expect(url.host == "re_123")
        #expect(url.port == nil)
        #expect(url.portOrDefault == nil)
    }

    @Test func userInfoIsPercentDecodedOnce() throws {
        let url = try #require(URLParts("smtp://me%40example.com:p%3Aw%2541%20d@host"))
        #expect(url.user == "me@example.com")
        #expect(url.password == "p:w%41 d", "decoded once: %2541 is the three characters %41")
    }

    @Test func theLastAtSeparatesUserInfoAndTheFirstColonThePassword() throws {
        let url = try #require(URLParts("smtp://a@b:c:d@host"))
        #expect(url.user == "a@b")
        #expect(url.password == "c:d")
        #expect(url.host == "host")
        #expect(try #require(URLParts("smtp://u:@host")).password == "")
        #expect(try #require(URLParts("smtp://@host")).user == "")
        #expect(try #require(URLParts("smtp://host")).user == nil)
    }

    @Test func aPercentThatStartsNoEscapeStaysAsTypedInSecretsAndQuery() throws {
        let url = try #require(URLParts("smtp://u:50%off@host?to=a%zz&x=%e2%82%ac"))
        #expect(url.password == "50%off")
        #expect(url.queryValue("to") == "a%zz")
        #expect(url.queryValue("x") == "€")
        #expect(url.queryValue("x+y") == nil)
        #expect(try #require(URLParts("smtp://h?a=1+2")).queryValue("a") == "1+2", "+ is not a space in a URL")
    }

    @Test func theLastValueOfARepeatedNameWins() throws {
        #expect(try #require(URLParts("smtp://h?to=a@b.c&to=d@e.f")).queryValue("to") == "d@e.f")
    }

    @Test(arguments: ["smtp:host", "smtp:/host", "://host", "1smtp://host", "smtp//host", "smtp://u:p@host:abc",
                      "smtp://host:+25", "smtp://host:99999", "smtp://host:25:26", "smtp://::1:25", "smtp://[::1",
                      "smtp://[::1]x", "smtp://[127.0.0.1]", "smtp://h[o]st", "smtp://ho%zzst", "smtp://ho st",
                      "smtp://host%0d%0a", "smtp://ho%2Fst", ""])
    func malformedHostsAndPortsAreRefused(text: String) {
        #expect(URLParts(text) == nil)
    }

    @Test func anEmptyHostParses() throws {
        #expect(try #require(URLParts("smtp://u:p@?to=a@b.c")).host == "")
        #expect(try #require(URLParts("smtp:///x")).host == "")
    }

    @Test func percentDecoding() {
        #expect(URLParts.percentDecoded("%2Fhome%2fme%20x") == "/home/me x")
        #expect(URLParts.percentDecoded("plain") == "plain")
        #expect(URLParts.percentDecoded("50%") == nil)
        #expect(URLParts.percentDecoded("%4") == nil)
        #expect(URLParts.percentDecoded("%ff") == nil, "not UTF-8")
    }

    // MARK: Through RelayURL

    @Test func smtpRelayOverIPv6LoopbackProbesTheBareAddress() throws {
        let relay = try RelayURL("smtp://[::1]:8025?tls=none&from=a@example.com&to=b@example.com")
        let smtp = try #require(relay.transport as? SMTPTransport)
        #expect(smtp.settings.host == "::1", "getaddrinfo cannot resolve [::1]")
        #expect(smtp.settings.port == 8025)
        #expect(smtp.url == "smtp://[::1]:8025")
    }

    @Test func smtpRelayCredentialsAndDefaultPorts() throws {
        let smtp = try #require(try RelayURL("smtp://me%40example.com:s%2540cret@mail.example.com").transport
            as? SMTPTransport)
        #expect(smtp.settings.username == "me@example.com")
        #expect(smtp.settings.password == "s%40cret")
        #expect(smtp.settings.port == 587)
        #expect(smtp.settings.requireTLS)
        let smtps = try #require(try RelayURL("smtps://me@example.com:pw@mail.example.com").transport
            as? SMTPTransport)
        #expect(smtps.settings.port == 465)
        #expect(smtps.settings.implicitTLS)
    }

    @Test func resendRelayBaseAndKey() throws {
        let relay = try RelayURL("resend://re_key?to=me@example.com&base=http://[::1]:8025/&timeout=5")
        let resend = try #require(relay.transport as? ResendTransport)
        #expect(resend.settings.apiKey == "re_key")
        #expect(resend.settings.baseURL == "http://[::1]:8025")
        #expect(resend.settings.timeoutSeconds == 5)
        #expect(relay.to == MailAddress(address: "me@example.com"))
        for base in ["HTTPS://api.example.com", "https://", "ftp://api.example.com", "http://api.example.com"] {
            #expect(throws: RelayURL.Failure.self, "\(base)") {
                try RelayURL("resend://re_key?to=me@example.com&base=\(base)")
            }
        }
    }
}
