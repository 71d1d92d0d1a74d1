/// Why a delivery attempt failed, by kind; transports never pass on a server's own text.
public struct DeliveryFailure: Error, Sendable, Equatable {
    /// The failure kinds `/history` and the logs show.
    public enum Kind: String, Sendable, CaseIterable {
        case timeout
        case unreachable
        case network
        case tls
        case auth
        case rejected
        case rateLimited = "rate_limited"
        case serverError = "server_error"
        /// The recipient's mailbox is over its quota (SMTP 552): retried, as RFC 5321 asks, until there is room.
        case mailboxFull = "mailbox_full"
        /// The mail server refuses a message this large (SMTP `5.3.4`, `5.2.3`): permanent.
        case tooLarge = "too_large"
        /// The mail server took the whole message and never answered (the connection dropped, or no reply
        /// within 10 minutes): it may have been delivered. Tried once more, a minute later; a second time,
        /// the memo fails, so a server that keeps doing it gets at most two copies.
        case noReply = "no_reply"
        case conflict
        case io
        case configuration
        case corrupt
        /// A Jotter relay has no verified address for this composer yet (the page's Settings ask for one).
        case unverified
        /// A Jotter relay has the memo and has not delivered it yet: this composer asks again later.
        case relayPending = "relay_pending"
        /// A Jotter relay has the memo but cannot mail anyone now (its own mail credentials are refused).
        case relayHeld = "relay_held"
        /// A Jotter relay took the memo, then this composer had to register again (its device was revoked,
        /// or the relay's store reset): the relay answers only for the new device, so what became of the
        /// memo cannot be known here. It may have arrived: failed, kept whole, for its sender's Retry.
        case relayReregistered = "relay_reregistered"
    }

    /// A Jotter relay has the memo: not a failure of this composer's, and asked about again soon.
    public var isAtTheRelay: Bool { kind == .relayPending || kind == .relayHeld }

    /// Whether a retry after a failure of `kind` waits for something besides the relay's return: the relay
    /// asked for the wait (`Retry-After`, a Jotter relay holding the memo), the mail may still arrive
    /// (`no_reply`), or the mailbox must make room. The relay answering again does not cut it short.
    public static func waitOutlastsAnOutage(_ kind: String?) -> Bool {
        switch kind.flatMap(Kind.init(rawValue:)) {
        case .rateLimited, .noReply, .relayPending, .relayHeld, .mailboxFull: return true
        default: return false
        }
    }

    /// The failure's kind.
    public var kind: Kind
    /// True when retrying cannot help until something changes (credentials, the message, the configuration).
    public var isPermanent: Bool
    /// The relay asked to wait this long (from `Retry-After`).
    public var retryAfterMilliseconds: Int64?
    /// What to change, when Jotter could find out (the names a certificate is for); never a server's
    /// own text, never a secret.
    public var hint: String?

    /// A failure of `kind`.
    public init(_ kind: Kind, permanent: Bool, retryAfterMilliseconds: Int64? = nil) {
        self.kind = kind
        self.isPermanent = permanent
        self.retryAfterMilliseconds = retryAfterMilliseconds
    }

    /// True for failures where the relay could not be reached at all (the worker then probes instead of backing off).
    public var isOffline: Bool {
        kind == .unreachable
    }
}
