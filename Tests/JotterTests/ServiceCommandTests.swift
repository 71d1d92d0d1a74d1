import Foundation
import Testing
@testable import Jotter

/// `jotter service`: the systemd user unit it writes (verified by systemd's own checker), and what
/// install and uninstall do (systemctl stubbed: these machines have no user session).
@Suite struct ServiceCommandTests {
    static func configuration(_ arguments: [String], environment: [String: String] = [:]) throws -> Configuration {
        guard case .service(_, let configuration) = try CommandLineOptions.parse(
            ["service", "--print"] + arguments, environment: environment, sourceRoot: #filePath) else {
            throw CommandLineOptions.UsageError(description: "not a service command")
        }
        return configuration
    }

    @Test func theUnitPassesSystemdAnalyzeVerifyAndHoldsNoSecret() throws {
        let directory = TemporaryDirectory()
        let configuration = try Self.configuration([
            "--data-dir", directory.file("data"), "--port", "7474", "--warn-after", "600", "--lan",
            "--relay", "smtps://ana%40example.com:S3cret-Pass@smtp.example.com:465",
        ])
        let unit = ServiceCommand.unit(binary: LiveServerTests.JotterBinary.path, configuration: configuration,
                                       relayFile: directory.file("data/relay"))
        #expect(!unit.contains("S3cret"), "a unit's ExecStart is readable by every user")
        // (No PrivateTmp: the test's data directory is in /tmp, see aPathInTmpKeepsTheMachinesTmp.)
        for directive in ["Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                          "PrivateUsers=yes",
                          "ReadWritePaths=\(directory.file("data"))", "RestrictAddressFamilies=",
                          "WantedBy=default.target", "--relay-file \(directory.file("data/relay"))",
                          "--port 7474", "--lan", "--warn-after 600"] {
            #expect(unit.contains(directive), "missing \(directive)")
        }
        // The unit's command line means what the user asked for: parsed back, the same configuration.
        let execStart = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
        let words = execStart.dropFirst("ExecStart=".count).split(separator: " ").map(String.init)
        try #require(words.count > 2)
        try "smtps://ana%40example.com:S3cret-Pass@smtp.example.com:465\n".write(
            toFile: directory.file("data-relay"), atomically: true, encoding: .utf8)
        let reparsed = words.dropFirst().map { $0 == directory.file("data/relay") ? directory.file("data-relay") : $0 }
        guard case .serve(let again) = try CommandLineOptions.parse(Array(reparsed), environment: [:],
                                                                     sourceRoot: #filePath) else {
            Issue.record("the unit's ExecStart does not parse as serve")
            return
        }
        #expect(again.http.port == 7474 && again.lan && again.delivery.warnAfterMilliseconds == 600_000)
        #expect(again.relay == configuration.relay)
        #expect(again.dataDirectory == configuration.dataDirectory)
        let path = directory.file("jotter.service")
        try unit.write(toFile: path, atomically: true, encoding: .utf8)
        let analyze = "/usr/bin/systemd-analyze"
        try #require(FileManager.default.isExecutableFile(atPath: analyze), "systemd-analyze (Debian's systemd) is a test dependency")
        let verified = try LiveServerTests.JotterBinary.run(["verify", path], executable: analyze, timeout: 60)
        #expect(verified.status == 0, "systemd-analyze verify: \(verified.standardError)")
        #expect(!verified.standardError.contains("Unknown"), "\(verified.standardError)")
    }

    @Test func aSendmailRelayKeepsTheSetgidMTAUsableAndAMaildirElsewhereWritable() throws {
        let directory = TemporaryDirectory()
        let sendmail = ServiceCommand.unit(binary: "/usr/bin/jotter",
                                           configuration: try Self.configuration(["--data-dir", directory.path,
                                                                                  "--relay", "sendmail:"]),
                                           relayFile: directory.file("relay"))
        #expect(!sendmail.contains("NoNewPrivileges=yes"))
        for namespaced in ["PrivateUsers=", "PrivateTmp=", "ProtectSystem=", "ReadWritePaths="] {
            #expect(!sendmail.contains(namespaced), "a setgid program does not work in a user namespace: \(namespaced)")
        }
        let maildir = ServiceCommand.unit(binary: "/usr/bin/jotter",
                                          configuration: try Self.configuration(["--data-dir", directory.path,
                                                                                 "--relay", "maildir:/srv/mail/ana"]),
                                          relayFile: directory.file("relay"))
        #expect(maildir.contains("ReadWritePaths=\(directory.path) /srv/mail/ana"))
        #expect(ServiceCommand.quoted("/path with space/jotter") == "\"/path with space/jotter\"")
        #expect(ServiceCommand.quoted("50%") == "50%%")
    }

