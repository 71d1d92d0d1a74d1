import Foundation
import Synchronization
import Testing
@testable import Jotter

/// The delivery worker on manual time: its backoff is read off the timer it arms and time is moved
/// past it, so hours of retries take milliseconds and no test sleeps to let time pass.
@Suite struct DeliveryWorkerTests {
    /// A worker over a fresh outbox, a steerable transport and manual time.
    private final class Fixture: Sendable {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let transport: ControlledTransport
        let outbox: Outbox
        /// The outbox as the worker sees it: its recording of outcomes can be held at a gate.
        let gated: GatedQueue
        let worker: DeliveryWorker

        init(_ behaviour: ControlledTransport.Behaviour, policy: RetryPolicy = RetryPolicy(jitter: 0),
             batchLimit: Int = 1, batchByteLimit: Int = .max, batchWindow: Int64 = 0,
             maximumWait: Double = 30, leaseMilliseconds: Int64 = DeliveryWorker.Configuration().leaseMilliseconds) throws {
            transport = ControlledTransport(behaviour, maximumWait: maximumWait, batchLimit: batchLimit,
                                            batchByteLimit: batchByteLimit)
            outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
            gated = GatedQueue(outbox)
            worker = try DeliveryWorker.started(outbox: outbox, queue: gated, transport: transport,
                                                scheduler: scheduler) { configuration in
                configuration.retryPolicy = policy
                configuration.batchWindowMilliseconds = batchWindow
                configuration.leaseMilliseconds = leaseMilliseconds
            }
        }

        func stop() {
            worker.stop()
            outbox.close()
        }

        var now: Int64 { scheduler.clock.nowMilliseconds() }

        /// Waits (real time, generously) until the worker has armed its timer for `deadline`.
        func waitForDeadline(_ deadline: Int64) -> Bool {
            TestServer.waitUntil(timeout: 20) { scheduler.nextDeadline == deadline }
        }

        func record(_ id: String) throws -> MessageRecord? {
            try outbox.history.record(id: id)
        }

        /// One memo delivered: until the relay has taken one, the worker sends one at a time.
        func proveRelay() async throws {
            let id = try await outbox.enqueue(MemoDraft(body: "proves the relay")).id
            #expect(TestServer.waitUntil(timeout: 20) { (try? self.record(id))??.status == .sent })
        }
    }

    /// Delivery is background work: it sends on threads that yield the CPU to the request threads (10
    /// nicer than the process), and leaves every other thread of the process at its priority.
    @Test func deliveryRunsAtALowerCPUPriorityThanRequests() async throws {
        let own = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        let fixture = try Fixture(.deliver)
        defer { fixture.stop() }
        try await fixture.proveRelay()
        try await fixture.proveRelay()
        #expect(DeliveryWorker.deliveryNiceness == 10)
        let expected = min(own + DeliveryWorker.deliveryNiceness, 19)
        #expect(fixture.transport.sendingNiceness == [expected, expected], "the test runs at nice \(own)")
        #expect(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0) == own, "this thread kept its priority")
    }

    /// A claim the database refuses (a full or read-only disk, a damaged page) is tried again after 1 s,
    /// then 2, 4 … up to a minute — not at once, which made a loop of 850 failures and log lines a second —
    /// and the memo goes out once claims work again.
    @Test func aFailingClaimIsTriedAgainLaterAndLaterNotInALoop() async throws {
        let fixture = try Fixture(.deliver)
        defer { fixture.stop() }
        try await fixture.proveRelay()
        // Idle: the timer is armed for the minute's housekeeping, nothing is due.
        #expect(fixture.waitForDeadline(fixture.now + 60_000))
        fixture.gated.claimsFail.withLock { $0 = true }
        fixture.gated.claims.withLock { $0 = 0 }
        let id = try await fixture.outbox.enqueue(MemoDraft(body: "waits for the disk")).id
        var expected: [Int64] = []
        for failures in 0..<8 {
            let delay = DeliveryWorker.claimRetryMilliseconds(afterFailures: failures)
            expected.append(delay)
            #expect(fixture.waitForDeadline(fixture.now + delay), "after \(failures + 1) failed claims")
            #expect(fixture.gated.claims.withLock { $0 } == failures + 1, "one claim per timer, no loop")
            fixture.scheduler.advance(milliseconds: delay)
        }
        #expect(expected == [1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000])
        #expect(TestServer.waitUntil(timeout: 20) { fixture.gated.claims.withLock { $0 } == 9 })
        fixture.gated.claimsFail.withLock { $0 = false }
        #expect(fixture.waitForDeadline(fixture.now + 60_000))
        fixture.scheduler.advance(milliseconds: 60_000)
        #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(id))??.status == .sent })
        #expect(fixture.transport.messages.map(\.id).filter { $0 == id } == [id])
    }

