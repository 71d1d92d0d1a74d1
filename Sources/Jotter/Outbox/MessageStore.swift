/// The `messages` table as SQL: inserting an accepted memo, and reading and writing a memo's
/// `DeliveryLifecycle` exactly as the lifecycle decided it. It decides nothing itself. Every method
/// runs inside a transaction its caller opened on the `DatabaseQueue`.
struct MessageStore: Sendable {
    let sealer: Sealer
    let hashingKey: SymmetricKey
    /// Whether each memo's subject is also kept on its own, for the history, past delivery. The Jotter
    /// relay's outbox keeps none: it keeps a message only until it is delivered, and shows no history.
    var recordsSubjects = true

    // MARK: Accept

    /// A memo ready to be inserted: its new id, sealed fields, first lifecycle and keyed hashes.
    struct Prepared {
        var id: String
        var createdAt: Int64
        var sealedPayload: [UInt8]
        var sealedSubject: [UInt8]?
        var lifecycle: DeliveryLifecycle
        /// The keyed hash of the draft's `Idempotency-Key`, if it has one.
        var idempotencyHash: [UInt8]?
        /// The keyed hash of exactly what the client sent (a replay with another payload conflicts);
        /// empty for a memo without a key, which nothing can replay.
        var payloadHash: [UInt8]
    }

    /// The keyed hashes that find an earlier copy of `draft`: its `Idempotency-Key`'s and its payload's.
    /// Nil for a memo without a key: it has no earlier copy to find (an earlier copy is found only by its
    /// key), so neither hash is computed — two HMACs less on the common path.
    func hashes(_ draft: MemoDraft) -> (idempotency: [UInt8], payload: [UInt8])? {
        guard let key = draft.idempotencyKey else { return nil }
        return (HMAC.sha256(Array(key.utf8), key: hashingKey),
                HMAC.sha256(Self.canonicalPayload(draft), key: hashingKey))
    }

    /// `draft` sealed under a new id, accepted at `now`. (Both stores insert exactly this.)
    func prepare(_ draft: MemoDraft, now: Int64,
                 hashes: (idempotency: [UInt8], payload: [UInt8])?) throws -> Prepared {
        // The id's random part and both nonces in one draw from the CSPRNG. The id is time-ordered, so
        // its index grows at its end (an insert rewrites the page the last one did).
        let nonce = AESGCM.nonceByteCount
        let random = try SecureRandom.bytes(count: 10 + 2 * nonce)
        let id = SecureRandom.uuidV7(milliseconds: now, random: random[0..<10])
        let content = MemoContent(subject: draft.subject.map(SubjectLine.sanitized)
                                    ?? SubjectLine.derived(from: draft.body),
                                  body: draft.body, recipient: draft.recipient, writtenAt: draft.writtenAt)
        return Prepared(id: id, createdAt: now,
                        sealedPayload: try sealer.seal(content.encoded(), .payload, id: id,
                                                       nonce: Array(random[10..<(10 + nonce)])),
                        sealedSubject: recordsSubjects
                            ? try sealer.seal(Array(content.subject.utf8), .subject, id: id,
                                              nonce: Array(random[(10 + nonce)...])) : nil,
                        lifecycle: .accepted(now: now, undoMilliseconds: draft.undoMilliseconds),
                        idempotencyHash: hashes?.idempotency, payloadHash: hashes?.payload ?? [])
    }

    /// An earlier copy's answer: the same payload is a replay of it, another one a conflict.
    static func replay(of id: String, storedPayloadHash: [UInt8],
                       payloadHash: [UInt8]) -> Result<Outbox.EnqueueOutcome, Outbox.EnqueueError> {
        HMAC.constantTimeEquals(storedPayloadHash, payloadHash) ? .success(.replayed(id: id)) : .failure(.idempotencyConflict)
    }

