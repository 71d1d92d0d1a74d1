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
