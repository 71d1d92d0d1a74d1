import CMicroHTTPD
import Glibc

// MARK: libmicrohttpd callbacks: each hands over to Swift at once.

/// MHD_OPTION_NOTIFY_CONNECTION: a connection started or closed.
func jotterConnectionChanged(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection, let socketContext else { return }
    Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        .connectionChanged(connection, socketContext: socketContext, started: code == .CONNECTION_NOTIFY_STARTED)
}

/// MHD_OPTION_URI_LOG_CALLBACK: a request line was parsed; the result becomes the request's `*req_cls`.
func jotterRequestLine(
    _ cls: UnsafeMutableRawPointer?, _ uri: UnsafePointer<CChar>?, _ connection: OpaquePointer?
) -> UnsafeMutableRawPointer? {
    guard let cls, let uri, let connection else { return nil }
    return Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue().requestLine(uri, connection: connection)
}

/// The access handler: the headers are in (first call), a piece of body, or the request is complete.
func jotterAccessHandler(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
    _ uploadSize: UnsafeMutablePointer<Int>?, _ requestSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let uploadSize, let pointer = requestSlot?.pointee else { return .NO }
    return Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        .access(Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue(), method: method,
                version: version, uploadData: uploadData, uploadSize: uploadSize)
}

/// MHD_OPTION_NOTIFY_COMPLETED: the request ended, answered or not; releases its context.
func jotterRequestCompleted(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ requestSlot: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ reason: MHD_RequestTerminationCode
) {
    guard let cls, let requestSlot, let pointer = requestSlot.pointee else { return }
    requestSlot.pointee = nil
    Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        .completed(Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue(), reason: reason)
}

private func jotterCollectValue(
    _ cls: UnsafeMutableRawPointer?, _ kind: MHD_ValueKind, _ key: UnsafePointer<CChar>?, _ keyLength: Int,
    _ value: UnsafePointer<CChar>?, _ valueLength: Int
) -> MHD_Result {
    guard let cls, let key else { return .YES }
    Unmanaged<RequestContext>.fromOpaque(cls).takeUnretainedValue()
        .collect(kind: kind, key: key, keyLength: keyLength, value: value, valueLength: valueLength)
    return .YES
}

// MARK: One request, from its request line to its completion.

extension HTTPServer {
    /// A connection opened (registered, and room made for it) or closed.
    func connectionChanged(_ connection: OpaquePointer,
                           socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>, started: Bool) {
        guard started else {
            registry.closed(Int(bitPattern: socketContext.pointee))
            return
        }
        let address = Self.clientAddress(connection)
        let id = registry.opened(descriptor: jotter_mhd_connection_fd(connection),
                                 client: ConnectionRegistry.client(address: address), address: address,
                                 now: monotonicNanoseconds())
        socketContext.pointee = UnsafeMutableRawPointer(bitPattern: id)
    }

    /// The request line is in: its context is born, with the request-target as the client sent it. From
    /// here on libmicrohttpd reports the request's end, also if it refuses the request by itself.
    func requestLine(_ uri: UnsafePointer<CChar>, connection: OpaquePointer) -> UnsafeMutableRawPointer {
        let context = RequestContext(connection: connection, connectionID: Int(jotter_mhd_socket_context(connection)),
                                     target: uri, parking: parking)
        return Unmanaged.passRetained(context).toOpaque()
    }

    /// One call of the access handler for `context`'s request.
    func access(_ context: RequestContext, method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?,
                uploadData: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>) -> MHD_Result {
        if !context.headersSeen {
            context.headersSeen = true
            return headersReceived(context, method: method, version: version)
        }
        if uploadSize.pointee > 0 {
            let count = uploadSize.pointee
            uploadSize.pointee = 0
            return receive(context, uploadData, count: count)
        }
        return finish(context)
    }

