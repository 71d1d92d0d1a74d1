import Glibc

/// A relay URL, parsed: which transport, and the envelope addresses it implies.
///
/// `maildir:PATH` · `smtp://user:pass@host:587` (STARTTLS required) · `smtps://user:pass@host:465` ·
/// `resend://API_KEY` · `sendmail:` or `sendmail:/path/to/sendmail` · `markdown:/path/to/folder` ·
/// `jotter+https://HOST[:PORT]` (a Jotter relay; `jotter+http://` only to a loopback host).
/// Query options: `from=`, `to=` (addresses), `tls=none` (SMTP to a loopback host only), `ca=PATH`
/// (a CA bundle, for tests), `base=URL` (Resend's API base, for tests), `timeout=SECONDS`.
public struct RelayURL: Sendable {
    /// Why a relay URL was refused. Descriptions never repeat the URL: it may hold a password or API key.
    public enum Failure: Error, CustomStringConvertible, Equatable, Sendable {
        case unsupportedScheme(String)
        case missingPath(scheme: String)
        case missingHost
        case missingCredential
        case invalid(String)
        /// The relay goes through libcurl, which cannot be opened (why, and the package to install).
        case missingLibrary(String)

        public var description: String {
            switch self {
            case .missingLibrary(let missing):
                return "this relay needs libcurl: \(missing)"
            case .unsupportedScheme(let scheme):
                return "relay scheme '\(scheme)' is not supported (use maildir:, smtp://, smtps://, resend://, "
                    + "sendmail:, markdown: or jotter+https://)"
            case .missingPath(let scheme):
                return "\(scheme): relay needs a path, as in \(scheme):/home/me/folder"
            case .missingHost:
                return "the relay URL needs a host"
            case .missingCredential:
                return "resend:// needs an API key, as in resend://re_123…"
            case .invalid(let what):
                return "the relay URL is invalid: \(what)"
            }
        }
    }

    /// The transport to deliver through.
    public let transport: any Transport
    /// The sender address the URL sets (`?from=`, or the SMTP user when it is an address).
    public let from: MailAddress?
    /// The recipient the URL sets (`?to=`, or the SMTP user when it is an address).
    public let to: MailAddress?
    /// The scheme alone, safe to log.
    public let scheme: String
    /// Where memos go, for a person, without secrets: `maildir:/home/ana/…/Maildir`,
    /// `smtps://smtp.example.com:465 as ana@example.com → ana@example.com`, `resend:// → ana@…`.
    public let destination: String

    /// `destination` without the people in it (the SMTP user name, the recipient's address): for an output a
    /// log keeps, such as systemd's journal ("never log addresses").
    public static func withoutPeople(_ destination: String) -> String {
        let cut = [" as ", " → "].compactMap { destination.firstLiteralRange(of: $0)?.lowerBound }.min()
        return cut.map { String(destination[..<$0]) } ?? destination
    }
    /// A Jotter relay's account (its device secret and verified address), for `jotter+https://`.
    private(set) var jotterRelay: JotterRelayAccount?

    /// The folder a `maildir:` or `markdown:` URL names, from what follows its scheme up to `?`: after an
    /// optional `//`, percent-decoded (`Obsidian%20Vault` is `Obsidian Vault`), not yet made absolute.
    static func folder(_ text: Substring) -> String {
        let raw = text.hasPrefix("//") ? text.dropFirst(2) : text
        return URLParts.percentDecoded(raw) ?? String(raw)
    }

