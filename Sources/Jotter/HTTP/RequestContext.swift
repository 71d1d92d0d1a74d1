import CMicroHTTPD
import Synchronization

/// One request's state, from its first callback to its completion.
///
/// `@unchecked Sendable`: libmicrohttpd calls back for one connection on one thread at a time, so the
/// plain fields are never touched concurrently; `reply` (set from any thread) is behind a mutex.
final class RequestContext: @unchecked Sendable {
    let connection: OpaquePointer
    let started = monotonicNanoseconds()
    var method = ""
    var path = ""
    var headers = HTTPHeaders()
    var query: [(name: String, value: String)] = []
    var body: [UInt8] = []
    var dispatched = false
    var queued = false
    /// Body bytes dropped because the body outgrew the cap.
    var discarded = 0
    var status = 0
    var route: String?
    var messageID: String?
    /// The handler's answer and whether the connection is suspended waiting for it.
    let reply = Mutex<(response: HTTPResponse?, suspended: Bool)>((nil, false))

    init(connection: OpaquePointer) {
        self.connection = connection
    }

    func collect(kind: MHD_ValueKind, key: String, value: String) {
        if kind == .HEADER_KIND {
            headers.add(name: key, value: value)
        } else if kind == .GET_ARGUMENT_KIND {
            query.append((name: key, value: value))
        }
    }

    /// Called by the handler, on any thread: store the answer and wake the connection if it sleeps.
    func complete(_ response: HTTPResponse) {
        reply.withLock { state in
            state.response = response
            if state.suspended {
                state.suspended = false
                MHD_resume_connection(connection)
            }
        }
    }
}
