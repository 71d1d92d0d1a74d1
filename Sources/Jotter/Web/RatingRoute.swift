import Dispatch
import Foundation
import Synchronization

/// When to ask for a rating, as the original app did: after every 100th send, only if the prompt was
/// last shown at least 14 days ago and last dismissed at least 30 days ago. Pure: no clock, no I/O.
public struct RatingPolicy: Sendable, Equatable {
    /// A prompt is considered once per this many sends.
    public var every: Int64 = 100
    /// Least time between two prompts.
    public var minimumSinceShown: Int64 = 14 * 86_400_000
    /// Least time after the user dismissed one.
    public var minimumSinceDismissed: Int64 = 30 * 86_400_000

    /// The defaults.
    public init() {}

    /// The state the decision depends on.
    public struct State: Sendable, Equatable {
        /// Memos sent so far.
        public var sends: Int64 = 0
        /// The highest `sends / every` already considered (each hundred is considered once).
        public var consideredBucket: Int64 = 0
        /// When the prompt was last shown, epoch ms.
        public var shownAt: Int64?
        /// When it was last dismissed, epoch ms.
        public var dismissedAt: Int64?

        /// A state.
        public init(sends: Int64 = 0, consideredBucket: Int64 = 0, shownAt: Int64? = nil, dismissedAt: Int64? = nil) {
            self.sends = sends
            self.consideredBucket = consideredBucket
            self.shownAt = shownAt
            self.dismissedAt = dismissedAt
        }
    }

    /// One more send, from anywhere (the page, a phone, curl).
    public func countSend(_ state: inout State) {
        state.sends += 1
    }

    /// May the page that just sent show the prompt? Each hundred is considered once, at the first page
    /// send after it is reached (a script's sends count, but a script cannot show a prompt).
    public func considerPrompt(_ state: inout State, now: Int64) -> Bool {
        let bucket = state.sends / every
        guard bucket > state.consideredBucket else { return false }
        state.consideredBucket = bucket
        if let shown = state.shownAt, now - shown < minimumSinceShown { return false }
        if let dismissed = state.dismissedAt, now - dismissed < minimumSinceDismissed { return false }
        return true
    }
}

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

/// `GET /rating` (the counters) and `POST /rating` (`{"event":"shown"|"dismissed"|"rated","stars":1-5}`).
struct RatingRoute: Sendable {
    let store: RatingStore

    func state() -> HTTPResponse {
        let state = store.snapshot
        var json = JSONWriter()
        json.object { json in
            json.field("sends", state.sends)
            json.field("shown_at", state.shownAt.map(Timestamp.iso8601(milliseconds:)))
            json.field("dismissed_at", state.dismissedAt.map(Timestamp.iso8601(milliseconds:)))
        }
        return .json(200, json.bytes)
    }

    private static let invalidEvent = HTTPResponse.error(
        400, code: "invalid_event", message: "Send {\"event\": \"shown\", \"dismissed\" or \"rated\"}.")

    func record(_ request: HTTPRequest) -> HTTPResponse {
        guard MediaType(request.headers["Content-Type"] ?? "").type == "application/json" else {
            return .error(415, code: "unsupported_media_type", message: "Send application/json.")
        }
        guard let body = try? JSONValue.parse(request.body), let event = body["event"]?.string else {
            return Self.invalidEvent
        }
        // `stars` only with "rated", and then a whole number from 1 to 5 (not null, not 4.0).
        let stars = body["stars"]
        if event == "rated" || stars != nil {
            guard let stars = stars?.integer, (1...5).contains(stars) else {
                return .error(400, code: "invalid_stars", message: "stars must be a whole number from 1 to 5.")
            }
        }
        guard store.record(event: event) else {
            return Self.invalidEvent
        }
        return HTTPResponse(status: 204)
    }
}
