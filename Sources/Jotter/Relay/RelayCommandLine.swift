import Glibc

/// Parses `jotter relay …` (flags win over `JOTTER_RELAY_*` environment variables, which win over
/// defaults), as `CommandLineOptions` parses `serve`.
public enum RelayCommandLine {
    /// Help for `relay`.
    public static let help = """
        Usage: jotter relay [options]       run a Jotter relay node
               jotter relay invite [--data-dir PATH] [--store URL]
                                            print a one-time invite (7 days) for --registration invite

        A relay holds the mail provider's key for a family or a team and sends each device's
        messages only to addresses that device has proven it reads (a 6-digit code), within limits.

        Options (each also read from the environment variable shown):
          --host HOST          interface to listen on (JOTTER_RELAY_HOST; default 127.0.0.1)
          --port PORT          port, 0 picks a free one (JOTTER_RELAY_PORT; default 7374)
          --data-dir PATH      database, key and default Maildir (JOTTER_RELAY_DATA_DIR;
                               default $XDG_DATA_HOME/jotter-relay, else ~/.local/share/jotter-relay)
          --store URL          where the relay keeps its state (JOTTER_RELAY_STORE): sqlite (the
                               default: jotter.db in the data directory, one node), or
                               postgres://USER@HOST:PORT/DB for several nodes sharing one database
                               (a password is best kept in ~/.pgpass or PGPASSWORD); every node then
                               needs the same key file: copy <data-dir>/key from the first node
          --lease-seconds S    how long a node holds a message it is delivering before another node
                               may take it over (JOTTER_RELAY_LEASE_SECONDS; default 120; longer than
                               the slowest delivery)
          --mail URL           how mail leaves the relay (JOTTER_RELAY_MAIL; default
                               maildir:<data-dir>/Maildir): maildir:PATH, smtp://USER:PASS@HOST:587,
                               smtps://USER:PASS@HOST:465, resend://API_KEY, sendmail: — with
                               ?from=ADDR (sendmail: needs it); each message's recipient is the
                               verified address it names
          --mail-file PATH     read the mail URL from this file, so secrets stay out of ps and shell
                               history (JOTTER_RELAY_MAIL_FILE)
          --registration MODE  open (anyone who reaches the relay) or invite (JOTTER_RELAY_REGISTRATION;
                               default open)
          --tls-cert PATH      serve HTTPS with this PEM certificate chain (JOTTER_RELAY_TLS_CERT) …
          --tls-key PATH       … and this PEM private key (JOTTER_RELAY_TLS_KEY); else plain HTTP, for
                               a TLS proxy in front
          --trust-proxy ADDRS  comma-separated addresses of that proxy (JOTTER_RELAY_TRUST_PROXY): from
                               them, the client is the last X-Forwarded-For address not a proxy; from
                               anyone else, X-Forwarded-For is ignored
          --limit-device-minute N|off   messages per device per minute (default 30)
          --limit-device-day N|off      messages per device per UTC day (default 200)
          --limit-ip-hour N|off         messages per client IP address per hour (default 120)
          --limit-global-day N|off      messages for the whole relay per UTC day (default off)
          --limit-ip-codes-hour N|off   code requests per client IP address per hour (default 10)
          --limit-domain-codes-day N|off
                                        code mails to one mail domain per UTC day (default 50)
          --limit-ip-registrations-hour N|off
                                        device registrations per client IP address per hour (default 10)
                               (JOTTER_RELAY_LIMIT_DEVICE_MINUTE, …_DEVICE_DAY, …_IP_HOUR, …_GLOBAL_DAY,
                               …_IP_CODES_HOUR, …_DOMAIN_CODES_DAY, …_IP_REGISTRATIONS_HOUR)
          --idempotency-hours H  how long an Idempotency-Key is remembered (JOTTER_RELAY_IDEMPOTENCY_HOURS;
                               default 24, at least 1: a composer retries at least hourly)
          --slots N            deliveries in flight at once (JOTTER_RELAY_SLOTS; default 4)
          --retry-cap SECONDS  longest wait between attempts (JOTTER_RELAY_RETRY_CAP; default 3600)
          --max-body BYTES     largest request accepted (JOTTER_RELAY_MAX_BODY; default 2097152: the JSON
                               of a 256 KiB message, the largest accepted, escaped at worst)
          --log-level LEVEL    trace, debug, info, notice, warning, error (JOTTER_RELAY_LOG_LEVEL)
          -h, --help           this text

        Limits count fixed windows and survive a restart; beyond one: 429 with Retry-After and
        RateLimit-Policy / RateLimit fields.
        """

