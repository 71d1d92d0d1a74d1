/// A relay's outbox in PostgreSQL (`jotter relay --store postgres://…`), shared by every node: any node
/// accepts a message, any node delivers it, and a node that dies mid-delivery leaves its claims to the
/// others once their lease runs out.
///
/// - Claims are `SELECT … FOR UPDATE SKIP LOCKED` (as PostgreSQL job queues such as River and Oban
///   claim jobs), so two nodes never claim one message at once; the claim writes a lease, and a lease
///   that ran out (a node killed mid-send) makes the message claimable again.
/// - An accepted message is announced with `NOTIFY`; every node `LISTEN`s and wakes its worker.
/// - Every transition is decided by `DeliveryLifecycle` on the row read `FOR UPDATE` in the same
///   transaction; the SQL only persists it.
/// - Messages are sealed as in the SQLite outbox, under the data key: every node needs the same key
///   file. The hashing secret (behind every keyed hash, the relay's device secrets included) is kept
///   here, sealed, so all nodes hash alike; a node whose key does not open it refuses to start.
///
/// A restarted node does not re-queue "its" interrupted sends at start, as the SQLite outbox does: in
/// a shared store it cannot prove that a `sending` row is not another node's, live send. Leases decide.
public final class PostgresOutbox: MessageOutbox {
    /// The channel messages are announced on.
    static let channel = "jotter_outbox"

    private let pool: PostgresPool
    private let store: MessageStore
    private let hashingSecret: SymmetricKey
    private let clock: any WallClock
    private let listener: PostgresListener
    private let onAccepted = Callback()
    private let announcing = Throttle(everyMilliseconds: PostgresOutbox.notifyEveryMilliseconds)

    /// How often a node announces new messages to the others, at most.
    static let notifyEveryMilliseconds: Int64 = 50

    /// Connects to `url`, creates or migrates the outbox's tables, and reads (or, on the first node,
    /// makes) the hashing secret. Throws `Outbox.OpenError.keyNotShared` if `key` (read from `keyPath`)
    /// does not open it. `listening: false` for a command that only writes (no wake-ups, no thread).
    public init(url: String, key: SymmetricKey, keyPath: String, listening: Bool = true,
                clock: any WallClock = SystemClock(), logger: Logger = Logger(label: "outbox"),
                recordsSubjects: Bool = true) throws {
        pool = try PostgresPool(url: url)
        try pool.migrate("outbox", Self.migrations)
        let sealer = try Sealer(dataKey: key)
        hashingSecret = try Self.hashingSecret(pool, sealer: sealer, keyPath: keyPath)
        store = MessageStore(sealer: sealer, hashingKey: hashingSecret, recordsSubjects: recordsSubjects)
        self.clock = clock
        let onAccepted = onAccepted
        listener = PostgresListener(url: url, channel: Self.channel, logger: logger) { onAccepted.call() }
        if listening { try listener.start() }
    }

    /// Step `n` (1-based) is `migrations[n - 1]`. Append only.
    static let migrations: [String] = [
        """
        CREATE TABLE jotter_messages (
            seq BIGSERIAL UNIQUE,
            id TEXT PRIMARY KEY,
            created_at BIGINT NOT NULL,
            sealed_payload BYTEA,
            sealed_subject BYTEA,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            backoff_step INTEGER NOT NULL DEFAULT 0,
            next_attempt_at BIGINT,
            lease_until BIGINT,
            delivered_at BIGINT,
            last_error TEXT,
            idempotency_hash BYTEA UNIQUE,
            payload_hash BYTEA NOT NULL
        );
        CREATE INDEX jotter_messages_waiting ON jotter_messages (next_attempt_at, seq)
            WHERE status IN ('queued', 'retrying');
        CREATE INDEX jotter_messages_in_flight ON jotter_messages (lease_until) WHERE status = 'sending';
        CREATE INDEX jotter_messages_status ON jotter_messages (status, seq) WHERE status IN ('held', 'failed');
        CREATE TABLE jotter_settings (name TEXT PRIMARY KEY, value BYTEA NOT NULL)
        """,
        // The minutely subject purge read every row (15 ms at 200,000 delivered memos, on every node);
        // through this index it reads what it erases.
        """
        CREATE INDEX jotter_messages_subject_kept ON jotter_messages (delivered_at)
            WHERE status = 'sent' AND sealed_subject IS NOT NULL
        """,
    ]

