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

    /// Logs `message` at `level` with `metadata` appended as `key=value` pairs.
    public func log(level: Level, _ message: @autoclosure () -> String, metadata: Metadata = [:]) {
        guard level >= logLevel else { return }
        var line = Timestamp.iso8601(milliseconds: SystemClock().nowMilliseconds())
        line += " \(level) \(label): \(message())"
        // Empty values are left out; a value with spaces is quoted, so each line splits unambiguously.
        for (key, value) in metadata where !value.isEmpty {
            let quoted = value.contains(" ") || value.contains("\"")
            line += " \(key)=" + (quoted ? "\"" + value.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\\\"") + "\"" : value)
        }
        sink.write(line + "\n")
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
