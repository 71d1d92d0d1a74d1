import Glibc
import Synchronization

/// Appends each memo to a daily note in a folder such as an Obsidian vault: by default
/// `YYYY-MM-DD.md` (local date) under a `## HH:MM` heading; both are `strftime` patterns
/// (`markdown:/vault/Inbox?file=%Y/%m/%Y-%m-%d.md&heading=%H:%M`).
///
/// The note is appended to in place (`O_APPEND`, one write per entry): other programs appending to
/// it at the same time keep their lines, a symlinked note is written through, and the note keeps its
/// mode. Each entry carries an invisible marker with the message id, so a retried delivery finds
/// the entry already there and adds nothing. A memo can never break the note's structure
/// (`MarkdownContainment`): a code fence or HTML block it leaves open cannot run into the next
/// entry, a line that would read as a heading of the note's level or above is escaped, and a marker
/// it contains is defused.
public final class MarkdownTransport: Transport {
    /// The folder that holds the notes.
    public let folder: String
    /// The note's path under `folder`, a `strftime` pattern.
    public let filePattern: String
    /// The entry heading's text, a `strftime` pattern.
    public let headingPattern: String
    private let lock = Mutex(())

    /// Why a layout pattern was refused.
    public struct InvalidPattern: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// A transport into `folder` with the default layout. Creates nothing: `prepare()` (at start) or
    /// the first delivery does.
    public init(folder: String) {
        self.folder = folder
        filePattern = "%Y-%m-%d.md"
        headingPattern = "%H:%M"
    }

    /// A transport into `folder` with its own layout (`strftime` patterns for the note and heading).
    public init(folder: String, file: String, heading: String) throws(InvalidPattern) {
        guard !file.isEmpty, !file.hasPrefix("/"), file.hasSuffix(".md"),
              !file.split(separator: "/").contains(where: { $0 == ".." || $0 == "." || $0.isEmpty }) else {
            throw InvalidPattern(description: "file= must be a relative path ending in .md, without . or .. (e.g. %Y/%m/%Y-%m-%d.md)")
        }
        guard !heading.isEmpty, !heading.contains("\n"), !heading.contains("\r") else {
            throw InvalidPattern(description: "heading= must be one line (e.g. %H:%M)")
        }
        self.folder = folder
        self.filePattern = file
        self.headingPattern = heading
    }

    /// Creates the folder (0700) if it is missing; refuses one every user may write in.
    public func prepare() throws(DeliveryFailure) {
        try DataDirectory.prepareDeliveryFolder(folder)
    }

    static func marker(_ id: String) -> String { "<!-- jotter:\(id) -->" }

    /// The entry for `message`: its heading line, then `entryText`.
    static func entry(_ message: MailMessage, heading: String) -> String {
        headingLine(heading) + entryText(message)
    }

    /// An entry's heading line (`## 09:05`).
    static func headingLine(_ heading: String) -> String { "## \(heading)\n" }

    /// An entry below its heading: marker, the subject when it says more than the body's first line, then
    /// the body made safe for the note. A retry finds the memo in the note only when all of this is there:
    /// the marker alone may be what an interrupted write left (a full disk took its first bytes).
    static func entryText(_ message: MailMessage) -> String {
        var entry = "\(marker(message.id))\n\n"
        if message.subject != SubjectLine.derived(from: message.body) && !message.subject.isEmpty {
            entry += "**\(escapeInline(message.subject))**\n\n"
        }
        entry += MarkdownContainment.contain(message.body)
        return entry
    }

