/// `GET /history`, `GET /history/{id}` and `GET /healthz`: delivery status as JSON, never content
/// beyond the subject while it is retained.
struct HistoryRoute: Sendable {
    let outbox: Outbox
    /// How the relay is doing (the worker's view).
    var relayState: @Sendable () -> RelayState = { .ok }
    /// After how long an undelivered memo is stuck (`--warn-after`).
    var warnAfterMilliseconds: Int64 = 3_600_000
    /// The undo window memos get by default (`--undo-seconds`).
    var undoMilliseconds: Int64 = 0
    /// Memos go through a Jotter relay, to an address the page's Settings confirm (`/destination`).
    var asksForAddress = false
    var clock: any WallClock = SystemClock()
    static let defaultLimit = 50
    static let maxLimit = 500

    func list(_ request: HTTPRequest) -> HTTPResponse {
        var limit = Self.defaultLimit
        if let text = request.queryValue("limit") {
            // Any positive whole number; beyond the maximum (however many digits) means the maximum.
            guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  text.utf8.contains(where: { $0 != 0x30 }) else {
                return .error(400, code: "invalid_limit", message: "limit must be a positive integer.")
            }
            limit = min(Int(text) ?? Self.maxLimit, Self.maxLimit)
        }
        let before = request.queryValue("before")?.lowercased()
        if let before, !Self.isMessageID(before) {
            return .error(400, code: "invalid_before", message: "before must be a message id.")
        }
        do {
            let records = try outbox.history.latest(limit: limit + 1, before: before)
            let relay = relayState()
            var json = JSONWriter()
            json.array { json in
                for record in records.prefix(limit) { Self.write(record, relay: relay, to: &json) }
            }
            var response = HTTPResponse.json(200, json.bytes)
            if records.count > limit, let last = records.prefix(limit).last {
                response.headers.add(name: "Link", value: "</history?limit=\(limit)&before=\(last.id)>; rel=\"next\"")
            }
            return response
        } catch {
            outbox.noteDamage(error)
            return Self.storageError
        }
    }

    func one(id given: String) -> HTTPResponse {
        let id = given.lowercased()  // ids are UUIDs: A-F and a-f name the same memo
        guard Self.isMessageID(id) else {
            return .error(404, code: "not_found", message: "No memo has this id.")
        }
        do {
            guard let record = try outbox.history.record(id: id) else {
                return .error(404, code: "not_found", message: "No memo has this id.")
            }
            var json = JSONWriter()
            Self.write(record, relay: relayState(), to: &json)
            var response = HTTPResponse.json(200, json.bytes)
            response.messageID = id
            return response
        } catch {
            outbox.noteDamage(error)
            return Self.storageError
        }
    }

    /// `POST /history/{id}/retry`: a failed or held memo goes back in the queue. Answered when the
    /// writer has done it, without holding a request thread meanwhile.
    func retry(id given: String, wake: @escaping @Sendable () -> Void,
               respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let id = given.lowercased()
        guard Self.isMessageID(id) else {
            return respond(.error(404, code: "not_found", message: "No memo has this id."))
        }
        outbox.requeue(id: id) { result in
            switch result {
            case .success(.notFound):
                respond(.error(404, code: "not_found", message: "No memo has this id."))
            case .success(.notFailed):
                respond(.error(409, code: "not_failed", message: "Only failed or held memos can be retried."))
            case .success(.requeued):
                wake()
                respond(one(id: id).with(status: 202))
            case .failure:
                respond(Self.storageError)
            }
        }
    }

    /// `GET /healthz`; `destination` (where memos go, no secrets) only for this machine's own page.
    /// `DELETE /history/{id}`: takes a memo back inside its undo window (200 with its record, again for
    /// a memo taken back before), after it `409 undo_window_closed`.
    func cancel(id given: String, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        let id = given.lowercased()
        guard Self.isMessageID(id) else {
            return respond(.error(404, code: "not_found", message: "No memo has this id."))
        }
        outbox.cancel(id: id) { result in
            switch result {
            // Cancelled now, or before: a page whose first answer was lost asks again, and must learn
            // that the memo is taken back (to put its text back in the page), not that it is too late.
            case .success(.cancelled), .success(.tooLate(.cancelled)): respond(one(id: id))
            case .success(.notFound): respond(.error(404, code: "not_found", message: "No memo has this id."))
            case .success(.tooLate):
                respond(.error(409, code: "undo_window_closed",
                               message: "Too late to take this memo back: its undo window has closed."))
            case .failure: respond(Self.storageError)
            }
        }
    }