    /// Stores `draft` (or finds its earlier copy by `Idempotency-Key`).
    func insert(_ draft: MemoDraft, now: Int64,
                into database: Database) throws -> Result<Outbox.EnqueueOutcome, Outbox.EnqueueError> {
        let hashes = hashes(draft)
        if let hashes {
            let existing = try database.statement(
                "SELECT id, payload_hash FROM messages WHERE idempotency_hash = ?"
            ).firstRow([.blob(hashes.idempotency)]) { row in (row.text(0) ?? "", row.blob(1) ?? []) }
            if let (id, storedHash) = existing {
                return Self.replay(of: id, storedPayloadHash: storedHash, payloadHash: hashes.payload)
            }
        }
        let memo = try prepare(draft, now: now, hashes: hashes)
        try database.run(Self.insertQuery, [
            .text(memo.id), .integer(now), .blob(memo.sealedPayload), memo.sealedSubject.map { .blob($0) } ?? .null,
            .text(memo.lifecycle.status.rawValue), .integer(Int64(memo.lifecycle.attempts)),
            Self.value(memo.lifecycle.nextAttemptAt), memo.idempotencyHash.map { .blob($0) } ?? .null,
            .blob(memo.payloadHash),
        ])
        return .success(.accepted(id: memo.id))
    }

