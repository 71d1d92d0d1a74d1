import Glibc

/// `jotter devices`: lists paired LAN devices, renames or revokes one, forgets revoked ones, on a data directory (while the
/// server runs or not: SQLite arbitrates).
public enum DevicesCommand {
    /// What to do.
    public enum Action: Sendable, Equatable {
        case list
        case revoke(String)
        case rename(String, String)
        /// Deletes a revoked device from the list (nil: every revoked one).
        case forget(String?)
    }

    /// Runs `action`; returns the text to print.
    public static func run(dataDirectory: String, action: Action, credentialsDirectory: String? = nil) throws -> String {
        try withRegistry(dataDirectory: dataDirectory, credentialsDirectory: credentialsDirectory) { registry in
            switch action {
            case .list:
                let devices = try registry.list()
                if devices.isEmpty { return "No paired devices." }
                return devices.map { device in
                    let state = device.revokedAt.map { "revoked " + Timestamp.iso8601(milliseconds: $0) }
                        ?? "last seen " + (device.lastSeenAt.map { Timestamp.iso8601(milliseconds: $0) } ?? "never")
                    let paired = Timestamp.iso8601(milliseconds: device.createdAt)
                    return "\(device.id)  \(device.name)  paired \(paired)  \(state)"
                }.joined(separator: "\n")
            case .revoke(let id):
                guard let revoked = try registry.revokeDevice(id: id) else {
                    // Said as it is: a device revoked before is not "no device".
                    if let revokedAt = try registry.revokedAt(id: id) {
                        return "Already revoked (\(Timestamp.iso8601(milliseconds: revokedAt)))."
                    }
                    throw try noSingleMatch(id, registry, "no single active device matches")
                }
                return "Revoked \(revoked.name) (\(revoked.id.prefix(8))). That device must pair again."
            case .rename(let id, let name):
                guard !DeviceRegistry.displayName(name).isEmpty else {
                    throw CommandLineOptions.UsageError(description: "a device's name needs something visible in it")
                }
                guard let stored = try registry.rename(id: id, to: name) else {
                    throw try noSingleMatch(id, registry, "no single device matches")
                }
                return "Renamed to \(stored)."
            case .forget(let id):
                switch try registry.forget(id: id) {
                case .forgotten(let devices):
                    if devices.isEmpty { return "No revoked devices." }
                    return devices.map { "Forgot \($0.name) (\($0.id.prefix(8)))." }.joined(separator: "\n")
                case .active(let device):
                    throw CommandLineOptions.UsageError(description: "\(device.name) (\(device.id.prefix(8))) is still "
                        + "paired: revoke it first (jotter devices revoke \(device.id.prefix(8)))")
                case .noMatch:
                    throw try noSingleMatch(id ?? "", registry, "no single device matches")
                }
            }
        }
    }

    /// Why `id` named no one device: several start with it (more of the id is needed), or `otherwise`.
    private static func noSingleMatch(_ id: String, _ registry: DeviceRegistry, _ otherwise: String) throws
        -> CommandLineOptions.UsageError {
        let count = try registry.matchCount(id: id)
        return CommandLineOptions.UsageError(description: count > 1
            ? "\(count) devices have ids starting '\(id.prefix(40))': give more of the id (jotter devices lists them)"
            : "\(otherwise) '\(id.prefix(40))'")
    }

    /// Opens the data directory's registry (the key from the systemd credential when there is one).
    static func withRegistry<T>(dataDirectory: String, credentialsDirectory: String?,
                                _ body: (DeviceRegistry) throws -> T) throws -> T {
        let directory = dataDirectory
        guard access(directory + "/jotter.db", F_OK) == 0 else {
            if let failure = DataDirectory.unreachable(directory + "/jotter.db") { throw failure }
            throw CommandLineOptions.UsageError(description: "no Jotter data in \(directory) (see --data-dir)")
        }
        if access(directory + "/key.new", F_OK) == 0 {
            throw Application.StartFailure.interruptedRekey(path: directory + "/key.new")
        }
        // A truncated or replaced database is refused as the server refuses it: opened here, it would be
        // made a new, empty outbox, and the server's "restore it from your backup" would never be said.
        try DataDirectory.checkDatabase(in: directory)
        // An empty `jotter.db` the marker does not call an outbox: a first start that was cut short.
        guard DataDirectory.holdsData(databasePath: directory + "/jotter.db") else {
            throw CommandLineOptions.UsageError(description: "no Jotter data in \(directory) (see --data-dir)")
        }
        guard DataDirectory.schemaVersion(databasePath: directory + "/jotter.db").map({ $0 > 0 }) ?? true else {
            throw CommandLineOptions.UsageError(description: "\(directory)/jotter.db holds no Jotter outbox: "
                + "was it replaced? Restore it from your backup")
        }
        // The server's key is a systemd credential (it left this marker), not in this shell's reach: say
        // how to give it, rather than "restore your key" (the key is not lost; it is the service's).
        let credential = credentialsDirectory.map(KeyStore.credentialPath(in:))
        if credential.map({ access($0, F_OK) != 0 }) ?? true, access(directory + "/key", F_OK) != 0,
           access(Rekey.credentialMarkerPath(dataDirectory: directory), F_OK) == 0 {
            throw CommandLineOptions.UsageError(description: "the server reads its key from a systemd credential "
                + "(jotter.key); run this with CREDENTIALS_DIRECTORY set to the folder that holds it, e.g. "
                + "sudo CREDENTIALS_DIRECTORY=/etc/jotter jotter … --data-dir \(directory)")
        }
        // Opening the outbox applies migrations; the registry then shares the database file.
        let key = try KeyStore.load(path: directory + "/key",
                                    credentialPath: credentialsDirectory.map(KeyStore.credentialPath(in:)),
                                    protecting: directory + "/jotter.db")
        let outbox = try Outbox(path: directory + "/jotter.db", key: key)
        defer { outbox.close() }
        let registry = try DeviceRegistry(outbox: outbox)
        return try body(registry)
    }
}
