/// `jotter devices`: lists paired LAN devices or revokes one, on a data directory (while the server
/// runs or not: SQLite arbitrates).
public enum DevicesCommand {
    /// What to do.
    public enum Action: Sendable, Equatable {
        case list
        case revoke(String)
    }

    /// Runs `action`; returns the text to print.
    public static func run(dataDirectory: String, action: Action) throws -> String {
        let directory = dataDirectory
        // Opening the outbox applies migrations; the registry then shares the database file.
        let key = try KeyStore.load(path: directory + "/key")
        let outbox = try Outbox(path: directory + "/jotter.db", key: key)
        defer { outbox.close() }
        let registry = try DeviceRegistry(databasePath: directory + "/jotter.db",
                                          hashingKey: outbox.hashingKey(purpose: DeviceRegistry.hashingPurpose))
        defer { registry.close() }
        switch action {
        case .list:
            let devices = try registry.list()
            if devices.isEmpty { return "No paired devices." }
            return devices.map { device in
                let state = device.revokedAt.map { "revoked " + Timestamp.iso8601(milliseconds: $0) }
                    ?? "last seen " + (device.lastSeenAt.map { Timestamp.iso8601(milliseconds: $0) } ?? "never")
                let paired = Timestamp.iso8601(milliseconds: device.createdAt)
                return "\(device.id)  \(device.name)  paired \(paired)  \(state)"
            }.joined(separator: "\n")
        case .revoke(let id):
            guard try registry.revoke(id: id) else {
                throw CommandLineOptions.UsageError(description: "no single active device matches '\(id.prefix(40))'")
            }
            return "Revoked. That device must pair again."
        }
    }
}

/// The LAN-mode banner: addresses, the certificate fingerprint, the pairing link and its QR code.
public enum LANBanner {
    /// The text main prints after the `Listening on` line.
    public static func text(_ lan: LANInfo) -> String {
        var lines: [String] = []
        if let fingerprint = lan.fingerprint {
            lines.append("HTTPS certificate SHA-256 fingerprint: \(fingerprint)")
            lines.append("(your phone will warn about a self-signed certificate: "
                + "compare this fingerprint, then accept it)")
        } else {
            lines.append("WARNING: plain HTTP on the LAN (--insecure-http): anyone on this network can read memos.")
        }
        guard let url = lan.pairingURLs.first else {
            lines.append("No LAN address found: is this machine on a network?")
            return lines.joined(separator: "\n")
        }
        lines.append("Pair a phone within 10 minutes (the link works once): open")
        lines.append("  \(url)")
        for other in lan.pairingURLs.dropFirst() { lines.append("  or \(other)") }
        if let code = QRCode.terminalLines(url) {
            lines.append("or scan:")
            lines.append(contentsOf: code)
        }
        return lines.joined(separator: "\n")
    }
}
