/// The relay's state in PostgreSQL (`--store postgres://…`), shared by every relay node that points at
/// the same database: each decision is one SERIALIZABLE transaction, run again when another node's
/// transaction won a race, so two nodes asking for a limit's last unit, or for one `Idempotency-Key`,
/// are decided as if they had asked one after the other — by the database, not by the nodes.
///
/// The same contract as `SQLiteRelayStore`, the same tests (`RelayStoreContractTests`).
public final class PostgresRelayStore: RelayStore {
    let pool: PostgresPool

    /// Connects to `url` and creates or migrates the relay's tables (one node at a time).
    public init(url: String) throws {
        pool = try PostgresPool(url: url)
        try pool.migrate("relay", Self.migrations)
    }

    /// Step `n` (1-based) is `migrations[n - 1]`. Append only.
    static let migrations: [String] = [
        """
        CREATE TABLE relay_devices (
            id TEXT PRIMARY KEY,
            secret_hash BYTEA NOT NULL UNIQUE,
            created_at BIGINT NOT NULL,
            revoked_at BIGINT
        );
        CREATE TABLE relay_invites (
            invite_hash BYTEA PRIMARY KEY,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            used_at BIGINT,
            device_id TEXT
        );
        CREATE TABLE relay_destinations (
            device_id TEXT NOT NULL,
            address_key BYTEA NOT NULL,
            sealed_address BYTEA NOT NULL,
            created_at BIGINT NOT NULL,
            verified_at BIGINT,
            seq BIGSERIAL,
            PRIMARY KEY (device_id, address_key)
        );
        CREATE TABLE relay_codes (
            device_id TEXT NOT NULL,
            address_key BYTEA NOT NULL,
            code_hash BYTEA NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            spent_at BIGINT,
            PRIMARY KEY (device_id, address_key)
        );
        CREATE TABLE relay_code_issues (address_key BYTEA NOT NULL, issued_at BIGINT NOT NULL);
        CREATE INDEX relay_code_issues_by_address ON relay_code_issues (address_key, issued_at);
        CREATE TABLE relay_counters (
            policy TEXT NOT NULL,
            partition BYTEA NOT NULL,
            window_start BIGINT NOT NULL,
            window_end BIGINT NOT NULL,
            count INTEGER NOT NULL,
            PRIMARY KEY (policy, partition, window_start)
        );
        CREATE TABLE relay_idempotency (
            key_hash BYTEA PRIMARY KEY,
            device_id TEXT NOT NULL,
            payload_hash BYTEA NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            lease_until BIGINT,
            message_id TEXT
        );
        CREATE TABLE relay_messages (
            id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            created_at BIGINT NOT NULL
        )
        """,
    ]

    // MARK: Devices

    public func createInvite(hash: [UInt8], now: Int64, expiresAt: Int64) throws {
        try pool.transaction { connection in
            try connection.execute("INSERT INTO relay_invites (invite_hash, created_at, expires_at) VALUES ($1, $2, $3)",
                                   [.bytes(hash), .integer(now), .integer(expiresAt)])
        }
    }

    public func registerDevice(id: String, secretHash: [UInt8], inviteHash: [UInt8]?, now: Int64) throws -> Bool {
        try pool.transaction { connection in
            if let inviteHash {
                let invite = try connection.execute(
                    "SELECT expires_at, used_at FROM relay_invites WHERE invite_hash = $1", [.bytes(inviteHash)]
                ).first
                guard let invite, invite.isNull(1), invite.int64(0) > now else { return false }
                try connection.execute("UPDATE relay_invites SET used_at = $1, device_id = $2 WHERE invite_hash = $3",
                                       [.integer(now), .text(id), .bytes(inviteHash)])
            }
            try connection.execute("INSERT INTO relay_devices (id, secret_hash, created_at) VALUES ($1, $2, $3)",
                                   [.text(id), .bytes(secretHash), .integer(now)])
            return true
        }
    }

    public func device(secretHash: [UInt8]) throws -> String? {
        let found = try pool.with { connection in
            try connection.execute(
                "SELECT id, secret_hash FROM relay_devices WHERE secret_hash = $1 AND revoked_at IS NULL",
                [.bytes(secretHash)]
            ).first
        }
        guard let found, let stored = found.bytes(1), HMAC.constantTimeEquals(stored, secretHash) else { return nil }
        return found.text(0)
    }

    public func isRevoked(secretHash: [UInt8]) throws -> Bool {
        let found = try pool.with { connection in
            try connection.execute(
                "SELECT secret_hash FROM relay_devices WHERE secret_hash = $1 AND revoked_at IS NOT NULL",
                [.bytes(secretHash)]
            ).first
        }
        return found?.bytes(0).map { HMAC.constantTimeEquals($0, secretHash) } ?? false
    }