    /// Parses `relay` and builds its transport. `relayRecipients`: each message will carry its own
    /// recipient (a Jotter relay's mail), so a missing `to=` is not asked for.
    public init(_ relay: String, relayRecipients: Bool = false) throws {
        guard let colon = relay.firstIndex(of: ":") else { throw Failure.unsupportedScheme("") }
        let scheme = relay[..<colon].lowercased()
        let rest = String(relay[relay.index(after: colon)...])
        self.scheme = scheme
        jotterRelay = nil
        switch scheme {
        case "maildir", "markdown":
            let pieces = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            let given = Self.folder(pieces[0])
            guard !given.isEmpty else { throw Failure.missingPath(scheme: scheme) }
            let path = try Self.absolutePath(given)
            // Parsing creates nothing: the transport creates its folders in `prepare()` or on first delivery.
            if scheme == "maildir" {
                if pieces.count > 1 && !pieces[1].isEmpty {
                    throw Failure.invalid("maildir: takes no options (a ? in the folder's name is written %3F)")
                }
                transport = MaildirTransport(path: path)
            } else {
                // markdown:/vault/Inbox?file=%Y/%m/%Y-%m-%d.md&heading=%H:%M — strftime patterns, taken
                // as written (their % are strftime's, not percent-encoding).
                var layout: [String: String] = [:]
                for item in (pieces.count > 1 ? pieces[1] : "").split(separator: "&") {
                    let pair = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                    layout[String(pair[0])] = pair.count > 1 ? String(pair[1]) : ""
                }
                try Self.expectOptions(Array(layout.keys), known: ["file", "heading"], scheme: scheme)
                do {
                    transport = try MarkdownTransport(folder: path, file: layout["file"] ?? "%Y-%m-%d.md",
                                                      heading: layout["heading"] ?? "%H:%M")
                } catch {
                    throw Failure.invalid(error.description)
                }
            }
            from = nil
            to = nil
            destination = scheme + ":" + path
        case "sendmail":
            // sendmail:[PATH][?to=ADDR&from=ADDR]; without to=, the local user running Jotter, whom
            // every local MTA delivers to (a made-up address would bounce to root while Jotter says sent).
            let pieces = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            let given = pieces[0] == "//" ? "" : String(pieces[0])
            let path = given.isEmpty ? "/usr/sbin/sendmail" : (URLParts.percentDecoded(given[...]) ?? given)
            let query = pieces.count > 1 ? URLParts("sendmail://local/?" + pieces[1]) : URLParts("sendmail://local/")
            guard let query else { throw Failure.invalid("the sendmail: options do not parse") }
            try Self.expectOptions(query, known: ["to", "from", "timeout"], scheme: scheme)
            let timeout = try Self.timeout(query, default: 60)
            let to = try query.queryValue("to").map(Self.address) ?? MailAddress(address: Self.localUser() + "@localhost")
            from = try query.queryValue("from").map(Self.address)
            transport = SendmailTransport(path: path, timeoutSeconds: timeout, envelopeSender: from?.address)
            self.to = to
            destination = "sendmail:\(path) → \(to.address)"
        case "smtp", "smtps":
            try Self.requireCurl()
            let url = try Self.parts(relay)
            guard !url.host.isEmpty else { throw Failure.missingHost }
            try Self.expectOptions(url, known: ["to", "from", "tls", "ca", "timeout"], scheme: scheme)
            if let tls = url.queryValue("tls"), tls != "none" {
                throw Failure.invalid("tls= takes only none (for a loopback host); TLS is otherwise always required")
            }
            let tlsNone = url.queryValue("tls") == "none"
            if tlsNone && !Loopback.contains(host: url.host) {
                throw Failure.invalid("tls=none is only allowed for a loopback host")
            }
            // A user name that is an address stands in for from= and to=; one with a line break or other
            // bytes no address has would split a header and an SMTP command, so it stands in for nothing.
            let userAddress = url.user.flatMap { Self.isAddress($0) ? MailAddress(address: $0) : nil }
            let from = try url.queryValue("from").map(Self.address) ?? userAddress
            let to = try url.queryValue("to").map(Self.address) ?? userAddress ?? from
            guard let from, let to else {
                // A relay's URL needs no to= (each message has its own recipient): ask only for what is missing.
                let missing = url.queryValue("to") == nil && !relayRecipients ? "?from= and ?to=" : "?from="
                throw Failure.invalid("set \(missing) (or use an address as the user name)")
            }
            self.from = from
            self.to = to
            let port = url.portOrDefault ?? 587
            destination = "\(scheme)://\(url.host.contains(":") ? "[\(url.host)]" : url.host):\(port)"
                + (url.user.map { " as \($0)" } ?? "") + " → \(to.address)"
            transport = SMTPTransport(settings: .init(
                host: url.host, port: url.portOrDefault ?? 587, implicitTLS: scheme == "smtps",
                requireTLS: !tlsNone, username: url.user, password: url.password, caFile: try Self.caFile(url),
                timeoutSeconds: try Self.timeout(url, default: 60)))
        case "resend":
            try Self.requireCurl()
            let url = try Self.parts(relay)
            let key = url.host
            guard !key.isEmpty else { throw Failure.missingCredential }
            try Self.expectOptions(url, known: ["to", "from", "base", "ca", "timeout"], scheme: scheme)
            guard let toText = url.queryValue("to") else {
                throw Failure.invalid("resend:// needs ?to=you@example.com")
            }
            let to = try Self.address(toText)
            let from = try Self.address(url.queryValue("from") ?? "Jotter <onboarding@resend.dev>")
            let base = url.queryValue("base") ?? "https://api.resend.com"
            // ResendTransport picks the protocol from the base's first characters: check those.
            guard let baseURL = URLParts(base), !baseURL.host.isEmpty,
                  base.hasPrefix("https://") || (base.hasPrefix("http://") && Loopback.contains(host: baseURL.host))
            else {
                throw Failure.invalid("base= must be an https URL (http only for a loopback host)")
            }
            self.from = from
            self.to = to
            destination = "resend:// (\(baseURL.host)) → \(to.address)"
            transport = ResendTransport(settings: .init(
                apiKey: key, baseURL: base.hasSuffix("/") ? String(base.dropLast()) : base,
                caFile: try Self.caFile(url), timeoutSeconds: try Self.timeout(url, default: 30)))
        case "jotter+https", "jotter+http":
            try Self.requireCurl()
            // jotter+https://HOST[:PORT][?invite=CODE&ca=PATH&timeout=SECONDS]
            let url = try Self.parts(relay)
            guard !url.host.isEmpty else { throw Failure.missingHost }
            try Self.expectOptions(url, known: ["invite", "ca", "timeout"], scheme: scheme)
            let secure = scheme == "jotter+https"
            if !secure && !Loopback.contains(host: url.host) {
                throw Failure.invalid("jotter+http:// is only allowed for a loopback host; use jotter+https://")
            }
            guard url.user == nil else { throw Failure.invalid("a Jotter relay URL has no user name or password") }
            let port = url.port ?? (secure ? 443 : 80)
            let host = url.host.contains(":") ? "[\(url.host)]" : url.host
            let base = (secure ? "https" : "http") + "://" + host + (url.port.map { ":\($0)" } ?? "")
            let account = JotterRelayAccount(
                client: JotterRelayClient(baseURL: base, host: url.host, port: port, caFile: secure ? try Self.caFile(url) : nil,
                                          timeoutSeconds: try Self.timeout(url, default: 30)),
                invite: url.queryValue("invite"))
            jotterRelay = account
            transport = JotterRelayTransport(account: account)
            from = nil
            to = nil
            destination = "\(scheme)://\(host)\(url.port.map { ":\($0)" } ?? "") (the address you confirm in Settings)"
        default:
            let safe = scheme.allSatisfy { $0.isLetter || $0.isNumber || "+-.".contains($0) } ? scheme : "?"
            throw Failure.unsupportedScheme(String(safe.prefix(20)))
        }
    }