    @Test func installWritesTheUnitAndTheRelayFileAndEnablesIt() throws {
        let directory = TemporaryDirectory()
        let environment = ["XDG_CONFIG_HOME": directory.file("config"), "HOME": directory.path]
        let configuration = try Self.configuration(["--data-dir", directory.file("data"),
                                                    "--relay", "resend://re_KEY?to=ana@example.com"])
        var calls: [[String]] = []
        let installed = try ServiceCommand.run(.install, binary: "/usr/bin/jotter", configuration: configuration,
                                               environment: environment, settle: {}) { words in
            calls.append(words)
            return (0, words[0] == "is-active" ? "active\n" : "")
        }
        #expect(installed.contains("Installed") && installed.contains("started it"))
        let unitPath = directory.file("config/systemd/user/jotter.service")
        #expect(FileManager.default.fileExists(atPath: unitPath))
        #expect(calls == [["daemon-reload"], ["enable", "--now", "jotter.service"]]
            + Array(repeating: ["is-active", "jotter.service"], count: 3))
        let relay = try String(contentsOfFile: directory.file("data/relay"), encoding: .utf8)
        #expect(relay == "resend://re_KEY?to=ana@example.com\n")
        let mode = (try FileManager.default.attributesOfItem(atPath: directory.file("data/relay"))[.posixPermissions] as? Int)
        #expect(mode == 0o600)
        #expect(try !String(contentsOfFile: unitPath, encoding: .utf8).contains("re_KEY"))

        calls = []
        let status = try ServiceCommand.run(.status, binary: "/usr/bin/jotter", configuration: configuration,
                                            environment: environment) { calls.append($0); return (0, $0[0] == "is-active" ? "active\n" : "enabled\n") }
        #expect(status.contains("active, enabled at login"))

