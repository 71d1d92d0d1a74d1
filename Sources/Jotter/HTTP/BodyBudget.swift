import CMicroHTTPD
import Synchronization

/// One budget for the request bodies held in memory across all connections, so that many clients each
/// holding an almost complete body cannot grow the process without bound (the per-request cap alone
/// lets 1 000 connections hold 1 000 × `maxBodyBytes`).
///
/// A request reserves its `Content-Length` before its body is read, a chunked one reserves as its body
/// grows; what does not fit is refused with `503` and `Retry-After`. A request gives its reservation
/// back when it ends. After a burst the freed memory sits in glibc's free lists, where RSS still counts
/// it, so `trimIfIdle` hands it back to the system once the budget is nearly unused again.
final class BodyBudget: Sendable {
    /// Bytes that may be reserved at once.
    let limit: Int
    private let used = Atomic<Int>(0)
    /// The most reserved at once since the last trim.
    private let peak = Atomic<Int>(0)

    /// A budget of `limit` bytes.
    init(limit: Int) {
        self.limit = limit
    }

    /// Bytes reserved now.
    var reserved: Int { used.load(ordering: .relaxed) }

    /// Reserves `bytes`; false (and nothing reserved) if they do not fit.
    func reserve(_ bytes: Int) -> Bool {
        guard bytes > 0 else { return true }
        var current = used.load(ordering: .relaxed)
        while true {
            guard current + bytes <= limit else { return false }
            let (exchanged, original) = used.compareExchange(expected: current, desired: current + bytes,
                                                             ordering: .relaxed)
            if exchanged {
                _ = peak.max(current + bytes, ordering: .relaxed)
                return true
            }
            current = original
        }
    }

    /// Gives back `bytes` reserved earlier.
    func release(_ bytes: Int) {
        guard bytes > 0 else { return }
        used.subtract(bytes, ordering: .relaxed)
    }

    /// Returns freed heap memory to the system (`malloc_trim`) if bodies filled more than a megabyte since
    /// the last time and now hold less than a sixteenth of that. Cheap to call often.
    func trimIfIdle() {
        let high = peak.load(ordering: .relaxed)
        guard high > 1 << 20, used.load(ordering: .relaxed) < high / 16 else { return }
        peak.store(used.load(ordering: .relaxed), ordering: .relaxed)
        jotter_malloc_trim()
    }
}
