import Foundation
import Synchronization
import Testing
@testable import Jotter

/// The local transports: `markdown:` (a daily note per local day in a folder such as an Obsidian
/// vault, one entry per memo however often delivery is retried) and `sendmail:` (piped to a local
/// MTA, here a fake one whose exit status a test chooses).
@Suite struct MarkdownAndSendmailTests {
    private static func jotter(_ directory: TemporaryDirectory, relay: String? = nil,
                               transport: (any Transport)? = nil) throws -> TestServer {
        try TestServer(dataDirectory: directory.file("data"), transport: transport, relay: relay) { configuration in
            configuration.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 1000)
            configuration.delivery.offlineProbeMilliseconds = 200
            configuration.delivery.slots = 2
        }
    }

    /// Local `YYYY-MM-DD` and `HH:mm` of epoch milliseconds, by Foundation (not by the code under test).
    private static func localDayAndTime(_ milliseconds: Int64) -> (day: String, time: String) {
        let date = Date(timeIntervalSince1970: TimeInterval(milliseconds) / 1000)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone.current
        formatter.dateFormat = "yyyy-MM-dd"
        let day = formatter.string(from: date)
        formatter.dateFormat = "HH:mm"
        return (day, formatter.string(from: date))
    }

    private static func localMilliseconds(year: Int, month: Int, day: Int, hour: Int, minute: Int) -> Int64 {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone.current
        let date = calendar.date(from: DateComponents(year: year, month: month, day: day, hour: hour, minute: minute))!
        return Int64(date.timeIntervalSince1970 * 1000)
    }

    private static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    private static func occurrences(of needle: String, in text: String) -> Int {
        text.components(separatedBy: needle).count - 1
    }

    private static func message(id: String, date: Int64, subject: String, body: String) -> MailMessage {
        MailMessage(id: id, date: date, from: MailAddress(name: "Jotter", address: "jotter@localhost"),
                    to: MailAddress(address: "me@localhost"), subject: subject, body: body)
    }

    // MARK: Markdown

    @Test func eachMemoIsOneEntryInTheDailyNoteOfItsLocalDay() throws {
        let directory = TemporaryDirectory()
        let vault = directory.file("vault")
        let server = try Self.jotter(directory, relay: "markdown:" + vault)
        defer { server.stop() }

        let memos: [(subject: String?, body: String)] = [
            (nil, "Buy oat milk\nand bread"),
            ("Explicit subject", "a body whose first line is not the subject"),
            (nil, "日本語のメモ\n二行目"),
        ]
        var ids: [String] = []
        for memo in memos {
            ids.append(try DeliveryKit.send(server, subject: memo.subject, body: memo.body))
        }
        var notes = Set<String>()
        for (memo, id) in zip(memos, ids) {
            let entry = try DeliveryKit.settle(server, id)
            #expect(entry.status == "sent", "\(entry)")
            let (day, time) = Self.localDayAndTime(try #require(entry.createdMilliseconds))
            let path = "\(vault)/\(day).md"
            notes.insert(path)
            let note = Self.read(path)
            let marker = "<!-- jotter:\(id) -->"
            #expect(Self.occurrences(of: marker, in: note) == 1, "one entry for \(id)")
            #expect(note.contains("## \(time)\n\(marker)\n"), "heading ## \(time) above the entry")
            #expect(note.contains(memo.body))
            if let subject = memo.subject {
                #expect(note.contains("**\(subject)**"))
            }
        }
        let all = notes.map(Self.read).joined()
        #expect(Self.occurrences(of: "<!-- jotter:", in: all) == memos.count)
        let files = try FileManager.default.contentsOfDirectory(atPath: vault)
        #expect(files.allSatisfy { $0.hasSuffix(".md") || $0 == ".jotter.lock" }, "no leftovers: \(files)")
        #expect(!server.logs.captured.contains("Buy oat milk"))
    }

    /// What a write cut short left (a crash or a full disk between its first bytes and its last): the
    /// heading and marker, part of the text. That is not the memo delivered: the retry writes it whole.
    @Test func anEntryCutShortIsNotTakenForTheMemo() throws {
        let directory = TemporaryDirectory()
        let transport = MarkdownTransport(folder: directory.file("vault"))
        let date = Self.localMilliseconds(year: 2024, month: 3, day: 10, hour: 9, minute: 5)
        let message = Self.message(id: "5b0e7c1a-7d1f-4c55-8d6e-2a9a1c3e4f60", date: date,
                                   subject: "", body: "the first half of a thought, and the second half")
        let whole = MarkdownTransport.entry(message, heading: "09:05")
        let cut = String(whole.prefix(whole.count - 12))
        try FileManager.default.createDirectory(atPath: directory.file("vault"), withIntermediateDirectories: true)
        let path = directory.file("vault/2024-03-10.md")
        try cut.write(toFile: path, atomically: false, encoding: .utf8)
        #expect(try transport.send(message) == DeliveryReceipt(alreadyDelivered: false))
        #expect(Self.read(path).contains(whole), "the whole entry is there")
        #expect(try transport.send(message) == DeliveryReceipt(alreadyDelivered: true), "and counts from then on")
    }

    @Test func sendingTheSameMessageTwiceWritesOneEntry() throws {
        let directory = TemporaryDirectory()
        let transport = MarkdownTransport(folder: directory.file("vault"))
        let date = Self.localMilliseconds(year: 2024, month: 3, day: 10, hour: 9, minute: 5)
        let message = Self.message(id: "7a1c1c8e-0c0e-4b7e-9a53-1f1f6f0d2b11", date: date,
                                   subject: "Groceries", body: "eggs\nflour")

        #expect(try transport.send(message) == DeliveryReceipt(alreadyDelivered: false))
        let path = directory.file("vault/2024-03-10.md")
        let once = Self.read(path)
        #expect(try transport.send(message) == DeliveryReceipt(alreadyDelivered: true))
        #expect(Self.read(path) == once, "a retried delivery changes nothing")
        #expect(Self.occurrences(of: "<!-- jotter:\(message.id) -->", in: once) == 1)
        #expect(once.hasPrefix("## 09:05\n<!-- jotter:\(message.id) -->\n\n"))
        #expect(once.contains("**Groceries**\n\neggs\nflour\n"))

        // Another memo the same day is appended below; one the next day starts that day's note.
        let later = Self.message(id: "7a1c1c8e-0c0e-4b7e-9a53-1f1f6f0d2b12",
                                 date: date + 3 * 3_600_000, subject: "second", body: "second")
        let tomorrow = Self.message(id: "7a1c1c8e-0c0e-4b7e-9a53-1f1f6f0d2b13",
                                    date: Self.localMilliseconds(year: 2024, month: 3, day: 11, hour: 0, minute: 1),
                                    subject: "third", body: "third")
        _ = try transport.send(later)
        _ = try transport.send(tomorrow)
        _ = try transport.send(later)
        let first = Self.read(path)
        #expect(first.hasPrefix(once))
        #expect(first.hasSuffix("\n\n## 12:05\n<!-- jotter:\(later.id) -->\n\nsecond\n"))
        #expect(Self.occurrences(of: "<!-- jotter:", in: first) == 2)
        #expect(Self.read(directory.file("vault/2024-03-11.md")) == "## 00:01\n<!-- jotter:\(tomorrow.id) -->\n\nthird\n")
    }

    @Test func theFolderIsMadeOnPrepareOrFirstDeliveryAndAFileInTheWayIsATransientIOFailure() throws {
        let directory = TemporaryDirectory()
        let transport = MarkdownTransport(folder: directory.file("notes/vault"))
        #expect(!FileManager.default.fileExists(atPath: directory.file("notes")), "nothing made until used")
        try transport.prepare()
        #expect(FileManager.default.fileExists(atPath: directory.file("notes/vault")))
        try FileManager.default.removeItem(atPath: directory.file("notes"))
        #expect(try transport.send(Self.message(id: "7a1c1c8e-0c0e-4b7e-9a53-1f1f6f0d2b14", date: 0,
                                                subject: "s", body: "b")) == DeliveryReceipt())
        try "in the way".write(toFile: directory.file("file"), atomically: false, encoding: .utf8)
        let blocked = MarkdownTransport(folder: directory.file("file/vault"))
        #expect(throws: DeliveryFailure(.io, permanent: false)) { try blocked.prepare() }
        #expect(throws: DeliveryFailure(.io, permanent: false)) {
            _ = try blocked.send(Self.message(id: "7a1c1c8e-0c0e-4b7e-9a53-1f1f6f0d2b15", date: 0,
                                              subject: "s", body: "b"))
        }
    }

    @Test func fourSlotsWritingOneNoteLoseNoEntryAndDuplicateNone() throws {
        let directory = TemporaryDirectory()
        let vault = directory.file("vault")
        let server = try TestServer(dataDirectory: directory.file("data"), relay: "markdown:" + vault) { configuration in
            configuration.delivery.slots = 4
        }
        defer { server.stop() }

        let ids = try (1...24).map { try DeliveryKit.send(server, body: "entry number \($0)") }
        #expect(try server.waitUntil(timeout: 20) { try server.outbox.history.counts()[.sent] == ids.count })
        let notes = try FileManager.default.contentsOfDirectory(atPath: vault).filter { $0.hasSuffix(".md") }
        let all = notes.map { Self.read(vault + "/" + $0) }.joined()
        for (number, id) in zip(1..., ids) {
            #expect(Self.occurrences(of: "<!-- jotter:\(id) -->", in: all) == 1, "entry \(number)")
            #expect(Self.occurrences(of: "entry number \(number)\n", in: all) == 1, "entry \(number)")
        }
    }

    /// Passes each message on, then reports a transient failure for the first `failures` attempts,
    /// as if the process died after writing but before recording the delivery.
    private final class WrittenButUnacknowledged: Transport {
        private let next: any Transport
        private let remaining: Mutex<Int>

        init(next: any Transport, failures: Int) {
            self.next = next
            remaining = Mutex(failures)
        }

        func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
            let receipt = try next.send(message)
            let fail = remaining.withLock { count -> Bool in
                count -= 1
                return count >= 0
            }
            if fail { throw DeliveryFailure(.io, permanent: false) }
            return receipt
        }
    }

    @Test func aRetriedMarkdownDeliveryStillWritesOneEntry() throws {
        let directory = TemporaryDirectory()
        let vault = directory.file("vault")
        let transport = WrittenButUnacknowledged(next: MarkdownTransport(folder: vault), failures: 2)
        let server = try Self.jotter(directory, transport: transport)
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "retried twice, written once")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "sent", "\(entry)")
        #expect(entry.attempts == 3)
        let (day, _) = Self.localDayAndTime(try #require(entry.createdMilliseconds))
        let note = Self.read("\(vault)/\(day).md")
        #expect(Self.occurrences(of: "<!-- jotter:\(id) -->", in: note) == 1)
        #expect(Self.occurrences(of: "retried twice, written once", in: note) == 1)
    }

    // MARK: Sendmail

    /// What sendmail (or systemctl) is started with: this process's environment less what may hold Jotter's
    /// secrets — a relay URL or store URL in `JOTTER_*`, libpq's `PGPASSWORD`, systemd's credentials directory.
    @Test func aChildGetsNoneOfJottersSecrets() {
        let given = ["PATH": "/usr/bin:/bin", "HOME": "/home/ana", "LANG": "C.UTF-8",
                     "JOTTER_RELAY": "smtp://ana:s3cret@mail.example.com", "JOTTER_STORE": "postgres://u:pw@db/relay",
                     "PGPASSWORD": "pw", "PGHOST": "db", "CREDENTIALS_DIRECTORY": "/run/credentials/jotter.service"]
        #expect(ChildProcess.environment(given) == ["HOME=/home/ana", "LANG=C.UTF-8", "PATH=/usr/bin:/bin"])
    }

    /// A fake `sendmail` in a temporary directory: saves each message it is given in `attempts/`
    /// (and in `delivered/` when it exits 0), its arguments in `args`, and exits with the code in `exit-code`.
    private struct FakeSendmail {
        let directory: String
        var path: String { directory + "/sendmail" }

        init(in directory: String, exitCode: Int32) throws {
            self.directory = directory
            let manager = FileManager.default
            try manager.createDirectory(atPath: directory + "/attempts", withIntermediateDirectories: true)
            try manager.createDirectory(atPath: directory + "/delivered", withIntermediateDirectories: true)
            let script = """
                #!/bin/sh
                dir=$(dirname "$0")
                saved=$(mktemp "$dir/attempts/XXXXXX")
                cat > "$saved"
                printf '%s\\n' "$*" > "$dir/args"
                code=$(cat "$dir/exit-code")
                if [ "$code" = 0 ]; then mv "$saved" "$dir/delivered/"; fi
                exit "$code"

                """
            try script.write(toFile: path, atomically: true, encoding: .utf8)
            chmod(path, 0o755)
            try setExitCode(exitCode)
        }

        func setExitCode(_ code: Int32) throws {
            try "\(code)\n".write(toFile: directory + "/exit-code", atomically: true, encoding: .utf8)
        }

        func files(_ folder: String) -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory + "/" + folder)) ?? []).sorted()
                .map { directory + "/" + folder + "/" + $0 }
        }

        var arguments: String {
            MarkdownAndSendmailTests.read(directory + "/args").trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// A sendmail path that is not an executable file stops the start, naming --relay.
    @Test(arguments: ["/nonexistent/sendmail", "not-executable", "/tmp"])
    func aSendmailThatIsNotThereStopsTheStart(path: String) throws {
        let directory = TemporaryDirectory()
        var given = path
        if path == "not-executable" {
            given = directory.file("sendmail-text")
            #expect(FileManager.default.createFile(atPath: given, contents: Data("#!/bin/sh\n".utf8),
                                                   attributes: [.posixPermissions: 0o644]))
        }
        let error = try #require(throws: Application.StartFailure.self) { _ = try Self.jotter(directory, relay: "sendmail:" + given) }
        #expect("\(error)".contains("--relay"), "\(error)")
    }

    @Test func sendmailExitZeroIsSent() throws {
        let directory = TemporaryDirectory()
        let sendmail = try FakeSendmail(in: directory.file("mta"), exitCode: 0)
        let server = try Self.jotter(directory, relay: "sendmail:" + sendmail.path)
        defer { server.stop() }

        let body = "first line\n.\nFrom here on\nالنهاية"
        let id = try DeliveryKit.send(server, subject: "via sendmail", body: body)
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "sent", "\(entry)")
        let delivered = sendmail.files("delivered")
        try #require(delivered.count == 1)
        #expect(sendmail.arguments == "-t -i")
        let bytes = try #require(FileManager.default.contents(atPath: delivered[0]))
        #expect(!bytes.contains(13), "a local MTA gets local (LF) line endings")
        let parsed = try DeliveryKit.parse(atPath: delivered[0])
        #expect(parsed.subject == "via sendmail")
        #expect(DeliveryKit.sameText(parsed.body, body))
        #expect(parsed.messageID == "<\(id)@localhost>")
        #expect(parsed.to == RelayURL.localUser() + "@localhost", "the user running Jotter, not a made-up address")
    }

    @Test func aHungSendmailIsKilledAtItsTimeoutAndTheMemoRetried() throws {
        let directory = TemporaryDirectory()
        let marker = "\(Int.random(in: 100_000...999_999))"
        // Reads nothing and never ends: the 100 KB memo fills the pipe, then the wait runs out.
        let path = directory.file("hung-sendmail")
        try "#!/bin/sh\nexec sleep 3\(marker)\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o755)
        let server = try Self.jotter(directory, relay: "sendmail:\(path)?timeout=1")
        defer { server.stop() }
        let started = Date()
        let id = try DeliveryKit.send(server, body: String(repeating: "a line of a long memo\n", count: 5000))
        let entry = try DeliveryKit.wait(server, id, timeout: 30) { $0.lastError != nil }
        #expect(entry.status == "retrying" && entry.lastError == "timeout", "\(entry)")
        #expect(Date().timeIntervalSince(started) < 20, "the timeout is 1 s")
        // Killed with its process group: no sendmail (here, its sleep) is left behind.
        #expect(server.waitUntil(timeout: 20) { !Self.running(commandLineContaining: "3\(marker)") },
                "the hung sendmail is still running")
    }

    /// Whether a process whose command line contains `text` is alive (read from /proc, as pgrep does).
    private static func running(commandLineContaining text: String) -> Bool {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.filter { Int($0) != nil }.contains { pid in
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"),
                  let status = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  !status.contains(") Z ") else { return false }   // a zombie has ended
            return String(decoding: data.map { $0 == 0 ? 32 : $0 }, as: UTF8.self).contains(text)
        }
    }

    /// With `?from=` the envelope sender is that address too (`-f`): bounces go there, and SPF checks the
    /// domain the From names instead of this machine's user.
    @Test func sendmailFromIsAlsoTheEnvelopeSender() throws {
        let directory = TemporaryDirectory()
        let sendmail = try FakeSendmail(in: directory.file("mta"), exitCode: 0)
        let server = try Self.jotter(directory, relay: "sendmail:\(sendmail.path)?from=Notes%20%3C-notes@example.org%3E&to=me@example.org")
        defer { server.stop() }
        let id = try DeliveryKit.send(server, body: "signed for")
        #expect(try DeliveryKit.settle(server, id).status == "sent")
        #expect(sendmail.arguments == "-t -i -f -notes@example.org", "the address as -f's own argument, even with a leading dash")
        let parsed = try DeliveryKit.parse(atPath: try #require(sendmail.files("delivered").first))
        #expect(parsed.from.contains("-notes@example.org"))
    }

    /// A relay's mail goes to other people's inboxes: from jotter@localhost it would be refused there,
    /// and no address could be verified. Without `?from=` the relay does not start.
    @Test func aRelayDoesNotSendmailWithoutAFromAddress() throws {
        let directory = TemporaryDirectory()
        #expect(throws: RelayURL.Failure.self) {
            let relay = try RelayServer(dataDirectory: directory.file("relay")) { $0.mail = "sendmail:/bin/true" }
            relay.stop()
        }
        let relay = try RelayServer(dataDirectory: directory.file("relay")) { $0.mail = "sendmail:/bin/true?from=relay@example.com" }
        relay.stop()
    }

    @Test func sendmailTimeoutMustBeSeconds() {
        #expect(throws: RelayURL.Failure.self) { try RelayURL("sendmail:?timeout=0") }
        #expect(throws: RelayURL.Failure.self) { try RelayURL("sendmail:?timeout=soon") }
        #expect((try? RelayURL("sendmail:?timeout=5").transport as? SendmailTransport)?.timeoutSeconds == 5)
        #expect((try? RelayURL("sendmail:").transport as? SendmailTransport)?.timeoutSeconds == 60)
    }

    @Test func sendmailTemporaryFailureIsRetriedUntilItsMTAAccepts() throws {
        let directory = TemporaryDirectory()
        let sendmail = try FakeSendmail(in: directory.file("mta"), exitCode: 75)
        let server = try Self.jotter(directory, relay: "sendmail:" + sendmail.path)
        defer { server.stop() }

        let id = try DeliveryKit.send(server, body: "the MTA is busy")
        let retrying = try DeliveryKit.wait(server, id) { $0.status == "retrying" && $0.attempts >= 2 }
        #expect(retrying.status == "retrying", "\(retrying)")
        #expect(retrying.lastError == "server_error")
        #expect(sendmail.files("delivered").isEmpty)

        try sendmail.setExitCode(0)
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "sent", "\(entry)")
        #expect(sendmail.files("delivered").count == 1, "delivered once")
        #expect(sendmail.files("attempts").count >= 2, "the refused attempts are still where the fake left them")
    }

    @Test func sendmailRefusalFailsAsRejectedAndIsKept() throws {
        let directory = TemporaryDirectory()
        let sendmail = try FakeSendmail(in: directory.file("mta"), exitCode: 1)
        let server = try Self.jotter(directory, relay: "sendmail:" + sendmail.path)
        defer { server.stop() }

        let id = try DeliveryKit.send(server, subject: "refused locally", body: "no")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "failed", "\(entry)")
        #expect(entry.lastError == "rejected")
        #expect(entry.nextAttemptAt == nil)
        #expect(try server.outbox.nextDueAt() == nil, "nothing left to deliver: not retried on its own")
        let later = try DeliveryKit.entry(server, id)
        #expect(later.status == "failed" && later.attempts == 1, "\(later)")
        #expect(later.subject == "refused locally")
        #expect(sendmail.files("attempts").count == 1)
        #expect(sendmail.files("delivered").isEmpty)

        try sendmail.setExitCode(0)
        #expect(try server.route("POST", "/history/\(id)/retry").status == 202)
        #expect(try DeliveryKit.settle(server, id).status == "sent")
        #expect(sendmail.files("delivered").count == 1)
    }

    /// A sendmail that refuses before reading (bad option, full queue, policy) closes its standard input.
    @Test
    func aSendmailThatExitsWithoutReadingItsInputDoesNotTakeJotterDown() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("impatient-sendmail")
        try "#!/bin/sh\nexit 1\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o755)
        let server = try Self.jotter(directory, relay: "sendmail:" + path)
        defer { server.stop() }

        // More than a pipe holds: writing it to a process that is gone must not raise SIGPIPE here.
        let id = try DeliveryKit.send(server, subject: "big", body: DeliveryKit.bigMemo)
        let entry = try DeliveryKit.settle(server, id, timeout: 5)
        #expect(entry.status == "failed", "\(entry)")
        #expect(entry.lastError == "rejected", "its exit status (1) is a refusal")
        #expect(try server.route("GET", "/healthz").status == 200, "still serving")
    }

    /// Gone after the start (the MTA's package removed): memos are held as the relay's configuration's
    /// failure until it is fixed.
    @Test func aMissingSendmailIsAConfigurationFailure() throws {
        let directory = TemporaryDirectory()
        let sendmail = try FakeSendmail(in: directory.file("mta"), exitCode: 0)
        let server = try Self.jotter(directory, relay: "sendmail:" + sendmail.path)
        defer { server.stop() }
        try FileManager.default.removeItem(atPath: sendmail.path)

        let id = try DeliveryKit.send(server, body: "nowhere to go")
        let entry = try DeliveryKit.settle(server, id)
        #expect(entry.status == "held", "the relay's failure: held until it is fixed \(entry)")
        #expect(entry.lastError == "configuration")
    }
}
