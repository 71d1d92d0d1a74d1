import Dispatch
import Synchronization

/// LAN pairing: one-time pairing links (10 minutes, single use, any number of them) are exchanged for
/// per-device tokens. Only keyed hashes of either are stored, in the outbox database, so `jotter pair`
/// can issue a link that a running server accepts. Devices can be listed, renamed and revoked.
public final class DeviceRegistry: Sendable {
    /// A paired device as `jotter devices` lists it.
    public struct Device: Sendable, Equatable {
        /// The device's id (a UUID), what `jotter devices revoke` takes.
        public var id: String
        /// A name for people: derived from the browser's User-Agent, or set with `jotter devices rename`.
        public var name: String
        /// When it paired, epoch ms.
        public var createdAt: Int64
        /// When its token was last accepted, epoch ms.
        public var lastSeenAt: Int64?
        /// When it was revoked, epoch ms.
        public var revokedAt: Int64?
    }

    /// A freshly issued pairing link's secret part.
    public struct PairingToken: Sendable {
        /// The token (goes into the link's fragment, never into a log).
        public var token: String
        /// The same link as a code to type, `K7Q2-M9XD` (`PairingCode`): either one pairs, once.
        public var code: String
        /// When it stops working, epoch ms.
        public var expiresAt: Int64
    }

    /// What presenting a pairing token led to.
    public enum PairOutcome: Sendable, Equatable {
        /// A new device and its token (shown once).
        case paired(device: Device, token: String)
        /// The link worked once already.
        case used
        /// The link ran out (10 minutes).
        case expired
        /// No such link was ever issued: a guess, or a typo.
        case unknown
    }

    /// What a presented device token is.
    public enum TokenCheck: Sendable, Equatable {
        /// A paired device (its id).
        case valid(String)
        /// A device that was revoked: a real token, not a guess.
        case revoked(String)
        /// Not a token of this server.
        case unknown
    }

    /// The purpose string for the registry's hashing key.
    public static let hashingPurpose = "jotter device tokens v1"

    /// How long a pairing link works.
    public static let pairingLifetime: Int64 = 10 * 60_000
    /// How long a used or expired link is remembered, so the page can say which it was.
    static let pairingMemory: Int64 = 7 * 86_400_000
    /// Sightings (`last_seen_at`) are kept in memory and written in one batch at most this often.
    static let lastSeenResolution: Int64 = 60_000

    private let database: DatabaseQueue
    private let hashingKey: SymmetricKey
    private let clock: any WallClock
    /// Device id → when it was last seen (wall time), not yet written; and when the oldest of those was
    /// noted (monotonic).
    private let unwrittenSightings = Mutex<(seen: [String: Int64], since: Int64?)>(([:], nil))
    /// Writes a batch a minute after its first sighting when no later request does: a phone used once
    /// and then left alone showed its pairing time in `jotter devices` until the server stopped.
    private let sightingsTimer = Mutex<(any SchedulerTimer)?>(nil)

    /// A registry over the `devices` and `pairing_tokens` tables, through the outbox's database queue.
    public convenience init(outbox: Outbox, clock: any WallClock = SystemClock(),
                            linkLifetime: Int64 = DeviceRegistry.pairingLifetime,
                            scheduler: (any Scheduler)? = nil) throws {
        self.init(database: outbox.database, hashingKey: try outbox.hashingKey(purpose: Self.hashingPurpose),
                  clock: clock, linkLifetime: linkLifetime, scheduler: scheduler)
    }

    /// A registry over `database`; `hashingKey` is the outbox's key for `hashingPurpose`.
    /// Without a `scheduler` (the command line's), sightings are written only as requests come.
    init(database: DatabaseQueue, hashingKey: SymmetricKey, clock: any WallClock,
         linkLifetime: Int64 = DeviceRegistry.pairingLifetime, scheduler: (any Scheduler)? = nil) {
        self.database = database
        self.hashingKey = hashingKey
        self.clock = clock
        self.linkLifetime = linkLifetime
        if let scheduler {
            let timer = scheduler.makeTimer(queue: DispatchQueue(label: "jotter.devices.sightings")) { [weak self] in
                self?.writeDueSightings()
            }
            sightingsTimer.withLock { $0 = timer }
        }
    }

    /// How long the links this registry issues work (`pairingLifetime`; tests make it short).
    let linkLifetime: Int64

    private func hash(_ token: String) -> [UInt8] {
        HMAC.sha256(Array(token.utf8), key: hashingKey)
    }

    /// A pairing code's keyed hash (of its normalized form), apart from every token's.
    private func codeHash(_ normalized: String) -> [UInt8] {
        hash("pairing code " + normalized)
    }

