import Testing
@testable import Jotter

/// The line each request leaves in the log: at `info` (the default) one per request, with its method,
/// route, outcome, duration and the id of a memo it stored (never the memo); below that, none.
@Suite struct RequestLogTests {
    /// Serves over a socket at `level`, runs `body`, stops the server (every request's end has then been
    /// reported) and returns what was logged.
    private static func log(at level: Logger.Level, _ body: (TestServer) throws -> Void) throws -> String {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) { $0.logLevel = level }
        do {
            defer { server.stop() }
            try body(server)
        }
        return server.logs.captured
    }

    private static func requests(_ server: TestServer) throws {
        #expect(try server.request("GET", "/").status == 200)
        #expect(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                   body: Array("buy milk".utf8)).status == 204)
        #expect(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")], body: []).status == 400)
    }

    private static func requestLines(_ log: String) -> [Substring] {
        log.split(separator: "\n").filter { $0.contains(" http: request ") }
    }

    @Test func atInfoEveryRequestIsOneLineWithItsOutcome() throws {
        let log = try Self.log(at: .info, Self.requests)
        let lines = Self.requestLines(log)
        #expect(lines.count == 3, "\(log)")
        #expect(lines.contains { $0.contains("method=GET path=/ status=200 ") && $0.hasSuffix("message.id=-") },
                "\(log)")
        let stored = lines.first { $0.contains("method=POST path=/send status=204 ") }
        #expect(stored.map { !$0.hasSuffix("message.id=-") && $0.contains("message.id=") } == true, "\(log)")
        #expect(lines.contains { $0.contains("method=POST path=/send status=400 ") && $0.hasSuffix("message.id=-") },
                "\(log)")
        #expect(lines.allSatisfy { $0.contains(" duration_ms=") }, "\(log)")
        #expect(!log.contains("buy milk"))
    }

    @Test func belowInfoNoRequestIsLogged() throws {
        let log = try Self.log(at: .warning, Self.requests)
        #expect(Self.requestLines(log).isEmpty, "\(log)")
        #expect(!log.contains("buy milk"))
    }
}
