import Testing
@testable import Jotter

/// The delivery state machine and the retry schedule: pure, no I/O, the test passes `now`.
@Suite struct DeliveryLifecycleTests {
    private static let now: Int64 = 1_764_581_405_000
    private static let transient = DeliveryFailure(.network, permanent: false)

    // MARK: Lifecycle

    @Test func queuedThenSendingThenSent() {
        var lifecycle = DeliveryLifecycle()
        #expect(lifecycle.state == .queued)
        #expect(lifecycle.status == .queued)
        lifecycle.claim(now: Self.now)
        #expect(lifecycle.state == .sending(attempt: 1))
        #expect(lifecycle.status == .sending)
        lifecycle.delivered(now: Self.now + 120)
        #expect(lifecycle.state == .sent(at: Self.now + 120))
        #expect(lifecycle.status == .sent)
    }

    @Test(arguments: [0.0, 0.25, 0.5, 0.999_999])
    func transientFailureSchedulesARetryAboutOneSecondLater(random: Double) {
        var lifecycle = DeliveryLifecycle()
        lifecycle.claim(now: Self.now)
        lifecycle.attemptFailed(Self.transient, now: Self.now, policy: RetryPolicy(), random: random)
        guard case .retrying(let attempt, let at) = lifecycle.state else {
            Issue.record("expected retrying, got \(lifecycle.state)")
            return
        }
        #expect(attempt == 1)
        #expect((Self.now + 1000)...(Self.now + 1250) ~= at)
        #expect(lifecycle.status == .retrying)
    }

    @Test func retriesBackOffExponentiallyUntilDelivered() {
        var lifecycle = DeliveryLifecycle()
        var now = Self.now
        var delays: [Int64] = []
        for expectedAttempt in 1...6 {
            lifecycle.claim(now: now)
            #expect(lifecycle.state == .sending(attempt: expectedAttempt))
            lifecycle.attemptFailed(DeliveryFailure(.timeout, permanent: false), now: now, policy: RetryPolicy(),
                                    random: 0)
            guard case .retrying(let attempt, let at) = lifecycle.state else {
                Issue.record("expected retrying, got \(lifecycle.state)")
                return
            }
            #expect(attempt == expectedAttempt)
            delays.append(at - now)
            now = at
        }
        #expect(delays == [1000, 2000, 4000, 8000, 16000, 32000])
        lifecycle.claim(now: now)
        #expect(lifecycle.state == .sending(attempt: 7))
        lifecycle.delivered(now: now + 5)
        #expect(lifecycle.state == .sent(at: now + 5))
    }

    @Test func aRetryMayBeClaimedExactlyWhenDueOrLater() {
        var due = DeliveryLifecycle(state: .retrying(attempt: 2, at: Self.now))
        due.claim(now: Self.now)
        #expect(due.state == .sending(attempt: 3))
        var late = DeliveryLifecycle(state: .retrying(attempt: 4, at: Self.now))
        late.claim(now: Self.now + 3_600_000)
        #expect(late.state == .sending(attempt: 5))
    }

    @Test func retryAfterLongerThanTheBackoffIsHonoured() {
        var lifecycle = DeliveryLifecycle()
        lifecycle.claim(now: Self.now)
        let failure = DeliveryFailure(.rateLimited, permanent: false, retryAfterMilliseconds: 30_000)
        lifecycle.attemptFailed(failure, now: Self.now, policy: RetryPolicy(), random: 0.5)
        #expect(lifecycle.state == .retrying(attempt: 1, at: Self.now + 30_000))
    }

    @Test func retryAfterShorterThanTheBackoffDoesNotShortenIt() {
        var lifecycle = DeliveryLifecycle(state: .retrying(attempt: 3, at: Self.now))
        lifecycle.claim(now: Self.now)
        let failure = DeliveryFailure(.serverError, permanent: false, retryAfterMilliseconds: 500)
        lifecycle.attemptFailed(failure, now: Self.now, policy: RetryPolicy(), random: 0)
        #expect(lifecycle.state == .retrying(attempt: 4, at: Self.now + 8000))
    }

    @Test(arguments: [DeliveryFailure.Kind.auth, .rejected, .configuration, .tls])
    func permanentFailureMarksFailedWithItsKind(kind: DeliveryFailure.Kind) {
        var lifecycle = DeliveryLifecycle()
        lifecycle.claim(now: Self.now)
        lifecycle.attemptFailed(DeliveryFailure(kind, permanent: true, retryAfterMilliseconds: 1000), now: Self.now,
                                policy: RetryPolicy(), random: 0.5)
        #expect(lifecycle.state == .failed(kind: kind.rawValue))
        #expect(lifecycle.status == .failed)
    }

    @Test func failureKindsAreTheNamesHistoryShows() {
        #expect(DeliveryFailure.Kind.rateLimited.rawValue == "rate_limited")
        #expect(DeliveryFailure.Kind.serverError.rawValue == "server_error")
        #expect(DeliveryFailure.Kind.timeout.rawValue == "timeout")
        #expect(DeliveryFailure(.unreachable, permanent: false).isOffline)
        #expect(!DeliveryFailure(.timeout, permanent: false).isOffline)
    }

    @Test func failedMemoIsRequeuedAndCanBeDelivered() {
        var lifecycle = DeliveryLifecycle()
        lifecycle.claim(now: Self.now)
        lifecycle.attemptFailed(DeliveryFailure(.auth, permanent: true), now: Self.now, policy: RetryPolicy(),
                                random: 0)
        lifecycle.requeue()
        #expect(lifecycle.state == .queued)
        #expect(lifecycle.status == .queued)
        lifecycle.claim(now: Self.now + 10)
        #expect(lifecycle.state == .sending(attempt: 1))
        lifecycle.delivered(now: Self.now + 20)
        #expect(lifecycle.status == .sent)
    }

    @Test func heldMemoIsKeptAndRequeued() {
        var lifecycle = DeliveryLifecycle()
        lifecycle.hold(reason: "corrupt")
        #expect(lifecycle.state == .held(reason: "corrupt"))
        #expect(lifecycle.status == .held)
        lifecycle.requeue()
        #expect(lifecycle.state == .queued)
    }

    @Test func aMemoBeingSentCanBeHeld() {
        var lifecycle = DeliveryLifecycle()
        lifecycle.claim(now: Self.now)
        lifecycle.hold(reason: "corrupt")
        #expect(lifecycle.status == .held)
    }

    @Test(arguments: [
        (DeliveryLifecycle.State.queued, DeliveryStatus.queued),
        (.sending(attempt: 3), .sending),
        (.retrying(attempt: 2, at: 5), .retrying),
        (.sent(at: 7), .sent),
        (.failed(kind: "auth"), .failed),
        (.held(reason: "corrupt"), .held),
    ])
    func storedStatusForEveryState(state: DeliveryLifecycle.State, status: DeliveryStatus) {
        #expect(DeliveryLifecycle(state: state).status == status)
    }

    @Test func statusNamesAreTheOnesHistoryShows() {
        #expect(DeliveryStatus.allCases.map(\.rawValue) == ["queued", "sending", "retrying", "sent", "failed", "held"])
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
