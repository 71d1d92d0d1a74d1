import CCurl

/// The composer's HTTP client for a Jotter relay's `/v1` API: JSON over HTTPS (HTTP only to a loopback
/// host), certificates always verified, one pooled connection per delivery slot. An answer carries the
/// status, the JSON and `Retry-After`; the relay's message text is never passed on.
struct JotterRelayClient: Sendable {
    /// What the relay answered.
    struct Answer: Sendable {
        var status: Int
        var json: JSONValue?
        var retryAfterMilliseconds: Int64?

        /// The relay's error code (`{"error":{"code"}}`), if it sent one.
        var errorCode: String? { json?["error"]?["code"]?.string }
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

    /// `GET path`, or `POST path` with a JSON body; throws only when no answer came (unreachable, TLS, …).
    func call(_ path: String, secret: String? = nil, json body: [UInt8]? = nil,
              idempotencyKey: String? = nil) throws(DeliveryFailure) -> Answer {
        try handles.withHandle { (handle: EasyHandle) throws(DeliveryFailure) -> Answer in
            do {
                try handle.set(CURLOPT_URL, baseURL + path)
                try handle.set(CURLOPT_PROTOCOLS_STR, baseURL.hasPrefix("https:") ? "https" : "http")
                try handle.set(CURLOPT_NOSIGNAL, 1)
                try handle.set(CURLOPT_CONNECTTIMEOUT, min(timeoutSeconds, 10))
                try handle.set(CURLOPT_TIMEOUT, timeoutSeconds)
                try handle.set(CURLOPT_SSL_VERIFYPEER, 1)
                try handle.set(CURLOPT_SSL_VERIFYHOST, 2)
                if let caFile { try handle.set(CURLOPT_CAINFO, caFile) }
                var headers = ["Accept: application/json", "User-Agent: Jotter", "Expect:"]
                if let secret { headers.append("Authorization: Bearer \(secret)") }
                if let idempotencyKey { headers.append("Idempotency-Key: \(idempotencyKey)") }
                if let body {
                    headers.append("Content-Type: application/json")
                    try handle.set(CURLOPT_POST, 1)
                    try handle.set(CURLOPT_POSTFIELDSIZE, body.count)
                    try handle.setUpload(body)
                }
                try handle.set(CURLOPT_HTTPHEADER, list: headers)
            } catch {
                throw DeliveryFailure(.configuration, permanent: true)
            }
            do throws(CurlError) {
                try handle.perform()
            } catch {
                throw DeliveryFailure(curl: error).explainingCertificate(error, CertificateNames.Target(
                    url: baseURL, protocols: "https", startTLS: false, host: host, caFile: caFile,
                    timeoutSeconds: timeoutSeconds))
            }
            let retryAfter = handle.responseHeader("Retry-After")
                .flatMap { RetryAfter.milliseconds($0, now: clock.nowMilliseconds()) }
            return Answer(status: handle.responseCode, json: try? JSONValue.parse(handle.responseBody),
                          retryAfterMilliseconds: retryAfter)
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
        default: return DeliveryFailure(.rejected, permanent: true)
        }
    }
}