    /// Refuses a relay that goes through libcurl when libcurl cannot be opened: found now, not at the first
    /// delivery, which would otherwise fail and be retried for ever.
    static func requireCurl(_ library: Result<CurlLibrary.Loaded, SharedLibrary.Missing> = CurlLibrary.shared) throws(Failure) {
        if case .failure(let missing) = library { throw Failure.missingLibrary(missing.description) }
    }

    /// The CA bundle to verify the relay with: `?ca=PATH`, else `SSL_CERT_FILE` or `CURL_CA_BUNDLE`
    /// (as OpenSSL and curl read them), else the system's. Checked now, not at the first delivery.
    static func caFile(_ url: URLParts, environment: [String: String] = ProcessEnvironment.current) throws -> String? {
        let given = url.queryValue("ca").map { ("?ca=", $0) }
            ?? environment["SSL_CERT_FILE"].flatMap { $0.isEmpty ? nil : ("SSL_CERT_FILE", $0) }
            ?? environment["CURL_CA_BUNDLE"].flatMap { $0.isEmpty ? nil : ("CURL_CA_BUNDLE", $0) }
        guard let (source, path) = given else { return nil }
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw Failure.invalid("the CA bundle given by \(source) (\(path)) cannot be read: \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG, access(path, R_OK) == 0 else {
            throw Failure.invalid("the CA bundle given by \(source) (\(path)) is not a readable file")
        }
        return path
    }