    /// A memo an earlier process accepted may have been delivered by it even though the outbox says
    /// `queued`, attempt 0: a power loss undoes the unsynced record of a delivery. Its first attempt in a
    /// new process looks for the copy (here one a mail client moved to `cur/`) and writes no second.
    @Test func aMemoFromAnEarlierProcessIsLookedForBeforeItIsDeliveredAgain() async throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
        defer { outbox.close() }
        let accepted = try await outbox.enqueue(MemoDraft(body: "delivered before the power went"))
        let maildir = MaildirTransport(path: directory.file("Maildir"))
        try maildir.prepare()
        let earlier = MailMessage(id: accepted.id, date: scheduler.clock.nowMilliseconds(),
                                  from: MailAddress(address: "jotter@localhost"), to: MailAddress(address: "me@localhost"),
                                  subject: "", body: "", attempt: 1)
        let name = MaildirTransport.fileName(for: earlier)
        try "delivered".write(toFile: directory.file("Maildir/cur/" + name + ":2,S"), atomically: false, encoding: .utf8)
        scheduler.advance(milliseconds: 1000)  // the new process starts later
        let worker = try DeliveryWorker.started(outbox: outbox, queue: outbox, transport: maildir, scheduler: scheduler)
        defer { worker.stop() }
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: accepted.id))??.status == .sent })
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("Maildir/new")).isEmpty)
        // A memo this process accepted is delivered without looking.
        let fresh = try await outbox.enqueue(MemoDraft(body: "after the restart"))
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: fresh.id))??.status == .sent })
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.file("Maildir/new")).count == 1)
    }

    /// Which memos count as an earlier process's is decided by the order of acceptance, not the wall clock.
    /// A clock set back after the start (NTP on a machine without a real-time clock) made every memo of this
    /// process look earlier, each batch reading `cur/` until the clock caught up; a clock that had been ahead
    /// in the earlier process made its memos look like this one's, and a delivery whose record a power loss
    /// undid would have gone out twice.
    @Test func anEarlierProcessIsToldByTheOrderOfAcceptanceNotTheClock() async throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
        defer { outbox.close() }
        // The earlier process ran with its clock an hour ahead.
        scheduler.clock.set(byMilliseconds: 3_600_000)
        let ahead = try await outbox.enqueue(MemoDraft(body: "accepted while the clock was ahead")).id
        scheduler.clock.set(byMilliseconds: -3_600_000)
        let transport = ControlledTransport()
        let worker = try DeliveryWorker.started(outbox: outbox, queue: outbox, transport: transport, scheduler: scheduler)
        defer { worker.stop() }
        // Stored as due when it was accepted, by the clock of then.
        #expect(TestServer.waitUntil(timeout: 20) { scheduler.nextDeadline != nil })
        scheduler.advance(milliseconds: 3_600_000)
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: ahead))??.status == .sent })
        // Then this process's clock is set back two hours: an hour before its start.
        scheduler.clock.set(byMilliseconds: -7_200_000)
        let mine = try await outbox.enqueue(MemoDraft(body: "accepted after the clock went back")).id
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: mine))??.status == .sent })
        let looked = Dictionary(transport.messages.map { ($0.id, $0.mayHaveBeenDelivered) }, uniquingKeysWith: { $1 })
        #expect(looked[ahead] == true, "the earlier process's memo is looked for, though dated after the start")
        #expect(looked[mine] == false, "this process's memo is not, though dated before the start")
    }

    /// A memo the relay took while another found it unreachable: its `sent` could not be written then (the
    /// database was locked), and the worker went offline. Once the database takes writes again, the outcome
    /// is written while the relay is still away — it waited for the relay's return, and a restart meanwhile
    /// would have sent the memo again.
    @Test func anOutcomeTheDatabaseRefusedIsWrittenWhileTheRelayIsAway() async throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
        defer { outbox.close() }
        let gated = GatedQueue(outbox)
        let transport = SplitTransport()
        let worker = try DeliveryWorker.started(outbox: outbox, queue: gated, transport: transport, scheduler: scheduler)
        defer { worker.stop() }
        let proof = try await outbox.enqueue(MemoDraft(body: "arrives, and proves the relay")).id
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: proof))??.status == .sent })
        // Both memos are claimed by one pump, in two slots: while claims fail, they gather.
        gated.claimsFail.withLock { $0 = true }
        let taken = try await outbox.enqueue(MemoDraft(body: "arrives")).id
        let lost = try await outbox.enqueue(MemoDraft(body: "finds the relay unreachable")).id
        #expect(TestServer.waitUntil(timeout: 20) { gated.claims.withLock { $0 } >= 2 && scheduler.nextDeadline != nil })
        gated.claimsFail.withLock { $0 = false }
        gated.writesFail.withLock { $0 = true }
        scheduler.advance(milliseconds: 60_000)
        #expect(TestServer.waitUntil(timeout: 20) { gated.failedWrites.withLock { $0 } >= 2 })
        #expect(TestServer.waitUntil(timeout: 20) { if case .offline = worker.relayState { true } else { false } })
        #expect(transport.sent.withLock { $0 } == [proof, taken])
        #expect(try outbox.history.record(id: taken)?.status == .sending, "its outcome is not written yet")
        gated.writesFail.withLock { $0 = false }
        scheduler.advance(milliseconds: DeliveryWorker.unrecordedRetryMilliseconds)
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: taken))??.status == .sent },
                "written while the relay is away")
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: lost))??.status == .retrying })
        #expect(worker.relayState != .ok, "the relay is still away")
    }

    /// A send slower than its lease (a long `?timeout=`): its memo is due again for a claim, but a worker
    /// does not claim what it is still sending, so the timer waits a second between looks — it was re-armed
    /// every millisecond, a core busy with claims until the send ended.
    @Test func aSendSlowerThanItsLeaseDoesNotSpinTheTimer() async throws {
        let fixture = try Fixture(.deliver, maximumWait: 120, leaseMilliseconds: 5_000)
        defer { fixture.stop() }
        try await fixture.proveRelay()  // several slots from now on
        fixture.transport.block()
        let id = try await fixture.outbox.enqueue(MemoDraft(body: "slower than its lease")).id
        #expect(fixture.transport.waitUntilBlocked(count: 1, timeout: 20))
        #expect(fixture.waitForDeadline(fixture.now + 5_000), "the next look: when the lease runs out")
        fixture.scheduler.advance(milliseconds: 5_000)
        #expect(fixture.waitForDeadline(fixture.now + 1_000), "a second on, not a millisecond")
        fixture.scheduler.advance(milliseconds: 1_000)
        #expect(fixture.waitForDeadline(fixture.now + 1_000))
        fixture.transport.release()
        #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(id))??.status == .sent })
        #expect(fixture.transport.messages.filter { $0.id == id }.count == 1, "sent once")
    }

    /// Two relay nodes share one queue; one's mail password is wrong. That node holds nothing: the memo
    /// its relay refused goes back in the queue (due again in a minute) and the others stay queued, for
    /// a node that can send them; a node starting later does not start refused for the other's refusal.
    @Test func oneNodesRefusingRelayDoesNotStallTheOthers() async throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
        defer { outbox.close() }
        func node(_ transport: ControlledTransport) throws -> DeliveryWorker {
            let queue = GatedQueue(outbox)
            queue.sharedLeases.withLock { $0 = true }
            return try DeliveryWorker.started(outbox: outbox, queue: queue, transport: transport, scheduler: scheduler) {
                $0.retryPolicy = RetryPolicy(jitter: 0)
            }
        }
        let refusing = ControlledTransport(.fail(DeliveryFailure(.auth, permanent: true)))
        let wrong = try node(refusing)
        defer { wrong.stop() }
        let first = try await outbox.enqueue(MemoDraft(body: "met the wrong password")).id
        wrong.wake()
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: first))??.status == .retrying })
        #expect(TestServer.waitUntil(timeout: 20) { if case .refused = wrong.relayState { true } else { false } })
        let second = try await outbox.enqueue(MemoDraft(body: "waits for a node that can send")).id
        let arms = scheduler.arms
        wrong.wake()
        #expect(TestServer.waitUntil(timeout: 20) { scheduler.arms > arms }, "the refusing node pumped")
        #expect((try outbox.history.record(id: second))?.status == .queued, "not held by the refusing node")
        // The healthy node starts: not refused for the other's refusal; it delivers what waits and then
        // releases what the refusal held.
        let delivering = ControlledTransport(.deliver)
        let healthy = try node(delivering)
        defer { healthy.stop() }
        #expect(healthy.relayState == .ok)
        #expect(TestServer.waitUntil(timeout: 20) { (try? outbox.history.record(id: second))??.status == .sent })
        // Time goes on, a second per look, until the first memo is due again and the healthy node sends it.
        #expect(TestServer.waitUntil(timeout: 60) {
            scheduler.advance(milliseconds: 1000)
            return (try? outbox.history.record(id: first))??.status == .sent
        })
        #expect(scheduler.clock.nowMilliseconds() - 1_700_000_000_000 >= DeliveryWorker.refusedSharedRetryMilliseconds)
        #expect(refusing.messages.map(\.id) == [first])
    }

    /// Leases shared between nodes: a renewal that finds the memo's outcome already written by this very
    /// attempt (its slot had not yet cleared it from the memos it renews) is no lease lost. It was logged
    /// as "another node took the memo over", suggesting a memo sent twice.
    @Test func aRenewalAfterTheOwnOutcomeIsNoLeaseLost() async throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
        defer { outbox.close() }
        let queue = GatedQueue(outbox)
        queue.sharedLeases.withLock { $0 = true }
        // A held send gives up after `maximumWait`: under the whole suite's load this test's own thread can
        // wait half a minute for its turn, so the send must still be held when it looks.
        let transport = ControlledTransport(.block, maximumWait: 600)
        let logs = LogSink.memory()
        var configuration = DeliveryWorker.Configuration()
        // Long: a send not renewed stops a sixth of a lease before its end, in real time, and a loaded
        // machine may take many seconds between the claim and the release below.
        configuration.leaseMilliseconds = 600_000
        let worker = DeliveryWorker(outbox: queue, transport: transport, configuration: configuration,
                                    clock: scheduler.clock, scheduler: scheduler,
                                    logger: Logger(label: "delivery", sink: logs))
        outbox.setOnAccepted { worker.wake() }
        try worker.start()
        defer { worker.stop() }
        let id = try await outbox.enqueue(MemoDraft(body: "sent once, lease renewed late")).id
        try #require(transport.waitUntilBlocked(count: 1, timeout: 120))
        // The renewal (every 200 s of the worker's clock, from its start) waits at the gate, holding the
        // worker's queue, while the send ends and its outcome is written; then it goes on, and finds the
        // memo sent. Time moves once, by exactly that: moved on further, the lease would run out.
        queue.gatesOnlyLazyWrites.withLock { $0 = true }
        queue.close()
        scheduler.advance(milliseconds: 200_000)
        try #require(queue.waitUntilWaiting(timeout: 120), "the renewal is at the gate")
        transport.release()
        #expect(TestServer.waitUntil(timeout: 120) { (try? outbox.history.record(id: id))??.status == .sent })
        queue.open()
        #expect(TestServer.waitUntil(timeout: 120) {
            (try? outbox.nextDueAt()) == Int64?.none && transport.messages.count == 1
        })
        worker.stop()
        #expect(!logs.captured.contains("lease lost"), "\(logs.captured)")
        #expect(transport.messages.filter { $0.id == id }.count == 1, "sent once")
    }

    @Test func memosArrivingWhileABatchIsOnItsWayGoOutTogetherInTheNext() async throws {
        // A blocked send gives up after `maximumWait`: far longer than a loaded machine needs for the
        // eleven enqueues below, so the first memo is still the one in the slot when it is released.
        let fixture = try Fixture(.block, batchLimit: 8, maximumWait: 600)
        defer { fixture.stop() }
        let first = try await fixture.outbox.enqueue(MemoDraft(body: "alone")).id
        #expect(fixture.transport.waitUntilBlocked(count: 1, timeout: 20))
        var later: [String] = []
        for index in 0..<11 { later.append(try await fixture.outbox.enqueue(MemoDraft(body: "later \(index)")).id) }
        fixture.transport.release()
        #expect(TestServer.waitUntil(timeout: 20) {
            ([first] + later).allSatisfy { (try? fixture.record($0))??.status == .sent }
        }, "\(([first] + later).map { ((try? fixture.record($0)) ?? nil).map { "\($0.status) \($0.attempts)" } ?? "-" })")
        // One slot for a batching transport: the eleven waited for the first, then went 8 + 3.
        #expect(fixture.transport.batches == [8, 3], "\(fixture.transport.batches)")
        #expect(fixture.transport.messages.count == 12, "each memo sent once")
    }

    /// Large memos that arrive while a batch is on its way go out in batches bounded by the transport's
    /// byte limit, not only its count: ten memos of 1,000 bytes under a 2,500-byte limit wait one window
    /// for company, then go two by two, each exactly once; what a batch's budget left goes next, without
    /// another window (nothing new arrived meanwhile).
    @Test func batchesOfLargeMemosStayWithinTheTransportsByteLimit() async throws {
        let fixture = try Fixture(.block, batchLimit: 64, batchByteLimit: 2_500, batchWindow: 60_000, maximumWait: 600)
        defer { fixture.stop() }
        let first = try await fixture.outbox.enqueue(MemoDraft(body: "alone")).id
        #expect(fixture.transport.waitUntilBlocked(count: 1, timeout: 20))
        let start = fixture.now
        var large: [String] = []
        for index in 0..<10 {
            let body = String(repeating: "\(index)", count: 1_000)
            large.append(try await fixture.outbox.enqueue(MemoDraft(body: body)).id)
        }
        fixture.transport.release()
        #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(first))??.status == .sent })
        #expect(fixture.waitForDeadline(start + 60_000), "the stream waits one window for company")
        // Time moves once: a batch that waited for another window would never go.
        fixture.scheduler.advance(milliseconds: 60_000)
        #expect(TestServer.waitUntil(timeout: 20) {
            ([first] + large).allSatisfy { (try? fixture.record($0))??.status == .sent }
        }, "\(fixture.transport.batches)")
        #expect(fixture.transport.batches == [2, 2, 2, 2, 2], "\(fixture.transport.batches)")
        #expect(fixture.transport.messages.map(\.id) == [first] + large, "each memo once, in order")
    }

    /// A memo that finds the worker idle goes at once; memos that come while a batch is on its way
    /// gather into the next, which waits the batch window for company (on manual time, so the test
    /// knows exactly when), then goes as one.
    @Test func aStreamWaitsTheBatchWindowAndGoesOutTogether() async throws {
        let fixture = try Fixture(.deliver, batchLimit: 16, batchWindow: 20, maximumWait: 600)
        defer { fixture.stop() }
        try await fixture.proveRelay()
        #expect(fixture.waitForDeadline(fixture.now + 60_000), "idle")
        fixture.transport.block()
        let first = try await fixture.outbox.enqueue(MemoDraft(body: "finds the worker idle")).id
        #expect(fixture.transport.waitUntilBlocked(count: 1, timeout: 20), "sent at once, no window")
        let start = fixture.now
        var stream: [String] = []
        for index in 0..<5 { stream.append(try await fixture.outbox.enqueue(MemoDraft(body: "stream \(index)")).id) }
        fixture.transport.release()
        #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(first))??.status == .sent })
        #expect(fixture.waitForDeadline(start + 20), "the next batch waits for the window's end")
        #expect(fixture.transport.messages.count == 2, "nothing of the stream sent before it")
        fixture.scheduler.advance(milliseconds: 20)
        #expect(TestServer.waitUntil(timeout: 20) { stream.allSatisfy { (try? fixture.record($0))??.status == .sent } })
        #expect(fixture.transport.batches == [5])
    }

    /// A memo that comes after the transport has taken the memo before, while the worker is still
    /// recording that delivery, is someone sending the next memo as the last arrived: it goes as soon as
    /// the recording is done, without waiting the batch window (time does not move in this test).
    @Test func aMemoArrivingWhileADeliveryIsBeingRecordedGoesAtOnce() async throws {
        let fixture = try Fixture(.deliver, batchLimit: 16, batchWindow: 20, maximumWait: 600)
        defer { fixture.stop() }
        try await fixture.proveRelay()
        #expect(fixture.waitForDeadline(fixture.now + 60_000), "idle")
        let start = fixture.now
        fixture.gated.close()
        let first = try await fixture.outbox.enqueue(MemoDraft(body: "finds the worker idle")).id
        #expect(fixture.gated.waitUntilWaiting(timeout: 20), "the transport took it; its recording waits")
        #expect(fixture.transport.messages.count == 2)
        let next = try await fixture.outbox.enqueue(MemoDraft(body: "sent as the last one is recorded")).id
        fixture.gated.open()
        #expect(TestServer.waitUntil(timeout: 20) {
            [first, next].allSatisfy { (try? fixture.record($0))??.status == .sent }
        }, "no window: the next one went once the first was recorded")
        #expect(fixture.now == start, "time never moved")
        #expect(fixture.transport.messages.count == 3, "each once, one at a time")
    }

    /// A stream of memos accepted while the one slot is sending: each wake-up finds a pump already
    /// coming (the finishing send's), so the worker is not woken, and its timer not re-armed, once per
    /// memo; the stream still goes out, in the next batches.
    @Test func memosAcceptedWhileEverySlotIsSendingDoNotWakeTheWorkerEachTime() async throws {
        let fixture = try Fixture(.block, batchLimit: 8, maximumWait: 600)
        defer { fixture.stop() }
        let first = try await fixture.outbox.enqueue(MemoDraft(body: "in the slot")).id
        #expect(fixture.transport.waitUntilBlocked(count: 1, timeout: 20))
        #expect(fixture.waitForDeadline(fixture.now + 60_000), "the pump that sent it is done")
        let before = fixture.scheduler.arms
        var stream: [String] = []
        for index in 0..<40 { stream.append(try await fixture.outbox.enqueue(MemoDraft(body: "stream \(index)")).id) }
        let duringTheSend = fixture.scheduler.arms - before
        fixture.transport.release()
        #expect(TestServer.waitUntil(timeout: 20) {
            ([first] + stream).allSatisfy { (try? fixture.record($0))??.status == .sent }
        })
        #expect(duringTheSend == 0, "the timer was re-armed \(duringTheSend) times while 40 memos came")
        #expect(fixture.transport.batches == [8, 8, 8, 8, 8], "\(fixture.transport.batches)")
        #expect(fixture.transport.messages.count == 41, "each memo sent once")
    }

    /// The relay is unreachable: memos accepted meanwhile wait for the probe, which is not re-armed
    /// for each of them, and go out once it finds the relay again.
    @Test func memosAcceptedWhileTheRelayIsOfflineWaitForTheProbeWithoutWakingTheWorker() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.unreachable, permanent: false)), maximumWait: 600)
        defer { fixture.stop() }
        let probeEvery = DeliveryWorker.Configuration().offlineProbeMilliseconds
        let first = try await fixture.outbox.enqueue(MemoDraft(body: "finds the relay down")).id
        #expect(fixture.waitForDeadline(fixture.now + probeEvery), "offline, the next probe armed")
        let before = fixture.scheduler.arms
        var waiting: [String] = []
        for index in 0..<20 { waiting.append(try await fixture.outbox.enqueue(MemoDraft(body: "offline \(index)")).id) }
        #expect(fixture.scheduler.arms == before, "the probe timer was re-armed for memos it will find anyway")
        fixture.transport.release()
        fixture.scheduler.advance(milliseconds: probeEvery)
        #expect(TestServer.waitUntil(timeout: 20) {
            ([first] + waiting).allSatisfy { (try? fixture.record($0))??.status == .sent }
        }, "\(([first] + waiting).map { ((try? fixture.record($0)) ?? nil).map { "\($0.status)" } ?? "-" })")
    }

    /// The wall clock set back an hour while the relay is down (a laptop whose clock is corrected when
    /// the network comes back): the worker goes on probing every few seconds, and the memo goes out at
    /// the first probe that finds the relay, not an hour later.
    @Test func aClockSetBackDoesNotStopTheProbesOfARelayThatIsDown() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.unreachable, permanent: false)), maximumWait: 600)
        defer { fixture.stop() }
        let clock = fixture.scheduler.clock
        let probeEvery = DeliveryWorker.Configuration().offlineProbeMilliseconds
        let id = try await fixture.outbox.enqueue(MemoDraft(body: "waits out the outage")).id
        #expect(fixture.waitForDeadline(clock.monotonicMilliseconds() + probeEvery), "offline, the next probe armed")
        clock.set(byMilliseconds: -3_600_000)
        fixture.transport.release()
        fixture.scheduler.advance(milliseconds: probeEvery)
        #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(id))??.status == .sent },
                "\(String(describing: try? fixture.record(id)))")
    }

    /// Likewise while the relay refuses: the slow retest still comes fifteen minutes later by the time
    /// that passed, though the wall clock was set back an hour meanwhile.
    @Test func aClockSetBackDoesNotPostponeTheRetestOfARefusingRelay() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.auth, permanent: true)))
        defer { fixture.stop() }
        let clock = fixture.scheduler.clock
        let id = try await fixture.outbox.enqueue(MemoDraft(body: "held while refused")).id
        #expect(TestServer.waitUntil(timeout: 30) { (try? fixture.record(id))??.status == .held })
        #expect(fixture.transport.messages.count == 1)
        let retest = clock.monotonicMilliseconds() + DeliveryWorker.Configuration().refusedRetestMilliseconds
        clock.set(byMilliseconds: -3_600_000)
        fixture.transport.release()
        while clock.monotonicMilliseconds() < retest {
            #expect(TestServer.waitUntil(timeout: 20) { fixture.scheduler.nextDeadline != nil })
            let next = try #require(fixture.scheduler.nextDeadline)
            fixture.scheduler.advance(milliseconds: max(min(next, retest) - clock.monotonicMilliseconds(), 1))
        }
        #expect(TestServer.waitUntil(timeout: 30) { (try? fixture.record(id))??.status == .sent },
                "\(String(describing: try? fixture.record(id)))")
        #expect(fixture.transport.messages.count == 2)
    }

    /// Memos are due but every slot is busy (the first send, before the relay has accepted any): the
    /// worker waits for the send to finish, instead of re-arming its timer every millisecond.
    @Test(arguments: [1, 8])
    func aDueMemoWaitingForABusySlotDoesNotSpinTheTimer(batchLimit: Int) async throws {
        let fixture = try Fixture(.block, batchLimit: batchLimit, maximumWait: 600)
        defer { fixture.stop() }
        _ = try await fixture.outbox.enqueue(MemoDraft(body: "in the slot"))
        #expect(fixture.transport.waitUntilBlocked(count: 1, timeout: 20))
        _ = try await fixture.outbox.enqueue(MemoDraft(body: "due, waiting for the slot"))
        let now = fixture.now
        #expect(fixture.waitForDeadline(now + 60_000), "armed for \(String(describing: fixture.scheduler.nextDeadline.map { $0 - now }))")
        fixture.transport.release()
    }

    @Test func aFailedBatchPutsEachMemoOnItsOwnLadderAndTheRetriesGoOut() async throws {
        let fixture = try Fixture(.deliver, batchLimit: 8, maximumWait: 600)
        defer { fixture.stop() }
        try await fixture.proveRelay()
        fixture.transport.block()
        let blocking = try await fixture.outbox.enqueue(MemoDraft(body: "holds the slot")).id
        #expect(fixture.transport.waitUntilBlocked(count: 1, timeout: 20))
        var batch: [String] = []
        for index in 0..<4 { batch.append(try await fixture.outbox.enqueue(MemoDraft(body: "batched \(index)")).id) }
        // The slot's memo and the next batch fail: each memo is retrying, then all are delivered.
        fixture.transport.fail(with: DeliveryFailure(.serverError, permanent: false))
        #expect(TestServer.waitUntil(timeout: 20) {
            ([blocking] + batch).allSatisfy { (try? fixture.record($0))??.status == .retrying }
        })
        #expect(fixture.transport.batches.last == 4)
        fixture.transport.release()
        let due = try #require(try ([blocking] + batch).compactMap { try fixture.record($0)?.nextAttemptAt }.max())
        fixture.scheduler.advance(milliseconds: due - fixture.now)
        #expect(TestServer.waitUntil(timeout: 20) {
            ([blocking] + batch).allSatisfy { (try? fixture.record($0))??.status == .sent }
        })
    }

    @Test func transientFailuresBackOffOneTwoFourEightSecondsThenDeliver() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.serverError, permanent: false)))
        defer { fixture.stop() }
        let id = try await fixture.outbox.enqueue(MemoDraft(body: "retried on manual time")).id
        var waits: [Int64] = []
        for attempt in 1...4 {
            #expect(fixture.transport.waitUntilReceived(count: attempt, timeout: 20), "attempt \(attempt) never came")
            #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(id))??.status == .retrying
                && (try? fixture.record(id))??.attempts == attempt })
            let due = try #require(try fixture.record(id)?.nextAttemptAt)
            waits.append(due - fixture.now)
            #expect(fixture.waitForDeadline(due), "the timer is armed for the retry, not earlier or later")
            // Just before it is due nothing happens; at the deadline the next attempt starts.
            fixture.scheduler.advance(milliseconds: due - fixture.now - 1)
            #expect(fixture.transport.messages.count == attempt)
            if attempt == 4 { fixture.transport.release() }
            fixture.scheduler.advance(milliseconds: 1)
        }
        #expect(waits == [1000, 2000, 4000, 8000])
        #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(id))??.status == .sent })
        #expect(fixture.transport.messages.count == 5)
        #expect(Set(fixture.transport.messages.map(\.id)) == [id], "one memo, the same id every attempt")
    }

    @Test func theBackoffIsCappedAtAnHourAndTheWorkerStillWakesEveryMinute() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.timeout, permanent: false)))
        defer { fixture.stop() }
        let id = try await fixture.outbox.enqueue(MemoDraft(body: "a long outage")).id
        var attempts = 0
        var longest: Int64 = 0
        // Thirteen failures: 1 s, 2 s, … 2048 s, then the cap (an hour). Time moves timer by timer.
        while attempts < 14 {
            #expect(fixture.transport.waitUntilReceived(count: attempts + 1, timeout: 20))
            attempts += 1
            #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(id))??.attempts == attempts
                && (try? fixture.record(id))??.status == .retrying })
            let due = try #require(try fixture.record(id)?.nextAttemptAt)
            longest = max(longest, due - fixture.now)
            while fixture.now < due {
                // The timer never sleeps more than a minute (the subject purge runs on it too).
                #expect(TestServer.waitUntil(timeout: 20) { fixture.scheduler.nextDeadline != nil })
                let next = try #require(fixture.scheduler.nextDeadline)
                #expect(next - fixture.now <= 60_000)
                fixture.scheduler.advance(milliseconds: max(next - fixture.now, 1))
            }
        }
        #expect(longest == 3_600_000)
    }

    @Test func aPermanentFailureArmsNoRetry() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.rejected, permanent: true)))
        defer { fixture.stop() }
        let id = try await fixture.outbox.enqueue(MemoDraft(body: "refused recipient")).id
        #expect(TestServer.waitUntil(timeout: 20) { (try? fixture.record(id))??.status == .failed })
        #expect(try fixture.record(id)?.lastError == "rejected")
        #expect(try fixture.outbox.nextDueAt() == nil)
        fixture.scheduler.advance(milliseconds: 86_400_000)
        #expect(fixture.transport.messages.count == 1, "a failed memo waits for a person, not a timer")
    }

    /// While the relay refuses, a memo written with an undo window stays queued until its window ends: its
    /// sender can still take it back (it was held at once, and Undo answered "too late"). After the window
    /// it is held like the rest.
    @Test func aMemoInItsUndoWindowIsNotHeldWhileTheRelayRefuses() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.auth, permanent: true)))
        defer { fixture.stop() }
        let first = try await fixture.outbox.enqueue(MemoDraft(body: "finds the relay refusing")).id
        #expect(TestServer.waitUntil(timeout: 30) { (try? fixture.record(first))??.status == .held })
        let kept = try await fixture.outbox.enqueue(MemoDraft(body: "taken back", undoMilliseconds: 30_000)).id
        let late = try await fixture.outbox.enqueue(MemoDraft(body: "left to go", undoMilliseconds: 30_000)).id
        // A pump while both windows are open (a memo's wake-up pumped already; this one is certain).
        let arms = fixture.scheduler.arms
        fixture.worker.wake()
        #expect(TestServer.waitUntil(timeout: 20) { fixture.scheduler.arms > arms })
        #expect(try fixture.record(kept)?.status == .queued)
        let cancelled = await withCheckedContinuation { continuation in
            fixture.outbox.cancel(id: kept) { continuation.resume(returning: $0) }
        }
        guard case .success(.cancelled) = cancelled else {
            Issue.record("Undo during the window: \(cancelled)")
            return
        }
        // The other one's window ends: held with the reason, like the memos before it.
        #expect(TestServer.waitUntil(timeout: 20) { fixture.scheduler.nextDeadline != nil })
        fixture.scheduler.advance(milliseconds: 60_000)
        #expect(TestServer.waitUntil(timeout: 30) { (try? fixture.record(late))??.status == .held })
        #expect(try fixture.record(late)?.lastError == "auth")
        #expect(fixture.transport.messages.map(\.id) == [first], "one failed login, nothing more")
    }

    /// A wrong password (or a certificate that does not verify) is the relay's failure: one failed
    /// login stops the relay, every memo waits held with the reason, the relay is tried again with one
    /// memo on a slow schedule or at once on a Retry, and when it accepts, all go out.
    @Test func aRefusingRelayCostsOneLoginNotOnePerMemo() async throws {
        let fixture = try Fixture(.fail(DeliveryFailure(.auth, permanent: true)))
        defer { fixture.stop() }
        var ids: [String] = []
        for index in 0..<30 {
            ids.append(try await fixture.outbox.enqueue(MemoDraft(body: "memo \(index)")).id)
        }
        let allHeld = {
            ids.allSatisfy { (try? fixture.record($0))??.status == .held && (try? fixture.record($0))??.lastError == "auth" }
        }
        #expect(TestServer.waitUntil(timeout: 30) { allHeld() }, "every memo waits, held with the reason")
        #expect(fixture.transport.messages.count == 1, "one failed login for 30 memos")
        guard case .refused(let kind, _, _) = fixture.worker.relayState else {
            Issue.record("relay state \(fixture.worker.relayState)")
            return
        }
        #expect(kind == "auth")
        // A memo written now waits too, without a login of its own.
        let late = try await fixture.outbox.enqueue(MemoDraft(body: "written while refused")).id
        ids.append(late)
        #expect(TestServer.waitUntil(timeout: 30) { (try? fixture.record(late))??.status == .held })
        #expect(fixture.transport.messages.count == 1)
        // The slow re-test: one memo, fifteen minutes later.
        let retest = fixture.now + DeliveryWorker.Configuration().refusedRetestMilliseconds
        while fixture.now < retest {
            #expect(TestServer.waitUntil(timeout: 20) { fixture.scheduler.nextDeadline != nil })
            let next = try #require(fixture.scheduler.nextDeadline)
            fixture.scheduler.advance(milliseconds: max(min(next, retest) - fixture.now, 1))
        }
        #expect(fixture.transport.waitUntilReceived(count: 2, timeout: 20))
        #expect(TestServer.waitUntil(timeout: 30) { allHeld() })
        #expect(fixture.transport.messages.count == 2)
        // Fixed, and a person presses Retry: tested at once, then everything goes out, once each.
        fixture.transport.release()
        fixture.worker.retestRelay()
        #expect(TestServer.waitUntil(timeout: 30) { ids.allSatisfy { (try? fixture.record($0))??.status == .sent } })
        #expect(TestServer.waitUntil(timeout: 30) { fixture.worker.relayState == .ok })
        #expect(fixture.transport.messages.count == 2 + ids.count)
        #expect(Set(fixture.transport.messages.suffix(ids.count).map(\.id)) == Set(ids))
    }

    /// After a restart with the same configuration the relay is still refused (no login at start),
    /// and a Retry tests it at once.
    @Test func aRelayThatRefusedBeforeARestartStaysRefusedUntilARetry() async throws {
        let directory = TemporaryDirectory()
        let key = try SymmetricKey.random()
        let path = directory.file("jotter.db")
        do {
            let outbox = try Outbox(path: path, key: key)
            let transport = ControlledTransport(.fail(DeliveryFailure(.tls, permanent: true)))
            let worker = DeliveryWorker(outbox: outbox, transport: transport)
            outbox.setOnAccepted { worker.wake() }
            try worker.start()
            let id = try await outbox.enqueue(MemoDraft(body: "certificate trouble")).id
            #expect(TestServer.waitUntil(timeout: 30) { (try? outbox.history.record(id: id))??.status == .held })
            worker.stop()
            outbox.close()
        }
        let outbox = try Outbox(path: path, key: key)
        defer { outbox.close() }
        let transport = ControlledTransport(.deliver)
        let worker = DeliveryWorker(outbox: outbox, transport: transport)
        try worker.start()
        defer { worker.stop() }
        guard case .refused(let kind, _, _) = worker.relayState else {
            Issue.record("relay state after restart: \(worker.relayState)")
            return
        }
        #expect(kind == "tls")
        worker.wake()
        worker.retestRelay()
        #expect(TestServer.waitUntil(timeout: 30) { (try? outbox.history.counts())?[.sent] == 1 })
        // The worker learns of the success just after recording it: wait for that, do not race it.
        #expect(TestServer.waitUntil(timeout: 30) { worker.relayState == .ok })
        #expect(transport.messages.count == 1)
    }

    /// A send that succeeds while the database refuses writes (here: another process holds its write
    /// lock past the busy timeout, as a full disk refuses them): the outcome is kept and written as soon
    /// as writes work again, long before the lease, and the memo is not sent a second time even though
    /// its lease ran out meanwhile.
    @Test func anOutcomeTheDatabaseRefusedIsRecordedOnceItTakesWritesAgain() async throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let outbox = try Outbox(path: path, key: SymmetricKey.random())
        defer { outbox.close() }
        let blocker = try Database(path: path)
        defer { blocker.close() }
        // The worker's own writes may hold the lock for a moment when the transport takes it: wait.
        try blocker.execute("PRAGMA busy_timeout = 30000")
        let transport = LockingTransport(blocker: blocker)
        var configuration = DeliveryWorker.Configuration()
        configuration.leaseMilliseconds = 2_000
        let worker = DeliveryWorker(outbox: outbox, transport: transport, configuration: configuration)
        outbox.setOnAccepted { worker.wake() }
        try worker.start()
        defer { worker.stop() }
        let id = try await outbox.enqueue(MemoDraft(body: "delivered while the disk was full")).id
        #expect(TestServer.waitUntil(timeout: 30) { transport.sends == 1 })
        // The worker's write waits out the busy timeout (5 s) and fails; the lease (2 s) runs out too.
        #expect(TestServer.waitUntil(timeout: 30) { transport.refusedLongEnough })
        #expect(transport.locked, "the test's connection holds the write lock")
        #expect(try outbox.history.record(id: id)?.status == .sending, "not recorded while refused")
        transport.unblock()
        #expect(TestServer.waitUntil(timeout: 30) { (try? outbox.history.record(id: id))??.status == .sent })
        #expect(transport.sends == 1, "sent once: the expired lease did not make it go out again")
    }
}

