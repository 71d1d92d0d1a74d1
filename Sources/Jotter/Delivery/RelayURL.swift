/// Builds the transport a relay URL names.
public enum RelayURL {
    /// Why a relay URL was refused. Descriptions never repeat the URL: it may hold a password or API key.
    public enum Failure: Error, CustomStringConvertible, Equatable, Sendable {
        case unsupportedScheme(String)
        case missingPath

        public var description: String {
            switch self {
            case .unsupportedScheme(let scheme):
                return "relay scheme '\(scheme)' is not supported by this build (supported: maildir:)"
            case .missingPath:
                return "maildir: relay needs a path, as in maildir:/home/me/Maildir"
            }
        }
    }

    /// The transport for `relay`: `maildir:PATH` (or `maildir://PATH`).
    public static func transport(for relay: String) throws -> any Transport {
        guard let colon = relay.firstIndex(of: ":") else { throw Failure.unsupportedScheme("") }
        let scheme = relay[..<colon].lowercased()
        var rest = relay[relay.index(after: colon)...]
        switch scheme {
        case "maildir":
            if rest.hasPrefix("//") { rest = rest.dropFirst(2) }
            guard !rest.isEmpty else { throw Failure.missingPath }
            return try MaildirTransport(path: String(rest))
        default:
            let safe = scheme.allSatisfy { $0.isLetter || $0.isNumber || "+-.".contains($0) } ? scheme : "?"
            throw Failure.unsupportedScheme(String(safe.prefix(20)))
        }
    }
}
