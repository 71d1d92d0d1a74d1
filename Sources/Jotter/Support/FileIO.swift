import Glibc

/// The few file operations Jotter's durable writes share: read a whole file, write all bytes,
/// and fsync a directory so a new name in it survives a crash.
enum FileIO {
    /// Everything `fd` holds from its position, at most `limit` bytes (more is an `EFBIG` error).
    static func readAll(_ fd: Int32, limit: Int) throws(SystemError) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: min(65536, limit + 1))
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .current
            }
            if count == 0 { return bytes }
            bytes += buffer[0..<count]
            if bytes.count > limit { throw SystemError(code: EFBIG) }
        }
    }

    /// The whole file at `path`, or nil if there is none.
    static func read(path: String, limit: Int = 16 << 20) throws(SystemError) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw .current
        }
        defer { close(fd) }
        return try readAll(fd, limit: limit)
    }

    /// Writes every byte (retrying short writes and interruptions).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemError) {
        var written = 0
        while written < bytes.count {
            let count = Glibc.write(fd, bytes.baseAddress.map { $0 + written }, bytes.count - written)
            if count < 0 {
                if errno == EINTR { continue }
                throw .current
            }
            written += count
        }
    }

    /// Writes every byte of `bytes`.
    static func write(_ fd: Int32, _ bytes: [UInt8]) throws(SystemError) {
        var failure: SystemError?
        bytes.withUnsafeBytes { raw in
            do throws(SystemError) { try writeAll(fd, raw) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// Creates (or truncates) `path` with `mode`, writes `bytes`, fsyncs and closes it.
    static func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t,
                          flags: Int32 = O_CREAT | O_TRUNC) throws(SystemError) {
        let fd = open(path, O_WRONLY | O_CLOEXEC | flags, mode)
        guard fd >= 0 else { throw .current }
        defer { close(fd) }
        // A file that existed keeps its old mode through O_CREAT: a secret written over a 0644 file
        // would stay readable to all. Set it before a byte is written.
        guard fchmod(fd, mode) == 0 else { throw .current }
        try write(fd, bytes)
        guard fsync(fd) == 0 else { throw .current }
    }

    /// Creates `path` (it must not exist) with `mode` and writes `bytes`; returns the open descriptor,
    /// not yet fsynced (a batch fsyncs its files together, after all are written).
    static func createFile(_ path: String, _ bytes: [UInt8], mode: mode_t) throws(SystemError) -> Int32 {
        let fd = open(path, O_WRONLY | O_CLOEXEC | O_CREAT | O_EXCL, mode)
        guard fd >= 0 else { throw .current }
        do {
            try write(fd, bytes)
        } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// fsyncs the directory at `path`, making a link, rename or unlink in it durable.
    static func syncDirectory(_ path: String) throws(SystemError) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .current }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw .current }
    }
}
