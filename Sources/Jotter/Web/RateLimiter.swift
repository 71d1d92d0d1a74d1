import Synchronization

/// A token bucket per client address for posting memos: generous by default, and a memo already
/// accepted is never affected (the limit is checked before anything is stored).
public final class RateLimiter: Sendable {
    /// Burst size and refill rate.
    public struct Limits: Sendable, Equatable {
        /// Most posts in a burst.
        public var burst: Double = 60
        /// Tokens regained per second.
        public var perSecond: Double = 1

        /// 60 at once, then one a second.
        public init(burst: Double = 60, perSecond: Double = 1) {
            self.burst = burst
            self.perSecond = perSecond
        }
    }

    private struct Bucket {
        var tokens: Double
        var updated: Int64
    }

    private let limits: Limits
    private let clock: any WallClock
    private let buckets = Mutex<[String: Bucket]>([:])

    /// A limiter with `limits`, reading time from `clock`.
    public init(limits: Limits = Limits(), clock: any WallClock = SystemClock()) {
        self.limits = limits
        self.clock = clock
    }

    /// Takes a token for `client` (a peer address: all of this machine's share one bucket, an IPv6
    /// address its /64's, as for the connection limits); nil when allowed, else the seconds until one
    /// is available.
    public func retryAfter(client address: String) -> Int? {
        take(client: address, spend: true)
    }

    /// The seconds until `client` has a token again, taking none; nil when it has one now.
    public func waiting(client address: String) -> Int? {
        take(client: address, spend: false)
    }

    private func take(client address: String, spend: Bool) -> Int? {
        let client = ConnectionRegistry.client(address: address)
        // Monotonic: with the wall clock, one set back an hour drained every bucket by an hour's tokens,
        // and each client seen before was refused for that hour.
        let now = clock.monotonicMilliseconds()
        return buckets.withLock { buckets -> Int? in
            if buckets.count > 10_000 {
                // Forget clients whose buckets have refilled: they are indistinguishable from new ones.
                buckets = buckets.filter { _, bucket in
                    bucket.tokens + Double(now - bucket.updated) / 1000 * limits.perSecond < limits.burst
                }
            }
            var bucket = buckets[client] ?? Bucket(tokens: limits.burst, updated: now)
            bucket.tokens = min(limits.burst, bucket.tokens + Double(now - bucket.updated) / 1000 * limits.perSecond)
            bucket.updated = now
            if bucket.tokens >= 1 {
                if spend { bucket.tokens -= 1 }
                buckets[client] = bucket
                return nil
            }
            buckets[client] = bucket
            return max(1, Int(((1 - bucket.tokens) / limits.perSecond).rounded(.up)))
        }
    }
}
