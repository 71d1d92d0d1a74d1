import CMicroHTTPD
import Glibc
import Synchronization

/// One request's state, from its request line to its completion.
///
/// Not `Sendable`: libmicrohttpd calls back for one connection on one thread at a time, and only those
/// callbacks touch these fields. The one part another thread touches, the handler's answer, is `reply`.
final class RequestContext {
    let connection: OpaquePointer
    /// The connection's id in the `ConnectionRegistry` (0 if unknown).
    let connectionID: Int
    let started = monotonicNanoseconds()
    /// The request-target exactly as sent (before libmicrohttpd unescapes it).
    let target: String
    /// Where the request-target's C string ended in libmicrohttpd's buffer (a NUL byte inside the
    /// target ends it early).
    let targetEnd: UInt
    var method = ""
    var headers = HTTPHeaders()
    var head = RequestFraming.Head()
    var fieldSpans: [RequestFraming.FieldSpan] = []
    var query: [(name: String, value: String)] = []
    var trailerCount = 0
    var body: [UInt8] = []
    var headersSeen = false
    var dispatched = false
    /// The client sent its whole request and end-of-file with it: answer with `Connection: close`.
    var peerFinished = false
    var queued = false
    /// Body bytes dropped because the body outgrew the cap.
    var discarded = 0
    /// Body bytes dropped because the body budget was exhausted.
    var overBudget = false
    /// Bytes of the `BodyBudget` this request holds.
    var reservedBytes = 0
    /// Whom `reservedBytes` count for (`BodyBudget`'s per-client share).
    var budgetClient = BodyBudget.thisMachine
    var status = 0
    var route: String?
    /// The handler's answer, which may come from any thread.
    let reply: Reply

    init(connection: OpaquePointer, connectionID: Int, target: UnsafePointer<CChar>, parking: Parking) {
        self.connection = connection
        self.connectionID = connectionID
        self.target = String(cString: target)
        targetEnd = UInt(bitPattern: target) + UInt(strlen(target))
        reply = Reply(connection: Connection(pointer: connection), parking: parking)
    }

    /// The path part of the request-target, still percent-encoded (`RequestPath` decodes it).
    var targetPath: String {
        guard let question = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return target }
        return String(target[..<question])
    }

    /// One header field (or query argument, or trailer) as libmicrohttpd parsed it.
    func collect(kind: MHD_ValueKind, key: UnsafePointer<CChar>, keyLength: Int, value: UnsafePointer<CChar>?,
                 valueLength: Int) {
        let name = UnsafeRawBufferPointer(start: key, count: keyLength)
        let text = UnsafeRawBufferPointer(start: value, count: value == nil ? 0 : valueLength)
        switch kind {
        case .HEADER_KIND:
            if !RequestFraming.isToken(name) { head.malformedName = true }
            if !RequestFraming.isFieldValue(text) { head.malformedValue = true }
            headers.add(name: String(decoding: name, as: UTF8.self), value: String(decoding: text, as: UTF8.self))
            fieldSpans.append(RequestFraming.FieldSpan(name: UInt(bitPattern: key), nameLength: keyLength,
                                                       value: UInt(bitPattern: value), valueLength: valueLength))
        case .GET_ARGUMENT_KIND:
            query.append((name: String(decoding: name, as: UTF8.self), value: String(decoding: text, as: UTF8.self)))
        case .FOOTER_KIND:
            trailerCount += 1
        default:
            break
        }
    }

    /// A libmicrohttpd connection handle, for `MHD_resume_connection`.
    ///
    /// `@unchecked Sendable`: libmicrohttpd lets a suspended connection be resumed from any thread
    /// (that is what `MHD_resume_connection` is for); nothing else is done with it off its thread.
    struct Connection: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    /// The connections asleep waiting for their handler's answer, so that `HTTPServer.stop` can wake them
    /// first: libmicrohttpd 0.9.75 aborts the process (`MHD_PANIC`) when it is stopped with a connection
    /// still suspended.
    final class Parking: Sendable {
        private let state = Mutex<(stopping: Bool, replies: [ObjectIdentifier: Reply])>((false, [:]))

        /// Registers `reply` as asleep; false once the server is stopping (then it must not sleep).
        fileprivate func park(_ reply: Reply) -> Bool {
            state.withLock { state in
                if state.stopping { return false }
                state.replies[ObjectIdentifier(reply)] = reply
                return true
            }
        }

        fileprivate func unpark(_ reply: Reply) {
            _ = state.withLock { $0.replies.removeValue(forKey: ObjectIdentifier(reply)) }
        }

        /// How many connections sleep now.
        var count: Int { state.withLock { $0.replies.count } }

        /// From now on no connection sleeps; those asleep are answered with `response` (and woken).
        func stop(answering response: HTTPResponse) {
            let asleep = state.withLock { state in
                state.stopping = true
                return Array(state.replies.values)
            }
            for reply in asleep { reply.interrupt(response) }
        }
    }

    /// The handler's answer, the message id it names, and whether the connection sleeps waiting for it.
    final class Reply: Sendable {
        private let connection: Connection
        private let parking: Parking
        private let state = Mutex<(response: HTTPResponse?, messageID: String?, suspended: Bool, interrupted: Bool)>(
            (nil, nil, false, false))

        init(connection: Connection, parking: Parking) {
            self.connection = connection
            self.parking = parking
        }

        /// Called by the handler, on any thread: store the answer and wake the connection if it sleeps.
        /// True when a stopping server already answered in the handler's stead (this answer goes nowhere).
        @discardableResult
        func complete(_ response: HTTPResponse) -> Bool {
            state.withLock { state in
                state.response = response
                state.messageID = response.messageID
                if state.suspended { wake(&state) }
                return state.interrupted
            }
        }

        /// Called by a stopping server: if the connection still sleeps, answer `response` in the handler's
        /// stead (an answer the handler already gave stands).
        func interrupt(_ response: HTTPResponse) {
            state.withLock { state in
                guard state.suspended else { return }
                state.response = response
                state.interrupted = true
                wake(&state)
            }
        }

        private func wake(_ state: inout (response: HTTPResponse?, messageID: String?, suspended: Bool, interrupted: Bool)) {
            state.suspended = false
            parking.unpark(self)
            MHD_resume_connection(connection.pointer)
        }

        /// On the connection's callback: the answer if it is in; else nil, and with `suspending` the
        /// connection sleeps until it is — unless the server is stopping, which answers `stopping` at once.
        func take(suspending: Bool, stopping: @autoclosure () -> HTTPResponse) -> HTTPResponse? {
            state.withLock { state in
                if let response = state.response.take() { return response }
                if suspending {
                    guard parking.park(self) else {
                        state.interrupted = true
                        return stopping()
                    }
                    MHD_suspend_connection(connection.pointer)
                    state.suspended = true
                }
                return nil
            }
        }

        /// The message id of the answer, once the handler gave one (also if it was never sent).
        var messageID: String? {
            state.withLock { $0.messageID }
        }
    }
}

@available(*, unavailable)
extension RequestContext: Sendable {}
