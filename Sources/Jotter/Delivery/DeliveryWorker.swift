import Dispatch
import Synchronization

/// Delivers the outbox in the background: wakes on enqueue, claims due memos with a lease, sends each
/// through the transport on one of `slots` delivery slots, and records the outcome by id.
///
/// A serial control queue owns the scheduling state and a `DispatchSourceTimer` for the next due
/// retry; sends run on a concurrent queue, at most `slots` at a time, so a slow relay holds one slot.
///
/// When the relay cannot be reached at all (refused, no route, DNS), the worker stops walking the
/// backoff ladder: it holds further claims, probes the relay cheaply every few seconds, and makes
/// every waiting retry due the moment the relay answers.
///
/// `@unchecked Sendable`: the scheduling state (`inFlight`, `timer`, `stopped`, `offline`, …) is
/// touched only on `control`.
public final class DeliveryWorker: @unchecked Sendable {
    /// The worker's settings.
    public struct Configuration: Sendable {
        /// Deliveries in flight at once.
        public var slots: Int = 4
        /// How long a claim is held; a memo whose lease expires (a crashed send) is claimed again.
        public var leaseMilliseconds: Int64 = 120_000
        /// Backoff between attempts.
        public var retryPolicy = RetryPolicy()
        /// The sender of every message.
        public var from = MailAddress(name: "Jotter", address: "jotter@localhost")
        /// The recipient of every message (the user).
        public var to = MailAddress(address: "me@localhost")
        /// How long a delivered memo's subject stays in `/history`.
        public var subjectRetentionMilliseconds: Int64 = 7 * 24 * 3_600_000
        /// While the relay is unreachable, how often to probe it (instead of backing off).
        public var offlineProbeMilliseconds: Int64 = 3000

        /// The defaults.
        public init() {}
    }

    private let outbox: Outbox
    private let transport: any Transport
    private let configuration: Configuration
    private let clock: any WallClock
    private let logger: Logger
    private let control = DispatchQueue(label: "jotter.delivery.control")
    private let senders = DispatchQueue(label: "jotter.delivery.slots", attributes: .concurrent)
    private let idle = DispatchGroup()
    private var inFlight = 0
    private let scheduler: any Scheduler
    private var timer: (any SchedulerTimer)?
    private var stopped = true
    private var lastPurge: Int64 = 0
    /// Outcomes that could not be written (a full disk): written as soon as the disk takes writes
    /// again, before anything new is claimed.
    private var unrecorded: [Outcome] = []
    /// Memos claimed by this process whose outcome is not written yet (in flight, or in `unrecorded`).
    private let settling = Mutex<Set<String>>([])
    /// The relay was unreachable: no claims until a probe succeeds.
    private var offline = false
    private var probing = false
    private var lastProbe: Int64 = 0
    private let random = Mutex(SystemRandomNumberGenerator())
    private let wakePending = Atomic<Bool>(false)

    /// A worker for `outbox` delivering through `transport`.
    public init(outbox: Outbox, transport: any Transport, configuration: Configuration = Configuration(),
                clock: any WallClock = SystemClock(), scheduler: any Scheduler = DispatchScheduler(),
                logger: Logger = Logger(label: "delivery")) {
        self.outbox = outbox
        self.scheduler = scheduler
        self.transport = transport
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
    }

    /// Re-queues memos an earlier process left mid-send, then starts delivering.
    public func start() throws {
        let recovered = try outbox.recoverInterrupted()
        if recovered > 0 {
            logger.notice("re-queued interrupted deliveries", metadata: ["count": "\(recovered)"])
        }
        control.sync {
            stopped = false
            timer = scheduler.makeTimer(queue: control) { [unowned self] in self.pump() }
        }
        wake()
    }

    /// Something may be due: look now.
    public func wake() {
        // Many enqueues wake the worker at once: one pending pump serves them all.
        guard !wakePending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        control.async {
            self.wakePending.store(false, ordering: .releasing)
            self.pump()
        }
    }

