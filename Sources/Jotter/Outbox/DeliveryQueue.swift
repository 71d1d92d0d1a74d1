/// What the delivery worker asks of the memos it delivers: claim what is due, persist what the
/// `DeliveryLifecycle` decides, and a few bulk steps of the breaker. Two stores keep it: a node's own
/// SQLite `Outbox`, and a relay's `PostgresOutbox`, shared by every relay node.
///
/// Every method decides with `DeliveryLifecycle` and only persists; none writes a status in SQL alone.
public protocol DeliveryQueue: AnyObject, Sendable {
    /// Claims up to `limit` memos that are due, each held for `leaseMilliseconds`, opened; in order, and
    /// only while their sealed contents add up to at most `maxBytes` (the first is taken whatever its
    /// size), so a batch of large memos stays within memory that was planned for.
    /// Memos in `excluding` are not claimed: this process is sending them, or holds their outcome (their
    /// lease ran out while the database could not be written), and a claim would start a second attempt.
    func claimDue(limit: Int, maxBytes: Int, leaseMilliseconds: Int64, excluding: Set<String>) throws -> [ClaimedMessage]

    /// Applies `decide` to memo `id`'s stored lifecycle and persists the result, atomically. Returns the
    /// new lifecycle, or nil when there is no such memo; rethrows the lifecycle's refusal (nothing is
    /// written then). `durable: false` for bookkeeping whose loss a repeat makes harmless.
    @discardableResult
    func transition(id: String, durable: Bool,
                    _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> DeliveryLifecycle?

    /// `transition` for several memos in one transaction (a batch's outcomes): each memo's lifecycle gets
    /// `decide`; one that refuses, or is gone, is left as it is. Returns the memos changed.
    @discardableResult
    func transition(ids: [String], durable: Bool,
                    _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> [String: DeliveryLifecycle]

    /// The reason of the oldest memo held for one of `reasons`, if any (at start: the relay refused before).
    func heldReason(among reasons: Set<String>) throws -> String?

    /// Holds every waiting (queued or retrying) memo with `reason`, but for those still in their undo
    /// window (`DeliveryLifecycle.isInUndoWindow`). Returns how many.
    @discardableResult
    func holdWaiting(reason: String) throws -> Int

    /// Puts up to `limit` memos held for one of `reasons` back in the queue, oldest first.
    @discardableResult
    func releaseHeld(reasons: Set<String>, limit: Int) throws -> Int

    /// Makes every waiting retry due now (the relay answers again after an outage).
    func makeRetriesDue() throws

    /// Puts memos an earlier process of this node left `sending` back in the queue. Returns how many.
    @discardableResult
    func recoverInterrupted() throws -> Int

    /// The `seq` of the last memo accepted so far (0: none yet). A worker asks at start: a memo at or below
    /// it was accepted by an earlier process, whose unsynced record of a delivery a power loss may have undone.
    func lastAccepted() throws -> Int64

    /// When the earliest scheduled attempt is due (or a lease runs out), or nil if nothing waits.
    func nextDueAt() throws -> Int64?

    /// Forgets retained subjects of memos delivered before `cutoff` (epoch ms), and whatever the store
    /// still keeps of text erased before (SQLite's WAL); the worker calls it once a minute.
    func purgeSubjects(deliveredBefore cutoff: Int64) throws

    /// Memos accepted before `cutoff` (epoch ms) and still not delivered, oldest first, at most `limit`.
    func stuck(acceptedBefore cutoff: Int64, limit: Int) throws -> [MessageRecord]

    /// True when other processes claim from the same queue: the worker then renews the leases of its
    /// sends in flight, so a slow send is not taken over while its sender lives.
    var leasesAreShared: Bool { get }

    /// Starts looking for damaged pages in the store, now and then daily, on a queue of its own (a node's
    /// own SQLite file; PostgreSQL checks its own pages); `close` stops it.
    func startIntegrityChecks()

    /// Takes the word of a failed claim or write about the store's pages.
    func noteDamage(_ error: any Error)

    /// A claim or outcome the worker could not write (`error`), or one it wrote (nil): a node's `/healthz`
    /// says its storage is failing meanwhile.
    func noteDeliveryWrite(failedWith error: (any Error)?)
}

extension DeliveryQueue {
    /// `body`'s result, or nil when it met a damaged page (noted, so `/healthz` says so); other failures
    /// are thrown. For the steps of a start that must not keep a damaged outbox from taking new memos.
    func despiteDamage<T>(_ body: (Self) throws -> T) throws -> T? {
        do {
            return try body(self)
        } catch let failure as DatabaseError where failure.meansDamage {
            noteDamage(failure)
            return nil
        }
    }
}

extension DeliveryQueue {
    public func startIntegrityChecks() {}
    public func noteDamage(_ error: any Error) {}
    public func noteDeliveryWrite(failedWith error: (any Error)?) {}
}

extension DeliveryQueue {
    public var leasesAreShared: Bool { false }

    /// Puts every memo held for one of `reasons` back in the queue.
    @discardableResult
    public func releaseHeld(reasons: Set<String>) throws -> Int {
        try releaseHeld(reasons: reasons, limit: .max)
    }
}

/// Everything `jotter relay` needs of its outbox: the worker's queue, accepting messages, reading their
/// records, the hashing secret its keys derive from, and a fingerprint of the mail configuration.
public protocol MessageOutbox: DeliveryQueue {
    /// Stores `draft`; `completion` runs once it is durable, or with the reason it was not stored.
    func enqueue(_ draft: MemoDraft,
                 completion: @escaping @Sendable (Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>) -> Void)

    /// Message `id`'s delivery record.
    func record(id: String) throws -> MessageRecord?

    /// A subkey of the hashing secret for another component.
    func hashingKey(purpose: String) throws -> SymmetricKey

    /// Records `fingerprint` for `name`; says whether it differs from the one stored before.
    func configurationChanged(_ name: String, fingerprint: [UInt8]) throws -> Bool

    /// Deletes messages delivered (or cancelled) before `cutoff` (epoch ms), and their records — with
    /// `failedToo`, also those failed and accepted before it (a relay's: their composer still has each
    /// memo, and its Retry posts it anew once the relay has forgotten it). Memos still on their way and
    /// held ones are kept. Returns how many were deleted.
    @discardableResult
    func forgetFinished(before cutoff: Int64, failedToo: Bool) throws -> Int

    /// Puts every `failed` memo back in the queue. Returns how many.
    @discardableResult
    func requeueFailed() throws -> Int

    /// Called after a message is durably stored (by anyone sharing the store, where it can tell).
    func setOnAccepted(_ handler: (@Sendable () -> Void)?)

    /// Closes the store after what it was given is done.
    func close()
}

extension MessageOutbox {
    /// `enqueue` for async callers.
    public func enqueue(_ draft: MemoDraft) async throws(Outbox.EnqueueError) -> Outbox.EnqueueOutcome {
        let result = await withCheckedContinuation { continuation in
            enqueue(draft) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }
}

extension DeliveryQueue {
    /// `claimDue`, excluding nothing.
    public func claimDue(limit: Int, maxBytes: Int, leaseMilliseconds: Int64) throws -> [ClaimedMessage] {
        try claimDue(limit: limit, maxBytes: maxBytes, leaseMilliseconds: leaseMilliseconds, excluding: [])
    }

    /// Claims up to `limit` due memos, whatever their size.
    public func claimDue(limit: Int, leaseMilliseconds: Int64) throws -> [ClaimedMessage] {
        try claimDue(limit: limit, maxBytes: .max, leaseMilliseconds: leaseMilliseconds)
    }
}
