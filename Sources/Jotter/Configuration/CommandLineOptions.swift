import Glibc

/// Parses `jotter` command lines (flags win over `JOTTER_*` environment variables, which win over defaults).
public enum CommandLineOptions {
    /// What the command line asks for.
    public enum Command: Sendable {
        /// Print this text and exit.
        case help(String)
        /// Serve with this configuration.
        case serve(Configuration)
        /// List, rename, revoke or forget paired LAN devices.
        case devices(dataDirectory: String, action: DevicesCommand.Action)
        /// Print a fresh pairing link for the running LAN-mode server.
        case pair(dataDirectory: String)
        /// Re-seal everything under a new key.
        case rekey(dataDirectory: String)
        /// Send one memo to a running server.
        case send(SendCommand.Options)
        /// Print the latest memos' statuses.
        case history(url: String, token: String?, limit: Int, caFile: String?)
        /// Install, remove, show or print the systemd user unit for `serve` with this configuration.
        case service(ServiceCommand.Action, Configuration)
        /// Run a relay with this configuration.
        case relay(RelayConfiguration)
        /// Print a one-time invite for the relay on this data directory.
        case relayInvite(dataDirectory: String, store: RelayConfiguration.StoreLocation)
    }

    /// A command line that cannot be obeyed; the description says why, for a person.
    public struct UsageError: Error, CustomStringConvertible, Equatable {
        /// What is wrong, for a person.
        public let description: String
    }

    /// The top-level help.
    public static let help = """
        Jotter: write a thought, press send, it lands in your inbox.

        Usage:
          jotter serve [options]     run the composer page and the delivery worker
          jotter --help              this text
          jotter serve --help        every option of serve
          jotter pair [--data-dir PATH]
                                     a fresh one-time pairing link + QR code for the running
                                     LAN-mode server (10 minutes; any number may be issued)
          jotter devices [--data-dir PATH] [list | rename ID NAME | revoke ID | forget ID|--all-revoked]
                                     the phones paired in LAN mode; rename one, revoke its token,
                                     or forget revoked ones (gone from the list)
          jotter send [-s SUBJECT] [-f FILE] [--url URL] [--token T] [--ca FILE] [--retry-for S]
                      [--key KEY] [--quiet|--json] [TEXT…]
                                     send a memo to the running server (stdin when no TEXT/FILE);
                                     retries while it restarts, never twice; exit 0 only when accepted
          jotter history [-n N] [--url URL] [--token T] [--ca FILE]
                                     the latest memos and their delivery status
          jotter service install|uninstall|status|--print [serve options]
                                     run 'jotter serve' as a systemd user service, started at login
          jotter rekey [--data-dir PATH]
                                     re-seal every stored memo under a new key (server stopped;
                                     safe to interrupt: run it again to finish)
          jotter relay [options]     run a Jotter relay for a family or a team (jotter relay --help)
          jotter relay invite [--data-dir PATH]
                                     a one-time invite for a relay that registers by invite

        Main options of serve (see jotter serve --help for all of them):
          --host HOST          interface to listen on (default 127.0.0.1)
          --port PORT          port, 0 picks a free one (default 7373)
          --data-dir PATH      database, key and default Maildir (default ~/.local/share/jotter)
          --relay URL          where memos go: maildir:PATH (default), smtp://, smtps://,
                               resend://, sendmail:, markdown:PATH
          --lan                let a phone on your network send (HTTPS + pairing)

        Then open http://127.0.0.1:7373 or run: curl -d "buy milk" 127.0.0.1:7373
        """

