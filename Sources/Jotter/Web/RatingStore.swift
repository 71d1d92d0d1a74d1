import Dispatch
import Synchronization

/// The rating prompt's counters, kept on the server so they hold across devices and browsers.
/// Decisions are made in memory (the send path never waits for them); changes are written to the
/// outbox's settings on a background queue.
final class RatingStore: Sendable {
    private let state: Mutex<RatingPolicy.State>
    private let policy: RatingPolicy
    private let outbox: Outbox
    private let clock: any WallClock
    private let persistence = DispatchQueue(label: "jotter.rating")

    init(outbox: Outbox, clock: any WallClock, policy: RatingPolicy = RatingPolicy()) throws {
        self.outbox = outbox
        self.clock = clock
        self.policy = policy
        let sends = try outbox.history.acceptedCount()
        let bucket = try outbox.settings.read("rating.bucket").flatMap { Int64($0) } ?? sends / policy.every
        state = Mutex(RatingPolicy.State(
            sends: sends, consideredBucket: bucket,
            shownAt: try outbox.settings.read("rating.shown_at").flatMap { Int64($0) },
            dismissedAt: try outbox.settings.read("rating.dismissed_at").flatMap { Int64($0) }))
    }

    /// Counts a new memo; true when its answer should invite the page to show the prompt.
    func recordSend(fromPage: Bool) -> Bool {
        let now = clock.nowMilliseconds()
        let (prompt, bucket) = state.withLock { state in
            let previous = state.consideredBucket
            policy.countSend(&state)
            let prompt = fromPage && policy.considerPrompt(&state, now: now)
            return (prompt, state.consideredBucket != previous ? state.consideredBucket : nil)
        }
        if let bucket { persist("rating.bucket", bucket) }
        return prompt
    }

    /// The page reports what the user did with the prompt.
    func record(event: String) -> Bool {
        let now = clock.nowMilliseconds()
        switch event {
        case "shown":
            state.withLock { $0.shownAt = now }
            persist("rating.shown_at", now)
        case "dismissed":
            state.withLock { $0.dismissedAt = now }
            persist("rating.dismissed_at", now)
        case "rated":
            break  // the stars stay with the user; only the timing matters for the next prompt
        default:
            return false
        }
        return true
    }

    var snapshot: RatingPolicy.State { state.withLock { $0 } }

    private func persist(_ name: String, _ value: Int64) {
        let outbox = self.outbox
        persistence.async { try? outbox.settings.write(name, value: String(value)) }
    }

    /// Waits for pending writes (tests, and before the outbox closes).
    func flush() {
        persistence.sync {}
    }
}