/// Delivers, then holds the database's write lock from another connection until `unblock()`, so the
/// worker cannot record the outcome.
private final class LockingTransport: Transport, @unchecked Sendable {
    private let blocker: Database
    private let lock = NSLock()
    private var count = 0
    private var lockedAt: Date?

    init(blocker: Database) {
        self.blocker = blocker
    }

    var sends: Int { lock.withLock { count } }
    private var held = false
    var locked: Bool { lock.withLock { held } }

    /// The lock has been held longer than the worker's busy timeout (5 s) plus a lease (2 s).
    var refusedLongEnough: Bool { lock.withLock { lockedAt.map { Date().timeIntervalSince($0) > 8 } ?? false } }

    func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        lock.withLock {
            count += 1
            if lockedAt == nil {
                held = (try? blocker.execute("BEGIN IMMEDIATE")) != nil
                lockedAt = Date()
            }
        }
        return DeliveryReceipt()
    }

    func unblock() {
        lock.withLock { _ = try? blocker.execute("COMMIT") }
    }

    var repeatsHarmlessly: Bool { false }
}

/// An `Outbox` as the delivery worker sees it, whose recording of outcomes (the `transition` calls) can be
/// held at a gate: a test then acts while the worker is between a send and its bookkeeping. Everything else
/// is passed straight through.
/// Delivers a memo unless its body says it finds the relay unreachable; the relay never answers a probe.
final class SplitTransport: Transport {
    /// The ids delivered, in order.
    let sent = Mutex<[String]>([])

