import Foundation
import Testing
@testable import Jotter

/// `jotter serve` under a low open-file limit: it admits only the connections its descriptors allow,
/// so a flood of idle connections meets the connection registry (which closes the longest-waiting one
/// to admit a newcomer) instead of a full descriptor table (where nothing new can even be accepted).
@Suite struct OpenFileLimitTests {
    /// The binary under `ulimit`; deadlines far away, so a connection gets in because the registry made
    /// room, not because an idle one timed out.
    static func server(ulimit: String, in directory: TemporaryDirectory) throws -> ServeProcess {
        try ServeProcess(directory: directory,
                         arguments: ["--connections-per-client", "2000", "--header-timeout", "120",
                                     "--request-timeout", "120"], ulimit: ulimit)
    }

    /// The soft and hard "Max open files" of `server`'s process.
    static func openFileLimits(_ server: ServeProcess) throws -> (soft: String, hard: String) {
        let limits = try String(contentsOfFile: "/proc/\(server.process.processIdentifier)/limits", encoding: .utf8)
        let line = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") })
        let fields = line.dropFirst("Max open files".count).split(separator: " ")
        return (String(fields[0]), String(fields[1]))
    }

    static func post(_ text: String, to server: ServeProcess) throws -> RawHTTP.Response {
        try RawHTTP.request(port: server.port, method: "POST", path: "/send", headers: [("Content-Type", "text/plain")],
                            body: Array(text.utf8))
    }

    @Test func aLowHardLimitAdmitsFewerConnectionsAndAFloodOfIdleOnesStillLetsAClientIn() throws {
        let directory = TemporaryDirectory()
        let server = try Self.server(ulimit: "-n 64", in: directory)
        // Half of 64 descriptors for connections, and a start-up warning that says why (the log is
        // written out in batches: wait for it).
        #expect(TestServer.waitUntil(timeout: 20) {
            server.standardError.contains("connections=32 configured=1024 open_files.soft=64 open_files.hard=64")
        }, "\(server.standardError)")
        let before = try Self.post("stored before the flood", to: server)
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
        let during = try Self.post("stored during the flood", to: server)
        #expect(during.status == 204)
        let ids = [before, during].compactMap { $0.header("X-Message-Id") }
        #expect(ids.count == 2)
        let delivered = TestServer.waitUntil(timeout: 30) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: server.data + "/Maildir/new")) ?? []
            return ids.allSatisfy { id in names.contains { $0.contains(id) } }
        }
        #expect(delivered)
        withExtendedLifetime(idle) {}
        #expect(server.stop(), "did not exit 0 on SIGTERM")
        #expect(!server.standardError.contains("stored before") && !server.standardError.contains("stored during"))
    }

    @Test func theSoftLimitIsRaisedTowardTheHardOne() throws {
        let directory = TemporaryDirectory()
        let server = try Self.server(ulimit: "-Sn 64", in: directory)
        defer { server.stop() }
        let limits = try Self.openFileLimits(server)
        // 1,024 connections and 256 for the rest of the process, as far as the hard limit allows.
        let hard = Int(limits.hard) ?? Int.max
        #expect(limits.soft == String(min(1280, hard)), "\(limits)")
        if hard >= 1280 {
            #expect(!server.standardError.contains("open-file limit"), "\(server.standardError)")
        }
        #expect(try Self.post("after the raise", to: server).status == 204)
    }
}
