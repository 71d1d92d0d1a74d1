import Dispatch
import Synchronization

/// The durable outbox: every accepted memo is a row in SQLite, sealed with AES-256-GCM.
///
/// A façade over its parts, each small: `GroupCommit` accepts memos, `MessageStore` is the SQL of the
/// `messages` table, `DeliveryLifecycle` decides every change of a memo's delivery state (the store
/// only persists what it decided), `SettingsStore` and `HistoryReader` the rest. One `DatabaseQueue`
/// serves them all (and the device registry).
public final class Outbox: MessageOutbox {
    /// Why the outbox could not be opened.
    public enum OpenError: Error, CustomStringConvertible, Sendable {
        case wrongKey(databasePath: String)
        /// A relay node's key does not open the shared store: every node needs the same key file.
        case keyNotShared(keyPath: String)
        /// The database's first pages (its header, its schema) cannot be read: nothing can be done with it.
        case damaged(databasePath: String, kind: String)

        public var description: String {
            switch self {
            case .damaged(let path, let kind):
                return "\(path) cannot be opened: its pages are damaged (\(kind)); stop, keep a copy of the data "
                    + "directory, and restore jotter.db from your backup (README: 'A damaged database')"
            case .wrongKey(let path):
                return "the key does not open \(path): it was sealed with another key file (restore the key that "
                    + "belongs to this database)"
            case .keyNotShared(let keyPath):
                return "this node's key (\(keyPath)) does not open the relay's data in PostgreSQL: every relay node "
                    + "needs the same key file; copy it from a node that already serves (mode 0600)"
            }
        }
    }

    /// What happened to an enqueued memo.
    public enum EnqueueOutcome: Sendable, Equatable {
        /// Stored under a new id.
        case accepted(id: String)
        /// The same `Idempotency-Key` and payload were stored before under this id; nothing new was stored.
        case replayed(id: String)

        /// The message id either way.
        public var id: String {
            switch self {
            case .accepted(let id), .replayed(let id): return id
            }
        }
    }

    /// Why a memo was not stored.
    public enum EnqueueError: Error, Sendable, Equatable {
        /// The `Idempotency-Key` was used before with a different payload.
        case idempotencyConflict
        /// The database could not commit (disk full, I/O error); the memo is not stored.
        case storage(kind: String, diskFull: Bool)
        /// The database (PostgreSQL) went away after the COMMIT was sent: the memo may be stored. Sending
        /// it again under the same idempotency key finds it if it is.
        case outcomeUnknown(kind: String)
    }

    /// Why memos are being refused: the commit of the last one failed for the disk's reasons.
    public struct StorageTrouble: Sendable, Equatable {
        /// `DatabaseError.storageTrouble`: `disk_full`, `read_only`, `io_error`, `damaged`, …
        public let reason: String
        /// When commits began to fail (wall clock, milliseconds since 1970).
        public let sinceMilliseconds: Int64
    }

    /// What `/healthz` reports as `storage`: set from the first memo refused for the disk's reasons until
    /// a memo is stored again, or else from the first claim or outcome the delivery worker could not write
    /// until one is written again (a disk that filled while no memo came: the waiting memos do not go).
    public var storageTrouble: StorageTrouble? { accepting.storageTrouble ?? deliveryTrouble.withLock { $0 } }

    /// The delivery worker's side of `storageTrouble`.
    private let deliveryTrouble = Mutex<StorageTrouble?>(nil)

    /// A claim or outcome the worker could not write (`error`), or one it wrote (nil).
    public func noteDeliveryWrite(failedWith error: (any Error)?) {
        guard let error else {
            deliveryTrouble.withLock { $0 = nil }
            return
        }
        let trouble = StorageTrouble(reason: (error as? DatabaseError)?.storageTrouble ?? "other",
                                     sinceMilliseconds: clock.nowMilliseconds())
        deliveryTrouble.withLock { if $0?.reason != trouble.reason { $0 = trouble } }
    }

