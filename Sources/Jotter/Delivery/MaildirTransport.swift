import Glibc

/// Delivers into a Maildir (the default relay): write to `tmp/`, fsync, link into `new/`, fsync `new/`.
///
/// The file name derives from the message id, so a second delivery of the same id finds the first
/// (in `new/`, or in `cur/` after a mail client has read it) and writes nothing.
public struct MaildirTransport: Transport {
    /// The Maildir's root.
    public let path: String

    /// A transport into the Maildir at `path`, creating `tmp`, `new` and `cur` (mode 0700) if needed.
    public init(path: String) throws(DeliveryFailure) {
        self.path = path
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
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.failure(errno) }
        let bytes = message.rendered()
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { raw in
                write(fd, raw.baseAddress.map { $0 + written }, raw.count - written)
            }
            if count < 0 {
                if errno == EINTR { continue }
                let code = errno
                close(fd)
                unlink(temporary)
                throw Self.failure(code)
            }
            written += count
        }
        guard fsync(fd) == 0 else {
            let code = errno
            close(fd)
            unlink(temporary)
            throw Self.failure(code)
        }
        close(fd)
        defer { unlink(temporary) }
        if link(temporary, final) != 0 {
            if errno == EEXIST { return DeliveryReceipt(alreadyDelivered: true) }
            throw Self.failure(errno)
        }
        try syncDirectory("\(path)/new")
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

    private func syncDirectory(_ directory: String) throws(DeliveryFailure) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Self.failure(errno) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw Self.failure(errno) }
    }

    /// File-system errors are transient (a full disk can be freed); the kind is `io`.
    private static func failure(_ code: Int32) -> DeliveryFailure {
        DeliveryFailure(.io, permanent: false)
    }
}
