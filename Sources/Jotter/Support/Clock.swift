import Glibc
import Synchronization

/// Wall-clock time in milliseconds since the Unix epoch: the one seam tests replace to control time.
public protocol WallClock: Sendable {
    /// Now, in milliseconds since 1970-01-01T00:00:00Z.
    func nowMilliseconds() -> Int64
}

/// The system's real-time clock.
public struct SystemClock: WallClock {
    /// Creates the system clock.
    public init() {}

    public func nowMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// A clock that moves only when told to; for tests of timing logic without waiting.
public final class ManualClock: WallClock {
    private let now: Mutex<Int64>

    /// A clock standing at `milliseconds`.
    public init(milliseconds: Int64 = 1_700_000_000_000) {
        now = Mutex(milliseconds)
    }

    public func nowMilliseconds() -> Int64 {
        now.withLock { $0 }
    }

    /// Moves the clock forward.
    public func advance(milliseconds: Int64) {
        now.withLock { $0 += milliseconds }
    }
}

/// A monotonic reading in nanoseconds, for durations.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}
