import Glibc
import Synchronization

/// Every open connection, whose it is, and where its current request stands: the admission control and
/// request deadlines that libmicrohttpd lacks (its per-IP limit counts each loopback address apart, and
/// its timeout restarts on every byte, so a client dripping a byte a second keeps a connection forever).
///
/// - A client is an IPv4 address, an IPv6 /64, or this machine: all of 127.0.0.0/8 and ::1 are one.
/// - A client may hold `perClient` connections and everyone together `total`. A connection beyond either
///   closes the one that has waited longest without a request being answered (the same client's, or
///   anyone's for the total), so connections that trickle cannot keep out one that sends its request in
///   time: slots stay free for clients that behave. A new connection is turned away only when every
///   other one is being answered.
/// - Headers must be in within `headerTimeout`, the whole request (headers and body) within
///   `requestTimeout`, both counted from the connection's start or the end of its previous request, and
///   however slowly the bytes come. An idle keep-alive connection is therefore closed after
///   `headerTimeout`. A request that is being answered has no deadline here.
///
/// Closing is `shutdown(2)` on the socket, under the registry's lock: libmicrohttpd sees the peer gone
/// and cleans up as for any client that leaves. It reports the end (`closed`, which drops the record)
/// before it closes the descriptor, so a descriptor shut here is never another connection's.
///
/// A client may end its half of the connection right after a request (`nc -N`). libmicrohttpd 0.9.75
/// notices only on another epoll edge, which an end-of-file that came with the request never brings,
/// so the connection would linger until a timeout. The first request of a connection is checked at
/// once (`HTTPServer`, answered with `Connection: close`); after every later one the sweep looks once,
/// while the connection waits for its next request, and shuts the reading side of one whose peer has
/// finished: that is the edge libmicrohttpd waits for, and it closes the connection as for any client
/// that leaves. Keep-alive requests thus cost no system call for it.
final class ConnectionRegistry: Sendable {
    /// Limits; times in nanoseconds.
    struct Limits: Sendable {
        var perClient: Int
        var total: Int
        var headerTimeout: UInt64
        var requestTimeout: UInt64
    }

    /// Why the registry closed a connection (logged as the request's outcome).
    enum Closing: String, Sendable, CaseIterable {
        /// Closed to make room for a newer connection.
        case crowded
        /// Turned away: every other connection was being answered.
        case refused
        /// The headers did not arrive in time.
        case headerTimeout = "header_timeout"
        /// The request did not arrive in time.
        case requestTimeout = "request_timeout"
    }

    private struct Record {
        var client: String
        /// The peer's address as text, formatted once when the connection opened.
        var address: String?
        var descriptor: Int32
        /// When the current request began: the connection's start, or the end of the previous request.
        var since: UInt64
        var headersReceived = false
        var answering = false
        var closing: Closing?
        /// A request on this connection has ended: the next is not its first.
        var served = false
        /// Since its last request ended, the sweep has looked for its peer's end-of-file.
        var endChecked = false
    }

    private struct State {
        var records: [Int: Record] = [:]
        /// Connections not being closed, per client.
        var perClient: [String: Int] = [:]
        /// Connections not being closed.
        var open = 0
        var nextID = 1
    }

    private let state = Mutex(State())
    let limits: Limits
    private let closeSocket: @Sendable (Int32) -> Void
    private let endIfPeerFinished: @Sendable (Int32) -> Bool

    /// A registry that closes sockets with `closeSocket`, and ends the reading side of one whose peer
    /// has finished with `endIfPeerFinished` (tests record instead).
    init(limits: Limits, closeSocket: @escaping @Sendable (Int32) -> Void = { _ = shutdown($0, Int32(SHUT_RDWR)) },
         endIfPeerFinished: @escaping @Sendable (Int32) -> Bool = ConnectionRegistry.endIfPeerFinished) {
        self.limits = limits
        self.closeSocket = closeSocket
        self.endIfPeerFinished = endIfPeerFinished
    }

    /// If the peer of socket `descriptor` has sent its end-of-file and nothing waits to be read, shuts
    /// the socket's reading side (a new epoll edge; reads then end as the peer's end-of-file would).
    static func endIfPeerFinished(_ descriptor: Int32) -> Bool {
        var byte: UInt8 = 0
        guard recv(descriptor, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) == 0 else { return false }
        return shutdown(descriptor, Int32(SHUT_RD)) == 0
    }

