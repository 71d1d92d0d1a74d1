import Foundation
import Testing
@testable import Jotter

/// The `jotter` binary (the debug build) serving on 127.0.0.1 and a port it picked, run as a user would
/// run it: `jotter serve --port 0 --data-dir DIR/data …`, or any `command` (`relay …`), optionally under
/// `ulimit` (through `/bin/sh`). Its standard error goes to `stderr.log` in `directory`; `output` is its
/// standard output after the `Listening on` line. Stopped by the test that started it: `stop()`, or the
/// `deinit`'s SIGKILL.
final class ServeProcess {
    typealias Binary = LiveServerTests.JotterBinary

    let port: Int
    let process: Process
    let data: String
    /// Standard output, from the line after `Listening on …`.
    let output: FileHandle
    private let errors: String

    /// `jotter serve --port 0 --data-dir DIR/data` plus `arguments`.
    convenience init(directory: TemporaryDirectory, arguments: [String] = [], ulimit: String? = nil) throws {
        let data = directory.file("data")
        try self.init(directory: directory, command: ["serve", "--port", "0", "--data-dir", data] + arguments,
                      data: data, ulimit: ulimit)
    }

    /// `jotter` with `command`, whose data directory is `data`, with `environment` added to the tests'.
    init(directory: TemporaryDirectory, command: [String], data: String, environment: [String: String] = [:],
         ulimit: String? = nil) throws {
        try #require(FileManager.default.isExecutableFile(atPath: Binary.path), "build first: \(Binary.path)")
        self.data = data
        errors = directory.file("stderr.log")
        #expect(FileManager.default.createFile(atPath: errors, contents: nil))
        process = Process()
        // Started as a shell starts it: every signal at its default and none blocked. (`Process` passes on
        // the mask of the test's thread, which blocks most signals, and the server's threads would inherit
        // it: a signal that ends a server from a shell would only stay pending here.)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let limited = ulimit.map { ["/bin/sh", "-c", "ulimit \($0) && exec \"$0\" \"$@\""] } ?? []
        process.arguments = ["--default-signal"] + limited + [Binary.path] + command
        process.environment = Binary.environment().merging(environment) { $1 }
        process.currentDirectoryURL = URL(fileURLWithPath: directory.path)
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        process.standardInput = FileHandle.nullDevice
        try process.run()
        output = pipe.fileHandleForReading
        let line = Binary.readLine(output.fileDescriptor, timeout: 60)
        guard let line, let match = line.wholeMatch(of: #/Listening on http://127\.0\.0\.1:([0-9]+)/#),
              let port = Int(match.1) else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw RawHTTP.Failure(description: "no Listening line: \(line ?? "-")")
        }
        self.port = port
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// What it wrote to standard error so far.
    var standardError: String { String(decoding: Evidence.fileBytes(errors), as: UTF8.self) }

    /// SIGTERM, then waits up to `timeout` seconds (SIGKILL after that); true if it exited 0 by itself.
    @discardableResult
    func stop(timeout: Double = 30, signal: Int32 = SIGTERM) -> Bool {
        guard process.isRunning else { return false }
        kill(process.processIdentifier, signal)
        let exited = TestServer.waitUntil(timeout: timeout) { !process.isRunning }
        if !exited {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        return exited && process.terminationReason == .exit && process.terminationStatus == 0
    }
}
