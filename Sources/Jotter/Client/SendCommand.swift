import Glibc

/// `jotter send`: the script-side client. Posts one memo to a running Jotter with an
/// `Idempotency-Key` made once per invocation, and retries what can pass (the server restarting,
/// `429`/`503` with `Retry-After`, a `5xx`) for a bounded time with the same key — so a cron job
/// never loses a memo and never sends it twice. Exit status 0 only on `204`.
public enum SendCommand {
    /// What to send, and where.
    public struct Options: Sendable, Equatable {
        public var url: String
        public var token: String?
        public var subject: String?
        /// The memo's text: the arguments joined by spaces, else `-f FILE`, else standard input.
        public var text: String?
        public var file: String?
        public var quiet = false
        public var json = false
        /// How long to keep retrying, seconds.
        public var retryFor = 60
        /// The CA that signed an `https://` server's certificate (`--ca`; a LAN server's `DATA_DIR/tls/ca.pem`).
        public var caFile: String?
        /// The `Idempotency-Key` to send (`--key`), so a run that gave up can be repeated and the memo is
        /// still taken at most once; a fresh one per run when nil.
        public var key: String?
    }

    /// The most a memo read from a file or standard input may be before it is refused here (the server's
    /// own limit is far smaller): a runaway pipe is not read into memory until the process dies.
    public static let maxInputBytes = 64 * 1024 * 1024

    /// Exit statuses (sysexits.h), each a different reason a script may act on.
    public enum Status: Int32, Sendable {
        case sent = 0
        case usage = 64
        /// The server refused the memo itself (empty, too large, not text): retrying cannot help.
        case refused = 65
        /// No server answered within the retry time.
        case unreachable = 69
        /// The server answered but not yet (429/503/5xx) within the retry time.
        case temporary = 75
        /// Not allowed: a token is missing, wrong or revoked, or another site's rules.
        case notAllowed = 77
        /// A system library the command needs (libcurl) is not installed (`EX_OSFILE`).
        case missingLibrary = 72
    }

    /// What the command did: the exit status and the text for stdout and stderr.
    public struct Result: Sendable {
        public var status: Status
        public var output: String
        public var error: String
    }

