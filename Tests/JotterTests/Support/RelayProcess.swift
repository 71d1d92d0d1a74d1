import Foundation
import Testing
@testable import Jotter

/// The built `jotter relay` binary running as its own process (a node that a test can `kill -9`),
/// listening on 127.0.0.1 and a port it picked; its standard error goes to `relay.stderr` in its data
/// directory. Stopped by the test that started it (`stop()`, or `kill()` then `stop()`).
final class RelayProcess: @unchecked Sendable {
    let port: Int
    let dataDirectory: String
    private let process: Process

    /// Starts `jotter relay --host 127.0.0.1 --port 0 --data-dir dataDirectory` plus `arguments`.
    init(dataDirectory: String, arguments: [String]) throws {
        let binary = LiveServerTests.JotterBinary.self
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "build first: \(binary.path)")
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        self.dataDirectory = dataDirectory
        let errors = dataDirectory + "/relay.stderr"
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary.path)
        process.arguments = ["relay", "--host", "127.0.0.1", "--port", "0", "--data-dir", dataDirectory] + arguments
        process.environment = binary.environment()
        process.currentDirectoryURL = URL(fileURLWithPath: dataDirectory)
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: errors)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        self.process = process
        let line = binary.readLine(output.fileHandleForReading.fileDescriptor, timeout: 60)
        guard let line, let match = line.wholeMatch(of: #/Listening on http://127\.0\.0\.1:([0-9]+)/#),
              let port = Int(match.1) else {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw FixtureProcess.Failure(description: "no Listening line: \(line ?? "-") \(standardErrorText(errors))")
        }
        self.port = port
    }

    /// What the node wrote to standard error so far.
    var standardError: String { standardErrorText(dataDirectory + "/relay.stderr") }

    /// `kill -9`: no shutdown, no last write.
    func kill() {
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// SIGTERM, then waits for the exit (SIGKILL after 30 s).
    func stop() {
        guard process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGTERM)
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem { Glibc.kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        process.waitUntilExit()
        watchdog.cancel()
    }

    /// A JSON request over a socket, with a device's bearer secret when given.
    func request(_ method: String, _ path: String, secret: String? = nil, _ object: [String: Any]? = nil,
                 headers: [(String, String)] = []) throws -> RawHTTP.Response {
        let request = try RelayServer.jsonRequest(secret: secret, object, headers: headers)
        return try RawHTTP.request(port: port, method: method, path: path, headers: request.headers, body: request.body)
    }
}

private func standardErrorText(_ path: String) -> String {
    (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
}
