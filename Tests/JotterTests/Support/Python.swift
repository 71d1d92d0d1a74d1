import Foundation

/// Debian's own Python (`/usr/bin/python3`, where `python3-aiosmtpd` and friends live), as an
/// independent second reader of what Jotter produced.
enum Python {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs `script` with `arguments`; returns standard output, throws with standard error on failure.
    static func run(_ script: String, arguments: [String] = [], input: [UInt8] = []) throws -> String {
        // A script that fails before it read its input closes the pipe: that is its error to report,
        // not a SIGPIPE that ends the whole test process.
        signal(SIGPIPE, SIG_IGN)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script] + arguments
        let output = Pipe(), errors = Pipe(), stdin = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = stdin
        try process.run()
        stdin.fileHandleForWriting.write(Data(input))
        try stdin.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(description: "python failed: " + String(decoding: err, as: UTF8.self))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses a delivered message file with Python's `email` package (policy `default`) and returns
    /// its decoded headers and body as JSON: {"subject", "body", "message_id", "date", "from", "to",
    /// "content_type", "charset", "defects"}.
    static func parseMessage(atPath path: String) throws -> [String: Any] {
        guard let message = try parseMessages(atPaths: [path]).first else {
            throw Failure(description: "unexpected python output")
        }
        return message
    }

    /// `parseMessage` for many files in one Python process (each costs a tenth of a second to start).
    static func parseMessages(atPaths paths: [String]) throws -> [[String: Any]] {
        guard !paths.isEmpty else { return [] }
        let script = """
            import email, email.policy, json, sys
            for path in sys.argv[1:]:
                with open(path, 'rb') as f:
                    message = email.message_from_binary_file(f, policy=email.policy.default)
                body = message.get_content()
                print(json.dumps({
                    'subject': str(message['subject']), 'body': body,
                    'message_id': str(message['message-id']), 'date': str(message['date']),
                    'from': str(message['from']), 'to': str(message['to']),
                    'content_type': message.get_content_type(), 'charset': message.get_content_charset(),
                    'defects': [type(d).__name__ for d in message.defects],
                    'auto_submitted': message['auto-submitted'] and str(message['auto-submitted']),
                    'reply_to': message['reply-to'] and str(message['reply-to']),
                }))
            """
        let lines = try run(script, arguments: paths).split(separator: "\n")
        let messages = try lines.map { line in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw Failure(description: "unexpected python output")
            }
            return object
        }
        guard messages.count == paths.count else { throw Failure(description: "unexpected python output") }
        return messages
    }
}