    /// Damage seen in the database's pages (by `checkIntegrity`, or by a read that met it): what
    /// `/healthz` reports as `storage.state: damaged`, for the life of the process.
    var damage: IntegrityWatch.Damage? { integrity.damage }

    /// The one database queue (the device registry shares it).
    public let database: DatabaseQueue
    /// Plain settings and configuration fingerprints.
    public let settings: SettingsStore
    /// What `/history` and `/healthz` read.
    public let history: HistoryReader
    let store: MessageStore
    private let accepting: GroupCommit
    private let integrity: IntegrityWatch
    private let hashingKey: SymmetricKey
    private let clock: any WallClock

    /// Opens (creating and migrating) the outbox database at `path`, sealing with `key`.
    public init(path: String, key: SymmetricKey, clock: any WallClock = SystemClock(),
                logger: Logger = Logger(label: "outbox"), recordsSubjects: Bool = true) throws {
        let database: DatabaseQueue
        let sealer = try Sealer(dataKey: key)
        let hashingKey: SymmetricKey
        do {
            database = try DatabaseQueue(path: path)
            hashingKey = try SettingsStore.hashingSecret(database, sealer: sealer)
        } catch let failure as DatabaseError where failure.meansDamage {
            // Said as what it is and what to do, not as SQLite's "malformed" and the statement it met it in.
            throw OpenError.damaged(databasePath: path, kind: failure.kind)
        }
        let store = MessageStore(sealer: sealer, hashingKey: hashingKey, recordsSubjects: recordsSubjects)
        self.database = database
        self.store = store
        self.hashingKey = hashingKey
        self.clock = clock
        settings = SettingsStore(database: database, hashingKey: hashingKey, sealer: sealer)
        history = HistoryReader(database: database, sealer: sealer)
        let integrity = IntegrityWatch(path: path, vfs: database.vfs, clock: clock, logger: logger)
        self.integrity = integrity
        accepting = GroupCommit(database: database, store: store, clock: clock, logger: logger, integrity: integrity)
    }

    /// Reads every page of the database once, on the calling thread (never the writer's or a request's),
    /// on a connection of its own: nothing waits for it.
    public func checkIntegrity() {
        integrity.check()
    }

    /// Reads every page now and then daily, on a queue of its own (`IntegrityWatch`); `close` stops it.
    public func startIntegrityChecks() {
        integrity.startChecking()
    }

    /// Takes the word of a failed read or write about the database's pages (see `IntegrityWatch.note`).
    public func noteDamage(_ error: any Error) {
        integrity.note(error)
    }

    /// A subkey of the hashing secret for another component (device tokens).
    public func hashingKey(purpose: String) throws -> SymmetricKey {
        try hashingKey.derived(purpose: purpose)
    }

    /// Closes the database after the writer has finished what it was given.
    public func close() {
        integrity.stopChecking()
        database.close()
    }

    /// Called (on the writer queue) after a batch that stored at least one new memo commits.
    public func setOnAccepted(_ handler: (@Sendable () -> Void)?) {
        accepting.setOnAccepted(handler)
    }

    // MARK: Accept

    /// Stores `draft`; `completion` runs after the COMMIT that made it durable, or with the reason it was not stored.
    ///
    /// `callerMayBlock`: the caller's thread may wait for one COMMIT (libmicrohttpd's request threads
    /// may): when no batch is gathering, the memo is then committed on it at once. Never from a Dispatch
    /// or Swift concurrency worker thread: blocking one can starve the writer's own thread.
    public func enqueue(_ draft: MemoDraft, callerMayBlock: Bool,
                        completion: @escaping @Sendable (Result<EnqueueOutcome, EnqueueError>) -> Void) {
        accepting.enqueue(draft, inline: callerMayBlock, completion: completion)
    }


    // MARK: Lifecycle