    /// 32 random bytes, base64url without padding.
    static func newToken() throws -> String {
        MIME.base64(try SecureRandom.bytes(count: 32))
            .replacingLiterally("+", with: "-").replacingLiterally("/", with: "_")
            .replacingLiterally("=", with: "")
    }

    /// A new one-time pairing link secret, valid for `linkLifetime` (10 minutes). Any number may be live
    /// at once.
    public func issuePairingToken() throws -> PairingToken {
        let token = try Self.newToken(), code = try PairingCode.random()
        let now = clock.nowMilliseconds()
        let expiry = now + linkLifetime
        try database.write { database in
                try database.run("DELETE FROM pairing_tokens WHERE expires_at < ?",
                                 [.integer(now - Self.pairingMemory)])
                try database.run("""
                    INSERT INTO pairing_tokens (token_hash, code_hash, created_at, expires_at) VALUES (?, ?, ?, ?)
                    """, [.blob(hash(token)), .blob(codeHash(code)), .integer(now), .integer(expiry)])
        }
        return PairingToken(token: token, code: PairingCode.formatted(code), expiresAt: expiry)
    }

    /// Exchanges a pairing token for a new device named `deviceName`. The token is spent in the same
    /// transaction that stores the device, so two phones racing with one link get one device.
    ///
    /// `request` is the phone's own random id for this exchange. A phone whose answer was lost (flaky
    /// Wi-Fi) asks again with the same link and the same id: while the link is within its 10 minutes it
    /// gets the device that link made, under a new token (the first one never arrived, and stops
    /// working). Anyone else presenting the spent link, without the id, is told it was used.
    public func pair(pairingToken: String, deviceName: String, request: String? = nil) throws -> PairOutcome {
        guard !pairingToken.isEmpty, pairingToken.utf8.count <= 128 else { return .unknown }
        let now = clock.nowMilliseconds()
        // A link's token, or the code typed for it (told apart by shape: a token is 43 characters).
        let lookup = PairingCode.normalized(pairingToken).map { ("code_hash", codeHash($0)) }
            ?? ("token_hash", hash(pairingToken))
        let requestHash = request.flatMap { (16...128).contains($0.utf8.count) ? hash("pair request " + $0) : nil }
        let name = Self.displayName(deviceName)
        return try database.write { database -> PairOutcome in
                guard let link = try database.statement(
                    "SELECT expires_at, used_at, request_hash, device_id, token_hash FROM pairing_tokens WHERE \(lookup.0) = ?"
                ).firstRow([.blob(lookup.1)], {
                    (expiresAt: $0.int64(0), usedAt: $0.optionalInt64(1), requestHash: $0.blob(2), deviceID: $0.text(3),
                     key: $0.blob(4) ?? [])
                }) else { return .unknown }
                let key = link.key
                if link.usedAt != nil {
                    guard let requestHash, let stored = link.requestHash, HMAC.constantTimeEquals(stored, requestHash),
                          link.expiresAt > now, let id = link.deviceID,
                          let device = try database.statement(
                              "SELECT id, name, created_at, last_seen_at, revoked_at FROM devices WHERE id = ? AND revoked_at IS NULL"
                          ).firstRow([.text(id)], { Self.device($0) })
                    else { return .used }
                    let deviceToken = try Self.newToken()
                    try database.run("UPDATE devices SET token_hash = ?, last_seen_at = ? WHERE id = ?",
                                     [.blob(hash(deviceToken)), .integer(now), .text(id)])
                    return .paired(device: device, token: deviceToken)
                }
                if link.expiresAt <= now { return .expired }
                let deviceToken = try Self.newToken()
                let device = Device(id: try SecureRandom.uuid(), name: name.isEmpty ? "Device" : name,
                                    createdAt: now, lastSeenAt: now, revokedAt: nil)
                try database.run("UPDATE pairing_tokens SET used_at = ?, request_hash = ?, device_id = ? WHERE token_hash = ?",
                                 [.integer(now), requestHash.map { .blob($0) } ?? .null, .text(device.id), .blob(key)])
                try database.run(
                    "INSERT INTO devices (id, name, token_hash, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?)",
                    [.text(device.id), .text(device.name), .blob(hash(deviceToken)), .integer(now), .integer(now)])
                return .paired(device: device, token: deviceToken)
        }
    }

