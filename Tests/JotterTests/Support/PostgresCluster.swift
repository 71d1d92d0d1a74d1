import Foundation
import Testing
@testable import Jotter

/// A throwaway PostgreSQL cluster (Debian's `postgresql`): `initdb` into a temporary directory, the
/// server on 127.0.0.1 and a free port, started by the test that needs it and stopped by it. As root
/// the cluster runs as the `postgres` user (PostgreSQL refuses to run as root).
final class PostgresCluster: @unchecked Sendable {
    /// Where Debian keeps the server's programs (`/usr/lib/postgresql/15/bin`), if it is installed.
    static let programs: String? = {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap(Int.init).sorted(by: >)
        return versions.map { "\(root)/\($0)/bin" }.first { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") }
    }()

    static var available: Bool { programs != nil }

    let directory = TemporaryDirectory()
    let port: Int
    /// `postgres://jotter@127.0.0.1:PORT/postgres`.
    let url: String
    private let runAs: [String]
    private let data: String

    init() throws {
        guard let programs = Self.programs else { throw FixtureProcess.Failure(description: "PostgreSQL is not installed") }
        runAs = geteuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
        data = directory.file("data")
        if geteuid() == 0 {
            let owned = try Self.run([], "/bin/chown", ["-R", "postgres:postgres", directory.path])
            try #require(owned.status == 0, "chown: \(owned.errors)")
        }
        let runAs = runAs, data = data
        let created = try Self.run(runAs, programs + "/initdb", ["-D", data, "-A", "trust", "-U", "jotter", "-E", "UTF8",
                                                                "--no-sync", "--no-instructions"])
        try #require(created.status == 0, "initdb: \(created.errors)")
        port = try BrowserTests.freePort()
        let options = "-c listen_addresses=127.0.0.1 -p \(port) -k \(directory.path) -c fsync=off "
            + "-c synchronous_commit=off -c max_connections=100"
        let started = try Self.run(runAs, programs + "/pg_ctl", ["-D", data, "-l", directory.file("server.log"),
                                                                "-w", "-t", "60", "-o", options, "start"])
        try #require(started.status == 0, "pg_ctl start: \(started.errors) \((try? String(contentsOfFile: directory.file("server.log"), encoding: .utf8)) ?? "")")
        url = "postgres://jotter@127.0.0.1:\(port)/postgres"
    }

    /// Stops the server at once (its data is thrown away with the directory).
    func stop() {
        guard let programs = Self.programs else { return }
        _ = try? Self.run(runAs, programs + "/pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"])
    }

    /// Runs a PostgreSQL program to its end (posix_spawn: the server `pg_ctl start` leaves running
    /// must hold none of this process's descriptors; Foundation's `Process` waits for one it leaks).
    /// Output is discarded: the server's own log is `server.log` in the cluster's directory.
    private static func run(_ prefix: [String], _ program: String, _ arguments: [String]) throws -> Command.Result {
        let command = prefix + [program] + arguments
        let child = try ChildProcess.spawn(command[0], arguments: Array(command.dropFirst()), input: .inherit, output: .discard)
        let ended = try child.process.wait()
        return Command.Result(status: ended == .exited(0) ? 0 : 1, output: "", errors: "\(ended)")
    }
}
