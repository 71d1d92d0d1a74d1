import Synchronization

/// Accepts memos with **group commit**: the writer takes every memo waiting, inserts them in one
/// transaction, and answers each only after that COMMIT (WAL, `synchronous=FULL`: on disk). While one
/// batch is being fsynced the next one gathers, so throughput grows with concurrency instead of being
/// one fsync per memo.
final class GroupCommit: Sendable {
    typealias Completion = @Sendable (Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>) -> Void

    private struct Pending: Sendable {
        var draft: MemoDraft
        var completion: Completion
    }

    private let database: DatabaseQueue
    private let store: MessageStore
    private let clock: any WallClock
    private let logger: Logger
    /// Told of a commit that met a damaged page.
    private let integrity: IntegrityWatch?
    /// Memos waiting for the next batch; whether a batch is scheduled or running; and how many memos
    /// are between `enqueue` and their answer (the inline path is for a memo that is alone).
    private let pending = Mutex<(items: [Pending], scheduled: Bool, unanswered: Int)>(([], false, 0))
    private let onAccepted = Callback()
    /// Why memos are refused, from the first refused commit until one commits again.
    private let trouble = Mutex<Outbox.StorageTrouble?>(nil)

    init(database: DatabaseQueue, store: MessageStore, clock: any WallClock, logger: Logger,
         integrity: IntegrityWatch? = nil) {
        self.database = database
        self.store = store
        self.clock = clock
        self.logger = logger
        self.integrity = integrity
    }

    /// Called (on the writer queue) after a batch that stored at least one new memo commits.
    func setOnAccepted(_ handler: (@Sendable () -> Void)?) {
        onAccepted.set(handler)
    }

    /// Set while commits of memos fail for the disk's reasons, until one commits again.
    var storageTrouble: Outbox.StorageTrouble? { trouble.withLock { $0 } }

    /// Stores `draft`; `completion` runs after the COMMIT that made it durable, or with the reason it was not stored.
    ///
    /// With `inline`, when no batch is gathering, the memo is committed at once on the calling thread (one client
    /// posting one memo at a time: no hop to the writer's thread and back, and the answer goes out
    /// before the request callback returns, so the connection is never suspended). Memos arriving
    /// meanwhile gather into the next batch, as always.
    func enqueue(_ draft: MemoDraft, inline: Bool, completion: @escaping Completion) {
        let item = Pending(draft: draft, completion: { [self] result in
            pending.withLock { $0.unanswered -= 1 }
            completion(result)
        })
        enum Next { case inline, schedule, joined }
        let next = pending.withLock { state -> Next in
            state.unanswered += 1
            if state.scheduled {
                state.items.append(item)
                return .joined
            }
            state.scheduled = true
            // Alone (no other memo awaiting its answer): commit here. With company, batch as always —
            // a request thread blocked on a commit would hold back the memos of its other connections.
            if inline && state.unanswered == 1 && !database.isWriterQueue { return .inline }
            state.items.append(item)
            return .schedule
        }
        switch next {
        case .joined: return
        case .schedule: database.async { self.commitBatch() }
        case .inline:
            database.sync { commit([item]) }
            // Whatever gathered meanwhile goes in the next batch; with nothing, the writer is free again.
            let more = pending.withLock { state -> Bool in
                if state.items.isEmpty { state.scheduled = false }
                return !state.items.isEmpty
            }
            if more { database.async { self.commitBatch() } }
        }
    }

    /// One batch: everything pending now, one transaction. Re-schedules itself (rather than looping)
    /// so the delivery worker's writes interleave with a steady stream of enqueues.
    private func commitBatch() {
        let batch = pending.withLock { state -> [Pending] in
            let items = state.items
            state.items.removeAll(keepingCapacity: true)
            if items.isEmpty { state.scheduled = false }
            return items
        }
        guard !batch.isEmpty else { return }
        defer { database.async { self.commitBatch() } }
        commit(batch)
    }

    /// One transaction for `batch`, then each completion, then the worker's wake-up.
    private func commit(_ batch: [Pending]) {
        let now = clock.nowMilliseconds()
        var outcomes: [Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>]
        do {
            outcomes = try insert(batch.map(\.draft), now: now)
        } catch let failure as DatabaseError where failure.isDiskFull && batch.count > 1 {
            // One large memo must not take its whole batch down with it on a nearly full disk: each
            // member on its own, so only the memos that do not fit are refused.
            logger.warning("outbox commit failed; storing its memos one by one",
                           metadata: ["error.kind": failure.kind, "batch": "\(batch.count)"])
            outcomes = batch.map { item in
                do {
                    return try insert([item.draft], now: now)[0]
                } catch {
                    return .failure(refusal(error, batch: 1, now: now))
                }
            }
        } catch {
            outcomes = Array(repeating: .failure(refusal(error, batch: batch.count, now: now)), count: batch.count)
        }
        if outcomes.contains(where: { (try? $0.get()) != nil }) { trouble.withLock { if $0 != nil { $0 = nil } } }
        for (item, outcome) in zip(batch, outcomes) {
            item.completion(outcome)
        }
        if outcomes.contains(where: { if case .success(.accepted) = $0 { true } else { false } }) {
            onAccepted.call()
        }
    }

    /// Inserts `drafts` in one durable transaction.
    private func insert(_ drafts: [MemoDraft],
                        now: Int64) throws -> [Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>] {
        try database.transaction(durable: true) { database in
            try drafts.map { try store.insert($0, now: now, into: database) }
        }
    }

    /// What a memo whose commit failed with `error` is told; notes the disk's trouble on the way.
    private func refusal(_ error: any Error, batch: Int, now: Int64) -> Outbox.EnqueueError {
        let failure = error as? DatabaseError
        integrity?.note(error)
        logger.error("outbox commit failed", metadata: ["error.kind": failure?.kind ?? "\(type(of: error))",
                                                        "batch": "\(batch)"])
        let reason = failure?.storageTrouble ?? "other"
        trouble.withLock { trouble in
            if trouble?.reason != reason {
                trouble = Outbox.StorageTrouble(reason: reason, sinceMilliseconds: trouble?.sinceMilliseconds ?? now)
            }
        }
        // Its frames may be whole in the WAL, and a restart would then recover it: not "not stored".
        if failure?.mayHaveCommitted == true { return .outcomeUnknown(kind: failure?.kind ?? "io") }
        return .storage(kind: failure?.kind ?? "io", diskFull: failure?.isDiskFull ?? false)
    }
}
