import CMicroHTTPD
import Glibc
import Synchronization

/// The HTTP/1.1 server: a thin adapter over GNU libmicrohttpd, and nothing else.
///
/// libmicrohttpd parses HTTP, enforces connection and memory limits and timeouts, and de-chunks
/// uploads. This adapter collects each request's headers and body, refuses ambiguous framing that
/// libmicrohttpd 0.9.75 lets through, enforces the body cap, and hands a complete `HTTPRequest` to the
/// handler. A handler may answer later (after an outbox COMMIT): the connection is suspended meanwhile,
/// so no pool thread waits for a disk.
///
/// Everything per-request lives in `RequestContext`; the daemon and the listening socket, set by
/// `start` and taken by `stop`, are behind a mutex.
public final class HTTPServer: Sendable {
    /// Limits and addresses.
    public struct Configuration: Sendable {
        /// The interface to listen on (a name or an IPv4/IPv6 literal).
        public var host = "127.0.0.1"
        /// The port; 0 picks a free one (read it back from `port`).
        public var port = 7373
        /// The largest request body accepted; larger ones get `413`.
        public var maxBodyBytes = 256 * 1024
        /// Connections open at once, in total.
        public var connectionLimit = 1024
        /// Connections open at once from one IP address (browsers open about six each: never below 16).
        public var perIPConnectionLimit = 64
        /// Seconds of inactivity before a connection is closed (libmicrohttpd needs it in epoll mode).
        public var idleTimeoutSeconds = 30
        /// Memory per connection for headers and buffers: bounds the header size.
        public var connectionMemoryBytes = 32 * 1024
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
    let logger: Logger
    private let listening = Mutex(Listening())
    /// Requests received and not yet completed (for draining at stop).
    let activeRequests = Atomic<Int>(0)
    private let boundPort = Atomic<Int>(0)

    /// The port actually bound (differs from the configuration's when that was 0).
    public var port: Int { boundPort.load(ordering: .acquiring) }

    /// The running daemon and the socket it listens on.
    private struct Listening: Sendable {
        var daemon: Daemon?
        var descriptor: Int32 = -1
    }

    /// A libmicrohttpd daemon handle.
    ///
    /// `@unchecked Sendable`: libmicrohttpd's daemon calls (`MHD_quiesce_daemon`, `MHD_stop_daemon`) may
    /// come from any thread; `stop` takes the handle out of `listening`, so only one caller gets it.
    private struct Daemon: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// A server that will hand requests to `handler`.
    public init(configuration: Configuration, logger: Logger = Logger(label: "http"), handler: @escaping Handler) {
        self.configuration = configuration
        self.handler = handler
        self.logger = logger
    }

    deinit {
        listening.withLock { state in
            if let daemon = state.daemon { MHD_stop_daemon(daemon.pointer) }
            if state.descriptor >= 0 { close(state.descriptor) }
        }
    }

    /// Binds the listening socket and starts serving on libmicrohttpd's threads.
    public func start() throws {
        let fd = try Self.listen(host: configuration.host, port: configuration.port)
        boundPort.store(Self.boundPort(fd), ordering: .releasing)
        var limits = jotter_mhd_config(
            flags: MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
                | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ITC.rawValue,
            listen_fd: fd,
            thread_pool_size: UInt32(max(configuration.threads, 1)),
            connection_limit: UInt32(configuration.connectionLimit),
            per_ip_connection_limit: UInt32(max(configuration.perIPConnectionLimit, 16)),
            connection_timeout_seconds: UInt32(configuration.idleTimeoutSeconds),
            connection_memory_limit: configuration.connectionMemoryBytes,
            tls_key_pem: nil, tls_cert_pem: nil)
        let me = Unmanaged.passUnretained(self).toOpaque()
        // libmicrohttpd reads the PEM strings while starting (it hands them to GnuTLS then).
        let started = (configuration.tls?.keyPEM ?? "").withCString { key in
            (configuration.tls?.certificatePEM ?? "").withCString { certificate in
                if configuration.tls != nil {
                    limits.tls_key_pem = key
                    limits.tls_cert_pem = certificate
                }
                return jotter_mhd_start(&limits, jotterAccessHandler, me, jotterRequestCompleted, me)
            }
        }
        guard let started else {
            close(fd)
            throw StartError.daemon
        }
        let daemon = Daemon(pointer: started)
        listening.withLock { $0 = Listening(daemon: daemon, descriptor: fd) }
    }

