import CSystem
import Glibc

/// Delivers into a Maildir (the default relay): write to `tmp/`, fsync, link into `new/`, fsync `new/`
/// — for a batch, each step once for all its messages.
///
/// The file name derives from the message id, so a second delivery of the same id finds the first
/// (in `new/`, or in `cur/` after a mail client has read it) and writes nothing.
public struct MaildirTransport: Transport {
    /// The Maildir's root.
    public let path: String

    /// A transport into the Maildir at `path`. Creates nothing: `prepare()` (at start) or the first
    /// delivery creates the folders.
    public init(path: String) {
        self.path = path
    }

    /// Creates the Maildir and its `tmp`, `new` and `cur` (mode 0700) where missing.
    public func prepare() throws(DeliveryFailure) {
        for folder in ["", "/tmp", "/new", "/cur"] {
            try DataDirectory.prepareDeliveryFolder(path + folder)
        }
    }

    /// The file name in `new/` for a message id: unique per id, stable across retries.
    static func fileName(for message: MailMessage) -> String {
        "\(message.date / 1000).\(message.id).jotter"
    }

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        try send(batch: [message])[0].get()
    }

    /// Up to 1,024 messages share one sync of their files (`syncfs`) and one fsync of `new/`: one
    /// client's steady stream (about 3,000 memos/s here) then fits one batch per window (see
    /// `batchWindowMilliseconds`), and the accepts it competes with for the disk run faster than with
    /// batches of 64 (3–20% in 8 of 8 alternating pairs, with the window at 50 ms).
    public var batchLimit: Int { 1024 }

    /// At most 4 MiB of memos per batch, so large memos are not all held in memory at once.
    public var batchByteLimit: Int { 4 << 20 }

    /// Every file is written to `tmp/`, made durable (one `syncfs` for a batch, an fsync for one
    /// file), linked into `new/`, and `new/` is fsynced once for all of them. (If syncfs fails, each
    /// file is fsynced on its own, so a failure is its file's.)
    public func send(batch messages: [MailMessage]) -> [Result<DeliveryReceipt, DeliveryFailure>] {
        var outcomes = [Result<DeliveryReceipt, DeliveryFailure>?](repeating: nil, count: messages.count)
        var written: [(index: Int, name: String, fd: Int32)] = []
        // Copies an earlier attempt left: durable only once `new/` is synced, which that attempt may
        // not have lived (or managed) to do.
        var found: [Int] = []
        var prepared = false
        // Only a memo an earlier attempt may have delivered can have a copy here (a retry, or one an
        // earlier process accepted: a power loss may have undone the record of its delivery). Others
        // check nothing: should the name exist all the same, `link` below fails with EEXIST.
        let delivered = delivered(among: messages.filter(\.mayHaveBeenDelivered).map(Self.fileName(for:)))
        for (index, message) in messages.enumerated() {
            let name = Self.fileName(for: message)
            if delivered.contains(name) {
                found.append(index)
                continue
            }
            let temporary = "\(path)/tmp/\(name)"
            let bytes = message.renderedLocally()  // a file for local readers: LF, as every MDA writes
            do throws(SystemError) {
                written.append((index, name, try Self.createTemporary(temporary, bytes)))
            } catch where error.code == ENOENT && !prepared {
                // First use without `prepare()`, or the folders were removed while running.
                prepared = true
                if (try? prepare()) != nil, let fd = try? Self.createTemporary(temporary, bytes) {
                    written.append((index, name, fd))
                } else {
                    unlink(temporary)
                    outcomes[index] = .failure(Self.failure(ENOENT))
                }
            } catch {
                unlink(temporary)
                outcomes[index] = .failure(Self.failure(error.code))
            }
        }
        // One file: its own fsync. Several: one syncfs for all of them — a single journal commit and
        // cache flush, where an fsync each would flush the disk's cache once per file.
        let batchSynced = written.count > 1 && jotter_syncfs(written[0].fd) == 0
        var linked: [Int] = []
        for file in written {
            let temporary = "\(path)/tmp/\(file.name)"
            defer { unlink(temporary) }
            let synced = batchSynced || fsync(file.fd) == 0
            close(file.fd)
            guard synced else {
                outcomes[file.index] = .failure(Self.failure(errno))
                continue
            }
            var linkedNow = link(temporary, "\(path)/new/\(file.name)") == 0
            var error = linkedNow ? 0 : errno
            if error == ENOENT && !prepared {
                // `new/` was removed while running: made again, as `tmp/` is above.
                prepared = true
                if (try? prepare()) != nil {
                    linkedNow = link(temporary, "\(path)/new/\(file.name)") == 0
                    error = linkedNow ? 0 : errno
                }
            }
            if linkedNow {
                linked.append(file.index)
            } else if error == EEXIST {
                found.append(file.index)
            } else {
                outcomes[file.index] = .failure(Self.failure(error))
            }
        }
        if !linked.isEmpty || !found.isEmpty {
            var failure: DeliveryFailure?
            do throws(SystemError) {
                try FileIO.syncDirectory("\(path)/new")
            } catch {
                failure = Self.failure(error.code)
            }
            for index in linked { outcomes[index] = failure.map { .failure($0) } ?? .success(DeliveryReceipt()) }
            for index in found {
                outcomes[index] = failure.map { .failure($0) } ?? .success(DeliveryReceipt(alreadyDelivered: true))
            }
        }
        return outcomes.map { $0 ?? .failure(Self.failure(0)) }
    }

    /// Creates `temporary` holding `bytes`. A file of that name was left by an attempt that died
    /// before linking it: it is replaced (looked for only when it is there, not before every file).
    private static func createTemporary(_ temporary: String, _ bytes: [UInt8]) throws(SystemError) -> Int32 {
        do {
            return try FileIO.createFile(temporary, bytes, mode: 0o600)
        } catch where error.code == EEXIST {
            unlink(temporary)
            return try FileIO.createFile(temporary, bytes, mode: 0o600)
        }
    }

    /// Which of `names` are in `new/`, or in `cur/` with an info suffix (`name:2,S`): the copies an
    /// interrupted attempt delivered. `cur/` is read once, however many names there are.
    private func delivered(among names: [String]) -> Set<String> {
        guard !names.isEmpty else { return [] }
        var found = Set(names.filter { access("\(path)/new/\($0)", F_OK) == 0 })
        let wanted = Set(names).subtracting(found)
        guard !wanted.isEmpty, let directory = opendir("\(path)/cur") else { return found }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            let name = entryName.firstIndex(of: ":").map { String(entryName[..<$0]) } ?? entryName
            if wanted.contains(name) { found.insert(name) }
        }
        return found
    }

    /// File-system errors are transient (a full disk can be freed); the kind is `io`.
    private static func failure(_ code: Int32) -> DeliveryFailure {
        DeliveryFailure(.io, permanent: false)
    }

    /// The memo's id is checked before a file is written: a repeat leaves one copy.
    public var repeatsHarmlessly: Bool { true }
}
