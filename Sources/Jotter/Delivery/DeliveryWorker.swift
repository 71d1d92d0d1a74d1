import Dispatch
import Synchronization

/// Delivers the outbox in the background: wakes on enqueue, claims due memos with a lease, sends each
/// through the transport on one of `slots` delivery slots, and records the outcome by id.
///
/// A serial control queue owns the scheduling state and a `DispatchSourceTimer` for the next due
/// retry; each send runs on a thread of its own (`SlotThread`, at a lower CPU priority than requests),
/// at most `slots` at a time, so a slow relay holds one slot and the others still send.
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
        /// Every message is a service's, sent to its recipient's own inbox (`MailMessage.onBehalfOfRecipient`):
        /// the Jotter relay's.
        public var onBehalfOfRecipient = false
        /// How long a delivered memo's subject stays in `/history`.
        public var subjectRetentionMilliseconds: Int64 = 7 * 24 * 3_600_000
        /// While the relay is unreachable, how often to probe it (instead of backing off).
        public var offlineProbeMilliseconds: Int64 = 3000
        /// While the relay refuses (a wrong password, a certificate that does not verify), how often
        /// to try it again with one held memo.
        public var refusedRetestMilliseconds: Int64 = 15 * 60_000
        /// A message the server took whole without answering (`no_reply`) may have arrived: its one more
        /// try waits this long (the server may still be at it), above the backoff cap if need be.
        public var noReplyRetryMilliseconds: Int64 = 60_000
        /// A memo not delivered this long after it was accepted is stuck: logged once, and shown.
        public var warnAfterMilliseconds: Int64 = 3_600_000
        /// For a transport that delivers in batches: when memos come in a stream (one arrives while the
        /// transport is still sending the batch before), the next batch waits this long after it for
        /// company, so that they share one batch's syncs instead of each paying its own. A memo that
        /// finds the worker idle goes at once, and so does one that arrives during the bookkeeping after
        /// a send (someone sending the next memo as the last arrived). 250 ms: each batch ends in two
        /// flushes of the disk (`syncfs`, then the folder's fsync) that the accepts of a stream wait
        /// behind, so fewer, larger batches leave one client's stream of accepts faster. Against 100 ms,
        /// alternating 5-second runs of one client posting (Maildirs of the same age): 250 ms won 4 of 4,
        /// 500 ms 9 of 12 (+3–11% in the medians of two sets); 250 and 1,000 ms were alike. (50 → 100 ms
        /// had won 4 of 4.) A streamed memo waits at most 250 ms for its batch; a memo on its own goes at
        /// once.
        public var batchWindowMilliseconds: Int64 = 250

        /// The defaults.
        public init() {}
    }

    private let outbox: any DeliveryQueue
    private let transport: any Transport
    private let configuration: Configuration
    private let clock: any WallClock
    private let logger: Logger
    private let control = DispatchQueue(label: "jotter.delivery.control")
    /// Probes, and sends when no thread of their own could be started.
    private let senders = DispatchQueue(label: "jotter.delivery.slots", attributes: .concurrent)
    private let idle = DispatchGroup()
    private var inFlight = 0
    private let scheduler: any Scheduler
    private var timer: (any SchedulerTimer)?
    private var stopped = true
    // The worker's own intervals (when it last purged and probed, when to retest a refusing relay, when a
    // batch began gathering) are on the monotonic clock: a wall clock set back an hour must not stop the
    // probes of a relay that is down for that hour. What is stored (next attempts, leases) is wall time.
    /// When subjects were last purged (monotonic; nil: not yet).
    private var lastPurge: Int64?
    /// The last memo accepted before this worker started (its `seq`; every memo until `start` has read it):
    /// one at or below it was accepted by an earlier process, whose unsynced record of a delivery a power
    /// loss may have undone. Not the wall time of the start: a clock set back after it (NTP stepping a
    /// machine without a real-time clock) made this process's own memos look earlier, each batch then
    /// reading `cur/`, and a clock that had been ahead made an earlier process's look like this one's.
    /// Read by the sending threads, hence atomic.
    private let acceptedBeforeStart = Atomic<Int64>(.max)
    /// When memos held for a relay's refusal were last released because this node's relay accepts
    /// (monotonic; shared queues only).
    private var lastSharedRelease: Int64?
    /// The last claim found nothing it could take.
    private var claimedNothing = false
    /// Claims that failed in a row (a full disk, a read-only or damaged database): each waits longer.
    private var failedClaims = 0
    /// Outcomes that could not be written (a full disk): written as soon as the disk takes writes
    /// again, before anything new is claimed.
    private var unrecorded: [Outcome] = []
    /// Memos claimed by this process whose outcome is not written yet (in flight, or in `unrecorded`).
    private let settling = Mutex<Set<String>>([])
    /// The relay was unreachable: no claims until a probe succeeds.
    private var offline = false
    private var probing = false
    /// When the last probe started (monotonic).
    private var lastProbe: Int64 = 0
    /// The relay as seen from here (read by `/healthz`, `/history`).
    private let relay = Mutex<RelayState>(.ok)
    /// While refused: when to try the relay again with one memo (monotonic; nil while that try is in flight).
    private var retestAt: Int64?
    /// The relay has accepted a memo since start (or since it last refused): until then one memo at a
    /// time, so a wrong password costs one failed login, not one per slot.
    private var relayProven = false
    private let random = Mutex(SystemRandomNumberGenerator())
    /// Memos this process is sending, with their attempt numbers (whose leases it renews).
    private var sending: [String: Int] = [:]
    /// Each memo in flight's `SendProgress` (a transfer asked to stop before handing a memo over when its
    /// lease is lost or the worker stops).
    private var progresses: [String: SendProgress] = [:]
    /// Renews the leases of `sending` while other processes share the queue (`leasesAreShared`).
    private var renewal: (any SchedulerTimer)?
    private let wakePending = Atomic<Bool>(false)
    /// Whether a wake-up needs a pump (`Coverage`): set by `control` at the end of each pump, read by
    /// `wake()` on the committing thread, so that a stream of accepts does not wake the control queue
    /// (and re-arm its timer) once per memo when a pump is coming anyway.
    private let coverage = Atomic<Int>(Coverage.idle.rawValue)
    /// When the first memo arrived while every slot was busy (monotonic; 0: none since the last pump).
    private let arrivedWhileBusy = Atomic<Int64>(0)
    /// A transport's `send` is running (not the bookkeeping after it). Exact for one slot; with several it
    /// is the latest send's state, which does not matter there: only a batching transport (one slot)
    /// waits a window for company.
    private let transportSending = Atomic<Bool>(false)
    /// When a wake-up first found the worker gathering a batch (monotonic; nil: not gathering).
    private var gatheringSince: Int64?
    /// The last claim filled every batch: memos are waiting, no need to wait for more.
    private var backlogged = false

    /// A worker for `outbox` delivering through `transport`.
    public init(outbox: any DeliveryQueue, transport: any Transport, configuration: Configuration = Configuration(),
                clock: any WallClock = SystemClock(), scheduler: any Scheduler = DispatchScheduler(),
                logger: Logger = Logger(label: "delivery")) {
        self.outbox = outbox
        self.scheduler = scheduler
        self.transport = transport
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
    }

    /// How the relay is doing.
    public var relayState: RelayState {
        let state = relay.withLock { $0 }
        guard state == .ok, let since = heldAtTheRelay.withLock({ $0 }) else { return state }
        return .held(since: since)
    }

    /// Since when the Jotter relay has said it holds memos it cannot mail (`relay_held`); nil once one
    /// is delivered. Reported as `RelayState.held`, nothing more.
    private let heldAtTheRelay = Mutex<Int64?>(nil)

    /// Re-queues memos an earlier process left mid-send, then starts delivering. Memos held because
    /// the relay refused before (and the configuration did not change since: else they were released)
    /// keep the relay refused, tested again on the slow schedule or a Retry — not at every start, so
    /// a service restarting in a loop does not become a stream of failed logins.
    public func start() throws {
        try transport.prepare()  // the Maildir's folders, say: a path that cannot be used stops the start
        // Not despite damage: what this reads, every claim reads too; a server that cannot claim must not
        // start and answer 204 for memos it cannot deliver.
        let recovered = try outbox.recoverInterrupted()
        if recovered > 0 {
            logger.notice("re-queued interrupted deliveries", metadata: ["count": "\(recovered)"])
        }
        let lastAccepted = try outbox.lastAccepted()
        // Shared with other nodes, the held memos may be another node's refusal (its own configuration):
        // this node finds out about its own relay by trying it. A damaged page under the memos given up on
        // (which no claim reads) does not stop the start: new memos still go, and /healthz says what is wrong.
        let refusedBefore = outbox.leasesAreShared
            ? nil : try outbox.despiteDamage { try $0.heldReason(among: DeliveryFailure.relayRefusalKinds) } ?? nil
        control.sync {
            if let refusedBefore {
                relay.withLock { $0 = .refused(kind: refusedBefore, since: clock.nowMilliseconds()) }
                retestAt = clock.monotonicMilliseconds() + configuration.refusedRetestMilliseconds
            }
            acceptedBeforeStart.store(lastAccepted, ordering: .releasing)
            stopped = false
            timer = scheduler.makeTimer(queue: control) { [unowned self] in self.pump() }
            if outbox.leasesAreShared {
                renewal = scheduler.makeTimer(queue: control) { [unowned self] in self.renewLeases() }
                renewal?.arm(afterMilliseconds: renewalMilliseconds)
            }
        }
        wake()
    }

    /// What a new memo's wake-up needs, as the last pump left it.
    private enum Coverage: Int {
        /// Nothing is coming: pump.
        case idle
        /// Every slot is sending, and a finishing send pumps: only note that memos came meanwhile.
        case slotsBusy
        /// A pump is already armed (a batch's window, an offline probe) and will claim what is due.
        case pumpArmed
    }

    /// Something may be due: look now.
    ///
    /// A memo committed before this call is seen by any pump that starts after it, and every pump
    /// starts by clearing `coverage`: so when `coverage` says a pump is coming, that pump claims it.
    public func wake() {
        switch Coverage(rawValue: coverage.load(ordering: .acquiring)) {
        case .slotsBusy:
            // Only a memo that came while the transport was still sending makes a stream; one that came
            // during the bookkeeping after it is someone sending the next memo as the last arrived.
            if transportSending.load(ordering: .relaxed) {
                _ = arrivedWhileBusy.compareExchange(expected: 0, desired: clock.monotonicMilliseconds(),
                                                     ordering: .relaxed)
            }
            return
        case .pumpArmed:
            return
        case .idle, nil:
            break
        }
        // Many enqueues wake the worker at once: one pending pump serves them all.
        guard !wakePending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        control.async {
            self.wakePending.store(false, ordering: .releasing)
            // A stream (this memo came while the transport is sending others): gather the next batch.
            if self.gatheringSince == nil, self.inFlight > 0, self.transportSending.load(ordering: .relaxed) {
                self.gatheringSince = self.clock.monotonicMilliseconds()
            }
            self.pump()
        }
    }

    /// Tries a refusing relay again now (a person asked for a Retry); otherwise the same as `wake`.
    public func retestRelay() {
        control.async {
            if case .refused = self.relayState, self.retestAt != nil || self.inFlight == 0 {
                self.retestAt = self.clock.monotonicMilliseconds()
            }
            self.pump()
        }
    }

    /// False from `start` until `stop` begins.
    var isStopped: Bool { control.sync { stopped } }

    /// Stops claiming, stops sends that have not handed their memo over yet (SMTP: before the end of
    /// DATA), and waits up to `timeout` seconds for sends in flight — and up to `handedOverTimeout` for
    /// one whose memo the relay already has (the reply to the end of DATA can take a busy server's spam
    /// checks): given up on, it would be sent again by the next process. (An unfinished send is simply
    /// retried, after its lease, by the next process.)
    public func stop(timeout: Double = 10, handedOverTimeout: Double = 60) {
        control.sync {
            stopped = true
            timer?.cancel()
            timer = nil
            for progress in progresses.values { progress.requestStop() }
        }
        defer {
            control.sync {
                renewal?.cancel()
                renewal = nil
            }
        }
        if idle.wait(timeout: .now() + timeout) == .timedOut {
            let handedOver = control.sync { Set(progresses.values.filter(\.isHandedOver).map(ObjectIdentifier.init)).count }
            if handedOver > 0 {
                logger.notice("stopping: waiting for the relay's answer to memos it has", metadata: ["count": "\(handedOver)"])
                if idle.wait(timeout: .now() + max(handedOverTimeout - timeout, 0)) == .timedOut {
                    logger.warning("stopped without the relay's answer; those memos are sent again at the next start",
                                   metadata: ["count": "\(handedOver)"])
                }
            }
        }
        // One last try for outcomes the disk refused: otherwise the next start re-sends those memos.
        control.sync { _ = recordPendingOutcomes() }
    }

    private func pump() {
        dispatchPrecondition(condition: .onQueue(control))
        coverage.store(Coverage.idle.rawValue, ordering: .releasing)
        guard !stopped else { return }
        let now = clock.nowMilliseconds(), tick = clock.monotonicMilliseconds()
        let arrived = arrivedWhileBusy.exchange(0, ordering: .relaxed)
        if arrived != 0, gatheringSince == nil { gatheringSince = arrived }  // a stream: gather the next batch
        // Outcomes the disk refused go first, offline too: a memo the relay took before it went away must
        // not wait for the relay's return to be recorded (a restart meanwhile would send it again).
        let recorded = recordPendingOutcomes()
        if offline {
            coverage.store(Coverage.pumpArmed.rawValue, ordering: .releasing)
            probeIfDue(tick: tick, soonest: recorded ? nil : Self.unrecordedRetryMilliseconds)
            return
        }
        if !recorded {
            // Still not writable: claims would fail too; try again shortly.
            timer?.arm(afterMilliseconds: Self.unrecordedRetryMilliseconds)
            return
        }
        if case .refused(let kind, _, _) = relayState {
            pumpWhileRefused(kind: kind, tick: tick)
            return
        }
        let batch = batchSize, free = slotCount - inFlight
        if free > 0, batch > 1, !backlogged, let since = gatheringSince {
            // Something is due, and company may still come: wait for the window's end.
            let left = since + configuration.batchWindowMilliseconds - tick
            if left > 0, let due = try? outbox.nextDueAt(), due <= now {
                coverage.store(Coverage.pumpArmed.rawValue, ordering: .releasing)
                timer?.arm(afterMilliseconds: left)
                return
            }
        }
        if free > 0 {
            gatheringSince = nil
            do {
                let limit = free * batch, maxBytes = batch > 1 ? transport.batchByteLimit : .max
                let claimed = try outbox.claimDue(limit: limit, maxBytes: maxBytes,
                                                  leaseMilliseconds: configuration.leaseMilliseconds,
                                                  excluding: settling.withLock { $0 })
                // Full by count: more is waiting, the next batch goes without a window. (A batch cut by
                // its bytes may wait one window for the next, if more memos arrived meanwhile.)
                backlogged = batch > 1 && claimed.count == limit
                claimedNothing = claimed.isEmpty
                for start in stride(from: 0, to: claimed.count, by: batch) {
                    send(Array(claimed[start..<min(start + batch, claimed.count)]))
                }
                failedClaims = 0
                outbox.noteDeliveryWrite(failedWith: nil)
            } catch {
                // The database refuses (full, read-only, damaged): look again later, not at once — the
                // memo that was due still is, and a timer of 1 ms made a loop of failures and log lines.
                // (A memo accepted meanwhile still wakes the worker: the disk took a write again.)
                let delay = Self.claimRetryMilliseconds(afterFailures: failedClaims)
                failedClaims += 1
                logger.error("claim failed", metadata: ["error.kind": Self.kind(of: error), "retry_ms": "\(delay)"])
                // A damaged page under the waiting memos, or a disk that refuses: /healthz says so, not only
                // this log.
                outbox.noteDamage(error)
                outbox.noteDeliveryWrite(failedWith: error)
                timer?.arm(afterMilliseconds: delay)
                return
            }
        }
        // Once a minute, not on every pump (each finished delivery pumps): housekeeping and warnings.
        if lastPurge.map({ tick - $0 > 60_000 }) ?? true {
            lastPurge = tick
            try? outbox.purgeSubjects(deliveredBefore: now - configuration.subjectRetentionMilliseconds)
            warnAboutStuckMemos(now: now)
        }
        // Before the timer: whoever sees the timer armed sees this too.
        if inFlight >= slotCount { coverage.store(Coverage.slotsBusy.rawValue, ordering: .releasing) }
        scheduleTimer(now: now)
    }

    /// How many memos one send takes: a batching transport's limit once the relay has accepted a memo.
    private var batchSize: Int {
        dispatchPrecondition(condition: .onQueue(control))
        return relayProven ? transport.batchLimit : 1
    }

    /// How many sends run at once: one until the relay has accepted a memo (a wrong password then
    /// costs one failed login, not one per slot), and one for a transport that delivers in batches
    /// (memos that arrive while a batch is on its way go out together in the next, sharing its
    /// fsyncs); otherwise `slots`.
    private var slotCount: Int {
        dispatchPrecondition(condition: .onQueue(control))
        return relayProven && transport.batchLimit == 1 ? configuration.slots : 1
    }

    /// Memos already warned about (once per memo and process).
    private var warned = Set<String>()

    /// Logs, once per memo, each memo that has waited longer than `warnAfterMilliseconds` — in the log,
    /// not by mail: the channel that would carry a warning is the one failing.
    private func warnAboutStuckMemos(now: Int64) {
        dispatchPrecondition(condition: .onQueue(control))
        guard let stuck = try? outbox.stuck(acceptedBefore: now - configuration.warnAfterMilliseconds,
                                                    limit: 100) else { return }
        for memo in stuck where warned.insert(memo.id).inserted {
            logger.warning("memo not delivered in time", metadata: [
                "message.id": memo.id, "status": memo.status.rawValue,
                "waiting_s": "\((now - memo.createdAt) / 1000)", "last_error": memo.lastError ?? "-",
            ])
        }
        if warned.count > 10_000 { warned.removeAll() }
    }

    /// Hands claimed memos to a delivery slot, to be sent together.
    private func send(_ claimed: [ClaimedMessage]) {
        dispatchPrecondition(condition: .onQueue(control))
        // A memo whose lease ran out while this process still sends it or holds its unwritten outcome:
        // the lease is for a process that died, not for this one.
        let batch = settling.withLock { settling in claimed.filter { settling.insert($0.id).inserted } }
        guard !batch.isEmpty else { return }
        inFlight += 1
        let progress = SendProgress()
        if outbox.leasesAreShared { progress.stop(atMonotonicMilliseconds: leaseStopAt()) }
        for message in batch {
            sending[message.id] = message.attempt
            progresses[message.id] = progress
        }
        idle.enter()
        let slot: @Sendable () -> Void = {
            self.deliver(batch, progress: progress)
            self.control.async {
                self.inFlight -= 1
                for message in batch {
                    self.sending[message.id] = nil
                    self.progresses[message.id] = nil
                }
                self.idle.leave()
                if case .refused = self.relayState, self.retestAt == nil {
                    // The test was inconclusive (a timeout, say): the relay stays refused for now.
                    self.retestAt = self.clock.monotonicMilliseconds() + self.configuration.refusedRetestMilliseconds
                }
                self.pump()
            }
        }
        // A thread per send in flight (see SlotThread; a Dispatch thread only if none can be started), at
        // a lower CPU priority than the request threads: delivery is background work, and on a busy
        // machine it must not delay the next accept (see `deliveryNiceness`).
        if !SlotThread.start(name: "jotter-deliver", niceness: Self.deliveryNiceness, slot) {
            senders.async(execute: slot)
        }
    }

    /// How much nicer the delivery threads are than the request threads (the process's own value plus
    /// this, up to 19; 10 for a server started at the usual 0). A Maildir batch takes tens of
    /// milliseconds of CPU; at the same priority, the accepts of a client posting meanwhile waited for
    /// it (one client, 2 CPUs, alternating runs: p90 0.80–0.84 ms and p99 3.8–4.3 ms, against 0.58–0.85
    /// and 3.1–3.9 ms, and a rate up to 10% higher). At 10 a busy machine still gives delivery about a
    /// tenth of a CPU's time against a request thread, so it keeps going while accepts flood in.
    static let deliveryNiceness: Int32 = 10

    /// How often leases are renewed: a third of a lease, so two renewals may fail before it runs out.
    private var renewalMilliseconds: Int64 { max(configuration.leaseMilliseconds / 3, 1) }

    /// When a send whose lease was claimed or renewed now stops, unless renewed again, if it has not
    /// handed its memo over yet (monotonic): a sixth of the lease before it runs out, so that another
    /// node, whose clock may be a little ahead, cannot take the memo over while this one still sends it.
    private func leaseStopAt() -> Int64 {
        let lease = configuration.leaseMilliseconds
        return Int64(monotonicNanoseconds() / 1_000_000) + lease - lease / 6
    }

    /// Extends the lease of every memo this process is still sending, so another node sharing the
    /// queue does not take over a send that is slow but alive (and deliver it a second time).
    private func renewLeases() {
        dispatchPrecondition(condition: .onQueue(control))
        guard renewal != nil else { return }  // (renewed while stopping too: a send it waits for keeps its memo)
        let now = clock.nowMilliseconds(), lease = configuration.leaseMilliseconds
        for (id, attempt) in sending {
            do {
                let stopAt = leaseStopAt()
                try outbox.transition(id: id, durable: false) { lifecycle throws(DeliveryLifecycle.Refusal) in
                    try lifecycle.renewLease(attempt: attempt, now: now, leaseMilliseconds: lease)
                }
                if outbox.leasesAreShared { progresses[id]?.stop(atMonotonicMilliseconds: stopAt) }
            } catch is DeliveryLifecycle.Refusal {
                sending[id] = nil
                // This attempt's own outcome is written (its slot has not cleared `sending` yet): nothing
                // was lost. (Saying "another node took it over" here suggested a memo sent twice.)
                guard settling.withLock({ $0.contains(id) }) else { continue }
                // Another node's now: a send not handed over yet stops (that node sends it), and this
                // attempt's outcome, whatever it is, is not recorded over the other's.
                if progresses[id]?.isHandedOver == false { progresses[id]?.requestStop() }
                logger.warning("lease lost: another node took the memo over", metadata: ["message.id": id])
            } catch {
                // Unconfirmed: the send stops when the lease it has runs out (`leaseStopAt`).
                logger.error("renewing a lease failed", metadata: ["message.id": id, "error.kind": Self.kind(of: error)])
            }
        }
        renewal?.arm(afterMilliseconds: renewalMilliseconds)
    }

    /// While the relay refuses: new and waiting memos are held with its reason; when a test is due,
    /// one memo (one a person retried, else the oldest held) is sent as the test.
    private func pumpWhileRefused(kind: String, tick: Int64) {
        dispatchPrecondition(condition: .onQueue(control))
        if inFlight == 0, let at = retestAt, tick >= at {
            retestAt = nil
            do {
                let held = settling.withLock { $0 }
                var test = try outbox.claimDue(limit: 1, maxBytes: .max, leaseMilliseconds: configuration.leaseMilliseconds,
                                               excluding: held)
                if test.isEmpty, try outbox.releaseHeld(reasons: DeliveryFailure.relayRefusalKinds, limit: 1) > 0 {
                    test = try outbox.claimDue(limit: 1, maxBytes: .max, leaseMilliseconds: configuration.leaseMilliseconds,
                                               excluding: held)
                }
                outbox.noteDeliveryWrite(failedWith: nil)
                if let message = test.first {
                    logger.notice("testing the refusing relay with one memo", metadata: ["message.id": message.id])
                    send([message])
                } else {
                    retestAt = tick + configuration.refusedRetestMilliseconds
                }
            } catch {
                outbox.noteDeliveryWrite(failedWith: error)
                logger.error("relay test failed to start", metadata: ["error.kind": Self.kind(of: error)])
                retestAt = tick + Self.unrecordedRetryMilliseconds
            }
        } else if inFlight == 0 && !outbox.leasesAreShared {
            // (A queue shared with other nodes is left alone: they may well be able to deliver it.)
            do {
                let held = try outbox.holdWaiting(reason: kind)
                outbox.noteDeliveryWrite(failedWith: nil)
                if held > 0 { logger.notice("memos held while the relay refuses", metadata: ["count": "\(held)", "reason": kind]) }
            } catch {
                outbox.noteDeliveryWrite(failedWith: error)
                logger.error("holding memos failed", metadata: ["error.kind": Self.kind(of: error)])
            }
        }
        timer?.arm(afterMilliseconds: retestAt.map { min(max($0 - tick, 1), 60_000) } ?? 60_000)
    }

    /// A memo failed because the relay refuses (auth, tls, configuration): stop, hold the rest.
    private func relayRefused(kind: String, hint: String?) {
        control.async {
            if case .refused = self.relayState {} else {
                // The hint is a certificate's names: public, never a secret. Nodes sharing a queue hold
                // nothing: another node's relay may accept (see `attemptFailed`).
                self.logger.warning(self.outbox.leasesAreShared
                                    ? "relay refuses; memos go back to the shared queue for the other nodes"
                                    : "relay refuses; memos held until it is fixed or retried", metadata: [
                    "reason": kind, "retest_every_ms": "\(self.configuration.refusedRetestMilliseconds)",
                    "hint": hint ?? "",
                ])
            }
            self.relay.withLock { $0 = .refused(kind: kind, since: self.clock.nowMilliseconds(), hint: hint) }
            self.relayProven = false
            self.retestAt = self.clock.monotonicMilliseconds() + self.configuration.refusedRetestMilliseconds
            self.pump()
        }
    }

    /// A memo went through: a refusing relay accepts again, so everything it held goes out. (Nodes sharing
    /// a queue hold nothing for a refusal, but earlier versions did: while this node's relay accepts, such
    /// memos are released, once a minute at most.)
    private func relayAccepts() {
        control.async {
            self.relayProven = true
            guard case .refused = self.relayState else {
                let tick = self.clock.monotonicMilliseconds()
                if self.outbox.leasesAreShared, self.lastSharedRelease.map({ tick - $0 >= 60_000 }) ?? true {
                    self.lastSharedRelease = tick
                    if let released = try? self.outbox.releaseHeld(reasons: DeliveryFailure.relayRefusalKinds),
                       released > 0 {
                        self.logger.notice("this node's relay accepts; memos another node's refusal held released",
                                           metadata: ["count": "\(released)"])
                        self.pump()
                    }
                }
                return
            }
            self.relay.withLock { $0 = .ok }
            self.retestAt = nil
            do {
                let released = try self.outbox.releaseHeld(reasons: DeliveryFailure.relayRefusalKinds)
                self.logger.notice("relay accepts again; held memos released", metadata: ["count": "\(released)"])
            } catch {
                self.logger.error("releasing held memos failed", metadata: ["error.kind": Self.kind(of: error)])
            }
            self.pump()
        }
    }

    /// While offline: probes the unreachable relay when a probe is due (one at a time, at most every
    /// `offlineProbeMilliseconds`), and arms the timer for the next (or within `soonest` milliseconds, when
    /// something else must be tried again before then).
    private func probeIfDue(tick: Int64, soonest: Int64? = nil) {
        dispatchPrecondition(condition: .onQueue(control))
        let dueAt = lastProbe + configuration.offlineProbeMilliseconds
        if !probing && tick >= dueAt {
            probing = true
            lastProbe = tick
            senders.async {
                let reachable = self.transport.probe()
                self.control.async {
                    self.probing = false
                    if reachable && self.offline {
                        self.offline = false
                        self.relay.withLock { $0 = .ok }
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
        let wait = max(1, (probing ? tick : lastProbe) + configuration.offlineProbeMilliseconds - tick)
        timer?.arm(afterMilliseconds: min(wait, soonest ?? wait))
    }

    private func goOffline() {
        control.async {
            guard !self.offline else { return }
            self.offline = true
            self.lastProbe = self.clock.monotonicMilliseconds()
            self.relay.withLock { $0 = .offline(since: self.clock.nowMilliseconds()) }
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
        if inFlight >= slotCount && delay == 0 {
            delay = 60_000  // every slot busy: a finishing send pumps again
        } else if delay == 0 && claimedNothing {
            // Due, yet nothing to claim: the lease of a send this process is still making ran out (a long
            // `?timeout=`; claims skip this process's own sends). Look again in a second, not in a millisecond.
            delay = 1000
        }
        timer?.arm(afterMilliseconds: max(delay, 1))
    }

    /// Sends `batch` (one memo, or several for a transport that delivers in batches) and records
    /// each memo's outcome: the deliveries together, in one transaction.
    private func deliver(_ batch: [ClaimedMessage], progress: SendProgress) {
        let start = monotonicNanoseconds()
        var ready: [(claimed: ClaimedMessage, message: MailMessage)] = []
        for claimed in batch {
            guard let content = claimed.content else {
                logger.error("stored memo cannot be opened; held", metadata: ["message.id": claimed.id])
                record(claimed.id) { lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.hold(reason: "corrupt") }
                continue
            }
            // A relay's message carries its own recipient; a composer's memo goes to the configured one.
            let to = content.recipient.map { MailAddress(address: $0) } ?? configuration.to
            // Dated when it was written, if its writer said so (a relay's message, accepted first by its
            // composer) — never later than it came here, whatever the writer's clock says.
            let date = min(content.writtenAt ?? claimed.createdAt, claimed.createdAt)
            let acceptedEarlier = claimed.seq <= acceptedBeforeStart.load(ordering: .acquiring)
            var message = MailMessage(id: claimed.id, date: date, from: configuration.from, to: to,
                                      subject: content.subject, body: content.body, attempt: claimed.attempt,
                                      mayHaveBeenDelivered: claimed.attempt > 1 || acceptedEarlier)
            message.onBehalfOfRecipient = configuration.onBehalfOfRecipient
            message.progress = progress
            ready.append((claimed, message))
        }
        guard !ready.isEmpty else { return }
        transportSending.store(true, ordering: .relaxed)
        let outcomes = ready.count == 1
            ? [Result { () throws(DeliveryFailure) in try transport.send(ready[0].message) }]
            : transport.send(batch: ready.map(\.message))
        transportSending.store(false, ordering: .relaxed)
        var delivered: [(claimed: ClaimedMessage, receipt: DeliveryReceipt)] = []
        for (memo, outcome) in zip(ready, outcomes) {
            switch outcome {
            case .success(let receipt): delivered.append((memo.claimed, receipt))
            case .failure(let failure): attemptFailed(memo.claimed, failure)
            }
        }
        guard !delivered.isEmpty else { return }
        let now = clock.nowMilliseconds()
        if outbox.leasesAreShared {
            // Each only if its attempt is still the one under way: another node may have taken it over.
            for (claimed, _) in delivered {
                record(claimed.id, durable: !transport.repeatsHarmlessly) { lifecycle throws(DeliveryLifecycle.Refusal) in
                    try lifecycle.expectAttempt(claimed.attempt)
                    try lifecycle.delivered(now: now)
                }
            }
        } else {
            record(delivered.map(\.claimed.id), durable: !transport.repeatsHarmlessly) { lifecycle throws(DeliveryLifecycle.Refusal) in
                try lifecycle.delivered(now: now)
            }
        }
        heldAtTheRelay.withLock { $0 = nil }
        relayAccepts()
        let duration = Self.milliseconds(since: start)
        for (claimed, receipt) in delivered {
            logger.info("delivered", metadata: [
                "message.id": claimed.id, "attempt": "\(claimed.attempt)", "duration_ms": duration,
                "already": "\(receipt.alreadyDelivered)",
            ])
        }
    }

    /// Records a failed attempt as the failure's kind decides: the relay's refusal holds the memo,
    /// an unreachable relay waits for a probe, anything else climbs the backoff ladder.
    private func attemptFailed(_ claimed: ClaimedMessage, _ error: DeliveryFailure) {
        let now = clock.nowMilliseconds()
        let offline = error.isOffline
        if offline { goOffline() }
        // Held at the relay until the relay says otherwise of a memo: delivered (above), or its verdict that
        // it gave one up (permanent). Not a timeout, a 5xx, a 429, a local error: they say nothing of it.
        if error.kind == .relayHeld { heldAtTheRelay.withLock { $0 = $0 ?? now } }
        else if error.isPermanent && !offline { heldAtTheRelay.withLock { $0 = nil } }
        let jitter = random.withLock { Double.random(in: 0..<1, using: &$0) }
        let probeAt = now + configuration.offlineProbeMilliseconds
        var capped = configuration.retryPolicy
        if error.isAtTheRelay { capped.capMilliseconds = min(capped.capMilliseconds, Self.relayCheckCapMilliseconds) }
        var waited = error
        if error.kind == .noReply {
            let wait = configuration.noReplyRetryMilliseconds
            waited.retryAfterMilliseconds = max(error.retryAfterMilliseconds ?? 0, wait)
            capped.capMilliseconds = max(capped.capMilliseconds, wait)
        }
        let policy = capped, error = waited
        // Not the relay's answer but its absence: wait for a probe, keep the ladder where it is.
        let refused = error.refusesTheRelay, shared = outbox.leasesAreShared
        if refused { relayRefused(kind: error.kind.rawValue, hint: error.hint) }
        let after = record(claimed.id, durable: false) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.expectAttempt(claimed.attempt)
            if refused && shared {
                // This node's relay refuses; another node's may not: back in the shared queue, for them.
                try lifecycle.relayUnreachable(error, retryAt: now + Self.refusedSharedRetryMilliseconds)
            } else if refused {
                // The relay's failure, not this memo's: it waits, held, with the others.
                try lifecycle.hold(reason: error.kind.rawValue)
            } else if offline {
                try lifecycle.relayUnreachable(error, retryAt: probeAt)
            } else {
                try lifecycle.attemptFailed(error, now: now, policy: policy, random: jitter)
            }
        }
        // Not a failure: the Jotter relay has the memo and has not delivered it yet. Asked about again on
        // the ladder, but at least every five minutes: the relay may deliver it any moment.
        let pending = error.isAtTheRelay
        logger.log(level: pending ? .info : .warning,
                   pending ? "handed to the relay, not delivered there yet" : "delivery failed", metadata: [
            "message.id": claimed.id, "attempt": "\(claimed.attempt)", "error.kind": error.kind.rawValue,
            "status": after?.status.rawValue ?? "-",
            "retry_in_ms": after?.nextAttemptAt.map { "\($0 - now)" } ?? "-",
        ])
    }

    /// When a memo that met this node's refusing relay is due again for the other nodes sharing the queue.
    static let refusedSharedRetryMilliseconds: Int64 = 60_000

    /// The longest wait between two questions about a memo a Jotter relay has (`isAtTheRelay`).
    static let relayCheckCapMilliseconds: Int64 = 300_000

    /// A lifecycle step decided for a memo, to be persisted.
    private struct Outcome: Sendable {
        var id: String
        var durable: Bool
        var decide: @Sendable (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void
    }

    /// How often outcomes that could not be written are tried again.
    static let unrecordedRetryMilliseconds: Int64 = 1000

    /// How long after `failures` failed claims in a row the next is tried: 1 s, doubling to a minute.
    static func claimRetryMilliseconds(afterFailures failures: Int) -> Int64 {
        min(unrecordedRetryMilliseconds << min(failures, 6), 60_000)
    }

    /// Persists what the lifecycle decides for memo `id`. If that fails (a full disk), the outcome is
    /// kept and written as soon as the disk takes writes again, long before the lease runs out.
    @discardableResult
    private func record(_ id: String, durable: Bool = true,
                        _ decide: @escaping @Sendable (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void)
        -> DeliveryLifecycle? {
        // Out of `settling` only once written (or refused): kept, it stays there without a gap in which a
        // pump could claim it again (its lease run out during a long send).
        do {
            let after = try outbox.transition(id: id, durable: durable, decide)
            settling.withLock { _ = $0.remove(id) }
            return after
        } catch is DeliveryLifecycle.Refusal {
            settling.withLock { _ = $0.remove(id) }
            return nil
        } catch {
            keep([id], durable: durable, decide, error: error)
            return nil
        }
    }

    /// `record` for several memos, in one transaction.
    private func record(_ ids: [String], durable: Bool,
                        _ decide: @escaping @Sendable (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) {
        do {
            try outbox.transition(ids: ids, durable: durable, decide)
            settling.withLock { settling in ids.forEach { settling.remove($0) } }
        } catch {
            keep(ids, durable: durable, decide, error: error)
        }
    }

    /// Keeps outcomes the database would not take, to write them as soon as it does.
    private func keep(_ ids: [String], durable: Bool,
                      _ decide: @escaping @Sendable (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void,
                      error: any Error) {
        settling.withLock { settling in ids.forEach { settling.insert($0) } }
        outbox.noteDeliveryWrite(failedWith: error)
        for id in ids {
            logger.error("recording delivery outcome failed; kept to retry", metadata: [
                "message.id": id, "error.kind": Self.kind(of: error),
            ])
        }
        let outcomes = ids.map { Outcome(id: $0, durable: durable, decide: decide) }
        control.async {
            self.unrecorded += outcomes
            self.timer?.arm(afterMilliseconds: Self.unrecordedRetryMilliseconds)
        }
    }

    /// Writes kept outcomes, oldest first; false while the database still refuses writes.
    private func recordPendingOutcomes() -> Bool {
        dispatchPrecondition(condition: .onQueue(control))
        if unrecorded.isEmpty { return true }
        defer { if unrecorded.isEmpty { outbox.noteDeliveryWrite(failedWith: nil) } }
        while let outcome = unrecorded.first {
            do {
                try outbox.transition(id: outcome.id, durable: outcome.durable, outcome.decide)
                logger.notice("delivery outcome recorded late", metadata: ["message.id": outcome.id])
            } catch is DeliveryLifecycle.Refusal {
                // The memo moved on meanwhile (re-queued at a restart, say): nothing left to record.
            } catch {
                outbox.noteDeliveryWrite(failedWith: error)
                return false
            }
            unrecorded.removeFirst()
            settling.withLock { _ = $0.remove(outcome.id) }
        }
        return true
    }

    static func kind(of error: any Error) -> String {
        (error as? DatabaseError)?.kind ?? (error as? PostgresConnection.Failure)?.kind ?? "\(type(of: error))"
    }

    static func milliseconds(since start: UInt64) -> String {
        Logger.milliseconds(nanoseconds: monotonicNanoseconds() - start)
    }
}
