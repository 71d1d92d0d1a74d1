import Synchronization

/// What the delivery worker and a transfer share about one send: whether the message has been handed
/// over whole (from then on the relay may have it, and stopping cannot take it back: the worker waits
/// for the answer), and whether the worker wants the send stopped before that — its lease ran out
/// unrenewed (another node may take the memo over and send it too), or the worker is stopping.
///
/// Times are this machine's monotonic milliseconds (`monotonicNanoseconds`), as the transfer measures them.
public final class SendProgress: Sendable, Equatable {
    private let handedOver = Atomic<Bool>(false)
    private let stopRequested = Atomic<Bool>(false)
    private let stopAt = Atomic<Int64>(.max)

    public init() {}

    /// The whole message has gone to the relay.
    public var isHandedOver: Bool { handedOver.load(ordering: .acquiring) }

    func markHandedOver() {
        handedOver.store(true, ordering: .releasing)
    }

    /// Stop before the message is handed over, now.
    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
    }

    /// Stop before the message is handed over, once `milliseconds` (monotonic) has passed.
    func stop(atMonotonicMilliseconds milliseconds: Int64) {
        stopAt.store(milliseconds, ordering: .releasing)
    }

    /// Whether a transfer not yet handed over should stop.
    var shouldStop: Bool {
        stopRequested.load(ordering: .acquiring)
            || Int64(monotonicNanoseconds() / 1_000_000) >= stopAt.load(ordering: .acquiring)
    }

    public static func == (lhs: SendProgress, rhs: SendProgress) -> Bool { lhs === rhs }
}
