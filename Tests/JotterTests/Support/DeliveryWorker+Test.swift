@testable import Jotter

extension DeliveryWorker {
    /// A started worker on manual time, delivering what `queue` (over `outbox`) holds through `transport`,
    /// woken by each memo `outbox` accepts; `configure` changes its configuration first.
    static func started(outbox: Outbox, queue: any DeliveryQueue, transport: any Transport, scheduler: ManualScheduler,
                        configure: (inout Configuration) -> Void = { _ in }) throws -> DeliveryWorker {
        var configuration = Configuration()
        configure(&configuration)
        let worker = DeliveryWorker(outbox: queue, transport: transport, configuration: configuration,
                                    clock: scheduler.clock, scheduler: scheduler)
        outbox.setOnAccepted { worker.wake() }
        try worker.start()
        return worker
    }
}
