import CCrypto
import Glibc

/// `jotter rekey`: re-seals every stored memo, subject and the hashing secret under a new key.
///
/// Crash-safe by construction: the new key is written first (`key.new`, O_EXCL, 0600, fsync); rows
/// are re-sealed in batches, each a transaction that also stamps the row with the new key's id; only
/// when no row is left under the old key does `key.new` replace `key` (rename, then fsync of the
/// directory). Interrupted anywhere, running it again finishes the job; the server refuses to start
/// while `key.new` exists, so it never runs with rows under two keys.
public enum Rekey {
    /// Why a rekey stopped.
    public enum Failure: Error, CustomStringConvertible, Equatable, Sendable {
        case credentialKey
        case noDatabase(path: String)
        case unreadableRow(id: String)
        case io(errno: Int32)

        public var description: String {
            switch self {
            case .credentialKey:
                return "the key comes from a systemd credential; rotate it there, not with jotter rekey"
            case .noDatabase(let path):
                return "no outbox at \(path): nothing to rekey (is --data-dir right?); nothing was created"
            case .unreadableRow(let id):
                return "memo \(id) cannot be opened with the current key; nothing was changed for it"
            case .io(let code):
                return "cannot replace the key file: \(String(cString: strerror(code)))"
            }
        }
    }

    /// What a run did.
    public struct Report: Sendable, Equatable {
        /// Rows re-sealed by this run.
        public var resealed: Int
        /// True when the run finished an earlier, interrupted one.
        public var resumed: Bool
    }

    /// Rows re-sealed per transaction.
    public static let batchSize = 200

    /// Rekeys the data directory at `path` (the server must not be running: the directory lock is taken).
    /// `stopAfterBatches` interrupts the run on purpose (tests of the crash path).
    /// `DATA/key.credential`: the server last started with its key from a systemd credential.
    static func credentialMarkerPath(dataDirectory: String) -> String { dataDirectory + "/key.credential" }

    /// Records (or forgets) that the server reads its key from a credential, for `run` to refuse.
    static func markCredentialKey(dataDirectory: String, _ fromCredential: Bool) {
        let path = credentialMarkerPath(dataDirectory: dataDirectory)
        if fromCredential {
            guard access(path, F_OK) != 0 else { return }
            try? FileIO.writeFile(path, Array("The key is a systemd credential: rotate it there, not with jotter rekey.\n".utf8),
                                  mode: 0o600)
        } else {
            unlink(path)
        }
    }

