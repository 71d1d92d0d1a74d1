import Glibc

/// The system's real-time clock (`CLOCK_REALTIME`), and `CLOCK_MONOTONIC` for intervals.
public struct SystemClock: WallClock {
    /// Creates the system clock.
    public init() {}

    public func nowMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    public func monotonicMilliseconds() -> Int64 {
        Int64(monotonicNanoseconds() / 1_000_000)
    }
}

/// A monotonic reading in nanoseconds, for durations.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}