    /// The hashing secret, sealed in `jotter_settings`; the first node to ask makes it.
    private static func hashingSecret(_ pool: PostgresPool, sealer: Sealer, keyPath: String) throws -> SymmetricKey {
        let fresh = try SymmetricKey.random()
        let sealed = try fresh.withUnsafeBytes {
            try sealer.seal(Array($0), context: SettingsStore.hashingSecretContext)
        }
        let stored = try pool.transaction(serializable: false) { connection in
            try connection.execute("""
                INSERT INTO jotter_settings (name, value) VALUES ('hashing_secret', $1) ON CONFLICT (name) DO NOTHING
                """, [.bytes(sealed)])
            return try connection.execute("SELECT value FROM jotter_settings WHERE name = 'hashing_secret'")
                .first?.bytes(0)
        }
        guard let stored, let secret = sealer.open(stored, context: SettingsStore.hashingSecretContext) else {
            throw Outbox.OpenError.keyNotShared(keyPath: keyPath)
        }
        return try SymmetricKey(bytes: secret)
    }

    /// Every node claims from this queue.
    public var leasesAreShared: Bool { true }

    public func close() {
        listener.stop()
        pool.close()
    }

    public func setOnAccepted(_ handler: (@Sendable () -> Void)?) {
        onAccepted.set(handler)
    }

    public func hashingKey(purpose: String) throws -> SymmetricKey {
        try hashingSecret.derived(purpose: purpose)
    }

    // MARK: Accept

    /// Stores `draft` on the caller's thread (a relay request thread, which may wait for the COMMIT),
    /// announces it to every node, and wakes this node's worker.
    public func enqueue(_ draft: MemoDraft,
                        completion: @escaping @Sendable (Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>) -> Void) {
        let result: Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>
        do {
            result = try insert(draft)
        } catch let failure as PostgresConnection.Failure where failure.mayHaveCommitted {
            result = .failure(.outcomeUnknown(kind: "postgres"))
        } catch {
            result = .failure(.storage(kind: "postgres", diskFull: false))
        }
        switch result {
        // A message that may be stored wakes the worker too: if it is, nothing else would (its NOTIFY may
        // have been throttled, and the retry that finds it stores nothing new). A wake for nothing costs
        // one query.
        case .success(.accepted), .failure(.outcomeUnknown): onAccepted.call()
        default: break
        }
        completion(result)
    }

    private func insert(_ draft: MemoDraft) throws -> Result<Outbox.EnqueueOutcome, Outbox.EnqueueError> {
        let hashes = store.hashes(draft)
        let memo = try store.prepare(draft, now: clock.nowMilliseconds(), hashes: hashes)
        return try pool.transaction(serializable: false) { connection in
            // Two nodes storing one key at once: the second waits for the first's COMMIT, inserts
            // nothing, and answers with the first's message.
            let inserted = try connection.execute("""
                INSERT INTO jotter_messages (id, created_at, sealed_payload, sealed_subject, status, attempts,
                                             next_attempt_at, idempotency_hash, payload_hash)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                ON CONFLICT (idempotency_hash) DO NOTHING RETURNING id
                """, [.text(memo.id), .integer(memo.createdAt), .bytes(memo.sealedPayload), memo.sealedSubject.map { .bytes($0) } ?? .null,
                      .text(memo.lifecycle.status.rawValue), .integer(Int64(memo.lifecycle.attempts)),
                      Self.value(memo.lifecycle.nextAttemptAt), memo.idempotencyHash.map { .bytes($0) } ?? .null,
                      .bytes(memo.payloadHash)])
            guard inserted.count == 0, let hashes else {
                // NOTIFY serialises every committing transaction that sent one (PostgreSQL takes a
                // database-wide lock for it at COMMIT), so a node announces at most one message in
                // `notifyEveryMilliseconds`: the others then claim every due message anyway, and this
                // node's own worker was woken for this one.
                if announcing.due(now: clock.monotonicMilliseconds()) {
                    try connection.execute("SELECT pg_notify($1, '')", [.text(Self.channel)])
                }
                return .success(.accepted(id: memo.id))
            }
            let existing = try connection.execute(
                "SELECT id, payload_hash FROM jotter_messages WHERE idempotency_hash = $1",
                [.bytes(hashes.idempotency)]).first
            guard let existing, let id = existing.text(0), let stored = existing.bytes(1) else {
                throw PostgresConnection.Failure(sqlState: "40001", kind: "statement")  // gone meanwhile: again
            }
            return MessageStore.replay(of: id, storedPayloadHash: stored, payloadHash: hashes.payload)
        }
    }

