import Glibc
import Synchronization

/// The data directory: created with mode 0700, locked so only one server uses it at a time.
public final class DataDirectory: Sendable {
    /// Why the data directory could not be used.
    public enum Failure: Error, CustomStringConvertible, Sendable {
        case create(path: String, errno: Int32)
        case locked(path: String)
        case missing(path: String)
        case databaseGone(path: String, marker: String)
        case databaseEmpty(path: String, marker: String)
        case databaseReplaced(path: String, marker: String)
        /// A file of the database (`jotter.db`, its `-wal` or `-shm`), or the directory, this process may
        /// not write: SQLite would say "attempt to write a readonly database" without naming it.
        case notWritable(path: String, mode: mode_t, owner: uid_t)
        /// Another user's directory that others may write to: any of them could replace the database,
        /// the key or the Maildir under the server.
        case writableByOthers(path: String, mode: mode_t, owner: uid_t)

        public var description: String {
            switch self {
            case .create(let path, let code):
                return "cannot use data directory \(path): \(String(cString: strerror(code)))"
            case .locked(let path):
                return "data directory \(path) is in use by another Jotter process"
            case .missing(let path):
                return "no Jotter data directory at \(path) (see --data-dir); nothing was created"
            case .databaseGone(let path, let marker):
                return "\(path) is missing or empty, but this data directory held an outbox before: restore "
                    + "jotter.db from your backup (to start afresh with an empty outbox instead, delete \(marker))"
            case .databaseEmpty(let path, let marker):
                return "\(path) is empty (0 bytes), but this data directory held an outbox before: restore it from "
                    + "your backup (to start afresh with an empty outbox instead, delete it and \(marker))"
            case .databaseReplaced(let path, let marker):
                return "\(path) holds no outbox, but this data directory held one before: was the file replaced? "
                    + "Restore jotter.db from your backup (to start afresh with an empty outbox instead, delete \(marker))"
            case .notWritable(let path, let mode, let owner):
                return "\(path) cannot be written by this user (uid \(getuid())): it is mode "
                    + String(mode & 0o7777, radix: 8) + ", owned by uid \(owner); Jotter writes its database there "
                    + "(chmod u+rw, or run as its owner)"
            case .writableByOthers(let path, let mode, let owner):
                return "data directory \(path) belongs to uid \(owner) and is mode " + String(mode & 0o7777, radix: 8)
                    + ": other users could replace the outbox, the key or the mail in it; use a directory of your "
                    + "own (Jotter makes it private), or have its owner make it private (chmod go-w)"
            }
        }
    }

    /// The directory's path.
    public let path: String
    /// The locks held: the directory itself, and its `lock` file.
    private let lockDescriptors = Mutex<[Int32]>([])