        let removed = try ServiceCommand.run(.uninstall, binary: "/usr/bin/jotter", configuration: configuration,
                                             environment: environment) { _ in (0, "") }
        #expect(removed.contains("removed"))
        #expect(!FileManager.default.fileExists(atPath: unitPath))
    }

    /// Enabled and started is not running: a server that cannot start (its port taken) is restarted every
    /// 2 s, and install says so instead of "started". A Maildir elsewhere that does not exist yet is made,
    /// as systemd will not start a unit whose writable path is missing.
    @Test func installSaysWhenTheServiceDoesNotStayRunning() throws {
        let directory = TemporaryDirectory()
        let mail = directory.file("mail/ana")
        let configuration = try Self.configuration(["--data-dir", directory.file("data"), "--relay", "maildir:" + mail])
        let error = try #require(throws: CommandLineOptions.UsageError.self) {
            try ServiceCommand.run(.install, binary: "/usr/bin/jotter", configuration: configuration,
                                   environment: ["XDG_CONFIG_HOME": directory.file("config")], settle: {}) { words in
                (words[0] == "is-active" ? 3 : 0, words[0] == "is-active" ? "activating\n" : "")
            }
        }
        #expect(error.description.contains("journalctl --user -u jotter.service"), "\(error)")
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: mail, isDirectory: &isDirectory) && isDirectory.boolValue)
    }

    @Test func installSaysWhatToDoWhenThereIsNoUserSession() throws {
        let directory = TemporaryDirectory()
        let configuration = try Self.configuration(["--data-dir", directory.file("data")])
        let error = try #require(throws: CommandLineOptions.UsageError.self) {
            try ServiceCommand.run(.install, binary: "/usr/bin/jotter", configuration: configuration,
                                   environment: ["XDG_CONFIG_HOME": directory.file("config")]) { words in
                words.first == "enable" ? (1, "Failed to connect to bus: No medium found") : (0, "")
            }
        }
        #expect(error.description.contains("loginctl enable-linger"))
    }

    /// Without a user session systemctl cannot stop or tell: uninstall and status say so and fail,
    /// instead of "stopped" while the server still holds its port.
    @Test func uninstallAndStatusDoNotClaimWhatSystemctlCouldNotDo() throws {
        let directory = TemporaryDirectory()
        let environment = ["XDG_CONFIG_HOME": directory.file("config"), "HOME": directory.path]
        let configuration = try Self.configuration(["--data-dir", directory.file("data")])
        _ = try ServiceCommand.run(.install, binary: "/usr/bin/jotter", configuration: configuration,
                                   environment: environment) { _ in (0, "") }
        let noBus: ([String]) -> (status: Int32, output: String) = { _ in (1, "Failed to connect to bus: No medium found\n") }
        let status = try #require(throws: CommandLineOptions.UsageError.self) {
            try ServiceCommand.run(.status, binary: "/usr/bin/jotter", configuration: configuration,
                                   environment: environment, systemctl: noBus)
        }
        #expect(status.description.contains("cannot tell"))
        let inactive = try ServiceCommand.run(.status, binary: "/usr/bin/jotter", configuration: configuration,
                                              environment: environment) { (3, $0[0] == "is-active" ? "inactive\n" : "enabled\n") }
        #expect(inactive.contains("inactive, enabled at login"))
        let uninstall = try #require(throws: CommandLineOptions.UsageError.self) {
            try ServiceCommand.run(.uninstall, binary: "/usr/bin/jotter", configuration: configuration,
                                   environment: environment, systemctl: noBus)
        }
        #expect(uninstall.description.contains("may still run"))
        #expect(!FileManager.default.fileExists(atPath: directory.file("config/systemd/user/jotter.service")))
    }

    /// A relay file that existed readable to all becomes 0600 before the secret is written into it.
    @Test func anExistingRelayFileIsMadePrivate() throws {
        let directory = TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("data"), withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: directory.file("data/relay"), contents: Data("old\n".utf8),
                                               attributes: [.posixPermissions: 0o644]))
        let configuration = try Self.configuration(["--data-dir", directory.file("data"),
                                                    "--relay", "smtps://u:S3cret@smtp.example.com:465?to=a@example.com"])
        _ = try ServiceCommand.run(.install, binary: "/usr/bin/jotter", configuration: configuration,
                                   environment: ["XDG_CONFIG_HOME": directory.file("config")]) { _ in (0, "") }
        let mode = try FileManager.default.attributesOfItem(atPath: directory.file("data/relay"))[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    /// A relative Maildir or vault path is made absolute for the service, which runs from no particular
    /// directory and may write only to the paths its unit names.
    @Test func aRelativeDeliveryPathIsMadeAbsolute() throws {
        let directory = TemporaryDirectory()
        let configuration = try Self.configuration(["--data-dir", directory.path, "--relay", "markdown:vault/inbox?x=1"])
        let cwd = FileManager.default.currentDirectoryPath
        #expect(configuration.relay == "markdown:\(cwd)/vault/inbox?x=1")
        let home = ["HOME": "/home/me"]
        #expect(try CommandLineOptions.absoluteRelayPath("maildir:/srv/mail", environment: home) == "maildir:/srv/mail")
        #expect(try CommandLineOptions.absoluteRelayPath("sendmail:", environment: home) == "sendmail:")
        #expect(try CommandLineOptions.absoluteRelayPath("smtp://h:587", environment: home) == "smtp://h:587")
        let unit = ServiceCommand.unit(binary: "/usr/bin/jotter", configuration: configuration, relayFile: directory.file("relay"))
        #expect(unit.contains("ReadWritePaths=\(directory.path) \(cwd)/vault/inbox"), "\(unit)")
    }

    /// A percent-encoded folder (`Obsidian%20Vault`, or a Maildir's `%3F`) is the folder the server writes
    /// (`Obsidian Vault`): the unit lets the service write there, and install makes that folder, not one
    /// named `Obsidian%20Vault` (the real vault was read-only to the service, and every memo failed).
    @Test func aPercentEncodedFolderIsTheFolderTheServerWrites() throws {
        let directory = TemporaryDirectory()
        let vault = directory.file("Obsidian Vault")
        let environment = ["XDG_CONFIG_HOME": directory.file("config"), "HOME": directory.path]
        let configuration = try Self.configuration(["--data-dir", directory.file("data"),
                                                    "--relay", "markdown:" + directory.file("Obsidian%20Vault")])
        #expect(try RelayURL(try #require(configuration.relay)).destination == "markdown:" + vault)
        let unit = ServiceCommand.unit(binary: "/usr/bin/jotter", configuration: configuration,
                                       relayFile: directory.file("data/relay"))
        let line = unit.split(separator: "\n").first { $0.hasPrefix("ReadWritePaths=") } ?? ""
        #expect(line.hasSuffix(" " + ServiceCommand.quoted(vault)), "\(line)")
        _ = try ServiceCommand.run(.install, binary: "/usr/bin/jotter", configuration: configuration,
                                   environment: environment, settle: {}) { words in
            (0, words[0] == "is-active" ? "active\n" : "")
        }
        #expect(FileManager.default.fileExists(atPath: vault))
        #expect(!FileManager.default.fileExists(atPath: directory.file("Obsidian%20Vault")))
        #expect(ServiceCommand.localPath("maildir:/srv/mail/what%3F") == "/srv/mail/what?")
    }

    /// A data directory (or a Maildir) in /tmp or /var/tmp is the machine's own /tmp for the service: a
    /// private one (`PrivateTmp=yes`) is thrown away when the service stops, and every memo with it.
    @Test func aPathInTmpKeepsTheMachinesTmp() throws {
        func unit(_ arguments: [String]) throws -> String {
            ServiceCommand.unit(binary: "/usr/bin/jotter", configuration: try Self.configuration(arguments),
                                relayFile: "/srv/jotter/relay")
        }
        #expect(try unit(["--data-dir", "/srv/jotter"]).contains("PrivateTmp=yes"))
        #expect(try !unit(["--data-dir", "/tmp/jotter"]).contains("PrivateTmp="))
        #expect(try !unit(["--data-dir", "/srv/jotter", "--relay", "maildir:/var/tmp/mail"]).contains("PrivateTmp="))
        #expect(try unit(["--data-dir", "/srv/tmpfiles"]).contains("PrivateTmp=yes"), "only /tmp itself")
    }

    /// Without `HOME` (a service, `env -i`), the default data directory is still the user's own, from the
    /// password database: it was `./.local/share/jotter`, wherever the process happened to start.
    @Test func withoutHOMETheDataDirectoryIsStillInTheUsersHome() throws {
        let home = try #require(getpwuid(geteuid())?.pointee.pw_dir.map { String(cString: $0) })
        #expect(Configuration.defaultDataDirectory(environment: [:]) == home + "/.local/share/jotter")
        #expect(RelayConfiguration.defaultDataDirectory(environment: [:]) == home + "/.local/share/jotter-relay")
        #expect(Configuration.defaultDataDirectory(environment: ["HOME": "/home/ana"]) == "/home/ana/.local/share/jotter")
        #expect(Configuration.defaultDataDirectory(environment: ["HOME": "relative"]) == home + "/.local/share/jotter")
        #expect(try CommandLineOptions.expandingHome("~/notes", environment: [:]) == home + "/notes")
    }

    /// `~/…` is the home folder wherever a path is given — a relay's vault for the service, the data
    /// directory of serve, relay, devices, rekey and pair — as `serve` already read a relay's Maildir:
    /// made absolute against the working directory, it was a folder named `~` there, and a data
    /// directory was split between two places.
    @Test func aTildePathIsTheHomeFolderEverywhere() throws {
        let directory = TemporaryDirectory()
        let home = ["HOME": directory.path]
        #expect(try CommandLineOptions.absoluteRelayPath("markdown:~/vault?file=x.md", environment: home)
            == "markdown:\(directory.path)/vault?file=x.md")
        let service = try Self.configuration(["--data-dir", "~/svd", "--relay", "markdown:~/vault"], environment: home)
        #expect(service.dataDirectory == directory.path + "/svd" && service.relay == "markdown:\(directory.path)/vault")
        #expect(!FileManager.default.fileExists(atPath: FileManager.default.currentDirectoryPath + "/~"))
        func dataDirectory(_ arguments: [String], _ environment: [String: String] = [:]) throws -> String? {
            switch try CommandLineOptions.parse(arguments, environment: home.merging(environment) { $1 },
                                                sourceRoot: "/src/Sources/JotterCLI/main.swift") {
            case .serve(let configuration): return configuration.dataDirectory
            case .relay(let configuration): return configuration.dataDirectory
            case .devices(let path, _), .rekey(let path), .pair(let path): return path
            default: return nil
            }
        }
        #expect(try dataDirectory(["serve", "--data-dir", "~/jd"]) == directory.path + "/jd")
        #expect(try dataDirectory(["serve"], ["JOTTER_DATA_DIR": "~/envd"]) == directory.path + "/envd")
        #expect(try dataDirectory(["relay", "--data-dir", "~/rd"]) == directory.path + "/rd")
        #expect(try dataDirectory(["devices", "--data-dir", "~"]) == directory.path)
        #expect(try dataDirectory(["rekey"], ["JOTTER_DATA_DIR": "~/envd"]) == directory.path + "/envd")
        #expect(throws: CommandLineOptions.UsageError.self) { try dataDirectory(["serve", "--data-dir", "~bob/jd"]) }
        #expect(try dataDirectory(["serve", "--data-dir", "rel/jd"]) == "rel/jd", "a relative path stays as it was")
        // One expansion for both: a relay URL's folder reads `~` as the data directory does.
        #expect(try RelayURL.absolutePath("~/Maildir", environment: home) == directory.path + "/Maildir")
        #expect(try CommandLineOptions.expandingHome("~", environment: ["HOME": "/"]) == "/")
        #expect(try CommandLineOptions.expandingHome("~/x", environment: ["HOME": "/"]) == "/x")
        #expect(throws: RelayURL.Failure.self) { try RelayURL.absolutePath("~bob/Maildir", environment: home) }
    }
}

