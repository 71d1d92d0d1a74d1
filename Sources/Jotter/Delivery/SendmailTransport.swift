import Glibc

/// Pipes each message to the local MTA: `sendmail -t -i` (recipients from the headers; a line with a
/// lone `.` is not the end). The exit status decides: 0 sent, 75 (`EX_TEMPFAIL`) and signals retry,
/// anything else is a refusal.
public struct SendmailTransport: Transport {
    /// The sendmail binary.
    public let path: String

    /// A transport piping to `path`.
    public init(path: String = "/usr/sbin/sendmail") {
        self.path = path
    }

    /// A write into a pipe whose reader has gone must be an error (EPIPE), not the end of the process.
    private static let ignoreBrokenPipes: Void = {
        signal(SIGPIPE, SIG_IGN)
    }()

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        _ = Self.ignoreBrokenPipes
        guard access(path, X_OK) == 0 else {
            throw DeliveryFailure(.configuration, permanent: true)
        }
        // A local MTA reads local line endings.
        let bytes = message.rendered()
        var local: [UInt8] = []
        local.reserveCapacity(bytes.count)
        for (index, byte) in bytes.enumerated()
        where !(byte == 13 && index + 1 < bytes.count && bytes[index + 1] == 10) {
            local.append(byte)
        }
        // Its output is discarded: its text may quote addresses.
        let child: ChildProcess
        let input: Int32?
        do {
            (child, input, _) = try ChildProcess.spawn(path, arguments: ["-t", "-i"], input: .pipe, output: .discard)
        } catch {
            throw DeliveryFailure(.configuration, permanent: true)
        }
        // If sendmail exits without reading everything (it refused the message), the write fails with
        // EPIPE: its exit status, not the broken pipe, says what happened.
        if let input {
            try? FileIO.write(input, local)
            close(input)
        }
        let termination: ChildProcess.Termination
        do {
            termination = try child.wait()
        } catch {
            throw DeliveryFailure(.io, permanent: false)
        }
        switch termination {
        case .signalled: throw DeliveryFailure(.io, permanent: false)
        case .exited(0): return DeliveryReceipt()
        case .exited(75): throw DeliveryFailure(.serverError, permanent: false)
        case .exited: throw DeliveryFailure(.rejected, permanent: true)
        }
    }
}