    /// Claims up to `limit` memos that are due, while their sealed contents fit `maxBytes` (the first
    /// whatever its size): each `DeliveryLifecycle.claim`ed (a lease of `leaseMilliseconds`) and
    /// opened. Not fsynced on its own: a claim undone by power loss is simply claimed again.
    public func claimDue(limit: Int, maxBytes: Int, leaseMilliseconds: Int64,
                         excluding: Set<String>) throws -> [ClaimedMessage] {
        let now = clock.nowMilliseconds()
        let claimed = try database.write(durable: false) { database in
            var budget = ClaimBudget(maxBytes: maxBytes)
            var claimed: [(String, Int64, Int64, [UInt8]?, DeliveryLifecycle)] = []
            for candidate in try store.claimable(now: now, limit: limit, in: database)
            where !excluding.contains(candidate.id) {
                guard budget.fits(candidate.sealed) else { break }
                var lifecycle = candidate.lifecycle
                guard (try? lifecycle.claim(now: now, leaseMilliseconds: leaseMilliseconds)) != nil else { continue }
                try store.persist(lifecycle, id: candidate.id, from: candidate.lifecycle.status, in: database)
                budget.take(candidate.sealed)
                claimed.append((candidate.id, candidate.createdAt, candidate.seq, candidate.sealed, lifecycle))
            }
            return claimed
        }
        return claimed.map { id, createdAt, seq, sealed, lifecycle in
            ClaimedMessage(id: id, createdAt: createdAt, seq: seq, attempt: lifecycle.attempts,
                           backoffStep: lifecycle.backoffStep, content: store.open(sealed, id: id))
        }
    }

