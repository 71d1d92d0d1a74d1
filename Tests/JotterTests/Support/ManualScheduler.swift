import Dispatch
import Synchronization
@testable import Jotter

/// Time that moves only when a test says so: a `ManualClock` and the timers armed against it. Moving
/// it fires every timer whose deadline has come (on its own queue), so a worker's backoff of an hour
/// is tested without waiting an hour, or a second.
final class ManualScheduler: Scheduler {
    let clock: ManualClock
    private let timers = Mutex<[ManualTimer]>([])
    /// How many times any timer was armed: what a wake-up that found nothing new to do still costs.
    var arms: Int { armCount.withLock { $0 } }
    private let armCount = Mutex<Int>(0)

    init(clock: ManualClock = ManualClock()) {
        self.clock = clock
    }

    func makeTimer(queue: DispatchQueue, handler: @escaping @Sendable () -> Void) -> any SchedulerTimer {
        let timer = ManualTimer(queue: queue, handler: handler, clock: clock) { [weak self] in
            self?.armCount.withLock { $0 += 1 }
        }
        timers.withLock { $0.append(timer) }
        return timer
    }

    /// Moves time forward by `milliseconds` and fires what came due.
    func advance(milliseconds: Int64) {
        clock.advance(milliseconds: milliseconds)
        let now = clock.monotonicMilliseconds()
        for timer in timers.withLock({ $0 }) { timer.fireIfDue(now: now) }
    }

    /// The earliest armed deadline, if any timer is armed, on the clock's monotonic reading (which is its
    /// wall time until the wall clock is `set`): timers, like Dispatch's, do not move with the wall clock.
    var nextDeadline: Int64? {
        timers.withLock { $0.compactMap(\.deadline).min() }
    }
}

/// One timer: armed with a deadline on the manual clock's monotonic reading.
final class ManualTimer: SchedulerTimer {
    private let queue: DispatchQueue
    private let handler: @Sendable () -> Void
    private let clock: ManualClock
    private let onArm: @Sendable () -> Void
    private let state = Mutex<(deadline: Int64?, cancelled: Bool)>((nil, false))

    init(queue: DispatchQueue, handler: @escaping @Sendable () -> Void, clock: ManualClock,
         onArm: @escaping @Sendable () -> Void) {
        self.queue = queue
        self.handler = handler
        self.clock = clock
        self.onArm = onArm
    }

    var deadline: Int64? { state.withLock { $0.cancelled ? nil : $0.deadline } }

    func arm(afterMilliseconds milliseconds: Int64) {
        let now = clock.monotonicMilliseconds()
        onArm()
        state.withLock { $0.deadline = now + max(milliseconds, 0) }
        // A deadline already reached fires as a real timer would: at once.
        if milliseconds <= 0 { fireIfDue(now: now) }
    }

    func cancel() {
        state.withLock { $0.cancelled = true }
    }

    func fireIfDue(now: Int64) {
        let due = state.withLock { state -> Bool in
            guard !state.cancelled, let deadline = state.deadline, deadline <= now else { return false }
            state.deadline = nil
            return true
        }
        if due { queue.async(execute: handler) }
    }
}
