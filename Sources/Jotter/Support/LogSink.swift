import Dispatch
import Glibc
import Synchronization

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
    /// Lines not yet written; whether a timed drain is scheduled, and whether an immediate one is queued.
    private let pending = Mutex<(bytes: [UInt8], scheduled: Bool, urgent: Bool)>(([], false, false))
    /// The other buffer: a drain swaps it in for the pending one and keeps the one it wrote, emptied but
    /// with its capacity, for the next swap, instead of allocating a buffer of that size per drain.
    private let spare = Mutex<[UInt8]>([])
    private let writer = DispatchQueue(label: "jotter.log")

    private init(target: Target) {
        self.target = target
    }

    /// The process's standard error.
    public static let standardError = LogSink(target: .standardError)

    /// Keeps lines in memory; read them with `captured`.
    public static func memory() -> LogSink { LogSink(target: .memory) }

    /// Writes one line, which `format` appends to the buffer it is given (ending in a line feed). For
    /// standard error that is the pending buffer itself, under its lock: no copy of the line is made.
    func write(_ format: (inout [UInt8]) -> Void) {
        switch target {
        case .standardError:
            let (schedule, large) = pending.withLock { state -> (Bool, Bool) in
                format(&state.bytes)
                let schedule = !state.scheduled
                state.scheduled = true
                // Past 64 KiB, one drain at once: queued once, not again for every line until it runs.
                let large = !state.urgent && state.bytes.count > 65536
                if large { state.urgent = true }
                return (schedule, large)
            }
            if large {
                writer.async { self.drain() }
            } else if schedule {
                writer.asyncAfter(deadline: .now() + .milliseconds(20)) { self.drain() }
            }
        case .memory:
            var line: [UInt8] = []
            format(&line)
            lines.withLock { $0.append(String(decoding: line, as: UTF8.self)) }
        }
    }

    /// Runs on `writer` only, so two drains never interleave their writes.
    private func drain() {
        dispatchPrecondition(condition: .onQueue(writer))
        var bytes = spare.withLock { spare in
            var taken: [UInt8] = []
            swap(&taken, &spare)
            return taken
        }
        pending.withLock { state in
            swap(&bytes, &state.bytes)
            state.scheduled = false
            state.urgent = false
        }
        defer {
            // Kept for the next swap, unless a burst made it large.
            if bytes.capacity <= 1 << 20 {
                bytes.removeAll(keepingCapacity: true)
            } else {
                bytes = []
            }
            spare.withLock { swap(&$0, &bytes) }
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

    /// Writes every pending line now, waiting at most `timeout` seconds: a standard error nobody reads (a
    /// paused terminal, `2>&1 | less`, a FIFO) must not keep a stopping server from exiting — it hung
    /// there after everything was stored and stopped, holding the data directory.
    public func flush(timeout: Double = 2) {
        let done = DispatchSemaphore(value: 0)
        writer.async {
            self.drain()
            done.signal()
        }
        _ = done.wait(timeout: .now() + timeout)
    }

    /// Everything written so far (memory sinks only).
    public var captured: String {
        lines.withLock { $0.joined() }
    }
}