    // MARK: Destinations and codes

    public func issueCode(_ issue: CodeIssue) throws -> CodeIssueOutcome {
        try pool.transaction { connection in
            let now = issue.now, policy = issue.policy
            let states = try Self.check(issue.charges, now: now, on: connection)
            var refusals: [(reason: String, seconds: Int64)] = states.filter(\.refused).map {
                ($0.charge.policy, $0.resetSeconds)
            }
            let issued = try connection.execute("""
                SELECT issued_at FROM relay_code_issues WHERE address_key = $1 AND issued_at > $2 ORDER BY issued_at
                """, [.bytes(issue.mailboxKey), .integer(now - 86_400_000)]).all.map { $0.int64(0) }
            refusals += policy.refusals(issued: issued, now: now)
            if let tightest = refusals.max(by: { $0.seconds < $1.seconds }) {
                return .limited(reason: tightest.reason, retryAfterSeconds: tightest.seconds, limits: states)
            }
            let spent = try Self.spend(issue.charges, now: now, on: connection)
            try connection.execute("INSERT INTO relay_code_issues (address_key, issued_at) VALUES ($1, $2)",
                                   [.bytes(issue.mailboxKey), .integer(now)])
            try connection.execute("""
                INSERT INTO relay_codes (device_id, address_key, code_hash, created_at, expires_at, attempts)
                VALUES ($1, $2, $3, $4, $5, 0)
                ON CONFLICT (device_id, address_key) DO UPDATE SET code_hash = excluded.code_hash,
                    created_at = excluded.created_at, expires_at = excluded.expires_at, attempts = 0, spent_at = NULL
                """, [.text(issue.deviceID), .bytes(issue.addressKey), .bytes(issue.codeHash), .integer(now),
                      .integer(now + policy.lifetimeMilliseconds)])
            try connection.execute("""
                INSERT INTO relay_destinations (device_id, address_key, sealed_address, created_at) VALUES ($1, $2, $3, $4)
                ON CONFLICT (device_id, address_key) DO NOTHING
                """, [.text(issue.deviceID), .bytes(issue.addressKey), .bytes(issue.sealedAddress), .integer(now)])
            return .issued(spent)
        }
    }

    public func confirmCode(deviceID: String, addressKey: [UInt8], presentedHash: [UInt8], now: Int64,
                            maximumAttempts: Int) throws -> ConfirmOutcome {
        try pool.transaction { connection in
            let key: [PostgresConnection.Value] = [.text(deviceID), .bytes(addressKey)]
            let code = try connection.execute("""
                SELECT code_hash, expires_at, attempts, spent_at FROM relay_codes WHERE device_id = $1 AND address_key = $2
                """, key).first
            guard let code else { return .noCode }
            let attempts = Int(code.int64(2))
            if !code.isNull(3) || attempts >= maximumAttempts {
                // The right code again, after it verified the address (that answer was lost): verified.
                if !code.isNull(3) && attempts < maximumAttempts && HMAC.constantTimeEquals(code.bytes(0) ?? [], presentedHash),
                   try connection.execute("""
                       SELECT 1 FROM relay_destinations WHERE device_id = $1 AND address_key = $2 AND verified_at IS NOT NULL
                       """, key).count > 0 {
                    return .verified
                }
                return .spent
            }
            if code.int64(1) <= now { return .expired }
            if HMAC.constantTimeEquals(code.bytes(0) ?? [], presentedHash) {
                try connection.execute("UPDATE relay_codes SET spent_at = $3 WHERE device_id = $1 AND address_key = $2",
                                       key + [.integer(now)])
                try connection.execute("""
                    UPDATE relay_destinations SET verified_at = COALESCE(verified_at, $3)
                    WHERE device_id = $1 AND address_key = $2
                    """, key + [.integer(now)])
                return .verified
            }
            let tried = attempts + 1
            try connection.execute("""
                UPDATE relay_codes SET attempts = $3, spent_at = $4 WHERE device_id = $1 AND address_key = $2
                """, key + [.integer(Int64(tried)), tried >= maximumAttempts ? .integer(now) : .null])
            return .wrong(attemptsLeft: maximumAttempts - tried)
        }
    }

    public func removeDestination(deviceID: String, addressKey: [UInt8]) throws -> Bool {
        try pool.transaction(serializable: false) { connection in
            let key: [PostgresConnection.Value] = [.text(deviceID), .bytes(addressKey)]
            try connection.execute("DELETE FROM relay_codes WHERE device_id = $1 AND address_key = $2", key)
            return try connection.execute(
                "DELETE FROM relay_destinations WHERE device_id = $1 AND address_key = $2 RETURNING 1", key).count > 0
        }
    }