    /// First call: the headers are in. Refuse bad framing now, before any body is read.
    private func headersReceived(_ context: RequestContext, method: UnsafePointer<CChar>?,
                                 version: UnsafePointer<CChar>?) -> MHD_Result {
        registry.headersReceived(context.connectionID)
        activeRequests.add(1, ordering: .relaxed)
        context.method = method.map { String(cString: $0) } ?? ""
        let me = Unmanaged.passUnretained(context).toOpaque()
        MHD_get_connection_values_n(context.connection, .HEADER_KIND, jotterCollectValue, me)
        MHD_get_connection_values_n(context.connection, .GET_ARGUMENT_KIND, jotterCollectValue, me)
        context.head.headers = context.headers
        context.head.method = context.method
        context.head.version = version.map { String(cString: $0) } ?? ""
        if RequestFraming.checksLayout, let method, let version, strlen(version) > 0 {
            // Where 0.9.75 parsed the request in place (see RequestFraming.layoutIsIntact).
            let versionStart = UInt(bitPattern: version)
            context.head.targetIntact = context.targetEnd + 1 == versionStart
            context.head.layoutIntact = RequestFraming.layoutIsIntact(
                requestLineEnd: versionStart + UInt(strlen(version)), fields: context.fieldSpans,
                headerEnd: UInt(bitPattern: method) + UInt(jotter_mhd_header_size(context.connection)))
        }
        context.fieldSpans = []
        if let refusal = RequestFraming.refusal(context.head, maxBodyBytes: configuration.maxBodyBytes) {
            return queue(refusal, context)
        }
        let length = context.headers["Content-Length"].flatMap { Int($0) } ?? 0
        if let admission, length > 0 || context.headers["Transfer-Encoding"] != nil {
            let head = HTTPRequest(method: context.method, path: context.targetPath, query: context.query,
                                   headers: context.headers, body: [],
                                   remoteAddress: registry.address(context.connectionID)
                                       ?? Self.clientAddress(context.connection))
            if let refusal = admission(head) { return queue(refusal, context) }
        }
        if length > 0 || context.headers["Transfer-Encoding"] != nil {
            context.budgetClient = registry.client(context.connectionID) ?? BodyBudget.thisMachine
        }
        if length > 0 {
            guard bodyBudget.reserve(length, client: context.budgetClient) else { return queue(Self.busy, context) }
            context.reservedBytes = length
            context.body.reserveCapacity(length)
        }
        return .YES
    }

