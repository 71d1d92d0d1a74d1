import Synchronization

/// Easy handles for the delivery slots: a slot borrows one, uses it, gives it back, so each handle's
/// connection is reused by later deliveries and no handle is ever used by two threads at once.
///
/// `@unchecked Sendable`: `free` is only touched while holding `lock`. (A `Mutex<[EasyHandle]>` cannot
/// take a handle back: Swift 6.3 treats a non-`Sendable` value captured by the `withLock` closure as
/// task-isolated, even when it was passed in as `sending`.)
public final class EasyHandlePool: @unchecked Sendable {
    private let lock = Mutex(())
    private var free: [EasyHandle] = []

    /// An empty pool; handles are created on demand.
    public init() {}

    /// Lends a handle (reset for a new transfer) to `body`.
    public func withHandle<T>(_ body: (EasyHandle) throws(DeliveryFailure) -> T) throws(DeliveryFailure) -> T {
        let reused: EasyHandle? = lock.withLock { _ in free.popLast() }
        let handle: EasyHandle
        if let reused {
            handle = reused
        } else {
            do {
                handle = try EasyHandle()
            } catch {
                throw DeliveryFailure(.io, permanent: false)
            }
        }
        handle.reset()
        defer {
            handle.reset()
            lock.withLock { _ in free.append(handle) }
        }
        return try body(handle)
    }
}
