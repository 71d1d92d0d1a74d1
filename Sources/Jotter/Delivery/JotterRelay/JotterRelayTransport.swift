import Glibc

/// Delivers through a Jotter relay (`jotter+https://HOST[:PORT]`): `POST /v1/messages` to the address
/// this composer verified, with the memo's id as `Idempotency-Key` — so a retry after a lost answer
/// is recognised by the relay and nothing goes out twice.
///
/// The relay's `202` is not the end: a memo is `sent` only once the relay says it delivered it
/// (`GET /v1/messages/{id}`). The relay's id for it is kept (`RelayHandovers`) from its `202` on, so
/// every later attempt asks about that message and never posts the memo again. The relay usually
/// delivers within a second, and an attempt waits that long for it; until then each attempt is a
/// question (`relay_pending`, or `relay_held` while the relay cannot mail anyone; retried on the backoff
/// ladder, capped at five minutes). If the relay gives up on it (a mail provider's
/// permanent refusal), the memo is `failed` here too, with the relay's reason; its Retry asks the relay
/// to retry that same message (`POST /v1/messages/{id}/retry`).
///
/// Until an address is verified, every memo is refused alike as `unverified`, which the worker treats
/// as the relay's refusal: memos wait `held`, and a verification (or a Retry) releases them.
struct JotterRelayTransport: Transport {
    let account: JotterRelayAccount
    /// How long an attempt waits, between questions, for the relay to deliver a memo it just took
    /// (0.75 s in all: long enough for a relay that delivers at once, short enough not to hold a
    /// delivery slot while a slow one works).
    var checkDelaysMilliseconds: [Int64] = [50, 100, 200, 400]

