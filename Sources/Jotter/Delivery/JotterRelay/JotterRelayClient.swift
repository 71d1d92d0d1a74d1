/// The composer's HTTP client for a Jotter relay's `/v1` API: JSON over HTTPS (HTTP only to a loopback
/// host), certificates always verified, one pooled connection per delivery slot. An answer carries the
/// status, the JSON and `Retry-After`; the relay's message text is never passed on.
struct JotterRelayClient: Sendable {
    /// What the relay answered.
    struct Answer: Sendable {
        var status: Int
        var json: JSONValue?
        var retryAfterMilliseconds: Int64?
        /// Which of this composer's devices the relay answered (`JotterRelayAccount.fingerprint` of the
        /// secret sent), set by `JotterRelayAccount.call`.
        var device: [UInt8]? = nil

        /// The relay's error code (`{"error":{"code"}}`), if it sent one.
        var errorCode: String? { json?["error"]?["code"]?.string }
        /// The relay's own "no such message" (`not_found`): a `404` without it is something in front of the
        /// relay (a proxy with no backend while the relay restarts), which says nothing of the message —
        /// taken for the relay's, it marked a memo still pending there as delivered and erased it.
        var isRelaysNotFound: Bool { status == 404 && errorCode == "not_found" }
    }

    /// `https://host[:port]`, without a trailing slash.
    let baseURL: String
    /// The relay's host, for certificate hints and probes.
    let host: String
    let port: Int
    let caFile: String?
    let timeoutSeconds: Int
    private let clock: any WallClock = SystemClock()
    private let handles = EasyHandlePool()

    init(baseURL: String, host: String, port: Int, caFile: String?, timeoutSeconds: Int) {
        self.baseURL = baseURL
        self.host = host
        self.port = port
        self.caFile = caFile
        self.timeoutSeconds = timeoutSeconds
    }

    /// `GET path`, or `POST path` with a JSON body, or `method` (`DELETE`); throws only when no answer
    /// came (unreachable, TLS, …).
    func call(_ path: String, method: String? = nil, secret: String? = nil, json body: [UInt8]? = nil,
              idempotencyKey: String? = nil) throws(DeliveryFailure) -> Answer {
        try handles.withHandle { (handle: EasyHandle) throws(DeliveryFailure) -> Answer in
            var headers = ["Accept: application/json"]
            if let secret { headers.append("Authorization: Bearer \(secret)") }
            if let idempotencyKey { headers.append("Idempotency-Key: \(idempotencyKey)") }
            let answer = try JSONExchange.perform(handle, method: method, base: baseURL, path: path, headers: headers,
                                                  body: body, caFile: caFile, timeoutSeconds: timeoutSeconds,
                                                  clock: clock)
            return Answer(status: answer.status, json: try? JSONValue.parse(answer.body),
                          retryAfterMilliseconds: answer.retryAfterMilliseconds)
        }
    }

    /// The delivery failure an unexpected answer means (429 and 5xx are worth retrying).
    static func failure(_ answer: Answer) -> DeliveryFailure {
        switch answer.status {
        case 429: return DeliveryFailure(.rateLimited, permanent: false, retryAfterMilliseconds: answer.retryAfterMilliseconds)
        case 408: return DeliveryFailure(.timeout, permanent: false, retryAfterMilliseconds: answer.retryAfterMilliseconds)
        case 500..<600:
            return DeliveryFailure(.serverError, permanent: false, retryAfterMilliseconds: answer.retryAfterMilliseconds)
        case 401: return DeliveryFailure(.auth, permanent: true)
        // Not the relay's answer (no error of its own): a proxy in front of it, for now.
        case 404 where answer.errorCode == nil:
            return DeliveryFailure(.serverError, permanent: false, retryAfterMilliseconds: answer.retryAfterMilliseconds)
        default: return DeliveryFailure(.rejected, permanent: true)
        }
    }
}