    public func revokeDevice(id: String, now: Int64) throws {
        try pool.transaction(serializable: false) { connection in
            try connection.execute("UPDATE relay_devices SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                                   [.integer(now), .text(id)])
            try connection.execute("DELETE FROM relay_codes WHERE device_id = $1", [.text(id)])
            try connection.execute("DELETE FROM relay_destinations WHERE device_id = $1", [.text(id)])
        }
    }

    public func destinations(deviceID: String) throws -> [StoredDestination] {
        try pool.with { connection in
            try connection.execute("""
                SELECT address_key, sealed_address, created_at, verified_at FROM relay_destinations
                WHERE device_id = $1 ORDER BY created_at, seq
                """, [.text(deviceID)]).all.map { row in
                StoredDestination(addressKey: row.bytes(0) ?? [], sealedAddress: row.bytes(1) ?? [],
                                  createdAt: row.int64(2), verifiedAt: row.optionalInt64(3))
            }
        }
    }

    // MARK: Limits

    public func spend(_ charges: [LimitCharge], now: Int64) throws -> LimitVerdict {
        try pool.transaction { connection in
            let states = try Self.check(charges, now: now, on: connection)
            if states.contains(where: \.refused) { return .refused(states) }
            return .allowed(try Self.spend(charges, now: now, on: connection))
        }
    }

    public func refund(_ charges: [LimitCharge], spentAt now: Int64) throws {
        try pool.transaction { connection in
            for charge in charges {
                try connection.execute("""
                    UPDATE relay_counters SET count = GREATEST(count - 1, 0)
                    WHERE policy = $1 AND partition = $2 AND window_start = $3
                    """, [.text(charge.policy), .bytes(charge.partition), .integer(charge.windowStart(now: now))])
            }
        }
    }

    static func check(_ charges: [LimitCharge], now: Int64, on connection: PostgresConnection) throws -> [LimitState] {
        try charges.map { charge in
            let used = Int(try connection.execute("""
                SELECT count FROM relay_counters WHERE policy = $1 AND partition = $2 AND window_start = $3
                """, [.text(charge.policy), .bytes(charge.partition), .integer(charge.windowStart(now: now))]
            ).first?.int64(0) ?? 0)
            return LimitState(charge: charge, remaining: max(0, charge.quota - used),
                              resetSeconds: charge.resetSeconds(now: now), refused: used >= charge.quota)
        }
    }

    static func spend(_ charges: [LimitCharge], now: Int64, on connection: PostgresConnection) throws -> [LimitState] {
        for charge in charges {
            let start = charge.windowStart(now: now)
            try connection.execute("""
                INSERT INTO relay_counters (policy, partition, window_start, window_end, count) VALUES ($1, $2, $3, $4, 1)
                ON CONFLICT (policy, partition, window_start) DO UPDATE SET count = relay_counters.count + 1
                """, [.text(charge.policy), .bytes(charge.partition), .integer(start),
                      .integer(start + charge.windowSeconds * 1000)])
        }
        return try check(charges, now: now, on: connection).map { state in
            var state = state
            state.refused = false
            return state
        }
    }

    // MARK: Messages

    public func admitMessage(_ admission: MessageAdmission) throws -> AdmissionOutcome {
        try pool.transaction { connection in
            let now = admission.now
            if let idempotency = admission.idempotency {
                let key: [PostgresConnection.Value] = [.bytes(idempotency.keyHash)]
                let record = try connection.execute("""
                    SELECT payload_hash, created_at, expires_at, lease_until, message_id FROM relay_idempotency
                    WHERE key_hash = $1
                    """, key).first.map { row in
                    IdempotencyRecord(payloadHash: row.bytes(0) ?? [], createdAt: row.int64(1), expiresAt: row.int64(2),
                                      leaseUntil: row.optionalInt64(3), messageID: row.text(4))
                }
                switch record?.decide(payloadHash: idempotency.payloadHash, now: now) {
                case .answer(let outcome)?:
                    return outcome
                case .takeOver(let reservedAt)?:
                    try connection.execute("UPDATE relay_idempotency SET lease_until = $2 WHERE key_hash = $1",
                                           key + [.integer(admission.leaseUntil)])
                    return .admitted(reservedAt: reservedAt, limits: [])
                case .expired?:
                    try connection.execute("DELETE FROM relay_idempotency WHERE key_hash = $1", key)
                case nil:
                    break
                }
            }
            let verified = try connection.execute("""
                SELECT 1 FROM relay_destinations WHERE device_id = $1 AND address_key = $2 AND verified_at IS NOT NULL
                """, [.text(admission.deviceID), .bytes(admission.addressKey)]).count > 0
            guard verified else { return .unverified }
            let states = try Self.check(admission.charges, now: now, on: connection)
            if states.contains(where: \.refused) { return .limited(states) }
            let spent = try Self.spend(admission.charges, now: now, on: connection)
            guard let idempotency = admission.idempotency else { return .admitted(reservedAt: nil, limits: spent) }
            try connection.execute("""
                INSERT INTO relay_idempotency (key_hash, device_id, payload_hash, created_at, expires_at, lease_until)
                VALUES ($1, $2, $3, $4, $5, $6)
                """, [.bytes(idempotency.keyHash), .text(admission.deviceID), .bytes(idempotency.payloadHash),
                      .integer(now), .integer(admission.expiresAt), .integer(admission.leaseUntil)])
            return .admitted(reservedAt: now, limits: spent)
        }
    }

    public func completeMessage(deviceID: String, keyHash: [UInt8]?, messageID: String, now: Int64) throws {
        try pool.transaction { connection in
            if let keyHash {
                try connection.execute("UPDATE relay_idempotency SET message_id = $1, lease_until = NULL WHERE key_hash = $2",
                                       [.text(messageID), .bytes(keyHash)])
            }
            try connection.execute("""
                INSERT INTO relay_messages (id, device_id, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING
                """, [.text(messageID), .text(deviceID), .integer(now)])
        }
    }

    public func abandonMessage(keyHash: [UInt8]) throws {
        try pool.transaction { connection in
            try connection.execute("DELETE FROM relay_idempotency WHERE key_hash = $1 AND message_id IS NULL",
                                   [.bytes(keyHash)])
        }
    }

    public func messageOwner(id: String) throws -> String? {
        try pool.with { connection in
            try connection.execute("SELECT device_id FROM relay_messages WHERE id = $1", [.text(id)]).first?.text(0)
        }
    }

    // MARK: Housekeeping

    /// With several nodes, a restarting node cannot tell its own interrupted reservations from another
    /// node's live ones: reservations run out by their lease instead (`admitMessage` takes an expired
    /// one over), so nothing is done here.
    public func recoverInterrupted() throws {}

    public func close() {
        pool.close()
    }

    public func purge(now: Int64, messagesBefore: Int64, devicesBefore: Int64) throws {
        try pool.transaction(serializable: false) { connection in
            // A code issued while this runs may leave a pending address behind a device just deleted:
            // the next purges take both (the code when it has expired, the address a week on).
            try connection.execute("""
                DELETE FROM relay_destinations WHERE verified_at IS NULL AND created_at < $1 AND NOT EXISTS (
                    SELECT 1 FROM relay_codes c WHERE c.device_id = relay_destinations.device_id
                        AND c.address_key = relay_destinations.address_key AND c.expires_at > $2)
                """, [.integer(devicesBefore), .integer(now)])
            try connection.execute("""
                DELETE FROM relay_devices WHERE revoked_at < $1 OR (revoked_at IS NULL AND created_at < $2
                    AND NOT EXISTS (SELECT 1 FROM relay_destinations WHERE device_id = relay_devices.id)
                    AND NOT EXISTS (SELECT 1 FROM relay_codes WHERE device_id = relay_devices.id AND expires_at > $3))
                """, [.integer(messagesBefore), .integer(devicesBefore), .integer(now)])
            // Only once the message itself is forgotten (see `SQLiteRelayStore.purge`). The outbox's table
            // is made by the outbox, which a relay always opens; a store on its own has none to look in.
            let outboxExists = try connection.execute("SELECT to_regclass('jotter_messages') IS NOT NULL")
                .first?.text(0) == "t"
            try connection.execute(outboxExists ? """
                DELETE FROM relay_messages WHERE created_at < $1
                    AND NOT EXISTS (SELECT 1 FROM jotter_messages m WHERE m.id = relay_messages.id)
                """ : "DELETE FROM relay_messages WHERE created_at < $1", [.integer(messagesBefore)])
            try connection.execute("DELETE FROM relay_idempotency WHERE expires_at <= $1", [.integer(now)])
            try connection.execute("DELETE FROM relay_counters WHERE window_end <= $1", [.integer(now)])
            try connection.execute("DELETE FROM relay_code_issues WHERE issued_at <= $1", [.integer(now - 86_400_000)])
            try connection.execute("DELETE FROM relay_codes WHERE expires_at <= $1", [.integer(now - 86_400_000)])
            try connection.execute("DELETE FROM relay_invites WHERE expires_at <= $1 OR used_at <= $1",
                                   [.integer(now - 86_400_000)])
        }
    }
}