    /// Stops accepting, waits up to `drainTimeout` seconds for requests in flight, then stops.
    public func stop(drainTimeout: Double = 5) {
        let taken = listening.withLock { state in
            defer { state = Listening() }
            return state
        }
        guard let daemon = taken.daemon else { return }
        _ = MHD_quiesce_daemon(daemon.pointer)
        let deadline = monotonicNanoseconds() + UInt64(drainTimeout * 1e9)
        while activeRequests.load(ordering: .acquiring) > 0 && monotonicNanoseconds() < deadline {
            usleep(5_000)
        }
        MHD_stop_daemon(daemon.pointer)
        if taken.descriptor >= 0 { close(taken.descriptor) }
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

// MARK: libmicrohttpd callbacks: each hands over to Swift at once.

private func jotterAccessHandler(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
    _ uploadSize: UnsafeMutablePointer<Int>?, _ requestSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let uploadSize, let requestSlot else { return .NO }
    return Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        .access(connection: connection, url: url, method: method, uploadData: uploadData,
                uploadSize: uploadSize, requestSlot: requestSlot)
}

private func jotterRequestCompleted(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ requestSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ reason: MHD_RequestTerminationCode
) {
    guard let cls, let requestSlot, let pointer = requestSlot.pointee else { return }
    requestSlot.pointee = nil
    Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        .completed(Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue(), reason: reason)
}

private func jotterCollectValue(
    _ cls: UnsafeMutableRawPointer?, _ kind: MHD_ValueKind, _ key: UnsafePointer<CChar>?,
    _ value: UnsafePointer<CChar>?
) -> MHD_Result {
    guard let cls, let key else { return .YES }
    Unmanaged<RequestContext>.fromOpaque(cls).takeUnretainedValue()
        .collect(kind: kind, key: String(cString: key), value: value.map { String(cString: $0) } ?? "")
    return .YES
}

extension HTTPServer {
    fileprivate func access(connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
                            uploadData: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
                            requestSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let pointer = requestSlot.pointee else {
            // First call: headers are in. Refuse bad framing now, before any body is read.
            let context = RequestContext(connection: connection)
            activeRequests.add(1, ordering: .relaxed)
            requestSlot.pointee = Unmanaged.passRetained(context).toOpaque()
            context.method = method.map { String(cString: $0) } ?? ""
            context.path = url.map { String(cString: $0) } ?? "/"
            let me = Unmanaged.passUnretained(context).toOpaque()
            MHD_get_connection_values(connection, .HEADER_KIND, jotterCollectValue, me)
            MHD_get_connection_values(connection, .GET_ARGUMENT_KIND, jotterCollectValue, me)
            if let refusal = framingRefusal(context.headers) {
                return queue(refusal, context)
            }
            return .YES
        }
        let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            let count = uploadSize.pointee
            uploadSize.pointee = 0
            if context.queued { return .YES }
            if context.discarded > 0 || context.body.count + count > configuration.maxBodyBytes {
                // libmicrohttpd cannot answer while a body is still arriving: drop it and answer 413 at
                // the end; a client that keeps sending far past the cap is cut off.
                context.body = []
                context.discarded += count
                return context.discarded > 4 * configuration.maxBodyBytes + 1_048_576 ? .NO : .YES
            }
            if let uploadData {
                context.body.append(contentsOf: UnsafeRawBufferPointer(start: uploadData, count: count))
            }
            return .YES
        }
        if context.queued { return .YES }
        if context.discarded > 0 {
            return queue(Self.tooLarge(configuration.maxBodyBytes), context)
        }
        if !context.dispatched {
            context.dispatched = true
            var address = [CChar](repeating: 0, count: 64)
            jotter_mhd_client_address(connection, &address, address.count)
            let client = String(decoding: address.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)),
                                as: UTF8.self)
            let request = HTTPRequest(method: context.method, path: context.path, query: context.query,
                                      headers: context.headers, body: context.body, remoteAddress: client)
            context.body = []
            handler(request) { [reply = context.reply] response in reply.complete(response) }
        }
        let response = context.reply.takeOrSuspend()
        guard let response else { return .YES }
        return queue(response, context)
    }

