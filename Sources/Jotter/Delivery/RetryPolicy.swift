/// Exponential backoff with jitter: 1, 2, 4, 8 … s, capped, honouring a relay's `Retry-After`.
public struct RetryPolicy: Sendable, Equatable {
    /// The first delay.
    public var baseMilliseconds: Int64
    /// No delay exceeds this (also caps `Retry-After`).
    public var capMilliseconds: Int64
    /// Each delay is stretched by up to this fraction at random, so many memos do not retry in lockstep.
    public var jitter: Double

    /// The default: from 1 s, capped at 1 h, up to +25 % jitter.
    public init(baseMilliseconds: Int64 = 1000, capMilliseconds: Int64 = 3_600_000, jitter: Double = 0.25) {
        self.baseMilliseconds = baseMilliseconds
        self.capMilliseconds = capMilliseconds
        self.jitter = jitter
    }

    /// The wait after failed attempt number `attempt` (from 1); `random` is in `0..<1`.
    public func delay(afterAttempt attempt: Int, retryAfter: Int64? = nil, random: Double) -> Int64 {
        let exponent = min(max(attempt - 1, 0), 40)
        let (scaled, overflow) = baseMilliseconds.multipliedReportingOverflow(by: Int64(1) << exponent)
        let backoff = overflow ? capMilliseconds : min(scaled, capMilliseconds)
        let jittered = min(capMilliseconds, backoff + Int64(Double(backoff) * jitter * min(max(random, 0), 1)))
        guard let retryAfter else { return jittered }
        return min(capMilliseconds, max(retryAfter, jittered))
    }
}

/// Why a delivery attempt failed, by kind; transports never pass on a server's own text.
public struct DeliveryFailure: Error, Sendable, Equatable {
    /// The failure kinds `/history` and the logs show.
    public enum Kind: String, Sendable {
        case timeout
        case unreachable
        case network
        case tls
        case auth
        case rejected
        case rateLimited = "rate_limited"
        case serverError = "server_error"
        case conflict
        case io
        case configuration
        case corrupt
    }

    /// The failure's kind.
    public var kind: Kind
    /// True when retrying cannot help until something changes (credentials, the message, the configuration).
    public var isPermanent: Bool
    /// The relay asked to wait this long (from `Retry-After`).
    public var retryAfterMilliseconds: Int64?

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
