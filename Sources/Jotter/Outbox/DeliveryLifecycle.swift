/// A memo's delivery lifecycle: the one place that decides every transition. Pure (no I/O, no clock:
/// the caller passes `now`); its value *is* what the store persists for the memo's delivery, so a
/// transition's result is written as it is, and nothing changes a memo's status in SQL alone.
///
/// ```
/// accepted → queued ─claim→ sending ─delivered→ sent
///                              │ ├─attemptFailed→ retrying(at) ─claim (when due)→ sending
///                              │ │              └→ failed ─requeue, retryFailed→ queued
///                              │ ├─relayUnreachable→ retrying(at), the ladder where it was
///                              │ ├─hold→ held ─requeue→ queued
///                              │ ├─interrupted (the process stopped) → queued
///                              │ └─renewLease (the sender is alive, same attempt) → sending
///                              └─claim (lease ran out: a crashed send) → sending
/// retrying ─relayAnswers→ retrying(now)
/// ```
public struct DeliveryLifecycle: Sendable, Equatable {
    /// Where the memo is.
    public private(set) var status: DeliveryStatus
    /// Attempts started, ever.
    public private(set) var attempts: Int
    /// Rungs climbed on the backoff ladder (failures while the relay was unreachable do not count).
    public private(set) var backoffStep: Int
    /// When it may next be claimed (queued, retrying), epoch ms.
    public private(set) var nextAttemptAt: Int64?
    /// Until when a claim holds it (sending), epoch ms.
    public private(set) var leaseUntil: Int64?
    /// When it was delivered (sent), epoch ms.
    public private(set) var deliveredAt: Int64?
    /// The last failure's kind (retrying, failed, held).
    public private(set) var lastError: String?

    /// A transition that is not allowed from the memo's current status.
    public struct Refusal: Error, Sendable, Equatable {
        /// The transition asked for.
        public var transition: String
        /// The status the memo was in (unchanged).
        public var from: DeliveryStatus
    }

    /// A lifecycle as stored (the store's row).
    public init(status: DeliveryStatus, attempts: Int = 0, backoffStep: Int = 0, nextAttemptAt: Int64? = nil,
                leaseUntil: Int64? = nil, deliveredAt: Int64? = nil, lastError: String? = nil) {
        self.status = status
        self.attempts = attempts
        self.backoffStep = backoffStep
        self.nextAttemptAt = nextAttemptAt
        self.leaseUntil = leaseUntil
        self.deliveredAt = deliveredAt
        self.lastError = lastError
    }

    /// A memo just accepted: queued, due at once, or when its undo window of `undoMilliseconds` ends.
    public static func accepted(now: Int64, undoMilliseconds: Int64 = 0) -> DeliveryLifecycle {
        DeliveryLifecycle(status: .queued, nextAttemptAt: now + max(undoMilliseconds, 0))
    }

    /// True when `claim(now:)` would succeed: queued or retrying and due, or sending with its lease run out.
    public func isDue(now: Int64) -> Bool {
        switch status {
        case .queued, .retrying: return (nextAttemptAt ?? now) <= now
        case .sending: return (leaseUntil ?? now) <= now
        case .sent, .failed, .held, .cancelled: return false
        }
    }

    /// True when the memo's body is no longer needed (the store erases it).
    public var erasesBody: Bool { status == .sent || status == .cancelled }

    /// Whether its sender may still take it back at `now`: queued, never attempted, and its undo window
    /// (which ends at its first due time) still open.
    public func isInUndoWindow(now: Int64) -> Bool {
        guard status == .queued, attempts == 0, let until = nextAttemptAt else { return false }
        return now < until
    }

    /// Takes the memo back: only while `isInUndoWindow`.
    public mutating func cancel(now: Int64) throws(Refusal) {
        guard isInUndoWindow(now: now) else { throw Refusal(transition: "cancel", from: status) }
        status = .cancelled
        nextAttemptAt = nil
        lastError = nil
    }

    /// Starts an attempt, held for `leaseMilliseconds`.
    public mutating func claim(now: Int64, leaseMilliseconds: Int64) throws(Refusal) {
        guard isDue(now: now) else { throw Refusal(transition: "claim", from: status) }
        status = .sending
        attempts += 1
        leaseUntil = now + leaseMilliseconds
    }

    /// The attempt delivered the memo.
    public mutating func delivered(now: Int64) throws(Refusal) {
        try expect(.sending, "delivered")
        status = .sent
        deliveredAt = now
        leaseUntil = nil
        nextAttemptAt = nil
        lastError = nil
    }

