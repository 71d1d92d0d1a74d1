/// The relay's state in the data directory's SQLite database, through the outbox's `DatabaseQueue`:
/// every decision is one transaction on the one writer queue, so two requests racing for the last
/// unit of a limit or for one `Idempotency-Key` are decided one after the other.
///
/// Most writes commit with `synchronous=NORMAL`: the outbox's accept that follows them is a FULL commit,
/// and in WAL mode its fsync makes every earlier commit durable too (a reservation is on disk before
/// the message it reserves). A device, an invite and a confirmation have no such follower and are
/// durable on their own.
public struct SQLiteRelayStore: RelayStore {
    /// The outbox's database queue: one writer for the outbox and the relay tables alike.
    let database: DatabaseQueue

    /// A store over `database` (the outbox's), creating or migrating the relay tables.
    public init(database: DatabaseQueue) throws {
        self.database = database
        try RelaySchema.migrate(database)
    }

    private func write<T: Sendable>(durable: Bool, _ body: (Database) throws -> T) throws -> T {
        try database.write(durable: durable, body)
    }

    // MARK: Devices

    public func createInvite(hash: [UInt8], now: Int64, expiresAt: Int64) throws {
        try write(durable: true) { database in
            try database.run("INSERT INTO relay_invites (invite_hash, created_at, expires_at) VALUES (?, ?, ?)",
                             [.blob(hash), .integer(now), .integer(expiresAt)])
        }
    }

    public func registerDevice(id: String, secretHash: [UInt8], inviteHash: [UInt8]?, now: Int64) throws -> Bool {
        try write(durable: true) { database in
            if let inviteHash {
                let invite = try database.statement(
                    "SELECT expires_at, used_at FROM relay_invites WHERE invite_hash = ?"
                ).firstRow([.blob(inviteHash)]) { (expiresAt: $0.int64(0), used: !$0.isNull(1)) }
                guard let invite, !invite.used, invite.expiresAt > now else { return false }
                try database.run("UPDATE relay_invites SET used_at = ?, device_id = ? WHERE invite_hash = ?",
                                 [.integer(now), .text(id), .blob(inviteHash)])
            }
            try database.run("INSERT INTO relay_devices (id, secret_hash, created_at) VALUES (?, ?, ?)",
                             [.text(id), .blob(secretHash), .integer(now)])
            return true
        }
    }

    public func device(secretHash: [UInt8]) throws -> String? {
        let found = try database.read { database in
            try database.statement(
                "SELECT id, secret_hash FROM relay_devices WHERE secret_hash = ? AND revoked_at IS NULL"
            ).firstRow([.blob(secretHash)]) { (id: $0.text(0) ?? "", stored: $0.blob(1) ?? []) }
        }
        guard let found, HMAC.constantTimeEquals(found.stored, secretHash) else { return nil }
        return found.id
    }

    public func isRevoked(secretHash: [UInt8]) throws -> Bool {
        let stored = try database.read { database in
            try database.statement(
                "SELECT secret_hash FROM relay_devices WHERE secret_hash = ? AND revoked_at IS NOT NULL"
            ).firstRow([.blob(secretHash)]) { $0.blob(0) ?? [] }
        }
        return stored.map { HMAC.constantTimeEquals($0, secretHash) } ?? false
    }

    // MARK: Destinations and codes