    /// Help for `serve`.
    public static let serveHelp = """
        Usage: jotter serve [options]

        Options (each also read from the environment variable shown):
          --host HOST          interface to listen on (JOTTER_HOST; default 127.0.0.1); without
                               --lan only this machine is answered, on any interface
          --port PORT          port, 0 picks a free one (JOTTER_PORT; default 7373)
          --data-dir PATH      database, key and default Maildir (JOTTER_DATA_DIR;
                               default $XDG_DATA_HOME/jotter, else ~/.local/share/jotter)
          --relay URL          where memos are delivered (JOTTER_RELAY;
                               default maildir:<data-dir>/Maildir):
                                 maildir:PATH
                                 smtp://USER:PASS@HOST:587   (STARTTLS required)
                                 smtps://USER:PASS@HOST:465  (implicit TLS)
                                 resend://API_KEY?to=ME@EXAMPLE.COM
                                 sendmail:  or  sendmail:/path/to/sendmail  (?to=ADDR; without it,
                                   the user running Jotter: USER@localhost, which a local MTA delivers;
                                   ?timeout=SECONDS kills a hung one, default 60)
                                 markdown:/path/to/vault/folder   (daily notes)
                                 jotter+https://HOST[:PORT]  (a Jotter relay, ?invite=CODE; the address
                                   is confirmed in the page's Settings with a mailed code)
                               options: ?from=ADDR&to=ADDR, ?ca=CA-BUNDLE, ?timeout=SECONDS
          --relay-file PATH    read the relay URL from this file, so secrets stay out of
                               ps and shell history (JOTTER_RELAY_FILE)
          --slots N            deliveries in flight at once (JOTTER_SLOTS; default 4)
          --retry-cap SECONDS  longest wait between attempts (JOTTER_RETRY_CAP; default 3600)
          --undo-seconds N     hold each memo N seconds before delivery, so it can be taken back
                               (DELETE /history/ID; the page shows Undo) (JOTTER_UNDO_SECONDS; default 0: off)
          --warn-after SECONDS a memo not delivered after this long is a warning: once in the log,
                               in /healthz (degraded) and on the page (JOTTER_WARN_AFTER; default 3600)
          --lan                listen on every interface so a phone on your network can send:
                               HTTPS with a certificate from a local CA kept in the data
                               directory (a phone trusts the CA once), and a one-time pairing
                               link + QR code printed at start ('jotter pair' prints more)
          --insecure-http      with --lan, serve plain HTTP instead (not recommended)
          --allowed-host NAME  also answer to this Host name, e.g. mybox.local (repeatable;
                               JOTTER_ALLOWED_HOSTS, comma-separated; with --lan also named in
                               the certificate, when a .local name). Loopback always works.
          --rate-limit N|off   memos per minute per client, in bursts of N (JOTTER_RATE_LIMIT;
                               default 300); beyond it: 429 with Retry-After
          --max-body BYTES     largest memo request accepted (JOTTER_MAX_BODY; default 262144)
          --body-memory BYTES  request bodies held in memory at once, over all clients; beyond it
                               503 with Retry-After (JOTTER_BODY_MEMORY; default 33554432)
          --header-timeout S   seconds a request's headers may take, however slowly they trickle
                               (JOTTER_HEADER_TIMEOUT; default 10)
          --request-timeout S  seconds a whole request may take, headers and body
                               (JOTTER_REQUEST_TIMEOUT; default 60)
          --connections-per-client N
                               connections one client may hold; this machine is one client
                               (JOTTER_CONNECTIONS_PER_CLIENT; default 64, at least 16)
          --public-dir PATH    the page's files (JOTTER_PUBLIC_DIR; default ./Public)
          --log-level LEVEL    trace, debug, info, notice, warning, error (JOTTER_LOG_LEVEL; default info)
          -h, --help           this text

        The key file <data-dir>/key must be readable by its owner only (chmod 600). A systemd credential
        $CREDENTIALS_DIRECTORY/jotter.key takes precedence over it.
        """

