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

    /// The log's own date arithmetic against `Timestamp` (which asks `gmtime_r`): around the epoch,
    /// leap days (2000, 2024, not 2100), year ends, and before 1970.
    @Test(arguments: [Int64(0), 999, 1_000, 1_764_581_405_007, 1_764_581_405_999, -1, -1_001,
                      951_782_400_000, 951_868_799_999, 1_709_164_800_123, 1_709_251_199_999,
                      4_107_456_000_000, 4_107_542_400_000, 1_798_761_599_999, 1_798_761_600_000,
                      -86_400_000, -2_208_988_800_000, 253_402_300_799_999])
    func timestampsMatchTheFormatter(milliseconds: Int64) {
        var bytes: [UInt8] = []
        Logger.appendTimestamp(milliseconds, to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == Timestamp.iso8601(milliseconds: milliseconds))
    }

    /// Every day for 800 years, at a different time of day each, against `Timestamp`.
    @Test func timestampsMatchTheFormatterEveryDay() {
        var mismatches: [Int64] = []
        for day in Int64(-146_097)...Int64(146_097) {
            let milliseconds = day * 86_400_000 + (day & 0xFFFF) * 1_317 % 86_400_000
            var bytes: [UInt8] = []
            Logger.appendTimestamp(milliseconds, to: &bytes)
            if String(decoding: bytes, as: UTF8.self) != Timestamp.iso8601(milliseconds: milliseconds) {
                mismatches.append(milliseconds)
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
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