    public func issueCode(_ issue: CodeIssue) throws -> CodeIssueOutcome {
        try write(durable: false) { database in
            let now = issue.now, policy = issue.policy
            let states = try Self.check(issue.charges, now: now, in: database)
            var refusals: [(reason: String, seconds: Int64)] = states.filter(\.refused).map {
                ($0.charge.policy, $0.resetSeconds)
            }
            let issued = try database.statement("""
                SELECT issued_at FROM relay_code_issues WHERE address_key = ? AND issued_at > ? ORDER BY issued_at
                """).rows([.blob(issue.mailboxKey), .integer(now - 86_400_000)]) { $0.int64(0) }
            refusals += policy.refusals(issued: issued, now: now)
            if let tightest = refusals.max(by: { $0.seconds < $1.seconds }) {
                return .limited(reason: tightest.reason, retryAfterSeconds: tightest.seconds, limits: states)
            }
            let spent = try Self.spend(issue.charges, now: now, in: database)
            try database.run("INSERT INTO relay_code_issues (address_key, issued_at) VALUES (?, ?)",
                             [.blob(issue.mailboxKey), .integer(now)])
            try database.run("""
                INSERT OR REPLACE INTO relay_codes (device_id, address_key, code_hash, created_at, expires_at, attempts)
                VALUES (?, ?, ?, ?, ?, 0)
                """, [.text(issue.deviceID), .blob(issue.addressKey), .blob(issue.codeHash), .integer(now),
                      .integer(now + policy.lifetimeMilliseconds)])
            try database.run("""
                INSERT INTO relay_destinations (device_id, address_key, sealed_address, created_at) VALUES (?, ?, ?, ?)
                ON CONFLICT (device_id, address_key) DO NOTHING
                """, [.text(issue.deviceID), .blob(issue.addressKey), .blob(issue.sealedAddress), .integer(now)])
            return .issued(spent)
        }
    }

    public func confirmCode(deviceID: String, addressKey: [UInt8], presentedHash: [UInt8], now: Int64,
                            maximumAttempts: Int) throws -> ConfirmOutcome {
        try write(durable: true) { database in
            let key: [DatabaseValue] = [.text(deviceID), .blob(addressKey)]
            let code = try database.statement("""
                SELECT code_hash, expires_at, attempts, spent_at FROM relay_codes
                WHERE device_id = ? AND address_key = ?
                """).firstRow(key) { row in
                (hash: row.blob(0) ?? [], expiresAt: row.int64(1), attempts: Int(row.int64(2)), spent: !row.isNull(3))
            }
            guard let code else { return .noCode }
            if code.spent || code.attempts >= maximumAttempts {
                // The right code again, after it verified the address (that answer was lost on the way):
                // verified, as then. Not a burnt code (its attempts ran out), nor a wrong one.
                if code.spent && code.attempts < maximumAttempts && HMAC.constantTimeEquals(code.hash, presentedHash),
                   try database.statement("""
                       SELECT 1 FROM relay_destinations WHERE device_id = ? AND address_key = ? AND verified_at IS NOT NULL
                       """).firstRow(key, { _ in true }) == true {
                    return .verified
                }
                return .spent
            }
            if code.expiresAt <= now { return .expired }
            if HMAC.constantTimeEquals(code.hash, presentedHash) {
                try database.run("UPDATE relay_codes SET spent_at = ? WHERE device_id = ? AND address_key = ?",
                                 [.integer(now)] + key)
                try database.run("""
                    UPDATE relay_destinations SET verified_at = COALESCE(verified_at, ?)
                    WHERE device_id = ? AND address_key = ?
                    """, [.integer(now)] + key)
                return .verified
            }
            let attempts = code.attempts + 1
            let burnt = attempts >= maximumAttempts
            try database.run("""
                UPDATE relay_codes SET attempts = ?, spent_at = ? WHERE device_id = ? AND address_key = ?
                """, [.integer(Int64(attempts)), burnt ? .integer(now) : .null] + key)
            return .wrong(attemptsLeft: maximumAttempts - attempts)
        }
    }

    public func removeDestination(deviceID: String, addressKey: [UInt8]) throws -> Bool {
        try write(durable: true) { database in
            let key: [DatabaseValue] = [.text(deviceID), .blob(addressKey)]
            try database.run("DELETE FROM relay_codes WHERE device_id = ? AND address_key = ?", key)
            try database.run("DELETE FROM relay_destinations WHERE device_id = ? AND address_key = ?", key)
            return database.changes > 0
        }
    }

