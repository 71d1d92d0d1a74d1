/// `jotter pair`: a fresh one-time pairing link (and its QR code) that the running LAN-mode server accepts.
public enum PairCommand {
    /// Issues a link; returns the text to print. Fails when no LAN-mode server uses `dataDirectory`.
    public static func run(dataDirectory: String, credentialsDirectory: String? = nil) throws -> String {
        guard DataDirectory.isInUse(path: dataDirectory) else {
            throw CommandLineOptions.UsageError(
                description: "no Jotter server in LAN mode is running on \(dataDirectory): "
                    + "start one with 'jotter serve --lan' (same --data-dir)")
        }
        // A server runs there, without --lan: starting another, as the message above says, is refused.
        guard let running = LANRuntimeFile.read(dataDirectory: dataDirectory, token: "") else {
            throw CommandLineOptions.UsageError(
                description: "the Jotter server running on \(dataDirectory) is not in LAN mode: stop it and start "
                    + "it again with 'jotter serve --lan' (same --data-dir)")
        }
        // Before a link is made: one no phone could open would still be live, and its code too, unseen.
        guard !running.pairingURLs.isEmpty else { throw Self.noAddress }
        let token = try DevicesCommand.withRegistry(dataDirectory: dataDirectory,
                                                    credentialsDirectory: credentialsDirectory) { registry in
            try registry.issuePairingToken()
        }
        guard var lan = LANRuntimeFile.read(dataDirectory: dataDirectory, token: token.token) else {
            throw CommandLineOptions.UsageError(description: "the server in \(dataDirectory) stopped")
        }
        // No link to print is a failure for a script, not a success with a remark.
        guard !lan.pairingURLs.isEmpty else { throw Self.noAddress }
        lan.pairingCode = token.code
        return LANBanner.text(lan)
    }

    private static let noAddress = CommandLineOptions.UsageError(
        description: "the server has no LAN address a phone could reach "
            + "(is this machine on a network? with --host, is it a LAN address?)")
}