    /// The default server: `JOTTER_URL`, else this machine's default port.
    public static func defaultURL(environment: [String: String]) -> String {
        environment["JOTTER_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://127.0.0.1:7373"
    }

    /// Runs the command. `readInput` supplies standard input when no text or file is given.
    public static func run(_ options: Options, readInput: () -> [UInt8]?,
                           sleep: (Double) -> Void = { usleep(UInt32(min($0, 3600) * 1_000_000)) },
                           now: () -> Double = { monotonicSeconds() }) -> Result {
        let body: String
        if let text = options.text {
            body = text
        } else if let file = options.file {
            let bytes: [UInt8]
            do throws(SystemError) {
                guard let read = try FileIO.read(path: file, limit: maxInputBytes) else { throw SystemError(code: ENOENT) }
                bytes = read
            } catch {
                // Missing, unreadable, a folder: said as such (it was "cannot read … as UTF-8 text").
                return Result(status: .usage, output: "",
                              error: "jotter send: cannot read \(file): \(String(cString: strerror(error.code)))\n")
            }
            guard let text = String(validating: bytes, as: UTF8.self) else {
                return Result(status: .usage, output: "", error: "jotter send: \(file) is not UTF-8 text\n")
            }
            body = text
        } else if let bytes = readInput(), !bytes.isEmpty {
            guard bytes.count <= maxInputBytes else {
                return Result(status: .refused, output: "",
                              error: "jotter send: standard input is over \(maxInputBytes / 1024 / 1024) MiB; nothing was sent\n")
            }
            guard let text = String(validating: bytes, as: UTF8.self) else {
                return Result(status: .usage, output: "", error: "jotter send: standard input is not UTF-8 text\n")
            }
            body = text
        } else {
            return Result(status: .usage, output: "",
                          error: "jotter send: nothing to send (give the memo as arguments, -f FILE or on stdin)\n")
        }
        let key: String, form: (contentType: String, body: [UInt8])
        do {
            key = try options.key ?? SecureRandom.uuid()
            form = try Self.requestBody(body: body, subject: options.subject)
        } catch {
            return Result(status: .temporary, output: "", error: "jotter send: no randomness for a key\n")
        }
        if let refusal = Self.unreadableCA(options.caFile, command: "jotter send") { return refusal }
        if let refusal = Self.unusableURL(options.url, command: "jotter send") { return refusal }
        if let refusal = Self.missingCurl(command: "jotter send") { return refusal }
        let client = ServerClient(baseURL: trimmed(options.url), token: options.token, caFile: options.caFile)
        let deadline = now() + Double(options.retryFor)
        var wait = 0.5
        var last = "no answer"
        var lastStatus = Status.unreachable
        // Whether some attempt may have reached the server and been stored with no answer coming back
        // (a timeout, a reset, a proxy's 502, a server stopping): then "nothing was sent" would be a lie,
        // and a second run with a new key could store the memo twice.
        var mayHaveArrived = false
        while true {
            do {
                let response = try client.request("POST", "/send", headers: [
                    "Content-Type: \(form.contentType)", "Accept: application/json", "Idempotency-Key: \(key)",
                ], body: form.body)
                switch response.status {
                case 204 where response.header("X-Message-Id").map(HistoryRoute.isMessageID) == true:
                    let id = response.header("X-Message-Id") ?? ""
                    if options.json { return Result(status: .sent, output: "{\"id\":\"\(id)\"}\n", error: "") }
                    return Result(status: .sent, output: options.quiet ? "" : "Sent (\(id)).\n", error: "")
                case 200..<400:
                    // Not a Jotter's answer (a Jotter stores a memo with 204 and its id): another server, a
                    // captive portal, a redirect. Exit 0 would tell the script a memo is safe that is not.
                    return Result(status: .usage, output: "",
                                  error: "jotter send: \(shown(options.url)) answered \(response.status) without a memo id: "
                                    + "not a Jotter (--url is the server's base, like http://127.0.0.1:7373); "
                                    + "no Jotter stored the memo\n")
                case 400, 409, 413, 415, 422:
                    return Result(status: .refused, output: "",
                                  error: "jotter send: refused (\(response.status) \(response.errorCode ?? "")): "
                                    + (response.errorMessage ?? "the server did not say why") + "\n")
                // 429 too_many_attempts: locked out after wrong tokens; waiting cannot mend the token.
                case let status where status == 401 || status == 403
                    || (status == 429 && response.errorCode == "too_many_attempts"):
                    return Result(status: .notAllowed, output: "",
                                  error: "jotter send: not allowed (\(response.status) \(response.errorCode ?? "")): "
                                    + (response.errorMessage ?? "") + "\n")
                case 404, 405, 501:
                    // Not a Jotter at this URL (often its path: --url is the server's base, not …/send; a
                    // server that knows no POST at all says 501): no retry can find one there.
                    return Result(status: .usage, output: "",
                                  error: "jotter send: no Jotter at \(shown(options.url)) (\(response.status)); "
                                    + "--url is the server's base, like http://127.0.0.1:7373\n")
                case 400..<500 where response.status != 408 && response.status != 425 && response.status != 429:
                    return Result(status: .refused, output: "",
                                  error: "jotter send: refused (\(response.status) \(response.errorCode ?? ""))\n")
                default:
                    lastStatus = .temporary
                    last = "\(response.status) \(response.errorCode ?? "")"
                    // Only these say the memo was not stored.
                    if response.status != 429 && response.errorCode != "storage_unavailable" { mayHaveArrived = true }
                    if let retryAfter = response.header("Retry-After").flatMap(Double.init) { wait = max(wait, retryAfter) }
                }
            } catch {
                if let failure = error as? ServerClient.Unreachable, failure.isCertificateProblem {
                    return Result(status: .notAllowed, output: "", error: Self.certificateAdvice("jotter send", options.url))
                }
                // http:// to a server that speaks only HTTPS (a LAN-mode Jotter drops a plain request without
                // an answer): nothing reached it as a request, and no retry will.
                if let refusal = Self.plainHTTPToTLS(error, client, options.url, command: "jotter send") { return refusal }
                lastStatus = .unreachable
                last = "no answer from \(shown(options.url))"
                if let failure = error as? ServerClient.Unreachable, failure.requestSent { mayHaveArrived = true }
            }
            let remaining = deadline - now()
            guard remaining > 0 else { break }
            sleep(min(wait, remaining))
            wait = min(wait * 2, 10)
        }
        guard mayHaveArrived else {
            return Result(status: lastStatus, output: "",
                          error: "jotter send: gave up after \(options.retryFor) s (\(last)); nothing was sent\n")
        }
        return Result(status: lastStatus, output: "",
                      error: "jotter send: gave up after \(options.retryFor) s (\(last)); the memo may have reached the "
                        + "server: see 'jotter history', or run again with --key \(key), which it takes at most once\n")
    }

    /// The memo as the request's body: without a subject its UTF-8 bytes as they are (`text/plain`), so a
    /// memo the server's cap takes from `curl -d` is taken from here too; with one, `multipart/form-data`.
    static func requestBody(body: String, subject: String?) throws -> (contentType: String, body: [UInt8]) {
        guard subject != nil else { return ("text/plain; charset=utf-8", Array(body.utf8)) }
        return try multipart(body: body, subject: subject)
    }

    /// The memo as `multipart/form-data`: its text as it is, where JSON would escape every line break,
    /// quote and control character and form encoding every non-ASCII byte (a memo under the server's cap
    /// could then be refused as too large). The boundary is random, and checked against the text.
    static func multipart(body: String, subject: String?) throws -> (contentType: String, body: [UInt8]) {
        var boundary: String
        repeat {
            boundary = "jotter-" + (try SecureRandom.uuid())
        } while body.contains(boundary) || (subject?.contains(boundary) ?? false)
        var text = ""
        for (name, value) in [("subject", subject), ("body", body)] {
            guard let value else { continue }
            text += "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n"
                + "Content-Type: text/plain; charset=utf-8\r\n\r\n\(value)\r\n"
        }
        text += "--\(boundary)--\r\n"
        return ("multipart/form-data; boundary=\(boundary)", Array(text.utf8))
    }

    /// The refusal to run when libcurl cannot be opened: nothing could be sent without it.
    static func missingCurl(command: String) -> Result? {
        guard case .failure(let missing) = CurlLibrary.shared else { return nil }
        return Result(status: .missingLibrary, output: "", error: "\(command): \(missing)\n")
    }

    /// A usage error when `--ca` names a file that cannot be read (else libcurl's "not trusted" would send
    /// the user after the wrong problem).
    static func unreadableCA(_ caFile: String?, command: String) -> Result? {
        guard let caFile, access(caFile, R_OK) != 0 else { return nil }
        return Result(status: .usage, output: "", error: "\(command): cannot read the CA file \(caFile) (--ca or JOTTER_CA)\n")
    }

    /// The answer for an `http://` URL whose server dropped the request unanswered because it speaks only
    /// TLS there; nil for any other failure.
    static func plainHTTPToTLS(_ error: any Error, _ client: ServerClient, _ url: String, command: String) -> Result? {
        guard let failure = error as? ServerClient.Unreachable, failure.endedUnanswered, client.speaksTLS() else {
            return nil
        }
        let https = "https://" + trimmed(shown(url)).dropFirst("http://".count)
        return Result(status: .usage, output: "",
                      error: "\(command): \(shown(url)) speaks HTTPS (a LAN-mode Jotter): use --url \(https), with "
                        + "--ca DATA_DIR/tls/ca.pem; nothing was sent\n")
    }

    /// What to do when the server's certificate is not trusted: a LAN server signs its own.
    static func certificateAdvice(_ command: String, _ url: String, outcome: String = "; nothing was sent") -> String {
        "\(command): the server at \(shown(url)) answered with a certificate this machine does not trust; "
            + "for a Jotter in LAN mode pass --ca DATA_DIR/tls/ca.pem (its own CA)\(outcome)\n"
    }

    static func trimmed(_ url: String) -> String {
        url.hasSuffix("/") ? String(url.dropLast()) : url
    }

    /// `url` as messages show it: without a password or token in its user part (`http://u:pw@host`).
    static func shown(_ url: String) -> String {
        let url = trimmed(url)
        guard let scheme = url.firstRange(of: "://") else { return url }
        let rest = url[scheme.upperBound...]
        let authority = rest.prefix(while: { $0 != "/" && $0 != "?" && $0 != "#" })
        guard let at = authority.lastIndex(of: "@") else { return url }
        return String(url[..<scheme.upperBound]) + String(rest[rest.index(after: at)...])
    }

    /// A usage error for a URL no retry can reach: not `http://` or `https://`, or without a host.
    static func unusableURL(_ url: String, command: String) -> Result? {
        if let parts = URLParts(url), parts.scheme == "http" || parts.scheme == "https", !parts.host.isEmpty,
           !url.contains(where: { $0 == " " || $0.isNewline }) {
            return nil
        }
        return Result(status: .usage, output: "",
                      error: "\(command): \(shown(url)) is not a server's address: give http://HOST:PORT or https://HOST:PORT "
                        + "(--url or JOTTER_URL); nothing was sent\n")
    }

    public static func monotonicSeconds() -> Double {
        Double(monotonicNanoseconds()) / 1e9
    }
}
