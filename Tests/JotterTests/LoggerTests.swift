import Testing
@testable import Jotter

/// The log line's exact shape: it is built as bytes for speed (one line per request), so every part
/// is checked against what it must say.
@Suite struct LoggerTests {
    @Test func aLineHasTheTimeTheLevelTheLabelTheMessageAndQuotedMetadata() throws {
        let sink = LogSink.memory()
        let logger = Logger(label: "http", level: .info, sink: sink)
        logger.info("request", metadata: ["method": "GET", "empty": "", "hint": "a b \"c\"", "path": "/"])
        logger.debug("dropped")
        logger.warning("relay refuses")
        let lines = sink.captured.split(separator: "\n").map(String.init)
        try #require(lines.count == 2)
        let line = lines[0]
        let stamp = try #require(line.split(separator: " ").first.map(String.init))
        #expect(stamp.wholeMatch(of: #/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/#) != nil, "\(stamp)")
        #expect(line.dropFirst(stamp.count) == #" info http: request method=GET hint="a b \"c\"" path=/"#)
        #expect(lines[1].hasSuffix(" warning http: relay refuses"))
    }

    @Test func durationsHaveTwoDecimals() {
        #expect(Logger.milliseconds(nanoseconds: 0) == "0.00")
        #expect(Logger.milliseconds(nanoseconds: 1_234_567) == "1.23")
        #expect(Logger.milliseconds(nanoseconds: 50_000) == "0.05")
        #expect(Logger.milliseconds(nanoseconds: 12_000_000_000) == "12000.00")
    }

    @Test func everyLevelHasItsName() {
        #expect(Logger.Level.allCases.map { "\($0.name)" } == Logger.Level.allCases.map { "\($0)" })
    }
}
