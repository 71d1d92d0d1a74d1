import CCrypto
import Glibc

/// Loads the outbox key, creating it on first start.
///
/// The key file holds 32 random bytes, is created with `O_EXCL` and mode 0600, and is refused if
/// its group or others may read or write it. A systemd credential takes precedence when present.
public enum KeyStore {
    /// Why the key could not be loaded; the messages name the path, never the bytes.
    public enum Failure: Error, CustomStringConvertible, Equatable, Sendable {
        case insecurePermissions(path: String, mode: UInt32)
        case wrongLength(path: String, length: Int)
        case notAFile(path: String)
        /// The key is missing but the database holds memos sealed with it: nothing is created.
        case missing(path: String, databasePath: String)
        case io(path: String, errno: Int32)

        public var description: String {
            switch self {
            case .insecurePermissions(let path, let mode):
                return "key file \(path) has mode \(String(mode, radix: 8)); "
                    + "it must not be accessible to group or others "
                    + "(run: chmod 600 \(path))"
            case .wrongLength(let path, let length):
                return "key file \(path) holds \(length) bytes; a Jotter key is exactly 32 "
                    + "(restore the key file that belongs to this data directory)"
            case .notAFile(let path):
                return "key file \(path) is not a regular file (a directory?); a Jotter key is a 32-byte file"
            case .missing(let path, let databasePath):
                return "key file \(path) is missing, but \(databasePath) holds memos sealed with it; "
                    + "restore the key from your backup (nothing was created)"
            case .io(let path, let code):
                return "key file \(path): \(String(cString: strerror(code)))"
            }
        }
    }

    /// Where systemd puts the key given as a credential named `jotter.key` (`LoadCredential=jotter.key:…`)
    /// in `$CREDENTIALS_DIRECTORY`.
    public static func credentialPath(in credentialsDirectory: String) -> String {
        credentialsDirectory + "/jotter.key"
    }

    /// The key at `credentialPath` if that file exists, else the one at `path`, created if missing
    /// unless `protecting` names a database that holds memos (a new key could never open them: the
    /// real key must be restored, and a stray new one would be in the way).
    ///
    /// With `replacingCutShort` (a start whose data is all in the database `protecting` names), a key
    /// file shorter than a key is replaced by a new key while that database holds nothing: it is a first
    /// start cut off while writing it (a kill, a power loss before its fsync), and nothing
    /// was sealed with it, for nothing is sealed before that fsync. Kept, it stopped every later start
    /// ("restore the key file"), though there was nothing to restore. Not for a relay whose store is
    /// PostgreSQL: its data is not in that database.
    public static func load(path: String, credentialPath: String? = nil, protecting databasePath: String? = nil,
                            replacingCutShort: Bool = false) throws -> SymmetricKey {
        if let credentialPath, access(credentialPath, F_OK) == 0 {
            return try read(path: credentialPath, checkMode: false)
        }
        if let databasePath, access(path, F_OK) != 0, errno == ENOENT, DataDirectory.holdsData(databasePath: databasePath) {
            throw Failure.missing(path: path, databasePath: databasePath)
        }
        if replacingCutShort, let databasePath, isCutShort(path), !DataDirectory.holdsData(databasePath: databasePath) {
            return try replace(path)
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd >= 0 {
            defer { close(fd) }
            do {
                return try writeNewKey(fd, path: path)
            } catch {
                unlink(path)
                throw error
            }
        }
        guard errno == EEXIST else { throw Failure.io(path: path, errno: errno) }
        return try read(path: path, checkMode: true)
    }

    /// Whether `path` is a regular file (not a link to one) shorter than a key.
    private static func isCutShort(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_size < SymmetricKey.byteCount
    }

    /// A new key in place of the one cut short at `path`: written to `path.tmp`, synced, renamed over
    /// `path` and the directory synced, so that `path` holds the old bytes or the whole new key, never less.
    private static func replace(_ path: String) throws -> SymmetricKey {
        let temporary = path + ".tmp"
        unlink(temporary)  // left by a replacement cut off in turn
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure.io(path: temporary, errno: errno) }
        let key: SymmetricKey
        do {
            defer { close(fd) }
            key = try writeNewKey(fd, path: temporary)
        } catch {
            unlink(temporary)
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw Failure.io(path: path, errno: code)
        }
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        do {
            try FileIO.syncDirectory(directory.isEmpty ? "/" : directory)
        } catch {
            throw Failure.io(path: directory, errno: error.code)
        }
        return key
    }

    /// Writes a new random key to `fd` and syncs it; `path` names the file in a failure.
    private static func writeNewKey(_ fd: Int32, path: String) throws -> SymmetricKey {
        let key = try SymmetricKey.random()
        var failure: SystemError?
        key.withUnsafeBytes { bytes in
            do throws(SystemError) {
                try FileIO.writeAll(fd, bytes)
                guard fsync(fd) == 0 else { throw SystemError.current }
            } catch {
                failure = error
            }
        }
        if let failure { throw Failure.io(path: path, errno: failure.code) }
        return key
    }

    private static func read(path: String, checkMode: Bool) throws -> SymmetricKey {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure.io(path: path, errno: errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Failure.io(path: path, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw Failure.notAFile(path: path) }
        guard info.st_size == SymmetricKey.byteCount else {
            throw Failure.wrongLength(path: path, length: Int(info.st_size))
        }
        if checkMode && info.st_mode & 0o077 != 0 {
            throw Failure.insecurePermissions(path: path, mode: info.st_mode & 0o7777)
        }
        // Not FileIO.readAll: the key passes through this one small buffer only, and it is cleansed.
        var buffer = [UInt8](repeating: 0, count: 64)
        defer { buffer.withUnsafeMutableBytes { zero($0) } }
        var total = 0
        while total < buffer.count {
            let count = buffer.withUnsafeMutableBytes { raw in
                Glibc.read(fd, raw.baseAddress.map { $0 + total }, raw.count - total)
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw Failure.io(path: path, errno: errno)
            }
            if count == 0 { break }
            total += count
        }
        guard total == SymmetricKey.byteCount else { throw Failure.wrongLength(path: path, length: total) }
        return try SymmetricKey(bytes: buffer[0..<total])
    }

    private static func zero(_ bytes: UnsafeMutableRawBufferPointer) {
        OPENSSL_cleanse(bytes.baseAddress, bytes.count)
    }
}
