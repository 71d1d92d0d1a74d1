import Dispatch

/// Real time: each timer is a `DispatchSourceTimer` on the caller's queue.
public struct DispatchScheduler: Scheduler {
    /// The real-time scheduler.
    public init() {}

    public func makeTimer(queue: DispatchQueue, handler: @escaping @Sendable () -> Void) -> any SchedulerTimer {
        DispatchTimer(queue: queue, handler: handler)
    }
}

/// `DispatchSourceTimer` is thread-safe for `schedule` and `cancel`, which is all this wraps.
private final class DispatchTimer: SchedulerTimer, @unchecked Sendable {
    private let source: any DispatchSourceTimer

    init(queue: DispatchQueue, handler: @escaping @Sendable () -> Void) {
        source = DispatchSource.makeTimerSource(queue: queue)
        source.setEventHandler(handler: handler)
        source.resume()
    }

    func arm(afterMilliseconds milliseconds: Int64) {
        source.schedule(deadline: .now() + .milliseconds(Int(max(milliseconds, 0))), leeway: .milliseconds(5))
    }

    func cancel() {
        source.cancel()
    }
}
