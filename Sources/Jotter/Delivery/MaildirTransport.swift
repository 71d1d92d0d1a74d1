import Glibc

/// Delivers into a Maildir (the default relay): write to `tmp/`, fsync, link into `new/`, fsync `new/`.
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
        do {
            for folder in ["", "/tmp", "/new", "/cur"] {
                try DataDirectory.makeDirectories(path + folder, mode: 0o700)
            }
        } catch {
            throw DeliveryFailure(.io, permanent: false)
        }
    }

    /// The file name in `new/` for a message id: unique per id, stable across retries.
    static func fileName(for message: MailMessage) -> String {
        "\(message.date / 1000).\(message.id).jotter"
    }

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        let name = Self.fileName(for: message)
        let final = "\(path)/new/\(name)"
        if isDelivered(name: name, lookInCur: message.attempt > 1) {
            return DeliveryReceipt(alreadyDelivered: true)
        }
        let temporary = "\(path)/tmp/\(name)"
        unlink(temporary)  // left by an attempt that died before linking
        let bytes = message.rendered()
        do {
            try FileIO.writeFile(temporary, bytes, mode: 0o600, flags: O_CREAT | O_EXCL)
        } catch where error.code == ENOENT {
            // First use without `prepare()`, or the folders were removed while running: create them.
            try prepare()
            try Self.writeTemporary(temporary, bytes)
        } catch {
            unlink(temporary)
            throw Self.failure(error.code)
        }
        defer { unlink(temporary) }
        if link(temporary, final) != 0 {
            if errno == EEXIST { return DeliveryReceipt(alreadyDelivered: true) }
            throw Self.failure(errno)
        }
        do {
            try FileIO.syncDirectory("\(path)/new")
        } catch {
            throw Self.failure(error.code)
        }
        return DeliveryReceipt()
    }

    /// True when `name` is in `new/`, or in `cur/` with an info suffix (`name:2,S`).
    /// `cur/` is scanned only on a retry: a first attempt cannot have been read by a mail client yet.
    private func isDelivered(name: String, lookInCur: Bool) -> Bool {
        if access("\(path)/new/\(name)", F_OK) == 0 { return true }
        guard lookInCur, let directory = opendir("\(path)/cur") else { return false }
        defer { closedir(directory) }
        let prefix = name + ":"
        while let entry = readdir(directory) {
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if entryName == name || entryName.hasPrefix(prefix) { return true }
        }
        return false
    }

    private static func writeTemporary(_ temporary: String, _ bytes: [UInt8]) throws(DeliveryFailure) {
        do {
            try FileIO.writeFile(temporary, bytes, mode: 0o600, flags: O_CREAT | O_EXCL)
        } catch {
            unlink(temporary)
            throw Self.failure(error.code)
        }
    }

    /// File-system errors are transient (a full disk can be freed); the kind is `io`.
    private static func failure(_ code: Int32) -> DeliveryFailure {
        DeliveryFailure(.io, permanent: false)
    }

    /// The memo's id is checked before a file is written: a repeat leaves one copy.
    public var repeatsHarmlessly: Bool { true }
}