    func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        if message.body.contains("unreachable") { throw DeliveryFailure(.unreachable, permanent: false) }
        sent.withLock { $0.append(message.id) }
        return DeliveryReceipt()
    }

    func probe() -> Bool { false }
}

final class GatedQueue: DeliveryQueue, @unchecked Sendable {  // `closed` and `waiting` only under `condition`
    private let outbox: Outbox
    private let condition = NSCondition()
    private var closed = false
    private var waiting = 0

    init(_ outbox: Outbox) {
        self.outbox = outbox
    }

    /// Later recordings wait until `open()`.
    func close() {
        condition.withLock { closed = true }
    }

    /// Lets waiting and later recordings through.
    func open() {
        condition.withLock {
            closed = false
            condition.broadcast()
        }
    }

    /// Polls until a recording waits at the gate.
    func waitUntilWaiting(timeout: Double) -> Bool {
        TestServer.waitUntil(timeout: timeout) { self.condition.withLock { self.waiting > 0 } }
    }

    /// While set, only writes that need no sync of their own (lease renewals, say) wait at the gate.
    let gatesOnlyLazyWrites = Mutex(false)

    private func pass(durable: Bool = false) {
        if durable && gatesOnlyLazyWrites.withLock({ $0 }) { return }
        condition.withLock {
            waiting += 1
            while closed { condition.wait() }
            waiting -= 1
        }
    }

