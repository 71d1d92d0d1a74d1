import Glibc

/// `jotter service install|uninstall|status|--print`: Jotter as a systemd *user* service, started at
/// login and restarted if it fails, sandboxed as far as a user unit allows.
public enum ServiceCommand {
    /// What to do.
    public enum Action: Sendable, Equatable {
        case install
        case uninstall
        case status
        case print
    }

    /// The unit's name.
    public static let unitName = "jotter.service"

    /// The unit file for `jotter serve` with `configuration`, started as `binary`, with the relay URL
    /// read from `relayFile` (never on the command line: a unit's ExecStart is world-readable).
    public static func unit(binary: String, configuration: Configuration, relayFile: String?) -> String {
        var arguments = [binary, "serve", "--host", configuration.http.host, "--port", String(configuration.http.port),
                         "--data-dir", configuration.dataDirectory, "--public-dir", configuration.publicDirectory]
        if let relayFile { arguments += ["--relay-file", relayFile] }
        if configuration.lan { arguments.append("--lan") }
        if configuration.insecureHTTP { arguments.append("--insecure-http") }
        for host in configuration.allowedHosts { arguments += ["--allowed-host", host] }
        // Every option given on the command line, as it was parsed (defaults included: explicit is clearer).
        arguments += ["--warn-after", String(configuration.delivery.warnAfterMilliseconds / 1000),
                      "--undo-seconds", String(configuration.undoMilliseconds / 1000),
                      "--slots", String(configuration.delivery.slots),
                      "--retry-cap", String(configuration.delivery.retryPolicy.capMilliseconds / 1000),
                      "--rate-limit", configuration.rateLimit.map { String(Int($0.burst)) } ?? "off",
                      "--max-body", String(configuration.http.maxBodyBytes),
                      "--body-memory", String(configuration.http.bodyMemoryBytes),
                      "--header-timeout", String(configuration.http.headerTimeoutSeconds),
                      "--request-timeout", String(configuration.http.requestTimeoutSeconds),
                      "--connections-per-client", String(configuration.http.perIPConnectionLimit),
                      "--log-level", "\(configuration.logLevel)"]
        // Where the relay writes besides the data directory (a Maildir or notes folder elsewhere).
        var writable = [configuration.dataDirectory]
        if let relay = configuration.relay, let path = localPath(relay) { writable.append(path) }
        // Postfix's and Exim's sendmail are setgid: a service that may not gain privileges cannot use them.
        let sendmail = configuration.relay?.lowercased().hasPrefix("sendmail:") ?? false
        var lines = [
            "# Written by 'jotter service install'; 'jotter service uninstall' removes it.",
            "[Unit]",
            "Description=Jotter: write a thought, press send, it lands in your inbox",
            "",
            "[Service]",
            "Type=exec",
            "ExecStart=" + arguments.map(quoted).joined(separator: " "),
            "Restart=on-failure",
            "RestartSec=2",
            "UMask=0077",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK",
            "LockPersonality=yes",
            "RestrictRealtime=yes",
            "RestrictNamespaces=yes",
            "SystemCallArchitectures=native",
        ]
        if !sendmail {
            // A user unit's file-system settings need a user namespace: systemd 253 and later imply one,
            // 252 (Debian 12) skips them silently without it.
            // A private /tmp is thrown away when the service stops: an outbox (or a Maildir) in /tmp or /var/tmp
            // would go with it, every memo in it lost. Such a path keeps the machine's own.
            let inTemporary = writable.contains { path in
                ["/tmp", "/var/tmp"].contains { path == $0 || path.hasPrefix($0 + "/") }
            }
            lines += (inTemporary ? [] : ["PrivateTmp=yes"])
                + ["ProtectSystem=strict", "ReadWritePaths=" + writable.map(quoted).joined(separator: " "),
                   "NoNewPrivileges=yes", "RestrictSUIDSGID=yes", "PrivateUsers=yes"]
        } else {
            // A setgid sendmail (Postfix's postdrop, Exim) needs its privileges, which a user namespace drops,
            // and a user unit's file-system settings bring one (systemd 253 and later): none of them here.
            lines.append("# No NoNewPrivileges, PrivateUsers, PrivateTmp or ProtectSystem: the local MTA's sendmail is setgid.")
        }
        lines += ["", "[Install]", "WantedBy=default.target", ""]
        return lines.joined(separator: "\n")
    }

    /// `maildir:PATH` and `markdown:PATH` write to PATH, as the server reads it (percent-decoded:
    /// `Obsidian%20Vault` is the folder `Obsidian Vault`); nil for a relative path.
    static func localPath(_ relay: String) -> String? {
        for scheme in ["maildir:", "markdown:"] where relay.lowercased().hasPrefix(scheme) {
            let path = RelayURL.folder(relay.dropFirst(scheme.count).prefix(while: { $0 != "?" }))
            return path.hasPrefix("/") ? path : nil
        }
        return nil
    }

    /// A word for ExecStart: quoted when it has spaces, quotes or backslashes; `%` and `$` escaped.
    static func quoted(_ word: String) -> String {
        var escaped = word.replacingLiterally("%", with: "%%").replacingLiterally("$", with: "$$")
        guard escaped.contains(where: { " \t\"'\\".contains($0) }) || escaped.isEmpty else { return escaped }
        escaped = escaped.replacingLiterally("\\", with: "\\\\").replacingLiterally("\"", with: "\\\"")
        return "\"" + escaped + "\""
    }

    /// `$XDG_CONFIG_HOME/systemd/user`, else `~/.config/systemd/user`.
    public static func unitDirectory(environment: [String: String]) -> String {
        if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") { return config + "/systemd/user" }
        return (environment["HOME"] ?? "/root") + "/.config/systemd/user"
    }