    /// Creates `path` (and its parents) if needed (unless `create` is false: then it must exist), mode
    /// 0700, and takes its lock.
    public init(path: String, create: Bool = true) throws {
        self.path = path
        if create {
            try Self.makeDirectories(path, mode: 0o700)
        } else {
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { throw Failure.missing(path: path) }
        }
        // A directory that was there already (made by hand, or by `mkdir -p` with the umask's 0755) is
        // made private too: its files are 0600, but their names and the Maildir's are the owner's business.
        var info = stat()
        if stat(path, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o077 != 0 {
            _ = chmod(path, info.st_mode & 0o700 | 0o700)
        } else if info.st_uid != geteuid(), Self.othersMayReplaceFiles(info) {
            // Not ours to make private, and others may write in it: refused, not used as it is.
            throw Failure.writableByOthers(path: path, mode: info.st_mode, owner: info.st_uid)
        }
        // The directory itself is locked: a `lock` file alone was defeated by deleting it (a cleanup of
        // "stale" files, a restore with rsync --delete), and a second server, or a rekey, then ran beside
        // the live one, re-sealing under its feet or sending its memos again. The `lock` file is locked
        // too, for a Jotter from before (during an upgrade) and for what reads it.
        let directoryDescriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryDescriptor >= 0 else { throw Failure.create(path: path, errno: errno) }
        guard flock(directoryDescriptor, LOCK_EX | LOCK_NB) == 0 else {
            close(directoryDescriptor)
            throw Failure.locked(path: path)
        }
        let fileDescriptor = open(path + "/lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fileDescriptor >= 0 else {
            let error = errno
            Self.release(directoryDescriptor)
            throw Failure.create(path: path, errno: error)
        }
        guard flock(fileDescriptor, LOCK_EX | LOCK_NB) == 0 else {
            Self.release(directoryDescriptor)
            close(fileDescriptor)
            throw Failure.locked(path: path)
        }
        lockDescriptors.withLock { $0 = [directoryDescriptor, fileDescriptor] }
    }

    /// Whether users other than this one may create, replace or remove files in a directory this user does
    /// not own (sshd's StrictModes, for a directory): anyone may (mode o+w, sticky or not: a name not yet
    /// made is anyone's to take); or its group may, unless root owns it and the group is one of this
    /// process's (a service directory `root:jotter 0770`, a volume shared through its group on purpose).
    static func othersMayReplaceFiles(_ info: stat) -> Bool {
        if info.st_mode & 0o002 != 0 { return true }
        guard info.st_mode & 0o020 != 0 else { return false }
        return !(info.st_uid == 0 && Self.processGroups().contains(info.st_gid))
    }

    /// A delivery folder outside the data directory (a Maildir, a Markdown vault), made if missing: refused
    /// (`.configuration`, permanent, with the reason as its hint) when every user may write in it. Another
    /// user could then put a note, or a Maildir file name, there first as a symlink to any file this
    /// process may write, and it would write memos there. (A group-writable folder is the user's own
    /// choice, as with a shared vault; its notes are checked one by one: see `MarkdownTransport`.)
    static func prepareDeliveryFolder(_ path: String) throws(DeliveryFailure) {
        do {
            try makeDirectories(path, mode: 0o700)
        } catch {
            throw DeliveryFailure(.io, permanent: false)
        }
        var info = stat()
        guard stat(path, &info) == 0 else { throw DeliveryFailure(.io, permanent: false) }
        guard info.st_mode & 0o002 == 0 else {
            var failure = DeliveryFailure(.configuration, permanent: true)
            let mode = String(info.st_mode & 0o7777, radix: 8)
            failure.hint = "\(path) may be written by every user of this machine (mode \(mode)), who could make "
                + "Jotter write memos into other files through it: chmod o-w it, or choose a folder of your own"
            throw failure
        }
    }

    /// This process's groups: the effective one and the supplementary ones.
    private static func processGroups() -> Set<gid_t> {
        var groups = [gid_t](repeating: 0, count: Int(getgroups(0, nil)) + 1)
        let count = getgroups(Int32(groups.count), &groups)
        return Set(groups.prefix(max(0, Int(count)))).union([getegid()])
    }

    /// Unlocks before closing: a child process forked meanwhile (by Process, say) shares the lock's open
    /// file description until it execs, and closing our descriptor alone would leave it locked until then.
    private static func release(_ fd: Int32) {
        flock(fd, LOCK_UN)
        close(fd)
    }

    deinit {
        unlock()
    }

    /// Releases the lock (after everything using the directory has stopped), so another process may start.
    public func unlock() {
        lockDescriptors.withLock { descriptors in
            descriptors.forEach(Self.release)
            descriptors = []
        }
    }

    /// Whether a process (a running server) holds the lock of the data directory at `path`.
    public static func isInUse(path: String) -> Bool {
        // The directory (this Jotter's lock), or the `lock` file (one from before, during an upgrade).
        // flock locks belong to open file descriptions: these probes do not disturb the holder's lock.
        func held(_ fd: Int32) -> Bool {
            guard fd >= 0 else { return false }
            defer { close(fd) }
            guard flock(fd, LOCK_SH | LOCK_NB) == 0 else { return errno == EWOULDBLOCK }
            flock(fd, LOCK_UN)
            return false
        }
        return held(open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) || held(open(path + "/lock", O_RDONLY | O_CLOEXEC))
    }

    /// `$DATA/outbox-created`: written once an outbox opened here, so that a database that later goes
    /// missing is noticed instead of silently replaced by an empty one.
    public var markerPath: String { path + "/outbox-created" }

    /// Refuses to go on when the marker says an outbox was made here and the database is gone, truncated
    /// to zero bytes, or holds no outbox. A zero-byte `jotter.db` without the marker is a first start cut
    /// short (SQLite creates the file before it writes a page; a full disk or a kill then leaves it
    /// empty): it never held anything, and SQLite makes it the new outbox. (The marker is written by
    /// `markDatabaseCreated` once the outbox has opened.)
    public func checkDatabase() throws {
        try Self.checkDatabase(in: path)
    }

    /// `checkDatabase()` for the data directory at `path`, without taking its lock: for the commands that
    /// open the database of a running server (`jotter devices`, `jotter pair`).
    public static func checkDatabase(in path: String) throws {
        let databasePath = Self.databasePath(in: path), markerPath = path + "/outbox-created"
        // Each of the database's files, and the directory SQLite makes them in, must be writable: a
        // read-only one fails the start in SQLite's words, which name no file.
        for file in [path, databasePath, databasePath + "-wal", databasePath + "-shm"] {
            var info = stat()
            if stat(file, &info) == 0, access(file, W_OK) != 0, errno == EACCES || errno == EROFS {
                throw Failure.notWritable(path: file, mode: info.st_mode, owner: info.st_uid)
            }
        }
        var info = stat()
        let present = stat(databasePath, &info) == 0
        let marked = access(markerPath, F_OK) == 0
        if present && info.st_size == 0 && marked {
            throw Failure.databaseEmpty(path: databasePath, marker: markerPath)
        }
        if !present && marked {
            throw Failure.databaseGone(path: databasePath, marker: markerPath)
        }
        // A database without a single migration where an outbox was made: another file (a new, empty
        // database, say) took its place. Migrated, it would start afresh and say nothing.
        if present && marked, let version = Self.schemaVersion(databasePath: databasePath), version == 0 {
            throw Failure.databaseReplaced(path: databasePath, marker: markerPath)
        }
    }

    /// The schema version SQLite records in the database at `databasePath` (nil: it cannot be read, and
    /// opening it as the outbox says why).
    static func schemaVersion(databasePath: String) -> Int? {
        guard let database = try? Database(path: databasePath),
              let version = try? database.pragma("user_version") else { return nil }
        return Int(version)
    }

    /// Records that an outbox exists here (see `markerPath`).
    public func markDatabaseCreated() {
        guard access(markerPath, F_OK) != 0 else { return }
        let fd = open(markerPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 {
            fsync(fd)
            close(fd)
            try? FileIO.syncDirectory(path)
        }
    }

    /// Whether a database file at `databasePath` holds anything (more than an empty file).
    /// Why `path` cannot even be looked at (this user may not search its directory: EACCES), if that is so;
    /// nil when it exists or is simply not there. So that "no data here" is never said of data one may not see.
    static func unreachable(_ path: String) -> Failure? {
        var info = stat()
        guard stat(path, &info) != 0, errno != ENOENT, errno != ENOTDIR else { return nil }
        return .create(path: path, errno: errno)
    }

    static func holdsData(databasePath: String) -> Bool {
        var info = stat()
        return stat(databasePath, &info) == 0 && info.st_size > 0
    }

    /// `$DATA/jotter.db`.
    public var databasePath: String { Self.databasePath(in: path) }
    /// `$DATA/key`.
    public var keyPath: String { Self.keyPath(in: path) }

    /// The database's path in the data directory at `path`, for a command that does not take its lock.
    static func databasePath(in path: String) -> String { path + "/jotter.db" }
    /// The key's path in the data directory at `path`, likewise.
    static func keyPath(in path: String) -> String { path + "/key" }
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