    /// Parses `arguments` (without the program name). `sourceRoot` is the path of `main.swift`, used to
    /// find `Public/` in a development checkout.
    public static func parse(_ arguments: [String], environment: [String: String],
                             sourceRoot: String) throws -> Command {
        var arguments = arguments[...]
        guard let first = arguments.popFirst() else { return .help(help) }
        switch first {
        case "-h", "--help", "help": return .help(help)
        // These have no help of their own: the top-level help describes them (it was a usage error).
        case let word where ["pair", "rekey", "service"].contains(word) && arguments.contains { $0 == "-h" || $0 == "--help" }:
            return .help(help)
        case "serve": break
        case "devices": return try parseDevices(arguments, environment: environment)
        case "pair":
            guard !hasWords(arguments),
                  case .devices(let directory, .list) = try parseDevices(arguments, environment: environment) else {
                throw UsageError(description: "usage: jotter pair [--data-dir PATH]")
            }
            return .pair(dataDirectory: directory)
        case "send": return try parseSend(arguments, environment: environment)
        case "service":
            var rest = arguments
            let actions: [String: ServiceCommand.Action] = ["install": .install, "uninstall": .uninstall,
                                                            "status": .status, "--print": .print, "print": .print]
            guard let word = rest.popFirst(), let action = actions[word] else {
                throw UsageError(description: "usage: jotter service install|uninstall|status|--print [serve options]")
            }
            guard case .serve(var configuration) = try parse(["serve"] + Array(rest), environment: environment,
                                                              sourceRoot: sourceRoot) else {
                return .help(serveHelp)
            }
            // A service runs from no particular directory: every path absolute.
            configuration.dataDirectory = absolute(configuration.dataDirectory)
            configuration.publicDirectory = absolute(configuration.publicDirectory)
            configuration.relay = try configuration.relay.map { try absoluteRelayPath($0, environment: environment) }
            return .service(action, configuration)
        case "history": return try parseHistory(arguments, environment: environment)
        case "relay": return try RelayCommandLine.parse(arguments, environment: environment)
        case "rekey":
            guard !hasWords(arguments),
                  case .devices(let directory, .list) = try parseDevices(arguments, environment: environment) else {
                throw UsageError(description: "usage: jotter rekey [--data-dir PATH]")
            }
            return .rekey(dataDirectory: directory)
        default: throw UsageError(description: "unknown command '\(first.prefix(40))'")
        }
        var values: [String: String] = [:]
        var allowedHosts: [String] = []
        let flags = ["--host": "JOTTER_HOST", "--port": "JOTTER_PORT", "--data-dir": "JOTTER_DATA_DIR",
                     "--relay": "JOTTER_RELAY", "--relay-file": "JOTTER_RELAY_FILE", "--slots": "JOTTER_SLOTS",
                     "--retry-cap": "JOTTER_RETRY_CAP", "--allowed-host": "JOTTER_ALLOWED_HOSTS",
                     "--warn-after": "JOTTER_WARN_AFTER", "--undo-seconds": "JOTTER_UNDO_SECONDS",
                     "--rate-limit": "JOTTER_RATE_LIMIT", "--max-body": "JOTTER_MAX_BODY",
                     "--body-memory": "JOTTER_BODY_MEMORY", "--header-timeout": "JOTTER_HEADER_TIMEOUT",
                     "--request-timeout": "JOTTER_REQUEST_TIMEOUT",
                     "--connections-per-client": "JOTTER_CONNECTIONS_PER_CLIENT",
                     "--public-dir": "JOTTER_PUBLIC_DIR",
                     "--log-level": "JOTTER_LOG_LEVEL"]
        for (flag, variable) in flags {
            if let value = environment[variable], !value.isEmpty { values[flag] = value }
        }
        if let hosts = values.removeValue(forKey: "--allowed-host") {
            allowedHosts = hosts.split(separator: ",").map { $0.trimmingCharacters(in: " ") }.map(String.init)
        }
        var lan = false, insecureHTTP = false
        if let given = environment["JOTTER_LAN"], !given.isEmpty {
            // A systemd unit or a .env file says true as often as 1: a value read as "no" was LAN mode off, silently.
            switch given.lowercased() {
            case "1", "true", "yes", "on": lan = true
            case "0", "false", "no", "off": lan = false
            default: throw UsageError(description: "JOTTER_LAN must be 1 or 0 (or true/false, yes/no, on/off)")
            }
        }
        var onCommandLine: Set<String> = []
        while let argument = arguments.popFirst() {
            if argument == "-h" || argument == "--help" { return .help(serveHelp) }
            if argument == "--lan" {
                lan = true
                continue
            }
            if argument == "--insecure-http" {
                insecureHTTP = true
                continue
            }
            let (name, given) = try flagValue(argument, rest: &arguments, known: flags, unknown: "unknown option")
            if name == "--allowed-host" {
                allowedHosts.append(given)
            } else {
                values[name] = given
                onCommandLine.insert(name)
            }
        }
        preferCommandLine(&values, given: onCommandLine, spellings: ("--relay", "--relay-file"))

        return try namingEnvironment(flags, given: onCommandLine, in: values) {
            let dataDirectory = try values["--data-dir"].map { try expandingHome($0, environment: environment) }
                ?? Configuration.defaultDataDirectory(environment: environment)
            var configuration = Configuration(dataDirectory: dataDirectory,
                                              publicDirectory: values["--public-dir"] ?? defaultPublicDirectory(sourceRoot))
            configuration.relay = values["--relay"]
            configuration.lan = lan
            configuration.insecureHTTP = insecureHTTP
            if insecureHTTP && !lan {
                throw UsageError(description: "--insecure-http only makes sense with --lan")
            }
            if lan && values["--host"] == nil {
                configuration.http.host = "0.0.0.0"
            }
            configuration.allowedHosts = allowedHosts.filter { !$0.isEmpty }
            if let limit = values["--rate-limit"] {
                if limit == "off" {
                    configuration.rateLimit = nil
                } else {
                    guard let perMinute = Int(limit), (1...1_000_000).contains(perMinute) else {
                        throw UsageError(description: "--rate-limit must be a number of memos per minute, or off")
                    }
                    configuration.rateLimit = RateLimiter.Limits(burst: Double(perMinute),
                                                                 perSecond: Double(perMinute) / 60)
                }
            }
            if let path = values["--relay-file"] {
                guard configuration.relay == nil else {
                    throw UsageError(description: "give --relay or --relay-file, not both")
                }
                configuration.relay = try readRelayFile(path)
            }
            if let slots = values["--slots"] {
                guard let number = Int(slots), (1...64).contains(number) else {
                    throw UsageError(description: "--slots must be a number from 1 to 64")
                }
                configuration.delivery.slots = number
            }
            if let cap = values["--retry-cap"] {
                guard let seconds = Int64(cap), (1...86_400).contains(seconds) else {
                    throw UsageError(description: "--retry-cap must be a number of seconds from 1 to 86400")
                }
                configuration.delivery.retryPolicy.capMilliseconds = seconds * 1000
            }
            if let undo = values["--undo-seconds"] {
                guard let seconds = Int64(undo), (0...600).contains(seconds) else {
                    throw UsageError(description: "--undo-seconds must be a number of seconds from 0 to 600")
                }
                configuration.undoMilliseconds = seconds * 1000
            }
            if let warn = values["--warn-after"] {
                guard let seconds = Int64(warn), (1...30 * 86_400).contains(seconds) else {
                    throw UsageError(description: "--warn-after must be a number of seconds from 1 to 2592000")
                }
                configuration.delivery.warnAfterMilliseconds = seconds * 1000
            }
            if let host = values["--host"] {
                guard !host.isEmpty else { throw UsageError(description: "--host needs a value") }
                configuration.http.host = host
            }
            if let port = values["--port"] {
                guard let number = Int(port), (0...65535).contains(number) else {
                    throw UsageError(description: "--port must be a number from 0 to 65535")
                }
                configuration.http.port = number
            }
            if let maxBody = values["--max-body"] {
                guard let number = Int(maxBody), number >= 1024, number <= 64 * 1024 * 1024 else {
                    throw UsageError(description: "--max-body must be a number of bytes from 1024 to 67108864")
                }
                configuration.http.maxBodyBytes = number
            }
            try parseLimits(values, into: &configuration.http)
            if let level = values["--log-level"] {
                guard let parsed = Logger.Level(name: level) else {
                    throw UsageError(description: "--log-level must be one of trace, debug, info, notice, warning, error")
                }
                configuration.logLevel = parsed
            }
            return .serve(configuration)
        }
    }

