import Jotter
import Synchronization

/// A clock that moves only when told to; for tests of timing logic without waiting.
final class ManualClock: WallClock {
    private let now: Mutex<Int64>

    /// A clock standing at `milliseconds`.
    init(milliseconds: Int64 = 1_700_000_000_000) {
        now = Mutex(milliseconds)
    }

    func nowMilliseconds() -> Int64 {
        now.withLock { $0 }
    }

    /// Moves the clock forward.
    func advance(milliseconds: Int64) {
        now.withLock { $0 += milliseconds }
    }
}
