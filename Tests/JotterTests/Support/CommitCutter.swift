import Foundation
import Synchronization

/// `Tests/Fixtures/pg_commit_cutter.py`: a proxy in front of a test's PostgreSQL database that, when
/// armed, lets the next COMMIT of a stored message be carried out and loses its answer (the client's
/// connection is closed instead), so the client cannot know whether it committed. Stop it after the
/// relay using it.
final class CommitCutter: Sendable {
    /// `upstream`'s URL with the proxy's port in place of the server's.
    let url: String
    private let directory: String
    private let process: FixtureProcess

    /// A proxy in front of `upstream` (`postgres://user@127.0.0.1:PORT/name`), its files in `directory`;
    /// with `dropOn`, armed, it closes the connection instead of passing on the next statement holding
    /// that text (the server rolls its transaction back), rather than losing a COMMIT's answer.
    init(url upstream: String, directory: String, dropOn: String? = nil) throws {
        guard let host = upstream.range(of: "@127.0.0.1:"),
              let slash = upstream[host.upperBound...].firstIndex(of: "/"),
              let port = Int(upstream[host.upperBound..<slash]) else {
            throw FixtureProcess.Failure(description: "not a loopback PostgreSQL URL")
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        process = try FixtureProcess(script: "pg_commit_cutter.py",
                                     arguments: ["--upstream-port", String(port), "--arm-file", directory + "/armed",
                                                 "--record", directory + "/cuts"]
                                         + (dropOn.map { ["--drop-on", $0] } ?? []),
                                     errorPath: directory + "/cutter.stderr")
        url = String(upstream[..<host.lowerBound]) + "@127.0.0.1:\(process.port)" + String(upstream[slash...])
    }

    /// The next COMMIT after a message is inserted loses its answer (with `dropOn`: the next statement
    /// holding that text is dropped).
    func arm() {
        _ = FileManager.default.createFile(atPath: directory + "/armed", contents: nil)
    }

    /// How many COMMIT answers were lost (or statements dropped) so far.
    var cuts: Int {
        guard let text = try? String(contentsOfFile: directory + "/cuts", encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").count
    }

    func stop() {
        process.stop()
    }
}

/// Where a fixture's `configure` puts the cutter it starts (a closure cannot capture a `Mutex`).
final class CommitCutterSlot: Sendable {
    private let cutter = Mutex<CommitCutter?>(nil)

    var value: CommitCutter? {
        get { cutter.withLock { $0 } }
        set { cutter.withLock { $0 = newValue } }
    }
}