    /// Stops claiming and waits up to `timeout` seconds for sends in flight (an unfinished one is
    /// simply retried after its lease, by the next process).
    public func stop(timeout: Double = 10) {
        control.sync {
            stopped = true
            timer?.cancel()
            timer = nil
        }
        _ = idle.wait(timeout: .now() + timeout)
        // One last try for outcomes the disk refused: otherwise the next start re-sends those memos.
        control.sync { _ = recordPendingOutcomes() }
    }

    private func pump() {
        dispatchPrecondition(condition: .onQueue(control))
        guard !stopped else { return }
        let now = clock.nowMilliseconds()
        if offline {
            probeIfDue(now: now)
            return
        }
        if !recordPendingOutcomes() {
            // Still not writable: claims would fail too; try again shortly.
            timer?.arm(afterMilliseconds: Self.unrecordedRetryMilliseconds)
            return
        }
        let free = configuration.slots - inFlight
        if free > 0 {
            do {
                for message in try outbox.claimDue(limit: free, leaseMilliseconds: configuration.leaseMilliseconds) {
                    // Its lease ran out while this process still sends it or holds its unwritten
                    // outcome: the lease is for a process that died, not for this one.
                    guard settling.withLock({ $0.insert(message.id).inserted }) else { continue }
                    inFlight += 1
                    idle.enter()
                    senders.async {
                        self.deliver(message)
                        self.control.async {
                            self.inFlight -= 1
                            self.idle.leave()
                            self.pump()
                        }
                    }
                }
            } catch {
                logger.error("claim failed", metadata: ["error.kind": Self.kind(of: error)])
            }
        }
        if now - lastPurge > 60_000 {
            lastPurge = now
            try? outbox.purgeSubjects(deliveredBefore: now - configuration.subjectRetentionMilliseconds)
        }
        scheduleTimer(now: now)
    }

    /// While offline: one probe at a time, at most every `offlineProbeMilliseconds`.
    private func probeIfDue(now: Int64) {
        dispatchPrecondition(condition: .onQueue(control))
        let dueAt = lastProbe + configuration.offlineProbeMilliseconds
        if !probing && now >= dueAt {
            probing = true
            lastProbe = now
            senders.async {
                let reachable = self.transport.probe()
                self.control.async {
                    self.probing = false
                    if reachable && self.offline {
                        self.offline = false
                        self.logger.notice("relay reachable again; flushing")
                        do {
                            try self.outbox.makeRetriesDue()
                        } catch {
                            self.logger.error("making retries due failed", metadata: ["error.kind": Self.kind(of: error)])
                        }
                    }
                    self.pump()
                }
            }
        }
        let wait = max(1, (probing ? now : lastProbe) + configuration.offlineProbeMilliseconds - now)
        timer?.arm(afterMilliseconds: wait)
    }

    private func goOffline() {
        control.async {
            guard !self.offline else { return }
            self.offline = true
            self.lastProbe = self.clock.nowMilliseconds()
            self.logger.warning("relay unreachable; probing", metadata: [
                "probe_every_ms": "\(self.configuration.offlineProbeMilliseconds)",
            ])
        }
    }

    /// Arms the timer for the next due memo (at most a minute away, so the purge also runs).
    private func scheduleTimer(now: Int64) {
        dispatchPrecondition(condition: .onQueue(control))
        var delay: Int64 = 60_000
        if let due = try? outbox.nextDueAt() {
            delay = min(delay, max(due - now, 0))
        }
        if inFlight >= configuration.slots && delay == 0 {
            delay = 60_000  // every slot busy: a finishing send pumps again
        }
        timer?.arm(afterMilliseconds: max(delay, 1))
    }

