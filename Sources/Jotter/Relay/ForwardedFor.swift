import Glibc

/// The client behind a TLS proxy: `X-Forwarded-For` read from the right, skipping the trusted
/// proxies (`--trust-proxy`), the first other address being the client — the only hop the proxy
/// itself vouches for. From any peer that is not a trusted proxy the header is ignored: anyone can
/// write it, and believing it would let one client spread over many per-IP limits.
enum ForwardedFor {
    /// The client address for limits and logs.
    static func client(_ request: HTTPRequest, trusted: Set<String>) -> String {
        guard !trusted.isEmpty, trusted.contains(canonical(request.remoteAddress)) else { return request.remoteAddress }
        let hops = request.headers.values("X-Forwarded-For")
            .flatMap { $0.split(separator: ",") }
            .map { String($0.trimmingCharacters(in: " \t")) }
        for hop in hops.reversed() {
            // An address that does not parse ends the trust: what lies left of it is the client's own say.
            guard isAddress(hop) else { break }
            let address = canonical(hop)
            if !trusted.contains(address) { return address }
        }
        return request.remoteAddress
    }

    /// A literal IPv4 or IPv6 address (no port, no brackets, no name).
    static func isAddress(_ text: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }

    /// One spelling per address, as inet_ntop writes it (`0:0::1` is `::1`), an IPv4-mapped IPv6
    /// address as the IPv4 address it maps (`::ffff:10.0.0.2` is `10.0.0.2`): a relay listening on
    /// `::` sees an IPv4 proxy in the mapped form while `--trust-proxy` names it plainly.
    static func canonical(_ text: String) -> String {
        var v6 = in6_addr()
        guard text.contains(":"), inet_pton(AF_INET6, text, &v6) == 1 else { return text }
        let mapped = withUnsafeBytes(of: &v6) { raw in
            raw.prefix(10).allSatisfy { $0 == 0 } && raw[10] == 0xff && raw[11] == 0xff ? Array(raw.suffix(4)) : nil
        }
        if let mapped { return mapped.map(String.init).joined(separator: ".") }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &v6, &buffer, socklen_t(buffer.count)) != nil else { return text }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