    private static let flags: [String: String] = [
        "--host": "JOTTER_RELAY_HOST", "--port": "JOTTER_RELAY_PORT", "--data-dir": "JOTTER_RELAY_DATA_DIR",
        "--store": "JOTTER_RELAY_STORE", "--mail": "JOTTER_RELAY_MAIL", "--mail-file": "JOTTER_RELAY_MAIL_FILE",
        "--registration": "JOTTER_RELAY_REGISTRATION",
        "--limit-device-minute": "JOTTER_RELAY_LIMIT_DEVICE_MINUTE",
        "--limit-device-day": "JOTTER_RELAY_LIMIT_DEVICE_DAY", "--limit-ip-hour": "JOTTER_RELAY_LIMIT_IP_HOUR",
        "--limit-global-day": "JOTTER_RELAY_LIMIT_GLOBAL_DAY",
        "--limit-ip-codes-hour": "JOTTER_RELAY_LIMIT_IP_CODES_HOUR",
        "--limit-ip-registrations-hour": "JOTTER_RELAY_LIMIT_IP_REGISTRATIONS_HOUR",
        "--limit-domain-codes-day": "JOTTER_RELAY_LIMIT_DOMAIN_CODES_DAY",
        "--idempotency-hours": "JOTTER_RELAY_IDEMPOTENCY_HOURS", "--slots": "JOTTER_RELAY_SLOTS",
        "--retry-cap": "JOTTER_RELAY_RETRY_CAP", "--max-body": "JOTTER_RELAY_MAX_BODY",
        "--log-level": "JOTTER_RELAY_LOG_LEVEL",
        "--tls-cert": "JOTTER_RELAY_TLS_CERT", "--tls-key": "JOTTER_RELAY_TLS_KEY",
        "--trust-proxy": "JOTTER_RELAY_TRUST_PROXY", "--lease-seconds": "JOTTER_RELAY_LEASE_SECONDS",
    ]

    /// Parses the arguments after `relay`.
    public static func parse(_ arguments: ArraySlice<String>,
                             environment: [String: String]) throws -> CommandLineOptions.Command {
        var arguments = arguments
        if arguments.first == "invite" {
            arguments.removeFirst()
            let (directory, store) = try inviteOptions(arguments, environment: environment)
            return .relayInvite(dataDirectory: directory, store: store)
        }
        var values: [String: String] = [:], onCommandLine: Set<String> = []
        for (flag, variable) in flags {
            if let value = environment[variable], !value.isEmpty { values[flag] = value }
        }
        while let argument = arguments.popFirst() {
            if argument == "-h" || argument == "--help" { return .help(help) }
            let (name, given) = try CommandLineOptions.flagValue(argument, rest: &arguments, known: flags,
                                                                 unknown: "unknown relay option")
            values[name] = given
            onCommandLine.insert(name)
        }
        CommandLineOptions.preferCommandLine(&values, given: onCommandLine, spellings: ("--mail", "--mail-file"))
        return .relay(try CommandLineOptions.namingEnvironment(flags, given: onCommandLine, in: values) {
            try configuration(values, environment: environment)
        })
    }