    private func deliver(_ claimed: ClaimedMessage) {
        let start = monotonicNanoseconds()
        guard let content = claimed.content else {
            logger.error("stored memo cannot be opened; held", metadata: ["message.id": claimed.id])
            record(claimed.id) { lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.hold(reason: "corrupt") }
            return
        }
        let message = MailMessage(id: claimed.id, date: claimed.createdAt, from: configuration.from,
                                  to: configuration.to, subject: content.subject, body: content.body,
                                  attempt: claimed.attempt)
        do {
            let receipt = try transport.send(message)
            let now = clock.nowMilliseconds()
            record(claimed.id, durable: !transport.repeatsHarmlessly) { lifecycle throws(DeliveryLifecycle.Refusal) in
                try lifecycle.delivered(now: now)
            }
            logger.info("delivered", metadata: [
                "message.id": claimed.id, "attempt": "\(claimed.attempt)",
                "duration_ms": Self.milliseconds(since: start), "already": "\(receipt.alreadyDelivered)",
            ])
        } catch {
            let now = clock.nowMilliseconds()
            let offline = error.isOffline
            if offline { goOffline() }
            let jitter = random.withLock { Double.random(in: 0..<1, using: &$0) }
            let probeAt = now + configuration.offlineProbeMilliseconds, policy = configuration.retryPolicy
            // Not the relay's answer but its absence: wait for a probe, keep the ladder where it is.
            let after = record(claimed.id, durable: false) { lifecycle throws(DeliveryLifecycle.Refusal) in
                if offline {
                    try lifecycle.relayUnreachable(error, retryAt: probeAt)
                } else {
                    try lifecycle.attemptFailed(error, now: now, policy: policy, random: jitter)
                }
            }
            logger.warning("delivery failed", metadata: [
                "message.id": claimed.id, "attempt": "\(claimed.attempt)", "error.kind": error.kind.rawValue,
                "status": after?.status.rawValue ?? "-",
                "retry_in_ms": after?.nextAttemptAt.map { "\($0 - now)" } ?? "-",
            ])
        }
    }

    /// A lifecycle step decided for a memo, to be persisted.
    private struct Outcome: Sendable {
        var id: String
        var durable: Bool
        var decide: @Sendable (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void
    }

    /// How often outcomes that could not be written are tried again.
    static let unrecordedRetryMilliseconds: Int64 = 1000

    /// Persists what the lifecycle decides for memo `id`. If that fails (a full disk), the outcome is
    /// kept and written as soon as the disk takes writes again, long before the lease runs out.
    @discardableResult
    private func record(_ id: String, durable: Bool = true,
                        _ decide: @escaping @Sendable (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void)
        -> DeliveryLifecycle? {
        do {
            defer { settling.withLock { _ = $0.remove(id) } }
            return try outbox.transition(id: id, durable: durable, decide)
        } catch is DeliveryLifecycle.Refusal {
            return nil
        } catch {
            settling.withLock { _ = $0.insert(id) }
            logger.error("recording delivery outcome failed; kept to retry", metadata: [
                "message.id": id, "error.kind": Self.kind(of: error),
            ])
            let outcome = Outcome(id: id, durable: durable, decide: decide)
            control.async {
                self.unrecorded.append(outcome)
                self.timer?.arm(afterMilliseconds: Self.unrecordedRetryMilliseconds)
            }
            return nil
        }
    }

    /// Writes kept outcomes, oldest first; false while the database still refuses writes.
    private func recordPendingOutcomes() -> Bool {
        dispatchPrecondition(condition: .onQueue(control))
        while let outcome = unrecorded.first {
            do {
                try outbox.transition(id: outcome.id, durable: outcome.durable, outcome.decide)
                logger.notice("delivery outcome recorded late", metadata: ["message.id": outcome.id])
            } catch is DeliveryLifecycle.Refusal {
                // The memo moved on meanwhile (re-queued at a restart, say): nothing left to record.
            } catch {
                return false
            }
            unrecorded.removeFirst()
            settling.withLock { _ = $0.remove(outcome.id) }
        }
        return true
    }

    static func kind(of error: any Error) -> String {
        (error as? DatabaseError)?.kind ?? "\(type(of: error))"
    }

    static func milliseconds(since start: UInt64) -> String {
        let elapsed = Double(monotonicNanoseconds() - start) / 1_000_000
        return String(Double(Int(elapsed * 100)) / 100)
    }
}
