import Dispatch
import Foundation
import Synchronization

/// The durable outbox: every accepted memo is a row in SQLite, sealed with AES-256-GCM.
///
/// All writes run on one serial queue over one connection. Enqueues are **group-committed**: the
/// writer takes every memo waiting, inserts them in one transaction, and answers each only after
/// that COMMIT (WAL, `synchronous=FULL`: the commit is on disk). While one batch is being fsynced
/// the next one gathers, so throughput grows with concurrency instead of being one fsync per memo.
/// Reads (`/history`, `/healthz`) use a second connection and never wait for the writer.
///
/// `@unchecked Sendable`: `writer` is used only on `writerQueue`, `reader` only while holding `readerLock`.
public final class Outbox: @unchecked Sendable {
    /// Why the outbox could not be opened.
    public enum OpenError: Error, CustomStringConvertible, Sendable {
        case wrongKey(databasePath: String)

        public var description: String {
            switch self {
            case .wrongKey(let path):
                return "the key does not open \(path): it was sealed with another key file (restore the key that "
                    + "belongs to this database)"
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
    }

    private struct Pending {
        var draft: MemoDraft
        var completion: @Sendable (Result<EnqueueOutcome, EnqueueError>) -> Void
    }

    private let writer: Database
    private let reader: Database
    private let readerLock = Mutex(())
    private let writerQueue = DispatchQueue(label: "jotter.outbox.writer", qos: .userInitiated)
    private let pending = Mutex<(items: [Pending], scheduled: Bool)>(([], false))
    private let sealingKey: SymmetricKey
    private let hashingKey: SymmetricKey
    private let clock: any WallClock
    private let onAccepted = Mutex<(@Sendable () -> Void)?>(nil)
    private let logger: Logger

    /// Opens (creating and migrating) the outbox database at `path`, sealing with `key`.
    public init(path: String, key: SymmetricKey, clock: any WallClock = SystemClock(),
                logger: Logger = Logger(label: "outbox")) throws {
        let writer = try Database(path: path)
        try Self.configure(writer)
        try Migrations.migrate(writer)
        let reader = try Database(path: path)
        try reader.execute("PRAGMA busy_timeout = 5000")
        self.writer = writer
        self.reader = reader
        self.sealingKey = try key.derived(purpose: "jotter outbox sealing v1")
        self.hashingKey = try Self.hashingSecret(writer, sealingKey: sealingKey)
        self.clock = clock
        self.logger = logger
    }

    /// The secret behind every keyed hash (idempotency keys, payloads, device tokens): 32 random bytes
    /// stored sealed under the outbox key. A separate secret, so `jotter rekey` can re-seal it and every
    /// stored hash stays valid under a new key.
    static func hashingSecret(_ database: Database, sealingKey: SymmetricKey) throws -> SymmetricKey {
        let associatedData = Array("jotter/hashing-secret/v1".utf8)
        let stored = try database.statement("SELECT value FROM settings WHERE name = 'hashing_secret'")
            .firstRow { $0.blob(0) } ?? nil
        if let stored {
            guard let secret = try? AESGCM.open(AESGCM.SealedBox(combined: stored), using: sealingKey,
                                                authenticating: associatedData) else {
                throw OpenError.wrongKey(databasePath: database.path)
            }
            return try SymmetricKey(bytes: secret)
        }
        let secret = try SymmetricKey.random()
        let sealed = try secret.withUnsafeBytes { bytes in
            try AESGCM.seal(Array(bytes), using: sealingKey, authenticating: associatedData)
        }
        try database.run("INSERT INTO settings (name, value) VALUES ('hashing_secret', ?)", [.blob(sealed.combined)])
        return secret
    }

    /// A subkey of the hashing secret for another component (device tokens).
    public func hashingKey(purpose: String) throws -> SymmetricKey {
        try hashingKey.derived(purpose: purpose)
    }

    /// WAL, `synchronous=FULL` (read back: the 204 promise depends on it), `secure_delete`.
    private static func configure(_ database: Database) throws {
        try database.execute("PRAGMA busy_timeout = 5000")
        let mode = try database.pragma("journal_mode = WAL")
        guard mode?.lowercased() == "wal" else {
            throw DatabaseError(code: 1, message: "could not enable WAL (journal_mode is \(mode ?? "unknown"))")
        }
        try database.execute("PRAGMA synchronous = FULL; PRAGMA secure_delete = ON; PRAGMA foreign_keys = ON")
        guard try database.pragma("synchronous") == "2" else {
            throw DatabaseError(code: 1, message: "could not set synchronous=FULL")
        }
        guard try database.pragma("secure_delete") == "1" else {
            throw DatabaseError(code: 1, message: "could not set secure_delete")
        }
    }

    /// Closes both connections after the writer has finished what it was given.
    public func close() {
        writerQueue.sync { writer.close() }
        readerLock.withLock { _ in reader.close() }
    }

    /// Called (on the writer queue) after a batch that stored at least one new memo commits.
    public func setOnAccepted(_ handler: (@Sendable () -> Void)?) {
        onAccepted.withLock { $0 = handler }
    }

    // MARK: Enqueue (group commit)

    /// Stores `draft`; `completion` runs after the COMMIT that made it durable, or with the reason it was not stored.
    public func enqueue(_ draft: MemoDraft,
                        completion: @escaping @Sendable (Result<EnqueueOutcome, EnqueueError>) -> Void) {
        let schedule = pending.withLock { state -> Bool in
            state.items.append(Pending(draft: draft, completion: completion))
            if state.scheduled { return false }
            state.scheduled = true
            return true
        }
        if schedule {
            writerQueue.async { self.commitBatch() }
        }
    }

    /// `enqueue` for async callers.
    public func enqueue(_ draft: MemoDraft) async throws(EnqueueError) -> EnqueueOutcome {
        let result = await withCheckedContinuation { continuation in
            enqueue(draft) { continuation.resume(returning: $0) }
        }
        return try result.get()
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
        defer { writerQueue.async { self.commitBatch() } }

        let now = clock.nowMilliseconds()
        var outcomes: [Result<EnqueueOutcome, EnqueueError>] = []
        outcomes.reserveCapacity(batch.count)
        do {
            // The 204 promise: whatever a bookkeeping write did, an accept commit is fsynced.
            try writer.execute("PRAGMA synchronous = FULL")
            try writer.write { database in
                for item in batch {
                    outcomes.append(try insert(item.draft, now: now, into: database))
                }
            }
        } catch {
            let failure = error as? DatabaseError
            logger.error("outbox commit failed", metadata: ["error.kind": failure?.kind ?? "\(type(of: error))",
                                                            "batch": "\(batch.count)"])
            let storage = EnqueueError.storage(kind: failure?.kind ?? "io", diskFull: failure?.isDiskFull ?? false)
            outcomes = Array(repeating: .failure(storage), count: batch.count)
        }
        for (item, outcome) in zip(batch, outcomes) {
            item.completion(outcome)
        }
        if outcomes.contains(where: { if case .success(.accepted) = $0 { true } else { false } }) {
            onAccepted.withLock { $0 }?()
        }
    }

    private func insert(_ draft: MemoDraft, now: Int64,
                        into database: Database) throws -> Result<EnqueueOutcome, EnqueueError> {
        let payloadHash = HMAC.sha256(Self.canonicalPayload(draft), key: hashingKey)
        var idempotencyHash: DatabaseValue = .null
        if let key = draft.idempotencyKey {
            let hash = HMAC.sha256(Array(key.utf8), key: hashingKey)
            idempotencyHash = .blob(hash)
            let existing = try database.statement(
                "SELECT id, payload_hash FROM messages WHERE idempotency_hash = ?"
            ).firstRow([.blob(hash)]) { row in (row.text(0) ?? "", row.blob(1) ?? []) }
            if let (id, storedHash) = existing {
                return HMAC.constantTimeEquals(storedHash, payloadHash)
                    ? .success(.replayed(id: id)) : .failure(.idempotencyConflict)
            }
        }
        let id = UUID().uuidString.lowercased()
        let content = MemoContent(subject: draft.subject.map(SubjectLine.sanitized)
                                    ?? SubjectLine.derived(from: draft.body),
                                  body: draft.body)
        let sealedPayload = try AESGCM.seal(content.encoded(), using: sealingKey,
                                            authenticating: Self.associatedData("payload", id))
        let sealedSubject = try AESGCM.seal(Array(content.subject.utf8), using: sealingKey,
                                            authenticating: Self.associatedData("subject", id))
        try database.run("""
            INSERT INTO messages (id, created_at, sealed_payload, sealed_subject, status, attempts,
                                  next_attempt_at, idempotency_hash, payload_hash)
            VALUES (?, ?, ?, ?, 'queued', 0, ?, ?, ?)
            """, [.text(id), .integer(now), .blob(sealedPayload.combined), .blob(sealedSubject.combined),
                  .integer(now), idempotencyHash, .blob(payloadHash)])
        return .success(.accepted(id: id))
    }

    /// The bytes whose keyed hash detects a conflicting replay: exactly what the client sent.
    private static func canonicalPayload(_ draft: MemoDraft) -> [UInt8] {
        var bytes: [UInt8] = []
        if let subject = draft.subject {
            bytes = [1] + Array(String(subject.utf8.count).utf8) + [0x3A] + Array(subject.utf8)
        } else {
            bytes = [0]
        }
        return bytes + Array(draft.body.utf8)
    }

    /// Binds a sealed field to its row: a payload moved to another id, or into another column, fails to open.
    static func associatedData(_ field: String, _ id: String) -> [UInt8] {
        Array("jotter/\(field)/v1/\(id)".utf8)
    }

    // MARK: Worker-side writes

    /// Runs `body` in a write transaction on the writer queue and waits for it.
    ///
    /// `durable: false` is for the worker's bookkeeping after a memo is accepted (claims, leases,
    /// outcomes): that commit is not fsynced on its own (WAL, `synchronous=NORMAL`) but rides on the next
    /// durable commit or checkpoint, which syncs the whole log. A power loss can undo such a step, and
    /// then a delivery is repeated, which every transport makes harmless (the Maildir and markdown check
    /// the memo's id; the APIs dedupe on it as `Idempotency-Key`; see DESIGN, "Power loss").
    private func performWrite<T: Sendable>(durable: Bool = true,
                                           _ body: @escaping (Database) throws -> T) throws -> T {
        try writerQueue.sync {
            if durable { return try writer.write(body) }
            try writer.execute("PRAGMA synchronous = NORMAL")
            defer { try? writer.execute("PRAGMA synchronous = FULL") }
            return try writer.write(body)
        }
    }

    /// Claims up to `limit` memos that are due: marks them `sending` with a lease and opens them.
    public func claimDue(limit: Int, leaseMilliseconds: Int64) throws -> [ClaimedMessage] {
        let now = clock.nowMilliseconds()
        let rows = try performWrite(durable: false) { database in
            try database.statement("""
                UPDATE messages SET status = 'sending', attempts = attempts + 1, lease_until = ?1
                WHERE seq IN (
                    SELECT seq FROM (
                        SELECT seq, next_attempt_at AS due FROM messages INDEXED BY messages_waiting
                        WHERE status IN ('queued', 'retrying') AND next_attempt_at <= ?2
                        ORDER BY next_attempt_at, seq LIMIT ?3)
                    UNION ALL
                    SELECT seq FROM (
                        SELECT seq FROM messages INDEXED BY messages_in_flight
                        WHERE status = 'sending' AND lease_until <= ?2 LIMIT ?3)
                    LIMIT ?3)
                RETURNING id, created_at, attempts, sealed_payload, backoff_step
                """).rows([.integer(now + leaseMilliseconds), .integer(now), .integer(Int64(limit))]) { row in
                (row.text(0) ?? "", row.int64(1), Int(row.int64(2)), row.blob(3), Int(row.int64(4)))
            }
        }
        return rows.map { id, createdAt, attempts, sealed, step in
            ClaimedMessage(id: id, createdAt: createdAt, attempt: attempts, backoffStep: step,
                           content: open(sealed, id: id))
        }
    }

    private func open(_ sealed: [UInt8]?, id: String) -> MemoContent? {
        guard let sealed, let box = try? AESGCM.SealedBox(combined: sealed),
              let plaintext = try? AESGCM.open(box, using: sealingKey,
                                               authenticating: Self.associatedData("payload", id))
        else { return nil }
        return MemoContent(encoded: plaintext)
    }

    /// Records a delivery: `sent`, and the body is erased (the sealed subject stays for the retention period).
    ///
    /// `durable: false` when the transport repeats harmlessly; otherwise (SMTP, sendmail) the outcome is
    /// fsynced at once, so that the window in which power loss can repeat an email stays one fsync long.
    public func markSent(id: String, durable: Bool = true) throws {
        let now = clock.nowMilliseconds()
        try performWrite(durable: durable) { database in
            try database.run("""
                UPDATE messages SET status = 'sent', delivered_at = ?, sealed_payload = NULL, lease_until = NULL,
                                    next_attempt_at = NULL, last_error = NULL
                WHERE id = ? AND status = 'sending'
                """, [.integer(now), .text(id)])
        }
    }

    /// Records a failed attempt: `retrying` at `nextAttemptAt`, or `failed`/`held` (kept, never dropped).
    public func markFailed(id: String, status: DeliveryStatus, errorKind: String, nextAttemptAt: Int64?,
                           backoffStep: Int = 0) throws {
        precondition([.retrying, .failed, .held].contains(status), "not a failure status: \(status)")
        try performWrite(durable: false) { database in
            try database.run("""
                UPDATE messages SET status = ?, last_error = ?, next_attempt_at = ?, lease_until = NULL,
                                    backoff_step = ?
                WHERE id = ? AND status = 'sending'
                """, [.text(status.rawValue), .text(errorKind), nextAttemptAt.map { .integer($0) } ?? .null,
                      .integer(Int64(backoffStep)), .text(id)])
        }
    }

    /// What `requeue(id:)` did.
    public enum RequeueOutcome: Sendable, Equatable {
        case requeued
        case notFound
        /// Only `failed` and `held` memos are put back; others are already on their way.
        case notFailed(DeliveryStatus)
    }

    /// Puts one `failed` or `held` memo back in the queue, due now, with a fresh backoff ladder.
    public func requeue(id: String) throws -> RequeueOutcome {
        let now = clock.nowMilliseconds()
        return try performWrite { database in
            guard let status = try database.statement("SELECT status FROM messages WHERE id = ?")
                .firstRow([.text(id)], { $0.text(0) }) else { return .notFound }
            guard status == "failed" || status == "held" else {
                return .notFailed(DeliveryStatus(rawValue: status ?? "") ?? .held)
            }
            try database.run("""
                UPDATE messages SET status = 'queued', next_attempt_at = ?, backoff_step = 0, last_error = NULL
                WHERE id = ?
                """, [.integer(now), .text(id)])
            return .requeued
        }
    }

    /// Puts every `failed` memo back in the queue (the relay configuration changed). Returns how many.
    @discardableResult
    public func requeueFailed() throws -> Int {
        let now = clock.nowMilliseconds()
        return try performWrite { database in
            try database.run("""
                UPDATE messages SET status = 'queued', next_attempt_at = ?, backoff_step = 0
                WHERE status = 'failed'
                """, [.integer(now)])
            return database.changes
        }
    }

    /// Makes every waiting retry due now (the relay answers again after an outage).
    public func makeRetriesDue() throws {
        let now = clock.nowMilliseconds()
        try performWrite(durable: false) { database in
            try database.run("""
                UPDATE messages SET next_attempt_at = ? WHERE status = 'retrying' AND next_attempt_at > ?
                """, [.integer(now), .integer(now)])
        }
    }

    /// Records `fingerprint` for `name` and says whether it differs from the one stored before
    /// (false the first time: there was nothing to differ from).
    public func settingChanged(_ name: String, fingerprint: [UInt8]) throws -> Bool {
        let keyed = HMAC.sha256(fingerprint, key: hashingKey)
        return try performWrite { database in
            let previous = try database.statement("SELECT value FROM settings WHERE name = ?")
                .firstRow([.text(name)]) { $0.blob(0) } ?? nil
            try database.run("INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)",
                             [.text(name), .blob(keyed)])
            return previous.map { !HMAC.constantTimeEquals($0, keyed) } ?? false
        }
    }

    /// Puts memos an earlier process left `sending` back in the queue (the data directory lock proves
    /// that process is gone). Returns how many.
    @discardableResult
    public func recoverInterrupted() throws -> Int {
        let now = clock.nowMilliseconds()
        return try performWrite(durable: false) { database in
            try database.run("""
                UPDATE messages SET status = 'queued', lease_until = NULL, next_attempt_at = ?
                WHERE status = 'sending'
                """, [.integer(now)])
            return database.changes
        }
    }

    /// When the earliest scheduled attempt is due (or a lease runs out), or nil if nothing waits.
    public func nextDueAt() throws -> Int64? {
        try read { database in
            let waiting = try database.statement("""
                SELECT MIN(next_attempt_at) FROM messages INDEXED BY messages_waiting
                WHERE status IN ('queued', 'retrying')
                """).firstRow { $0.optionalInt64(0) } ?? nil
            let leases = try database.statement("""
                SELECT MIN(lease_until) FROM messages INDEXED BY messages_in_flight WHERE status = 'sending'
                """).firstRow { $0.optionalInt64(0) } ?? nil
            return [waiting, leases].compactMap { $0 }.min()
        }
    }

    /// Forgets retained subjects of memos delivered before `cutoff` (epoch ms).
    public func purgeSubjects(deliveredBefore cutoff: Int64) throws {
        try performWrite(durable: false) { database in
            try database.run("UPDATE messages SET sealed_subject = NULL WHERE status = 'sent' AND delivered_at < ?",
                             [.integer(cutoff)])
        }
    }

    /// Stores a plain (non-secret) setting.
    public func writeSetting(_ name: String, value: String) throws {
        try performWrite { database in
            try database.run("INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)",
                             [.text(name), .blob(Array(value.utf8))])
        }
    }

    // MARK: Reads

    /// A plain setting written by `writeSetting`.
    public func readSetting(_ name: String) throws -> String? {
        try read { database in
            try database.statement("SELECT value FROM settings WHERE name = ?").firstRow([.text(name)]) { row in
                row.blob(0).map { String(decoding: $0, as: UTF8.self) }
            } ?? nil
        }
    }

    /// How many memos were ever accepted (rows are never deleted, so the highest sequence number).
    public func acceptedCount() throws -> Int64 {
        try read { database in
            try database.statement("SELECT COALESCE(MAX(seq), 0) FROM messages").firstRow { $0.int64(0) } ?? 0
        }
    }

    private func read<T: Sendable>(_ body: (Database) throws -> T) throws -> T {
        try readerLock.withLock { _ in try reader.read(body) }
    }

    private static let recordColumns = """
        id, created_at, status, attempts, next_attempt_at, delivered_at, last_error, sealed_subject
        """

    private func record(_ row: Row) -> MessageRecord {
        let id = row.text(0) ?? ""
        let subject = row.blob(7).flatMap { sealed -> String? in
            guard let box = try? AESGCM.SealedBox(combined: sealed),
                  let plain = try? AESGCM.open(box, using: sealingKey,
                                               authenticating: Self.associatedData("subject", id))
            else { return nil }
            return String(decoding: plain, as: UTF8.self)
        }
        return MessageRecord(id: id, createdAt: row.int64(1),
                             status: DeliveryStatus(rawValue: row.text(2) ?? "") ?? .held,
                             attempts: Int(row.int64(3)), nextAttemptAt: row.optionalInt64(4),
                             deliveredAt: row.optionalInt64(5), lastError: row.text(6), subject: subject)
    }

    /// Newest first, at most `limit`, older than the memo `before` (an id) when given.
    public func history(limit: Int, before: String? = nil) throws -> [MessageRecord] {
        try read { database in
            if let before {
                return try database.statement("""
                    SELECT \(Self.recordColumns) FROM messages
                    WHERE seq < (SELECT seq FROM messages WHERE id = ?) ORDER BY seq DESC LIMIT ?
                    """).rows([.text(before), .integer(Int64(limit))], record)
            }
            return try database.statement("SELECT \(Self.recordColumns) FROM messages ORDER BY seq DESC LIMIT ?")
                .rows([.integer(Int64(limit))], record)
        }
    }

    /// One memo's record.
    public func record(id: String) throws -> MessageRecord? {
        try read { database in
            try database.statement("SELECT \(Self.recordColumns) FROM messages WHERE id = ?")
                .firstRow([.text(id)], record)
        }
    }

    /// How many memos are in each status.
    public func counts() throws -> [DeliveryStatus: Int] {
        try read { database in
            var counts = Dictionary(uniqueKeysWithValues: DeliveryStatus.allCases.map { ($0, 0) })
            for (status, count) in try database.statement("SELECT status, COUNT(*) FROM messages GROUP BY status")
                .rows([], { row in (row.text(0) ?? "", Int(row.int64(1))) }) {
                if let status = DeliveryStatus(rawValue: status) { counts[status] = count }
            }
            return counts
        }
    }
}
