import Glibc

/// `$DATA/lan.json`: how a running LAN-mode server is reached (scheme, port, addresses, fingerprint), so
/// `jotter pair` can print a link to it. Written at start, removed at stop; holds no secret. Whether a
/// server really runs is told by the data directory's lock, not by this file (a crash leaves it behind).
///
/// `{"scheme":"https","port":8443,"addresses":["192.168.1.20"],"fingerprint":"AB:CD:…"}`; the
/// fingerprint is left out when there is none.
enum LANRuntimeFile {
    static func path(dataDirectory: String) -> String { dataDirectory + "/lan.json" }

    /// Records how `lan` is reached.
    static func write(_ lan: LANInfo, dataDirectory: String) throws {
        try FileIO.writeFile(path(dataDirectory: dataDirectory), encode(lan), mode: 0o600)
    }

    /// The file's contents for `lan`.
    static func encode(_ lan: LANInfo) -> [UInt8] {
        var json = JSONWriter()
        json.object { object in
            object.field("scheme", lan.scheme)
            object.field("port", Int64(lan.port))
            object.key("addresses")
            object.array { array in lan.reachable.forEach { array.value($0) } }
            if let fingerprint = lan.fingerprint { object.field("fingerprint", fingerprint) }
        }
        return json.bytes
    }

    /// Forgets it (the server stops).
    static func remove(dataDirectory: String) {
        unlink(path(dataDirectory: dataDirectory))
    }

    /// What the running server wrote, as a `LANInfo` carrying `token`; nil when there is none.
    static func read(dataDirectory: String, token: String) -> LANInfo? {
        guard let bytes = try? FileIO.read(path: path(dataDirectory: dataDirectory), limit: 65_536) else { return nil }
        return decode(bytes, token: token)
    }

    /// `bytes` read back (a `fingerprint` may be missing or null); nil when they are not such an object.
    static func decode(_ bytes: [UInt8], token: String) -> LANInfo? {
        guard let json = try? JSONValue.parse(bytes), let scheme = json["scheme"]?.string,
              let port = json["port"]?.integer, case .array(let items)? = json["addresses"] else { return nil }
        var addresses: [String] = []
        for item in items {
            guard let address = item.string else { return nil }
            addresses.append(address)
        }
        var fingerprint: String?
        switch json["fingerprint"] {
        case nil, .null?: fingerprint = nil
        case .string(let text)?: fingerprint = text
        default: return nil
        }
        var lan = LANInfo(addresses: addresses, scheme: scheme, fingerprint: fingerprint, pairingToken: token)
        lan.port = port
        return lan
    }
}