    // MARK: Lifecycle

    private static let lifecycleColumns = "status, attempts, backoff_step, next_attempt_at, lease_until, delivered_at, last_error"

    private static func lifecycle(_ row: PostgresConnection.Row, from column: Int) -> DeliveryLifecycle {
        DeliveryLifecycle(status: DeliveryStatus(rawValue: row.text(column) ?? "") ?? .held,
                          attempts: Int(row.int64(column + 1)), backoffStep: Int(row.int64(column + 2)),
                          nextAttemptAt: row.optionalInt64(column + 3), leaseUntil: row.optionalInt64(column + 4),
                          deliveredAt: row.optionalInt64(column + 5), lastError: row.text(column + 6))
    }

    /// Writes `lifecycle` for message `id` (its row locked by the caller's transaction).
    private static func persist(_ lifecycle: DeliveryLifecycle, id: String, in connection: PostgresConnection) throws {
        try connection.execute("""
            UPDATE jotter_messages SET status = $1, attempts = $2, backoff_step = $3, next_attempt_at = $4,
                   lease_until = $5, delivered_at = $6, last_error = $7,
                   sealed_payload = CASE WHEN $8 THEN NULL ELSE sealed_payload END
            WHERE id = $9
            """, [.text(lifecycle.status.rawValue), .integer(Int64(lifecycle.attempts)),
                  .integer(Int64(lifecycle.backoffStep)), value(lifecycle.nextAttemptAt), value(lifecycle.leaseUntil),
                  value(lifecycle.deliveredAt), lifecycle.lastError.map { .text($0) } ?? .null,
                  .text(lifecycle.erasesBody ? "true" : "false"), .text(id)])
    }

    public func claimDue(limit: Int, maxBytes: Int, leaseMilliseconds: Int64,
                         excluding: Set<String>) throws -> [ClaimedMessage] {
        let now = clock.nowMilliseconds()
        let claimed = try pool.transaction(serializable: false) {
            connection -> [(String, Int64, Int64, [UInt8]?, DeliveryLifecycle)] in
            // Rows another node is claiming right now are skipped, not waited for. Due messages first,
            // in the order of their index (no sort of every due row), then sends whose lease ran out.
            var rows = try connection.execute("""
                SELECT id, created_at, seq, sealed_payload, \(Self.lifecycleColumns) FROM jotter_messages
                WHERE status IN ('queued', 'retrying') AND next_attempt_at <= $1
                ORDER BY next_attempt_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED
                """, [.integer(now), .integer(Int64(limit))]).all
            if rows.count < limit {
                rows += try connection.execute("""
                    SELECT id, created_at, seq, sealed_payload, \(Self.lifecycleColumns) FROM jotter_messages
                    WHERE status = 'sending' AND lease_until <= $1
                    ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED
                    """, [.integer(now), .integer(Int64(limit - rows.count))]).all
            }
            // Rows locked here but left out by the byte budget are let go at COMMIT, unclaimed.
            var budget = ClaimBudget(maxBytes: maxBytes)
            var claimed: [(String, Int64, Int64, [UInt8]?, DeliveryLifecycle)] = []
            for row in rows {
                let sealed = row.bytes(3)
                guard budget.fits(sealed) else { break }
                let id = row.text(0) ?? ""
                if excluding.contains(id) { continue }
                var lifecycle = Self.lifecycle(row, from: 4)
                guard (try? lifecycle.claim(now: now, leaseMilliseconds: leaseMilliseconds)) != nil else { continue }
                try Self.persist(lifecycle, id: id, in: connection)
                budget.take(sealed)
                claimed.append((id, row.int64(1), row.int64(2), sealed, lifecycle))
            }
            return claimed
        }
        return claimed.map { id, createdAt, seq, sealed, lifecycle in
            ClaimedMessage(id: id, createdAt: createdAt, seq: seq, attempt: lifecycle.attempts,
                           backoffStep: lifecycle.backoffStep, content: store.open(sealed, id: id))
        }
    }

