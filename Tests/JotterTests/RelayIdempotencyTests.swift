import Foundation
import Synchronization
import Testing
@testable import Jotter

/// `Idempotency-Key` on `POST /v1/messages`, with the mail APIs' semantics: the same key and payload
/// get the stored answer and store nothing; another payload is `409`; a key still in flight is `409`
/// retryable; a key held by a process that died is taken over without storing its message twice;
/// keys are remembered 24 hours (configurable) and are each device's own. On both stores, SQLite and
/// PostgreSQL.
@Suite(.holdingSharedPostgres) struct RelayIdempotencyTests {
    /// A relay on manual time and a store of the given kind, with one device that has verified
    /// `me@example.com`.
    final class Fixture: @unchecked Sendable {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let store: RelayTestStore
        private(set) var relay: RelayServer
        let secret: String
        let deviceID: String
        let configure: (inout RelayConfiguration) -> Void

        init(_ kind: RelayStoreKind, configure: @escaping (inout RelayConfiguration) -> Void = { _ in }) throws {
            self.configure = configure
            let store = try RelayTestStore(kind)
            self.store = store
            relay = try store.relay(in: directory, scheduler: scheduler, configure: configure)
            do {
                (deviceID, secret) = try relay.register()
                try relay.verify(secret, "me@example.com")
            } catch {
                relay.stop()
                store.release()
                throw error
            }
        }

        var now: Int64 { scheduler.clock.nowMilliseconds() }

        func send(key: String?, subject: String? = "s", body: String = "hello", to: String = "me@example.com",
                  secret: String? = nil) throws -> RawHTTP.Response {
            try relay.send(secret ?? self.secret, to: to, subject: subject, body: body, key: key)
        }

        func id(_ response: RawHTTP.Response) -> String? {
            (response.json as? [String: Any])?["id"] as? String
        }

        /// How many messages with `body` reached `me@example.com`, once the relay has delivered
        /// everything it stored (its worker stops: call it last).
        func delivered(body: String) throws -> Int {
            #expect(try relay.finishDeliveries(), "the relay's outbox did not settle")
            return try relay.mails(to: "me@example.com").filter { RelayServer.sameBody($0.message["body"], body) }.count
        }

        /// What a request that died mid-way leaves: the key reserved (as `send` reserves it, through a
        /// second handle on the store), and optionally its message already in the relay's outbox.
        func reserve(key: String, subject: String? = "s", body: String = "hello",
                     storeMessage: Bool = false) throws -> (reservedAt: Int64, messageID: String?) {
            let service = relay.application.service
            let to = try #require(DestinationAddress("me@example.com"))
            let hashes = service.idempotencyHashes(deviceID: deviceID, key: key, to: to, subject: subject, body: body)
            let store = try self.store.secondHandle(on: relay)
            let outcome = try store.admitMessage(MessageAdmission(
                deviceID: deviceID, addressKey: service.addressKey(to), idempotency: hashes, charges: [], now: now,
                leaseUntil: now + 30_000, expiresAt: now + 86_400_000))
            guard case .admitted(let reservedAt?, _) = outcome else {
                Issue.record("not admitted: \(outcome)")
                return (0, nil)
            }
            guard storeMessage else { return (reservedAt, nil) }
            let draft = MemoDraft(subject: subject, body: body,
                                  idempotencyKey: RelayService.outboxKey(hashes, reservedAt: reservedAt),
                                  recipient: to.address)
            let stored = Mutex<String?>(nil)
            let done = DispatchSemaphore(value: 0)
            relay.messages.enqueue(draft) { result in
                stored.withLock { $0 = try? result.get().id }
                done.signal()
            }
            done.wait()
            return (reservedAt, stored.withLock { $0 })
        }

        /// Stops the relay and starts it again on the same data directory and store.
        func restart() throws {
            relay.stop()
            relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, clock: scheduler.clock,
                                    scheduler: scheduler, configure: configure)
        }