    /// Refuses an option this scheme does not have: a typo (`too=` for `to=`) silently ignored sent the
    /// mail to the fallback address. Names only are shown, never values.
    private static func expectOptions(_ url: URLParts, known: Set<String>, scheme: String) throws {
        try expectOptions(url.query.map(\.name), known: known, scheme: scheme)
    }

    private static func expectOptions(_ names: [String], known: Set<String>, scheme: String) throws {
        guard let unknown = names.first(where: { !known.contains($0) }) else { return }
        let shown = unknown.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x7A).contains($0 | 0x20) || $0 == 0x5F || $0 == 0x2D }
            ? String(unknown.prefix(30)) : "?"
        throw Failure.invalid("\(scheme): has no option \(shown)= (it takes \(known.sorted().map { $0 + "=" }.joined(separator: ", ")))")
    }

    /// `?timeout=` in seconds, 1 to 3600; `fallback` when absent.
    private static func timeout(_ url: URLParts, default fallback: Int) throws -> Int {
        guard let text = url.queryValue("timeout") else { return fallback }
        guard let seconds = Int(text), (1...3600).contains(seconds) else {
            throw Failure.invalid("timeout= must be a number of seconds from 1 to 3600")
        }
        return seconds
    }

    /// A Maildir's or vault's folder as an absolute path: `~` and `~/…` are the home folder (a shell
    /// would have expanded them; in a URL it did not, and a folder named `~` appeared in the working
    /// directory), and a relative path is the working directory's (a service starts elsewhere).
    static func absolutePath(_ given: String, environment: [String: String] = ProcessEnvironment.current) throws -> String {
        let path: String
        do {
            path = try CommandLineOptions.expandingHome(given, environment: environment)
        } catch {
            throw Failure.invalid("\(error)")
        }
        guard !path.hasPrefix("/") else { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else {
            throw Failure.invalid("a relative folder needs a working directory; give the folder's full path")
        }
        let directory = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return directory + (directory.hasSuffix("/") ? "" : "/") + (path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

    private static func parts(_ relay: String) throws -> URLParts {
        guard let url = URLParts(relay) else { throw Failure.invalid("it does not parse as a URL") }
        return url
    }

    /// The name of the user running Jotter (`$USER` when the password database has no entry).
    static func localUser() -> String {
        if let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name {
            let user = String(cString: name)
            if !user.isEmpty { return user }
        }
        return getenv("USER").map { String(cString: $0) } ?? "root"
    }

    /// `name <a@b>` or `a@b`.
    static func address(_ text: String) throws -> MailAddress {
        let trimmed = text.trimmingWhitespace()
        if let open = trimmed.lastIndex(of: "<"), trimmed.hasSuffix(">") {
            let address = String(trimmed[trimmed.index(after: open)..<trimmed.index(before: trimmed.endIndex)])
            let name = Self.displayName(String(trimmed[..<open].trimmingScalars { $0 == " " }))
            guard isAddress(address) else { throw Failure.invalid("not an email address in from=/to=") }
            return MailAddress(name: name, address: address)
        }
        guard isAddress(trimmed) else { throw Failure.invalid("not an email address in from=/to=") }
        return MailAddress(address: trimmed)
    }

    /// The display name as written before `<…>`: a quoted string (`"Ana \"A\" Diaz"`) unquoted and
    /// unescaped, anything else as it is — quotes inside it kept (`Say "hi"` was `Say "hi`).
    static func displayName(_ written: String) -> String {
        let scalars = Array(written.unicodeScalars)
        guard scalars.count >= 2, scalars.first == "\"", scalars.last == "\"" else { return written }
        var name = String.UnicodeScalarView()
        var escaped = false
        for scalar in scalars.dropFirst().dropLast() {
            if scalar == "\\" && !escaped {
                escaped = true
                continue
            }
            if scalar == "\"" && !escaped { return written }  // not one quoted string: "a" "b"
            escaped = false
            name.append(scalar)
        }
        return String(name)
    }

    /// A plain `local@domain` with nothing that could break a header or an SMTP command.
    static func isAddress(_ text: String) -> Bool {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty
            && text.unicodeScalars.allSatisfy { scalar in
                scalar.value > 0x20 && scalar.value < 0x7F && !"<>()[],;:\\\"".unicodeScalars.contains(scalar)
            }
    }
}
