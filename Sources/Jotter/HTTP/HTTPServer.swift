import CMicroHTTPD
import Dispatch
import Glibc
import Synchronization

/// The HTTP/1.1 server: a thin adapter over GNU libmicrohttpd, and nothing else.
///
/// libmicrohttpd parses HTTP, enforces the header size and the idle timeout, and de-chunks uploads. This
/// adapter adds what 0.9.75 lacks: refusal of ambiguous framing (`RequestFraming`), per-client connection
/// limits that count this machine as one client and request deadlines that trickling cannot stretch
/// (`ConnectionRegistry`), a memory budget for bodies (`BodyBudget`) and the body cap. It hands a
/// complete `HTTPRequest` to the handler, whose path is the raw one (`RequestPath` normalises it, once,
/// in `Application`). A handler may answer later (after an outbox COMMIT): the connection is suspended
/// meanwhile, so no pool thread waits for a disk.
///
/// Everything per-request lives in `RequestContext`; the daemon, the listening socket and the sweeper,
/// set by `start` and taken by `stop`, are behind a mutex.
public final class HTTPServer: Sendable {
    /// Limits and addresses.
    public struct Configuration: Sendable {
        /// The interface to listen on (a name or an IPv4/IPv6 literal).
        public var host = "127.0.0.1"
        /// The port; 0 picks a free one (read it back from `port`).
        public var port = 7373
        /// The largest request body accepted; larger ones get `413`.
        public var maxBodyBytes = 256 * 1024
        /// Request bodies held in memory at once, over all connections; a request that would go beyond
        /// gets `503` with `Retry-After`.
        public var bodyMemoryBytes = 32 * 1024 * 1024
        /// Connections open at once, in total.
        public var connectionLimit = 1024
        /// Connections open at once from one client: an IPv4 address, an IPv6 /64, or this machine (all of
        /// 127.0.0.0/8 and ::1). Browsers open about six each: never below 16. Beyond it, a new connection
        /// closes the client's longest-waiting one that is not being answered.
        public var perIPConnectionLimit = 64
        /// Seconds of inactivity before a connection is closed (libmicrohttpd needs it in epoll mode).
        public var idleTimeoutSeconds = 30
        /// Seconds a request's headers may take, however slowly they trickle; counted from the
        /// connection's start or the end of its previous request (so also the longest keep-alive pause).
        public var headerTimeoutSeconds = 10
        /// Seconds a whole request (headers and body) may take, counted from the same start.
        public var requestTimeoutSeconds = 60
        /// Memory per connection for headers and buffers: bounds the header size (a request's line and
        /// headers beyond it are `414`/`431`). 16 KiB, as Node.js allows, holds a browser's headers with
        /// kilobytes of cookies; libmicrohttpd zeroes all of it after every request, so at 32 KiB that
        /// was about 3% of a `GET /`'s CPU.
        public var connectionMemoryBytes = 16 * 1024
        /// libmicrohttpd's worker threads.
        public var threads = 2
        /// Serve HTTPS with this PEM key and certificate (LAN mode); nil serves plain HTTP. The certificate
        /// may be a chain, leaf first: GnuTLS sends every certificate in it.
        public var tls: (keyPEM: String, certificatePEM: String)?

        /// The defaults.
        public init() {}
    }

    /// The callback a request is handed to; call `respond` exactly once, from any thread.
    public typealias Handler = @Sendable (HTTPRequest, _ respond: @escaping @Sendable (HTTPResponse) -> Void) -> Void

    /// Judges a request that has a body by its head alone (the request has no body yet), before any of its
    /// body is read or memory reserved for it: a refusal is answered at once and the connection closed, so a
    /// client that may not send (an unpaired device) cannot hold the body budget. Nil lets it in; the
    /// handler still sees the whole request and judges it again.
    public typealias Admission = @Sendable (HTTPRequest) -> HTTPResponse?

    /// Why the server could not start.
    public enum StartError: Error, CustomStringConvertible, Sendable {
        case resolve(host: String)
        case bind(host: String, port: Int, errno: Int32)
        case daemon

