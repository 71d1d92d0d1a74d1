import CCurl

/// A small HTTP client for a Jotter server (the CLI's `send` and `history`), over libcurl. It only
/// talks to the URL it is given; a device token goes as `Authorization: Bearer`.
struct ServerClient {
    /// What came back.
    struct Response {
        var status: Int
        var body: [UInt8]
        var headers: [(name: String, value: String)]

        func header(_ name: String) -> String? {
            headers.first(where: { $0.name.caseInsensitiveEquals(name) })?.value
        }

        /// `error.code` of a JSON error body.
        var errorCode: String? { (try? JSONValue.parse(body))?["error"]?["code"]?.string }
        /// `error.message` of a JSON error body.
        var errorMessage: String? { (try? JSONValue.parse(body))?["error"]?["message"]?.string }
    }

    /// Why no answer came at all (the server is not running, or went away mid-request).
    struct Unreachable: Error {
        var code: Int32
        /// The request left this machine (a connection was made and the request sent) before the failure:
        /// the server may have acted on it.
        var requestSent = false

        /// The connection ended before any answer (nothing, or reset): what a TLS-only port does with a
        /// plain request.
        var endedUnanswered: Bool {
            [CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR].map { Int32($0.rawValue) }.contains(code)
        }

        /// The server answered but its certificate was not trusted (a LAN server's own CA, say).
        var isCertificateProblem: Bool {
            [CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM]
                .map { Int32($0.rawValue) }.contains(code)
        }
    }

    let baseURL: String
    let token: String?
    var timeoutSeconds = 30
    /// The CA to verify an `https://` server with (a LAN server's `DATA_DIR/tls/ca.pem`), else the system's.
    var caFile: String?

    /// Whether the server of an `http://` base URL speaks TLS on that port (a LAN-mode Jotter serves only
    /// HTTPS, and drops a plain request unanswered): a handshake only, no request, no certificate checked.
    func speaksTLS() -> Bool {
        guard baseURL.lowercased().hasPrefix("http://"), let handle = try? EasyHandle() else { return false }
        do {
            try handle.set(CURLOPT_URL, "https://" + baseURL.dropFirst("http://".count))
            try handle.set(CURLOPT_PROTOCOLS_STR, "https")
            try handle.set(CURLOPT_NOSIGNAL, 1)
            try handle.set(CURLOPT_CONNECTTIMEOUT, 5)
            try handle.set(CURLOPT_TIMEOUT, 10)
            try handle.set(CURLOPT_CONNECT_ONLY, 1)
            try handle.set(CURLOPT_SSL_VERIFYPEER, 0)
            try handle.set(CURLOPT_SSL_VERIFYHOST, 0)
            try handle.perform()
            return true
        } catch {
            return false
        }
    }

    /// `METHOD baseURL+path` with `body` and `headers`; throws `Unreachable` when no answer came.
    func request(_ method: String, _ path: String, headers: [String] = [], body: [UInt8]? = nil) throws -> Response {
        let handle: EasyHandle
        do { handle = try EasyHandle() } catch { throw Unreachable(code: -1) }
        handle.responseLimit = 4 * 1024 * 1024
        do {
            try handle.set(CURLOPT_URL, baseURL + path)
            try handle.set(CURLOPT_PROTOCOLS_STR, "http,https")
            try handle.set(CURLOPT_NOSIGNAL, 1)
            try handle.set(CURLOPT_CONNECTTIMEOUT, 5)
            try handle.set(CURLOPT_TIMEOUT, timeoutSeconds)
            try handle.set(CURLOPT_CUSTOMREQUEST, method)
            if let caFile { try handle.set(CURLOPT_CAINFO, caFile) }
            if let body {
                try handle.set(CURLOPT_POST, 1)
                try handle.set(CURLOPT_POSTFIELDSIZE, body.count)
                try handle.setUpload(body)
            }
            var fields = headers + ["User-Agent: jotter-cli", "Expect:"]
            if let token { fields.append("Authorization: Bearer \(token)") }
            try handle.set(CURLOPT_HTTPHEADER, list: fields)
        } catch {
            throw Unreachable(code: -1)
        }
        do throws(CurlError) {
            try handle.perform()
        } catch {
            throw Unreachable(code: error.code, requestSent: handle.sentRequest)
        }
        return Response(status: handle.responseCode, body: handle.responseBody, headers: handle.responseHeaders)
    }
}