    /// Runs `parse`; its complaint about a flag whose value came from the flag's environment variable
    /// names the variable instead (`JOTTER_PORT must be a number…`): the operator of a unit file or a
    /// container never typed `--port`. `flags` maps flags to variables, `given` holds those on the
    /// command line.
    static func namingEnvironment<T>(_ flags: [String: String], given: Set<String>, in values: [String: String],
                                     _ parse: () throws -> T) throws -> T {
        do {
            return try parse()
        } catch let error as UsageError {
            let fromEnvironment = flags.filter { values[$0.key] != nil && !given.contains($0.key) }
            // The longest flag first: `--relay-file` is not `--relay` followed by "-file".
            let text = error.description
            for (flag, variable) in fromEnvironment.sorted(by: { $0.key.count > $1.key.count }) {
                var index = text.startIndex
                while index < text.endIndex {
                    let rest = text[index...]
                    if rest.hasPrefix(flag), [nil, " ", ":", ","].contains(rest.dropFirst(flag.count).first) {
                        throw UsageError(description: text[..<index] + variable + rest.dropFirst(flag.count))
                    }
                    index = text.index(after: index)
                }
            }
            throw error
        }
    }

    /// A flag wins over the environment, also over the other spelling of the same setting: `--relay`
    /// over `JOTTER_RELAY_FILE`, `--relay-file` over `JOTTER_RELAY`. `values` holds both sources; `given`
    /// names the flags that came from the command line.
    static func preferCommandLine(_ values: inout [String: String], given: Set<String>, spellings: (String, String)) {
        for (flag, other) in [spellings, (spellings.1, spellings.0)] where given.contains(flag) && !given.contains(other) {
            values[other] = nil
        }
    }

