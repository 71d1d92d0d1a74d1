import Glibc
import Synchronization

/// What Jotter calls itself in SMTP's `EHLO`: the machine's name when it is a fully qualified domain
/// name, else an address literal of the address the connection leaves from (`[192.168.1.20]`,
/// `[IPv6:fd00::5]`), as mail programs on laptops send. libcurl would send the bare host name (`vm`,
/// `ana-laptop`), which servers with Postfix's `reject_non_fqdn_helo_hostname` refuse with `504` — a memo
/// failed for a reason its writer cannot see — and which tells every provider the machine's name.
enum EHLOName {
    /// The name for a connection to `host` (a name or literal) on `port`.
    static func forConnection(to host: String, port: Int) -> String {
        choose(hostName: NetworkInterfaces.hostName(), localAddress: sourceAddress(to: host, port: port))
    }

    /// `forConnection`, worked out at most once every five minutes per transport: it costs a name lookup
    /// outside libcurl's timeouts, and a memo after the first would otherwise pay it again. A name worked
    /// out without a route (offline: the `[127.0.0.1]` fallback) is not kept, so the first memo once the
    /// network is back does not greet as loopback, which a server may refuse.
    final class Cache: Sendable {
        private let entry = Mutex<(name: String, at: UInt64)?>(nil)
        static let lifetimeNanoseconds: UInt64 = 300_000_000_000

        func name(to host: String, port: Int) -> String {
            let now = monotonicNanoseconds()
            if let cached = entry.withLock({ $0 }), now - cached.at < Self.lifetimeNanoseconds { return cached.name }
            let name = EHLOName.forConnection(to: host, port: port)
            if name != EHLOName.unknownAddress { entry.withLock { $0 = (name, now) } }
            return name
        }
    }

    /// What `choose` answers when neither a domain name nor the connection's source address is known.
    static let unknownAddress = "[127.0.0.1]"

    /// `hostName` when it is a domain name with a dot that is not this network's own (`.local`,
    /// `localdomain`, `localhost`); else `localAddress` as an RFC 5321 address literal; `[127.0.0.1]` when
    /// that is unknown too.
    static func choose(hostName: String, localAddress: String?) -> String {
        let name = hostName.lowercased()
        let local = ["local", "localdomain", "localhost", "lan", "home", "internal"]
        if DomainName.isValid(name[...]), let last = name.split(separator: ".").last, !local.contains(String(last)),
           !name.hasSuffix(".home.arpa") {
            return name
        }
        guard let address = localAddress, !address.isEmpty else { return unknownAddress }
        return address.contains(":") ? "[IPv6:\(address)]" : "[\(address)]"
    }

    /// The local address a connection to `host` would leave from: a UDP socket "connected" there (no
    /// packet is sent) is given the route's source address, for the first of `host`'s addresses that has
    /// a route (as libcurl moves on from an address family without one). Nil if none has.
    static func sourceAddress(to host: String, port: Int) -> String? {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard getaddrinfo(name, String(port), &hints, &list) == 0 else { return nil }
        defer { freeaddrinfo(list) }
        var candidate = list
        while let info = candidate {
            candidate = info.pointee.ai_next
            if let address = sourceAddress(of: info) { return address }
        }
        return nil
    }

    private static func sourceAddress(of info: UnsafeMutablePointer<addrinfo>) -> String? {
        let fd = socket(info.pointee.ai_family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else { return nil }
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