    /// While set, claims fail as on a full or read-only disk; `claims` counts them, failed or not.
    let claimsFail = Mutex(false)
    let claims = Mutex(0)
    /// While set, recordings (outcomes) fail as on a database another process holds locked; counted.
    let writesFail = Mutex(false)
    let failedWrites = Mutex(0)

    private func refuseWriteIfAsked() throws {
        guard writesFail.withLock({ $0 }) else { return }
        failedWrites.withLock { $0 += 1 }
        throw DatabaseError(code: 5, message: "database is locked")
    }

    func claimDue(limit: Int, maxBytes: Int, leaseMilliseconds: Int64, excluding: Set<String>) throws -> [ClaimedMessage] {
        claims.withLock { $0 += 1 }
        if claimsFail.withLock({ $0 }) { throw DatabaseError(code: 13, message: "database or disk is full") }
        return try outbox.claimDue(limit: limit, maxBytes: maxBytes, leaseMilliseconds: leaseMilliseconds,
                                   excluding: excluding)
    }

    func transition(id: String, durable: Bool,
                    _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> DeliveryLifecycle? {
        pass(durable: durable)
        try refuseWriteIfAsked()
        return try outbox.transition(id: id, durable: durable, decide)
    }

    func transition(ids: [String], durable: Bool,
                    _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> [String: DeliveryLifecycle] {
        pass(durable: durable)
        try refuseWriteIfAsked()
        return try outbox.transition(ids: ids, durable: durable, decide)
    }

    func heldReason(among reasons: Set<String>) throws -> String? { try outbox.heldReason(among: reasons) }
    func holdWaiting(reason: String) throws -> Int { try outbox.holdWaiting(reason: reason) }
    func releaseHeld(reasons: Set<String>, limit: Int) throws -> Int {
        try outbox.releaseHeld(reasons: reasons, limit: limit)
    }
    func makeRetriesDue() throws { try outbox.makeRetriesDue() }
    func recoverInterrupted() throws -> Int { try outbox.recoverInterrupted() }
    func lastAccepted() throws -> Int64 { try outbox.lastAccepted() }
    func nextDueAt() throws -> Int64? { try outbox.nextDueAt() }
    func purgeSubjects(deliveredBefore cutoff: Int64) throws { try outbox.purgeSubjects(deliveredBefore: cutoff) }
    func stuck(acceptedBefore cutoff: Int64, limit: Int) throws -> [MessageRecord] {
        try outbox.stuck(acceptedBefore: cutoff, limit: limit)
    }
    /// Says leases are shared (as PostgreSQL's are between relay nodes) when set.
    let sharedLeases = Mutex(false)
    var leasesAreShared: Bool { sharedLeases.withLock { $0 } || outbox.leasesAreShared }
}
