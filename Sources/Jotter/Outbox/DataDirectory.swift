import Glibc
import Synchronization

/// The data directory: created with mode 0700, locked so only one server uses it at a time.
public final class DataDirectory: Sendable {
    /// Why the data directory could not be used.
    public enum Failure: Error, CustomStringConvertible, Sendable {
        case create(path: String, errno: Int32)
        case locked(path: String)

        public var description: String {
            switch self {
            case .create(let path, let code):
                return "cannot use data directory \(path): \(String(cString: strerror(code)))"
            case .locked(let path):
                return "data directory \(path) is in use by another Jotter process"
            }
        }
    }

    /// The directory's path.
    public let path: String
    private let lockDescriptor = Mutex<Int32>(-1)

    /// Creates `path` (and its parents) if needed, mode 0700, and takes its lock.
    public init(path: String) throws {
        self.path = path
        try Self.makeDirectories(path, mode: 0o700)
        let lockPath = path + "/lock"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure.create(path: path, errno: errno) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw Failure.locked(path: path)
        }
        lockDescriptor.withLock { $0 = fd }
    }

    deinit {
        unlock()
    }

    /// Releases the lock (after everything using the directory has stopped), so another process may start.
    public func unlock() {
        lockDescriptor.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
        }
    }

    /// Whether a process (a running server) holds the lock of the data directory at `path`.
    public static func isInUse(path: String) -> Bool {
        let fd = open(path + "/lock", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        // flock locks belong to open file descriptions: this probe does not disturb the holder's lock.
        guard flock(fd, LOCK_SH | LOCK_NB) == 0 else { return errno == EWOULDBLOCK }
        flock(fd, LOCK_UN)
        return false
    }

    /// `$DATA/jotter.db`.
    public var databasePath: String { path + "/jotter.db" }
    /// `$DATA/key`.
    public var keyPath: String { path + "/key" }
    /// `$DATA/Maildir`, the default relay's destination.
    public var maildirPath: String { path + "/Maildir" }

    /// `mkdir -p` with `mode` for every directory it creates.
    static func makeDirectories(_ path: String, mode: mode_t) throws {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, mode) != 0 && errno != EEXIST {
                throw Failure.create(path: prefix, errno: errno)
            }
        }
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw Failure.create(path: path, errno: ENOTDIR)
        }
    }
}