    /// A piece of the body: keep it if it fits the cap and the budget, else drop it and answer at the end
    /// (libmicrohttpd cannot answer while a body is still arriving).
    private func receive(_ context: RequestContext, _ data: UnsafePointer<CChar>?, count: Int) -> MHD_Result {
        if context.queued { return .YES }
        let needed = context.body.count + count
        if context.discarded == 0 && needed > configuration.maxBodyBytes {
            dropBody(context)
        } else if context.discarded == 0 && needed > context.reservedBytes {
            // A chunked body: reserve as it grows, doubling, up to the cap.
            let target = min(max(needed, 2 * context.reservedBytes, 16 * 1024), configuration.maxBodyBytes)
            if bodyBudget.reserve(target - context.reservedBytes, client: context.budgetClient) {
                context.reservedBytes = target
                context.body.reserveCapacity(target)
            } else {
                context.overBudget = true
                dropBody(context)
            }
        }
        if context.discarded > 0 || context.overBudget {
            context.discarded += count
            // A client that keeps sending far past the cap is cut off.
            return context.discarded > 4 * configuration.maxBodyBytes + 1_048_576 ? .NO : .YES
        }
        if let data {
            context.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: count))
        }
        return .YES
    }

    private func dropBody(_ context: RequestContext) {
        context.body = []
        bodyBudget.release(context.reservedBytes, client: context.budgetClient)
        context.reservedBytes = 0
        context.discarded = max(context.discarded, 1)
    }

    /// The request is complete: hand it over, and answer when the handler has.
    private func finish(_ context: RequestContext) -> MHD_Result {
        if context.queued { return .YES }
        if context.overBudget { return queue(Self.busy, context) }
        if context.discarded > 0 { return queue(RequestFraming.tooLarge(configuration.maxBodyBytes), context) }
        if !context.dispatched {
            MHD_get_connection_values_n(context.connection, .FOOTER_KIND, jotterCollectValue,
                                        Unmanaged.passUnretained(context).toOpaque())
            if context.trailerCount > 0 {
                // Framing gone wrong ends the connection, as libmicrohttpd does for refusals before the body.
                var refusal = RequestFraming.badRequest("Trailer fields are not accepted.")
                refusal.headers.add(name: "Connection", value: "close")
                return queue(refusal, context)
            }
            context.dispatched = true
            // The peer's address, formatted once per connection rather than once per request.
            let (address, first) = registry.answering(context.connectionID)
            // libmicrohttpd 0.9.75 takes a short read to mean "drained" and waits for the next epoll edge;
            // an end-of-file that came with the request (nc -N) brings none, so it would notice only at a
            // timeout. Seen now, the answer says Connection: close and the connection ends with it — unless
            // the client sent more than this request (pipelined requests, already in libmicrohttpd's
            // buffer): those are answered first, and the registry's sweep ends the connection once it is
            // idle. Only a connection's first request is checked here; after a later one the sweep looks.
            if first {
                context.peerFinished = jotter_mhd_peer_finished(context.connection) != 0
                    && !sentMoreThan(context, bodyBytes: context.body.count)
            }
            let request = HTTPRequest(method: context.method, path: context.targetPath, query: context.query,
                                      headers: context.headers, body: context.body,
                                      remoteAddress: address ?? Self.clientAddress(context.connection))
            context.body = []
            handler(request) { [reply = context.reply, logger] response in
                // Answered `503 stopping` meanwhile, yet carried out: a memo stored after all is named, so its
                // sender's second copy (sent without an Idempotency-Key) can be told apart.
                if reply.complete(response), let messageID = response.messageID {
                    logger.notice("stored after the stopping server answered 503", metadata: ["message.id": messageID])
                }
            }
            // Not suspended yet, on purpose: libmicrohttpd suspends a connection with the event it last
            // waited for, here "read", and reads first when it resumes; a client that half-closed after
            // its request (shutdown(SHUT_WR)) then reads as gone, and its answer was dropped. Returned
            // without an answer, libmicrohttpd parks the connection (no reading) and calls again at once;
            // that call suspends, parked.
            return answerIfReady(context, suspending: false)
        }
        return answerIfReady(context, suspending: true)
    }

    /// Whether a client that has finished sending sent more than its connection's first request: its
    /// headers as libmicrohttpd measured them and `bodyBytes` of body. A chunked body's framing counts as
    /// more (then the sweep ends the connection, a moment later, instead of this answer). Over TLS the
    /// bytes are records, not requests: there the answer ends the connection, as before (browsers do not
    /// pipeline).
    private func sentMoreThan(_ context: RequestContext, bodyBytes: Int) -> Bool {
        if configuration.tls != nil { return false }
        let received = jotter_mhd_bytes_received(context.connection)
        guard received > 0 else { return true }
        // TCP counts the end-of-file (FIN) as one byte received.
        return received - 1 > Int64(jotter_mhd_header_size(context.connection)) + Int64(bodyBytes)
    }

    private func answerIfReady(_ context: RequestContext, suspending: Bool) -> MHD_Result {
        guard let response = context.reply.take(suspending: suspending, stopping: Self.stopping) else { return .YES }
        return queue(response, context)
    }

    /// `503` with `Retry-After`: the body budget is spent.
    static var busy: HTTPResponse {
        var response = HTTPResponse.error(503, code: "busy",
                                          message: "The server is receiving too much at once; try again shortly.")
        response.headers.add(name: "Retry-After", value: "2")
        return Router.finish(response)
    }

    /// `503` with `Retry-After`: the server is stopping before the handler answered.
    static var stopping: HTTPResponse {
        var response = HTTPResponse.error(503, code: "stopping", message: "The server stopped before its answer "
            + "was ready; the request may have been carried out (a memo stored): send it again, with the same "
            + "Idempotency-Key, when the server is back.")
        response.headers.add(name: "Retry-After", value: "5")
        response.headers.add(name: "Connection", value: "close")
        return Router.finish(response)
    }

    private func queue(_ response: consuming HTTPResponse, _ context: RequestContext) -> MHD_Result {
        if context.peerFinished {
            response.reusable = nil
            response.headers.add(name: "Connection", value: "close")
        }
        context.queued = true
        context.status = response.status
        context.route = response.route
        if !context.dispatched { registry.answering(context.connectionID) }  // a refusal: spare it too
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
        // `withCString`: a short or native string lends its bytes in place, where passing the `String`
        // itself made a `utf8CString` array of each name and value (about 2,100 instructions a response).
        for field in response.headers.fields {
            field.name.withCString { name in
                field.value.withCString { value in _ = MHD_add_response_header(mhdResponse, name, value) }
            }
        }
        return mhdResponse
    }

    /// The request ended: answered, refused (by us or by libmicrohttpd), closed by the registry, or
    /// abandoned by the client. An abandoned request whose memo was stored is logged with its id, so
    /// the memo can be found when the client, having had no answer, sends it again.
    func completed(_ context: RequestContext, reason: MHD_RequestTerminationCode) {
        if context.headersSeen { activeRequests.subtract(1, ordering: .releasing) }
        bodyBudget.release(context.reservedBytes, client: context.budgetClient)
        context.reservedBytes = 0
        let now = monotonicNanoseconds()
        registry.requestEnded(context.connectionID, now: now)
        let messageID = context.reply.messageID
        // The request's line, built only when it is logged: a quiet server skips the outcome's lookups, the
        // numbers formatted and the metadata (callgrind, GET /: 51,444 → 49,791 instructions at warning).
        if logger.logLevel <= .info {
            logger.info("request", metadata: [
                "method": Self.loggable(method: context.method), "path": context.route ?? "-",
                "status": outcome(context, reason: reason),
                "duration_ms": Logger.milliseconds(nanoseconds: now - context.started),
                "message.id": messageID ?? "-",
            ])
        }
        if reason != .REQUEST_TERMINATED_COMPLETED_OK, let messageID {
            logger.notice("client left before its answer; the memo is stored", metadata: ["message.id": messageID])
        }
    }

    /// How the request ended, as its log line says: the status answered, why the registry closed the
    /// connection, the status libmicrohttpd refused it with, or `aborted`.
    private func outcome(_ context: RequestContext, reason: MHD_RequestTerminationCode) -> String {
        if reason == .REQUEST_TERMINATED_COMPLETED_OK && context.queued { return String(context.status) }
        if let closing = registry.closing(context.connectionID) { return closing.rawValue }
        let ownStatus = context.queued ? 0 : Int(jotter_mhd_queued_status(context.connection))
        return ownStatus != 0 ? String(ownStatus) : "aborted"  // refused by libmicrohttpd itself (400, 413, 431)
    }

    /// Methods are client-chosen text: log only the ones HTTP defines.
    private static func loggable(method: String) -> String {
        if method.isEmpty { return "-" }  // refused before its headers were read
        return ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"].contains(method)
            ? method : "OTHER"
    }

    /// The client's IP address as text ("" if unknown).
    static func clientAddress(_ connection: OpaquePointer) -> String {
        var address = [CChar](repeating: 0, count: 64)
        jotter_mhd_client_address(connection, &address, address.count)
        return String(decoding: address.prefix(while: { $0 != 0 }).map(UInt8.init(bitPattern:)), as: UTF8.self)
    }
}