        public var description: String {
            switch self {
            case .resolve(let host): return "cannot resolve listen address \(host)"
            case .bind(let host, let port, let code):
                return "cannot listen on \(host):\(port): \(String(cString: strerror(code)))"
            case .daemon: return "libmicrohttpd failed to start"
            }
        }
    }

    let configuration: Configuration
    let handler: Handler
    let admission: Admission?
    let logger: Logger
    /// Who holds which connection; closes the late and makes room for the punctual.
    let registry: ConnectionRegistry
    /// Memory for request bodies, over all connections.
    let bodyBudget: BodyBudget
    private let listening = Mutex(Listening())
    /// Requests received (headers in) and not yet completed (for draining at stop).
    let activeRequests = Atomic<Int>(0)
    /// Requests whose connection sleeps until their handler answers.
    let parking = RequestContext.Parking()
    private let boundPort = Atomic<Int>(0)

    /// The port actually bound (differs from the configuration's when that was 0).
    public var port: Int { boundPort.load(ordering: .acquiring) }

    /// The running daemon, the socket it listens on, the thread accepting there, and the timer that
    /// enforces deadlines.
    private struct Listening: Sendable {
        var daemon: Daemon?
        var descriptor: Int32 = -1
        var acceptor: Acceptor?
        var sweeper: Sweeper?
        /// Daemons replaced by `replaceCertificate`, serving the connections they had until those end.
        var retiring: [Retiring] = []
    }

    /// The thread that accepts connections and hands them to the daemon's workers (`jotter_acceptor`).
    ///
    /// `@unchecked Sendable`: only `stop` (or `deinit`) uses it, after taking it out of `listening`.
    private struct Acceptor: @unchecked Sendable {
        let pointer: UnsafeMutablePointer<jotter_acceptor>
    }

    /// The sweeper's timer.
    ///
    /// `@unchecked Sendable`: a `DispatchSourceTimer` may be cancelled from any thread; nothing else is done
    /// with it after `start`.
    private struct Sweeper: @unchecked Sendable {
        let timer: any DispatchSourceTimer
    }

    /// A daemon `replaceCertificate` replaced: since when, and how many sweeps in a row found it empty.
    private struct Retiring: Sendable {
        let daemon: Daemon
        let since: UInt64
        var idleSweeps = 0
    }

    /// How long a replaced daemon is kept at least. A connection handed to it just before the switch is
    /// queued for its worker thread and counted only once the worker takes it (daemon.c,
    /// `new_connection_process_`): a count of 0 read in between must not stop the daemon under it.
    static let retirementGraceNanoseconds: UInt64 = 2_000_000_000

    /// A libmicrohttpd daemon handle.
    ///
    /// `@unchecked Sendable`: libmicrohttpd's daemon calls (`MHD_quiesce_daemon`, `MHD_stop_daemon`) may
    /// come from any thread; `stop` takes the handle out of `listening`, so only one caller gets it.
    private struct Daemon: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// A server that will hand requests to `handler`.
    public init(configuration: Configuration, logger: Logger = Logger(label: "http"), admission: Admission? = nil,
                handler: @escaping Handler) {
        self.configuration = configuration
        self.handler = handler
        self.admission = admission
        self.logger = logger
        registry = ConnectionRegistry(limits: ConnectionRegistry.Limits(
            perClient: max(configuration.perIPConnectionLimit, 16), total: max(configuration.connectionLimit, 1),
            headerTimeout: UInt64(max(configuration.headerTimeoutSeconds, 1)) * 1_000_000_000,
            requestTimeout: UInt64(max(configuration.requestTimeoutSeconds, 1)) * 1_000_000_000))
        let bodyMemory = max(configuration.bodyMemoryBytes, configuration.maxBodyBytes)
        bodyBudget = BodyBudget(limit: bodyMemory, perClient: max(bodyMemory / 8, configuration.maxBodyBytes))
    }