    /// Requests libmicrohttpd 0.9.75 accepts but whose meaning is ambiguous (request smuggling).
    private func framingRefusal(_ headers: HTTPHeaders) -> HTTPResponse? {
        if headers.values("Host").count != 1 {
            return Router.finish(.error(400, code: "bad_request", message: "A request needs exactly one Host header."))
        }
        let lengths = headers.values("Content-Length")
        if lengths.count > 1 {
            return Router.finish(.error(400, code: "bad_request", message: "More than one Content-Length header."))
        }
        if !lengths.isEmpty && !headers.values("Transfer-Encoding").isEmpty {
            return Router.finish(.error(400, code: "bad_request",
                                        message: "Content-Length together with Transfer-Encoding."))
        }
        if let length = lengths.first {
            guard let value = Int(length.trimmingASCIISpaces()), value >= 0 else {
                return Router.finish(.error(400, code: "bad_request", message: "Content-Length is not a number."))
            }
            if value > configuration.maxBodyBytes {
                return Self.tooLarge(configuration.maxBodyBytes)
            }
        }
        return nil
    }

    static func tooLarge(_ limit: Int) -> HTTPResponse {
        Router.finish(.error(413, code: "too_large",
                             message: "The memo is larger than the server accepts (\(limit) bytes)."))
    }

    private func queue(_ response: HTTPResponse, _ context: RequestContext) -> MHD_Result {
        context.queued = true
        context.status = response.status
        context.route = response.route
        context.messageID = response.messageID
        if let reusable = response.reusable {
            // Built once, then queued again and again (libmicrohttpd counts its references).
            guard let mhdResponse = reusable.response(building: { Self.build(response) }) else { return .NO }
            return MHD_queue_response(context.connection, UInt32(response.status), mhdResponse)
        }
        guard let mhdResponse = Self.build(response) else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }
        return MHD_queue_response(context.connection, UInt32(response.status), mhdResponse)
    }

    /// A libmicrohttpd response with a copy of the body and every header.
    fileprivate static func build(_ response: HTTPResponse) -> OpaquePointer? {
        let mhdResponse = response.body.withUnsafeBytes { raw in
            MHD_create_response_from_buffer(raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress),
                                            .RESPMEM_MUST_COPY)
        }
        guard let mhdResponse else { return nil }
        for field in response.headers.fields {
            MHD_add_response_header(mhdResponse, field.name, field.value)
        }
        return mhdResponse
    }

    fileprivate func completed(_ context: RequestContext, reason: MHD_RequestTerminationCode) {
        activeRequests.subtract(1, ordering: .releasing)
        let elapsed = Double(monotonicNanoseconds() - context.started) / 1_000_000
        let outcome = reason == .REQUEST_TERMINATED_COMPLETED_OK ? "\(context.status)" : "aborted"
        logger.info("request", metadata: [
            "method": Self.loggable(method: context.method), "path": context.route ?? "-",
            "status": outcome, "duration_ms": String(Double(Int(elapsed * 100)) / 100),
            "message.id": context.messageID ?? "-",
        ])
    }

    /// Methods are client-chosen text: log only the ones HTTP defines.
    private static func loggable(method: String) -> String {
        ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"].contains(method)
            ? method : "OTHER"
    }
}