    /// Applies `decide` to memo `id`'s stored lifecycle and persists the result, in one transaction.
    /// Returns the new lifecycle, or nil when there is no such memo; rethrows the lifecycle's refusal
    /// (nothing is written then). `durable: false` for bookkeeping whose loss a repeat makes harmless.
    @discardableResult
    public func transition(id: String, durable: Bool = true,
                           _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> DeliveryLifecycle? {
        try database.write(durable: durable) { database in
            switch try Self.apply(decide, to: id, store: store, in: database) {
            case .notFound: return nil
            case .refused(let refusal): throw refusal
            case .changed(let after): return after
            }
        }
    }

    @discardableResult
    public func transition(ids: [String], durable: Bool,
                           _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> [String: DeliveryLifecycle] {
        try database.write(durable: durable) { database in
            var changed: [String: DeliveryLifecycle] = [:]
            for id in ids {
                if case .changed(let after) = try Self.apply(decide, to: id, store: store, in: database) {
                    changed[id] = after
                }
            }
            return changed
        }
    }

    /// What applying a lifecycle step to one memo came to.
    private enum Applied {
        case notFound
        /// The lifecycle refused; nothing was written.
        case refused(DeliveryLifecycle.Refusal)
        case changed(DeliveryLifecycle)
    }

    /// Reads memo `id`'s lifecycle, applies `decide`, persists the result: inside the caller's transaction.
    private static func apply(_ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void,
                              to id: String, store: MessageStore, in database: Database) throws -> Applied {
        guard let before = try store.lifecycle(id: id, in: database) else { return .notFound }
        var after = before
        do throws(DeliveryLifecycle.Refusal) {
            try decide(&after)
        } catch {
            return .refused(error)
        }
        try store.persist(after, id: id, from: before.status, in: database)
        return .changed(after)
    }

    /// `apply` later, queued behind the writer's other work (no request thread waits for the writer);
    /// `also` runs in the same transaction when the step was taken.
    private func applyLater(_ decide: @escaping @Sendable (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void,
                            to id: String, also: @escaping @Sendable (Database) throws -> Void = { _ in },
                            completion: @escaping @Sendable (Result<Applied, any Error>) -> Void) {
        database.async { [store, database] in
            completion(Result {
                try database.transaction { database -> Applied in
                    let applied = try Self.apply(decide, to: id, store: store, in: database)
                    if case .changed = applied { try also(database) }
                    return applied
                }
            })
        }
    }

    /// Applies `decide` to every memo in `status` (that `matching` accepts, at most `limit`), oldest
    /// first, in one transaction; returns how many changed.
    private func transitionAll(in status: DeliveryStatus, durable: Bool, limit: Int = .max,
                               matching: (DeliveryLifecycle) -> Bool = { _ in true },
                               _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws -> Int {
        try database.write(durable: durable) { database in
            var changed = 0
            for id in try store.ids(in: status, database: database) where changed < limit {
                guard let before = try store.lifecycle(id: id, in: database), matching(before) else { continue }
                var after = before
                guard (try? decide(&after)) != nil, after != before else { continue }
                try store.persist(after, id: id, from: before.status, in: database)
                changed += 1
            }
            return changed
        }
    }

    /// Records a delivery: `sent`, and the body is erased (the sealed subject stays for the retention
    /// period). `durable: false` when the transport repeats harmlessly; otherwise (SMTP, sendmail) the
    /// outcome is fsynced at once, so the window in which power loss can repeat an email stays one
    /// fsync long.
    public func markSent(id: String, durable: Bool = true) throws {
        let now = clock.nowMilliseconds()
        try transition(id: id, durable: durable) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.delivered(now: now)
        }
    }

    /// What `requeue(id:)` did.
    public enum RequeueOutcome: Sendable, Equatable {
        case requeued
        case notFound
        /// Only `failed` and `held` memos are put back; others are already on their way.
        case notFailed(DeliveryStatus)
    }

    /// Puts one `failed` or `held` memo back in the queue, due now, with a fresh backoff ladder. The
    /// write is queued behind the writer's other work; `completion` runs when it is done (no request
    /// thread waits for the writer).
    public func requeue(id: String, completion: @escaping @Sendable (Result<RequeueOutcome, any Error>) -> Void) {
        let now = clock.nowMilliseconds()
        applyLater({ lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.requeue(now: now) }, to: id) { result in
            completion(result.map { applied in
                switch applied {
                case .notFound: return .notFound
                case .refused(let refusal): return .notFailed(refusal.from)
                case .changed: return .requeued
                }
            })
        }
    }

    /// What `cancel(id:)` did.
    public enum CancelOutcome: Sendable, Equatable {
        case cancelled
        case notFound
        /// The undo window has closed (or the memo is on its way, or was never in one).
        case tooLate(DeliveryStatus)
    }

    /// Takes a memo back inside its undo window: `cancelled`, its text erased, never delivered.
    public func cancel(id: String, completion: @escaping @Sendable (Result<CancelOutcome, any Error>) -> Void) {
        let now = clock.nowMilliseconds()
        let store = store
        applyLater({ lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.cancel(now: now) }, to: id,
                   also: { try store.eraseSubject(id: id, in: $0) }) { result in
            completion(result.map { applied in
                switch applied {
                case .notFound: return .notFound
                case .refused(let refusal): return .tooLate(refusal.from)
                case .changed: return .cancelled
                }
            })
        }
    }

    /// Puts every `failed` memo back in the queue (the relay configuration changed). Returns how many.
    @discardableResult
    public func requeueFailed() throws -> Int {
        let now = clock.nowMilliseconds()
        return try transitionAll(in: .failed, durable: true) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.requeue(now: now)
        }
    }

    /// Holds every waiting (queued or retrying) memo with `reason`, the relay refusing them all alike; but
    /// for those still in their undo window.
    @discardableResult
    public func holdWaiting(reason: String) throws -> Int {
        let now = clock.nowMilliseconds()
        var held = 0
        for status in [DeliveryStatus.queued, .retrying] {
            // A memo in its undo window stays queued, so its sender can still take it back; it is held at
            // the first pump after its window ends, if the relay still refuses then.
            held += try transitionAll(in: status, durable: true, matching: { !$0.isInUndoWindow(now: now) }) {
                lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.hold(reason: reason)
            }
        }
        return held
    }

    /// Puts up to `limit` memos held for one of `reasons` back in the queue, oldest first.
    @discardableResult
    public func releaseHeld(reasons: Set<String>, limit: Int) throws -> Int {
        let now = clock.nowMilliseconds()
        return try transitionAll(in: .held, durable: true, limit: limit,
                                 matching: { $0.lastError.map(reasons.contains) ?? false }) {
            lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.requeue(now: now)
        }
    }

    /// The reason of the oldest memo held for one of `reasons`, if any (at start: the relay refused before).
    public func heldReason(among reasons: Set<String>) throws -> String? {
        let store = store
        return try database.read { database in
            for id in try store.ids(in: .held, database: database) {
                if let reason = try store.lifecycle(id: id, in: database)?.lastError, reasons.contains(reason) {
                    return reason
                }
            }
            return nil
        }
    }

    /// Makes every waiting retry due now (the relay answers again after an outage).
    public func makeRetriesDue() throws {
        let now = clock.nowMilliseconds()
        _ = try transitionAll(in: .retrying, durable: false) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.relayAnswers(now: now)
        }
    }

    /// Puts memos an earlier process left `sending` back in the queue (the data directory lock proves
    /// that process is gone). Returns how many.
    @discardableResult
    public func recoverInterrupted() throws -> Int {
        let now = clock.nowMilliseconds()
        return try transitionAll(in: .sending, durable: false) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.interrupted(now: now)
        }
    }

