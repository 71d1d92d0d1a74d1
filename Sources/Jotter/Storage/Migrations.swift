/// The schema, as a numbered list of migrations applied in order and recorded in `PRAGMA user_version`.
enum Migrations {
    /// Migration `n` (1-based) is `all[n - 1]`. Append only: never edit a released step.
    static let all: [String] = [
        """
        CREATE TABLE messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            created_at INTEGER NOT NULL,
            sealed_payload BLOB,
            sealed_subject BLOB,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at INTEGER,
            lease_until INTEGER,
            delivered_at INTEGER,
            last_error TEXT,
            idempotency_hash BLOB UNIQUE,
            payload_hash BLOB NOT NULL
        );
        CREATE INDEX messages_due ON messages(status, next_attempt_at);
        """,
        """
        ALTER TABLE messages ADD COLUMN backoff_step INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE settings (name TEXT PRIMARY KEY, value BLOB NOT NULL);
        """,
        """
        CREATE TABLE devices (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            token_hash BLOB NOT NULL UNIQUE,
            created_at INTEGER NOT NULL,
            last_seen_at INTEGER,
            revoked_at INTEGER
        );
        """,
        """
        ALTER TABLE messages ADD COLUMN key_id BLOB;
        """,
        // The worker's two questions, answered from small partial indexes instead of a scan: what is
        // due (waiting memos by due time) and which leases have run out (memos in flight).
        """
        DROP INDEX messages_due;
        CREATE INDEX messages_waiting ON messages(next_attempt_at, seq) WHERE status IN ('queued', 'retrying');
        CREATE INDEX messages_in_flight ON messages(lease_until) WHERE status = 'sending';
        """,
        // Pairing links live in the database, so `jotter pair` can issue one to a running server and a
        // link that was used or ran out can be told apart from a guess.
        """
        CREATE TABLE pairing_tokens (
            token_hash BLOB PRIMARY KEY,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            used_at INTEGER
        );
        """,
        // Fewer pages written per accepted memo (5.1 → 3.1 in the WAL, bench/syncs): no AUTOINCREMENT
        // (its sqlite_sequence row was rewritten by every insert; rows are never deleted, so a rowid is
        // never reused anyway), and the idempotency index holds only memos that carry a key (every
        // keyless memo used to add a NULL entry to it).
        """
        CREATE TABLE messages_v7 (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            created_at INTEGER NOT NULL,
            sealed_payload BLOB,
            sealed_subject BLOB,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at INTEGER,
            lease_until INTEGER,
            delivered_at INTEGER,
            last_error TEXT,
            idempotency_hash BLOB,
            payload_hash BLOB NOT NULL,
            backoff_step INTEGER NOT NULL DEFAULT 0,
            key_id BLOB
        );
        INSERT INTO messages_v7 (seq, id, created_at, sealed_payload, sealed_subject, status, attempts,
                                 next_attempt_at, lease_until, delivered_at, last_error, idempotency_hash,
                                 payload_hash, backoff_step, key_id)
            SELECT seq, id, created_at, sealed_payload, sealed_subject, status, attempts, next_attempt_at,
                   lease_until, delivered_at, last_error, idempotency_hash, payload_hash, backoff_step, key_id
            FROM messages;
        DROP TABLE messages;
        ALTER TABLE messages_v7 RENAME TO messages;
        CREATE UNIQUE INDEX messages_idempotency ON messages(idempotency_hash) WHERE idempotency_hash IS NOT NULL;
        CREATE INDEX messages_waiting ON messages(next_attempt_at, seq) WHERE status IN ('queued', 'retrying');
        CREATE INDEX messages_in_flight ON messages(lease_until) WHERE status = 'sending';
        """,
        // Reads that stay fast however long the history grows (/healthz took ~100 ms at 200 000 memos, and
        // the minutely subject purge stalled the writer as long): memos stopped short of delivery, and
        // delivered memos whose subject is still kept, each get a small index. An accepted memo is
        // `queued`, so neither index costs the accept path a page.
        """
        CREATE INDEX messages_stopped ON messages(status, created_at) WHERE status IN ('failed', 'held', 'cancelled');
        CREATE INDEX messages_subject_kept ON messages(delivered_at) WHERE status = 'sent' AND sealed_subject IS NOT NULL;
        """,
        // Every INSERT and every status change tests each partial index's condition on the row. SQLite codes
        // `status IN (…)` of three or more values as a temporary b-tree, built and dropped for each row: the
        // stopped index of version 8 cost each accepted memo 34,000 instructions (173k → 207k, callgrind).
        // The same condition as comparisons costs a few; `StatusIndex` writes it the same way in queries.
        """
        DROP INDEX messages_stopped;
        CREATE INDEX messages_stopped ON messages(status, created_at)
            WHERE status = 'failed' OR status = 'held' OR status = 'cancelled';
        """,
        // A phone whose answer to POST /pair was lost asks again with the same link and the same
        // request id: it gets the device that link made (with a fresh token), not "already used".
        """
        ALTER TABLE pairing_tokens ADD COLUMN request_hash BLOB;
        ALTER TABLE pairing_tokens ADD COLUMN device_id TEXT;
        """,
        // Each link also has a short code to type (a home-screen app has no address bar to open a link
        // in): its keyed hash, found through its own index.
        """
        ALTER TABLE pairing_tokens ADD COLUMN code_hash BLOB;
        CREATE INDEX pairing_tokens_code ON pairing_tokens(code_hash) WHERE code_hash IS NOT NULL;
        """,
        // A memo a Jotter relay took (its 202), until the memo is sent here: the relay and its id for
        // the memo, so every later attempt asks about that message instead of posting the memo again.
        """
        CREATE TABLE relay_handovers (
            memo_id TEXT PRIMARY KEY,
            relay TEXT NOT NULL,
            relay_message_id TEXT NOT NULL,
            failure_reported INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        """,
        // Handovers made by a device the relay no longer knows (this composer registered again): the
        // relay's 404 for them says nothing of the memo's fate, and must not be taken for "delivered".
        """
        ALTER TABLE relay_handovers ADD COLUMN orphaned INTEGER NOT NULL DEFAULT 0;
        """,
        // Which device made each handover (a fingerprint of its secret): a handover recorded just after
        // another delivery's re-registration marked the others orphaned is still told apart from the new
        // device's own.
        """
        ALTER TABLE relay_handovers ADD COLUMN device BLOB;
        """,
    ]

    /// Brings `database` up to the newest schema; each step is its own transaction.
    static func migrate(_ database: Database) throws {
        let current = Int(try database.pragma("user_version") ?? "0") ?? 0
        guard current <= all.count else {
            throw DatabaseError(code: 1, message: "database schema \(current) is newer than this Jotter (\(all.count))")
        }
        for (index, sql) in all.enumerated() where index + 1 > current {
            try database.write { database in
                try database.execute(sql)
                try database.execute("PRAGMA user_version = \(index + 1)")
            }
        }
    }
}
