/// Where a memo is in its delivery lifecycle, as stored and as `/history` reports it.
public enum DeliveryStatus: String, Sendable, CaseIterable, Codable {
    /// Accepted and waiting for its first attempt.
    case queued
    /// An attempt is in flight (a worker holds its lease).
    case sending
    /// An attempt failed transiently; the next is scheduled.
    case retrying
    /// Delivered.
    case sent
    /// Refused permanently (authentication, rejection); kept, and retried on request or a configuration change.
    case failed
    /// Kept aside and not attempted (for example a row that cannot be opened with the current key).
    case held
}

/// The delivery lifecycle as a pure state machine: inputs are method calls, the output is the next
/// state. No I/O and no clock of its own: the caller passes `now`.
///
/// `queued → sending → sent | retrying(at:) | failed | held`, and `retrying(at:) → sending` when due.
public struct DeliveryLifecycle: Sendable, Equatable {
    /// The lifecycle's states.
    public enum State: Sendable, Equatable {
        case queued
        case sending(attempt: Int)
        case retrying(attempt: Int, at: Int64)
        case sent(at: Int64)
        case failed(kind: String)
        case held(reason: String)
    }

    /// The current state.
    public private(set) var state: State

    /// A lifecycle in `state`.
    public init(state: State = .queued) {
        self.state = state
    }

    /// Starts an attempt. Legal from `queued` and from a due `retrying`; anything else is a bug.
    public mutating func claim(now: Int64) {
        switch state {
        case .queued:
            state = .sending(attempt: 1)
        case .retrying(let attempt, let at):
            precondition(at <= now, "claimed a retry before it was due")
            state = .sending(attempt: attempt + 1)
        default:
            preconditionFailure("cannot claim a message in state \(state)")
        }
    }

    /// The attempt delivered the memo.
    public mutating func delivered(now: Int64) {
        guard case .sending = state else { preconditionFailure("delivered while \(state)") }
        state = .sent(at: now)
    }

    /// The attempt failed; `policy` decides when to try again, or the failure is permanent.
    public mutating func attemptFailed(_ failure: DeliveryFailure, now: Int64, policy: RetryPolicy,
                                       random: Double) {
        guard case .sending(let attempt) = state else { preconditionFailure("failed while \(state)") }
        if failure.isPermanent {
            state = .failed(kind: failure.kind.rawValue)
        } else {
            let delay = policy.delay(afterAttempt: attempt, retryAfter: failure.retryAfterMilliseconds,
                                     random: random)
            state = .retrying(attempt: attempt, at: now + delay)
        }
    }

    /// The relay could not be reached at all: wait for it (the worker probes) rather than back off.
    public mutating func relayUnreachable(retryAt: Int64) {
        guard case .sending(let attempt) = state else { preconditionFailure("unreachable while \(state)") }
        state = .retrying(attempt: attempt, at: retryAt)
    }

    /// A stored row could not be opened: keep it aside, never drop it.
    public mutating func hold(reason: String) {
        state = .held(reason: reason)
    }

    /// A failed or held memo goes back to the queue (on request or a configuration change).
    public mutating func requeue() {
        switch state {
        case .failed, .held: state = .queued
        default: preconditionFailure("cannot requeue a message in state \(state)")
        }
    }

    /// The stored status for the current state.
    public var status: DeliveryStatus {
        switch state {
        case .queued: return .queued
        case .sending: return .sending
        case .retrying: return .retrying
        case .sent: return .sent
        case .failed: return .failed
        case .held: return .held
        }
    }
}
