import Foundation
import Synchronization
@testable import Jotter

/// A helper program a test starts (Debian's `/usr/bin/python3` running a script from `Tests/Fixtures`),
/// which prints the port it bound on its first line of standard output.
///
/// The child exits when its standard input closes, so it never outlives the test process even if the
/// test crashes; `stop()` also sends SIGTERM and waits, so the port is free when it returns.
final class FixtureProcess: Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    let port: Int
    private let process: Process
    private let input: Pipe
    private let errorPath: String
    private let stopped = Atomic<Bool>(false)

    /// Starts `script` (a file in `Tests/Fixtures`) with `arguments`; standard error goes to `errorPath`.
    init(script: String, arguments: [String], errorPath: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [Self.fixture(script)] + arguments
        let output = Pipe()
        let input = Pipe()
        _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
        process.standardOutput = output
        process.standardInput = input
        process.standardError = FileHandle(forWritingAtPath: errorPath)
        try process.run()
        self.process = process
        self.input = input
        self.errorPath = errorPath
        var line: [UInt8] = []
        while !line.contains(10) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let port = Int(text.split(separator: "\n").first ?? ""), port > 0 else {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            throw Failure(description: "\(script) did not start: \(text) \(Self.read(errorPath))")
        }
        self.port = port
    }

    /// `Tests/Fixtures/name`.
    static func fixture(_ name: String) -> String {
        Repository.root + "/Tests/Fixtures/" + name
    }

    /// What the helper wrote to standard error (for failure messages).
    var standardError: String { Self.read(errorPath) }

    /// Stops the helper and waits until it is gone (its port is closed). Safe to call twice.
    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        try? input.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    deinit {
        stop()
    }

    private static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }
}

/// A throwaway certificate authority and a server certificate for `127.0.0.1` and `localhost`
/// (subjectAltName IP and DNS), made at test time with the `openssl` tool by `make-test-certs.sh`.
struct TestCertificates: Sendable {
    let caFile: String
    let certificateFile: String
    let keyFile: String

    /// Makes a new CA and server certificate in `directory` (created if missing), for `names`
    /// (subjectAltName syntax) instead of 127.0.0.1 and localhost when given.
    static func make(in directory: String, names: String? = nil) throws -> TestCertificates {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [FixtureProcess.fixture("make-test-certs.sh"), directory] + (names.map { [$0] } ?? [])
        let errors = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        let text = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FixtureProcess.Failure(description: "openssl failed: " + String(decoding: text, as: UTF8.self))
        }
        return TestCertificates(caFile: directory + "/ca.pem", certificateFile: directory + "/server.pem",
                                keyFile: directory + "/server.key")
    }
}

/// A real SMTP server (`Tests/Fixtures/smtp_server.py`, Debian's `python3-aiosmtpd`) on 127.0.0.1,
/// in one of three modes, writing each message it accepts to a directory the test reads back.
final class SMTPServer: Sendable {
    enum Mode: String, Sendable, CaseIterable, CustomStringConvertible {
        /// No TLS at all (STARTTLS is not offered).
        case plain
        /// STARTTLS offered, and required before MAIL.
        case starttls
        /// Implicit TLS (`smtps://`).
        case tls

        var description: String { rawValue }
    }

    /// The SMTP command a refusal answers.
    enum Stage: String, Sendable, CustomStringConvertible {
        case mail
        case rcpt
        case data

        var description: String { rawValue }
    }

    /// One accepted message.
    struct Received {
        /// The `.eml` file: the bytes received after DATA, dot-unstuffed.
        let path: String
        let bytes: [UInt8]
        let mailFrom: String
        let recipients: [String]
        /// The message came over TLS (implicit, or after STARTTLS).
        let tls: Bool
        /// The AUTH login, if the client authenticated.
        let login: String?
        /// What the client said in EHLO (or HELO).
        let helo: String?
    }