    public static func run(dataDirectory path: String, credentialsDirectory: String? = nil,
                           batchSize: Int = Rekey.batchSize, stopAfterBatches: Int? = nil) throws -> Report {
        // A service given its key as a systemd credential reads that one, not the data directory's: a key
        // rotated here would leave the service with the old one, and the memos sealed under the new.
        if let credentialsDirectory, access(KeyStore.credentialPath(in: credentialsDirectory), F_OK) == 0 {
            throw Failure.credentialKey
        }
        if access(credentialMarkerPath(dataDirectory: path), F_OK) == 0 { throw Failure.credentialKey }
        // Nothing to rekey: said before the directory is touched (its lock file made, its mode changed).
        if let failure = DataDirectory.unreachable(DataDirectory.databasePath(in: path)) { throw failure }
        if access(path, F_OK) == 0, !DataDirectory.holdsData(databasePath: DataDirectory.databasePath(in: path)) {
            throw Failure.noDatabase(path: DataDirectory.databasePath(in: path))
        }
        let directory = try DataDirectory(path: path, create: false)
        guard DataDirectory.holdsData(databasePath: directory.databasePath) else {
            throw Failure.noDatabase(path: directory.databasePath)
        }
        let newKeyPath = directory.keyPath + ".new"
        // A `key.new` shorter than a key is one whose writing was cut off (a kill, a power loss before its
        // fsync): no row can be sealed under it, for sealing begins only after that fsync. It is made
        // again; kept, it stopped both `rekey` ("restore the key") and `serve` ("run rekey again").
        var info = stat()
        if lstat(newKeyPath, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size < SymmetricKey.byteCount {
            guard unlink(newKeyPath) == 0 else { throw Failure.io(errno: errno) }
            try? FileIO.syncDirectory(path)
        }
        let resumed = access(newKeyPath, F_OK) == 0
        let oldKey = try KeyStore.load(path: directory.keyPath, protecting: directory.databasePath)
        let database = try Database(path: directory.databasePath)
        defer { database.close() }
        try database.execute("PRAGMA busy_timeout = 5000; PRAGMA synchronous = FULL; PRAGMA secure_delete = ON")
        try Migrations.migrate(database)
        let oldSealer = try Sealer(dataKey: oldKey)
        // A first run checks that `key` opens this outbox before it makes `key.new`: with another
        // directory's key it failed only after, and the `key.new` it left stopped serve ("a rekey was
        // interrupted") once the right key was back.
        if !resumed, let stored = try database.statement("SELECT value FROM settings WHERE name = 'hashing_secret'")
            .firstRow([], { $0.blob(0) }) ?? nil, oldSealer.open(stored, context: SettingsStore.hashingSecretContext) == nil {
            throw Outbox.OpenError.wrongKey(databasePath: database.path)
        }
        let newKey = try KeyStore.load(path: newKeyPath)
        let newSealer = try Sealer(dataKey: newKey)
        let newID = Array(HMAC.sha256(Array("jotter key id".utf8), key: newKey).prefix(8))

        // The hashing secret first: under whichever key holds it now, re-sealed under the new one.
        try database.write { database in
            let context = SettingsStore.hashingSecretContext
            guard let stored = try database.statement("SELECT value FROM settings WHERE name = 'hashing_secret'")
                .firstRow([], { $0.blob(0) }) ?? nil else { return }
            if newSealer.open(stored, context: context) != nil { return }
            guard var secret = oldSealer.open(stored, context: context) else {
                throw Outbox.OpenError.wrongKey(databasePath: database.path)
            }
            defer { secret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
            let resealed = try newSealer.seal(secret, context: context)
            try database.run("UPDATE settings SET value = ? WHERE name = 'hashing_secret'", [.blob(resealed)])
        }
        // Sealed settings (a relay's device secret) likewise; one that opens under neither key is left.
        try database.write { database in
            let rows = try database.statement("SELECT name, value FROM settings WHERE substr(name, 1, 7) = 'sealed.'")
                .rows([]) { ($0.text(0) ?? "", $0.blob(1) ?? []) }
            for (name, stored) in rows {
                let context = SettingsStore.sealedContext(name)
                if newSealer.open(stored, context: context) != nil { continue }
                guard var value = oldSealer.open(stored, context: context) else { continue }
                defer { value.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
                try database.run("UPDATE settings SET value = ? WHERE name = ?",
                                 [.blob(try newSealer.seal(value, context: context)), .text(name)])
            }
        }

        var resealed = 0
        var batches = 0
        while true {
            if let stopAfterBatches, batches >= stopAfterBatches { return Report(resealed: resealed, resumed: resumed) }
            let count = try database.write { database -> Int in
                let rows = try database.statement("""
                    SELECT seq, id, sealed_payload, sealed_subject FROM messages
                    WHERE key_id IS NULL OR key_id != ? ORDER BY seq LIMIT ?
                    """).rows([.blob(newID), .integer(Int64(max(batchSize, 1)))]) { row in
                    (row.int64(0), row.text(1) ?? "", row.blob(2), row.blob(3))
                }
                for (seq, id, payload, subject) in rows {
                    let newPayload = try payload.map {
                        try Sealer.reseal($0, .payload, id: id, from: oldSealer, to: newSealer)
                    }
                    let newSubject = try subject.map {
                        try Sealer.reseal($0, .subject, id: id, from: oldSealer, to: newSealer)
                    }
                    try database.run("""
                        UPDATE messages SET sealed_payload = ?, sealed_subject = ?, key_id = ? WHERE seq = ?
                        """,
                                     [newPayload.map { .blob($0) } ?? .null, newSubject.map { .blob($0) } ?? .null,
                                      .blob(newID), .integer(seq)])
                }
                return rows.count
            }
            resealed += count
            batches += 1
            if count < max(batchSize, 1) { break }
        }
        try database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        guard rename(newKeyPath, directory.keyPath) == 0 else { throw Failure.io(errno: errno) }
        try? FileIO.syncDirectory(path)
        return Report(resealed: resealed, resumed: resumed)
    }
}
