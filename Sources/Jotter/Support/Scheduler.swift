import Dispatch

/// Where the delivery worker's time-based wake-ups come from: real Dispatch timers in production, a
/// scheduler driven by a manual clock in tests (so a backoff of an hour takes no time to test).
public protocol Scheduler: Sendable {
    /// A timer that runs `handler` on `queue` when it fires; armed and re-armed with `arm`.
    func makeTimer(queue: DispatchQueue, handler: @escaping @Sendable () -> Void) -> any SchedulerTimer
}

/// A one-shot timer that can be re-armed; arming again replaces the previous deadline.
public protocol SchedulerTimer: Sendable {
    /// Fires once, `milliseconds` from now (0: at once).
    func arm(afterMilliseconds milliseconds: Int64)
    /// Never fires again.
    func cancel()
}