    @discardableResult
    public func transition(id: String, durable: Bool,
                           _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> DeliveryLifecycle? {
        try pool.transaction(serializable: false) { try Self.apply(decide, to: id, in: $0) }
    }

    @discardableResult
    public func transition(ids: [String], durable: Bool,
                           _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws
        -> [String: DeliveryLifecycle] {
        try pool.transaction(serializable: false) { connection in
            var changed: [String: DeliveryLifecycle] = [:]
            for id in ids {
                do {
                    if let after = try Self.apply(decide, to: id, in: connection) { changed[id] = after }
                } catch is DeliveryLifecycle.Refusal {
                    continue  // this message moved on; the others are still recorded
                }
            }
            return changed
        }
    }

    /// Reads message `id`'s lifecycle (locking its row), applies `decide` and persists the result, in the
    /// caller's transaction. nil when there is no such message; rethrows the lifecycle's refusal
    /// (nothing is written then).
    private static func apply(_ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void,
                              to id: String, in connection: PostgresConnection) throws -> DeliveryLifecycle? {
        guard let row = try connection.execute(
            "SELECT \(lifecycleColumns) FROM jotter_messages WHERE id = $1 FOR UPDATE", [.text(id)]).first else {
            return nil
        }
        var lifecycle = lifecycle(row, from: 0)
        try decide(&lifecycle)
        try persist(lifecycle, id: id, in: connection)
        return lifecycle
    }

    /// Applies `decide` to every message in `statuses` (that `matching` accepts, at most `limit`),
    /// oldest first, in one transaction; rows another node holds are left to it. Returns how many changed.
    private func transitionAll(in statuses: [DeliveryStatus], limit: Int = .max,
                               matching: (DeliveryLifecycle) -> Bool = { _ in true },
                               _ decide: (inout DeliveryLifecycle) throws(DeliveryLifecycle.Refusal) -> Void) throws -> Int {
        try pool.transaction(serializable: false) { connection in
            let placeholders = statuses.indices.map { "$\($0 + 1)" }.joined(separator: ", ")
            let rows = try connection.execute("""
                SELECT id, \(Self.lifecycleColumns) FROM jotter_messages WHERE status IN (\(placeholders))
                ORDER BY seq FOR UPDATE SKIP LOCKED
                """, statuses.map { .text($0.rawValue) })
            var changed = 0
            for row in rows.all where changed < limit {
                let before = Self.lifecycle(row, from: 1)
                guard matching(before) else { continue }
                var after = before
                guard (try? decide(&after)) != nil, after != before else { continue }
                try Self.persist(after, id: row.text(0) ?? "", in: connection)
                changed += 1
            }
            return changed
        }
    }

    public func heldReason(among reasons: Set<String>) throws -> String? {
        try pool.with { connection in
            try connection.execute("SELECT last_error FROM jotter_messages WHERE status = 'held' ORDER BY seq")
                .all.lazy.compactMap { $0.text(0) }.first(where: reasons.contains)
        }
    }

    @discardableResult
    public func holdWaiting(reason: String) throws -> Int {
        let now = clock.nowMilliseconds()
        return try transitionAll(in: [.queued, .retrying], matching: { !$0.isInUndoWindow(now: now) }) {
            lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.hold(reason: reason)
        }
    }

    @discardableResult
    public func releaseHeld(reasons: Set<String>, limit: Int) throws -> Int {
        let now = clock.nowMilliseconds()
        return try transitionAll(in: [.held], limit: limit, matching: { $0.lastError.map(reasons.contains) ?? false }) {
            lifecycle throws(DeliveryLifecycle.Refusal) in try lifecycle.requeue(now: now)
        }
    }

    @discardableResult
    public func requeueFailed() throws -> Int {
        let now = clock.nowMilliseconds()
        return try transitionAll(in: [.failed]) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.requeue(now: now)
        }
    }

    public func makeRetriesDue() throws {
        let now = clock.nowMilliseconds()
        _ = try transitionAll(in: [.retrying]) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.relayAnswers(now: now)
        }
    }

    /// Nothing: see the type's note (leases, not a restart, hand back a dead node's sends).
    @discardableResult
    public func recoverInterrupted() throws -> Int { 0 }