    deinit {
        listening.withLock { state in
            state.sweeper?.timer.cancel()
            if let acceptor = state.acceptor { jotter_acceptor_stop(acceptor.pointer) }
            if let daemon = state.daemon { MHD_stop_daemon(daemon.pointer) }
            for retired in state.retiring { MHD_stop_daemon(retired.daemon.pointer) }
            if state.descriptor >= 0 { close(state.descriptor) }
        }
    }

    /// Binds the listening socket and starts serving on libmicrohttpd's threads.
    public func start() throws {
        let fd = try Self.listen(host: configuration.host, port: configuration.port)
        boundPort.store(Self.boundPort(fd), ordering: .releasing)
        guard let daemon = startDaemon(tls: configuration.tls) else {
            close(fd)
            throw StartError.daemon
        }
        guard let accepting = jotter_acceptor_start(fd, daemon.pointer) else {
            MHD_stop_daemon(daemon.pointer)
            close(fd)
            throw StartError.daemon
        }
        let sweeper = Sweeper(timer: startSweeper())
        listening.withLock {
            $0 = Listening(daemon: daemon, descriptor: fd, acceptor: Acceptor(pointer: accepting), sweeper: sweeper)
        }
    }

    /// Serves new connections with another key and certificate (LAN mode, when the machine's addresses
    /// change), without a restart: a new daemon takes every connection accepted from now on; the old one
    /// keeps those it has (a TLS session cannot change its certificate) and stops once they have ended,
    /// which the request deadlines and the idle timeout bound. False if the server is not serving HTTPS
    /// (or not running), or the new daemon could not start; the old certificate is then still served.
    @discardableResult
    public func replaceCertificate(keyPEM: String, certificatePEM: String) -> Bool {
        guard configuration.tls != nil, let daemon = startDaemon(tls: (keyPEM, certificatePEM)) else { return false }
        let replaced = listening.withLock { state -> Bool in
            guard let acceptor = state.acceptor, let current = state.daemon else { return false }
            _ = jotter_acceptor_switch(acceptor.pointer, daemon.pointer)
            state.daemon = daemon
            state.retiring.append(Retiring(daemon: current, since: monotonicNanoseconds()))
            return true
        }
        if !replaced { MHD_stop_daemon(daemon.pointer) }
        return replaced
    }

    /// Daemons started and not yet stopped (1 while serving; more while a replaced one still has connections).
    var daemonCount: Int {
        listening.withLock { ($0.daemon == nil ? 0 : 1) + $0.retiring.count }
    }

    /// A daemon with Jotter's limits, serving HTTPS with `tls` (plain HTTP when nil); nil if it failed.
    private func startDaemon(tls: (keyPEM: String, certificatePEM: String)?) -> Daemon? {
        var limits = jotter_mhd_config(
            // ITC: a connection handed over by the acceptor wakes its worker at once.
            flags: MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
                | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ITC.rawValue,
            thread_pool_size: UInt32(max(configuration.threads, 1)),
            // The registry enforces the real limits; libmicrohttpd's, split between its threads, only
            // backs them up, with room for connections closed but not yet cleaned up.
            connection_limit: UInt32(2 * max(configuration.connectionLimit, 1) + 64),
            per_ip_connection_limit: 0,
            connection_timeout_seconds: UInt32(configuration.idleTimeoutSeconds),
            connection_memory_limit: configuration.connectionMemoryBytes,
            tls_key_pem: nil, tls_cert_pem: nil,
            notify_connection: jotterConnectionChanged, uri_log: jotterRequestLine,
            callbacks_cls: nil)
        let me = Unmanaged.passUnretained(self).toOpaque()
        limits.callbacks_cls = me
        // libmicrohttpd reads the PEM strings while starting (it hands them to GnuTLS then).
        let started = (tls?.keyPEM ?? "").withCString { key in
            (tls?.certificatePEM ?? "").withCString { certificate in
                if tls != nil {
                    limits.tls_key_pem = key
                    limits.tls_cert_pem = certificate
                }
                return jotter_mhd_start(&limits, jotterAccessHandler, me, jotterRequestCompleted, me)
            }
        }
        return started.map(Daemon.init(pointer:))
    }

