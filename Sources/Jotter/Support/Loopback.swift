import Glibc

/// This machine's own addresses: 127.0.0.0/8, `::1`, and IPv4-mapped `::ffff:127.0.0.0/104`.
///
/// The one definition Jotter uses wherever "loopback" decides something: which peers skip the device
/// token, which `Host` names are ours, and where plain-text SMTP or HTTP may go. Addresses are parsed
/// with `inet_pton`, never matched by prefix, so a DNS name such as `127.0.0.1.example.com` (which
/// anyone can point anywhere) is never loopback.
enum Loopback {
    /// Whether `address`, a numeric IPv4 or IPv6 address as a socket reports it (`127.0.0.1`, `::1`,
    /// `::ffff:127.0.0.1`), is a loopback address. Names, brackets, ports and zones are not addresses.
    static func contains(address: String) -> Bool {
        // A NUL would end the C string early: "127.0.0.1\0.example.com" must not read as 127.0.0.1.
        guard !address.isEmpty, !address.utf8.contains(0) else { return false }
        var v4 = in_addr()
        // inet_pton(3): AF_INET takes exactly four decimal parts ("0127.0.0.1" and "127.1" are refused).
        if inet_pton(AF_INET, address, &v4) == 1 {
            return UInt32(bigEndian: v4.s_addr) >> 24 == 127
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: v6) { Array($0) }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }  // ::1
        // ::ffff:a.b.c.d carries an IPv4 address (RFC 4291 §2.5.5.2).
        return bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
    }

    /// Whether `host`, as written in a URL or a `Host` header without its port, names this machine:
    /// `localhost`, a loopback address, or a loopback IPv6 address in brackets (`[::1]`).
    static func contains(host: String) -> Bool {
        if host.caseInsensitiveEquals("localhost") { return true }
        if host.hasPrefix("[") && host.hasSuffix("]") && host.utf8.count > 2 {
            let inner = String(host.dropFirst().dropLast())
            return inner.contains(":") && contains(address: inner)
        }
        return contains(address: host)
    }
}
