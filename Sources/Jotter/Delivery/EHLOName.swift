import Glibc

/// What Jotter calls itself in SMTP's `EHLO`: the machine's name when it is a fully qualified domain
/// name, else an address literal of the address the connection leaves from (`[192.168.1.20]`,
/// `[IPv6:fd00::5]`), as mail programs on laptops send. libcurl would send the bare host name (`vm`,
/// `ana-laptop`), which servers with Postfix's `reject_non_fqdn_helo_hostname` refuse with `504` — a memo
/// failed for a reason its writer cannot see — and which tells every provider the machine's name.
enum EHLOName {
    /// The name for a connection to `host` (a name or literal) on `port`.
    static func forConnection(to host: String, port: Int) -> String {
        choose(hostName: machineName(), localAddress: sourceAddress(to: host, port: port))
    }

    /// `hostName` when it is a domain name with a dot that is not this network's own (`.local`,
    /// `localdomain`, `localhost`); else `localAddress` as an RFC 5321 address literal; `[127.0.0.1]` when
    /// that is unknown too.
    static func choose(hostName: String, localAddress: String?) -> String {
        let name = hostName.lowercased()
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        let local = ["local", "localdomain", "localhost", "lan", "home", "internal"]
        if labels.count >= 2, labels.allSatisfy({ !$0.isEmpty }), LocalCertificateAuthority.isHostName(name),
           !name.contains("_"), let last = labels.last, !local.contains(String(last)),
           !last.allSatisfy({ $0.isNumber }) {
            return name
        }
        guard let address = localAddress, !address.isEmpty else { return "[127.0.0.1]" }
        return address.contains(":") ? "[IPv6:\(address)]" : "[\(address)]"
    }

    /// `gethostname`, or "" if it fails.
    static func machineName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "" }
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)), as: UTF8.self)
    }

    /// The local address a connection to `host` would leave from: a UDP socket "connected" there (no
    /// packet is sent) is given the route's source address. Nil if `host` does not resolve.
    static func sourceAddress(to host: String, port: Int) -> String? {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard getaddrinfo(name, String(port), &hints, &list) == 0, let first = list else { return nil }
        defer { freeaddrinfo(list) }
        let fd = socket(first.pointee.ai_family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else { return nil }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        guard named else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = Int32(storage.ss_family)
        let written: UnsafePointer<CChar>? = withUnsafePointer(to: &storage) { pointer in
            switch family {
            case AF_INET:
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    var inet = address.pointee.sin_addr
                    return inet_ntop(AF_INET, &inet, &text, socklen_t(text.count))
                }
            case AF_INET6:
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                    var inet6 = address.pointee.sin6_addr
                    return inet_ntop(AF_INET6, &inet6, &text, socklen_t(text.count))
                }
            default:
                return nil
            }
        }
        guard written != nil else { return nil }
        let address = String(decoding: text.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)), as: UTF8.self)
        // A link-local IPv6 source needs its zone to mean anything; say loopback's instead.
        return address.lowercased().hasPrefix("fe80:") ? nil : address
    }
}
