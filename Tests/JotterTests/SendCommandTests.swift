import Foundation
import Synchronization
import Testing
@testable import Jotter

/// `jotter send` and `jotter history`, the real binary against a live server: what a cron job sees.
@Suite struct SendCommandTests {
    struct Finished {
        var status: Int32
        var output: String
        var error: String
    }

    /// Runs the built `jotter` with `arguments`, `input` on stdin, until it exits (killed after `timeout`).
    static func jotter(_ arguments: [String], input: [UInt8]? = nil, timeout: Double = 90) throws -> Finished {
        let finished = try LiveServerTests.JotterBinary.run(arguments, input: input, timeout: timeout)
        return Finished(status: finished.status, output: finished.standardOutput, error: finished.standardError)
    }

    static func delivered(_ server: TestServer) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: server.maildir + "/new")) ?? []).map {
            (try? String(contentsOfFile: server.maildir + "/new/" + $0, encoding: .utf8)) ?? ""
        }
    }

    @Test func sendsArgumentsStdinAndFilesAndSaysSo() throws {
        try #require(FileManager.default.isExecutableFile(atPath: LiveServerTests.JotterBinary.path))
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"

        let plain = try Self.jotter(["send", "--url", url, "buy", "milk"])
        #expect(plain.status == 0, "\(plain.error)")
        #expect(plain.output.hasPrefix("Sent ("))

        let piped = try Self.jotter(["send", "--url", url, "--json"], input: Array("from a pipe\nline two".utf8))
        #expect(piped.status == 0, "\(piped.error)")
        let id = try #require((try? JSONValue.parse(Array(piped.output.utf8)))?["id"]?.string)
        #expect(try server.outbox.history.record(id: id) != nil)

        try "notes from a file".write(toFile: directory.file("notes.txt"), atomically: true, encoding: .utf8)
        let filed = try Self.jotter(["send", "--url", url, "-q", "-s", "Weekly", "-f", directory.file("notes.txt")])
        #expect(filed.status == 0 && filed.output.isEmpty, "--quiet: \(filed.output)")
        let latest = try #require(try server.outbox.history.latest(limit: 1).first)
        #expect(latest.subject == "Weekly")

        #expect(server.waitUntil(timeout: 30) { Self.delivered(server).count == 3 })

        let table = try Self.jotter(["history", "--url", url, "-n", "2"])
        #expect(table.status == 0)
        let lines = table.output.split(separator: "\n")
        #expect(lines.count == 3, "a header and two memos: \(table.output)")
        #expect(lines.first?.hasPrefix("ACCEPTED") == true)
        #expect(lines.dropFirst().allSatisfy { $0.contains("sent") })
        #expect(lines[1].contains("Weekly"))
    }

    @Test func refusalsAndAbsenceHaveTheirOwnExitStatus() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 2048)
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"
        let empty = try Self.jotter(["send", "--url", url])
        #expect(empty.status == 64, "nothing to send is a usage error")
        let tooLarge = try Self.jotter(["send", "--url", url, String(repeating: "x", count: 5000)])
        #expect(tooLarge.status == 65, "\(tooLarge.error)")
        #expect(tooLarge.error.contains("413"))
        let port = try BrowserTests.freePort()
        let nobody = try Self.jotter(["send", "--url", "http://127.0.0.1:\(port)", "--retry-for", "1", "hello"])
        #expect(nobody.status == 69)
        #expect(nobody.error.contains("nothing was sent"))
        #expect(try server.outbox.history.acceptedCount() == 0)
    }

    /// Mistakes retrying cannot mend end at once, each with its own status and a plain reason.
    @Test func mistakesEndAtOnceWithTheirOwnStatus() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"
        // --url with the path of README's curl examples: not a server to wait for.
        let wrongPath = try Self.jotter(["send", "--url=" + url + "/send", "hello"], timeout: 30)
        #expect(wrongPath.status == 64, "\(wrongPath.error)")
        #expect(wrongPath.error.contains("--url is the server's base"))
        let history = try Self.jotter(["history", "--url=" + url + "/send"], timeout: 30)
        #expect(history.status == 64, "\(history.error)")
        // Bytes that are not text, and options that do not exist: usage errors (64), said once.
        let binary = try Self.jotter(["send", "--url", url], input: [0xFF, 0xFE, 0x20, 0x62])
        #expect(binary.status == 64 && binary.error.contains("not UTF-8"), "\(binary.error)")
        // A file that is not there is said so, not "cannot read … as UTF-8 text".
        let missing = try Self.jotter(["send", "--url", url, "-f", directory.file("nowhere.txt")])
        #expect(missing.status == 64 && missing.error.contains("No such file or directory"), "\(missing.error)")
        // pair, rekey and service have no help of their own: --help shows jotter's, not a usage error.
        for command in ["pair", "rekey", "service"] {
            let help = try Self.jotter([command, "--help"])
            #expect(help.status == 0 && help.output.contains("jotter rekey"), "\(command): \(help.error)")
        }
        // Words a command does not take are refused, not ignored.
        let both = try Self.jotter(["send", "--url", url, "-q", "--json", "x"])
        #expect(both.status == 64 && both.error.contains("-q or --json"), "\(both.error)")
        let extra = try Self.jotter(["devices", "list", "extra", "--data-dir", directory.path])
        #expect(extra.status == 64 && extra.error.contains("usage: jotter devices [list]"), "\(extra.error)")
        let bogus = try Self.jotter(["send", "--bogus"])
        #expect(bogus.status == 64, "\(bogus.error)")
        #expect(bogus.error.hasPrefix("jotter send: unknown option --bogus"), "\(bogus.error)")
        #expect(try server.outbox.history.acceptedCount() == 0)
    }

    /// Exit 0 means a Jotter has the memo: another server's `200` (a captive portal, a mail API, a
    /// redirect) is a wrong `--url`, said at once; a URL no retry can reach ends at once too; and a
    /// password in `--url` is never echoed.
    @Test func onlyAJotterStoringTheMemoIsSuccess() throws {
        let directory = TemporaryDirectory()
        let other = try ScriptedRelay(directory: directory.file("other"))  // answers POST /emails with 200 {"id"}
        defer { other.stop() }
        // The fragment is not sent: the request is POST /emails, which it answers 200 with JSON.
        let answered = try Self.jotter(["send", "--url", "http://127.0.0.1:\(other.port)/emails#", "hello"], timeout: 30)
        #expect(answered.status == 64, "\(answered.status) \(answered.output) \(answered.error)")
        #expect(answered.error.contains("answered 200 without a memo id"), "\(answered.error)")
        #expect(answered.output.isEmpty)

        let started = Date()
        for url in ["ftp://127.0.0.1/", "htp://127.0.0.1:7373", "not a url", "http://", "http://:7373"] {
            let refused = try Self.jotter(["send", "--url", url, "hello"], timeout: 30)
            #expect(refused.status == 64, "\(url): \(refused.error)")
            #expect(refused.error.contains("is not a server's address"), "\(url): \(refused.error)")
        }
        #expect(Date().timeIntervalSince(started) < 25, "not retried for a minute each")

        // An ordinary web server (a mistyped port): it knows no POST (501) and has no /history (404).
        // Neither is a Jotter, and no retry makes one: said at once, exit 64.
        let web = try FixtureProcess(script: "plain_http_server.py", arguments: [directory.path],
                                     errorPath: directory.file("web.stderr"))
        defer { web.stop() }
        let posted = try Self.jotter(["send", "--url", "http://127.0.0.1:\(web.port)", "--retry-for", "20", "x"], timeout: 30)
        #expect(posted.status == 64 && posted.error.contains("no Jotter at"), "\(posted.status) \(posted.error)")
        let listed = try Self.jotter(["history", "--url", "http://127.0.0.1:\(web.port)"], timeout: 30)
        #expect(listed.status == 64 && listed.error.contains("no Jotter at"), "\(listed.status) \(listed.error)")

        let port = try BrowserTests.freePort()
        let secret = "s3cr3t-proxy-pw"
        let unreachable = try Self.jotter(["send", "--url", "http://bob:\(secret)@127.0.0.1:\(port)", "--retry-for", "1", "x"])
        #expect(unreachable.status == 69)
        #expect(unreachable.error.contains("http://127.0.0.1:\(port)") && !unreachable.error.contains(secret),
                "\(unreachable.error)")
        let history = try Self.jotter(["history", "--url", "http://bob:\(secret)@127.0.0.1:\(port)"])
        #expect(history.status == 69 && !history.error.contains(secret), "\(history.error)")
    }

    /// A reader that hangs up before the answer is printed (`jotter send x | true`) does not turn a stored
    /// memo into a failure (SIGPIPE's exit 141: a script retrying on failure sent it twice); and a runaway
    /// pipe (`yes | jotter send`) is refused at 64 MiB without being read into memory.
    @Test func aClosedOutputIsNoFailureAndAnEndlessInputIsNotKept() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let script = """
            import os, resource, subprocess, sys, threading
            jotter, url = sys.argv[1], sys.argv[2]
            read, write = os.pipe()
            os.close(read)  # nobody reads the output
            status = subprocess.run([jotter, 'send', '--url', url, 'a memo for a closed pipe'], stdout=write,
                                    stderr=subprocess.DEVNULL, timeout=60).returncode
            os.close(write)
            process = subprocess.Popen([jotter, 'send', '--url', url], stdin=subprocess.PIPE,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            def feed():
                chunk = b'y\\n' * 32768
                try:
                    while True:
                        process.stdin.write(chunk)
                except (BrokenPipeError, ValueError, OSError):
                    pass
            threading.Thread(target=feed, daemon=True).start()
            error = process.stderr.read().decode()
            endless = process.wait(timeout=120)
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
            print(status, endless, peak, error.strip().replace('\\n', ' '))
            """
        let fields = try Python.run(script, arguments: [LiveServerTests.JotterBinary.path, "http://127.0.0.1:\(server.port)"])
            .split(separator: " ", maxSplits: 3).map(String.init)
        try #require(fields.count == 4, "\(fields)")
        #expect(fields[0] == "0", "stored, and said so to a closed pipe: exit \(fields[0])")
        #expect(try server.outbox.history.acceptedCount() == 1)
        #expect(fields[1] == "65" && fields[3].contains("over 64 MiB"), "\(fields)")
        #expect((Int(fields[2]) ?? .max) < 400, "peak memory \(fields[2]) MiB for an endless input")
    }

    /// `jotter history` shows times in this machine's time zone (it showed the server's UTC digits
    /// without their Z, 9 hours off in Tokyo: `JST-9`, a POSIX zone that needs no tzdata), and a right-to-left override in a subject cannot
    /// reverse the rest of the terminal line.
    @Test func historyShowsLocalTimesAndNoBidiOverride() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let sent = try server.route("POST", "/send", headers: [("Content-Type", "application/json")],
                                    body: Array(#"{"subject":"‮gnp.exe","body":"x"}"#.utf8))
        let id = try #require(sent.header("X-Message-Id"))
        let created = try #require(try server.outbox.history.record(id: id)).createdAt
        let listed = try LiveServerTests.JotterBinary.run(
            ["TZ=JST-9", LiveServerTests.JotterBinary.path, "history", "--url", "http://127.0.0.1:\(server.port)"],
            executable: "/usr/bin/env")
        #expect(listed.status == 0, "\(listed.standardError)")
        let row = try #require(listed.standardOutput.split(separator: "\n").dropFirst().first.map(String.init))
        let tokyo = String(Timestamp.iso8601(milliseconds: created + 9 * 3_600_000).prefix(19)).replacingOccurrences(of: "T", with: " ")
        #expect(row.hasPrefix(tokyo), "\(row) — expected \(tokyo)")
        #expect(!row.unicodeScalars.contains("\u{202E}") && row.contains("gnp.exe"), "\(row)")
    }

    /// The table lines up as a terminal draws it: subjects in Japanese, Korean and emoji (two columns a
    /// character) and with combining accents (none) do not push the NOTE column out of line, and a long
    /// wide subject is cut at 40 columns, not 40 characters.
    @Test func historyColumnsLineUpForWideSubjects() throws {
        let subjects = ["buy milk", "牛乳を買う", "우유 사기", "👍🏽 done 🇫🇷", "cafe\u{301} au lait",
                        String(repeating: "長", count: 30)]
        let entries = try JSONValue.parse(Array(("[" + subjects.map { subject in
            #"{"created_at":"2026-12-07T08:33:05.123Z","status":"retrying","attempts":2,"subject":"\#(subject)","last_error":"timeout"}"#
        }.joined(separator: ",") + "]").utf8))
        guard case .array(let list) = entries else { Issue.record("not a list"); return }
        let lines = HistoryCommand.table(list).split(separator: "\n").map(String.init)
        try #require(lines.count == subjects.count + 1)
        // Where NOTE (or "timeout") starts, in columns.
        let starts = lines.map { line -> Int in
            let marker = line.hasPrefix("ACCEPTED") ? "NOTE" : "timeout"
            let head = line.components(separatedBy: marker)[0]
            return TerminalColumns.count(head)
        }
        #expect(Set(starts).count == 1, "\(lines.joined(separator: "\n"))")
        let long = try #require(lines.last)
        #expect(long.contains(String(repeating: "長", count: 19) + "…") && !long.contains(String(repeating: "長", count: 20)),
                "39 columns of a wide subject hold 19 of its characters: \(long)")
    }

    /// A LAN server answers over HTTPS with a certificate of its own CA: `--ca` trusts it; without it
    /// the command says what to do at once instead of waiting a minute for "no answer".
    @Test func aLANServerIsReachedWithItsOwnCA() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.lanAddresses = []
        }
        defer { server.stop() }
        let url = "https://127.0.0.1:\(server.port)"
        let untrusted = try Self.jotter(["send", "--url", url, "--retry-for", "60", "hello"], timeout: 30)
        #expect(untrusted.status == 77, "\(untrusted.error)")
        #expect(untrusted.error.contains("--ca"), "\(untrusted.error)")
        let ca = directory.file("data") + "/tls/ca.pem"
        let sent = try Self.jotter(["send", "--url", url, "--ca", ca, "over TLS"])
        #expect(sent.status == 0, "\(sent.error)")
        let listed = try Self.jotter(["history", "--url", url, "--ca", ca])
        #expect(listed.status == 0 && ["queued", "sending", "sent"].contains { listed.output.contains($0) }, "\(listed.output)")
        #expect(try server.outbox.history.acceptedCount() == 1)
        // http:// to it: the server drops the plain request unanswered. Said at once (it retried the whole
        // window, then said the memo "may have reached the server"), with the URL to use.
        let plain = "http://127.0.0.1:\(server.port)"
        let started = Date()
        let mistaken = try Self.jotter(["send", "--url", plain, "--retry-for", "60", "plain"], timeout: 50)
        #expect(mistaken.status == 64 && mistaken.error.contains("use --url \(url)") && mistaken.error.contains("nothing was sent"),
                "\(mistaken.status) \(mistaken.error)")
        #expect(Date().timeIntervalSince(started) < 40)
        let history = try Self.jotter(["history", "--url", plain], timeout: 50)
        #expect(history.status == 64 && history.error.contains("speaks HTTPS"), "\(history.error)")
        #expect(try server.outbox.history.acceptedCount() == 1)
    }

    /// `JOTTER_CA` is for HTTPS: left set (for a LAN server, say), it does not stop a send to a plain-HTTP
    /// server, which has no certificate to check (it exited 64, "cannot read the CA file").
    @Test func theCAFromTheEnvironmentIsForHTTPSOnly() throws {
        let environment = ["JOTTER_CA": "/nonexistent/ca.pem", "HOME": "/nonexistent"]
        #expect(CommandLineOptions.defaultCA(url: "http://127.0.0.1:7373", environment: environment) == nil)
        #expect(CommandLineOptions.defaultCA(url: "HTTPS://192.0.2.1:7373", environment: environment)
            == "/nonexistent/ca.pem")
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let sent = try LiveServerTests.JotterBinary.run(["send", "--url", "http://127.0.0.1:\(server.port)", "plain"],
                                                        environment: ["JOTTER_CA": "/nonexistent/ca.pem"], timeout: 60)
        #expect(sent.status == 0, "\(sent.standardError)")
    }

    /// The answer is lost on its way back after the server stored the memo: the client must not say
    /// "nothing was sent", and must say how to send it again so that it is taken at most once.
    @Test func aLostAnswerSaysTheMemoMayBeStoredAndHowToSendItOnce() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let dropper = try FixtureProcess(script: "answer_dropper.py", arguments: [String(server.port)],
                                         errorPath: directory.file("dropper.stderr"))
        defer { dropper.stop() }
        let lost = try Self.jotter(["send", "--url", "http://127.0.0.1:\(dropper.port)", "--retry-for", "2",
                                    "a memo whose answer is lost"])
        #expect(lost.status == 69, "\(lost.error)")
        #expect(!lost.error.contains("nothing was sent"), "\(lost.error)")
        #expect(lost.error.contains("may have reached the server"), "\(lost.error)")
        let key = try #require(lost.error.firstMatch(of: #/--key ([!-~]+),/#).map { String($0.1) }, "\(lost.error)")
        let stored = try server.outbox.history.acceptedCount()
        let proxyErrors = (try? String(contentsOfFile: directory.file("dropper.stderr"), encoding: .utf8)) ?? ""
        #expect(stored == 1, "stored once, however often it was tried: \(stored) \(lost.error) \(proxyErrors)")

        let url = "http://127.0.0.1:\(server.port)"
        let again = try Self.jotter(["send", "--url", url, "--key", key, "--json", "a memo whose answer is lost"])
        #expect(again.status == 0, "\(again.error)")
        #expect(try server.outbox.history.acceptedCount() == 1, "the second run took it at most once")
        let other = try Self.jotter(["send", "--url", url, "--key", key, "another memo"])
        #expect(other.status == 65 && other.error.contains("409"), "a key is one memo's: \(other.error)")
        let badKey = try Self.jotter(["send", "--url", url, "--key", "two words", "x"])
        #expect(badKey.status == 64, "\(badKey.error)")
    }

    /// The memo goes as it is: markup, quotes and control characters do not grow the request past the
    /// server's cap the way JSON's escapes would, and arrive exactly.
    @Test func aMemoUnderTheCapIsNotRefusedForItsEncoding() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 64 * 1024)
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"
        let markup = String(repeating: "<p>Hello &amp; \"welcome\"</p>\n", count: 1_800)  // 55,800 bytes
        try markup.write(toFile: directory.file("page.html"), atomically: true, encoding: .utf8)
        let filed = try Self.jotter(["send", "--url", url, "-s", "Markup", "-f", directory.file("page.html")])
        #expect(filed.status == 0, "\(filed.error)")
        let controls = [UInt8](repeating: 0x01, count: 20_000) + Array(" and text".utf8)
        let piped = try Self.jotter(["send", "--url", url], input: controls)
        #expect(piped.status == 0, "\(piped.error)")
        #expect(server.waitUntil(timeout: 30) { Self.delivered(server).count == 2 })
        let files = try FileManager.default.contentsOfDirectory(atPath: server.maildir + "/new").map { server.maildir + "/new/" + $0 }
        let bodies = try Python.parseMessages(atPaths: files).compactMap { $0["body"] as? String }
        // A reader gets the memo followed by one line break, whatever its encoding (MailMessageTests).
        #expect(bodies.contains(markup + "\n"), "the markup arrived exactly")
        #expect(bodies.contains { $0.hasSuffix(" and text\n") && $0.utf8.filter { $0 == 0x01 }.count == 20_000 })
    }

    /// The server's cap is on the request's bytes; without a subject, `jotter send` sends the memo's bytes
    /// alone, so a memo at the cap is taken as `curl --data-binary` would have it taken, and one byte more
    /// is refused by the server (413), not lost or cut.
    @Test func aMemoAtTheCapIsTakenAndOneByteMoreIsRefused() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"), maxBodyBytes: 64 * 1024)
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)"
        let atCap = String(repeating: "é", count: 32_767) + "ab"  // 65,536 bytes
        #expect(atCap.utf8.count == 64 * 1024)
        let taken = try Self.jotter(["send", "--url", url], input: Array(atCap.utf8))
        #expect(taken.status == 0, "\(taken.error)")
        let over = try Self.jotter(["send", "--url", url], input: Array((atCap + "c").utf8))
        #expect(over.status == 65 && over.error.contains("413"), "\(over.status) \(over.error)")
        #expect(server.waitUntil(timeout: 30) { Self.delivered(server).count == 1 })
        let files = try FileManager.default.contentsOfDirectory(atPath: server.maildir + "/new").map { server.maildir + "/new/" + $0 }
        let bodies = try Python.parseMessages(atPaths: files).compactMap { $0["body"] as? String }
        // Base64 (the memo is not ASCII) carries the message's CRLF line ends, which Python leaves as they are.
        let arrived = bodies.map { $0.replacingOccurrences(of: "\r\n", with: "\n") }
        #expect(arrived.count == 1 && arrived.first == atCap + "\n",
                "the memo at the cap arrived whole: \(arrived.map { ($0.utf8.count, $0.suffix(8)) })")
        #expect(try server.outbox.history.acceptedCount() == 1)
    }

    /// A wrong token once locked out (429 too_many_attempts) is still a wrong token: 77 at once, not a
    /// minute of waiting and 75; a --ca file that cannot be read is a usage error, not "not trusted".
    @Test func aLockedOutTokenAndAMissingCAEndAtOnce() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.lanTrustsLoopback = false
            $0.lanAddresses = []
        }
        defer { server.stop() }
        for _ in 0..<12 {
            _ = try server.route("GET", "/history", headers: [("Authorization", "Bearer wrong-token")])
        }
        let url = "https://127.0.0.1:\(server.port)", ca = directory.file("data") + "/tls/ca.pem"
        let started = Date()
        let locked = try Self.jotter(["send", "--url", url, "--ca", ca, "--token", "wrong-token", "hello"])
        #expect(locked.status == 77, "\(locked.error)")
        #expect(locked.error.contains("too_many_attempts"), "\(locked.error)")
        #expect(Date().timeIntervalSince(started) < 30, "not the retry loop")
        let history = try Self.jotter(["history", "--url", url, "--ca", ca, "--token", "wrong-token"])
        #expect(history.status == 77, "\(history.error)")
        let missing = try Self.jotter(["send", "--url", url, "--ca", directory.file("no-such-ca.pem"), "hello"])
        #expect(missing.status == 64 && missing.error.contains("cannot read the CA file"), "\(missing.error)")
        #expect(try server.outbox.history.acceptedCount() == 0)
    }

    /// The server restarts while `jotter send` is trying: the client keeps trying with the same
    /// Idempotency-Key, and the memo arrives exactly once.
    @Test func aRestartDuringTheRetryLoopLosesNothingAndSendsOnce() throws {
        let directory = TemporaryDirectory()
        let port = try BrowserTests.freePort()
        // Something on the port that hangs up on every connection (a server going down), counting them.
        let refuser = try HangUpListener(port: port)
        let result = Mutex<Finished?>(nil)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            let finished = try? Self.jotter(["send", "--url", "http://127.0.0.1:\(port)", "--retry-for", "60",
                                             "--json", "written during a restart"])
            result.withLock { $0 = finished }
            done.signal()
        }
        #expect(TestServer.waitUntil(timeout: 30) { refuser.connections >= 2 }, "the client retried")
        refuser.stop()
        let server = try BrowserTests.startServer(dataDirectory: directory.file("data")) { $0.http.port = port }
        defer { server.stop() }
        #expect(done.wait(timeout: .now() + 90) == .success)
        let finished = try #require(result.withLock { $0 })
        #expect(finished.status == 0, "\(finished.error)")
        #expect(server.waitUntil(timeout: 30) { Self.delivered(server).count == 1 })
        #expect(try server.outbox.history.acceptedCount() == 1)
    }
}

/// A TCP listener on 127.0.0.1:`port` that accepts and at once closes every connection.
final class HangUpListener: Sendable {
    private final class State: Sendable {
        let count = Atomic<Int>(0)
        let running = Atomic<Bool>(true)
        let closed = Atomic<Bool>(false)
    }

    private let state = State()

    init(port: Int) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 16) == 0 else {
            close(listener)
            throw RawHTTP.Failure(description: "cannot listen on \(port)")
        }
        let state = state
        Thread.detachNewThread {
            while state.running.load(ordering: .acquiring) {
                var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 50) > 0 else { continue }
                let client = accept(listener, nil, nil)
                if client >= 0 {
                    state.count.add(1, ordering: .relaxed)
                    close(client)
                }
            }
            close(listener)
            state.closed.store(true, ordering: .releasing)
        }
    }

    var connections: Int { state.count.load(ordering: .relaxed) }

    func stop() {
        state.running.store(false, ordering: .releasing)
        // The listening socket closes on its thread: wait until it has, so the port is free.
        let state = state
        _ = TestServer.waitUntil(timeout: 10) { state.closed.load(ordering: .acquiring) }
    }
}
