import Foundation

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
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw DeliveryFailure(.configuration, permanent: true)
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["-t", "-i"]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice  // its text may quote addresses
        // A local MTA reads local line endings.
        let bytes = message.rendered()
        var local: [UInt8] = []
        local.reserveCapacity(bytes.count)
        for (index, byte) in bytes.enumerated()
        where !(byte == 13 && index + 1 < bytes.count && bytes[index + 1] == 10) {
            local.append(byte)
        }
        do {
            try process.run()
        } catch {
            throw DeliveryFailure(.configuration, permanent: true)
        }
        // If sendmail exits without reading everything (it refused the message), the write fails with
        // EPIPE: its exit status, not the broken pipe, says what happened.
        try? input.fileHandleForWriting.write(contentsOf: local)
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
        if process.terminationReason == .uncaughtSignal {
            throw DeliveryFailure(.io, permanent: false)
        }
        switch process.terminationStatus {
        case 0: return DeliveryReceipt()
        case 75: throw DeliveryFailure(.serverError, permanent: false)
        default: throw DeliveryFailure(.rejected, permanent: true)
        }
    }
}
