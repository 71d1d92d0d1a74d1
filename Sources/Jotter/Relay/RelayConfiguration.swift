/// Everything `jotter relay` can be told, as plain values with defaults. Only `main` (through
/// `RelayCommandLine`) reads the environment and the command line to fill it in.
public struct RelayConfiguration: Sendable {
    /// Who may register a device.
    public enum Registration: String, Sendable, Equatable {
        /// Anyone who can reach the relay.
        case open
        /// Only with an invite printed by `jotter relay invite`.
        case invite
    }

    /// Where the relay keeps its state.
    public enum StoreLocation: Sendable, Equatable {
        /// SQLite in the data directory (one node).
        case sqlite
        /// Everything in PostgreSQL, shared by every node pointing at it: devices, codes, limits and
        /// idempotency (`PostgresRelayStore`) and the outbox (`PostgresOutbox`). The data directory then
        /// holds only the key (the same file on every node), the lock and the default Maildir.
        case postgres(url: String)
    }

    /// The data directory (database, key, default Maildir).
    public var dataDirectory: String
    /// How mail leaves the relay: `maildir:PATH` (default `maildir:<data-dir>/Maildir`), `smtp://`,
    /// `smtps://`, `resend://`, `sendmail:`. Each message's recipient is its own.
    public var mail: String?
    /// The state store.
    public var store = StoreLocation.sqlite
    /// Who may register.
    public var registration = Registration.open
    /// The HTTP server's addresses and limits (port 7374 unless told). A request may be 2 MiB: the JSON
    /// of the largest message (`maxMessageBodyBytes`), escaped at worst (`\u0026` for each `&`), fits.
    public var http: HTTPServer.Configuration = {
        var http = HTTPServer.Configuration()
        http.port = 7374
        http.maxBodyBytes = 2 * 1024 * 1024
        return http
    }()
    /// The largest message body accepted, in bytes of UTF-8 once decoded from the request's JSON: what a
    /// composer accepts as one memo (256 KiB). Larger is `413 too_large`.
    public static let maxMessageBodyBytes = 256 * 1024
    /// The largest subject accepted, in bytes: one header line's worth (RFC 5322 §2.1.1).
    public static let maxSubjectBytes = 998
    /// The delivery worker's settings (its `to` is unused: every message has its own).
    public var delivery = DeliveryWorker.Configuration()
    /// Rate limits.
    public var limits = RelayLimits()
    /// Verification codes.
    public var codes = CodePolicy()
    /// How long an `Idempotency-Key` is remembered, in milliseconds (24 hours).
    public var idempotencyRetentionMilliseconds: Int64 = 24 * 3_600_000
    /// How long a delivered (or cancelled) message's record stays, for `GET /v1/messages/{id}`; never
    /// shorter than the idempotency retention (a replay answers with the message's id).
    public var messageRetentionMilliseconds: Int64 = 30 * 24 * 3_600_000
    /// How long a device is kept without a verified address, in milliseconds (7 days). An address
    /// still unverified this long after it was first asked for, with no live code, is dropped; a
    /// device registered this long ago with no address left (and no live code) is forgotten. A
    /// composer that comes back later registers again; nothing is lost, as a device without an
    /// address has nothing to send.
    public var unverifiedDeviceRetentionMilliseconds: Int64 = 7 * 86_400_000
    /// How long a request may hold an `Idempotency-Key` while its message is being stored; a holder
    /// that dies (a crash) lets the key go after this.
    public var idempotencyLeaseMilliseconds: Int64 = 30_000
    /// How long an invite works.
    public var inviteLifetimeMilliseconds: Int64 = 7 * 86_400_000
    /// Log level.
    public var logLevel: Logger.Level = .info
    /// The TLS proxy in front (`--trust-proxy`): from these peers, the client is read from
    /// `X-Forwarded-For`; from anyone else that header is ignored.
    public var trustedProxies: Set<String> = []

    /// The shortest idempotency retention allowed: a composer retries at least this often (its
    /// backoff is capped at an hour), so a retry always finds the key it used.
    public static let minimumIdempotencyRetentionMilliseconds: Int64 = 3_600_000

    /// A configuration with defaults for everything but the data directory.
    public init(dataDirectory: String) {
        self.dataDirectory = dataDirectory
    }

    /// `$XDG_DATA_HOME/jotter-relay`, else `~/.local/share/jotter-relay`.
    public static func defaultDataDirectory(environment: [String: String]) -> String {
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            return xdg + "/jotter-relay"
        }
        return (ProcessEnvironment.home(environment: environment) ?? ".") + "/.local/share/jotter-relay"
    }
}

/// The relay's rate limits; nil turns one off. Every layer that applies to a request is checked
/// before any is spent.
public struct RelayLimits: Sendable, Equatable {
    /// Messages per device per minute.
    public var devicePerMinute: Int? = 30
    /// Messages per device per day (UTC).
    public var devicePerDay: Int? = 200
    /// Messages per client IP address per hour.
    public var ipPerHour: Int? = 120
    /// Messages for the whole relay per day (UTC): a ceiling for the mail provider's quota.
    public var globalPerDay: Int?
    /// Code requests (`POST /v1/destinations`) per client IP address per hour.
    public var codeRequestsPerIPHour: Int? = 10
    /// Code mails to one mail domain per UTC day, from everyone: the per-inbox caps count `ana+x@`
    /// and `ana@` as one, but a catch-all domain (or `x@ana.fastmail.com`) has any number of inboxes,
    /// and strangers on many addresses could flood it with code mails.
    public var codeRequestsPerDomainDay: Int? = 50
    /// Device registrations per client IP address per hour.
    public var registrationsPerIPHour: Int? = 10

    /// The defaults.
    public init() {}
}

/// The rules for verification codes (the numbers are the defaults).
public struct CodePolicy: Sendable, Equatable {
    /// How long a code works.
    public var lifetimeMilliseconds: Int64 = 10 * 60_000
    /// Wrong attempts that burn a code.
    public var maximumAttempts = 5
    /// The least time between two codes for one address.
    public var cooldownMilliseconds: Int64 = 60_000
    /// Codes per address per (sliding) hour.
    public var perAddressPerHour = 3
    /// Codes per address per (sliding) day.
    public var perAddressPerDay = 5

    /// The defaults.
    public init() {}

    /// Why a new code for an address is refused now, given when its codes of the last day were issued
    /// (oldest first): the cooldown, the hourly cap, the daily cap — each with the seconds until it
    /// allows one again. Both stores decide with this.
    func refusals(issued: [Int64], now: Int64) -> [(reason: String, seconds: Int64)] {
        func seconds(_ milliseconds: Int64) -> Int64 { max(1, (milliseconds + 999) / 1000) }
        var refusals: [(reason: String, seconds: Int64)] = []
        if let last = issued.last, last + cooldownMilliseconds > now {
            refusals.append(("cooldown", seconds(last + cooldownMilliseconds - now)))
        }
        let lastHour = issued.filter { $0 > now - 3_600_000 }
        if lastHour.count >= perAddressPerHour {
            refusals.append(("address_hourly", seconds(lastHour[lastHour.count - perAddressPerHour] + 3_600_000 - now)))
        }
        if issued.count >= perAddressPerDay {
            refusals.append(("address_daily", seconds(issued[issued.count - perAddressPerDay] + 86_400_000 - now)))
        }
        return refusals
    }
}
