import Glibc
import Synchronization

/// Appends each memo to a daily note, `YYYY-MM-DD.md` (local date), in a folder such as an Obsidian
/// vault, under a time heading.
///
/// Each entry carries an invisible marker with the message id, so a retried delivery finds the entry
/// already there and adds nothing. The note is replaced atomically (a complete new file renamed over
/// it), so an editor never sees half an entry; a lock serialises writers of the same folder.
public final class MarkdownTransport: Transport {
    /// The folder that holds the daily notes.
    public let folder: String
    private let lock = Mutex(())

    /// A transport into `folder`. Creates nothing: `prepare()` (at start) or the first delivery does.
    public init(folder: String) {
        self.folder = folder
    }

    /// Creates the folder (0700) if it is missing.
    public func prepare() throws(DeliveryFailure) {
        do {
            try DataDirectory.makeDirectories(folder, mode: 0o700)
        } catch {
            throw DeliveryFailure(.io, permanent: false)
        }
    }

    static func marker(_ id: String) -> String { "<!-- jotter:\(id) -->" }

    /// The entry for `message`: heading with the local time, the subject when it says more than the
    /// body's first line, then the body.
    static func entry(_ message: MailMessage, time: String) -> String {
        var entry = "## \(time)\n\(marker(message.id))\n\n"
        if message.subject != SubjectLine.derived(from: message.body) && !message.subject.isEmpty {
            entry += "**\(message.subject)**\n\n"
        }
        entry += message.body.hasSuffix("\n") ? message.body : message.body + "\n"
        return entry
    }

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        let (day, time) = Self.localDayAndTime(milliseconds: message.date)
        let path = "\(folder)/\(day).md"
        return try lock.withLock { _ throws(DeliveryFailure) -> DeliveryReceipt in
            var lockFD = open("\(folder)/.jotter.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            if lockFD < 0 && errno == ENOENT {
                // First use without `prepare()`, or the folder was removed while running: create it.
                try prepare()
                lockFD = open("\(folder)/.jotter.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            }
            guard lockFD >= 0 else { throw DeliveryFailure(.io, permanent: false) }
            defer { close(lockFD) }
            flock(lockFD, LOCK_EX)
            let existing = try Self.read(path)
            if String(decoding: existing, as: UTF8.self).contains(Self.marker(message.id)) {
                return DeliveryReceipt(alreadyDelivered: true)
            }
            var content = existing
            if !content.isEmpty {
                if content.last != 10 { content.append(10) }
                content.append(10)
            }
            content += Self.entry(message, time: time).utf8
            try Self.replace(path, with: content, folder: folder)
            return DeliveryReceipt()
        }
    }

    static func localDayAndTime(milliseconds: Int64) -> (day: String, time: String) {
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        localtime_r(&seconds, &parts)
        func pad(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return ("\(parts.tm_year + 1900)-\(pad(parts.tm_mon + 1))-\(pad(parts.tm_mday))",
                "\(pad(parts.tm_hour)):\(pad(parts.tm_min))")
    }

    private static func read(_ path: String) throws(DeliveryFailure) -> [UInt8] {
        do {
            return try FileIO.read(path: path) ?? []
        } catch {
            throw DeliveryFailure(.io, permanent: false)
        }
    }

    /// Writes a temporary file beside `path`, fsyncs it, renames it over `path`, fsyncs the folder.
    private static func replace(_ path: String, with bytes: [UInt8], folder: String) throws(DeliveryFailure) {
        let temporary = path + ".jotter-tmp"
        do {
            try FileIO.writeFile(temporary, bytes, mode: 0o600)
            guard rename(temporary, path) == 0 else { throw SystemError.current }
            try FileIO.syncDirectory(folder)
        } catch {
            unlink(temporary)
            throw DeliveryFailure(.io, permanent: false)
        }
    }

    /// The memo's id is looked for in the note before an entry is appended: a repeat leaves one copy.
    public var repeatsHarmlessly: Bool { true }
}
