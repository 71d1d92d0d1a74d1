/// Wall-clock time in milliseconds since the Unix epoch, and a monotonic reading for intervals: the one
/// seam tests replace to control time.
public protocol WallClock: Sendable {
    /// Now, in milliseconds since 1970-01-01T00:00:00Z. What is stored (a memo's next attempt, a lease)
    /// and shown. It can be set back or forward (NTP, a person, a laptop's battery-backed clock).
    func nowMilliseconds() -> Int64

    /// Milliseconds on a clock that only moves forward, from an arbitrary start: for intervals kept in
    /// memory (the next probe of a relay that is down, a batch's window), which a wall clock set back
    /// by an hour would otherwise stretch by that hour.
    func monotonicMilliseconds() -> Int64
}
