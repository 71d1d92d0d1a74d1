import Foundation
import Synchronization
import Testing
@testable import Jotter

/// The relay's store contract, run against both stores: SQLite in the data directory (one node) and
/// PostgreSQL (a throwaway cluster), so a relay decides the same whichever it keeps its state in. On
/// PostgreSQL also as two nodes would: two connection pools racing for one limit and one key.
@Suite(.holdingSharedPostgres) struct RelayStoreContractTests {
    enum Kind: String, CaseIterable, Sendable { case sqlite, postgres }

    /// A store of `kind`, and what to stop when done.
    final class Subject: @unchecked Sendable {
        let store: any RelayStore
        private let directory = TemporaryDirectory()
        private var outbox: Outbox?
        let database: SharedPostgres.Database?

        init(_ kind: Kind) throws {
            switch kind {
            case .sqlite:
                let outbox = try Outbox(path: directory.file("jotter.db"), key: try SymmetricKey.random())
                self.outbox = outbox
                database = nil
                store = try SQLiteRelayStore(database: outbox.database)
            case .postgres:
                let database = try SharedPostgres.database()
                self.database = database
                store = try PostgresRelayStore(url: database.url)
            }
        }

        func stop() {
            outbox?.close()
            database?.drop()
        }
    }

    static let kinds: [Kind] = PostgresCluster.available ? Kind.allCases : [.sqlite]
    static let t0: Int64 = 1_800_000_000_000

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test(arguments: kinds)
    func invitesWorkOnceUntilTheyExpire(kind: Kind) throws {
        let subject = try Subject(kind)
        defer { subject.stop() }
        let store = subject.store
        try store.createInvite(hash: Self.bytes("invite-1"), now: Self.t0, expiresAt: Self.t0 + 1000)
        #expect(try store.registerDevice(id: "d1", secretHash: Self.bytes("s1"), inviteHash: Self.bytes("invite-1"), now: Self.t0))
        #expect(try !store.registerDevice(id: "d2", secretHash: Self.bytes("s2"), inviteHash: Self.bytes("invite-1"), now: Self.t0),
                "an invite works once")
        try store.createInvite(hash: Self.bytes("invite-2"), now: Self.t0, expiresAt: Self.t0 + 1000)
        #expect(try !store.registerDevice(id: "d3", secretHash: Self.bytes("s3"), inviteHash: Self.bytes("invite-2"), now: Self.t0 + 1000),
                "an expired invite works no more")
        #expect(try !store.registerDevice(id: "d4", secretHash: Self.bytes("s4"), inviteHash: Self.bytes("unknown"), now: Self.t0))
        #expect(try store.registerDevice(id: "d5", secretHash: Self.bytes("s5"), inviteHash: nil, now: Self.t0))
        #expect(try store.device(secretHash: Self.bytes("s1")) == "d1")
        #expect(try store.device(secretHash: Self.bytes("s5")) == "d5")
        #expect(try store.device(secretHash: Self.bytes("s3")) == nil)
    }

    @Test(arguments: kinds)
    func codesFollowTheirRules(kind: Kind) throws {
        let subject = try Subject(kind)
        defer { subject.stop() }
        let store = subject.store
        var policy = CodePolicy()
        policy.perAddressPerHour = 2
        func issue(_ code: String, at now: Int64, device: String = "d1") throws -> CodeIssueOutcome {
            try store.issueCode(CodeIssue(deviceID: device, addressKey: Self.bytes("ana"), mailboxKey: Self.bytes("ana"), sealedAddress: Self.bytes("sealed-ana"),
                                          codeHash: Self.bytes(code), now: now, policy: policy, charges: []))
        }
        #expect(try issue("111111", at: Self.t0) == .issued([]))
        guard case .limited(let reason, let wait, _) = try issue("222222", at: Self.t0 + 30_000) else {
            Issue.record("a second code within a minute")
            return
        }
        #expect(reason == "cooldown" && wait == 30)
        #expect(try issue("333333", at: Self.t0 + 61_000) == .issued([]), "after the cooldown; replaces the first")
        guard case .limited(let capped, _, _) = try issue("444444", at: Self.t0 + 130_000) else {
            Issue.record("a third code within the hour")
            return
        }
        #expect(capped == "address_hourly")

        let confirm = { (code: String, now: Int64) throws -> ConfirmOutcome in
            try store.confirmCode(deviceID: "d1", addressKey: Self.bytes("ana"), presentedHash: Self.bytes(code), now: now,
                                  maximumAttempts: 3)
        }
        #expect(try confirm("111111", Self.t0 + 70_000) == .wrong(attemptsLeft: 2), "the replaced code is no longer good")
        #expect(try confirm("333333", Self.t0 + 70_000) == .verified)
        #expect(try confirm("333333", Self.t0 + 71_000) == .verified,
                "the right code again (the answer to the first was lost): verified, as then, and nothing more")
        #expect(try confirm("999999", Self.t0 + 71_000) == .spent, "any other code: spent")
        #expect(try store.confirmCode(deviceID: "d2", addressKey: Self.bytes("ana"), presentedHash: Self.bytes("333333"),
                                      now: Self.t0 + 71_000, maximumAttempts: 3) == .noCode, "another device's code")
        let destinations = try store.destinations(deviceID: "d1")
        #expect(destinations.map(\.sealedAddress) == [Self.bytes("sealed-ana")])
        #expect(destinations.first?.verifiedAt == Self.t0 + 70_000)
        #expect(try store.removeDestination(deviceID: "d1", addressKey: Self.bytes("ana")) == true)
        #expect(try confirm("333333", Self.t0 + 72_000) == .noCode, "an address removed takes its code along")

        // Burnt by wrong tries; expired.
        #expect(try store.issueCode(CodeIssue(deviceID: "d1", addressKey: Self.bytes("bob"), mailboxKey: Self.bytes("bob"), sealedAddress: Self.bytes("b"),
                                              codeHash: Self.bytes("555555"), now: Self.t0, policy: policy, charges: [])) == .issued([]))
        let wrong = { (now: Int64) throws -> ConfirmOutcome in
            try store.confirmCode(deviceID: "d1", addressKey: Self.bytes("bob"), presentedHash: Self.bytes("000000"), now: now,
                                  maximumAttempts: 3)
        }
        #expect(try wrong(Self.t0 + 1) == .wrong(attemptsLeft: 2))
        #expect(try wrong(Self.t0 + 2) == .wrong(attemptsLeft: 1))
        #expect(try wrong(Self.t0 + 3) == .wrong(attemptsLeft: 0))
        #expect(try store.confirmCode(deviceID: "d1", addressKey: Self.bytes("bob"), presentedHash: Self.bytes("555555"),
                                      now: Self.t0 + 4, maximumAttempts: 3) == .spent, "burnt after the last wrong try")
        #expect(try store.issueCode(CodeIssue(deviceID: "d1", addressKey: Self.bytes("cy"), mailboxKey: Self.bytes("cy"), sealedAddress: Self.bytes("c"),
                                              codeHash: Self.bytes("666666"), now: Self.t0, policy: policy, charges: [])) == .issued([]))
        #expect(try store.confirmCode(deviceID: "d1", addressKey: Self.bytes("cy"), presentedHash: Self.bytes("666666"),
                                      now: Self.t0 + policy.lifetimeMilliseconds, maximumAttempts: 3) == .expired)
    }

    @Test(arguments: kinds)
    func limitsSpendAllOrNothingAndResetWithTheirWindow(kind: Kind) throws {
        let subject = try Subject(kind)
        defer { subject.stop() }
        let store = subject.store
        let minute = LimitCharge(policy: "device-minute", partition: Self.bytes("d1"), quota: 2, windowSeconds: 60)
        let day = LimitCharge(policy: "device-day", partition: Self.bytes("d1"), quota: 3, windowSeconds: 86_400)
        let start = minute.windowStart(now: Self.t0)
        guard case .allowed(let first) = try store.spend([minute, day], now: start) else { Issue.record("first"); return }
        #expect(first.map(\.remaining) == [1, 2])
        #expect(try store.spend([minute, day], now: start + 1).isAllowed)
        guard case .refused(let states) = try store.spend([minute, day], now: start + 2) else { Issue.record("third"); return }
        #expect(states.map(\.refused) == [true, false] && states[0].resetSeconds == 60)
        // Nothing was spent by the refusal: the day still has one left for the next minute.
        #expect(try store.spend([minute, day], now: start + 60_000).isAllowed)
        #expect(try !store.spend([minute, day], now: start + 120_000).isAllowed, "the day's three are spent")
    }

    /// A charge given back (a retry another request had already made) is as if never spent, in its own
    /// window; never below nothing.
    @Test(arguments: kinds)
    func aRefundGivesBackWhatWasSpent(kind: Kind) throws {
        let subject = try Subject(kind)
        defer { subject.stop() }
        let store = subject.store
        let minute = LimitCharge(policy: "device-minute", partition: Self.bytes("d1"), quota: 2, windowSeconds: 60)
        let start = minute.windowStart(now: Self.t0)
        #expect(try store.spend([minute], now: start).isAllowed)
        #expect(try store.spend([minute], now: start + 1).isAllowed)
        #expect(try !store.spend([minute], now: start + 2).isAllowed, "two of two spent")
        try store.refund([minute], spentAt: start + 1)
        guard case .allowed(let states) = try store.spend([minute], now: start + 3) else { Issue.record("after refund"); return }
        #expect(states.map(\.remaining) == [0])
        try store.refund([minute], spentAt: start + 120_000)  // a window with nothing spent: stays at nothing
        guard case .allowed(let later) = try store.spend([minute], now: start + 120_001) else { Issue.record("later"); return }
        #expect(later.map(\.remaining) == [1])
    }

    @Test(arguments: kinds)
    func messagesAreAdmittedOncePerKey(kind: Kind) throws {
        let subject = try Subject(kind)
        defer { subject.stop() }
        let store = subject.store
        _ = try store.registerDevice(id: "d1", secretHash: Self.bytes("s1"), inviteHash: nil, now: Self.t0)
        var policy = CodePolicy()
        policy.cooldownMilliseconds = 0
        _ = try store.issueCode(CodeIssue(deviceID: "d1", addressKey: Self.bytes("ana"), mailboxKey: Self.bytes("ana"), sealedAddress: Self.bytes("a"),
                                          codeHash: Self.bytes("123456"), now: Self.t0, policy: policy, charges: []))
        let key = IdempotencyHashes(keyHash: Self.bytes("k1"), payloadHash: Self.bytes("p1"))
        func admit(_ hashes: IdempotencyHashes?, to address: String = "ana", at now: Int64) throws -> AdmissionOutcome {
            try store.admitMessage(MessageAdmission(deviceID: "d1", addressKey: Self.bytes(address), idempotency: hashes,
                                                    charges: [], now: now, leaseUntil: now + 30_000, expiresAt: now + 86_400_000))
        }
        #expect(try admit(key, at: Self.t0) == .unverified, "not verified yet")
        #expect(try store.confirmCode(deviceID: "d1", addressKey: Self.bytes("ana"), presentedHash: Self.bytes("123456"),
                                      now: Self.t0, maximumAttempts: 5) == .verified)
        #expect(try admit(key, at: Self.t0 + 1) == .admitted(reservedAt: Self.t0 + 1, limits: []))
        #expect(try admit(key, at: Self.t0 + 2) == .inFlight(retryAfterSeconds: 30), "held by the request storing it, 30 s more")
        #expect(try admit(IdempotencyHashes(keyHash: Self.bytes("k1"), payloadHash: Self.bytes("p2")), at: Self.t0 + 2) == .conflict(messageID: nil))
        try store.completeMessage(deviceID: "d1", keyHash: Self.bytes("k1"), messageID: "m1", now: Self.t0 + 3)
        #expect(try admit(key, at: Self.t0 + 4) == .replayed(messageID: "m1"))
        #expect(try admit(IdempotencyHashes(keyHash: Self.bytes("k1"), payloadHash: Self.bytes("p2")), at: Self.t0 + 4)
                == .conflict(messageID: "m1"), "the message the key was used for")
        #expect(try store.messageOwner(id: "m1") == "d1")
        #expect(try store.messageOwner(id: "m2") == nil)
        // A reservation whose holder died is taken over after its lease, with the same reservation time.
        let orphan = IdempotencyHashes(keyHash: Self.bytes("k2"), payloadHash: Self.bytes("p"))
        #expect(try admit(orphan, at: Self.t0 + 10) == .admitted(reservedAt: Self.t0 + 10, limits: []))
        #expect(try admit(orphan, at: Self.t0 + 40_011) == .admitted(reservedAt: Self.t0 + 10, limits: []))
        // An abandoned reservation frees its key.
        try store.abandonMessage(keyHash: Self.bytes("k2"))
        #expect(try admit(orphan, at: Self.t0 + 40_012) == .admitted(reservedAt: Self.t0 + 40_012, limits: []))
        // Purge forgets expired keys: the same key is new again a day later.
        try store.purge(now: Self.t0 + 86_400_000 + 10, messagesBefore: Self.t0 + 3, devicesBefore: Self.t0)
        #expect(try admit(key, at: Self.t0 + 86_400_000 + 20) == .admitted(reservedAt: Self.t0 + 86_400_000 + 20, limits: []))
        #expect(try store.messageOwner(id: "m1") == "d1", "a message's owner is kept for its retention")
        try store.purge(now: Self.t0 + 86_400_000 + 30, messagesBefore: Self.t0 + 4, devicesBefore: Self.t0)
        #expect(try store.messageOwner(id: "m1") == nil, "then forgotten")
    }

    /// Two relay nodes on one PostgreSQL (two pools): 60 requests for one device, 30 allowed — exactly
    /// 30, however the requests interleave; and one `Idempotency-Key` sent to both at once is admitted once.
    @Test(.enabled(if: PostgresCluster.available, "needs PostgreSQL (apt-get install postgresql)"))
    func twoNodesShareOneLimitAndOneKey() throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let nodes = [try PostgresRelayStore(url: database.url), try PostgresRelayStore(url: database.url)]
        let charge = LimitCharge(policy: "device-minute", partition: Self.bytes("d1"), quota: 30, windowSeconds: 60)
        let now = charge.windowStart(now: Self.t0) + 1
        let allowed = Atomic<Int>(0), failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 60) { index in
            do {
                if try nodes[index % 2].spend([charge], now: now).isAllowed { allowed.add(1, ordering: .relaxed) }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        #expect(allowed.load(ordering: .relaxed) == 30)

        _ = try nodes[0].registerDevice(id: "d1", secretHash: Self.bytes("s1"), inviteHash: nil, now: Self.t0)
        var policy = CodePolicy()
        policy.cooldownMilliseconds = 0
        _ = try nodes[0].issueCode(CodeIssue(deviceID: "d1", addressKey: Self.bytes("ana"), mailboxKey: Self.bytes("ana"), sealedAddress: Self.bytes("a"),
                                             codeHash: Self.bytes("123456"), now: Self.t0, policy: policy, charges: []))
        _ = try nodes[1].confirmCode(deviceID: "d1", addressKey: Self.bytes("ana"), presentedHash: Self.bytes("123456"),
                                     now: Self.t0, maximumAttempts: 5)
        let admitted = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 20) { index in
            let outcome = try? nodes[index % 2].admitMessage(MessageAdmission(
                deviceID: "d1", addressKey: Self.bytes("ana"),
                idempotency: IdempotencyHashes(keyHash: Self.bytes("same-key"), payloadHash: Self.bytes("p")),
                charges: [], now: Self.t0 + 5, leaseUntil: Self.t0 + 30_000, expiresAt: Self.t0 + 86_400_000))
            if case .admitted = outcome { admitted.add(1, ordering: .relaxed) }
        }
        #expect(admitted.load(ordering: .relaxed) == 1, "one key, one message")
    }
}

extension LimitVerdict {
    var isAllowed: Bool { if case .allowed = self { true } else { false } }
}
