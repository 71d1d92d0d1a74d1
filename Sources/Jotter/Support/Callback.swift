import Synchronization

/// A replaceable `@Sendable () -> Void` that any thread may call. The function is boxed: a bare
/// function type in a `Mutex` is reabstracted on every `withLock` that hands it out *and* written back
/// as `inout`, so each read wrapped it in two more thunks — after a day of accepts, one call walked
/// thousands of them (a profile showed half the CPU there; `OutboxWakeUpTests`).
final class Callback: Sendable {
    private final class Box: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    private let current = Mutex<Box?>(nil)

    init() {}

    /// Replaces the function (nil: calls do nothing).
    func set(_ function: (@Sendable () -> Void)?) {
        current.withLock { $0 = function.map(Box.init) }
    }

    /// Calls the function, if one is set (outside the lock).
    func call() {
        current.withLock { $0 }?.run()
    }
}