    public func revokeDevice(id: String, now: Int64) throws {
        try write(durable: true) { database in
            try database.run("UPDATE relay_devices SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                             [.integer(now), .text(id)])
            try database.run("DELETE FROM relay_codes WHERE device_id = ?", [.text(id)])
            try database.run("DELETE FROM relay_destinations WHERE device_id = ?", [.text(id)])
        }
    }

    public func destinations(deviceID: String) throws -> [StoredDestination] {
        try database.read { database in
            try database.statement("""
                SELECT address_key, sealed_address, created_at, verified_at FROM relay_destinations
                WHERE device_id = ? ORDER BY created_at, rowid
                """).rows([.text(deviceID)]) { row in
                StoredDestination(addressKey: row.blob(0) ?? [], sealedAddress: row.blob(1) ?? [],
                                  createdAt: row.int64(2), verifiedAt: row.optionalInt64(3))
            }
        }
    }

    // MARK: Limits

    public func spend(_ charges: [LimitCharge], now: Int64) throws -> LimitVerdict {
        try write(durable: false) { database in
            let states = try Self.check(charges, now: now, in: database)
            if states.contains(where: \.refused) { return .refused(states) }
            return .allowed(try Self.spend(charges, now: now, in: database))
        }
    }

    /// Each layer's state before spending: what is left, and whether it refuses.
    static func check(_ charges: [LimitCharge], now: Int64, in database: Database) throws -> [LimitState] {
        try charges.map { charge in
            let used = try database.statement("""
                SELECT count FROM relay_counters WHERE policy = ? AND partition = ? AND window_start = ?
                """).firstRow([.text(charge.policy), .blob(charge.partition), .integer(charge.windowStart(now: now))]) {
                Int($0.int64(0))
            } ?? 0
            return LimitState(charge: charge, remaining: max(0, charge.quota - used),
                              resetSeconds: charge.resetSeconds(now: now), refused: used >= charge.quota)
        }
    }

    /// Spends one of every layer; returns the states after spending.
    public func refund(_ charges: [LimitCharge], spentAt now: Int64) throws {
        try write(durable: false) { database in
            for charge in charges {
                try database.run("""
                    UPDATE relay_counters SET count = MAX(count - 1, 0) WHERE policy = ? AND partition = ? AND window_start = ?
                    """, [.text(charge.policy), .blob(charge.partition), .integer(charge.windowStart(now: now))])
            }
        }
    }

    static func spend(_ charges: [LimitCharge], now: Int64, in database: Database) throws -> [LimitState] {
        for charge in charges {
            let start = charge.windowStart(now: now)
            try database.run("""
                INSERT INTO relay_counters (policy, partition, window_start, window_end, count) VALUES (?, ?, ?, ?, 1)
                ON CONFLICT (policy, partition, window_start) DO UPDATE SET count = count + 1
                """, [.text(charge.policy), .blob(charge.partition), .integer(start),
                      .integer(start + charge.windowSeconds * 1000)])
        }
        return try check(charges, now: now, in: database).map { state in
            var state = state
            state.refused = false
            return state
        }
    }

    // MARK: Messages

    public func admitMessage(_ admission: MessageAdmission) throws -> AdmissionOutcome {
        try write(durable: false) { database in
            let now = admission.now
            if let idempotency = admission.idempotency {
                let key: [DatabaseValue] = [.blob(idempotency.keyHash)]
                let record = try database.statement("""
                    SELECT payload_hash, created_at, expires_at, lease_until, message_id FROM relay_idempotency
                    WHERE key_hash = ?
                    """).firstRow(key) { row in
                    IdempotencyRecord(payloadHash: row.blob(0) ?? [], createdAt: row.int64(1), expiresAt: row.int64(2),
                                      leaseUntil: row.optionalInt64(3), messageID: row.text(4))
                }
                switch record?.decide(payloadHash: idempotency.payloadHash, now: now) {
                case .answer(let outcome)?:
                    return outcome
                case .takeOver(let reservedAt)?:
                    try database.run("UPDATE relay_idempotency SET lease_until = ? WHERE key_hash = ?",
                                     [.integer(admission.leaseUntil)] + key)
                    return .admitted(reservedAt: reservedAt, limits: [])
                case .expired?:
                    try database.run("DELETE FROM relay_idempotency WHERE key_hash = ?", key)
                case nil:
                    break
                }
            }
            let verified = try database.statement("""
                SELECT 1 FROM relay_destinations WHERE device_id = ? AND address_key = ? AND verified_at IS NOT NULL
                """).firstRow([.text(admission.deviceID), .blob(admission.addressKey)]) { _ in true } ?? false
            guard verified else { return .unverified }
            let states = try Self.check(admission.charges, now: now, in: database)
            if states.contains(where: \.refused) { return .limited(states) }
            let spent = try Self.spend(admission.charges, now: now, in: database)
            guard let idempotency = admission.idempotency else { return .admitted(reservedAt: nil, limits: spent) }
            try database.run("""
                INSERT INTO relay_idempotency (key_hash, device_id, payload_hash, created_at, expires_at, lease_until)
                VALUES (?, ?, ?, ?, ?, ?)
                """, [.blob(idempotency.keyHash), .text(admission.deviceID), .blob(idempotency.payloadHash),
                      .integer(now), .integer(admission.expiresAt), .integer(admission.leaseUntil)])
            return .admitted(reservedAt: now, limits: spent)
        }
    }

    public func completeMessage(deviceID: String, keyHash: [UInt8]?, messageID: String, now: Int64) throws {
        try write(durable: false) { database in
            if let keyHash {
                try database.run("UPDATE relay_idempotency SET message_id = ?, lease_until = NULL WHERE key_hash = ?",
                                 [.text(messageID), .blob(keyHash)])
            }
            try database.run("INSERT OR IGNORE INTO relay_messages (id, device_id, created_at) VALUES (?, ?, ?)",
                             [.text(messageID), .text(deviceID), .integer(now)])
        }
    }

    public func abandonMessage(keyHash: [UInt8]) throws {
        try write(durable: false) { database in
            try database.run("DELETE FROM relay_idempotency WHERE key_hash = ? AND message_id IS NULL",
                             [.blob(keyHash)])
        }
    }

    public func messageOwner(id: String) throws -> String? {
        try database.read { database in
            try database.statement("SELECT device_id FROM relay_messages WHERE id = ?").firstRow([.text(id)]) {
                $0.text(0)
            } ?? nil
        }
    }

    // MARK: Housekeeping

    public func recoverInterrupted() throws {
        try write(durable: false) { database in
            try database.run("UPDATE relay_idempotency SET lease_until = 0 WHERE message_id IS NULL")
        }
    }

    public func purge(now: Int64, messagesBefore: Int64, devicesBefore: Int64) throws {
        try write(durable: false) { database in
            try database.run("""
                DELETE FROM relay_destinations WHERE verified_at IS NULL AND created_at < ? AND NOT EXISTS (
                    SELECT 1 FROM relay_codes c WHERE c.device_id = relay_destinations.device_id
                        AND c.address_key = relay_destinations.address_key AND c.expires_at > ?)
                """, [.integer(devicesBefore), .integer(now)])
            try database.run("""
                DELETE FROM relay_devices WHERE revoked_at < ? OR (revoked_at IS NULL AND created_at < ?
                    AND NOT EXISTS (SELECT 1 FROM relay_destinations WHERE device_id = relay_devices.id)
                    AND NOT EXISTS (SELECT 1 FROM relay_codes WHERE device_id = relay_devices.id AND expires_at > ?))
                """, [.integer(messagesBefore), .integer(devicesBefore), .integer(now)])
            // Only once the message itself is forgotten: one still on its way, or delivered within its
            // retention, keeps its owner (and so its status and its Retry).
            try database.run("""
                DELETE FROM relay_messages WHERE created_at < ?
                    AND NOT EXISTS (SELECT 1 FROM messages WHERE messages.id = relay_messages.id)
                """, [.integer(messagesBefore)])
            try database.run("DELETE FROM relay_idempotency WHERE expires_at <= ?", [.integer(now)])
            try database.run("DELETE FROM relay_counters WHERE window_end <= ?", [.integer(now)])
            try database.run("DELETE FROM relay_code_issues WHERE issued_at <= ?", [.integer(now - 86_400_000)])
            try database.run("DELETE FROM relay_codes WHERE expires_at <= ?", [.integer(now - 86_400_000)])
            try database.run("DELETE FROM relay_invites WHERE expires_at <= ? OR used_at <= ?",
                             [.integer(now - 86_400_000), .integer(now - 86_400_000)])
        }
    }
}
