import Foundation
import Testing
@testable import Jotter

/// `jotter relay` and `jotter relay invite` as command lines: flags, `JOTTER_RELAY_*` variables, and
/// clear refusals (a store URL is never repeated: it may hold a password). An invite from the command
/// works with a relay on either store.
@Suite(.holdingSharedPostgres) struct RelayCommandLineTests {
    static func parse(_ arguments: [String], environment: [String: String] = ["HOME": "/home/me"]) throws
        -> CommandLineOptions.Command {
        try CommandLineOptions.parse(arguments, environment: environment,
                                     sourceRoot: "/src/Sources/JotterCLI/main.swift")
    }

    static func configuration(_ arguments: [String], environment: [String: String] = ["HOME": "/home/me"]) throws
        -> RelayConfiguration {
        guard case .relay(let configuration) = try parse(["relay"] + arguments, environment: environment) else {
            throw CommandLineOptions.UsageError(description: "not a relay command")
        }
        return configuration
    }

    @Test func defaults() throws {
        let configuration = try Self.configuration([])
        #expect(configuration.dataDirectory == "/home/me/.local/share/jotter-relay")
        #expect(configuration.http.host == "127.0.0.1" && configuration.http.port == 7374)
        #expect(configuration.mail == nil && configuration.store == .sqlite && configuration.registration == .open)
        #expect(configuration.limits == RelayLimits())
        #expect(configuration.limits.devicePerMinute == 30 && configuration.limits.devicePerDay == 200)
        #expect(configuration.limits.ipPerHour == 120 && configuration.limits.globalPerDay == nil)
        #expect(configuration.idempotencyRetentionMilliseconds == 24 * 3_600_000)
        #expect(try Self.configuration([], environment: ["XDG_DATA_HOME": "/xdg"]).dataDirectory == "/xdg/jotter-relay")
    }

    @Test func flagsAndTheEnvironment() throws {
        let flags = try Self.configuration([
            "--host", "0.0.0.0", "--port=8080", "--data-dir", "/srv/relay", "--mail", "smtps://u:p@mail.example:465",
            "--registration", "invite", "--limit-device-minute", "10", "--limit-device-day", "off",
            "--limit-ip-hour", "50", "--limit-global-day", "1000", "--limit-ip-codes-hour", "off",
            "--limit-ip-registrations-hour", "3", "--idempotency-hours", "48", "--slots", "8", "--log-level", "debug",
            "--store", "sqlite",
        ])
        #expect(flags.http.host == "0.0.0.0" && flags.http.port == 8080 && flags.dataDirectory == "/srv/relay")
        #expect(flags.mail == "smtps://u:p@mail.example:465" && flags.registration == .invite)
        #expect(flags.limits.devicePerMinute == 10 && flags.limits.devicePerDay == nil && flags.limits.ipPerHour == 50)
        #expect(flags.limits.globalPerDay == 1000 && flags.limits.codeRequestsPerIPHour == nil)
        #expect(flags.limits.registrationsPerIPHour == 3)
        #expect(flags.idempotencyRetentionMilliseconds == 48 * 3_600_000 && flags.delivery.slots == 8)
        #expect(flags.logLevel == .debug)

        let environment = [
            "HOME": "/home/me", "JOTTER_RELAY_HOST": "::1", "JOTTER_RELAY_PORT": "9000",
            "JOTTER_RELAY_DATA_DIR": "/var/lib/relay", "JOTTER_RELAY_MAIL": "resend://re_x",
            "JOTTER_RELAY_REGISTRATION": "invite", "JOTTER_RELAY_LIMIT_GLOBAL_DAY": "500",
            "JOTTER_RELAY_LIMIT_DEVICE_MINUTE": "off", "JOTTER_RELAY_IDEMPOTENCY_HOURS": "2",
        ]
        let fromEnvironment = try Self.configuration([], environment: environment)
        #expect(fromEnvironment.http.host == "::1" && fromEnvironment.http.port == 9000)
        #expect(fromEnvironment.dataDirectory == "/var/lib/relay" && fromEnvironment.mail == "resend://re_x")
        #expect(fromEnvironment.registration == .invite && fromEnvironment.limits.globalPerDay == 500)
        #expect(fromEnvironment.limits.devicePerMinute == nil)
        #expect(fromEnvironment.idempotencyRetentionMilliseconds == 2 * 3_600_000)
        #expect(try Self.configuration(["--port", "1"], environment: environment).http.port == 1, "flags win")
    }

