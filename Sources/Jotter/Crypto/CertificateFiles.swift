import Glibc

/// The files of LAN mode's HTTPS (`DATA/tls/`): the local CA (`ca.pem`, `ca-key.pem`) and the server
/// certificate it signs (`cert.pem`, `key.pem`). Keys are mode 0600; every file is replaced by rename,
/// so a crash leaves the old file or the new one, never half of either.
enum CertificateFiles {
    /// Why the HTTPS certificate or the local CA could not be made or read. Never carries OpenSSL's
    /// text: the step or the path says what to look at.
    enum Failure: Error, CustomStringConvertible, Sendable {
        /// OpenSSL refused a step of making a key or certificate.
        case create(step: String)
        /// The file exists but cannot be read, or holds no usable certificate or key.
        case unreadable(path: String)
        /// The file cannot be written.
        case unwritable(path: String, errno: Int32)
        /// `path` exists but its companion `missing` does not.
        case incomplete(path: String, missing: String)
        /// The key in `path` is not the key of the CA certificate next to it.
        case mismatch(path: String)
        /// The certificate in `path` is not a CA, or has expired.
        case unusable(path: String, reason: String)

        var description: String {
            switch self {
            case .create(let step):
                return "cannot create the HTTPS certificate (\(step))"
            case .unreadable(let path):
                return "cannot read \(path) (unreadable, or not an unencrypted PEM certificate or key): restore "
                    + "it, or move ca.pem and ca-key.pem aside to create a new local CA"
            case .unwritable(let path, let code):
                return "cannot write \(path): \(String(cString: strerror(code)))"
            case .incomplete(let path, let missing):
                return "\(path) exists but \(missing) is missing: restore it, or move \(path) aside to create "
                    + "a new local CA (phones that trusted the old one will have to trust the new one)"
            case .mismatch(let path):
                return "\(path) is not the key of the local CA certificate next to it: restore the matching pair, "
                    + "or move both aside to create a new local CA"
            case .unusable(let path, let reason):
                return "the local CA in \(path) \(reason): move ca.pem and ca-key.pem aside to create a new one"
            }
        }
    }

    /// The text of the file at `path`; nil if there is none.
    static func read(_ path: String) throws -> String? {
        do throws(SystemError) {
            guard let bytes = try FileIO.read(path: path, limit: 1 << 20) else { return nil }
            return String(decoding: bytes, as: UTF8.self)
        } catch {
            throw Failure.unreadable(path: path)
        }
    }

    /// Replaces the file at `path` with `text` (mode `mode`) through a temporary file and a rename.
    static func replace(_ path: String, with text: String, mode: mode_t) throws {
        let temporary = path + ".new"
        do throws(SystemError) {
            unlink(temporary)  // a leftover from a crash may have another mode
            try FileIO.writeFile(temporary, Array(text.utf8), mode: mode, flags: O_CREAT | O_EXCL)
            guard rename(temporary, path) == 0 else { throw SystemError.current }
        } catch {
            unlink(temporary)
            throw Failure.unwritable(path: path, errno: error.code)
        }
    }

    /// Makes the renames in `directory` durable.
    static func sync(_ directory: String) throws {
        do throws(SystemError) {
            try FileIO.syncDirectory(directory)
        } catch {
            throw Failure.unwritable(path: directory, errno: error.code)
        }
    }
}