    let mode: Mode
    let directory: String
    private let process: FixtureProcess

    var port: Int { process.port }

    /// Starts a server writing into `directory` (created). TLS modes need `certificates`; `port` 0 picks a free one.
    init(mode: Mode, directory: String, certificates: TestCertificates? = nil,
         auth: (user: String, password: String)? = nil, delayMilliseconds: Int = 0, rcptDelayMilliseconds: Int = 0,
         port: Int = 0, idleTimeoutSeconds: Double = 300, requireFQDNHelo: Bool = false) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.mode = mode
        self.directory = directory
        var arguments = ["--mode", mode.rawValue, "--outdir", directory, "--delay-ms", "\(delayMilliseconds)",
                         "--rcpt-delay-ms", "\(rcptDelayMilliseconds)",
                         "--port", "\(port)", "--idle-timeout", "\(idleTimeoutSeconds)"]
        if let certificates {
            arguments += ["--cert", certificates.certificateFile, "--key", certificates.keyFile]
        }
        if let auth {
            arguments += ["--auth", "\(auth.user):\(auth.password)"]
        }
        if requireFQDNHelo { arguments.append("--require-fqdn-helo") }
        process = try FixtureProcess(script: "smtp_server.py", arguments: arguments,
                                     errorPath: directory + "/server.stderr")
    }

    func stop() {
        process.stop()
    }

    /// Refuses the next `count` `stage` commands (`-1`: all of them) with `reply`, e.g. `451 4.3.0 Try later`.
    func refuse(_ stage: Stage, reply: String, count: Int = -1) throws {
        try writeControl([stage.rawValue: ["reply": reply, "count": count]])
    }

    /// Accepts everything from now on.
    func acceptAll() throws {
        try writeControl([:])
    }

    private func writeControl(_ control: [String: Any]) throws {
        let data = try JSONSerialization.data(withJSONObject: control)
        let temporary = directory + "/control.json.swift-tmp"
        try data.write(to: URL(fileURLWithPath: temporary))
        guard rename(temporary, directory + "/control.json") == 0 else {
            throw FixtureProcess.Failure(description: "cannot write control.json")
        }
    }

    /// Every message accepted so far, in order.
    var received: [Received] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasSuffix(".json") && $0 != "control.json" }.sorted()
        return names.compactMap { name in
            let base = directory + "/" + String(name.dropLast(5))
            guard let meta = FileManager.default.contents(atPath: base + ".json"),
                  let object = try? JSONSerialization.jsonObject(with: meta) as? [String: Any],
                  let bytes = FileManager.default.contents(atPath: base + ".eml") else { return nil }
            return Received(path: base + ".eml", bytes: Array(bytes),
                            mailFrom: object["mail_from"] as? String ?? "",
                            recipients: object["rcpt_tos"] as? [String] ?? [],
                            tls: object["tls"] as? Bool ?? false, login: object["login"] as? String,
                            helo: object["helo"] as? String)
        }
    }

    /// Messages whose bytes arrived but were refused at the end of DATA.
    var rejected: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory + "/rejected")) ?? [])
            .filter { $0.hasSuffix(".eml") }.sorted().map { directory + "/rejected/" + $0 }
    }

    /// The server's event log: `MAIL tls=0|1`, `RCPT refused 451`, `DATA accepted 0001`, `AUTH PLAIN ok`,
    /// `TIMEOUT` (hung up on a connection idle longer than `idleTimeoutSeconds`), …
    var events: [String] {
        ((try? String(contentsOfFile: directory + "/events.log", encoding: .utf8)) ?? "")
            .split(separator: "\n").map(String.init)
    }

    var standardError: String { process.standardError }
}

// MARK: - Shared by the delivery test files (SMTP, HTTP relay, Markdown and sendmail)