    /// Stops the replaced daemons that no longer hold a connection: past the grace period, and found
    /// empty by two sweeps in a row (the sweeper asks four times a second).
    private func stopIdleRetiredDaemons() {
        let now = monotonicNanoseconds()
        let idle = listening.withLock { state -> [Daemon] in
            guard !state.retiring.isEmpty else { return [] }
            var idle: [Daemon] = []
            state.retiring = state.retiring.compactMap { retiring in
                var retiring = retiring
                retiring.idleSweeps = jotter_mhd_connection_count(retiring.daemon.pointer) == 0 ? retiring.idleSweeps + 1 : 0
                guard retiring.idleSweeps >= 2, now - retiring.since >= Self.retirementGraceNanoseconds else { return retiring }
                idle.append(retiring.daemon)
                return nil
            }
            return idle
        }
        for daemon in idle { MHD_stop_daemon(daemon.pointer) }
    }

    /// Stops accepting, waits up to `drainTimeout` seconds for requests in flight, then stops.
    public func stop(drainTimeout: Double = 5) {
        let taken = listening.withLock { state in
            defer { state = Listening() }
            return state
        }
        guard let daemon = taken.daemon else { return }
        // No new connections; those open finish their requests.
        if let acceptor = taken.acceptor { jotter_acceptor_stop(acceptor.pointer) }
        let deadline = monotonicNanoseconds() + UInt64(drainTimeout * 1e9)
        while activeRequests.load(ordering: .acquiring) > 0 && monotonicNanoseconds() < deadline {
            usleep(5_000)
        }
        // Handlers that have not answered by now are answered for: libmicrohttpd must not be stopped with
        // a connection asleep. Their 503s get a moment to go out.
        parking.stop(answering: Self.stopping)
        let answered = monotonicNanoseconds() + 1_000_000_000
        while activeRequests.load(ordering: .acquiring) > 0 && monotonicNanoseconds() < answered {
            usleep(5_000)
        }
        taken.sweeper?.timer.cancel()
        MHD_stop_daemon(daemon.pointer)
        for retired in taken.retiring { MHD_stop_daemon(retired.daemon.pointer) }
        if taken.descriptor >= 0 { close(taken.descriptor) }
    }

    /// Four times a second: close connections past their deadline, end those whose peer finished after a
    /// later request (`ConnectionRegistry`), give memory back after a burst, stop replaced daemons whose
    /// connections have all ended.
    private func startSweeper() -> any DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "jotter.http.sweeper"))
        let registry = registry, bodyBudget = bodyBudget, logger = logger
        timer.setEventHandler { [weak self] in
            self?.stopIdleRetiredDaemons()
            let closed = registry.sweep(now: monotonicNanoseconds())
            if !closed.isEmpty {
                logger.info("closed late connections", metadata: [
                    "header_timeout": String(closed[.headerTimeout] ?? 0),
                    "request_timeout": String(closed[.requestTimeout] ?? 0),
                ])
            }
            bodyBudget.trimIfIdle()
        }
        timer.schedule(deadline: .now() + .milliseconds(250), repeating: .milliseconds(250), leeway: .milliseconds(50))
        timer.resume()
        return timer
    }

    // MARK: Socket

    private static func listen(host: String, port: Int) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let lookupHost = host == "*" || host.isEmpty ? nil : host
        guard getaddrinfo(lookupHost, String(port), &hints, &list) == 0, let first = list else {
            throw StartError.resolve(host: host)
        }
        defer { freeaddrinfo(list) }
        var lastError: Int32 = EADDRNOTAVAIL
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let info = candidate {
            candidate = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue),
                            info.pointee.ai_protocol)
            guard fd >= 0 else {
                lastError = errno
                continue
            }
            var yes: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
            if bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 && Glibc.listen(fd, 1024) == 0 {
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                return fd
            }
            lastError = errno
            close(fd)
        }
        throw StartError.bind(host: host, port: port, errno: lastError)
    }

    private static func boundPort(_ fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { return 0 }
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            }
        case AF_INET6:
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    Int(UInt16(bigEndian: $0.pointee.sin6_port))
                }
            }
        default:
            return 0
        }
    }
}