    @Test func aPostgreSQLStoreIsTakenAndABadOneRefusedWithoutRepeatingItsURL() throws {
        for url in ["postgres://relay:s3cret@db.example/relay", "postgresql://relay:s3cret@db/relay"] {
            #expect(try Self.configuration(["--store", url]).store == .postgres(url: url))
            #expect(try Self.configuration([], environment: ["JOTTER_RELAY_STORE": url]).store == .postgres(url: url))
        }
        for bad in ["postgres:", "postgres://", "postgres:s3cret@db"] {
            do {
                _ = try Self.configuration(["--store", bad])
                Issue.record("accepted \(bad)")
            } catch let error as CommandLineOptions.UsageError {
                #expect(error.description.contains("postgres://USER@HOST"))
                #expect(!error.description.contains("s3cret"))
            }
        }
        do {
            _ = try Self.configuration(["--store", "mysql://relay:s3cret@db/x"])
            Issue.record("accepted mysql")
        } catch let error as CommandLineOptions.UsageError {
            #expect(!error.description.contains("s3cret") && error.description.contains("not a store"))
        }
        #expect(try Self.configuration(["--store", "sqlite:"]).store == .sqlite)
        #expect(try Self.configuration(["--lease-seconds", "30"]).delivery.leaseMilliseconds == 30_000)
        for bad in ["4", "3601", "x"] {
            #expect(throws: CommandLineOptions.UsageError.self) { try Self.configuration(["--lease-seconds", bad]) }
        }
    }

    @Test func badValuesAreRefused() {
        let bad: [[String]] = [
            ["--registration", "closed"], ["--limit-device-minute", "0"], ["--limit-ip-hour", "-1"],
            ["--limit-global-day", "lots"], ["--idempotency-hours", "0"], ["--idempotency-hours", "721"],
            ["--port", "70000"], ["--slots", "0"], ["--bogus", "1"], ["--host"], ["--lan"],
            ["--mail", "maildir:/x", "--mail-file", "/nonexistent"],
        ]
        for arguments in bad {
            #expect(throws: CommandLineOptions.UsageError.self, "\(arguments)") { try Self.configuration(arguments) }
        }
    }