    func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        if let handover = try account.handover(of: message.id) {
            if handover.relay == account.client.baseURL {
                return try follow(message.id, handover)
            }
            // Taken by the relay this composer used before: still in its hands (it delivers it), unless
            // it gave up on it, and then this relay is asked instead.
            guard handover.failureReported else { return DeliveryReceipt(alreadyDelivered: true) }
            try account.forgetHandover(of: message.id)
        }
        guard let to = try account.destination().address else { throw DeliveryFailure(.unverified, permanent: true) }
        let (subject, body) = Self.fitted(subject: message.subject, body: message.body)
        func request(written: Bool) -> [UInt8] {
            var json = JSONWriter()
            json.object { json in
                json.field("to", to)
                json.field("subject", subject)
                json.field("body", body)
                // When it was written, for the mail's Date: a memo that waited here for the relay is
                // not dated when the relay took it.
                if written { json.field("written_at", Timestamp.iso8601(milliseconds: message.date)) }
            }
            return json.bytes
        }
        var answer = try account.call("/v1/messages", json: request(written: true), idempotencyKey: message.id)
        if answer.status == 400, answer.errorCode == "unknown_field" {
            // A relay from before written times: it dates the mail when it takes it.
            answer = try account.call("/v1/messages", json: request(written: false), idempotencyKey: message.id)
        }
        switch (answer.status, answer.errorCode) {
        case (200..<300, _):
            // A relay that names no message (an older one) has said all it will: its 202 is the outcome.
            guard let id = answer.json?["id"]?.string?.lowercased(), JotterRelayAccount.isMessageID(id) else {
                return DeliveryReceipt()
            }
            try account.recordHandover(of: message.id, messageID: id, device: answer.device)
            return try follow(message.id, RelayHandovers.Handover(relay: account.client.baseURL, messageID: id,
                                                                  device: answer.device), waiting: true)
        case (403, "destination_unverified"), (401, "invalid_credentials"):
            try account.lostVerification(of: to)
            throw DeliveryFailure(.unverified, permanent: true)
        case (409, "idempotency_in_flight"):
            throw DeliveryFailure(.conflict, permanent: false, retryAfterMilliseconds: answer.retryAfterMilliseconds)
        case (409, "idempotency_conflict"):
            // The relay took this memo before (its 202 was lost) for the address verified then, and the
            // address has changed since: the key is the memo's own, so that message *is* this memo.
            // Followed, not failed (and not posted again for the new address once the key expired).
            guard let id = answer.json?["error"]?["message_id"]?.string?.lowercased(), JotterRelayAccount.isMessageID(id) else {
                throw DeliveryFailure(.conflict, permanent: true)
            }
            try account.recordHandover(of: message.id, messageID: id, device: answer.device)
            return try follow(message.id, RelayHandovers.Handover(relay: account.client.baseURL, messageID: id,
                                                                  device: answer.device), waiting: true)
        case (409, _):
            throw DeliveryFailure(.conflict, permanent: true)
        case (403, _):
            throw DeliveryFailure(.configuration, permanent: true)
        default:
            throw JotterRelayClient.failure(answer)
        }
    }

    /// Asks the relay what became of the message it took for memo `memo` — after passing on the memo's
    /// Retry, if its failure was reported — waiting a little for it to be delivered if `waiting`.
    private func follow(_ memo: String, _ handover: RelayHandovers.Handover,
                        waiting: Bool = false) throws(DeliveryFailure) -> DeliveryReceipt {
        let path = "/v1/messages/" + handover.messageID
        var answer: JotterRelayClient.Answer
        if handover.orphaned && !handover.failureReported { throw try orphaned(memo, handover) }
        if handover.failureReported {
            answer = try account.call(path + "/retry", method: "POST")
            if answer.isRelaysNotFound {
                // The relay no longer knows it (a month on, or this composer registered anew): the
                // memo, still here in full, goes to the relay again as a new message.
                try account.forgetHandover(of: memo)
                throw DeliveryFailure(.relayPending, permanent: false)
            }
            if answer.status == 200 { try account.recordHandover(of: memo, messageID: handover.messageID, device: answer.device) }
        } else {
            answer = try account.call(path)
        }
        // A memo just taken, or just given back to the relay's queue, is usually delivered at once.
        var delays = waiting || handover.failureReported ? checkDelaysMilliseconds[...] : []
        while true {
            switch answer.status {
            case 200:
                switch answer.json?["status"]?.string {
                case "sent":
                    // The handover stays until the memo is sent here (`RelayHandovers`).
                    return DeliveryReceipt()
                case "failed", "cancelled":
                    try account.recordHandover(of: memo, messageID: handover.messageID, device: handover.device,
                                               failureReported: true)
                    throw DeliveryFailure(Self.relayFailure(answer.json?["last_error"]?.string), permanent: true)
                case "held":
                    // The relay cannot mail anyone now (its own credentials are refused): it keeps the
                    // message until its operator fixes that.
                    throw DeliveryFailure(.relayHeld, permanent: false)
                default:
                    guard let delay = delays.popFirst() else { throw DeliveryFailure(.relayPending, permanent: false) }
                    usleep(UInt32(delay * 1000))
                    answer = try account.call(path)
                }
            case 404 where answer.isRelaysNotFound:
                // Asked by a device this composer registered while asking (the old one was revoked), or
                // since (another delivery's 202 as the old device may be recorded after the re-registration
                // marked the rest): the relay answers it nothing about the old one's message, which is no
                // news of delivery.
                if let current = try account.handover(of: memo), current.orphaned(answeredBy: answer.device) {
                    throw try orphaned(memo, current)
                }
                // Forgotten by the relay: a message's record goes only once the message has gone (or 30 days
                // after it failed, which this composer would have heard of): it was delivered.
                return DeliveryReceipt(alreadyDelivered: true)
            default:
                throw JotterRelayClient.failure(answer)
            }
        }
    }

    /// A memo whose message was handed over by a device the relay no longer knows: what became of it cannot
    /// be asked. It fails, kept whole; its sender's Retry then asks the relay to retry (a 404, as the new
    /// device) and posts it anew. (The relay may still deliver the old message: the page says to look.)
    private func orphaned(_ memo: String, _ handover: RelayHandovers.Handover) throws(DeliveryFailure) -> DeliveryFailure {
        try account.recordHandover(of: memo, messageID: handover.messageID, device: handover.device, failureReported: true,
                                   orphaned: true)
        return DeliveryFailure(.relayReregistered, permanent: true)
    }

    /// The kind a memo fails with here when the relay gave up on it for `kind`: the relay's own kind
    /// when it is the memo's (never one that would say this composer's relay refuses it), else `rejected`.
    static func relayFailure(_ kind: String?) -> DeliveryFailure.Kind {
        switch kind.flatMap(DeliveryFailure.Kind.init(rawValue:)) {
        case .some(let known) where [.rejected, .mailboxFull, .conflict, .corrupt].contains(known): return known
        default: return .rejected
        }
    }

    /// The subject and body as a relay takes them: a body always (an empty one is the subject), and a
    /// subject of at most `RelayConfiguration.maxSubjectBytes` — a longer one is cut at a character,
    /// ending in `…`, and given whole at the top of the body, so nothing of the memo is lost.
    static func fitted(subject: String, body: String) -> (subject: String, body: String) {
        let limit = RelayConfiguration.maxSubjectBytes
        guard subject.utf8.count > limit else { return (subject, body.isEmpty ? subject : body) }
        let ellipsis = "…"
        var cut = "", bytes = ellipsis.utf8.count
        for character in subject {
            bytes += character.utf8.count
            if bytes > limit { break }
            cut.append(character)
        }
        return (cut + ellipsis, body.isEmpty ? subject : subject + "\n\n" + body)
    }

    func probe() -> Bool {
        TCPProbe.canConnect(host: account.client.host, port: account.client.port)
    }

    /// The relay dedupes on the memo's id (its `Idempotency-Key`, kept 24 h or longer).
    var repeatsHarmlessly: Bool { true }
}
