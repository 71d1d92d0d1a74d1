import CMicroHTTPD
import Synchronization

/// One request's state, from its first callback to its completion.
///
/// Not `Sendable`: libmicrohttpd calls back for one connection on one thread at a time, and only those
/// callbacks touch these fields. The one part another thread touches, the handler's answer, is `reply`.
final class RequestContext {
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
    /// The handler's answer, which may come from any thread.
    let reply: Reply

    init(connection: OpaquePointer) {
        self.connection = connection
        reply = Reply(connection: Connection(pointer: connection))
    }

    func collect(kind: MHD_ValueKind, key: String, value: String) {
        if kind == .HEADER_KIND {
            headers.add(name: key, value: value)
        } else if kind == .GET_ARGUMENT_KIND {
            query.append((name: key, value: value))
        }
    }

    /// A libmicrohttpd connection handle, for `MHD_resume_connection`.
    ///
    /// `@unchecked Sendable`: libmicrohttpd lets a suspended connection be resumed from any thread
    /// (that is what `MHD_resume_connection` is for); nothing else is done with it off its thread.
    struct Connection: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// The handler's answer and whether the connection sleeps waiting for it.
    final class Reply: Sendable {
        private let connection: Connection
        private let state = Mutex<(response: HTTPResponse?, suspended: Bool)>((nil, false))

        init(connection: Connection) {
            self.connection = connection
        }

        /// Called by the handler, on any thread: store the answer and wake the connection if it sleeps.
        func complete(_ response: HTTPResponse) {
            state.withLock { state in
                state.response = response
                if state.suspended {
                    state.suspended = false
                    MHD_resume_connection(connection.pointer)
                }
            }
        }

        /// On the connection's callback: the answer if it is in, else suspend the connection until it is.
        func takeOrSuspend() -> HTTPResponse? {
            state.withLock { state in
                if let response = state.response {
                    state.response = nil
                    return response
                }
                MHD_suspend_connection(connection.pointer)
                state.suspended = true
                return nil
            }
        }
    }
}

@available(*, unavailable)
extension RequestContext: Sendable {}