/// Posting memos to a `TestServer` and reading `/history` back, as a client would.
enum DeliveryKit {
    /// One `/history` entry.
    struct Entry: CustomStringConvertible {
        var id: String
        var status: String
        var attempts: Int
        var lastError: String?
        var nextAttemptAt: String?
        var deliveredAt: String?
        var createdAt: String
        var subject: String?
        /// The response body as received.
        var raw: String

        var description: String { raw }

        /// `next_attempt_at` in epoch milliseconds.
        var nextAttemptMilliseconds: Int64? { nextAttemptAt.flatMap(DeliveryKit.milliseconds) }
        var createdMilliseconds: Int64? { DeliveryKit.milliseconds(createdAt) }
    }

    /// POSTs a memo as JSON and returns its `X-Message-Id` (the answer must be `204`).
    static func send(_ server: TestServer, subject: String? = nil, body: String) throws -> String {
        var object: [String: String] = ["body": body]
        if let subject { object["subject"] = subject }
        let json = try JSONSerialization.data(withJSONObject: object)
        let response = try server.route("POST", "/send", headers: [("Content-Type", "application/json")],
                                        body: Array(json))
        guard response.status == 204, let id = response.header("X-Message-Id") else {
            throw FixtureProcess.Failure(description: "POST /send answered \(response.status): \(response.text)")
        }
        return id
    }

    /// `GET /history/{id}`.
    static func entry(_ server: TestServer, _ id: String) throws -> Entry {
        let response = try server.route("GET", "/history/" + id)
        guard response.status == 200 else {
            throw FixtureProcess.Failure(description: "GET /history/\(id) answered \(response.status)")
        }
        return try entry(from: response)
    }

    /// Parses a `/history` entry from a response body.
    static func entry(from response: RawHTTP.Response) throws -> Entry {
        guard let object = response.json as? [String: Any] else {
            throw FixtureProcess.Failure(description: "not a history entry: \(response.text)")
        }
        return Entry(id: object["id"] as? String ?? "", status: object["status"] as? String ?? "",
                     attempts: object["attempts"] as? Int ?? -1, lastError: object["last_error"] as? String,
                     nextAttemptAt: object["next_attempt_at"] as? String,
                     deliveredAt: object["delivered_at"] as? String, createdAt: object["created_at"] as? String ?? "",
                     subject: object["subject"] as? String, raw: response.text)
    }

    /// Polls `/history/{id}` until `condition` holds (returns that entry) or `timeout` passes (returns the last).
    @discardableResult
    static func wait(_ server: TestServer, _ id: String, timeout: Double = 10,
                     until condition: (Entry) -> Bool) throws -> Entry {
        let deadline = Date().addingTimeInterval(timeout)
        var last = try entry(server, id)
        while !condition(last) && Date() < deadline {
            usleep(10_000)
            last = try entry(server, id)
        }
        return last
    }

    /// Polls `/healthz` until its `relay.reason` is `reason` (the breaker's state is set on the worker's
    /// queue, a moment after the memo it judged); returns that `relay` object, or nil at the deadline.
    static func relay(_ server: TestServer, reason: String, timeout: Double = 30) -> [String: Any]? {
        var relay: [String: Any] = [:]
        let seen = server.waitUntil(timeout: timeout) {
            relay = ((try? server.route("GET", "/healthz").json as? [String: Any])?["relay"] as? [String: Any]) ?? [:]
            return relay["reason"] as? String == reason
        }
        return seen ? relay : nil
    }

    /// Polls until the memo is `sent`, `failed` or `held`; returns that entry (or the last seen).
    @discardableResult
    static func settle(_ server: TestServer, _ id: String, timeout: Double = 10) throws -> Entry {
        try wait(server, id, timeout: timeout) { ["sent", "failed", "held"].contains($0.status) }
    }

