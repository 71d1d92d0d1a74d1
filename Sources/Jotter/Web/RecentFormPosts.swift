import Synchronization

/// The memos a browser posted without JavaScript in the last seconds, by client and content, each with
/// the `Idempotency-Key` it was stored under. The page's plain form carries no key, and a double click on
/// Send posts it twice (the browser drops the first answer, the server has stored both): the second post
/// of the same memo from the same client within `window` is given the first one's key, so the outbox
/// answers it as a replay. Two posts at once share the key too, and the outbox stores one of them.
///
/// Only the content's hash is kept (SHA-256 of client, subject and body), in memory, for `window`.
final class RecentFormPosts: Sendable {
    private struct Entry {
        var key: String
        var at: Int64
    }

    private let recent = Mutex<[[UInt8]: Entry]>([:])
    private let windowMilliseconds: Int64
    private let clock: any WallClock
    /// The most remembered at once (a flood of distinct memos only makes entries end sooner).
    static let capacity = 1_024

    init(windowMilliseconds: Int64 = 10_000, clock: any WallClock = SystemClock()) {
        self.windowMilliseconds = windowMilliseconds
        self.clock = clock
    }

    /// The `Idempotency-Key` for a form post of `subject` and `body` from `client`: the one a post of the
    /// same memo from the same client got in the last `window`, else a new one.
    func key(client: String, subject: String?, body: String) throws -> String {
        var content = Array(client.utf8) + [0]
        if let subject { content += [1] + Array(subject.utf8) }
        content += [0] + Array(body.utf8)
        let digest = SHA256.hash(content)
        let now = clock.monotonicMilliseconds()
        let fresh = "form-" + (try SecureRandom.uuid())
        return recent.withLock { recent in
            if let entry = recent[digest], now - entry.at < windowMilliseconds { return entry.key }
            if recent.count >= Self.capacity {
                recent = recent.filter { now - $0.value.at < windowMilliseconds }
                if recent.count >= Self.capacity { recent.removeAll() }
            }
            recent[digest] = Entry(key: fresh, at: now)
            return fresh
        }
    }
}
