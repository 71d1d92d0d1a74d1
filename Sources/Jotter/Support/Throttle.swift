import Synchronization

/// Says yes at most once per interval: the first call, then the first after the interval has passed.
final class Throttle: Sendable {
    private let interval: Int64
    private let last = Atomic<Int64>(Int64.min)

    init(everyMilliseconds interval: Int64) {
        self.interval = interval
    }

    /// True when `now` (a monotonic reading in ms: a wall clock set back would silence it for the step)
    /// is at least an interval after the last yes (which it then becomes).
    func due(now: Int64) -> Bool {
        var previous = last.load(ordering: .relaxed)
        while previous == Int64.min || now - previous >= interval {
            let (exchanged, original) = last.compareExchange(expected: previous, desired: now, ordering: .relaxed)
            if exchanged { return true }
            previous = original
        }
        return false
    }
}
