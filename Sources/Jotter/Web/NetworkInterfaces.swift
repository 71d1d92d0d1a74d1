import Glibc

/// The machine's addresses and names, for LAN mode.
enum NetworkInterfaces {
    /// One IPv4 address of an interface, as `getifaddrs` lists it.
    struct Entry: Sendable, Equatable {
        var interface: String
        var address: String
        var running: Bool
    }

    /// The IPv4 addresses a phone may reach this server at, best first (the pairing link and its QR code
    /// use the first): only `host` when it names one address (`--host 192.168.1.20`; none for a loopback
    /// one, which no phone reaches); else every interface's that is up and not loopback, ranked.
    static func lanAddresses(host: String = "0.0.0.0") -> [String] {
        ranked(entries(), host: host)
    }

    /// `entries` ranked for a phone: a private address (192.168/16, 10/8, 172.16/12) on an interface with
    /// a link before any other; a virtual bridge's (containers', virtual machines') after every other,
    /// as no phone reaches those; and an interface without a link (a cable unplugged) last. The order
    /// `getifaddrs` gave stays within each rank.
    static func ranked(_ entries: [Entry], host: String) -> [String] {
        var v4 = in_addr(), v6 = in6_addr()
        if host != "0.0.0.0", inet_pton(AF_INET, host, &v4) == 1 {
            return Loopback.contains(address: host) ? [] : [host]
        }
        if Loopback.contains(host: host) { return [] }  // localhost, ::1
        if host != "::", inet_pton(AF_INET6, host, &v6) == 1 { return [] }  // one IPv6 address: no IPv4 link reaches it
        func rank(_ entry: Entry) -> Int {
            (entry.running ? 0 : 4) + (isVirtual(entry.interface) ? 2 : 0) + (isPrivate(entry.address) ? 0 : 1)
        }
        var seen: Set<String> = []
        return entries.enumerated()
            .sorted { (rank($0.element), $0.offset) < (rank($1.element), $1.offset) }
            .map(\.element.address)
            .filter { seen.insert($0).inserted }
    }

    /// Interfaces of containers and virtual machines on this machine (Docker, libvirt, VirtualBox,
    /// VMware, Kubernetes networks).
    static func isVirtual(_ interface: String) -> Bool {
        ["docker", "br-", "veth", "virbr", "vboxnet", "vmnet", "cni", "flannel", "cali", "podman", "lxc", "lxd"]
            .contains { interface.hasPrefix($0) }
    }

    /// 192.168.0.0/16, 10.0.0.0/8 or 172.16.0.0/12.
    static func isPrivate(_ address: String) -> Bool {
        let octets = address.split(separator: ".").compactMap { UInt8($0) }
        guard octets.count == 4 else { return false }
        return octets[0] == 10 || (octets[0] == 192 && octets[1] == 168) || (octets[0] == 172 && (16...31).contains(octets[1]))
    }

    /// The IPv4 addresses of interfaces that are up and not loopback.
    static func entries() -> [Entry] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var entries: [Entry] = []
        var cursor = list
        while let entry = cursor {
            cursor = entry.pointee.ifa_next
            guard let address = entry.pointee.ifa_addr, Int32(address.pointee.sa_family) == AF_INET,
                  entry.pointee.ifa_flags & UInt32(IFF_UP) != 0,
                  entry.pointee.ifa_flags & UInt32(IFF_LOOPBACK) == 0 else { continue }
            var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            var inet = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            inet_ntop(AF_INET, &inet, &buffer, socklen_t(buffer.count))
            let text = String(decoding: buffer.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)), as: UTF8.self)
            let name = entry.pointee.ifa_name.map { String(cString: $0) } ?? ""
            entries.append(Entry(interface: name, address: text,
                                 running: entry.pointee.ifa_flags & UInt32(IFF_RUNNING) != 0))
        }
        return entries
    }

    /// `gethostname`, as it is; "" if it fails.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "" }
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)), as: UTF8.self)
    }

    /// This machine's host name and its mDNS form (`name.local`).
    static func hostNames() -> [String] {
        let name = hostName().lowercased()
        guard !name.isEmpty, name != "localhost" else { return [] }
        return name.hasSuffix(".local") ? [name] : [name, name + ".local"]
    }
}