    /// What `deviceToken` is: a paired device's, a revoked device's, or nothing of ours.
    public func check(deviceToken: String) -> TokenCheck {
        guard !deviceToken.isEmpty, deviceToken.utf8.count <= 128 else { return .unknown }
        let presented = hash(deviceToken)
        let now = clock.nowMilliseconds()
        let found = try? database.read { database in
            try database.statement(
                "SELECT id, token_hash, revoked_at IS NOT NULL FROM devices WHERE token_hash = ?"
            ).firstRow([.blob(presented)]) { row in (id: row.text(0) ?? "", stored: row.blob(1) ?? [], revoked: row.int64(2) != 0) }
        }
        guard let found = found ?? nil, HMAC.constantTimeEquals(found.stored, presented) else { return .unknown }
        if found.revoked { return .revoked(found.id) }
        noteSeen(id: found.id, now: now)
        return .valid(found.id)
    }

    /// The device a bearer token belongs to, if it is valid and not revoked.
    public func verify(deviceToken: String) -> String? {
        if case .valid(let id) = check(deviceToken: deviceToken) { return id }
        return nil
    }

    /// Notes that `id` was seen. Nothing is written per request: sightings gather in memory and go to
    /// the database in one write, off the request's thread, once the oldest is a minute old — by the
    /// request that finds it so, or else by the timer armed with the first.
    /// (The minute is measured on the monotonic clock: on the wall clock, one set back an hour held the
    /// sightings in memory for that hour.)
    private func noteSeen(id: String, now: Int64) {
        let first = unwrittenSightings.withLock { state -> Bool in
            state.seen[id] = now
            guard state.since == nil else { return false }
            state.since = clock.monotonicMilliseconds()
            return true
        }
        if first {
            sightingsTimer.withLock { $0?.arm(afterMilliseconds: Self.lastSeenResolution) }
        } else {
            writeDueSightings()
        }
    }

    /// The gathered sightings, written (on the writer's queue, later) when the first is a minute old.
    private func writeDueSightings() {
        let tick = clock.monotonicMilliseconds()
        let batch = unwrittenSightings.withLock { state -> [String: Int64]? in
            guard let since = state.since, tick - since >= Self.lastSeenResolution else { return nil }
            defer { state = ([:], nil) }
            return state.seen
        }
        guard let batch else { return }
        database.async { [database] in
            _ = try? database.transaction(durable: false) { try Self.store(batch, in: $0) }
        }
    }

    /// Writes the sightings gathered in memory now (at shutdown).
    public func flushSightings() {
        sightingsTimer.withLock { $0?.cancel() }
        let batch = unwrittenSightings.withLock { state -> [String: Int64] in
            defer { state = ([:], nil) }
            return state.seen
        }
        guard !batch.isEmpty else { return }
        _ = try? database.write(durable: false) { try Self.store(batch, in: $0) }
    }

    private static func store(_ batch: [String: Int64], in database: Database) throws {
        for (id, at) in batch {
            try database.run("UPDATE devices SET last_seen_at = MAX(COALESCE(last_seen_at, 0), ?) WHERE id = ?",
                             [.integer(at), .text(id)])
        }
    }

    /// A device as stored, with a sighting not yet written.
    private func withSighting(_ device: Device) -> Device {
        var device = device
        if let seen = unwrittenSightings.withLock({ $0.seen[device.id] }) {
            device.lastSeenAt = max(device.lastSeenAt ?? 0, seen)
        }
        return device
    }

    /// One device by its exact id.
    public func device(id: String) throws -> Device? {
        try database.read { database in
            try database.statement(
                "SELECT id, name, created_at, last_seen_at, revoked_at FROM devices WHERE id = ?"
            ).firstRow([.text(id)]) { Self.device($0) }
        }.map(withSighting)
    }

    /// Every paired device, newest first.
    public func list() throws -> [Device] {
        try database.read { database in
            try database.statement(
                "SELECT id, name, created_at, last_seen_at, revoked_at FROM devices ORDER BY created_at DESC"
            ).rows { Self.device($0) }
        }.map(withSighting)
    }

    private static func device(_ row: Row) -> Device {
        Device(id: row.text(0) ?? "", name: row.text(1) ?? "", createdAt: row.int64(2),
               lastSeenAt: row.optionalInt64(3), revokedAt: row.optionalInt64(4))
    }

    /// How many devices' ids are `id` or start with it (to say a prefix matched several, not none).
    public func matchCount(id: String) throws -> Int {
        guard !id.isEmpty, id.utf8.count <= 64 else { return 0 }
        return try database.read { database in
            Int(try database.statement("SELECT count(*) FROM devices WHERE substr(id, 1, length(?1)) = ?1")
                .firstRow([.text(id.lowercased())]) { $0.int64(0) } ?? 0)
        }
    }

