import Jotter
import Synchronization

/// A clock that moves only when told to; for tests of timing logic without waiting. Its monotonic
/// reading starts where its wall time does and moves with it, except when the wall clock is `set`.
final class ManualClock: WallClock {
    private let now: Mutex<(wall: Int64, monotonic: Int64)>

    /// A clock standing at `milliseconds`.
    init(milliseconds: Int64 = 1_700_000_000_000) {
        now = Mutex((milliseconds, milliseconds))
    }

    func nowMilliseconds() -> Int64 {
        now.withLock { $0.wall }
    }

    func monotonicMilliseconds() -> Int64 {
        now.withLock { $0.monotonic }
    }

    /// Time passes: both readings move forward.
    func advance(milliseconds: Int64) {
        now.withLock {
            $0.wall += milliseconds
            $0.monotonic += milliseconds
        }
    }

    /// The wall clock is set (back, with a negative `milliseconds`), as NTP or a person does; no time
    /// passes, so the monotonic reading stays.
    func set(byMilliseconds milliseconds: Int64) {
        now.withLock { $0.wall += milliseconds }
    }
}
