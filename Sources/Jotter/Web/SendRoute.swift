/// `POST /` and `POST /send`: decode, validate, store durably, then answer.
///
/// The answer is `204` with `X-Message-Id` only after the memo's batch has committed to disk; a
/// browser's plain form post (no JavaScript) gets `303 → /` instead, so the page comes back empty.
struct SendRoute: Sendable {
    let outbox: Outbox
    let rating: RatingStore?
    let limiter: RateLimiter?
    /// The undo window every memo gets (`--undo-seconds`); a request may ask for its own with
    /// `Undo-Seconds: N` (0–600), as the page does when its setting is on.
    var undoMilliseconds: Int64 = 0
    /// For what is left of a replayed memo's undo window.
    var clock: any WallClock = SystemClock()
    /// Through a Jotter relay: the most its message body may be (a long subject goes at its top). A memo
    /// over it is refused here, where the writer learns it, not accepted and then failed by the relay.
    var relayBodyLimit: Int?
    /// Keys for the page's plain form (no JavaScript), which sends none: a double click stores one memo.
    var recentForms = RecentFormPosts()

    /// `Idempotency-Key` must be 1–256 visible ASCII characters (as the Resend API requires).
    static func validIdempotencyKey(_ key: String) -> Bool {
        (1...256).contains(key.utf8.count) && key.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    func handle(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        if let seconds = limiter?.retryAfter(client: request.remoteAddress) {
            var response = HTTPResponse.error(429, code: "rate_limited",
                                              message: "Too many memos at once; try again in a moment.")
            response.headers.add(name: "Retry-After", value: String(seconds))
            respond(response)
            return
        }
        // Two types for one body is no type: which one a proxy or a reader believes is anyone's guess.
        guard request.headers.values("Content-Type").count <= 1 else {
            respond(.error(400, code: "bad_request", message: "More than one Content-Type header."))
            return
        }
        // A compressed body is not read (gzip's bytes were "not valid UTF-8"; br's were taken as text).
        if let coding = request.headers["Content-Encoding"], coding.trimmingWhitespace().lowercased() != "identity" {
            respond(MemoDecodingError.unsupportedEncoding.response)
            return
        }
        let memo: MemoDecoder.Memo
        do {
            memo = try MemoDecoder.decode(contentType: request.headers["Content-Type"], body: request.body)
        } catch {
            // A person who pressed Send on an empty page without JavaScript gets the page back, not JSON.
            if error == .empty && Self.isFormNavigation(request) {
                respond(HTTPResponse(status: 303, headers: ["Location": Self.pageLocation(request)]))
            } else {
                respond(error.response)
            }
            return
        }
        if let relayBodyLimit,
           JotterRelayTransport.fitted(subject: memo.subject ?? "", body: memo.body).body.utf8.count > relayBodyLimit {
            respond(.error(413, code: "too_large", message: "The memo is larger than the Jotter relay accepts "
                               + "(\(relayBodyLimit / 1024) KiB of text): nothing was stored."))
            return
        }
        let keys = request.headers.values("Idempotency-Key")
        guard keys.count <= 1, keys.allSatisfy(Self.validIdempotencyKey) else {
            respond(.error(400, code: "invalid_idempotency_key",
                           message: "Idempotency-Key must be one value of 1-256 visible ASCII characters."))
            return
        }
        var undo = undoMilliseconds
        if let asked = request.headers["Undo-Seconds"] {
            guard let seconds = Int64(asked), (0...600).contains(seconds) else {
                respond(.error(400, code: "invalid_undo_seconds", message: "Undo-Seconds must be a number from 0 to 600."))
                return
            }
            undo = seconds * 1000
        }
        let undoSeconds = undo / 1000
        let navigation = Self.isFormNavigation(request)
        let fromPage = !navigation && request.headers["Sec-Fetch-Site"] == "same-origin"
        var key = keys.first
        if key == nil && navigation {
            key = try? recentForms.key(client: request.remoteAddress, subject: memo.subject, body: memo.body)
        }
        // On libmicrohttpd's thread, which may wait for one COMMIT: a lone memo is stored without a
        // thread switch, and its 204 goes out without suspending the connection.
        outbox.enqueue(MemoDraft(subject: memo.subject, body: memo.body, idempotencyKey: key,
                                 undoMilliseconds: undo), callerMayBlock: true) { result in
            switch result {
            case .success(let outcome):
                var response = navigation
                    ? HTTPResponse(status: 303, headers: ["Location": Self.pageLocation(request)])
                    : HTTPResponse(status: 204)
                response.headers.add(name: "X-Message-Id", value: outcome.id)
                // The memo's undo window, so a page can offer Undo without asking /healthz first: for a
                // replay (a first answer lost), what is left of the window the memo got when it was stored,
                // whatever this request asked for.
                var window = undoSeconds
                if case .replayed(let id) = outcome { window = remainingUndoSeconds(of: id) }
                if window > 0 { response.headers.add(name: "Undo-Seconds", value: String(window)) }
                response.messageID = outcome.id
                if case .accepted = outcome, rating?.recordSend(fromPage: fromPage) == true {
                    response.headers.add(name: "X-Rating-Prompt", value: "1")
                }
                respond(response)
            case .failure(.idempotencyConflict):
                respond(.error(409, code: "idempotency_conflict",
                               message: "This Idempotency-Key was already used for a different memo."))
            case .failure(.storage(_, let diskFull)):
                var response = HTTPResponse.error(
                    503, code: "storage_unavailable",
                    message: diskFull ? "The server's disk is full; the memo was not stored."
                        : "The server could not store the memo; it was not stored.")
                response.headers.add(name: "Retry-After", value: "30")
                respond(response)
            case .failure(.outcomeUnknown):
                var response = HTTPResponse.error(
                    503, code: "storage_outcome_unknown",
                    message: "The server's database failed while storing the memo, which may be stored: "
                        + "send it again with the same Idempotency-Key to find out.")
                response.headers.add(name: "Retry-After", value: "30")
                respond(response)
            }
        }
    }

    /// Whole seconds left of a stored memo's undo window, rounded down (never more than `DELETE` will
    /// honour); 0 once under a second is left, or if the memo is on its way, taken back, or cannot be read.
    private func remainingUndoSeconds(of id: String) -> Int64 {
        guard let record = try? outbox.history.record(id: id), record.status == .queued, record.attempts == 0,
              let due = record.nextAttemptAt else { return 0 }
        let left = due - clock.nowMilliseconds()
        return max(left / 1000, 0)
    }

    /// Where a no-JavaScript form post returns: the page, in the language it was sent from (`?lang=`).
    static func pageLocation(_ request: HTTPRequest) -> String {
        guard let lang = request.queryValue("lang"), (1...16).contains(lang.utf8.count),
              lang.utf8.allSatisfy({ $0 == 0x2D || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0)
                  || (0x61...0x7A).contains($0) }) else { return "/" }
        return "/?lang=" + lang
    }

    /// A top-level form submission from a browser (rather than `fetch` or a script).
    static func isFormNavigation(_ request: HTTPRequest) -> Bool {
        if let mode = request.headers["Sec-Fetch-Mode"] {
            return mode == "navigate"
        }
        let accept = request.headers["Accept"] ?? ""
        return accept.hasPrefix("text/html")
    }
}