    /// `--flag=value` as `--flag value` (as `serve` takes it), up to a lone `--`, after which words are text.
    static func splittingEquals(_ arguments: ArraySlice<String>) -> ArraySlice<String> {
        var out: [String] = []
        var rest = arguments
        while let argument = rest.popFirst() {
            if argument == "--" { out.append(argument); out.append(contentsOf: rest); break }
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                out.append(String(argument[..<equals]))
                out.append(String(argument[argument.index(after: equals)...]))
            } else {
                out.append(argument)
            }
        }
        return out[...]
    }

    /// A relay URL whose path is a local one (`maildir:`, `markdown:`, `sendmail:`) with that path
    /// absolute: a service runs from no particular directory (and may write only where its unit says).
    static func absoluteRelayPath(_ relay: String, environment: [String: String]) throws -> String {
        for scheme in ["maildir:", "markdown:", "sendmail:"] where relay.hasPrefix(scheme) {
            let rest = relay.dropFirst(scheme.count)
            let path = rest.prefix { $0 != "?" }
            guard !path.isEmpty, !path.hasPrefix("/") else { return relay }
            // `~/vault` is the home folder's, as `serve` reads it: made absolute against the working
            // directory, it was a folder named `~` there.
            return scheme + absolute(try expandingHome(String(path), environment: environment)) + rest.dropFirst(path.count)
        }
        return relay
    }

    /// `jotter send [-s SUBJECT] [-f FILE] [--url URL] [--token T] [--retry-for S] [--key KEY] [--quiet|--json] [TEXT…]`.
    private static func parseSend(_ arguments: ArraySlice<String>, environment: [String: String]) throws -> Command {
        var arguments = arguments
        var options = SendCommand.Options(url: SendCommand.defaultURL(environment: environment),
                                          token: environment["JOTTER_TOKEN"].flatMap { $0.isEmpty ? nil : $0 })
        var words: [String] = []
        func value(_ flag: String) throws -> String {
            guard let value = arguments.popFirst() else { throw UsageError(description: "\(flag) needs a value") }
            return value
        }
        arguments = splittingEquals(arguments)
        while let argument = arguments.popFirst() {
            switch argument {
            case "-s", "--subject": options.subject = try value(argument)
            case "-f", "--file": options.file = try value(argument)
            case "--url": options.url = try value(argument)
            case "--token": options.token = try value(argument)
            case "--ca": options.caFile = try value(argument)
            case "--key":
                let key = try value(argument)
                guard SendRoute.validIdempotencyKey(key) else {
                    throw UsageError(description: "--key must be 1-256 visible ASCII characters")
                }
                options.key = key
            case "--retry-for":
                guard let seconds = Int(try value(argument)), (0...86_400).contains(seconds) else {
                    throw UsageError(description: "--retry-for must be a number of seconds from 0 to 86400")
                }
                options.retryFor = seconds
            case "-q", "--quiet": options.quiet = true
            case "--json": options.json = true
            case "-h", "--help": return .help(help)
            case "--": words.append(contentsOf: arguments); arguments = []
            default:
                if argument.hasPrefix("-") && argument.count > 1 {
                    throw UsageError(description: "jotter send: unknown option \(argument.prefix(40))")
                }
                words.append(argument)
            }
        }
        if !words.isEmpty {
            guard options.file == nil else { throw UsageError(description: "give the memo as TEXT or -f FILE, not both") }
            options.text = words.joined(separator: " ")
        }
        // Quiet prints nothing, JSON prints the id: a script gets one or the other, never a silent guess.
        if options.quiet && options.json { throw UsageError(description: "jotter send: give -q or --json, not both") }
        options.caFile = options.caFile ?? defaultCA(url: options.url, environment: environment)
        return .send(options)
    }

    /// The CA for `jotter send`/`history` when `--ca` is not given, for an `https://` server only (plain
    /// HTTP has no certificate: a `JOTTER_CA` left set for another server stopped it with "cannot read the CA
    /// file"): `JOTTER_CA`, else, for a server on this machine, the default data directory's own
    /// (`tls/ca.pem`, as `serve --lan` makes it). A remote server keeps the system's trust.
    static func defaultCA(url: String, environment: [String: String]) -> String? {
        guard url.lowercased().hasPrefix("https://") else { return nil }
        if let given = environment["JOTTER_CA"], !given.isEmpty { return given }
        guard let host = URLParts(url)?.host, Loopback.contains(host: host) else {
            return nil
        }
        let path = Configuration.defaultDataDirectory(environment: environment) + "/tls/ca.pem"
        return access(path, R_OK) == 0 ? path : nil
    }

    /// `jotter history [-n N] [--url URL] [--token T]`.
    private static func parseHistory(_ arguments: ArraySlice<String>, environment: [String: String]) throws -> Command {
        var arguments = arguments
        var url = SendCommand.defaultURL(environment: environment)
        var token = environment["JOTTER_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        var limit = 20
        var caFile: String?
        arguments = splittingEquals(arguments)
        while let argument = arguments.popFirst() {
            switch argument {
            case "-n":
                guard let text = arguments.popFirst(), let number = Int(text), (1...500).contains(number) else {
                    throw UsageError(description: "-n must be a number from 1 to 500")
                }
                limit = number
            case "--url":
                guard let value = arguments.popFirst() else { throw UsageError(description: "--url needs a value") }
                url = value
            case "--token":
                guard let value = arguments.popFirst() else { throw UsageError(description: "--token needs a value") }
                token = value
            case "--ca":
                guard let value = arguments.popFirst() else { throw UsageError(description: "--ca needs a value") }
                caFile = value
            case "-h", "--help": return .help(help)
            default: throw UsageError(description: "jotter history: unknown argument \(argument.prefix(40))")
            }
        }
        return .history(url: url, token: token, limit: limit, caFile: caFile ?? defaultCA(url: url, environment: environment))
    }

    /// The HTTP edge's limits: body memory, deadlines, connections per client.
    private static func parseLimits(_ values: [String: String], into http: inout HTTPServer.Configuration) throws {
        func number(_ flag: String, _ range: ClosedRange<Int>, _ unit: String) throws -> Int? {
            guard let text = values[flag] else { return nil }
            guard let value = Int(text), range.contains(value) else {
                throw UsageError(description: "\(flag) must be a number of \(unit) from \(range.lowerBound) to "
                                 + "\(range.upperBound)")
            }
            return value
        }
        if let bytes = try number("--body-memory", 1_048_576...(16 << 30), "bytes") { http.bodyMemoryBytes = bytes }
        if let seconds = try number("--header-timeout", 1...3600, "seconds") { http.headerTimeoutSeconds = seconds }
        if let seconds = try number("--request-timeout", 1...86_400, "seconds") { http.requestTimeoutSeconds = seconds }
        if let count = try number("--connections-per-client", 16...100_000, "connections") {
            http.perIPConnectionLimit = count
        }
    }

    /// Whether `arguments` hold anything but `--data-dir` and help: `jotter rekey list` is no rekey.
    private static func hasWords(_ arguments: ArraySlice<String>) -> Bool {
        var arguments = arguments
        while let argument = arguments.popFirst() {
            if argument == "--data-dir" {
                _ = arguments.popFirst()
            } else if !argument.hasPrefix("--data-dir=") && argument != "-h" && argument != "--help" {
                return true
            }
        }
        return false
    }

    private static func parseDevices(_ arguments: ArraySlice<String>, environment: [String: String]) throws -> Command {
        var arguments = arguments
        var dataDirectory = environment["JOTTER_DATA_DIR"].flatMap { $0.isEmpty ? nil : $0 }
            ?? Configuration.defaultDataDirectory(environment: environment)
        var words: [String] = []
        while let argument = arguments.popFirst() {
            if argument == "--data-dir" {
                guard let value = arguments.popFirst() else {
                    throw UsageError(description: "--data-dir needs a value")
                }
                dataDirectory = value
            } else if argument.hasPrefix("--data-dir=") {
                dataDirectory = String(argument.dropFirst("--data-dir=".count))
            } else if argument == "-h" || argument == "--help" {
                return .help(help)
            } else {
                words.append(argument)
            }
        }
        dataDirectory = try expandingHome(dataDirectory, environment: environment)
        switch words.first {
        case nil, "list":
            guard words.count <= 1 else { throw UsageError(description: "usage: jotter devices [list]") }
            return .devices(dataDirectory: dataDirectory, action: .list)
        case "revoke":
            guard words.count == 2 else { throw UsageError(description: "usage: jotter devices revoke ID") }
            return .devices(dataDirectory: dataDirectory, action: .revoke(words[1]))
        case "rename":
            guard words.count >= 3 else { throw UsageError(description: "usage: jotter devices rename ID NAME") }
            return .devices(dataDirectory: dataDirectory,
                            action: .rename(words[1], words.dropFirst(2).joined(separator: " ")))
        case "forget":
            guard words.count == 2 else { throw UsageError(description: "usage: jotter devices forget ID|--all-revoked") }
            return .devices(dataDirectory: dataDirectory, action: .forget(words[1] == "--all-revoked" ? nil : words[1]))
        default:
            throw UsageError(description: "unknown devices command '\(words[0].prefix(40))'")
        }
    }

    /// The first non-blank line of the file (the URL); the error never repeats the file's content.
    static func readRelayFile(_ path: String, flag: String = "--relay-file") throws -> String {
        let bytes: [UInt8]
        do throws(SystemError) {
            guard let contents = try FileIO.read(path: path, limit: 65536) else { throw SystemError(code: ENOENT) }
            bytes = contents
        } catch {
            throw UsageError(description: "cannot read \(flag) \(path): \(String(cString: strerror(error.code)))")
        }
        let line = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: " \t") }.first(where: { !$0.isEmpty })
        guard let line else { throw UsageError(description: "\(flag) \(path) is empty") }
        // The file is there to keep a password or an API key out of `ps`: one every user may read keeps it
        // from no one (its group may read it, as the key's may; so may no one, in a private directory).
        if let mode = Self.readableByEveryone(path) {
            throw UsageError(description: "\(flag) \(path) can be read by every user of this machine (mode "
                + String(mode, radix: 8) + "), and it holds the relay's credentials: chmod o-rwx it")
        }
        return String(line)
    }

    /// The file's mode when every user of the machine can read it: readable by others, in directories they
    /// may all pass through. Nil otherwise.
    static func readableByEveryone(_ path: String) -> mode_t? {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & 0o004 != 0 else { return nil }
        var directory = absolute(path)
        while let slash = directory.lastIndex(of: "/") {
            directory = String(directory[..<slash])
            var folder = stat()
            guard stat(directory.isEmpty ? "/" : directory, &folder) == 0, folder.st_mode & 0o001 != 0 else { return nil }
            if directory.isEmpty { break }
        }
        return info.st_mode & 0o777
    }

    /// `./Public` when it holds the page, else the checkout's `Public/` next to `Sources/`.
    /// `--flag value` or `--flag=value` for one of the `known` flags; the value is taken from `rest`
    /// when it is not attached.
    static func flagValue(_ argument: String, rest: inout ArraySlice<String>, known: [String: String],
                          unknown: String) throws -> (name: String, value: String) {
        var name = argument
        var value: String?
        if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
            name = String(argument[..<equals])
            value = String(argument[argument.index(after: equals)...])
        }
        guard known[name] != nil else { throw UsageError(description: "\(unknown) '\(name.prefix(40))'") }
        if value == nil, let next = rest.first, next.hasPrefix("--"),
           known[String(next.prefix { $0 != "=" })] != nil || next == "--lan" || next == "--insecure-http" {
            // `--host --port 0`: the next word is another option, not this one's value (which would then
            // leave "0" as an "unknown option").
            throw UsageError(description: "\(name) needs a value (\(next.prefix(40)) is another option)")
        }
        guard let given = value ?? rest.popFirst() else { throw UsageError(description: "\(name) needs a value") }
        return (name, given)
    }

    /// `~` and `~/…` as the home folder (`HOME`), as a shell would have expanded them had the path not been
    /// quoted, or come from a unit file or an environment variable; anything else as it is. A data
    /// directory `~/jd` was made in the working directory's `~` folder while its Maildir went home.
    static func expandingHome(_ path: String, environment: [String: String]) throws -> String {
        guard path.hasPrefix("~") else { return path }
        guard path == "~" || path.hasPrefix("~/") else {
            throw UsageError(description: "~user is not expanded in \(path.prefix(60)): give the full path")
        }
        guard let home = ProcessEnvironment.home(environment: environment) else {
            throw UsageError(description: "\(path.prefix(60)) needs HOME to be set: give the full path")
        }
        let expanded = (home.hasSuffix("/") ? String(home.dropLast()) : home) + path.dropFirst()
        return expanded.isEmpty ? "/" : expanded
    }

    /// `path` made absolute against the current directory.
    static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return path }
        let directory = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return directory + "/" + (path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

    static func defaultPublicDirectory(_ sourceRoot: String) -> String {
        if access("Public/index.html", R_OK) == 0 { return "Public" }
        var components = sourceRoot.split(separator: "/", omittingEmptySubsequences: false)
        components.removeLast(min(3, components.count))  // …/Sources/JotterCLI/main.swift
        return components.joined(separator: "/") + "/Public"
    }
}
