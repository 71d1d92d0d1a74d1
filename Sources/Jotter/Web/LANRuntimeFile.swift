import Foundation

/// `$DATA/lan.json`: how a running LAN-mode server is reached (scheme, port, addresses, fingerprint), so
/// `jotter pair` can print a link to it. Written at start, removed at stop; holds no secret. Whether a
/// server really runs is told by the data directory's lock, not by this file (a crash leaves it behind).
enum LANRuntimeFile {
    private struct Contents: Codable {
        var scheme: String
        var port: Int
        var addresses: [String]
        var fingerprint: String?
    }

    static func path(dataDirectory: String) -> String { dataDirectory + "/lan.json" }

    /// Records how `lan` is reached.
    static func write(_ lan: LANInfo, dataDirectory: String) throws {
        let contents = Contents(scheme: lan.scheme, port: lan.port, addresses: lan.addresses,
                                fingerprint: lan.fingerprint)
        let bytes = try JSONEncoder().encode(contents)
        try FileIO.writeFile(path(dataDirectory: dataDirectory), Array(bytes), mode: 0o600)
    }

    /// Forgets it (the server stops).
    static func remove(dataDirectory: String) {
        unlink(path(dataDirectory: dataDirectory))
    }

    /// What the running server wrote, as a `LANInfo` carrying `token`; nil when there is none.
    static func read(dataDirectory: String, token: String) -> LANInfo? {
        guard let bytes = try? FileIO.read(path: path(dataDirectory: dataDirectory), limit: 65_536),
              let contents = try? JSONDecoder().decode(Contents.self, from: Data(bytes)) else { return nil }
        var lan = LANInfo(addresses: contents.addresses, scheme: contents.scheme, fingerprint: contents.fingerprint,
                          pairingToken: token)
        lan.port = contents.port
        return lan
    }
}