    static let insertQuery = """
        INSERT INTO messages (id, created_at, sealed_payload, sealed_subject, status, attempts,
                              next_attempt_at, idempotency_hash, payload_hash)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    /// The bytes whose keyed hash detects a conflicting replay: exactly what the client sent.
    private static func canonicalPayload(_ draft: MemoDraft) -> [UInt8] {
        var bytes: [UInt8] = []
        if let subject = draft.subject {
            bytes = [1] + Array(String(subject.utf8.count).utf8) + [0x3A] + Array(subject.utf8)
        } else {
            bytes = [0]
        }
        // A memo with its own recipient (a relay's) hashes it too, length-prefixed in front behind a
        // marker no other payload starts with; every other memo hashes exactly as before.
        let recipient = draft.recipient.map { [0x52] + Array(String($0.utf8.count).utf8) + [0x3A] + Array($0.utf8) }
        // And its written time, behind a marker of its own in front of that.
        let written = draft.writtenAt.map { [0x57] + Array(String($0).utf8) + [0x3A] }
        return (written ?? []) + (recipient ?? []) + bytes + Array(draft.body.utf8)
    }

    // MARK: Lifecycle

    private static let lifecycleColumns = "status, attempts, backoff_step, next_attempt_at, lease_until, delivered_at, last_error"

    private static func lifecycle(_ row: Row, from column: Int32) -> DeliveryLifecycle {
        DeliveryLifecycle(status: DeliveryStatus(rawValue: row.text(column) ?? "") ?? .held,
                          attempts: Int(row.int64(column + 1)), backoffStep: Int(row.int64(column + 2)),
                          nextAttemptAt: row.optionalInt64(column + 3), leaseUntil: row.optionalInt64(column + 4),
                          deliveredAt: row.optionalInt64(column + 5), lastError: row.text(column + 6))
    }

    /// Memo `id`'s lifecycle as stored.
    func lifecycle(id: String, in database: Database) throws -> DeliveryLifecycle? {
        try database.statement("SELECT \(Self.lifecycleColumns) FROM messages WHERE id = ?")
            .firstRow([.text(id)]) { Self.lifecycle($0, from: 0) }
    }

    /// Writes `lifecycle` for memo `id`, provided it is still in status `from` (a transition is decided
    /// on what was read in the same transaction; this guards against a caller that did not).
    func persist(_ lifecycle: DeliveryLifecycle, id: String, from: DeliveryStatus, in database: Database) throws {
        if lifecycle.erasesBody { database.noteErasure() }
        try database.run(Self.persistQuery, [
            .text(lifecycle.status.rawValue), .integer(Int64(lifecycle.attempts)),
            .integer(Int64(lifecycle.backoffStep)), Self.value(lifecycle.nextAttemptAt),
            Self.value(lifecycle.leaseUntil), Self.value(lifecycle.deliveredAt),
            lifecycle.lastError.map { .text($0) } ?? .null, .integer(lifecycle.erasesBody ? 1 : 0),
            .text(id), .text(from.rawValue),
        ])
    }

    static let persistQuery = """
        UPDATE messages SET status = ?, attempts = ?, backoff_step = ?, next_attempt_at = ?, lease_until = ?,
                            delivered_at = ?, last_error = ?,
                            sealed_payload = CASE WHEN ? THEN NULL ELSE sealed_payload END
        WHERE id = ? AND status = ?
        """

    /// Ids in `status`, oldest first; through the status's index, so never a scan of the delivered.
    func ids(in status: DeliveryStatus, database: Database) throws -> [String] {
        try database.statement(Self.idsQuery(status)).rows([]) { $0.text(0) ?? "" }
    }

    static func idsQuery(_ status: DeliveryStatus) -> String {
        let source = StatusIndex.holding(status)?.from([status]) ?? "FROM messages WHERE status = 'sent'"
        return "SELECT id \(source) ORDER BY seq"
    }

    /// Up to `limit` memos that may be claimed now: due queued or retrying memos first (oldest due
    /// first), then sends whose lease ran out.
    func claimable(now: Int64, limit: Int, in database: Database)
        throws -> [(id: String, createdAt: Int64, seq: Int64, sealed: [UInt8]?, lifecycle: DeliveryLifecycle)] {
        try database.statement("""
            SELECT id, created_at, seq, sealed_payload, \(Self.lifecycleColumns) FROM messages
            WHERE seq IN (
                SELECT seq FROM (
                    SELECT seq \(StatusIndex.waiting.from()) AND next_attempt_at <= ?1
                    ORDER BY next_attempt_at, seq LIMIT ?2)
                UNION ALL
                SELECT seq FROM (
                    SELECT seq \(StatusIndex.inFlight.from()) AND lease_until <= ?1 LIMIT ?2)
                LIMIT ?2)
            ORDER BY COALESCE(next_attempt_at, lease_until), seq
            """).rows([.integer(now), .integer(Int64(limit))]) { row in
            (row.text(0) ?? "", row.int64(1), row.int64(2), row.blob(3), Self.lifecycle(row, from: 4))
        }
    }

    /// The `seq` of the last memo accepted so far (0: none yet).
    func lastAccepted(in database: Database) throws -> Int64 {
        let last = try database.statement("SELECT MAX(seq) FROM messages").firstRow { $0.optionalInt64(0) }
        return (last ?? nil) ?? 0
    }

    /// When the earliest scheduled attempt is due (or a lease runs out), or nil if nothing waits.
    func nextDueAt(in database: Database) throws -> Int64? {
        let waiting = try database.statement("SELECT MIN(next_attempt_at) \(StatusIndex.waiting.from())")
            .firstRow { $0.optionalInt64(0) } ?? nil
        let leases = try database.statement("SELECT MIN(lease_until) \(StatusIndex.inFlight.from())")
            .firstRow { $0.optionalInt64(0) } ?? nil
        return [waiting, leases].compactMap { $0 }.min()
    }

    /// Forgets one memo's subject (a memo taken back keeps nothing of its text).
    func eraseSubject(id: String, in database: Database) throws {
        database.noteErasure()
        try database.run(Self.eraseSubjectQuery, [.text(id)])
    }

    static let eraseSubjectQuery = "UPDATE messages SET sealed_subject = NULL WHERE id = ?"

    /// Forgets retained subjects of memos delivered before `cutoff` (epoch ms): not a lifecycle step.
    /// Through the index of kept subjects, so the minutely purge reads only what it erases.
    func purgeSubjects(deliveredBefore cutoff: Int64, in database: Database) throws {
        try database.run(Self.purgeQuery, [.integer(cutoff)])
        if database.changes > 0 { database.noteErasure() }
    }

    static let purgeQuery = """
        UPDATE messages INDEXED BY messages_subject_kept SET sealed_subject = NULL
        WHERE status = 'sent' AND sealed_subject IS NOT NULL AND delivered_at < ?
        """

    /// Opens a claimed memo's payload; nil if it does not open.
    func open(_ sealed: [UInt8]?, id: String) -> MemoContent? {
        guard let sealed, let plaintext = sealer.open(sealed, .payload, id: id) else { return nil }
        return MemoContent(encoded: plaintext)
    }

    private static func value(_ number: Int64?) -> DatabaseValue {
        number.map { .integer($0) } ?? .null
    }
}
