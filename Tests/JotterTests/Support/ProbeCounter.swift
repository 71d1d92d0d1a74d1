import Synchronization
@testable import Jotter

/// A relay's real transport with its failed `probe()`s counted, so a test can wait for "several
/// failed probes" (the worker is offline and keeps looking) instead of sleeping for them.
final class ProbeCounter: Transport, Sendable {
    private let transport: any Transport
    private let failed = Atomic<Int>(0)

    /// Counts the failed probes of `transport` (sends pass straight through).
    init(_ transport: any Transport) {
        self.transport = transport
    }

    /// Probes that found the relay unreachable, so far.
    var failedProbes: Int { failed.load(ordering: .acquiring) }

    func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        try transport.send(message)
    }

    func probe() -> Bool {
        let reachable = transport.probe()
        if !reachable { failed.add(1, ordering: .releasing) }
        return reachable
    }

    var repeatsHarmlessly: Bool { transport.repeatsHarmlessly }
}
