import Testing
@testable import Jotter

/// The delivery state machine and the retry schedule: pure, no I/O, the test passes `now`.
@Suite struct DeliveryLifecycleTests {
    private static let now: Int64 = 1_764_581_405_000
    private static let transient = DeliveryFailure(.network, permanent: false)

    // MARK: Lifecycle: every transition, legal and not

    private static let lease: Int64 = 120_000
    private static let policy = RetryPolicy()

    /// A lifecycle in each status, as a row might hold it.
    private static let everyStatus: [DeliveryLifecycle] = [
        .accepted(now: now),
        DeliveryLifecycle(status: .sending, attempts: 1, leaseUntil: now + lease),
        DeliveryLifecycle(status: .retrying, attempts: 1, backoffStep: 1, nextAttemptAt: now + 1000, lastError: "timeout"),
        DeliveryLifecycle(status: .sent, attempts: 1, deliveredAt: now),
        DeliveryLifecycle(status: .failed, attempts: 1, lastError: "auth"),
        DeliveryLifecycle(status: .held, lastError: "corrupt"),
        DeliveryLifecycle(status: .cancelled),
    ]

    @Test func queuedThenSendingThenSent() throws {
        var lifecycle = DeliveryLifecycle.accepted(now: Self.now)
        #expect(lifecycle.status == .queued && lifecycle.nextAttemptAt == Self.now && lifecycle.attempts == 0)
        try lifecycle.claim(now: Self.now, leaseMilliseconds: Self.lease)
        #expect(lifecycle == DeliveryLifecycle(status: .sending, attempts: 1, nextAttemptAt: Self.now,
                                               leaseUntil: Self.now + Self.lease))
        try lifecycle.delivered(now: Self.now + 120)
        #expect(lifecycle == DeliveryLifecycle(status: .sent, attempts: 1, deliveredAt: Self.now + 120))
        #expect(lifecycle.erasesBody)
    }

    @Test(arguments: [0.0, 0.25, 0.5, 0.999_999])
    func transientFailureSchedulesARetryAboutOneSecondLater(random: Double) throws {
        var lifecycle = DeliveryLifecycle.accepted(now: Self.now)
        try lifecycle.claim(now: Self.now, leaseMilliseconds: Self.lease)
        try lifecycle.attemptFailed(Self.transient, now: Self.now, policy: Self.policy, random: random)
        #expect(lifecycle.status == .retrying)
        #expect(lifecycle.backoffStep == 1 && lifecycle.leaseUntil == nil && lifecycle.lastError == "network")
        #expect((Self.now + 1000)...(Self.now + 1250) ~= lifecycle.nextAttemptAt ?? 0)
        #expect(!lifecycle.erasesBody)
    }

    @Test func retriesBackOffExponentiallyUntilDelivered() throws {
        var lifecycle = DeliveryLifecycle.accepted(now: Self.now)
        var now = Self.now
        var delays: [Int64] = []
        for expectedAttempt in 1...6 {
            try lifecycle.claim(now: now, leaseMilliseconds: Self.lease)
            #expect(lifecycle.attempts == expectedAttempt)
            try lifecycle.attemptFailed(DeliveryFailure(.timeout, permanent: false), now: now, policy: Self.policy,
                                        random: 0)
            let at = try #require(lifecycle.nextAttemptAt)
            delays.append(at - now)
            now = at
        }
        #expect(delays == [1000, 2000, 4000, 8000, 16000, 32000])
        try lifecycle.claim(now: now, leaseMilliseconds: Self.lease)
        #expect(lifecycle.attempts == 7)
        try lifecycle.delivered(now: now + 5)
        #expect(lifecycle.status == .sent && lifecycle.deliveredAt == now + 5 && lifecycle.lastError == nil)
    }

    @Test func aRetryMayBeClaimedExactlyWhenDueOrLaterButNotBefore() throws {
        let waiting = DeliveryLifecycle(status: .retrying, attempts: 2, backoffStep: 2, nextAttemptAt: Self.now)
        var early = waiting
        #expect(throws: DeliveryLifecycle.Refusal(transition: "claim", from: .retrying)) {
            try early.claim(now: Self.now - 1, leaseMilliseconds: Self.lease)
        }
        #expect(early == waiting, "a refused transition changes nothing")
        var due = waiting
        try due.claim(now: Self.now, leaseMilliseconds: Self.lease)
        #expect(due.status == .sending && due.attempts == 3 && due.backoffStep == 2)
        var late = waiting
        try late.claim(now: Self.now + 3_600_000, leaseMilliseconds: Self.lease)
        #expect(late.attempts == 3)
    }

    @Test func aSendWhoseLeaseRanOutIsClaimedAgainNotBefore() throws {
        let inFlight = DeliveryLifecycle(status: .sending, attempts: 1, leaseUntil: Self.now + Self.lease)
        var early = inFlight
        #expect(throws: DeliveryLifecycle.Refusal.self) {
            try early.claim(now: Self.now + Self.lease - 1, leaseMilliseconds: Self.lease)
        }
        var expired = inFlight
        try expired.claim(now: Self.now + Self.lease, leaseMilliseconds: Self.lease)
        #expect(expired.status == .sending && expired.attempts == 2 && expired.leaseUntil == Self.now + 2 * Self.lease)
    }

    @Test func retryAfterLongerThanTheBackoffIsHonoured() throws {
        var lifecycle = DeliveryLifecycle.accepted(now: Self.now)
        try lifecycle.claim(now: Self.now, leaseMilliseconds: Self.lease)
        let failure = DeliveryFailure(.rateLimited, permanent: false, retryAfterMilliseconds: 30_000)
        try lifecycle.attemptFailed(failure, now: Self.now, policy: Self.policy, random: 0.5)
        #expect(lifecycle.nextAttemptAt == Self.now + 30_000)
    }

    @Test func retryAfterShorterThanTheBackoffDoesNotShortenIt() throws {
        var lifecycle = DeliveryLifecycle(status: .retrying, attempts: 3, backoffStep: 3, nextAttemptAt: Self.now)
        try lifecycle.claim(now: Self.now, leaseMilliseconds: Self.lease)
        let failure = DeliveryFailure(.serverError, permanent: false, retryAfterMilliseconds: 500)
        try lifecycle.attemptFailed(failure, now: Self.now, policy: Self.policy, random: 0)
        #expect(lifecycle.nextAttemptAt == Self.now + 8000 && lifecycle.backoffStep == 4)
    }

    @Test(arguments: [DeliveryFailure.Kind.auth, .rejected, .configuration, .tls])
    func permanentFailureMarksFailedWithItsKind(kind: DeliveryFailure.Kind) throws {
        var lifecycle = DeliveryLifecycle.accepted(now: Self.now)
        try lifecycle.claim(now: Self.now, leaseMilliseconds: Self.lease)
        try lifecycle.attemptFailed(DeliveryFailure(kind, permanent: true, retryAfterMilliseconds: 1000), now: Self.now,
                                    policy: Self.policy, random: 0.5)
        #expect(lifecycle.status == .failed && lifecycle.lastError == kind.rawValue)
        #expect(lifecycle.nextAttemptAt == nil && lifecycle.leaseUntil == nil && lifecycle.backoffStep == 0)
        #expect(!lifecycle.isDue(now: .max), "a failed memo waits for a person or a configuration change")
    }

    /// A message taken whole without a reply may have arrived: retried once (at the wait the failure
    /// names), and the second time running it fails rather than be copied again. Another failure between
    /// the two starts the count afresh.
    @Test func aSecondNoReplyInARowFails() throws {
        var lifecycle = DeliveryLifecycle.accepted(now: Self.now)
        let noReply = DeliveryFailure(.noReply, permanent: false, retryAfterMilliseconds: 60_000)
        try lifecycle.claim(now: Self.now, leaseMilliseconds: Self.lease)
        try lifecycle.attemptFailed(noReply, now: Self.now, policy: RetryPolicy(capMilliseconds: 120_000), random: 0)
        #expect(lifecycle.status == .retrying && lifecycle.nextAttemptAt == Self.now + 60_000)
        try lifecycle.claim(now: Self.now + 60_000, leaseMilliseconds: Self.lease)
        try lifecycle.attemptFailed(DeliveryFailure(.network, permanent: false), now: Self.now, policy: Self.policy, random: 0)
        #expect(lifecycle.status == .retrying, "a network failure between: not twice in a row")
        try lifecycle.claim(now: .max - Self.lease, leaseMilliseconds: Self.lease)
        try lifecycle.attemptFailed(noReply, now: Self.now, policy: Self.policy, random: 0)
        #expect(lifecycle.status == .retrying)
        try lifecycle.claim(now: .max - Self.lease, leaseMilliseconds: Self.lease)
        try lifecycle.attemptFailed(noReply, now: Self.now, policy: Self.policy, random: 0)
        #expect(lifecycle.status == .failed && lifecycle.lastError == "no_reply" && lifecycle.nextAttemptAt == nil)
    }

    @Test func anUnreachableRelayRetriesAtTheProbeWithoutClimbingTheLadder() throws {
        var lifecycle = DeliveryLifecycle(status: .sending, attempts: 4, backoffStep: 2, leaseUntil: Self.now + Self.lease)
        try lifecycle.relayUnreachable(DeliveryFailure(.unreachable, permanent: false), retryAt: Self.now + 3000)
        #expect(lifecycle == DeliveryLifecycle(status: .retrying, attempts: 4, backoffStep: 2,
                                               nextAttemptAt: Self.now + 3000, lastError: "unreachable"))
        try lifecycle.relayAnswers(now: Self.now + 10)
        #expect(lifecycle.nextAttemptAt == Self.now + 10, "due at once when the relay answers")
        try lifecycle.relayAnswers(now: Self.now + 5000)
        #expect(lifecycle.nextAttemptAt == Self.now + 10, "a retry already due stays as it was")
        // A wait the relay asked for, or one for a mail server that took a memo and never answered (it may
        // still arrive), is not cut short; one for a failure the outage explains is.
        for (kind, keeps) in [(DeliveryFailure.Kind.rateLimited, true), (.noReply, true), (.relayPending, true),
                              (.mailboxFull, true), (.timeout, false), (.network, false), (.serverError, false)] {
            var waiting = DeliveryLifecycle(status: .retrying, attempts: 1, backoffStep: 1,
                                            nextAttemptAt: Self.now + 3_600_000, lastError: kind.rawValue)
            try waiting.relayAnswers(now: Self.now)
            #expect(waiting.nextAttemptAt == (keeps ? Self.now + 3_600_000 : Self.now), "\(kind)")
        }
    }

    @Test func failureKindsAreTheNamesHistoryShows() {
        #expect(DeliveryFailure.Kind.rateLimited.rawValue == "rate_limited")
        #expect(DeliveryFailure.Kind.serverError.rawValue == "server_error")
        #expect(DeliveryFailure.Kind.timeout.rawValue == "timeout")
        #expect(DeliveryFailure.Kind.relayPending.rawValue == "relay_pending")
        #expect(DeliveryFailure(.unreachable, permanent: false).isOffline)
        #expect(!DeliveryFailure(.timeout, permanent: false).isOffline)
    }

    @Test func failedMemoIsRequeuedWithAFreshLadderAndCanBeDelivered() throws {
        var lifecycle = DeliveryLifecycle(status: .failed, attempts: 5, backoffStep: 4, lastError: "auth")
        try lifecycle.requeue(now: Self.now)
        #expect(lifecycle == DeliveryLifecycle(status: .queued, attempts: 5, backoffStep: 0, nextAttemptAt: Self.now))
        try lifecycle.claim(now: Self.now + 10, leaseMilliseconds: Self.lease)
        #expect(lifecycle.attempts == 6, "attempts count every attempt ever started")
        try lifecycle.delivered(now: Self.now + 20)
        #expect(lifecycle.status == .sent)
    }

    @Test func heldMemoIsKeptAndRequeued() throws {
        var lifecycle = DeliveryLifecycle.accepted(now: Self.now)
        try lifecycle.claim(now: Self.now, leaseMilliseconds: Self.lease)
        try lifecycle.hold(reason: "corrupt")
        #expect(lifecycle.status == .held && lifecycle.lastError == "corrupt" && lifecycle.leaseUntil == nil)
        #expect(!lifecycle.isDue(now: .max))
        try lifecycle.requeue(now: Self.now + 1)
        #expect(lifecycle.status == .queued && lifecycle.lastError == nil)
    }

    @Test func anInterruptedSendIsQueuedAgainAndKeepsItsAttempt() throws {
        var lifecycle = DeliveryLifecycle(status: .sending, attempts: 2, backoffStep: 1, leaseUntil: Self.now + Self.lease)
        try lifecycle.interrupted(now: Self.now)
        #expect(lifecycle == DeliveryLifecycle(status: .queued, attempts: 2, backoffStep: 1, nextAttemptAt: Self.now))
        #expect(lifecycle.isDue(now: Self.now))
    }

    @Test func aLiveSenderRenewsItsLeaseButNotAnotherAttempts() throws {
        var lifecycle = DeliveryLifecycle(status: .sending, attempts: 2, backoffStep: 1, leaseUntil: Self.now + Self.lease)
        try lifecycle.renewLease(attempt: 2, now: Self.now + 100_000, leaseMilliseconds: Self.lease)
        #expect(lifecycle == DeliveryLifecycle(status: .sending, attempts: 2, backoffStep: 1,
                                               leaseUntil: Self.now + 100_000 + Self.lease))
        #expect(!lifecycle.isDue(now: Self.now + Self.lease + 1), "the renewed lease holds past the first")
        // Another node took it over after the lease ran out (attempt 3): the old sender's renewal is refused.
        var takenOver = lifecycle
        try takenOver.claim(now: Self.now + 100_000 + Self.lease, leaseMilliseconds: Self.lease)
        let before = takenOver
        #expect(throws: DeliveryLifecycle.Refusal(transition: "renewLease", from: .sending)) {
            try takenOver.renewLease(attempt: 2, now: Self.now + 300_000, leaseMilliseconds: Self.lease)
        }
        #expect(takenOver == before)
    }

    /// Which transitions each status allows: everything else is refused and changes nothing.
    @Test func everyIllegalTransitionIsRefusedAndChangesNothing() {
        let failure = DeliveryFailure(.timeout, permanent: false)
        let far = Self.now + 10 * Self.lease
        let transitions: [(String, (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void)] = [
            ("claim", { l throws(DeliveryLifecycle.Refusal) in try l.claim(now: far, leaseMilliseconds: Self.lease) }),
            ("delivered", { l throws(DeliveryLifecycle.Refusal) in try l.delivered(now: far) }),
            ("attemptFailed", { l throws(DeliveryLifecycle.Refusal) in
                try l.attemptFailed(failure, now: far, policy: Self.policy, random: 0) }),
            ("relayUnreachable", { l throws(DeliveryLifecycle.Refusal) in try l.relayUnreachable(failure, retryAt: far) }),
            ("relayAnswers", { l throws(DeliveryLifecycle.Refusal) in try l.relayAnswers(now: far) }),
            ("hold", { l throws(DeliveryLifecycle.Refusal) in try l.hold(reason: "corrupt") }),
            ("requeue", { l throws(DeliveryLifecycle.Refusal) in try l.requeue(now: far) }),
            ("retryFailed", { l throws(DeliveryLifecycle.Refusal) in try l.retryFailed(now: far) }),
            ("interrupted", { l throws(DeliveryLifecycle.Refusal) in try l.interrupted(now: far) }),
            ("cancel", { l throws(DeliveryLifecycle.Refusal) in try l.cancel(now: far) }),
            ("renewLease", { l throws(DeliveryLifecycle.Refusal) in
                try l.renewLease(attempt: l.attempts, now: far, leaseMilliseconds: Self.lease) }),
        ]
        let allowed: [DeliveryStatus: Set<String>] = [
            .queued: ["claim", "hold"],
            .sending: ["claim", "delivered", "attemptFailed", "relayUnreachable", "hold", "interrupted", "renewLease"],
            .retrying: ["claim", "relayAnswers", "hold"],
            .sent: [],
            .failed: ["hold", "requeue", "retryFailed"],
            .held: ["hold", "requeue"],
            .cancelled: [],
        ]
        for start in Self.everyStatus {
            for (name, transition) in transitions {
                var lifecycle = start
                do {
                    try transition(&lifecycle)
                    #expect(allowed[start.status]?.contains(name) == true, "\(name) allowed from \(start.status)")
                } catch {
                    #expect(allowed[start.status]?.contains(name) == false, "\(name) refused from \(start.status)")
                    #expect(error == DeliveryLifecycle.Refusal(transition: name, from: start.status))
                    #expect(lifecycle == start, "a refused \(name) changed \(start.status)")
                }
            }
        }
    }

    @Test func aMemoCanBeTakenBackOnlyInsideItsUndoWindowAndBeforeAnyAttempt() throws {
        let accepted = DeliveryLifecycle.accepted(now: Self.now, undoMilliseconds: 10_000)
        #expect(accepted.nextAttemptAt == Self.now + 10_000, "delivery waits exactly for the window")
        #expect(!accepted.isDue(now: Self.now + 9_999) && accepted.isDue(now: Self.now + 10_000))
        var inside = accepted
        try inside.cancel(now: Self.now + 9_999)
        #expect(inside.status == .cancelled && inside.erasesBody && !inside.isDue(now: .max))
        var closed = accepted
        #expect(throws: DeliveryLifecycle.Refusal(transition: "cancel", from: .queued)) {
            try closed.cancel(now: Self.now + 10_000)
        }
        var noWindow = DeliveryLifecycle.accepted(now: Self.now)
        #expect(throws: DeliveryLifecycle.Refusal.self) { try noWindow.cancel(now: Self.now) }
        var requeued = DeliveryLifecycle(status: .queued, attempts: 1, nextAttemptAt: Self.now + 5_000)
        #expect(throws: DeliveryLifecycle.Refusal.self, "attempted before: too late") { try requeued.cancel(now: Self.now) }
        // `isInUndoWindow` says the same, for every status (a refusing relay holds only memos outside it).
        #expect(accepted.isInUndoWindow(now: Self.now + 9_999) && !accepted.isInUndoWindow(now: Self.now + 10_000))
        #expect(!noWindow.isInUndoWindow(now: Self.now) && !requeued.isInUndoWindow(now: Self.now))
        #expect(Self.everyStatus.filter { $0.isInUndoWindow(now: .min) }.allSatisfy { $0.status == .queued })
    }

    @Test func onlyADeliveredOrCancelledMemoErasesItsBody() {
        #expect(Self.everyStatus.filter(\.erasesBody).map(\.status) == [.sent, .cancelled])
    }

    @Test func statusNamesAreTheOnesHistoryShows() {
        #expect(DeliveryStatus.allCases.map(\.rawValue) == ["queued", "sending", "retrying", "sent", "failed", "held", "cancelled"])
    }

    // MARK: RetryPolicy

    @Test func defaultPolicy() {
        let policy = RetryPolicy()
        #expect(policy.baseMilliseconds == 1000)
        #expect(policy.capMilliseconds == 3_600_000)
        #expect(policy.jitter == 0.25)
    }

    @Test(arguments: 1...12)
    func delayDoublesEachAttemptWithAtMost25PercentJitter(attempt: Int) {
        let policy = RetryPolicy()
        let backoff = Int64(1000) << (attempt - 1)
        #expect(policy.delay(afterAttempt: attempt, random: 0) == backoff)
        for random in stride(from: 0.0, to: 1.0, by: 0.05) {
            let delay = policy.delay(afterAttempt: attempt, random: random)
            #expect(delay >= backoff)
            #expect(delay <= backoff + backoff / 4)
        }
        #expect(policy.delay(afterAttempt: attempt, random: 0.999_999) >= backoff + backoff / 4 - 1)
    }

    @Test func firstDelayIsBetweenOneAndOneAndAQuarterSeconds() {
        let policy = RetryPolicy()
        #expect(policy.delay(afterAttempt: 1, random: 0) == 1000)
        #expect(policy.delay(afterAttempt: 1, random: 0.5) == 1125)
        #expect(policy.delay(afterAttempt: 1, random: 0.999_999) == 1249)
        #expect(policy.delay(afterAttempt: 2, random: 0) == 2000)
        #expect(policy.delay(afterAttempt: 3, random: 0) == 4000)
        #expect(policy.delay(afterAttempt: 4, random: 0) == 8000)
    }

    @Test(arguments: [13, 20, 41, 63, 64, 1000, Int.max])
    func delayIsCappedAtOneHour(attempt: Int) {
        let policy = RetryPolicy()
        #expect(policy.delay(afterAttempt: attempt, random: 0) == 3_600_000)
        #expect(policy.delay(afterAttempt: attempt, random: 0.999) == 3_600_000)
    }

    @Test func jitterNeverPushesADelayPastTheCap() {
        let policy = RetryPolicy()
        // Attempt 12: 2048 s, up to 2560 s with jitter, still under the cap.
        #expect(policy.delay(afterAttempt: 12, random: 0.999) <= 3_600_000)
        // Attempt 12 with a cap of 2100 s: the jittered delay is clipped.
        let tight = RetryPolicy(capMilliseconds: 2_100_000)
        #expect(tight.delay(afterAttempt: 12, random: 0.999) == 2_100_000)
    }

    @Test func customBaseAndCap() {
        let policy = RetryPolicy(baseMilliseconds: 250, capMilliseconds: 10_000, jitter: 0)
        #expect((1...8).map { policy.delay(afterAttempt: $0, random: 0.9) }
                == [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000])
    }

    @Test(arguments: [0, -1])
    func attemptBelowOneIsTheFirstDelay(attempt: Int) {
        #expect(RetryPolicy().delay(afterAttempt: attempt, random: 0) == 1000)
    }

    @Test(arguments: [-5.0, -0.1, 1.0, 7.5])
    func randomOutsideTheUnitIntervalIsClamped(random: Double) {
        let delay = RetryPolicy().delay(afterAttempt: 3, random: random)
        #expect(delay >= 4000)
        #expect(delay <= 5000)
    }

    @Test func retryAfterLargerThanBackoffWins() {
        let policy = RetryPolicy()
        #expect(policy.delay(afterAttempt: 1, retryAfter: 30_000, random: 0.5) == 30_000)
        #expect(policy.delay(afterAttempt: 5, retryAfter: 120_000, random: 0.999) == 120_000)
    }

    @Test func retryAfterSmallerThanBackoffLosesToIt() {
        let policy = RetryPolicy()
        #expect(policy.delay(afterAttempt: 4, retryAfter: 1000, random: 0) == 8000)
        #expect(policy.delay(afterAttempt: 1, retryAfter: 0, random: 0) == 1000)
    }

    @Test func retryAfterIsCapped() {
        #expect(RetryPolicy().delay(afterAttempt: 1, retryAfter: 7_200_000, random: 0) == 3_600_000)
        #expect(RetryPolicy(capMilliseconds: 60_000).delay(afterAttempt: 1, retryAfter: 90_000, random: 0) == 60_000)
        #expect(RetryPolicy().delay(afterAttempt: 1, retryAfter: Int64.max, random: 0) == 3_600_000)
    }
}