    /// True when some file under `directory` (the database, its WAL, the key…) holds `secret`'s bytes.
    static func directory(_ directory: String, contains secret: String) -> Bool {
        let needle = Data(secret.utf8)
        let files = FileManager.default.enumerator(atPath: directory)?.compactMap { $0 as? String } ?? []
        return files.contains { name in
            FileManager.default.contents(atPath: directory + "/" + name)?.range(of: needle) != nil
        }
    }

    /// `2026-12-01T09:30:05.123Z` → epoch milliseconds.
    static func milliseconds(_ iso: String) -> Int64? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: iso).map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) }
    }

    /// Parses `path` with Python's `email` package (policy default).
    struct Parsed {
        var subject: String
        /// Line breaks as LF.
        var body: String
        var messageID: String
        var from: String
        var to: String
        var defects: [String]
    }

    static func parse(atPath path: String) throws -> Parsed {
        parsed(try Python.parseMessage(atPath: path))
    }

    /// `parse(atPath:)` for many files with one Python process, in order.
    static func parseAll(_ paths: [String]) throws -> [Parsed] {
        guard !paths.isEmpty else { return [] }
        let script = """
            import email, email.policy, json, sys
            out = []
            for path in sys.argv[1:]:
                with open(path, 'rb') as f:
                    message = email.message_from_binary_file(f, policy=email.policy.default)
                out.append({
                    'subject': str(message['subject']), 'body': message.get_content(),
                    'message_id': str(message['message-id']), 'from': str(message['from']),
                    'to': str(message['to']), 'defects': [type(d).__name__ for d in message.defects],
                })
            print(json.dumps(out))
            """
        let output = try Python.run(script, arguments: paths)
        guard let list = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [[String: Any]] else {
            throw FixtureProcess.Failure(description: "unexpected python output")
        }
        return list.map(parsed)
    }

    private static func parsed(_ object: [String: Any]) -> Parsed {
        Parsed(subject: object["subject"] as? String ?? "<none>",
               body: (object["body"] as? String ?? "").replacingOccurrences(of: "\r\n", with: "\n"),
               messageID: object["message_id"] as? String ?? "", from: object["from"] as? String ?? "",
               to: object["to"] as? String ?? "", defects: object["defects"] as? [String] ?? [])
    }

    /// A decoded body says exactly `memo`: identical, or identical but for the one final line break a
    /// 7bit or quoted-printable body always ends with.
    static func sameText(_ decoded: String, _ memo: String) -> Bool {
        decoded == memo || decoded == memo + "\n"
    }

    /// Memos that have broken mail software before: scripts, right-to-left text, emoji sequences,
    /// lines that mean something to SMTP (`.`) or to mbox (`From `), and one of 200 KB.
    static let hardMemos: [(subject: String, body: String)] = [
        ("買い物リスト：牛乳と卵、それから醤油", "牛乳を買う\n卵を十個\n明日の朝までに冷蔵庫へ。\n\n— 以上"),
        ("تذكير: اجتماع الساعة العاشرة", "لا تنس إحضار التقرير الفصلي\nمع الشكر، وإلى اللقاء غداً"),
        ("🚀 launch ✅ 👍🏽 family 👨‍👩‍👧‍👦", "Flags 🇯🇵🇸🇦🇧🇷\nZWJ 👩🏽‍💻 and skin tone 👍🏿\nplain ASCII after"),
        ("dots", ".\n..\n.hidden line\n...\nend of dots\n."),
        ("From lines", "From the desk of Jotter\nFrom: not a header\n>From quoted\nFrom\n.From"),
        ("big memo", bigMemo),
    ]

    /// 200 KB of ASCII lines, every seventh starting with a dot.
    static let bigMemo: String = {
        var lines: [String] = []
        var size = 0
        var number = 0
        while size < 200 * 1024 {
            number += 1
            let line = (number % 7 == 0 ? "." : "") + "line \(number): the quick brown fox jumps over the lazy dog"
            lines.append(line)
            size += line.utf8.count + 1
        }
        return lines.joined(separator: "\n")
    }()
}