    /// A subject on one line inside `**…**`, read literally: the punctuation that could begin emphasis,
    /// code, a link, HTML, an entity or an Obsidian highlight, comment or formula is backslash-escaped
    /// (a code span would show its backslashes, so backticks are escaped too, and no code span forms).
    static func escapeInline(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count + 8)
        for character in text.unicodeScalars {
            if "\\`*_[]<>&~=$%".unicodeScalars.contains(character) { escaped.unicodeScalars.append("\\") }
            escaped.unicodeScalars.append(character)
        }
        return escaped
    }

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        try send(batch: [message])[0].get()
    }

    /// Up to 64 memos at once: the memos for one note are appended in one write and one fsync, after
    /// one read of the note.
    public var batchLimit: Int { 64 }

    /// At most 4 MiB of memos per batch, so large memos are not all held in memory at once.
    public var batchByteLimit: Int { 4 << 20 }

    public func send(batch messages: [MailMessage]) -> [Result<DeliveryReceipt, DeliveryFailure>] {
        var outcomes = [Result<DeliveryReceipt, DeliveryFailure>](repeating: .failure(DeliveryFailure(.io, permanent: false)),
                                                                  count: messages.count)
        // Each note in the order its first memo came, its memos in their order.
        var notes: [(relative: String, indices: [Int])] = []
        for (index, message) in messages.enumerated() {
            let relative = Self.format(filePattern, milliseconds: message.date)
            if let note = notes.firstIndex(where: { $0.relative == relative }) {
                notes[note].indices.append(index)
            } else {
                notes.append((relative, [index]))
            }
        }
        for note in notes {
            do throws(DeliveryFailure) {
                let receipts = try append(note.indices.map { messages[$0] }, to: note.relative)
                for (index, receipt) in zip(note.indices, receipts) { outcomes[index] = .success(receipt) }
            } catch {
                for index in note.indices { outcomes[index] = .failure(error) }
            }
        }
        return outcomes
    }

    /// Appends the entries of `messages` not yet in the note at `relative` (under `folder`), in one
    /// write and one fsync; a memo already there (a retry) is reported as already delivered.
    private func append(_ messages: [MailMessage], to relative: String) throws(DeliveryFailure) -> [DeliveryReceipt] {
        let path = "\(folder)/\(relative)"
        return try lock.withLock { _ throws(DeliveryFailure) -> [DeliveryReceipt] in
            var lockFD = open("\(folder)/.jotter.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            if lockFD < 0 && errno == ENOENT {
                // First use without `prepare()`, or the folder was removed while running: create it.
                try prepare()
                lockFD = open("\(folder)/.jotter.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            }
            guard lockFD >= 0 else { throw DeliveryFailure(.io, permanent: false) }
            defer { close(lockFD) }
            flock(lockFD, LOCK_EX)
            if let slash = relative.lastIndex(of: "/") {
                do {
                    try DataDirectory.makeDirectories(folder + "/" + relative[..<slash], mode: 0o700)
                } catch {
                    throw DeliveryFailure(.io, permanent: false)
                }
            }
            // Opened once, following a symlink to the real note, created 0600 when new — but only a symlink
            // this user (or root) made: one another user put there would have memos written into any file
            // this process may write.
            var link = stat()
            if lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK, link.st_uid != geteuid(), link.st_uid != 0 {
                // Not permanent: the memo waits, retried, until the link is replaced by the note or by one of
                // this user's own.
                var failure = DeliveryFailure(.configuration, permanent: false)
                failure.hint = "the note is a symlink another user made: Jotter does not follow it"
                throw failure
            }
            let fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw DeliveryFailure(.io, permanent: false) }
            defer { close(fd) }
            let existing = try Self.readAll(fd)
            var receipts: [DeliveryReceipt] = []
            var entries: [UInt8] = []
            var written = Set<String>()
            var lastByte = existing.last
            for message in messages {
                let text = Array(Self.entryText(message).utf8)
                guard !Self.holds(existing, text), written.insert(message.id).inserted else {
                    receipts.append(DeliveryReceipt(alreadyDelivered: true))
                    continue
                }
                if let last = lastByte {
                    if last != 10 { entries.append(10) }
                    entries.append(10)
                }
                let heading = Self.format(headingPattern, milliseconds: message.date)
                entries += Self.headingLine(heading).utf8
                entries += text
                lastByte = entries.last
                receipts.append(DeliveryReceipt())
            }
            if entries.isEmpty {
                // Every memo was there already, written by an attempt that may not have lived (or managed)
                // to make it durable.
                guard fsync(fd) == 0 else { throw DeliveryFailure(.io, permanent: false) }
                return receipts
            }
            // One write: appends by other programs land before or after it, never inside. What a failed
            // write or sync leaves of it is taken back, so the note holds no entry cut short.
            guard Self.append(fd, entries) else { throw DeliveryFailure(.io, permanent: false) }
            guard fsync(fd) == 0 else {
                Self.takeBack(fd, count: entries.count)
                throw DeliveryFailure(.io, permanent: false)
            }
            if existing.isEmpty {
                // A new note: its directory entry too.
                try? FileIO.syncDirectory(relative.lastIndex(of: "/").map { folder + "/" + relative[..<$0] } ?? folder)
            }
            return receipts
        }
    }

    /// Appends all of `bytes` (one `write` unless the kernel takes less); on an error, takes back what it
    /// wrote of them and returns false.
    private static func append(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress.map { $0 + offset }, $0.count - offset) }
            if count < 0 {
                if errno == EINTR { continue }
                takeBack(fd, count: offset)
                return false
            }
            offset += count
        }
        return true
    }

    /// Cuts the last `count` bytes this descriptor appended off the note, unless another program has
    /// appended since (its lines are kept; a retry then still finds no whole entry, and writes one).
    private static func takeBack(_ fd: Int32, count: Int) {
        guard count > 0 else { return }
        let end = lseek(fd, 0, SEEK_CUR)  // after an O_APPEND write: the end of what it wrote
        var status = stat()
        guard end >= off_t(count), fstat(fd, &status) == 0, status.st_size == end else { return }
        _ = ftruncate(fd, end - off_t(count))
    }

    /// Whether `note` holds `text`, byte for byte (each place its first byte is, found by `memchr`, compared
    /// by `memcmp`).
    static func holds(_ note: [UInt8], _ text: [UInt8]) -> Bool {
        guard let first = text.first else { return true }
        return note.withUnsafeBytes { note in
            text.withUnsafeBytes { text in
                guard let base = note.baseAddress, let wanted = text.baseAddress, note.count >= text.count else {
                    return false
                }
                var offset = 0
                let last = note.count - text.count
                while offset <= last {
                    guard let hit = memchr(base + offset, Int32(first), last - offset + 1) else { return false }
                    let at = base.distance(to: UnsafeRawPointer(hit))
                    if memcmp(base + at, wanted, text.count) == 0 { return true }
                    offset = at + 1
                }
                return false
            }
        }
    }

    /// `strftime(pattern)` in local time.
    static func format(_ pattern: String, milliseconds: Int64) -> String {
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        localtime_r(&seconds, &parts)
        var buffer = [CChar](repeating: 0, count: 512)
        let count = strftime(&buffer, buffer.count, pattern, &parts)
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func localDayAndTime(milliseconds: Int64) -> (day: String, time: String) {
        (format("%Y-%m-%d", milliseconds: milliseconds), format("%H:%M", milliseconds: milliseconds))
    }

    private static func readAll(_ fd: Int32) throws(DeliveryFailure) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var offset: off_t = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if count < 0 {
                if errno == EINTR { continue }
                throw DeliveryFailure(.io, permanent: false)
            }
            if count == 0 { return bytes }
            bytes += buffer.prefix(count)
            offset += off_t(count)
        }
    }

    /// The memo's id is looked for in the note before an entry is appended: a repeat leaves one copy.
    public var repeatsHarmlessly: Bool { true }
}
