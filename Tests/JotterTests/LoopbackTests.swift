import Testing
@testable import Jotter

/// The one loopback predicate: peers that skip the device token, `Host` names we answer to, and hosts
/// that may receive plain text all decide with it.
@Suite struct LoopbackTests {
    @Test(arguments: ["127.0.0.1", "127.1.2.3", "127.255.255.255", "127.0.0.0", "::1", "0:0:0:0:0:0:0:1",
                      "::ffff:127.0.0.1", "::FFFF:127.9.8.7", "::ffff:7f00:1"])
    func loopbackAddresses(address: String) {
        #expect(Loopback.contains(address: address))
    }

    @Test(arguments: ["127.0.0.1.evil.com", "0127.0.0.1", "127.1", "127.0.0.1.", "127.0.0.1:80", " 127.0.0.1",
                      "0x7f000001", "2130706433", "127.000.0.1", "127.0.0.256", "128.0.0.1", "10.0.0.1", "0.0.0.0",
                      "::", "::2", "::127.0.0.1", "::ffff:128.0.0.1", "::fffe:127.0.0.1",
                      "fe80::1", "::1%lo", "[::1]", "localhost", "", "127.0.0.1\u{0}.evil.com"])
    func otherAddressesAreNot(address: String) {
        #expect(!Loopback.contains(address: address))
    }

    @Test(arguments: ["localhost", "LocalHost", "127.0.0.1", "127.1.2.3", "[::1]", "[::ffff:127.0.0.1]", "::1"])
    func loopbackHosts(host: String) {
        #expect(Loopback.contains(host: host))
    }

    @Test(arguments: ["127.0.0.1.evil.com", "0127.0.0.1", "localhost.evil.com", "[127.0.0.1]", "[::1", "::1]",
                      "[]", "[::2]", "[::1]:80", "example.com", "127.attacker.example", ""])
    func otherHostsAreNot(host: String) {
        #expect(!Loopback.contains(host: host))
    }

    @Test func hostHeaderAcceptsLoopbackLiteralsOnOurPortOnly() {
        let policy = RequestPolicy()
        policy.setPort(7373)
        for host in ["127.0.0.1:7373", "127.1.2.3:7373", "[::1]:7373", "[::ffff:127.0.0.1]:7373", "localhost:7373"] {
            #expect(policy.isAllowed(host: host), "\(host)")
        }
        for host in ["127.0.0.1.evil.com:7373", "0127.0.0.1:7373", "127.0.0.1:7374", "[::1]", "::1:7373",
                     "[::2]:7373", "127.1:7373"] {
            #expect(!policy.isAllowed(host: host), "\(host)")
        }
    }

    /// Allowed values are remembered, for their port only: after the port changes (a restart on
    /// another port in the same process), the old `Host` is refused, the new one allowed.
    @Test func anAllowedHostIsRememberedOnlyForItsPort() {
        let policy = RequestPolicy()
        policy.setPort(7373)
        #expect(policy.isAllowed(host: "localhost:7373"))
        #expect(policy.isAllowed(host: "localhost:7373"), "asked again")
        #expect(!policy.isAllowed(host: "localhost:7374"))
        policy.setPort(7374)
        #expect(!policy.isAllowed(host: "localhost:7373"), "the port it was allowed on is no longer ours")
        #expect(policy.isAllowed(host: "localhost:7374"))
        #expect(!policy.isAllowed(host: "evil.example:7374"))
    }
}
