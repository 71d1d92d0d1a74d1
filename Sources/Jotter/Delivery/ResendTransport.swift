/// Delivers through an HTTP mail API shaped like Resend's: `POST {base}/emails` with `from`, `to`,
/// `subject`, `text`, `Authorization: Bearer`, and `Idempotency-Key` = the message id.
///
/// The request body is rebuilt byte-for-byte identical on every retry (fixed field order, fixed
/// escaping), so a retry after a lost response is recognised by the API and sends nothing twice.
public struct ResendTransport: Transport {
    /// Where and how to connect.
    public struct Settings: Sendable {
        var apiKey: String
        var baseURL: String
        var caFile: String?
        var timeoutSeconds: Int
    }

    let settings: Settings
    let clock: any WallClock = SystemClock()
    private let handles = EasyHandlePool()

    init(settings: Settings) {
        self.settings = settings
    }

    /// The JSON body: a pure function of the message, so every retry sends the same bytes.
    static func requestBody(_ message: MailMessage) -> [UInt8] {
        var json = JSONWriter()
        json.object { json in
            json.field("from", message.from.unicodeValue)
            json.key("to")
            json.array { $0.value(message.to.address) }
            json.field("subject", message.subject)
            json.field("text", message.body)
            if message.onBehalfOfRecipient { json.field("reply_to", message.to.address) }
            json.key("headers")
            json.object { headers in
                headers.field("Message-ID", message.messageID)
                if message.onBehalfOfRecipient { headers.field("Auto-Submitted", "auto-generated") }
            }
        }
        return json.bytes
    }

    public func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt {
        try handles.withHandle { (handle: EasyHandle) throws(DeliveryFailure) -> DeliveryReceipt in
            let answer = try JSONExchange.perform(
                handle, base: settings.baseURL, path: "/emails",
                headers: ["Authorization: Bearer \(settings.apiKey)", "Idempotency-Key: \(message.id)"],
                body: Self.requestBody(message), caFile: settings.caFile, timeoutSeconds: settings.timeoutSeconds,
                clock: clock)
            if (200..<300).contains(answer.status) { return DeliveryReceipt() }
            throw Self.failure(status: answer.status, body: answer.body, retryAfter: answer.retryAfterMilliseconds,
                               recipientIsFixed: !message.onBehalfOfRecipient)
        }
    }

    /// The documented meanings: 429 and 5xx and a concurrent-idempotency 409 are worth retrying;
    /// 401/403 (key), 422 (validation), other 4xx and an idempotency-mismatch 409 are not.
    ///
    /// `recipientIsFixed`: the recipient is the configuration's `to=`. On a Jotter relay it is each message's
    /// own (`MailMessage.onBehalfOfRecipient`), and a 422 that does not name `from` is that message's: an
    /// address the API will not take must fail its own message, not hold the relay's mail for everyone.
    static func failure(status: Int, body: [UInt8], retryAfter: Int64?, recipientIsFixed: Bool = true) -> DeliveryFailure {
        switch status {
        case 429: return DeliveryFailure(.rateLimited, permanent: false, retryAfterMilliseconds: retryAfter)
        case 500..<600: return DeliveryFailure(.serverError, permanent: false, retryAfterMilliseconds: retryAfter)
        case 401, 403: return DeliveryFailure(.auth, permanent: true)
        case 409:
            let text = String(decoding: body.prefix(4096), as: UTF8.self)
            if text.contains("concurrent_idempotent_requests") {
                return DeliveryFailure(.conflict, permanent: false, retryAfterMilliseconds: retryAfter)
            }
            return DeliveryFailure(.conflict, permanent: true)
        case 408: return DeliveryFailure(.timeout, permanent: false, retryAfterMilliseconds: retryAfter)
        case 413: return DeliveryFailure(.tooLarge, permanent: true)
        // Every field but the memo's subject and text is the configuration's (from=, to=, the key): a
        // request the API will not process, an address it does not serve, a redirect away from it fail
        // every memo alike. They wait, held, as an SMTP server's refusal of MAIL FROM holds them — failed
        // one by one, each needed its own Retry once the configuration was mended, and /healthz said ok.
        case 422 where !recipientIsFixed && !String(decoding: body.prefix(4096), as: UTF8.self).contains("from"):
            return DeliveryFailure(.rejected, permanent: true)
        case 422:
            return configuration("the mail API refuses the request's fields (\(status)): check from=, to= and "
                                 + "that this key may send from that address")
        case 404, 405:
            return configuration("no mail API answers at this address (\(status)): check base=")
        case 300..<400:
            return configuration("the mail API redirects elsewhere (\(status)), which is not followed: set base= "
                                 + "to where it points")
        default: return DeliveryFailure(.rejected, permanent: true)
        }
    }

    private static func configuration(_ hint: String) -> DeliveryFailure {
        var failure = DeliveryFailure(.configuration, permanent: true)
        failure.hint = hint
        return failure
    }

    public func probe() -> Bool {
        guard let url = URLParts(settings.baseURL), let port = url.portOrDefault else { return true }
        return TCPProbe.canConnect(host: url.host, port: port)
    }

    /// The memo's id goes as `Idempotency-Key`: the API keeps one message per key.
    public var repeatsHarmlessly: Bool { true }
}
