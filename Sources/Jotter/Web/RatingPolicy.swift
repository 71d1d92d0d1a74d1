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
