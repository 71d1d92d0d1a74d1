import Foundation
import Testing
@testable import Jotter

/// `jotter serve` under a low open-file limit: it admits only the connections its descriptors allow,
/// so a flood of idle connections meets the connection registry (which closes the longest-waiting one
/// to admit a newcomer) instead of a full descriptor table (where nothing new can even be accepted).
@Suite struct OpenFileLimitTests {
    typealias Binary = LiveServerTests.JotterBinary

    /// The binary started through `sh -c 'ulimit …; exec jotter serve …'`; stopped by the test.
    final class LimitedServer {
        let port: Int
        let process: Process
        let data: String
        let errors: String

        init(ulimit: String, directory: TemporaryDirectory) throws {
            try #require(FileManager.default.isExecutableFile(atPath: Binary.path), "build first: \(Binary.path)")
            data = directory.file("data")
            errors = directory.file("stderr.log")
            #expect(FileManager.default.createFile(atPath: errors, contents: nil))
            process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            // Deadlines far away: a connection must get in because the registry made room, not because
            // an idle one timed out.
            process.arguments = ["-c", "ulimit \(ulimit) && exec \"$0\" \"$@\"", Binary.path, "serve", "--port", "0",
                                 "--data-dir", data, "--connections-per-client", "2000", "--header-timeout", "120",
                                 "--request-timeout", "120"]
            process.environment = Binary.environment()
            process.currentDirectoryURL = URL(fileURLWithPath: directory.path)
            let output = Pipe()
            process.standardOutput = output
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let line = Binary.readLine(output.fileHandleForReading.fileDescriptor, timeout: 60)
            guard let line, let match = line.wholeMatch(of: #/Listening on http://127\.0\.0\.1:([0-9]+)/#),
                  let port = Int(match.1) else {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                throw RawHTTP.Failure(description: "no Listening line: \(line ?? "-")")
            }
            self.port = port
        }

        var standardError: String { String(decoding: Evidence.fileBytes(errors), as: UTF8.self) }

        /// The soft and hard "Max open files" of the running process.
        func openFileLimits() throws -> (soft: String, hard: String) {
            let limits = try String(contentsOfFile: "/proc/\(process.processIdentifier)/limits", encoding: .utf8)
            let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
            let fields = line.dropFirst("Max open files".count).split(separator: " ")
            return (String(fields[0]), String(fields[1]))
        }

        func post(_ text: String) throws -> RawHTTP.Response {
            try RawHTTP.request(port: port, method: "POST", path: "/send", headers: [("Content-Type", "text/plain")],
                                body: Array(text.utf8))
        }

        /// SIGTERM; true if it exited 0 within 30 s.
        func stop() -> Bool {
            guard process.isRunning else { return false }
            kill(process.processIdentifier, SIGTERM)
            let exited = TestServer.waitUntil(timeout: 30) { !process.isRunning }
            if !exited {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
            return exited && process.terminationReason == .exit && process.terminationStatus == 0
        }
    }

    @Test func aLowHardLimitAdmitsFewerConnectionsAndAFloodOfIdleOnesStillLetsAClientIn() throws {
        let directory = TemporaryDirectory()
        let server = try LimitedServer(ulimit: "-n 64", directory: directory)
        var stopped = false
        defer { if !stopped { _ = server.stop() } }
        // Half of 64 descriptors for connections, and a start-up warning that says why.
        #expect(server.standardError.contains("connections=32 configured=1024 open_files.soft=64 open_files.hard=64"),
                "\(server.standardError)")
        let before = try server.post("stored before the flood")
        #expect(before.status == 204)

        // Far more idle connections than descriptors: without the fitted limit the process would run out
        // of descriptors, and every newcomer would wait in the listen queue until an idle one timed out.
        let idle = try (0..<80).map { _ in try Peer(port: server.port) }
        let newcomer = try Peer(port: server.port)
        #expect(newcomer.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nConnection: close\r\n\r\n"))
        let (bytes, _) = newcomer.readAll(timeout: 20)
        #expect(RawHTTP.parse(bytes)?.status == 200, "the newcomer was not let in")
        let openDescriptors = (try? FileManager.default.contentsOfDirectory(
            atPath: "/proc/\(server.process.processIdentifier)/fd").count) ?? 0
        #expect(openDescriptors > 0 && openDescriptors < 64, "\(openDescriptors) descriptors open")

        // Memos are still accepted, and both are delivered.
        let during = try server.post("stored during the flood")
        #expect(during.status == 204)
        let ids = [before, during].compactMap { $0.header("X-Message-Id") }
        #expect(ids.count == 2)
        let delivered = TestServer.waitUntil(timeout: 30) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: server.data + "/Maildir/new")) ?? []
            return ids.allSatisfy { id in names.contains { $0.contains(id) } }
        }
        #expect(delivered)
        withExtendedLifetime(idle) {}
        stopped = true
        #expect(server.stop(), "did not exit 0 on SIGTERM")
        #expect(!server.standardError.contains("stored before") && !server.standardError.contains("stored during"))
    }

    @Test func theSoftLimitIsRaisedTowardTheHardOne() throws {
        let directory = TemporaryDirectory()
        let server = try LimitedServer(ulimit: "-Sn 64", directory: directory)
        defer { _ = server.stop() }
        let limits = try server.openFileLimits()
        // 1,024 connections and 256 for the rest of the process, as far as the hard limit allows.
        let hard = Int(limits.hard) ?? Int.max
        #expect(limits.soft == String(min(1280, hard)), "\(limits)")
        if hard >= 1280 {
            #expect(!server.standardError.contains("open-file limit"), "\(server.standardError)")
        }
        #expect(try server.post("after the raise").status == 204)
    }
}
