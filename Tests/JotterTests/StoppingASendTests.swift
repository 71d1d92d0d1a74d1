import Foundation
import Synchronization
import Testing
@testable import Jotter

/// When a send must stop — the worker stops, or its lease is lost to another node — an SMTP send that
/// has not handed its memo over yet (before the end of DATA) stops at once and sends nothing, and one
/// that has is waited for, so the memo is never sent twice. A real SMTP server (Debian's aiosmtpd)
/// answers slowly on cue.
@Suite struct StoppingASendTests {
    /// A transport that counts the sends that have returned.
    final class Observed: Transport {
        let inner: any Transport
        let returned = Mutex(0)
        init(_ inner: any Transport) { self.inner = inner }
        func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
            defer { returned.withLock { $0 += 1 } }
            return try inner.send(message)
        }
        func probe() -> Bool { inner.probe() }
        var repeatsHarmlessly: Bool { inner.repeatsHarmlessly }
    }

    struct Fixture {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let smtp: SMTPServer
        let outbox: Outbox
        let gated: GatedQueue
        let transport: Observed
        let worker: DeliveryWorker

        init(rcptDelay: Int = 0, dataDelay: Int = 0, sharedLeases: Bool = false) throws {
            smtp = try SMTPServer(mode: .plain, directory: directory.file("smtp"), delayMilliseconds: dataDelay,
                                  rcptDelayMilliseconds: rcptDelay)
            outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
            gated = GatedQueue(outbox)
            gated.sharedLeases.withLock { $0 = sharedLeases }
            let relay = "smtp://127.0.0.1:\(smtp.port)?tls=none&from=jotter@example.com&to=me@example.com"
            transport = Observed(try RelayURL(relay).transport)
            worker = try DeliveryWorker.started(outbox: outbox, queue: gated, transport: transport, scheduler: scheduler) {
                $0.retryPolicy = RetryPolicy(jitter: 0)
            }
        }

        func stop() {
            worker.stop(timeout: 1, handedOverTimeout: 1)
            outbox.close()
            smtp.stop()
        }

        /// The server has seen `MAIL` for the memo: the send is under way, not handed over.
        func waitForMail() -> Bool { waitForEvent("MAIL") }

        func waitForEvent(_ event: String) -> Bool {
            TestServer.waitUntil(timeout: 30) { smtp.events.contains { $0.hasPrefix(event) } }
        }

        func record(_ id: String) -> MessageRecord? { (try? outbox.history.record(id: id)) ?? nil }

        /// Stores a memo and returns its id, on this thread. (The tests are not `async`: a test resumed
        /// after an `await` may wait for a free thread of Swift's pool, which other tests' waits hold on
        /// two cores, while the real SMTP exchange runs on: a stop meant for before `RCPT`'s reply came
        /// after the memo had gone.)
        func enqueue(_ body: String) throws -> String {
            let result = Mutex<Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>?>(nil)
            let done = DispatchSemaphore(value: 0)
            outbox.enqueue(MemoDraft(body: body)) { outcome in
                result.withLock { $0 = outcome }
                done.signal()
            }
            done.wait()
            return try #require(result.withLock { $0 }).get().id
        }
    }

    /// Stopping while the server has not yet answered `RCPT` (30 s away): the send stops at once, the
    /// memo waits to be retried, and the server never gets it.
    @Test func stoppingEndsASendThatHasNotHandedItsMemoOver() throws {
        let fixture = try Fixture(rcptDelay: 30_000)
        defer { fixture.stop() }
        let id = try fixture.enqueue("not yet handed over")
        #expect(fixture.waitForMail())
        let started = Date()
        fixture.worker.stop(timeout: 25, handedOverTimeout: 25)
        #expect(Date().timeIntervalSince(started) < 20, "stopped without waiting for the RCPT reply")
        #expect(fixture.transport.returned.withLock { $0 } == 1)
        #expect(fixture.record(id)?.status == .retrying)
        #expect(fixture.smtp.received.isEmpty)
    }

    /// Stopping after the whole message went (the reply to the end of DATA takes 12 s, a busy server's
    /// checks): the stop waits for that reply, so the memo is `sent`, and the next start sends nothing.
    @Test func stoppingWaitsForTheAnswerToAMemoTheServerHas() throws {
        let fixture = try Fixture(dataDelay: 12_000)
        defer { fixture.stop() }
        let id = try fixture.enqueue("handed over, answer pending")
        #expect(fixture.waitForEvent("DATA received"))
        fixture.worker.stop(timeout: 1, handedOverTimeout: 60)
        #expect(fixture.record(id)?.status == .sent)
        #expect(fixture.smtp.received.count == 1)
    }

    /// Another node takes the memo over (its lease ran out: here set by hand) while this one waits for the
    /// reply to `RCPT`: at the next renewal this node learns it, its send stops, nothing reaches the
    /// server from it, and the other node's attempt is left as it is.
    @Test func aSendWhoseLeaseAnotherNodeTookStopsAndRecordsNothing() throws {
        let fixture = try Fixture(rcptDelay: 30_000, sharedLeases: true)
        defer { fixture.stop() }
        let id = try fixture.enqueue("taken over")
        #expect(fixture.waitForMail())
        let lease = DeliveryWorker.Configuration().leaseMilliseconds
        try fixture.outbox.transition(id: id) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.interrupted(now: fixture.scheduler.clock.nowMilliseconds())
            try lifecycle.claim(now: fixture.scheduler.clock.nowMilliseconds(), leaseMilliseconds: lease)
        }
        fixture.scheduler.advance(milliseconds: lease / 3)  // the renewal
        #expect(TestServer.waitUntil(timeout: 20) { fixture.transport.returned.withLock { $0 } == 1 },
                "the send stopped before the RCPT reply")
        let record = try #require(fixture.record(id))
        #expect(record.status == .sending && record.attempts == 2, "the other node's attempt: \(record)")
        #expect(fixture.smtp.received.isEmpty)
    }

    /// A relay node stopping while the server holds its memo (the reply to the end of DATA takes 12 s)
    /// keeps renewing that memo's lease while it waits: otherwise another node would take the memo over
    /// when the lease ran out and send it a second time. The stop then records the memo `sent`.
    @Test func aStoppingNodeKeepsTheLeaseOfASendItWaitsFor() throws {
        let fixture = try Fixture(dataDelay: 12_000, sharedLeases: true)
        defer { fixture.stop() }
        let id = try fixture.enqueue("handed over, node stopping")
        #expect(fixture.waitForEvent("DATA received"))
        func leaseUntil() throws -> Int64? {
            try fixture.outbox.database.read { database in
                try database.statement("SELECT lease_until FROM messages WHERE id = ?").firstRow([.text(id)]) { $0.int64(0) }
            }
        }
        let before = try #require(try leaseUntil())
        let stopped = Mutex(false)
        let stopping = Thread {
            fixture.worker.stop(timeout: 1, handedOverTimeout: 60)
            stopped.withLock { $0 = true }
        }
        stopping.start()
        #expect(TestServer.waitUntil(timeout: 20) { fixture.worker.isStopped })
        let lease = DeliveryWorker.Configuration().leaseMilliseconds
        fixture.scheduler.advance(milliseconds: lease / 3 + 1)  // the renewal, while the stop waits
        #expect(TestServer.waitUntil(timeout: 20) { ((try? leaseUntil()) ?? nil).map { $0 > before } == true },
                "renewed during the stop")
        #expect(!stopped.withLock { $0 }, "still waiting for the server's answer")
        #expect(TestServer.waitUntil(timeout: 60) { stopped.withLock { $0 } })
        #expect(fixture.record(id)?.status == .sent)
        #expect(fixture.smtp.received.count == 1)
    }

    /// A transfer whose stop time passes before it hands its memo over (a lease that could not be renewed:
    /// the database was unreachable) stops then, without sending it.
    @Test func aTransferStopsAtItsStopTimeBeforeHandingOver() throws {
        let directory = TemporaryDirectory()
        let smtp = try SMTPServer(mode: .plain, directory: directory.file("smtp"), rcptDelayMilliseconds: 30_000)
        defer { smtp.stop() }
        let transport = try RelayURL("smtp://127.0.0.1:\(smtp.port)?tls=none&from=a@example.com&to=b@example.com").transport
        var message = MailMessage(id: "stop-time", date: 1_764_581_405_000, from: MailAddress(address: "a@example.com"),
                                  to: MailAddress(address: "b@example.com"), subject: "s", body: "b")
        let progress = SendProgress()
        progress.stop(atMonotonicMilliseconds: Int64(monotonicNanoseconds() / 1_000_000) + 1500)
        message.progress = progress
        let started = Date()
        #expect(throws: DeliveryFailure.self) { try transport.send(message) }
        #expect(Date().timeIntervalSince(started) < 20, "stopped before the RCPT reply")
        #expect(!progress.isHandedOver)
        #expect(smtp.received.isEmpty)
    }
}