    /// Registers a new connection and makes room for it; returns its id. If no room can be made, the
    /// new connection itself is closed (`closing(id)` is then `.refused`).
    func opened(descriptor: Int32, client: String, address: String? = nil, now: UInt64) -> Int {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.records[id] = Record(client: client, address: address, descriptor: descriptor, since: now)
            state.open += 1
            state.perClient[client, default: 0] += 1
            if state.perClient[client, default: 0] > limits.perClient {
                makeRoom(&state, client: client, for: id)
            }
            if state.records[id]?.closing == nil && state.open > limits.total {
                makeRoom(&state, client: nil, for: id)
            }
            return id
        }
    }

    /// The request's headers are complete: from now on only `requestTimeout` applies.
    func headersReceived(_ id: Int) {
        state.withLock { state in
            guard let index = state.records.index(forKey: id) else { return }
            state.records.values[index].headersReceived = true
        }
    }

    /// The peer's address as given at `opened` (nil if the connection is unknown).
    func address(_ id: Int) -> String? {
        state.withLock { $0.records[id]?.address }
    }

    /// The client the connection counts for (`client(address:)`; nil if the connection is unknown).
    func client(_ id: Int) -> String? {
        state.withLock { $0.records[id]?.client }
    }

    /// The request is complete and being answered: it is never closed here until it ends. Returns the
    /// peer's address as given at `opened`, and whether this is the connection's first request.
    @discardableResult
    func answering(_ id: Int) -> (address: String?, first: Bool) {
        state.withLock { state in
            guard let index = state.records.index(forKey: id) else { return (nil, true) }
            state.records.values[index].answering = true
            return (state.records.values[index].address, !state.records.values[index].served)
        }
    }

    /// The request ended (answered or not); the next one's time starts now.
    func requestEnded(_ id: Int, now: UInt64) {
        state.withLock { state in
            // Changed in place: a copy out and back would retain and release the record's strings.
            guard let index = state.records.index(forKey: id) else { return }
            state.records.values[index].since = now
            state.records.values[index].headersReceived = false
            state.records.values[index].answering = false
            state.records.values[index].served = true
            state.records.values[index].endChecked = false
        }
    }

    /// libmicrohttpd closed the connection.
    func closed(_ id: Int) {
        state.withLock { state in
            guard let record = state.records.removeValue(forKey: id) else { return }
            if record.closing == nil { forget(&state, record) }
        }
    }

    /// Why the registry closed connection `id`, if it did.
    func closing(_ id: Int) -> Closing? {
        state.withLock { $0.records[id]?.closing }
    }

    /// Closes every connection past its deadline; returns how many, by reason. And once after each of
    /// its requests but the first, ends the reading side of a connection waiting for its next request
    /// whose peer has finished (see the type's notes).
    @discardableResult
    func sweep(now: UInt64) -> [Closing: Int] {
        state.withLock { state in
            for index in state.records.indices {
                let record = state.records.values[index]
                guard record.served, !record.endChecked, record.closing == nil, !record.headersReceived,
                      !record.answering else { continue }
                state.records.values[index].endChecked = true
                _ = endIfPeerFinished(record.descriptor)
            }
            var late: [(id: Int, reason: Closing)] = []
            for (id, record) in state.records where record.closing == nil && !record.answering {
                let elapsed = now >= record.since ? now - record.since : 0
                if !record.headersReceived && elapsed > min(limits.headerTimeout, limits.requestTimeout) {
                    late.append((id, .headerTimeout))
                } else if elapsed > limits.requestTimeout {
                    late.append((id, .requestTimeout))
                }
            }
            var closed: [Closing: Int] = [:]
            for (id, reason) in late {
                close(&state, id, reason)
                closed[reason, default: 0] += 1
            }
            return closed
        }
    }

    /// Connections whose request is being answered.
    func answeringCount() -> Int {
        state.withLock { state in state.records.values.reduce(0) { $0 + ($1.answering ? 1 : 0) } }
    }

    /// Connections open and not being closed: in total, and those of `client`.
    func count(client: String? = nil) -> Int {
        state.withLock { state in client.map { state.perClient[$0] ?? 0 } ?? state.open }
    }

    /// Closes the connection of `client` (or anyone's) that has waited longest and is not being answered;
    /// if there is none, closes `id` itself.
    private func makeRoom(_ state: inout State, client: String?, for id: Int) {
        var victim: (id: Int, since: UInt64)?
        for (candidate, record) in state.records where candidate != id && record.closing == nil
            && !record.answering && (client == nil || record.client == client) {
            if victim == nil || record.since < victim?.since ?? 0 { victim = (candidate, record.since) }
        }
        if let victim {
            close(&state, victim.id, .crowded)
        } else {
            close(&state, id, .refused)
        }
    }

    private func close(_ state: inout State, _ id: Int, _ reason: Closing) {
        guard var record = state.records[id], record.closing == nil else { return }
        record.closing = reason
        state.records[id] = record
        forget(&state, record)
        closeSocket(record.descriptor)
    }

    private func forget(_ state: inout State, _ record: Record) {
        state.open -= 1
        let remaining = (state.perClient[record.client] ?? 1) - 1
        state.perClient[record.client] = remaining > 0 ? remaining : nil
    }

    /// The client a peer address belongs to, for the limits: this machine (all of 127.0.0.0/8, ::1 and
    /// their IPv4-mapped forms) is one client, an IPv4 address is one, an IPv6 address counts by its /64.
    static func client(address: String) -> String {
        if Loopback.contains(address: address) { return BodyBudget.thisMachine }
        var address = address
        if address.lowercased().hasPrefix("::ffff:") && address.contains(".") { address = String(address.dropFirst(7)) }
        guard address.contains(":") else { return address }
        var bytes = in6_addr()
        guard inet_pton(AF_INET6, address, &bytes) == 1 else { return address }
        let prefix = withUnsafeBytes(of: &bytes) { raw in
            stride(from: 0, to: 8, by: 2).map { String(UInt16(raw[$0]) << 8 | UInt16(raw[$0 + 1]), radix: 16) }
        }
        return prefix.joined(separator: ":") + "::/64"
    }
}
