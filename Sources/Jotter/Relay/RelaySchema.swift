/// The relay's own tables, beside the outbox's in the same SQLite database: a numbered list of steps
/// recorded in the `settings` table as `relay_schema` (the outbox's `PRAGMA user_version` list stays
/// the composer's alone, so a composer's database never grows relay tables).
enum RelaySchema {
    /// Step `n` (1-based) is `all[n - 1]`. Append only: never edit a released step.
    static let all: [String] = [
        """
        CREATE TABLE relay_devices (
            id TEXT PRIMARY KEY,
            secret_hash BLOB NOT NULL UNIQUE,
            created_at INTEGER NOT NULL,
            revoked_at INTEGER
        );
        CREATE TABLE relay_invites (
            invite_hash BLOB PRIMARY KEY,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            used_at INTEGER,
            device_id TEXT
        );
        CREATE TABLE relay_destinations (
            device_id TEXT NOT NULL,
            address_key BLOB NOT NULL,
            sealed_address BLOB NOT NULL,
            created_at INTEGER NOT NULL,
            verified_at INTEGER,
            PRIMARY KEY (device_id, address_key)
        );
        CREATE TABLE relay_codes (
            device_id TEXT NOT NULL,
            address_key BLOB NOT NULL,
            code_hash BLOB NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            spent_at INTEGER,
            PRIMARY KEY (device_id, address_key)
        );
        CREATE TABLE relay_code_issues (address_key BLOB NOT NULL, issued_at INTEGER NOT NULL);
        CREATE INDEX relay_code_issues_by_address ON relay_code_issues(address_key, issued_at);
        CREATE TABLE relay_counters (
            policy TEXT NOT NULL,
            partition BLOB NOT NULL,
            window_start INTEGER NOT NULL,
            window_end INTEGER NOT NULL,
            count INTEGER NOT NULL,
            PRIMARY KEY (policy, partition, window_start)
        );
        CREATE TABLE relay_idempotency (
            key_hash BLOB PRIMARY KEY,
            device_id TEXT NOT NULL,
            payload_hash BLOB NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            lease_until INTEGER,
            message_id TEXT
        );
        CREATE TABLE relay_messages (
            id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            created_at INTEGER NOT NULL
        );
        """,
    ]

    /// Brings the relay tables in `database` up to date, all missing steps in one transaction.
    static func migrate(_ database: DatabaseQueue) throws {
        try database.write { database in
            let stored = try database.statement("SELECT value FROM settings WHERE name = 'relay_schema'")
                .firstRow { $0.blob(0) } ?? nil
            let current = stored.flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0
            guard current <= all.count else {
                throw DatabaseError(code: 1,
                                    message: "relay schema \(current) is newer than this Jotter (\(all.count))")
            }
            for (index, sql) in all.enumerated() where index + 1 > current {
                try database.execute(sql)
                try database.run("INSERT OR REPLACE INTO settings (name, value) VALUES ('relay_schema', ?)",
                                 [.blob(Array(String(index + 1).utf8))])
            }
        }
    }
}