    /// The one device whose id is `id` or starts with it (and, with `activeOnly`, is not revoked).
    private func uniqueMatch(_ database: Database, id: String, activeOnly: Bool) throws -> String? {
        guard !id.isEmpty, id.utf8.count <= 64 else { return nil }
        let sql = "SELECT id FROM devices WHERE substr(id, 1, length(?1)) = ?1"
            + (activeOnly ? " AND revoked_at IS NULL" : "")
        let matches = try database.statement(sql).rows([.text(id.lowercased())]) { $0.text(0) ?? "" }
        return matches.count == 1 ? matches[0] : nil
    }

    /// When the one device `id` (or its unique prefix) names was revoked; nil if it is active or no single
    /// device matches.
    public func revokedAt(id: String) throws -> Int64? {
        try database.read { database in
            guard let match = try uniqueMatch(database, id: id, activeOnly: false) else { return nil }
            return try database.statement("SELECT revoked_at FROM devices WHERE id = ?").firstRow([.text(match)]) {
                $0.optionalInt64(0)
            } ?? nil
        }
    }

    /// Revokes a device (by id or unique id prefix); false if none matched.
    public func revoke(id: String) throws -> Bool {
        try revokeDevice(id: id) != nil
    }

    /// Revokes the one active device `id` (or its unique prefix) names; the device as it is now, revoked, or
    /// nil if none matched (so a person is told which device a prefix named).
    public func revokeDevice(id: String) throws -> Device? {
        let now = clock.nowMilliseconds()
        return try database.write { database in
            guard let match = try uniqueMatch(database, id: id, activeOnly: true) else { return nil }
            try database.run("UPDATE devices SET revoked_at = ? WHERE id = ?", [.integer(now), .text(match)])
            return try database.statement("SELECT id, name, created_at, last_seen_at, revoked_at FROM devices WHERE id = ?")
                .firstRow([.text(match)]) { Self.device($0) }
        }
    }

    /// What `forget` did.
    public enum Forgetting: Sendable, Equatable {
        /// These revoked devices are gone from the list.
        case forgotten([Device])
        /// The one device `id` names is still paired: it is revoked first.
        case active(Device)
        /// No single device matches.
        case noMatch
    }

    /// Deletes revoked devices from the list: the one `id` (or its unique prefix) names, or, with nil, every
    /// revoked one. An active device is not forgotten (it must be revoked first). Its phone, if it comes
    /// back, is then told "not paired" rather than "unpaired", and pairs again like any other.
    public func forget(id: String?) throws -> Forgetting {
        try database.write { database in
            let columns = "SELECT id, name, created_at, last_seen_at, revoked_at FROM devices"
            let devices: [Device]
            if let id {
                guard let match = try uniqueMatch(database, id: id, activeOnly: false),
                      let device = try database.statement(columns + " WHERE id = ?").firstRow([.text(match)], { Self.device($0) })
                else { return .noMatch }
                guard device.revokedAt != nil else { return .active(device) }
                devices = [device]
            } else {
                devices = try database.statement(columns + " WHERE revoked_at IS NOT NULL ORDER BY created_at DESC")
                    .rows { Self.device($0) }
            }
            for device in devices {
                try database.run("DELETE FROM devices WHERE id = ? AND revoked_at IS NOT NULL", [.text(device.id)])
                // A lost answer's retry of the link that made it gets "already used", not a token for nothing.
                try database.run("UPDATE pairing_tokens SET device_id = NULL WHERE device_id = ?", [.text(device.id)])
            }
            return .forgotten(devices)
        }
    }

    /// A device's name as stored and listed: one line, at most 60 characters, without the bidirectional
    /// embeddings, overrides and isolates (U+202A–202E, U+2066–2069) that would turn the rest of a
    /// `jotter devices` line, or the page's list, around (a name that shows as another's).
    static func displayName(_ name: String) -> String {
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: SubjectLine.sanitized(name).unicodeScalars.filter { scalar in
            !scalar.isBidiControl
        })
        return String(String(scalars).prefix(60))
    }

    /// Renames a device (by id or unique id prefix); nil if none matched, else the stored name.
    public func rename(id: String, to name: String) throws -> String? {
        let cleaned = Self.displayName(name)
        guard !cleaned.isEmpty else { return nil }
        return try database.write { database in
            guard let match = try uniqueMatch(database, id: id, activeOnly: false) else { return nil }
            try database.run("UPDATE devices SET name = ? WHERE id = ?", [.text(cleaned), .text(match)])
            return cleaned
        }
    }
}