    func health(destination: String? = nil) -> HTTPResponse {
        do {
            let counts = try outbox.history.counts()
            let relay = relayState()
            let now = clock.nowMilliseconds()
            let stuck = try outbox.history.stuckSummary(acceptedBefore: now - warnAfterMilliseconds)
            let storage = outbox.storageTrouble, damage = outbox.damage
            var json = JSONWriter()
            json.object { json in
                json.field("status", relay == .ok && stuck.count == 0 && storage == nil && damage == nil ? "ok" : "degraded")
                // The disk refuses memos (full, read-only, failing): they get 503 until one is stored again.
                // Damaged pages (memos in them may never go) outrank it: they stay until the file is restored.
                json.key("storage")
                Self.write(storage: storage, damage: damage, to: &json)
                json.key("stuck")
                json.object { json in
                    json.field("count", Int64(stuck.count))
                    json.field("oldest_seconds", stuck.oldest.map { max(0, (now - $0) / 1000) })
                    json.field("warn_after_seconds", warnAfterMilliseconds / 1000)
                }
                json.field("undo_seconds", undoMilliseconds / 1000)
                if asksForAddress { json.field("asks_for_address", true) }
                json.key("relay")
                Self.write(relay, to: &json)
                if let destination { json.field("destination", destination) }
                json.key("outbox")
                json.object { json in
                    for status in DeliveryStatus.allCases {
                        json.field(status.rawValue, Int64(counts[status] ?? 0))
                    }
                }
            }
            return .json(200, json.bytes)
        } catch {
            outbox.noteDamage(error)
            // The error, and what is known without reading: why (a damaged page the read met, or a disk that
            // refuses), and the relay's state, so a monitor and the page can say more than "cannot read".
            // Failing since the first memo the disk refused; else only this read failed (since: null).
            var json = JSONWriter()
            json.object { json in
                json.error(code: "storage_unavailable", message: Self.unreadable)
                json.field("status", "degraded")
                json.key("storage")
                Self.write(storage: outbox.storageTrouble, damage: outbox.damage,
                           failedRead: (error as? DatabaseError)?.storageTrouble ?? "other", to: &json)
                json.key("relay")
                Self.write(relayState(), to: &json)
            }
            return .json(503, json.bytes)
        }
    }

    /// `/healthz`'s `storage`: damaged pages outrank a disk that refuses, which outranks a read that just
    /// failed for `failedRead` (failing, since null), which outranks `ok`.
    private static func write(storage: Outbox.StorageTrouble?, damage: IntegrityWatch.Damage?, failedRead: String? = nil,
                              to json: inout JSONWriter) {
        json.object { json in
            if let damage {
                json.field("state", "damaged")
                json.field("reason", damage.reason)
                json.field("since", Timestamp.iso8601(milliseconds: damage.sinceMilliseconds))
            } else {
                json.field("state", storage == nil && failedRead == nil ? "ok" : "failing")
                json.field("reason", storage?.reason ?? failedRead)
                json.field("since", storage.map { Timestamp.iso8601(milliseconds: $0.sinceMilliseconds) })
            }
        }
    }

    private static let unreadable = "The outbox database cannot be read."
    private static let storageError = HTTPResponse.error(503, code: "storage_unavailable", message: unreadable)

    /// A lowercase UUID, the only form Jotter issues.
    static func isMessageID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                guard (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) else { return false }
            }
        }
        return true
    }

    /// `{"state": "ok"|"offline"|"refused", "reason": kind or null, "since": time or null}`, and `hint`
    /// when Jotter knows what to change (`the certificate is for mail.example.net — not smtp.example.com`).
    static func write(_ relay: RelayState, to json: inout JSONWriter) {
        json.object { json in
            json.field("state", relay.name)
            switch relay {
            case .ok:
                json.field("reason", nil as String?)
                json.field("since", nil as String?)
            case .offline(let since):
                json.field("reason", "unreachable")
                json.field("since", Timestamp.iso8601(milliseconds: since))
            case .refused(let kind, let since, let hint):
                json.field("reason", kind)
                json.field("since", Timestamp.iso8601(milliseconds: since))
                if let hint { json.field("hint", hint) }
            case .held(let since):
                json.field("reason", DeliveryFailure.Kind.relayHeld.rawValue)
                json.field("since", Timestamp.iso8601(milliseconds: since))
            }
        }
    }

    /// Why a memo that is not on its way waits, when the relay is the reason: `relay_offline` for a
    /// queued or retrying memo while the relay cannot be reached, `relay_refused` for one held (or
    /// waiting) while it refuses; nil otherwise.
    /// `destination_unverified` while a Jotter relay has no verified address for this composer.
    static func waitingFor(_ record: MessageRecord, relay: RelayState) -> String? {
        let unverified = DeliveryFailure.Kind.unverified.rawValue
        switch (relay, record.status) {
        case (.offline, .queued), (.offline, .retrying): return "relay_offline"
        case (.refused(let kind, _, _), .queued), (.refused(let kind, _, _), .retrying):
            return kind == unverified ? "destination_unverified" : "relay_refused"
        case (_, .held) where record.lastError == unverified: return "destination_unverified"
        case (_, .held) where record.lastError.map(DeliveryFailure.relayRefusalKinds.contains) ?? false:
            return "relay_refused"
        default: return nil
        }
    }

    static func write(_ record: MessageRecord, relay: RelayState, to json: inout JSONWriter) {
        json.object { json in
            json.field("id", record.id)
            json.field("created_at", Timestamp.iso8601(milliseconds: record.createdAt))
            json.field("status", record.status.rawValue)
            json.field("attempts", Int64(record.attempts))
            json.field("next_attempt_at", record.nextAttemptAt.map(Timestamp.iso8601(milliseconds:)))
            json.field("delivered_at", record.deliveredAt.map(Timestamp.iso8601(milliseconds:)))
            json.field("last_error", record.lastError)
            json.field("subject", record.subject)
            json.field("waiting_for", waitingFor(record, relay: relay))
        }
    }
}