    /// Runs `/usr/bin/systemctl --user WORDS`: its exit status (the signal's number if a signal ended
    /// it; 127 if it cannot be started) and what it wrote to standard output and error, together.
    public static func systemctl(_ words: [String]) -> (status: Int32, output: String) {
        let child: ChildProcess
        let output: Int32?
        do {
            (child, _, output) = try ChildProcess.spawn("/usr/bin/systemctl", arguments: ["--user"] + words,
                                                        input: .inherit, output: .pipe)
        } catch {
            return (127, "systemctl not found")
        }
        var bytes: [UInt8] = []
        if let output {
            bytes = (try? FileIO.readAll(output, limit: 1 << 20)) ?? []
            close(output)  // if it has more to say, it is told so (EPIPE) rather than waited on forever
        }
        switch try? child.wait() {
        case .exited(let status)?, .signalled(let status)?: return (status, String(decoding: bytes, as: UTF8.self))
        case nil: return (127, String(decoding: bytes, as: UTF8.self))
        }
    }

    /// Runs `action`; returns the text to print. `systemctl` runs `systemctl --user …` (injected for tests).
    public static func run(_ action: Action, binary: String, configuration: Configuration,
                           environment: [String: String], settle: () -> Void = { usleep(1_000_000) },
                           systemctl: ([String]) -> (status: Int32, output: String)) throws -> String {
        let directory = unitDirectory(environment: environment)
        let unitPath = directory + "/" + unitName
        switch action {
        case .print:
            return unit(binary: binary, configuration: configuration,
                        relayFile: configuration.relay == nil ? nil : configuration.dataDirectory + "/relay")
        case .install:
            try DataDirectory.makeDirectories(configuration.dataDirectory, mode: 0o700)
            // Every path the unit lets it write must exist, or systemd refuses to start it.
            if let relay = configuration.relay, let path = localPath(relay) {
                try DataDirectory.makeDirectories(path, mode: 0o700)
            }
            var relayFile: String?
            if let relay = configuration.relay {
                relayFile = configuration.dataDirectory + "/relay"
                try write(Array((relay + "\n").utf8), to: relayFile ?? "", mode: 0o600)
            }
            try DataDirectory.makeDirectories(directory, mode: 0o755)
            try write(Array(unit(binary: binary, configuration: configuration, relayFile: relayFile).utf8),
                      to: unitPath, mode: 0o644)
            _ = systemctl(["daemon-reload"])
            let enabled = systemctl(["enable", "--now", unitName])
            guard enabled.status == 0 else {
                throw CommandLineOptions.UsageError(description: "wrote \(unitPath), but 'systemctl --user enable --now "
                    + "\(unitName)' failed (is there a user session? try 'loginctl enable-linger'): "
                    + enabled.output.prefix(300))
            }
            // Started is not running: a server that cannot start (a port taken, say) is restarted every 2 s,
            // and is "active" for the moment each try runs: asked three times over three seconds.
            var answers: [String] = []
            for _ in 0..<3 {
                settle()
                answers.append(systemctl(["is-active", unitName]).output.trimmingWhitespaceAndNewlines())
            }
            let answer = answers.allSatisfy { $0 == "active" } ? "active"
                : answers.first { ["activating", "failed", "inactive"].contains($0) } ?? answers.last ?? ""
            switch answer {
            case "active":
                return "Installed \(unitPath) and started it; it starts at login. 'jotter service status' shows it."
            case "activating", "failed", "inactive":
                throw CommandLineOptions.UsageError(description: "installed \(unitPath) and enabled it, but it does not "
                    + "stay running: 'journalctl --user -u \(unitName)' says why")
            default:
                return "Installed \(unitPath) and enabled it; it starts at login. 'jotter service status' shows how it runs."
            }
        case .uninstall:
            let disabled = systemctl(["disable", "--now", unitName])
            guard unlink(unitPath) == 0 || errno == ENOENT else {
                throw CommandLineOptions.UsageError(description: "cannot remove \(unitPath): \(String(cString: strerror(errno)))")
            }
            _ = systemctl(["daemon-reload"])
            guard disabled.status == 0 else {
                // Removed, but not stopped: say so, or the port stays taken by a server the user thinks gone.
                throw CommandLineOptions.UsageError(description: "removed \(unitPath), but 'systemctl --user disable --now "
                    + "\(unitName)' failed, so a running server may still run (is there a user session?): "
                    + disabled.output.trimmingWhitespaceAndNewlines().prefix(300))
            }
            return "Stopped and removed \(unitName). Memos and the key stay in the data directory."
        case .status:
            guard access(unitPath, F_OK) == 0 else { return "Not installed ('jotter service install' installs it)." }
            let active = systemctl(["is-active", unitName]).output.trimmingWhitespaceAndNewlines()
            let enabled = systemctl(["is-enabled", unitName]).output.trimmingWhitespaceAndNewlines()
            // systemctl answers each with one word; anything else is why it could not tell.
            for answer in [active, enabled] where answer.isEmpty || answer.contains(" ") {
                throw CommandLineOptions.UsageError(description: "cannot tell how \(unitName) stands: "
                    + (answer.isEmpty ? "systemctl said nothing" : String(answer.prefix(300))))
            }
            return "\(unitPath): \(active), \(enabled) at login."
        }
    }

    private static func write(_ bytes: [UInt8], to path: String, mode: mode_t) throws {
        do throws(SystemError) {
            try FileIO.writeFile(path, bytes, mode: mode)
        } catch {
            throw CommandLineOptions.UsageError(description: "cannot write \(path): \(String(cString: strerror(error.code)))")
        }
    }
}