    /// A bad value from the environment (a unit file, a container) is named by its variable, which is
    /// what the operator wrote, for `serve` and `relay` alike; one from the command line by its flag.
    @Test func aBadValueFromTheEnvironmentIsNamedByItsVariable() {
        func refusal(_ arguments: [String], _ environment: [String: String]) -> String {
            var environment = environment
            environment["HOME"] = "/home/me"
            do {
                _ = try Self.parse(arguments, environment: environment)
                return "accepted"
            } catch {
                return "\(error)"
            }
        }
        #expect(refusal(["serve"], ["JOTTER_PORT": "abc"]) == "JOTTER_PORT must be a number from 0 to 65535")
        #expect(refusal(["serve", "--port", "abc"], ["JOTTER_PORT": "1"]) == "--port must be a number from 0 to 65535")
        #expect(refusal(["serve"], ["JOTTER_RATE_LIMIT": "lots"]).hasPrefix("JOTTER_RATE_LIMIT must be"))
        #expect(refusal(["serve"], ["JOTTER_HEADER_TIMEOUT": "0"]).hasPrefix("JOTTER_HEADER_TIMEOUT must be"))
        #expect(refusal(["serve"], ["JOTTER_RELAY_FILE": "/nonexistent/relay"])
            .hasPrefix("cannot read JOTTER_RELAY_FILE /nonexistent/relay"))
        #expect(refusal(["relay"], ["JOTTER_RELAY_PORT": "70000"]) == "JOTTER_RELAY_PORT must be a number from 0 to 65535")
        #expect(refusal(["relay"], ["JOTTER_RELAY_LIMIT_IP_HOUR": "-1"]).hasPrefix("JOTTER_RELAY_LIMIT_IP_HOUR must be"))
        #expect(refusal(["relay", "--limit-ip-hour", "-1"], [:]).hasPrefix("--limit-ip-hour must be"))
        // A flag whose value was forgotten before the next flag is said so, not "unknown option '0'".
        #expect(refusal(["relay", "--host", "--port", "0"], [:]) == "--host needs a value (--port is another option)")
        #expect(refusal(["serve", "--data-dir", "--lan"], [:]).hasPrefix("--data-dir needs a value"))
        #expect(refusal(["serve", "--data-dir", "--port=1"], [:]).hasPrefix("--data-dir needs a value"))
    }

    /// A PostgreSQL store that cannot be reached says why, in libpq's words (no server there, no such
    /// database, no such role), never with its password; all one "PostgreSQL connect" before.
    @Test func aPostgreSQLStoreThatCannotBeReachedSaysWhy() throws {
        let closed = try BrowserTests.freePort()
        func refusal(_ url: String) -> String {
            do {
                _ = try PostgresConnection(url: url)
                return "connected"
            } catch {
                return "\(error)"
            }
        }
        let down = refusal("postgres://relay:s3cret@127.0.0.1:\(closed)/relay?connect_timeout=5")
        #expect(down.hasPrefix("PostgreSQL connect: ") && down.contains("refused") && !down.contains("s3cret"), "\(down)")
        #expect(refusal("postgres://relay@127.0.0.1:\(closed)/relay?sslmode=bogus").contains("sslmode"))
        // libpq's complaints about the URL quote what they could not read: a password with a stray %, an
        // option's value. Neither is shown (a password with % was, in part, on stderr and in the journal).
        let badPercent = refusal("postgres://relay:CANARY%zzPASS@127.0.0.1:\(closed)/relay")
        #expect(!badPercent.contains("CANARY") && !badPercent.contains("zzPASS") && badPercent.contains("percent"), "\(badPercent)")
        let badOption = refusal("postgres://relay:pw@127.0.0.1:\(closed)/relay?sslmode=CANARYMODE")
        #expect(!badOption.contains("CANARYMODE") && badOption.contains("sslmode"), "\(badOption)")
        let badParameter = refusal("postgres://relay:pw@127.0.0.1:\(closed)/relay?CANARYPARAM=1")
        #expect(!badParameter.contains("CANARYPARAM"), "\(badParameter)")
        // A password after an @ in the query, or as a query parameter, is found all the same.
        #expect(PostgresConnection.withoutSecrets("could not connect: CANARYPW", url: "postgres://u:CANARYPW@h/db?application_name=a@b")
                == "could not connect: …")
        #expect(PostgresConnection.withoutSecrets("could not connect: CANARYQUERY", url: "postgres://h/db?user=u&password=CANARYQUERY")
                == "could not connect: …")
        guard PostgresCluster.available else { return }
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let url = database.url
        let missing = refusal(url + "_missing")
        #expect(missing.contains("does not exist") && missing.contains("_missing"), "\(missing)")
        let role = refusal(url.replacingOccurrences(of: "jotter@", with: "nobody_here:s3cret@"))
        #expect(role.contains("nobody_here") && !role.contains("s3cret"), "\(role)")
    }

    /// A certificate and key that do not belong together, or given the wrong way round, are said so at
    /// once: libmicrohttpd would only say it "failed to start".
    @Test func aTLSKeyThatIsNotTheCertificatesIsSaidSo() throws {
        let directory = TemporaryDirectory()
        let one = try TestCertificates.make(in: directory.file("one")), two = try TestCertificates.make(in: directory.file("two"))
        func refusal(_ certificate: String, _ key: String) -> String {
            do {
                _ = try Self.configuration(["--tls-cert", certificate, "--tls-key", key])
                return "accepted"
            } catch {
                return "\(error)"
            }
        }
        #expect(refusal(one.certificateFile, one.keyFile) == "accepted")
        #expect(refusal(one.certificateFile, two.keyFile).contains("is not the key of the certificate"))
        #expect(refusal(one.keyFile, one.certificateFile).contains("swapped"))
        // A key every user may read is refused; one its group reads (ssl-cert's 0640) is not.
        #expect(chmod(one.keyFile, 0o644) == 0)
        #expect(refusal(one.certificateFile, one.keyFile).contains("can be read by every user"))
        #expect(chmod(one.keyFile, 0o640) == 0)
        #expect(refusal(one.certificateFile, one.keyFile) == "accepted")
    }

    /// Plain HTTP beyond this machine, with no TLS proxy named, is warned about at start; on loopback, with
    /// TLS, or behind a named proxy it is not. (Decided from the configuration: tests bind only 127.0.0.1.)
    @Test func plainHTTPBeyondThisMachineIsWarnedAbout() throws {
        func warns(_ arguments: [String]) throws -> Bool {
            RelayApplication.servesPlainHTTPBeyondThisMachine(try Self.configuration(arguments))
        }
        let directory = TemporaryDirectory()
        let certificates = try TestCertificates.make(in: directory.file("certs"))
        #expect(try warns(["--host", "0.0.0.0"]) && warns(["--host", "192.0.2.7"]) && warns(["--host", "::"]))
        #expect(try !warns([]) && !warns(["--host", "127.0.0.1"]) && !warns(["--host", "::1"]))
        #expect(try !warns(["--host", "0.0.0.0", "--trust-proxy", "10.0.0.2"]))
        #expect(try !warns(["--host", "0.0.0.0", "--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile]))
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        #expect(!relay.logs.captured.contains("serving plain HTTP"), "on 127.0.0.1: \(relay.logs.captured)")
    }

    /// A relay's --mail must reach other people's inboxes: a markdown: note or another Jotter relay is
    /// refused at start, by name. A refused command line points at the relay's own help.
    @Test func aRelayRefusesMailThatReachesNoOnesInbox() throws {
        let directory = TemporaryDirectory()
        for mail in ["markdown:" + directory.file("notes"), "jotter+http://127.0.0.1:9/"] {
            #expect {
                _ = try RelayServer(dataDirectory: directory.file("relay-\(mail.prefix(4))")) { $0.mail = mail }
            } throws: { error in
                "\(error)".contains("not a markdown: note or another Jotter relay")
            }
        }
        // An SMTP URL without from=: a relay asks for from= only (its messages each name their recipient).
        #expect {
            _ = try RelayServer(dataDirectory: directory.file("relay-smtp")) { $0.mail = "smtp://u:p@127.0.0.1:9?tls=none" }
        } throws: { error in
            "\(error)".contains("set ?from= (or use an address") && !"\(error)".contains("?to=")
        }
        #expect(throws: RelayURL.Failure.invalid("set ?from= and ?to= (or use an address as the user name)")) {
            _ = try RelayURL("smtp://u:p@127.0.0.1:9?tls=none")
        }
        // A user name with a line break is no address: it would have split a header and RCPT TO.
        #expect(throws: RelayURL.Failure.invalid("set ?from= and ?to= (or use an address as the user name)")) {
            _ = try RelayURL("smtp://me%40example.com%0D%0ABcc%3A%20evil%40example.net:pw@127.0.0.1:9?tls=none")
        }
        #expect(try RelayURL("smtp://me%40example.com:pw@127.0.0.1:9?tls=none").destination.hasSuffix("→ me@example.com"))
        let refused = try LiveServerTests.JotterBinary.run(["relay", "--port", "x"])
        #expect(refused.status == 64 && refused.standardError.contains("Try 'jotter relay --help'."), "\(refused.standardError)")
        let plain = try LiveServerTests.JotterBinary.run(["bogus"])
        #expect(plain.standardError.contains("Try 'jotter --help'."))
    }

    /// The server's notices never reach standard error bare, through libpq's own printer: their text may
    /// quote a row, and they landed between the log's lines without time or level.
    @Test func postgreSQLNoticesAreNotPrintedByLibpq() throws {
        guard PostgresCluster.available else { return }
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let connection = try PostgresConnection(url: database.url)
        let directory = TemporaryDirectory()
        let file = directory.file("stderr")
        let capture = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        try #require(capture >= 0)
        fflush(nil)
        let saved = dup(2)
        dup2(capture, 2)
        let ran = Result { try connection.execute("DO $$ BEGIN RAISE WARNING 'a notice quoting ana@example.com'; END $$") }
        fflush(nil)
        dup2(saved, 2)
        close(saved)
        close(capture)
        #expect((try? ran.get()) != nil)
        let printed = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        #expect(!printed.contains("ana@example.com"), "\(printed)")
    }

    @Test func theMailURLCanComeFromAFile() throws {
        let directory = TemporaryDirectory()
        try "\n  resend://re_secret?from=relay@example.com  \n".write(toFile: directory.file("mail"), atomically: true,
                                                                     encoding: .utf8)
        #expect(try Self.configuration(["--mail-file", directory.file("mail")]).mail
            == "resend://re_secret?from=relay@example.com")
    }

    /// `--relay-file` and `--mail-file` keep a password or an API key out of `ps`: one every user of the
    /// machine can read is refused (it was read silently at 0644); its group may read it, and a file in a
    /// directory others cannot pass through is nobody else's either.
    @Test func aCredentialsFileEveryUserCanReadIsRefused() throws {
        let directory = TemporaryDirectory()
        #expect(chmod(directory.path, 0o755) == 0)
        let file = directory.file("relay")
        try "smtp://me:s3cret@mail.example.com?from=me@example.com&to=me@example.com\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        #expect(chmod(file, 0o644) == 0)
        for (command, flag) in [("serve", "--relay-file"), ("relay", "--mail-file")] {
            #expect {
                _ = try CommandLineOptions.parse([command, flag, file], environment: [:], sourceRoot: #filePath)
            } throws: { "\($0)".contains("\(flag) \(file) can be read by every user of this machine (mode 644)") }
        }
        #expect(chmod(file, 0o640) == 0)
        #expect(throws: Never.self) { try CommandLineOptions.parse(["serve", "--relay-file", file], environment: [:], sourceRoot: #filePath) }
        #expect(chmod(file, 0o644) == 0 && chmod(directory.path, 0o700) == 0)
        #expect(throws: Never.self, "a private directory") {
            try CommandLineOptions.parse(["serve", "--relay-file", file], environment: [:], sourceRoot: #filePath)
        }
    }

    @Test func helpAndInvite() throws {
        guard case .help(let text) = try Self.parse(["relay", "--help"]) else {
            Issue.record("no help")
            return
        }
        #expect(text.contains("jotter relay invite") && text.contains("JOTTER_RELAY_MAIL"))
        #expect(CommandLineOptions.help.contains("jotter relay"))
        guard case .relayInvite(let directory, let store) = try Self.parse(["relay", "invite", "--data-dir", "/srv/r"]) else {
            Issue.record("not an invite")
            return
        }
        #expect(directory == "/srv/r" && store == .sqlite)
        guard case .relayInvite(let fromEnvironment, let shared) = try Self.parse(
            ["relay", "invite", "--store=postgres://db/relay"], environment: ["JOTTER_RELAY_DATA_DIR": "/env/r"]) else {
            Issue.record("not an invite")
            return
        }
        #expect(fromEnvironment == "/env/r" && shared == .postgres(url: "postgres://db/relay"))
        #expect(throws: CommandLineOptions.UsageError.self) { try Self.parse(["relay", "invite", "extra"]) }
    }

    @Test(arguments: RelayStoreKind.available)
    func anInviteFromTheCommandWorksOnceWithTheRelay(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let data = directory.file("relay")
        #expect(throws: CommandLineOptions.UsageError.self, "no relay there yet") {
            try RelayInviteCommand.run(dataDirectory: data, store: store.location)
        }
        let relay = try RelayServer(dataDirectory: data, store: store) { $0.registration = .invite }
        defer { relay.stop() }
        // While the relay runs: the store arbitrates.
        let printed = try RelayInviteCommand.run(dataDirectory: data, store: store.location)
        let invite = try #require(printed.split(separator: "\n").first.map(String.init))
        #expect(invite.hasPrefix("jri_") && printed.contains("works once"))
        #expect(try relay.json("POST", "/v1/devices", ["invite": invite]).status == 201)
        #expect(try relay.json("POST", "/v1/devices", ["invite": invite]).errorCode == "invite_invalid")
    }

    @Test func resendURLsGetAPlaceholderRecipientOnlyWhenTheyHaveNone() throws {
        #expect(RelayApplication.withRecipientPlaceholder("resend://re_x?from=a@b.c")
            == "resend://re_x?from=a@b.c&to=recipient@relay.invalid")
        #expect(RelayApplication.withRecipientPlaceholder("resend://re_x?to=me@b.c") == "resend://re_x?to=me@b.c")
        #expect(RelayApplication.withRecipientPlaceholder("smtps://u:p%40ss@h:465") == "smtps://u:p%40ss@h:465")
        #expect(try RelayURL(RelayApplication.withRecipientPlaceholder("resend://re_x")).scheme == "resend")
    }

    /// A flag wins over the environment, also over the other spelling of the same setting: the service
    /// unit's --relay-file stands though JOTTER_RELAY is set in the session.
    @Test func aFlagWinsOverEitherSpellingInTheEnvironment() throws {
        let directory = TemporaryDirectory()
        try "maildir:/from/file\n".write(toFile: directory.file("relay"), atomically: true, encoding: .utf8)
        let serve = try CommandLineOptions.parse(["serve", "--relay-file", directory.file("relay")],
                                                 environment: ["JOTTER_RELAY": "maildir:/from/env"], sourceRoot: #filePath)
        guard case .serve(let configuration) = serve else { Issue.record("not serve"); return }
        #expect(configuration.relay == "maildir:/from/file")
        let direct = try CommandLineOptions.parse(["serve", "--relay", "maildir:/from/flag"],
                                                  environment: ["JOTTER_RELAY_FILE": directory.file("relay")], sourceRoot: #filePath)
        guard case .serve(let flagged) = direct else { Issue.record("not serve"); return }
        #expect(flagged.relay == "maildir:/from/flag")
        #expect(throws: CommandLineOptions.UsageError.self) {
            try CommandLineOptions.parse(["serve", "--relay", "maildir:/a", "--relay-file", directory.file("relay")],
                                         environment: [:], sourceRoot: #filePath)
        }
        let relay = try CommandLineOptions.parse(["relay", "--mail-file", directory.file("relay")],
                                                 environment: ["JOTTER_RELAY_MAIL": "maildir:/from/env"], sourceRoot: #filePath)
        guard case .relay(let relayConfiguration) = relay else { Issue.record("not relay"); return }
        #expect(relayConfiguration.mail == "maildir:/from/file")
    }
}
