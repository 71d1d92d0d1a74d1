/// A small logger shaped like swift-log's `Logger`, so it could be swapped for it one day.
///
/// Messages are short constant strings; data goes in metadata. Never put memo text, a subject, an
/// address, a token or an error's free text in either: log an error's kind.
public struct Logger: Sendable {
    /// Severity, lowest first.
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical

        /// Parses `info`, `warning`, …
        public init?(name: String) {
            guard let level = Level.allCases.first(where: { "\($0)" == name.lowercased() }) else { return nil }
            self = level
        }

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        /// The level's name as the log line shows it (a literal: `"\(level)"` goes through reflection).
        var name: StaticString {
            switch self {
            case .trace: return "trace"
            case .debug: return "debug"
            case .info: return "info"
            case .notice: return "notice"
            case .warning: return "warning"
            case .error: return "error"
            case .critical: return "critical"
            }
        }
    }

    /// Metadata values are plain strings.
    public typealias Metadata = KeyValuePairs<String, String>

    /// The subsystem this logger speaks for (`http`, `delivery`, …).
    public let label: String
    /// Messages below this level are dropped.
    public var logLevel: Level
    private let sink: LogSink

    /// A logger writing to `sink` (standard error by default).
    public init(label: String, level: Level = .info, sink: LogSink = .standardError) {
        self.label = label
        self.logLevel = level
        self.sink = sink
    }

    /// The same sink and level under another label.
    public func labelled(_ label: String) -> Logger {
        Logger(label: label, level: logLevel, sink: sink)
    }

    /// Logs `message` at `level` with `metadata` appended as `key=value` pairs:
    /// `2026-12-01T09:30:05.123Z info http: request method=GET status=200`. Built as bytes in the
    /// sink's buffer (every request logs a line at `info`: this is on the path of every answer).
    public func log(level: Level, _ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        guard level >= logLevel else { return }
        let milliseconds = SystemClock().nowMilliseconds()
        // Formatted straight into the sink's buffer: no line of its own to allocate and copy.
        sink.write { line in
            Self.appendTimestamp(milliseconds, to: &line)
            line.append(0x20)
            level.name.withUTF8Buffer { line.append(contentsOf: $0) }
            line.append(0x20)
            Self.append(label, to: &line)
            line.append(contentsOf: [0x3A, 0x20])  // ": "
            Self.append(message(), to: &line)
            // Empty values are left out; a value with spaces is quoted, so each line splits unambiguously.
            for (key, value) in metadata where !value.isEmpty {
                line.append(0x20)
                Self.append(key, to: &line)
                line.append(0x3D)
                let quoted = value.utf8.contains { $0 == 0x20 || $0 == 0x22 }
                if quoted {
                    line.append(0x22)
                    for byte in value.utf8 {
                        if byte == 0x22 { line.append(0x5C) }
                        line.append(byte)
                    }
                    line.append(0x22)
                } else {
                    Self.append(value, to: &line)
                }
            }
            line.append(0x0A)
        }
    }

    /// Appends `text`'s UTF-8 bytes in one copy.
    private static func append(_ text: String, to line: inout [UInt8]) {
        var text = text
        text.withUTF8 { line.append(contentsOf: $0) }
    }

    /// `nanoseconds` as milliseconds with two decimals, `12.34` (integer arithmetic: `String(Double)`
    /// is slow, and this is formatted for every request).
    public static func milliseconds(nanoseconds: UInt64) -> String {
        let hundredths = nanoseconds / 10_000
        let fraction = hundredths % 100
        return String(hundredths / 100) + (fraction < 10 ? ".0" : ".") + String(fraction)
    }

    /// Appends `2026-12-01T09:30:05.123Z` for `milliseconds`: the civil date from the day count by
    /// integer arithmetic (H. Hinnant's `civil_from_days`), no lock, no `gmtime_r`, no string; this runs
    /// for every request. A year outside 0000–9999 is left to `Timestamp`.
    static func appendTimestamp(_ milliseconds: Int64, to line: inout [UInt8]) {
        let seconds = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = Int(seconds - days * 86_400), fraction = Int(milliseconds - seconds * 1000)
        let shifted = days + 719_468  // days since 0000-03-01
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * monthFromMarch + 2) / 5 + 1)
        let month = Int(monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9)
        let year = Int(yearOfEra + era * 400) + (month <= 2 ? 1 : 0)
        guard (0...9999).contains(year) else {
            line.append(contentsOf: Timestamp.iso8601(milliseconds: milliseconds).utf8)
            return
        }
        appendDigits(year, count: 4, to: &line)
        line.append(0x2D)  // -
        appendDigits(month, count: 2, to: &line)
        line.append(0x2D)
        appendDigits(day, count: 2, to: &line)
        line.append(0x54)  // T
        appendDigits(secondOfDay / 3600, count: 2, to: &line)
        line.append(0x3A)  // :
        appendDigits(secondOfDay / 60 % 60, count: 2, to: &line)
        line.append(0x3A)
        appendDigits(secondOfDay % 60, count: 2, to: &line)
        line.append(0x2E)  // .
        appendDigits(fraction, count: 3, to: &line)
        line.append(0x5A)  // Z
    }

    /// Appends the last `count` decimal digits of `value` (not negative), zero-padded.
    private static func appendDigits(_ value: Int, count: Int, to line: inout [UInt8]) {
        var divisor = 1
        for _ in 1..<count { divisor *= 10 }
        while divisor > 0 {
            line.append(UInt8(0x30 + value / divisor % 10))
            divisor /= 10
        }
    }

    /// Logs at `.debug`.
    public func debug(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(level: .debug, message(), metadata: metadata)
    }

    /// Logs at `.info`.
    public func info(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(level: .info, message(), metadata: metadata)
    }

    /// Logs at `.notice`.
    public func notice(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(level: .notice, message(), metadata: metadata)
    }

    /// Logs at `.warning`.
    public func warning(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(level: .warning, message(), metadata: metadata)
    }

    /// Logs at `.error`.
    public func error(_ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        log(level: .error, message(), metadata: metadata)
    }
}