    /// The attempt failed: `policy` decides when to try again, or the failure is permanent.
    public mutating func attemptFailed(_ failure: DeliveryFailure, now: Int64, policy: RetryPolicy,
                                       random: Double) throws(Refusal) {
        try expect(.sending, "attemptFailed")
        leaseUntil = nil
        // Taken whole without an answer twice running: it may well have arrived twice already. It waits,
        // failed, for its owner to look in the inbox and press Retry, instead of one more copy per rung.
        let noReplyAgain = failure.kind == .noReply && lastError == DeliveryFailure.Kind.noReply.rawValue
        lastError = failure.kind.rawValue
        if failure.isPermanent || noReplyAgain {
            status = .failed
            nextAttemptAt = nil
        } else {
            backoffStep += 1
            status = .retrying
            nextAttemptAt = now + policy.delay(afterAttempt: backoffStep,
                                               retryAfter: failure.retryAfterMilliseconds, random: random)
        }
    }

    /// The relay could not be reached at all: retry at `retryAt` (the worker probes meanwhile) without
    /// climbing the ladder.
    public mutating func relayUnreachable(_ failure: DeliveryFailure, retryAt: Int64) throws(Refusal) {
        try expect(.sending, "relayUnreachable")
        status = .retrying
        leaseUntil = nil
        nextAttemptAt = retryAt
        lastError = failure.kind.rawValue
    }

    /// The relay answers again: a waiting retry is due now, unless its wait was for more than the relay
    /// (`DeliveryFailure.waitOutlastsAnOutage`: a `Retry-After`, a mail server that never answered).
    public mutating func relayAnswers(now: Int64) throws(Refusal) {
        try expect(.retrying, "relayAnswers")
        if DeliveryFailure.waitOutlastsAnOutage(lastError) { return }
        if let at = nextAttemptAt, at > now { nextAttemptAt = now }
    }

    /// The stored memo cannot be opened: keep it aside, never drop it.
    public mutating func hold(reason: String) throws(Refusal) {
        guard status != .sent, status != .cancelled else { throw Refusal(transition: "hold", from: status) }
        status = .held
        leaseUntil = nil
        nextAttemptAt = nil
        lastError = reason
    }

    /// A failed or held memo goes back to the queue, due now, with a fresh ladder (on request, or
    /// after the relay configuration changed).
    public mutating func requeue(now: Int64) throws(Refusal) {
        guard status == .failed || status == .held else { throw Refusal(transition: "requeue", from: status) }
        status = .queued
        nextAttemptAt = now
        backoffStep = 0
        lastError = nil
    }

    /// Its sender asks again for a memo given up on (`failed`): `requeue`, but never of a `held` one,
    /// which waits for what holds it (the relay's own credentials), not for the sender.
    public mutating func retryFailed(now: Int64) throws(Refusal) {
        guard status == .failed else { throw Refusal(transition: "retryFailed", from: status) }
        try requeue(now: now)
    }

    /// An attempt that an earlier process left unfinished (the data directory lock proves it is gone):
    /// queued again, due now; the interrupted attempt still counts.
    public mutating func interrupted(now: Int64) throws(Refusal) {
        try expect(.sending, "interrupted")
        status = .queued
        leaseUntil = nil
        nextAttemptAt = now
    }

    /// The process sending attempt `attempt` is alive and still at it: its claim holds for another
    /// `leaseMilliseconds` from `now`, so no other node takes the memo over. Refused once the memo has
    /// moved on (another node's claim after a lease ran out is another attempt).
    public mutating func renewLease(attempt: Int, now: Int64, leaseMilliseconds: Int64) throws(Refusal) {
        guard status == .sending, attempts == attempt else { throw Refusal(transition: "renewLease", from: status) }
        leaseUntil = now + leaseMilliseconds
    }

    /// Refuses unless attempt `attempt` is the one under way: the outcome of an attempt whose lease ran
    /// out, and which another node has taken over since, is not the memo's any more.
    public func expectAttempt(_ attempt: Int) throws(Refusal) {
        guard status == .sending, attempts == attempt else { throw Refusal(transition: "outcome", from: status) }
    }

    private func expect(_ wanted: DeliveryStatus, _ transition: String) throws(Refusal) {
        guard status == wanted else { throw Refusal(transition: transition, from: status) }
    }
}