/// Words the command line does not take are refused, not read as something else.
@Suite struct CommandWordsTests {
    /// `JOTTER_LAN=true` (as units and .env files say it) is LAN mode, like `1`; a value that is neither
    /// yes nor no is refused, not read as "off".
    @Test func lanFromTheEnvironmentTakesTheUsualYesAndNo() throws {
        for (value, lan) in [("1", true), ("true", true), ("YES", true), ("on", true), ("0", false), ("false", false), ("off", false)] {
            guard case .serve(let configuration) = try CommandLineOptions.parse(["serve"], environment: ["JOTTER_LAN": value],
                                                                                sourceRoot: #filePath) else {
                Issue.record("not serve")
                continue
            }
            #expect(configuration.lan == lan, "JOTTER_LAN=\(value)")
        }
        let refused = try #require(throws: CommandLineOptions.UsageError.self) {
            _ = try CommandLineOptions.parse(["serve"], environment: ["JOTTER_LAN": "enabled"], sourceRoot: #filePath)
        }
        #expect(refused.description.contains("JOTTER_LAN"))
    }

    /// `jotter rekey list` is no rekey (it ran one), and `jotter rekey foo` speaks of rekey, not devices.
    @Test(arguments: [["rekey", "list"], ["rekey", "foo"], ["pair", "now"]])
    func rekeyAndPairTakeNoWords(arguments: [String]) throws {
        let refused = try #require(throws: CommandLineOptions.UsageError.self) {
            _ = try CommandLineOptions.parse(arguments, environment: [:], sourceRoot: #filePath)
        }
        #expect(refused.description.hasPrefix("usage: jotter \(arguments[0])"), "\(refused)")
    }
}
