import Glibc

/// `jotter devices`: lists paired LAN devices, renames or revokes one, on a data directory (while the
/// server runs or not: SQLite arbitrates).
public enum DevicesCommand {
    /// What to do.
    public enum Action: Sendable, Equatable {
        case list
        case revoke(String)
        case rename(String, String)
    }

    /// Runs `action`; returns the text to print.
    public static func run(dataDirectory: String, action: Action, credentialsDirectory: String? = nil) throws -> String {
        try withRegistry(dataDirectory: dataDirectory, credentialsDirectory: credentialsDirectory) { registry in
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
                    throw CommandLineOptions.UsageError(
                        description: "no single active device matches '\(id.prefix(40))'")
                }
                return "Revoked. That device must pair again."
            case .rename(let id, let name):
                guard let stored = try registry.rename(id: id, to: name) else {
                    throw CommandLineOptions.UsageError(
                        description: "no single device matches '\(id.prefix(40))' (or the name is empty)")
                }
                return "Renamed to \(stored)."
            }
        }
    }

    /// Opens the data directory's registry (the key from the systemd credential when there is one).
    static func withRegistry<T>(dataDirectory: String, credentialsDirectory: String?,
                                _ body: (DeviceRegistry) throws -> T) throws -> T {
        let directory = dataDirectory
        guard access(directory + "/jotter.db", F_OK) == 0 else {
            throw CommandLineOptions.UsageError(description: "no Jotter data in \(directory) (see --data-dir)")
        }
        // Opening the outbox applies migrations; the registry then shares the database file.
        let key = try KeyStore.load(path: directory + "/key",
                                    credentialPath: credentialsDirectory.map { $0 + "/jotter.key" },
                                    protecting: directory + "/jotter.db")
        let outbox = try Outbox(path: directory + "/jotter.db", key: key)
        defer { outbox.close() }
        let registry = try DeviceRegistry(outbox: outbox)
        return try body(registry)
    }
}

/// `jotter pair`: a fresh one-time pairing link (and its QR code) that the running LAN-mode server accepts.
public enum PairCommand {
    /// Issues a link; returns the text to print. Fails when no LAN-mode server uses `dataDirectory`.
    public static func run(dataDirectory: String, credentialsDirectory: String? = nil) throws -> String {
        guard DataDirectory.isInUse(path: dataDirectory),
              LANRuntimeFile.read(dataDirectory: dataDirectory, token: "") != nil else {
            throw CommandLineOptions.UsageError(
                description: "no Jotter server in LAN mode is running on \(dataDirectory): "
                    + "start one with 'jotter serve --lan' (same --data-dir)")
        }
        let token = try DevicesCommand.withRegistry(dataDirectory: dataDirectory,
                                                    credentialsDirectory: credentialsDirectory) { registry in
            try registry.issuePairingToken()
        }
        guard let lan = LANRuntimeFile.read(dataDirectory: dataDirectory, token: token.token) else {
            throw CommandLineOptions.UsageError(description: "the server in \(dataDirectory) stopped")
        }
        return LANBanner.text(lan)
    }
}

/// The LAN-mode banner: addresses, the local CA's fingerprint, the pairing link and its QR code.
public enum LANBanner {
    /// The first lines `serve` prints: a URL that works from where it is used. With `--lan` on every
    /// interface, that is the LAN address a phone would open, then this machine's loopback URL.
    public static func listeningLines(host: String, port: Int, lan: LANInfo?) -> [String] {
        let scheme = lan?.scheme ?? "http"
        let wildcard = host == "0.0.0.0" || host == "::" || host == "[::]"
        guard let lan, wildcard else {
            return ["Listening on \(scheme)://\(LANInfo.hostPart(host)):\(port)"]
        }
        let local = "\(scheme)://127.0.0.1:\(port)"
        guard let address = lan.addresses.first else { return ["Listening on \(local)"] }
        return ["Listening on \(scheme)://\(LANInfo.hostPart(address)):\(port)", "On this computer: \(local)"]
    }

    /// The text main prints after the `Listening on` line.
    public static func text(_ lan: LANInfo) -> String {
        var lines: [String] = []
        if let fingerprint = lan.fingerprint {
            lines.append("Local CA SHA-256 fingerprint: \(fingerprint)")
            lines.append("(to trust it once on a phone, use \"Pair a phone\" on this computer's Jotter page, "
                + "or compare this fingerprint with the CA the phone installs)")
        } else {
            lines.append("WARNING: plain HTTP on the LAN (--insecure-http): anyone on this network can read memos.")
        }
        guard let url = lan.pairingURLs.first else {
            lines.append("No LAN address found: is this machine on a network?")
            return lines.joined(separator: "\n")
        }
        lines.append("Pair a phone within 10 minutes (the link works once; 'jotter pair' prints another): open")
        lines.append("  \(url)")
        for other in lan.pairingURLs.dropFirst() { lines.append("  or \(other)") }
        if let code = QRCode.terminalLines(url) {
            lines.append("or scan:")
            lines.append(contentsOf: code)
        }
        return lines.joined(separator: "\n")
    }
}
