/// Delivers through a Jotter relay (`jotter+https://HOST[:PORT]`): `POST /v1/messages` to the address
/// this composer verified, with the memo's id as `Idempotency-Key` — so a retry after a lost answer
/// is recognised by the relay and nothing goes out twice.
///
/// Until an address is verified, every memo is refused alike as `unverified`, which the worker treats
/// as the relay's refusal: memos wait `held`, and a verification (or a Retry) releases them.
struct JotterRelayTransport: Transport {
    let account: JotterRelayAccount

    func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        guard let to = try account.destination().address else { throw DeliveryFailure(.unverified, permanent: true) }
        let (subject, body) = Self.fitted(subject: message.subject, body: message.body)
        var json = JSONWriter()
        json.object { json in
            json.field("to", to)
            json.field("subject", subject)
            json.field("body", body)
        }
        let answer = try account.call("/v1/messages", json: json.bytes, idempotencyKey: message.id)
        switch (answer.status, answer.errorCode) {
        case (200..<300, _):
            return DeliveryReceipt()
        case (403, "destination_unverified"), (401, _):
            try account.lostVerification(of: to)
            throw DeliveryFailure(.unverified, permanent: true)
        case (409, "idempotency_in_flight"):
            throw DeliveryFailure(.conflict, permanent: false, retryAfterMilliseconds: answer.retryAfterMilliseconds)
        case (409, _):
            throw DeliveryFailure(.conflict, permanent: true)
        case (403, _):
            throw DeliveryFailure(.configuration, permanent: true)
        default:
            throw JotterRelayClient.failure(answer)
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
