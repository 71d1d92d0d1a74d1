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
///
/// One client (an address, an IPv6 /64: `ConnectionRegistry.client(address:)`) may hold at most `perClient`
/// of it: sixteen connections each announcing a 2 MiB body held a relay's whole budget, every other
/// client's request answered `503 busy`. This machine's own clients (the page here, scripts, a proxy on
/// loopback) are not counted apart.
final class BodyBudget: Sendable {
    /// Bytes that may be reserved at once.
    let limit: Int
    /// Bytes one client other than this machine may hold at once.
    let perClient: Int
    private let used = Atomic<Int>(0)
    /// The most reserved at once since the last trim.
    private let peak = Atomic<Int>(0)
    /// What each client holds (those holding anything; never this machine).
    private let held = Mutex<[String: Int]>([:])

    /// A budget of `limit` bytes, of which one client may hold `perClient`.
    init(limit: Int, perClient: Int? = nil) {
        self.limit = limit
        self.perClient = min(perClient ?? limit, limit)
    }

    /// Bytes reserved now.
    var reserved: Int { used.load(ordering: .relaxed) }

    /// Bytes `client` holds now.
    func reserved(by client: String) -> Int { held.withLock { $0[client] ?? 0 } }

    /// Reserves `bytes` for `client`; false (and nothing reserved) if they do not fit its share or the whole.
    func reserve(_ bytes: Int, client: String = BodyBudget.thisMachine) -> Bool {
        guard bytes > 0 else { return true }
        let counted = countsApart(client)
        if counted {
            let fits = held.withLock { held in
                let now = held[client] ?? 0
                guard now + bytes <= perClient else { return false }
                held[client] = now + bytes
                return true
            }
            guard fits else { return false }
        }
        var current = used.load(ordering: .relaxed)
        while true {
            guard current + bytes <= limit else {
                if counted { give(bytes, back: client) }
                return false
            }
            let (exchanged, original) = used.compareExchange(expected: current, desired: current + bytes,
                                                             ordering: .relaxed)
            if exchanged {
                _ = peak.max(current + bytes, ordering: .relaxed)
                return true
            }
            current = original
        }
    }

    /// Gives back `bytes` reserved earlier for `client`.
    func release(_ bytes: Int, client: String = BodyBudget.thisMachine) {
        guard bytes > 0 else { return }
        if countsApart(client) { give(bytes, back: client) }
        used.subtract(bytes, ordering: .relaxed)
    }

    /// Whether `client`'s bytes are counted against its share: not this machine's, and only when a share is
    /// less than the whole.
    private func countsApart(_ client: String) -> Bool {
        client != Self.thisMachine && perClient < limit
    }

    private func give(_ bytes: Int, back client: String) {
        held.withLock { held in
            let left = (held[client] ?? 0) - bytes
            held[client] = left > 0 ? left : nil
        }
    }

    /// The client key of this machine's own connections (`ConnectionRegistry.client(address:)`).
    static let thisMachine = "this machine"

    /// Returns freed heap memory to the system (`malloc_trim`) if bodies filled more than a megabyte since
    /// the last time and now hold less than a sixteenth of that. Cheap to call often.
    func trimIfIdle() {
        let high = peak.load(ordering: .relaxed)
        guard high > 1 << 20, used.load(ordering: .relaxed) < high / 16 else { return }
        peak.store(used.load(ordering: .relaxed), ordering: .relaxed)
        jotter_malloc_trim()
    }
}
