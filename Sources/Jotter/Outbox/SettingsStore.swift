/// Small named values kept beside the outbox: plain settings, and keyed fingerprints of configuration
/// (to notice that the relay changed without storing it). Also holds the hashing secret.
public struct SettingsStore: Sendable {
    let database: DatabaseQueue
    let hashingKey: SymmetricKey
    let sealer: Sealer

    /// Where the hashing secret is bound when sealed.
    static let hashingSecretContext = Array("jotter/hashing-secret/v1".utf8)

    /// The secret behind every keyed hash (idempotency keys, payloads, device tokens): 32 random bytes
    /// stored sealed under the outbox key. A separate secret, so `jotter rekey` can re-seal it and every
    /// stored hash stays valid under a new key. Created on first use.
    static func hashingSecret(_ queue: DatabaseQueue, sealer: Sealer) throws -> SymmetricKey {
        try queue.write { database in
            let stored = try database.statement("SELECT value FROM settings WHERE name = 'hashing_secret'")
                .firstRow { $0.blob(0) } ?? nil
            if let stored {
                guard let secret = sealer.open(stored, context: hashingSecretContext) else {
                    throw Outbox.OpenError.wrongKey(databasePath: database.path)
                }
                return try SymmetricKey(bytes: secret)
            }
            let secret = try SymmetricKey.random()
            let sealed = try secret.withUnsafeBytes { try sealer.seal(Array($0), context: hashingSecretContext) }
            try database.run("INSERT INTO settings (name, value) VALUES ('hashing_secret', ?)", [.blob(sealed)])
            return secret
        }
    }

    /// Records `fingerprint` for `name` and says whether it differs from the one stored before
    /// (false the first time: there was nothing to differ from).
    public func changed(_ name: String, fingerprint: [UInt8]) throws -> Bool {
        let keyed = HMAC.sha256(fingerprint, key: hashingKey)
        return try database.write { database in
            let previous = try database.statement("SELECT value FROM settings WHERE name = ?")
                .firstRow([.text(name)]) { $0.blob(0) } ?? nil
            try database.run("INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)",
                             [.text(name), .blob(keyed)])
            return previous.map { !HMAC.constantTimeEquals($0, keyed) } ?? false
        }
    }

    /// Stores a plain (non-secret) setting; nil removes it.
    public func write(_ name: String, value: String?) throws {
        try database.write { database in
            if let value {
                try database.run("INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)",
                                 [.text(name), .blob(Array(value.utf8))])
            } else {
                try database.run("DELETE FROM settings WHERE name = ?", [.text(name)])
            }
        }
    }

    /// Where a sealed setting's name is bound (`jotter rekey` re-seals every one of them).
    static let sealedPrefix = "sealed."
    static func sealedContext(_ name: String) -> [UInt8] { Array("jotter/setting/v1/\(name)".utf8) }

    /// Stores a secret setting (a relay's device secret) sealed under the outbox key; nil removes it.
    public func writeSealed(_ name: String, value: String?) throws {
        let stored = Self.sealedPrefix + name
        guard let value else { return try write(stored, value: nil) }
        let sealed = try sealer.seal(Array(value.utf8), context: Self.sealedContext(stored))
        try database.write { database in
            try database.run("INSERT OR REPLACE INTO settings (name, value) VALUES (?, ?)", [.text(stored), .blob(sealed)])
        }
    }

    /// A secret setting written by `writeSealed`; nil if absent (or sealed under another key).
    public func readSealed(_ name: String) throws -> String? {
        let stored = Self.sealedPrefix + name
        let sealed = try database.read { database in
            try database.statement("SELECT value FROM settings WHERE name = ?").firstRow([.text(stored)]) { $0.blob(0) } ?? nil
        }
        return sealed.flatMap { sealer.open($0, context: Self.sealedContext(stored)) }.map { String(decoding: $0, as: UTF8.self) }
    }

    /// A plain setting written by `write`.
    public func read(_ name: String) throws -> String? {
        try database.read { database in
            try database.statement("SELECT value FROM settings WHERE name = ?").firstRow([.text(name)]) { row in
                row.blob(0).map { String(decoding: $0, as: UTF8.self) }
            } ?? nil
        }
    }
}
