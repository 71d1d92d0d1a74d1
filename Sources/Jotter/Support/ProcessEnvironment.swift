import Glibc

/// The process's environment variables, read from `environ` (what `ProcessInfo.environment` gave,
/// without Foundation).
public enum ProcessEnvironment {
    /// Every `NAME=value` in the environment, by name (the first one when a name appears twice, as
    /// `getenv` reads it; an entry without `=` is skipped).
    public static var current: [String: String] {
        var variables: [String: String] = [:]
        var entry: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = environ  // nil after clearenv()
        while let current = entry, let pointer = current.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "=") {
                let name = String(text[..<equals])
                if variables[name] == nil { variables[name] = String(text[text.index(after: equals)...]) }
            }
            entry = current + 1
        }
        return variables
    }

    /// The user's home folder: `HOME` when it is an absolute path, else the password database's entry for
    /// this user (a service or `env -i` may start without `HOME`: a default data directory of
    /// `./.local/share/jotter` was then wherever the process happened to start, a new outbox each time).
    public static func home(environment: [String: String]) -> String? {
        if let home = environment["HOME"], home.hasPrefix("/") { return home }
        guard let entry = getpwuid(geteuid()), let directory = entry.pointee.pw_dir else { return nil }
        let path = String(cString: directory)
        return path.hasPrefix("/") ? path : nil
    }

    /// True when `descriptor` is systemd's journal: `JOURNAL_STREAM` (`DEVICE:INODE`, set by systemd for a
    /// service whose output goes there) names the very stream the descriptor is. A journal keeps what a
    /// terminal forgets, so secrets printed for a person (a live pairing link) must not go to it.
    public static func writesToJournal(descriptor: Int32, environment: [String: String]) -> Bool {
        guard let stream = environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":", omittingEmptySubsequences: false)
        var info = stat()
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]),
              fstat(descriptor, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}
