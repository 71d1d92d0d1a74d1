import Foundation
import Synchronization

/// LAN pairing: one-time pairing tokens (printed by the server, 10 minutes, single use) are exchanged
/// for per-device tokens. Only keyed hashes of device tokens are stored; every comparison is by hash
/// lookup plus a constant-time check, and devices can be listed and revoked.
public final class DeviceRegistry: Sendable {
    /// A paired device as `jotter devices` lists it.
    public struct Device: Sendable, Equatable {
        /// The device's id (a UUID), what `jotter devices revoke` takes.
        public var id: String
        /// The name the page sent when pairing.
        public var name: String
        /// When it paired, epoch ms.
        public var createdAt: Int64
        /// When its token was last accepted, epoch ms.
        public var lastSeenAt: Int64?
        /// When it was revoked, epoch ms.
        public var revokedAt: Int64?
    }

    /// The purpose string for the registry's hashing key.
    public static let hashingPurpose = "jotter device tokens v1"

    /// How long a pairing token works.
    public static let pairingLifetime: Int64 = 10 * 60_000

    private let database: Mutex<DatabaseBox>
    private let hashingKey: SymmetricKey
    private let clock: any WallClock
    /// Hashes of live pairing tokens → expiry.
    private let pairing = Mutex<[[UInt8]: Int64]>([:])

    /// A registry over the `devices` table of the outbox database at `path`; `hashingKey` comes from
    /// `Outbox.hashingKey(purpose: DeviceRegistry.hashingPurpose)`.
    public init(databasePath: String, hashingKey: SymmetricKey, clock: any WallClock = SystemClock()) throws {
        let database = try Database(path: databasePath)
        try database.execute("PRAGMA busy_timeout = 5000")
        self.database = Mutex(DatabaseBox(database))
        self.hashingKey = hashingKey
        self.clock = clock
    }

    private func hash(_ token: String) -> [UInt8] {
        HMAC.sha256(Array(token.utf8), key: hashingKey)
    }

    /// 32 random bytes, base64url without padding.
    static func newToken() throws -> String {
        MIME.base64(try SecureRandom.bytes(count: 32))
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// A new one-time pairing token, valid for 10 minutes.
    public func issuePairingToken() throws -> String {
        let token = try Self.newToken()
        let expiry = clock.nowMilliseconds() + Self.pairingLifetime
        pairing.withLock { $0[hash(token)] = expiry }
        return token
    }

    /// Exchanges a pairing token for a device token; nil if the pairing token is unknown, used or expired.
    public func pair(pairingToken: String, deviceName: String) throws -> String? {
        let now = clock.nowMilliseconds()
        let key = hash(pairingToken)
        let valid = pairing.withLock { tokens -> Bool in
            tokens = tokens.filter { $0.value > now }
            return tokens.removeValue(forKey: key) != nil  // single use, even when the exchange fails below
        }
        guard valid else { return nil }
        let deviceToken = try Self.newToken()
        let name = String(SubjectLine.sanitized(deviceName).prefix(60))
        try database.withLock { box in
            try box.database.run("INSERT INTO devices (id, name, token_hash, created_at) VALUES (?, ?, ?, ?)",
                                 [.text(UUID().uuidString.lowercased()), .text(name.isEmpty ? "device" : name),
                                  .blob(hash(deviceToken)), .integer(now)])
        }
        return deviceToken
    }

    /// The device a bearer token belongs to, if it is valid and not revoked.
    public func verify(deviceToken: String) -> String? {
        guard !deviceToken.isEmpty, deviceToken.utf8.count <= 128 else { return nil }
        let presented = hash(deviceToken)
        let now = clock.nowMilliseconds()
        return database.withLock { box -> String? in
            guard let (id, stored) = try? box.database.statement(
                "SELECT id, token_hash FROM devices WHERE token_hash = ? AND revoked_at IS NULL"
            ).firstRow([.blob(presented)], { row in (row.text(0) ?? "", row.blob(1) ?? []) }) ?? nil,
                  HMAC.constantTimeEquals(stored, presented) else { return nil }
            try? box.database.run("UPDATE devices SET last_seen_at = ? WHERE id = ?", [.integer(now), .text(id)])
            return id
        }
    }

    /// Every paired device, newest first.
    public func list() throws -> [Device] {
        try database.withLock { box in
            try box.database.statement(
                "SELECT id, name, created_at, last_seen_at, revoked_at FROM devices ORDER BY created_at DESC"
            ).rows { row in
                Device(id: row.text(0) ?? "", name: row.text(1) ?? "", createdAt: row.int64(2),
                       lastSeenAt: row.optionalInt64(3), revokedAt: row.optionalInt64(4))
            }
        }
    }

    /// Revokes a device (by id or unique id prefix); false if none matched.
    public func revoke(id: String) throws -> Bool {
        let now = clock.nowMilliseconds()
        return try database.withLock { box in
            let matches = try box.database.statement(
                "SELECT id FROM devices WHERE id LIKE ? || '%' AND revoked_at IS NULL")
                .rows([.text(id)]) { $0.text(0) ?? "" }
            guard matches.count == 1, !id.isEmpty else { return false }
            try box.database.run("UPDATE devices SET revoked_at = ? WHERE id = ?", [.integer(now), .text(matches[0])])
            return true
        }
    }

    /// Closes the database connection.
    public func close() {
        database.withLock { $0.database.close() }
    }
}

/// Moves a connection into a mutex: only ever used while the mutex is held.
final class DatabaseBox: @unchecked Sendable {
    let database: Database
    init(_ database: Database) { self.database = database }
}
