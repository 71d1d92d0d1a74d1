/// The LAN-mode banner: addresses, the local CA's fingerprint, the pairing link and its QR code.
public enum LANBanner {
    /// The first lines `serve` prints: a URL that works from where it is used. With `--lan` on every
    /// interface, that is the LAN address a phone would open, then this machine's loopback URL.
    public static func listeningLines(host: String, port: Int, lan: LANInfo?) -> [String] {
        let scheme = lan?.scheme ?? "http"
        let wildcard = host == "0.0.0.0" || host == "::" || host == "[::]"
        guard let lan, wildcard else {
            let listening = "Listening on \(scheme)://\(LANInfo.hostPart(host)):\(port)"
            guard lan == nil, !Loopback.contains(host: host) else { return [listening] }
            return [listening, "Only this computer is answered: other devices need --lan (a paired device token)."]
        }
        let local = "\(scheme)://127.0.0.1:\(port)"
        guard let address = lan.reachable.first else { return ["Listening on \(local)"] }
        return ["Listening on \(scheme)://\(LANInfo.hostPart(address)):\(port)", "On this computer: \(local)"]
    }

    /// What main prints when the machine's LAN addresses change while it serves.
    public static func changedText(_ lan: LANInfo) -> String {
        guard let address = lan.reachable.first else {
            return "The network changed: no LAN address now; phones reach Jotter again once this computer is on a network."
        }
        return "The network changed: phones now reach Jotter at \(lan.scheme)://\(LANInfo.hostPart(address)):\(lan.port)\n"
            + "(a phone not paired yet: 'jotter pair', or \"Pair a phone\" on this computer's Jotter page, gives a link and a code)"
    }

    /// The text main prints after the `Listening on` line; `host`, what `--host` bound (it may be why no
    /// phone can reach this server). Without `showsPairing` (the output is a log: systemd's journal) the
    /// live link and its code are not written, only where to get them: a log keeps what a terminal forgets.
    public static func text(_ lan: LANInfo, host: String? = nil, showsPairing: Bool = true) -> String {
        var lines: [String] = []
        if let fingerprint = lan.fingerprint {
            lines.append("Local CA SHA-256 fingerprint: \(fingerprint)")
            lines.append("(to trust it once on a phone, use \"Pair a phone\" on this computer's Jotter page, "
                + "or compare this fingerprint with the CA the phone installs)")
        } else {
            lines.append("WARNING: plain HTTP on the LAN (--insecure-http): anyone on this network can read memos.")
        }
        guard let url = lan.pairingURLs.first else {
            if let host, Loopback.contains(host: host) {
                lines.append("--host \(host) answers this computer only: phones cannot reach it. Use --host 0.0.0.0 "
                    + "(every interface) or this computer's LAN address.")
            } else if !lan.unnamed.isEmpty {
                lines.append("No LAN address a phone can open over HTTPS: the local CA vouches only for private "
                    + "addresses (10/8, 172.16/12, 192.168/16), and this computer has " + lan.unnamed.joined(separator: ", ")
                    + ". Join a private network, or use --insecure-http on a network you trust.")
            } else {
                lines.append("No LAN address found: is this machine on a network?")
            }
            return lines.joined(separator: "\n")
        }
        guard showsPairing else {
            lines.append("Pair a phone: 'jotter pair' prints a link and a code (not written here: this output is kept "
                + "in a log), or use \"Pair a phone\" on this computer's Jotter page.")
            return lines.joined(separator: "\n")
        }
        lines.append("Pair a phone within 10 minutes (the link works once; 'jotter pair' prints another): open")
        lines.append("  \(url)")
        for other in lan.pairingURLs.dropFirst() { lines.append("  or \(other)") }
        if let code = QRCode.terminalLines(url) {
            lines.append("or scan:")
            lines.append(contentsOf: code)
        }
        if let code = lan.pairingCode {
            lines.append("or, in the phone's Jotter page (an app on its home screen, say), type the code \(code)")
        }
        return lines.joined(separator: "\n")
    }
}
