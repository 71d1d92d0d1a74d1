/// A `scheme://[user[:password]@]host[:port][/path][?query][#fragment]` URL split into its parts, each
/// percent-decoded once (RFC 3986): what the relay URLs (`smtp://`, `smtps://`, `resend://`) and an
/// HTTP API's base URL need, and nothing more. No Foundation.
///
/// Lenient where a person types a secret (a `%` that starts no escape in a user name, password or query
/// value stays as written), strict where a mistake would send memos somewhere else (the host and port).
struct URLParts: Equatable {
    /// One `name=value` of the query; `value` is nil for a bare `name`.
    struct QueryItem: Equatable {
        var name: String
        var value: String?
    }

    /// The scheme, lowercased.
    var scheme: String
    /// The user name, decoded; nil when there is no `@`.
    var user: String?
    /// The password, decoded; nil when the user info has no `:`.
    var password: String?
    /// The host, decoded; an IPv6 literal without its brackets (`::1`). May be empty (`smtp://@/`).
    var host: String
    /// The port as written; nil when the URL names none.
    var port: Int?
    /// The path, as written (not decoded).
    var path: String
    /// The query's items in order, decoded.
    var query: [QueryItem]

    /// The ports Jotter uses when a URL names none: HTTP's, and mail submission's (STARTTLS on 587,
    /// implicit TLS on 465, RFC 8314).
    static let defaultPorts = ["http": 80, "https": 443, "smtp": 587, "smtps": 465]

    /// The port named in the URL, else the scheme's default; nil for a scheme without one.
    var portOrDefault: Int? { port ?? Self.defaultPorts[scheme] }

    /// The value of the last `name` in the query ("" for a bare `name`), as a form would take it.
    func queryValue(_ name: String) -> String? {
        query.last(where: { $0.name == name }).map { $0.value ?? "" }
    }

    /// Parses `text`; nil when it has no `scheme://`, or its host or port is malformed.
    init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let scheme = text[..<colon]
        guard let first = scheme.unicodeScalars.first, first.isASCIILetter, scheme.unicodeScalars.allSatisfy({
            $0.isASCIILetter || $0.isASCIIDigit || "+-.".unicodeScalars.contains($0)
        }) else { return nil }
        var rest = text[text.index(after: colon)...]
        guard rest.hasPrefix("//") else { return nil }
        rest = rest.dropFirst(2)
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        var queryText: Substring?
        if let question = rest.firstIndex(of: "?") {
            queryText = rest[rest.index(after: question)...]
            rest = rest[..<question]
        }
        var authority = rest
        var path: Substring = ""
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[slash...]
        }
        var user: String?
        var password: String?
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            authority = authority[authority.index(after: at)...]
            if let separator = userInfo.firstIndex(of: ":") {
                user = Self.leniently(userInfo[..<separator])
                password = Self.leniently(userInfo[userInfo.index(after: separator)...])
            } else {
                user = Self.leniently(userInfo)
            }
        }
        guard let (host, port) = Self.hostAndPort(authority) else { return nil }
        self.scheme = scheme.lowercased()
        self.user = user
        self.password = password
        self.host = host
        self.port = port
        self.path = String(path)
        self.query = queryText.map(Self.queryItems) ?? []
    }

    /// `host`, `host:port`, `[v6]` or `[v6]:port`; an empty port (`host:`) is no port.
    private static func hostAndPort(_ authority: Substring) -> (String, Int?)? {
        var hostText = authority
        var portText: Substring = ""
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            hostText = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portText = after.dropFirst()
            }
            guard hostText.contains(":") else { return nil }
        } else if let colon = authority.firstIndex(of: ":") {
            hostText = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        }
        // A space, control character or delimiter in a host is a typo, not a name: refuse it here.
        guard let host = percentDecoded(hostText), host.unicodeScalars.allSatisfy({
            $0.value > 0x20 && $0.value != 0x7F && !"[]@/?#".unicodeScalars.contains($0)
        }) else { return nil }
        guard !portText.isEmpty else { return (host, nil) }
        guard portText.utf8.count <= 5, portText.unicodeScalars.allSatisfy(\.isASCIIDigit),
              let port = Int(portText), port <= 65535 else { return nil }
        return (host, port)
    }

    private static func queryItems(_ text: Substring) -> [QueryItem] {
        text.split(separator: "&", omittingEmptySubsequences: true).map { item in
            guard let equals = item.firstIndex(of: "=") else { return QueryItem(name: leniently(item), value: nil) }
            return QueryItem(name: leniently(item[..<equals]), value: leniently(item[item.index(after: equals)...]))
        }
    }

    /// `text` decoded, or as written when it is not valid percent-encoded UTF-8.
    private static func leniently(_ text: Substring) -> String {
        percentDecoded(text) ?? String(text)
    }

    /// `text` with each `%XX` replaced by its byte; nil when a `%` starts no escape or the bytes are not
    /// UTF-8. `+` stays `+` (that is form encoding, not URL encoding).
    static func percentDecoded(_ text: Substring) -> String? {
        guard text.utf8.contains(UInt8(ascii: "%")) else { return String(text) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next()?.hexDigitValue, let low = iterator.next()?.hexDigitValue else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

}

private extension Unicode.Scalar {
    var isASCIILetter: Bool { (0x41...0x5A).contains(value) || (0x61...0x7A).contains(value) }
    var isASCIIDigit: Bool { (0x30...0x39).contains(value) }
}