        func stop() {
            relay.stop()
            store.release()
        }
    }

    @Test(arguments: RelayStoreKind.available)
    func theSameKeyAndPayloadGetTheStoredAnswerAndSpendNothing(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let first = try fixture.send(key: "memo-1")
        #expect(first.status == 202 && first.header("Idempotent-Replayed") == nil)
        let id = try #require(fixture.id(first))
        for _ in 1...3 {
            let again = try fixture.send(key: "memo-1")
            #expect(again.status == 202 && fixture.id(again) == id && again.header("Idempotent-Replayed") == "true")
        }
        let next = try fixture.send(key: "memo-2")
        #expect(RelayLimitTests.remaining(next.header("RateLimit"))["device-minute"]?.r == 28,
                "replays spent no limit")
        #expect(try fixture.delivered(body: "hello") == 2, "a replay stores nothing: memo-1 and memo-2, once each")
    }

    @Test(arguments: RelayStoreKind.available)
    func aReplayIsAnsweredEvenWhenTheLimitIsSpent(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) { $0.limits.devicePerMinute = 1 }
        defer { fixture.stop() }
        let id = fixture.id(try fixture.send(key: "k1"))
        let replay = try fixture.send(key: "k1")
        #expect(replay.status == 202 && fixture.id(replay) == id)
        #expect(try fixture.send(key: "k2").status == 429)
    }

    @Test(arguments: RelayStoreKind.available)
    func anotherPayloadUnderTheSameKeyIsAConflict(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        try fixture.relay.verify(fixture.secret, "alt@example.com")
        let id = fixture.id(try fixture.send(key: "k", subject: "s", body: "hello"))
        let variants: [(subject: String?, body: String, to: String)] = [
            ("s", "hello!", "me@example.com"), ("S", "hello", "me@example.com"), (nil, "hello", "me@example.com"),
            ("", "hello", "me@example.com"), ("s", "hello", "alt@example.com"),
        ]
        for variant in variants {
            let conflict = try fixture.send(key: "k", subject: variant.subject, body: variant.body, to: variant.to)
            #expect(conflict.status == 409 && conflict.errorCode == "idempotency_conflict", "\(variant)")
            #expect(conflict.header("Retry-After") == nil, "a conflict is not worth retrying")
        }
        #expect(fixture.id(try fixture.send(key: "k", subject: "s", body: "hello")) == id)
    }

    @Test(arguments: RelayStoreKind.available)
    func keysAreEachDevicesOwnAndMessagesWithoutOneAreEachNew(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let other = try fixture.relay.register()
        fixture.scheduler.clock.advance(milliseconds: 60_000)  // the address's code cooldown
        try fixture.relay.verify(other.secret, "me@example.com")
        let mine = fixture.id(try fixture.send(key: "shared-key"))
        let theirs = fixture.id(try fixture.send(key: "shared-key", secret: other.secret))
        #expect(mine != nil && theirs != nil && mine != theirs)
        let a = fixture.id(try fixture.send(key: nil)), b = fixture.id(try fixture.send(key: nil))
        #expect(a != nil && b != nil && a != b)
    }

    @Test(arguments: RelayStoreKind.available)
    func aKeyInFlightIsAConflictWorthRetrying(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        _ = try fixture.reserve(key: "busy")
        let busy = try fixture.send(key: "busy")
        #expect(busy.status == 409 && busy.errorCode == "idempotency_in_flight")
        #expect(busy.header("Retry-After") == "5", "a few seconds: the holder usually answers at once")
        let other = try fixture.send(key: "busy", body: "not the same")
        #expect(other.errorCode == "idempotency_conflict", "another payload is a conflict even while in flight")
    }

    @Test(arguments: RelayStoreKind.available)
    func concurrentRequestsWithOneKeyStoreOneMessage(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let answers = Mutex<[RawHTTP.Response]>([])
        DispatchQueue.concurrentPerform(iterations: 24) { _ in
            if let response = try? fixture.send(key: "raced", body: "one memo") {
                answers.withLock { $0.append(response) }
            }
        }
        let all = answers.withLock { $0 }
        #expect(all.count == 24)
        let ids = Set(all.filter { $0.status == 202 }.compactMap(fixture.id))
        #expect(ids.count == 1, "one message, one id: \(ids)")
        #expect(all.allSatisfy { $0.status == 202 || $0.errorCode == "idempotency_in_flight" },
                "\(all.map(\.status))")
        // Once settled, every retry gets the stored answer.
        let settled = try fixture.send(key: "raced", body: "one memo")
        #expect(settled.status == 202 && ids.contains(fixture.id(settled) ?? ""))
        #expect(try fixture.delivered(body: "one memo") == 1, "one message stored, sent once")
    }

    @Test(arguments: RelayStoreKind.available)
    func aKeyHeldByARequestThatDiedIsTakenOverAfterItsLease(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        _ = try fixture.reserve(key: "orphan")
        // Retry-After: a few seconds, never past the end of the holder's lease.
        let busy = try fixture.send(key: "orphan")
        #expect(busy.errorCode == "idempotency_in_flight" && busy.header("Retry-After") == "5", "\(busy.text)")
        fixture.scheduler.clock.advance(milliseconds: 27_000)
        #expect(try fixture.send(key: "orphan").header("Retry-After") == "3")
        fixture.scheduler.clock.advance(milliseconds: 2_999)
        let last = try fixture.send(key: "orphan")
        #expect(last.errorCode == "idempotency_in_flight" && last.header("Retry-After") == "1")
        fixture.scheduler.clock.advance(milliseconds: 1)
        let taken = try fixture.send(key: "orphan")
        #expect(taken.status == 202, "\(taken.text)")
        #expect(try fixture.send(key: "orphan").header("Idempotent-Replayed") == "true")
    }

    @Test(arguments: RelayStoreKind.available)
    func aMessageStoredBeforeTheCrashIsNotStoredOrSentTwice(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let (_, storedID) = try fixture.reserve(key: "crashed", subject: "Once", storeMessage: true)
        let id = try #require(storedID)
        fixture.scheduler.clock.advance(milliseconds: 30_000)
        let retried = try fixture.send(key: "crashed", subject: "Once")
        #expect(retried.status == 202 && fixture.id(retried) == id, "the stored message is the answer")
        #expect(TestServer.waitUntil(timeout: 20) { fixture.relay.status(fixture.secret, of: id) == "sent" },
                "the message is the device's: its status is readable")
        #expect(try fixture.relay.finishDeliveries(), "the relay's outbox did not settle")
        #expect(try fixture.relay.mails(to: "me@example.com").filter { $0.message["subject"] as? String == "Once" }
            .count == 1, "stored once, sent once")
    }

    /// A relay on PostgreSQL reached through a `CommitCutter` (files in `directory`); stop both.
    static func behindCutter(dropOn: String? = nil,
                             in directory: TemporaryDirectory) throws -> (Fixture, CommitCutter) {
        let slot = CommitCutterSlot()
        let fixture = try Fixture(.postgres) { configuration in
            guard case .postgres(let url) = configuration.store,
                  let cutter = try? CommitCutter(url: url, directory: directory.file("cutter"), dropOn: dropOn) else {
                return
            }
            slot.value = cutter
            configuration.store = .postgres(url: cutter.url)
        }
        guard let cutter = slot.value else {
            fixture.stop()
            throw FixtureProcess.Failure(description: "the proxy did not start")
        }
        return (fixture, cutter)
    }

    /// PostgreSQL: the connection drops after the COMMIT that stored a message was sent and before its
    /// answer came (`CommitCutter`). The relay cannot know whether the message is stored, says so
    /// (`503 storage_outcome_unknown`, Retry-After past the key's lease) and keeps the key reserved: a
    /// retry at once is `in flight`, and one after the lease finds the message stored. It is stored
    /// once and sent once — given up at once, the key let the retry store (and send) it again.
    @Test(.enabled(if: PostgresCluster.available, "needs PostgreSQL"))
    func aCommitWhoseAnswerWasLostIsNeitherStoredNorSentTwice() throws {
        let directory = TemporaryDirectory()
        let (fixture, cutter) = try Self.behindCutter(in: directory)
        defer {
            fixture.stop()
            cutter.stop()
        }
        cutter.arm()
        let lost = try fixture.send(key: "cut", subject: "Once", body: "cut once")
        #expect(cutter.cuts == 1, "the COMMIT's answer was lost")
        #expect(lost.status == 503 && lost.errorCode == "storage_outcome_unknown", "\(lost.text)")
        #expect(lost.text.contains("same Idempotency-Key"), "\(lost.text)")
        #expect(lost.header("Retry-After") == "31", "after the key's 30-second lease")
        // A millisecond on: a new reservation now would name a new outbox key, and store a second message.
        fixture.scheduler.clock.advance(milliseconds: 1)
        let early = try fixture.send(key: "cut", subject: "Once", body: "cut once")
        #expect(early.status == 409 && early.errorCode == "idempotency_in_flight", "\(early.text)")
        fixture.scheduler.clock.advance(milliseconds: 29_999)
        let retried = try fixture.send(key: "cut", subject: "Once", body: "cut once")
        #expect(retried.status == 202, "\(retried.text)")
        #expect(try fixture.send(key: "cut", subject: "Once", body: "cut once").header("Idempotent-Replayed") == "true")
        // Without a key, and for a code, a retry is not safe: the answer does not promise it is.
        cutter.arm()
        let keyless = try fixture.send(key: nil, subject: "No key", body: "cut without a key")
        #expect(keyless.errorCode == "storage_outcome_unknown" && keyless.text.contains("may arrive twice")
                && !keyless.text.contains("will not be sent twice"), "\(keyless.text)")
        cutter.arm()
        let code = try fixture.relay.requestCode(fixture.secret, "other@example.com")
        #expect(code.errorCode == "storage_outcome_unknown" && code.text.contains("look in the inbox")
                && !code.text.contains("Idempotency-Key"), "\(code.text)")
        #expect(try fixture.delivered(body: "cut once") == 1, "stored once, sent once")
    }

    /// PostgreSQL: the message is stored, then the connection drops while the relay records it as the
    /// device's (`relay_messages`). A `202` then would leave its status a `404` for good, which its composer
    /// reads as "delivered and forgotten" and erases its copy. So the answer is `503 storage_outcome_unknown`
    /// past the key's lease, and the retry after it finds the message, records it, and its status is readable.
    @Test(.enabled(if: PostgresCluster.available, "needs PostgreSQL"))
    func aMessageStoredButNotRecordedAsTheDevicesIsNotAnsweredAccepted() throws {
        let directory = TemporaryDirectory()
        let (fixture, cutter) = try Self.behindCutter(dropOn: "INSERT INTO relay_messages", in: directory)
        defer {
            fixture.stop()
            cutter.stop()
        }
        cutter.arm()
        let lost = try fixture.send(key: "unrecorded", subject: "Mine", body: "stored, not yet recorded")
        #expect(cutter.cuts == 1, "the connection dropped while recording the message")
        #expect(lost.status == 503 && lost.errorCode == "storage_outcome_unknown", "\(lost.text)")
        #expect(lost.header("Retry-After") == "31", "after the key's 30-second lease")
        fixture.scheduler.clock.advance(milliseconds: 30_000)
        let retried = try fixture.send(key: "unrecorded", subject: "Mine", body: "stored, not yet recorded")
        #expect(retried.status == 202, "\(retried.text)")
        let id = try #require(fixture.id(retried))
        #expect(TestServer.waitUntil(timeout: 20) { fixture.relay.status(fixture.secret, of: id) == "sent" },
                "the message is the device's: its status is readable")
        #expect(try fixture.delivered(body: "stored, not yet recorded") == 1, "stored once, sent once")
    }

    /// One node (SQLite): the data directory's lock proves the process that held a key is gone, so the
    /// restart frees it at once. Several nodes (PostgreSQL): a restarting node cannot tell its own
    /// reservations from another node's live ones, so the key waits out its lease (30 s).
    @Test(arguments: RelayStoreKind.available)
    func aRestartOrElseTheLeaseFreesKeysHeldByTheProcessThatStopped(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        _ = try fixture.reserve(key: "held")
        try fixture.restart()
        let sent = try fixture.send(key: "held")
        switch kind {
        case .sqlite:
            #expect(sent.status == 202, "\(sent.text)")
        case .postgres:
            #expect(sent.status == 409 && sent.errorCode == "idempotency_in_flight", "\(sent.text)")
            fixture.scheduler.clock.advance(milliseconds: 29_999)
            #expect(try fixture.send(key: "held").errorCode == "idempotency_in_flight")
            fixture.scheduler.clock.advance(milliseconds: 1)
            let taken = try fixture.send(key: "held")
            #expect(taken.status == 202, "free when its lease ends: \(taken.text)")
        }
    }

    @Test(arguments: RelayStoreKind.available)
    func keysAreRememberedForTheirRetentionThenForgotten(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let first = fixture.id(try fixture.send(key: "daily"))
        fixture.scheduler.clock.advance(milliseconds: 86_400_000 - 1)
        #expect(fixture.id(try fixture.send(key: "daily")) == first, "remembered for 24 hours")
        fixture.scheduler.clock.advance(milliseconds: 1)
        let later = try fixture.send(key: "daily")
        #expect(later.status == 202 && later.header("Idempotent-Replayed") == nil && fixture.id(later) != first)

        let short = try Fixture(kind) { $0.idempotencyRetentionMilliseconds = 2 * 3_600_000 }
        defer { short.stop() }
        let kept = short.id(try short.send(key: "k"))
        short.scheduler.clock.advance(milliseconds: 2 * 3_600_000)
        #expect(short.id(try short.send(key: "k")) != kept)
    }
}