    /// The `seq` of the last memo accepted so far (0: none yet).
    public func lastAccepted() throws -> Int64 {
        try database.read { try store.lastAccepted(in: $0) }
    }

    /// When the earliest scheduled attempt is due (or a lease runs out), or nil if nothing waits.
    public func nextDueAt() throws -> Int64? {
        try database.read { try store.nextDueAt(in: $0) }
    }

    /// Forgets retained subjects of memos delivered before `cutoff` (epoch ms); then, if memo text was
    /// erased since the last time (delivered bodies, subjects, memos taken back or forgotten), empties the
    /// WAL that still holds it (`DatabaseQueue.truncateWALAfterErasure`; a reader in the way leaves it to
    /// the next purge). The delivery worker calls it once a minute.
    public func purgeSubjects(deliveredBefore cutoff: Int64) throws {
        defer { database.truncateWALAfterErasure() }
        try database.write(durable: false) { try store.purgeSubjects(deliveredBefore: cutoff, in: $0) }
    }
}

extension Outbox {
    public func enqueue(_ draft: MemoDraft,
                        completion: @escaping @Sendable (Result<EnqueueOutcome, EnqueueError>) -> Void) {
        enqueue(draft, callerMayBlock: false, completion: completion)
    }

    public func record(id: String) throws -> MessageRecord? {
        try history.record(id: id)
    }

    public func stuck(acceptedBefore cutoff: Int64, limit: Int) throws -> [MessageRecord] {
        try history.stuck(acceptedBefore: cutoff, limit: limit)
    }

    public func configurationChanged(_ name: String, fingerprint: [UInt8]) throws -> Bool {
        try settings.changed(name, fingerprint: fingerprint)
    }

    /// (A relay's outbox only: a composer keeps its history.)
    @discardableResult
    public func forgetFinished(before cutoff: Int64, failedToo: Bool = false) throws -> Int {
        try database.write(durable: false) { database in
            try database.run("""
                DELETE FROM messages WHERE (status = 'sent' OR status = 'cancelled' OR (? AND status = 'failed'))
                    AND COALESCE(delivered_at, created_at) < ?
                """, [.integer(failedToo ? 1 : 0), .integer(cutoff)])
            // A failed message still has its sealed body (the purge empties the WAL of it).
            if database.changes > 0 { database.noteErasure() }
            return database.changes
        }
    }
}