    public func lastAccepted() throws -> Int64 {
        try pool.with { try $0.execute("SELECT MAX(seq) FROM jotter_messages").first?.optionalInt64(0) ?? 0 }
    }

    public func nextDueAt() throws -> Int64? {
        try pool.with { connection in
            let row = try connection.execute("""
                SELECT (SELECT MIN(next_attempt_at) FROM jotter_messages WHERE status IN ('queued', 'retrying')),
                       (SELECT MIN(lease_until) FROM jotter_messages WHERE status = 'sending')
                """).first
            return [row?.optionalInt64(0), row?.optionalInt64(1)].compactMap { $0 }.min()
        }
    }

    public func purgeSubjects(deliveredBefore cutoff: Int64) throws {
        _ = try pool.with { connection in try connection.execute(Self.purgeQuery, [.integer(cutoff)]) }
    }

    static let purgeQuery = """
        UPDATE jotter_messages SET sealed_subject = NULL
        WHERE status = 'sent' AND sealed_subject IS NOT NULL AND delivered_at < $1
        """

    // MARK: Reading

    private static let recordColumns = "id, created_at, status, attempts, next_attempt_at, delivered_at, last_error, sealed_subject"

    private func record(_ row: PostgresConnection.Row) -> MessageRecord {
        let id = row.text(0) ?? ""
        let subject = row.bytes(7).flatMap { store.sealer.open($0, .subject, id: id) }
            .map { String(decoding: $0, as: UTF8.self) }
        return MessageRecord(id: id, createdAt: row.int64(1), status: DeliveryStatus(rawValue: row.text(2) ?? "") ?? .held,
                             attempts: Int(row.int64(3)), nextAttemptAt: row.optionalInt64(4),
                             deliveredAt: row.optionalInt64(5), lastError: row.text(6), subject: subject)
    }

    public func record(id: String) throws -> MessageRecord? {
        try pool.with { connection in
            try connection.execute("SELECT \(Self.recordColumns) FROM jotter_messages WHERE id = $1", [.text(id)])
                .first.map(record)
        }
    }

    public func stuck(acceptedBefore cutoff: Int64, limit: Int) throws -> [MessageRecord] {
        try pool.with { connection in
            try connection.execute(Self.stuckQuery, [.integer(cutoff), .integer(Int64(limit))]).all.map(record)
        }
    }

    /// The memos not delivered, one partial index each (one `IN` over all five read the whole table:
    /// 20 ms at 200,000 memos, every minute on every node).
    static let stuckQuery = """
        SELECT \(recordColumns) FROM jotter_messages WHERE seq IN (
            SELECT seq FROM jotter_messages WHERE status IN ('queued', 'retrying') AND created_at < $1
            UNION ALL SELECT seq FROM jotter_messages WHERE status = 'sending' AND created_at < $1
            UNION ALL SELECT seq FROM jotter_messages WHERE status IN ('held', 'failed') AND created_at < $1)
        ORDER BY seq LIMIT $2
        """

    @discardableResult
    public func forgetFinished(before cutoff: Int64, failedToo: Bool = false) throws -> Int {
        try pool.with { connection in
            try connection.execute("""
                DELETE FROM jotter_messages WHERE (status IN ('sent', 'cancelled') OR ($2 = 1 AND status = 'failed'))
                AND COALESCE(delivered_at, created_at) < $1 RETURNING 1
                """, [.integer(cutoff), .integer(failedToo ? 1 : 0)]).count
        }
    }

    public func configurationChanged(_ name: String, fingerprint: [UInt8]) throws -> Bool {
        let keyed = HMAC.sha256(fingerprint, key: hashingSecret)
        return try pool.transaction(serializable: false) { connection in
            let previous = try connection.execute(
                "SELECT value FROM jotter_settings WHERE name = $1 FOR UPDATE", [.text(name)]).first?.bytes(0)
            try connection.execute("""
                INSERT INTO jotter_settings (name, value) VALUES ($1, $2)
                ON CONFLICT (name) DO UPDATE SET value = excluded.value
                """, [.text(name), .bytes(keyed)])
            return previous.map { !HMAC.constantTimeEquals($0, keyed) } ?? false
        }
    }

    private static func value(_ number: Int64?) -> PostgresConnection.Value {
        number.map { .integer($0) } ?? .null
    }
}
