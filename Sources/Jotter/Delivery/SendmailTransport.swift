import Glibc

/// Pipes each message to the local MTA: `sendmail -t -i` (recipients from the headers; a line with a
/// lone `.` is not the end). The exit status (`sysexits.h`, as Postfix's sendmail, msmtp and others
/// use it; `exitFailure`) decides: 0 sent; a temporary trouble of the MTA's or the system's retries; a
/// refusal of the MTA's configuration or login holds every memo, as an SMTP server's would; a refusal of
/// the message fails this memo. A sendmail that has not finished within `timeoutSeconds` (reading the
/// message included) is killed, and the attempt is a `timeout`, retried: a hung MTA never holds a
/// delivery slot for good.
public struct SendmailTransport: Transport {
    /// The sendmail binary.
    public let path: String
    /// How long one hand-over may take (`?timeout=`, 60 s by default).
    public let timeoutSeconds: Int
    /// The envelope sender (`-f`), when `?from=` names one: bounces go there, and SPF checks its domain.
    /// Without it the MTA uses the user running Jotter, which suits mail that stays on this machine.
    public let envelopeSender: String?

    /// A transport piping to `path`.
    public init(path: String = "/usr/sbin/sendmail", timeoutSeconds: Int = 60, envelopeSender: String? = nil) {
        self.path = path
        self.timeoutSeconds = timeoutSeconds
        self.envelopeSender = envelopeSender
    }

    /// A write into a pipe whose reader has gone must be an error (EPIPE), not the end of the process.
    private static let ignoreBrokenPipes: Void = {
        signal(SIGPIPE, SIG_IGN)
    }()

    /// The program must be there and executable: a mistyped path (`sendmail:/usr/sbin/sendmial`) stops
    /// the start, where it held every memo as a refusing relay.
    public func prepare() throws(DeliveryFailure) {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, access(path, X_OK) == 0 else {
            throw DeliveryFailure(.configuration, permanent: true)
        }
    }

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        _ = Self.ignoreBrokenPipes
        guard access(path, X_OK) == 0 else {
            throw DeliveryFailure(.configuration, permanent: true)
        }
        // A local MTA reads local line endings.
        let local = message.renderedLocally()
        // Its output is discarded: its text may quote addresses.
        let child: ChildProcess
        let input: Int32?
        do {
            (child, input, _) = try ChildProcess.spawn(path, arguments: ["-t", "-i"] + (envelopeSender.map { ["-f", $0] } ?? []),
                                                     input: .pipe, output: .discard)
        } catch {
            throw DeliveryFailure(.configuration, permanent: true)
        }
        let deadline = monotonicNanoseconds() + UInt64(max(timeoutSeconds, 1)) * 1_000_000_000
        // If sendmail exits without reading everything (it refused the message), the write fails with
        // EPIPE: its exit status, not the broken pipe, says what happened. One that stops reading is
        // given until the deadline.
        if let input {
            Self.write(local, to: input, until: deadline)
            close(input)
        }
        let ended: ChildProcess.Termination?
        do {
            ended = try child.wait(until: deadline)
        } catch {
            throw DeliveryFailure(.io, permanent: false)
        }
        guard let termination = ended else { throw DeliveryFailure(.timeout, permanent: false) }
        switch termination {
        case .signalled: throw DeliveryFailure(.io, permanent: false)
        case .exited(0): return DeliveryReceipt()
        case .exited(let status): throw Self.exitFailure(status, recipientIsFixed: !message.onBehalfOfRecipient)
        }
    }

    /// What a sendmail's exit status says (`sysexits.h`). Temporary: `EX_TEMPFAIL` (75), and the system's
    /// or the MTA's own trouble — `EX_SOFTWARE` (70), `EX_OSERR` (71, which Postfix retries), `EX_OSFILE`
    /// (72), `EX_CANTCREAT` (73), `EX_IOERR` (74), `EX_PROTOCOL` (76), `EX_NOHOST` (68, a relay host not
    /// found). The configuration's, held like an SMTP server's refusal of this client: `EX_USAGE` (64),
    /// `EX_NOPERM` (77, msmtp's refused login), `EX_CONFIG` (78), and `EX_NOUSER` (67) when every memo goes
    /// to the one configured recipient. Anything else (`EX_DATAERR`, `EX_UNAVAILABLE`, a bare 1) refuses
    /// this memo.
    static func exitFailure(_ status: Int32, recipientIsFixed: Bool) -> DeliveryFailure {
        switch status {
        case 75, 70, 71, 72, 73, 74, 76, 68: return DeliveryFailure(.serverError, permanent: false)
        case 64, 67, 77, 78:
            guard status != 67 || recipientIsFixed else { return DeliveryFailure(.rejected, permanent: true) }
            let why = status == 67 ? "unknown recipient: check to=" : status == 77 ? "permission denied: check its login"
                : "its configuration or arguments"
            var failure = DeliveryFailure(status == 77 ? .auth : .configuration, permanent: true)
            failure.hint = "sendmail exited with status \(status) (\(why)); memos wait until it works"
            return failure
        default: return DeliveryFailure(.rejected, permanent: true)
        }
    }

    /// Writes `bytes` into the non-blocking pipe `fd`, waiting for room until `deadline`; gives up
    /// silently on a reader that is gone or too slow (the exit status, or the timeout, decides).
    private static func write(_ bytes: [UInt8], to fd: Int32, until deadline: UInt64) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written > 0 {
                offset += written
                continue
            }
            guard written < 0, errno == EAGAIN || errno == EINTR else { return }
            let now = monotonicNanoseconds()
            guard now < deadline else { return }
            var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&poller, 1, Int32(min((deadline - now) / 1_000_000 + 1, 1_000)))
        }
    }
}
