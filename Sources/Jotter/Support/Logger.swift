import Dispatch
import Glibc
import Synchronization

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
        for (key, value) in metadata {
            line += " \(key)=\(value)"
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

/// Where log lines go: standard error, or memory (tests read it back to prove nothing leaked).
///
/// Standard error is written in batches: lines gather in a buffer that a background queue writes out
/// every few milliseconds (or at once when it grows large), so a busy server does not pay a system
/// call per request. `flush()` writes what is pending; `main` calls it before exiting.
public final class LogSink: Sendable {
    private enum Target {
        case standardError
        case memory
    }

    private let target: Target
    private let lines = Mutex<[String]>([])
    private let pending = Mutex<(bytes: [UInt8], scheduled: Bool)>(([], false))
    private let writer = DispatchQueue(label: "jotter.log")

    private init(target: Target) {
        self.target = target
    }

    /// The process's standard error.
    public static let standardError = LogSink(target: .standardError)

    /// Keeps lines in memory; read them with `captured`.
    public static func memory() -> LogSink { LogSink(target: .memory) }

    func write(_ line: String) {
        switch target {
        case .standardError:
            let (schedule, large) = pending.withLock { state -> (Bool, Bool) in
                state.bytes.append(contentsOf: line.utf8)
                let schedule = !state.scheduled
                state.scheduled = true
                return (schedule, state.bytes.count > 65536)
            }
            if large {
                writer.async { self.drain() }
            } else if schedule {
                writer.asyncAfter(deadline: .now() + .milliseconds(20)) { self.drain() }
            }
        case .memory:
            lines.withLock { $0.append(line) }
        }
    }

    private func drain() {
        let bytes = pending.withLock { state -> [UInt8] in
            let bytes = state.bytes
            state.bytes.removeAll(keepingCapacity: true)
            state.scheduled = false
            return bytes
        }
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(2, $0.baseAddress.map { $0 + offset }, $0.count - offset) }
            if count <= 0 {
                if count < 0 && errno == EINTR { continue }
                return
            }
            offset += count
        }
    }

    /// Writes every pending line now.
    public func flush() {
        writer.sync { drain() }
    }

    /// Everything written so far (memory sinks only).
    public var captured: String {
        lines.withLock { $0.joined() }
    }
}
