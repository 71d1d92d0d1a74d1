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
            Timestamp.appendISO8601(milliseconds: milliseconds, to: &line)
            line.append(0x20)
            line.append(level.name)
            line.append(0x20)
            line.append(utf8: label)
            line.append(": ")
            line.append(utf8: message())
            // Empty values are left out; a value with spaces is quoted, so each line splits unambiguously.
            for (key, value) in metadata where !value.isEmpty {
                line.append(0x20)
                line.append(utf8: key)
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
                    line.append(utf8: value)
                }
            }
            line.append(0x0A)
        }
    }

    /// `nanoseconds` as milliseconds with two decimals, `12.34` (integer arithmetic: `String(Double)`
    /// is slow, and this is formatted for every request).
    public static func milliseconds(nanoseconds: UInt64) -> String {
        let hundredths = nanoseconds / 10_000
        let fraction = hundredths % 100
        return String(hundredths / 100) + (fraction < 10 ? ".0" : ".") + String(fraction)
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