    private static func configuration(_ values: [String: String],
                                      environment: [String: String]) throws -> RelayConfiguration {
        var configuration = RelayConfiguration(
            dataDirectory: try values["--data-dir"].map { try CommandLineOptions.expandingHome($0, environment: environment) }
                ?? RelayConfiguration.defaultDataDirectory(environment: environment))
        if let store = values["--store"] { configuration.store = try self.store(store) }
        configuration.mail = values["--mail"]
        if let path = values["--mail-file"] {
            guard configuration.mail == nil else {
                throw CommandLineOptions.UsageError(description: "give --mail or --mail-file, not both")
            }
            configuration.mail = try CommandLineOptions.readRelayFile(path, flag: "--mail-file")
        }
        if let mode = values["--registration"] {
            guard let registration = RelayConfiguration.Registration(rawValue: mode) else {
                throw CommandLineOptions.UsageError(description: "--registration must be open or invite")
            }
            configuration.registration = registration
        }
        var limits = configuration.limits
        try limit(values, "--limit-device-minute", &limits.devicePerMinute)
        try limit(values, "--limit-device-day", &limits.devicePerDay)
        try limit(values, "--limit-ip-hour", &limits.ipPerHour)
        try limit(values, "--limit-global-day", &limits.globalPerDay)
        try limit(values, "--limit-ip-codes-hour", &limits.codeRequestsPerIPHour)
        try limit(values, "--limit-ip-registrations-hour", &limits.registrationsPerIPHour)
        try limit(values, "--limit-domain-codes-day", &limits.codeRequestsPerDomainDay)
        configuration.limits = limits
        if let hours = values["--idempotency-hours"] {
            guard let number = Int64(hours), (1...720).contains(number) else {
                throw CommandLineOptions.UsageError(description: "--idempotency-hours must be a number from 1 to 720")
            }
            configuration.idempotencyRetentionMilliseconds = number * 3_600_000
        }
        if let slots = values["--slots"] {
            guard let number = Int(slots), (1...64).contains(number) else {
                throw CommandLineOptions.UsageError(description: "--slots must be a number from 1 to 64")
            }
            configuration.delivery.slots = number
        }
        if let lease = values["--lease-seconds"] {
            guard let seconds = Int64(lease), (5...3600).contains(seconds) else {
                throw CommandLineOptions.UsageError(description: "--lease-seconds must be a number from 5 to 3600")
            }
            configuration.delivery.leaseMilliseconds = seconds * 1000
        }
        if let cap = values["--retry-cap"] {
            guard let seconds = Int64(cap), (1...86_400).contains(seconds) else {
                throw CommandLineOptions.UsageError(
                    description: "--retry-cap must be a number of seconds from 1 to 86400")
            }
            configuration.delivery.retryPolicy.capMilliseconds = seconds * 1000
        }
        if let host = values["--host"] {
            guard !host.isEmpty else { throw CommandLineOptions.UsageError(description: "--host needs a value") }
            configuration.http.host = host
        }
        if let port = values["--port"] {
            guard let number = Int(port), (0...65535).contains(number) else {
                throw CommandLineOptions.UsageError(description: "--port must be a number from 0 to 65535")
            }
            configuration.http.port = number
        }
        if let maxBody = values["--max-body"] {
            guard let number = Int(maxBody), number >= 1024, number <= 64 * 1024 * 1024 else {
                throw CommandLineOptions.UsageError(
                    description: "--max-body must be a number of bytes from 1024 to 67108864")
            }
            configuration.http.maxBodyBytes = number
        }
        if let level = values["--log-level"] {
            guard let parsed = Logger.Level(name: level) else {
                throw CommandLineOptions.UsageError(
                    description: "--log-level must be one of trace, debug, info, notice, warning, error")
            }
            configuration.logLevel = parsed
        }
        switch (values["--tls-cert"], values["--tls-key"]) {
        case (let certificate?, let key?):
            let keyPEM = try readPEM(key, flag: "--tls-key"), certificatePEM = try readPEM(certificate, flag: "--tls-cert")
            // Checked here, in words: libmicrohttpd would only say it "failed to start".
            guard let chain = X509Certificate(pem: certificatePEM) else {
                throw CommandLineOptions.UsageError(description: "--tls-cert \(certificate) holds no certificate "
                                                    + "(are --tls-cert and --tls-key swapped?)")
            }
            guard let privateKey = PrivateKey(pem: keyPEM) else {
                throw CommandLineOptions.UsageError(description: "--tls-key \(key) holds no private key "
                                                    + "(are --tls-cert and --tls-key swapped?)")
            }
            guard chain.matches(privateKey) else {
                throw CommandLineOptions.UsageError(description: "--tls-key \(key) is not the key of the certificate "
                                                    + "in --tls-cert \(certificate)")
            }
            // Anyone on this machine who can read the key can pose as the relay (its group may: `ssl-cert`).
            var info = stat()
            if stat(key, &info) == 0, info.st_mode & 0o007 != 0 {
                throw CommandLineOptions.UsageError(description: "--tls-key \(key) can be read by every user of this "
                    + "machine (mode \(String(info.st_mode & 0o777, radix: 8))): chmod o-rwx it")
            }
            configuration.http.tls = (keyPEM: keyPEM, certificatePEM: certificatePEM)
        case (nil, nil):
            break
        default:
            throw CommandLineOptions.UsageError(description: "give --tls-cert and --tls-key together")
        }
        if let proxies = values["--trust-proxy"] {
            let addresses = proxies.split(separator: ",").map { String($0.trimmingCharacters(in: " ")) }
            guard !addresses.isEmpty, addresses.allSatisfy(ForwardedFor.isAddress) else {
                throw CommandLineOptions.UsageError(
                    description: "--trust-proxy takes IP addresses separated by commas (the proxy's own)")
            }
            configuration.trustedProxies = Set(addresses.map(ForwardedFor.canonical))
        }
        return configuration
    }

    /// A PEM file's text, checked now: a relay that cannot serve TLS must not start on plain HTTP.
    private static func readPEM(_ path: String, flag: String) throws -> String {
        guard let bytes = try? FileIO.read(path: path), let text = String(validating: bytes, as: UTF8.self),
              text.contains("-----BEGIN ") else {
            throw CommandLineOptions.UsageError(description: "\(flag) \(path) is not a readable PEM file")
        }
        return text
    }

