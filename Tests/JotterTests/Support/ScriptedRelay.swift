import Foundation

/// A stand-in for Resend's HTTP API (`Tests/Fixtures/scripted_relay.py`) on 127.0.0.1 that answers
/// `POST /emails` by a script (500, 429 + Retry-After, a hang, a reset, an accepted-then-dropped
/// request, 409s, 401, 422 …), implements Resend's idempotency, and records every request and every
/// email it actually sent.
final class ScriptedRelay: Sendable {
    /// One scripted answer.
    enum Step: Sendable {
        /// Send the email, `200 {"id": …}`.
        case accept
        /// Answer `status` (not sending), with `Retry-After` and a JSON body when given.
        case status(Int, retryAfter: String? = nil, name: String? = nil)
        /// Say nothing for `seconds`, then close.
        case hang(seconds: Double)
        /// Reset the connection without answering.
        case reset
        /// Send the email, then close without answering (the response is lost).
        case acceptThenDrop
        /// Send the email and answer `200`, keeping the connection alive; then take it as closed while idle:
        /// the next request on it crossed the close, reaches no one and gets no answer (the connection
        /// ends with a FIN, or a reset).
        case acceptThenCloseWhenIdle(reset: Bool = false)
        /// Take `milliseconds` to process, then send the email and answer `200` (while it works, a
        /// request with the same `Idempotency-Key` gets `409 concurrent_idempotent_requests`).
        case acceptSlowly(milliseconds: Int)

        var json: [String: Any] {
            switch self {
            case .accept:
                return [:]
            case .status(let status, let retryAfter, let name):
                var step: [String: Any] = ["status": status]
                if let retryAfter { step["retry_after"] = retryAfter }
                if let name { step["body"] = ["statusCode": status, "name": name] }
                return step
            case .hang(let seconds):
                return ["hang": seconds]
            case .reset:
                return ["reset": true]
            case .acceptThenDrop:
                return ["accept_then_drop": true]
            case .acceptThenCloseWhenIdle(let reset):
                return ["close_when_idle": reset ? "reset" : "fin"]
            case .acceptSlowly(let milliseconds):
                return ["delay_ms": milliseconds]
            }
        }
    }

    /// One request as the relay received it.
    struct Request {
        let number: Int
        /// Arrival, epoch seconds.
        let time: Double
        /// Which connection it came on (numbered from 1 in order of their first request).
        let connection: Int
        let method: String
        let path: String
        /// Names lowercased.
        let headers: [String: String]
        let body: [UInt8]
        /// What the relay did: `accept`, `status 500`, `hang`, `reset`, `accept_then_drop`, `replay`, `mismatch`,
        /// `closed_idle`, …
        let action: String
        /// Requests in progress when this one arrived, itself included.
        let concurrent: Int

        var idempotencyKey: String? { headers["idempotency-key"] }

        /// The JSON body.
        var json: [String: Any]? { try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] }
    }

    /// One email the relay actually sent.
    struct Email {
        let id: String
        let key: String?
        let body: [UInt8]

        var json: [String: Any]? { try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] }

        /// `headers["Message-ID"]` of the request.
        var messageID: String? { (json?["headers"] as? [String: Any])?["Message-ID"] as? String }
    }

    let directory: String
    /// Set when the relay speaks HTTPS.
    let certificates: TestCertificates?
    private let process: FixtureProcess

    var port: Int { process.port }
    var baseURL: String { "\(certificates == nil ? "http" : "https")://127.0.0.1:\(port)" }

    /// Starts the relay with `script`, recording into `directory` (created); `port` 0 picks a free one.
    /// With `certificates` it serves HTTPS.
    init(script: [Step] = [], directory: String, port: Int = 0, delayMilliseconds: Int = 0,
         certificates: TestCertificates? = nil) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        self.certificates = certificates
        let scriptPath = directory + "/script.json"
        try JSONSerialization.data(withJSONObject: script.map(\.json)).write(to: URL(fileURLWithPath: scriptPath))
        var arguments = ["--port", "\(port)", "--script", scriptPath, "--record", directory,
                         "--delay-ms", "\(delayMilliseconds)"]
        if let certificates {
            arguments += ["--cert", certificates.certificateFile, "--key", certificates.keyFile]
        }
        process = try FixtureProcess(script: "scripted_relay.py", arguments: arguments,
                                     errorPath: directory + "/relay.stderr")
    }

    /// Stops the relay and waits until its port is closed.
    func stop() {
        process.stop()
    }

    /// A `resend://` relay URL pointing at this relay (trusting `caFile`, by default the relay's own CA).
    func relayURL(key: String = "re_test_key", timeout: Int = 2, caFile: String? = nil) -> String {
        let ca = (caFile ?? certificates?.caFile).map { "&ca=" + $0 } ?? ""
        return "resend://\(key)?to=me@example.com&from=Jotter%20%3Cjotter@example.com%3E&base=\(baseURL)"
            + "&timeout=\(timeout)\(ca)"
    }

    /// Every request so far, in arrival order.
    var requests: [Request] {
        lines("requests.jsonl").map { object in
            Request(number: object["n"] as? Int ?? 0, time: object["time"] as? Double ?? 0,
                    connection: object["connection"] as? Int ?? 0,
                    method: object["method"] as? String ?? "", path: object["path"] as? String ?? "",
                    headers: object["headers"] as? [String: String] ?? [:],
                    body: Array(Data(base64Encoded: object["body"] as? String ?? "") ?? Data()),
                    action: object["action"] as? String ?? "", concurrent: object["concurrent"] as? Int ?? 0)
        }
    }

    /// Every email actually sent (a replay under the same `Idempotency-Key` is not a new email).
    var emails: [Email] {
        lines("emails.jsonl").map { object in
            Email(id: object["id"] as? String ?? "", key: object["key"] as? String,
                  body: Array(Data(base64Encoded: object["body"] as? String ?? "") ?? Data()))
        }
    }

    var standardError: String { process.standardError }

    /// Complete JSON lines of a record file (a line being written is skipped).
    private func lines(_ name: String) -> [[String: Any]] {
        guard let data = FileManager.default.contents(atPath: directory + "/" + name) else { return [] }
        return data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).compactMap {
            try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any]
        }
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for `Retry-After`.
    static func httpDate(epochSeconds: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(epochSeconds)))
    }
}
