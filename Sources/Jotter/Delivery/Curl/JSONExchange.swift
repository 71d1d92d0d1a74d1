import CCurl

/// One request to an HTTP JSON API — a mail API (`resend://`) or a Jotter relay — with the settings
/// both need: HTTPS (HTTP only where the caller allowed it), certificates always verified (a name
/// mismatch explained), bounded time, a JSON body when given, and the answer's `Retry-After` read.
enum JSONExchange {
    /// What came back.
    struct Answer {
        var status: Int
        var body: [UInt8]
        var retryAfterMilliseconds: Int64?
    }

    /// Sends `body` (a POST) or nothing (a GET) to `base + path` on `handle`, with `headers` added to
    /// the user agent, `Expect:` and, with a body, its content type; `method` (`DELETE`) replaces the
    /// method either would use. Throws only when no answer came.
    static func perform(_ handle: EasyHandle, method: String? = nil, base: String, path: String, headers: [String],
                        body: [UInt8]?, caFile: String?, timeoutSeconds: Int,
                        clock: any WallClock) throws(DeliveryFailure) -> Answer {
        do {
            try handle.set(CURLOPT_URL, base + path)
            try handle.set(CURLOPT_PROTOCOLS_STR, base.hasPrefix("https:") ? "https" : "http")
            try handle.set(CURLOPT_NOSIGNAL, 1)
            try handle.set(CURLOPT_CONNECTTIMEOUT, min(timeoutSeconds, 10))
            try handle.set(CURLOPT_TIMEOUT, timeoutSeconds)
            try handle.set(CURLOPT_SSL_VERIFYPEER, 1)
            try handle.set(CURLOPT_SSL_VERIFYHOST, 2)
            if let caFile { try handle.set(CURLOPT_CAINFO, caFile) }
            var all = headers + ["User-Agent: Jotter", "Expect:"]
            if let body {
                all.append("Content-Type: application/json")
                try handle.set(CURLOPT_POST, 1)
                try handle.set(CURLOPT_POSTFIELDSIZE, body.count)
                try handle.setUpload(body)
            }
            if let method { try handle.set(CURLOPT_CUSTOMREQUEST, method) }
            try handle.set(CURLOPT_HTTPHEADER, list: all)
        } catch {
            throw DeliveryFailure(.configuration, permanent: true)
        }
        do throws(CurlError) {
            try handle.perform()
        } catch {
            throw DeliveryFailure(curl: error).explainingCertificate(error, CertificateNames.Target(
                url: base, protocols: "https", startTLS: false, host: URLParts(base)?.host ?? base, caFile: caFile,
                timeoutSeconds: timeoutSeconds))
        }
        let retryAfter = handle.responseHeader("Retry-After")
            .flatMap { RetryAfter.milliseconds($0, now: clock.nowMilliseconds()) }
        return Answer(status: handle.responseCode, body: handle.responseBody, retryAfterMilliseconds: retryAfter)
    }
}