    /// `sqlite` (or `sqlite:`): the default; `postgres://…` or `postgresql://…` (libpq reads the rest).
    /// An error never repeats the URL, which may hold a password.
    static func store(_ text: String) throws -> RelayConfiguration.StoreLocation {
        let scheme = text.prefix(while: { $0 != ":" }).lowercased()
        switch scheme {
        case "sqlite":
            return .sqlite
        case "postgres", "postgresql":
            guard text.dropFirst(scheme.count).hasPrefix("://"), text.utf8.count > scheme.utf8.count + 3 else {
                throw CommandLineOptions.UsageError(
                    description: "--store \(scheme): needs a URL: postgres://USER@HOST:PORT/DATABASE")
            }
            return .postgres(url: text)
        default:
            let safe = scheme.allSatisfy { $0.isLetter || $0.isNumber || "+-.".contains($0) } ? scheme : "?"
            throw CommandLineOptions.UsageError(
                description: "--store '\(safe.prefix(20))' is not a store (use sqlite or postgres://…)")
        }
    }

    /// A limit's value: a positive number, or `off`.
    private static func limit(_ values: [String: String], _ flag: String, _ limit: inout Int?) throws {
        guard let value = values[flag] else { return }
        if value == "off" {
            limit = nil
            return
        }
        guard let number = Int(value), (1...1_000_000_000).contains(number) else {
            throw CommandLineOptions.UsageError(description: "\(flag) must be a positive number, or off")
        }
        limit = number
    }

    private static func inviteOptions(_ arguments: ArraySlice<String>, environment: [String: String])
        throws -> (dataDirectory: String, store: RelayConfiguration.StoreLocation) {
        var arguments = arguments
        let known = ["--data-dir": "JOTTER_RELAY_DATA_DIR", "--store": "JOTTER_RELAY_STORE"]
        var values: [String: String] = [:]
        for (flag, variable) in known {
            if let value = environment[variable], !value.isEmpty { values[flag] = value }
        }
        while let argument = arguments.popFirst() {
            let (name, given) = try CommandLineOptions.flagValue(
                argument, rest: &arguments, known: known,
                unknown: "usage: jotter relay invite [--data-dir PATH] [--store URL]; unknown option")
            values[name] = given
        }
        return (try values["--data-dir"].map { try CommandLineOptions.expandingHome($0, environment: environment) }
                    ?? RelayConfiguration.defaultDataDirectory(environment: environment),
                try values["--store"].map(store) ?? .sqlite)
    }
}

/// `jotter relay invite`: a one-time invite that the relay on a data directory accepts (while it runs
/// or not: SQLite arbitrates).
public enum RelayInviteCommand {
    /// Issues an invite; returns the text to print.
    public static func run(dataDirectory: String, store location: RelayConfiguration.StoreLocation = .sqlite,
                           credentialsDirectory: String? = nil) throws -> String {
        let database = DataDirectory.databasePath(in: dataDirectory), keyPath = DataDirectory.keyPath(in: dataDirectory)
        let credential = credentialsDirectory.map(KeyStore.credentialPath(in:))
        switch location {
        case .sqlite where access(database, F_OK) != 0:
            throw CommandLineOptions.UsageError(
                description: "no Jotter relay data in \(dataDirectory): start 'jotter relay' once (see --data-dir)")
        case .postgres where access(keyPath, F_OK) != 0 && credential == nil:
            throw CommandLineOptions.UsageError(
                description: "no relay key in \(dataDirectory): give the --data-dir of a relay node (or copy its key)")
        default:
            break
        }
        let key = try KeyStore.load(path: keyPath, credentialPath: credential, protecting: database)
        let outbox: any MessageOutbox, store: any RelayStore
        switch location {
        case .sqlite:
            let sqlite = try Outbox(path: database, key: key)
            outbox = sqlite
            store = try SQLiteRelayStore(database: sqlite.database)
        case .postgres(let url):
            store = try PostgresRelayStore(url: url)
            outbox = try PostgresOutbox(url: url, key: key, keyPath: keyPath, listening: false)
        }
        defer {
            outbox.close()
            store.close()
        }
        let service = try RelayService(store: store, outbox: outbox, configuration: RelayConfiguration(dataDirectory: dataDirectory))
        return text(try service.issueInvite())
    }

    private static func text(_ invite: (invite: String, expiresAt: Int64)) -> String {
        """
            \(invite.invite)
            (works once, until \(Timestamp.iso8601(milliseconds: invite.expiresAt)); a device registers with \
            POST /v1/devices {"invite": "…"})
            """
    }
}
