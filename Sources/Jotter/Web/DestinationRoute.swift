import Dispatch

/// Where memos go when Jotter delivers through a Jotter relay (`--relay jotter+https://…`), set from
/// the page's Settings: `GET /destination`, `POST /destination {"address"}` (the relay mails a
/// 6-digit code there), `POST /destination/confirm {"code"}` (then memos go there, and those held as
/// `unverified` go out). Same-origin only (`RequestPolicy`). Without a Jotter relay: `404`.
///
/// The relay's own answers pass through by code (`invalid_address`, `code_cooldown`, `invalid_code`, …,
/// with `Retry-After`), with fixed text; a relay that cannot be reached is `502 relay_unreachable`, one
/// whose limits refuse `429 rate_limited` with its `Retry-After`.
struct DestinationRoute: Sendable {
    let account: JotterRelayAccount?
    /// Called once an address is verified: the worker tries the held memos now.
    let verified: @Sendable () -> Void
    let localization: Localization

    /// The relay's calls block on the network: never on a request thread.
    private static let queue = DispatchQueue(label: "jotter.destination", attributes: .concurrent)

    private static let notJotterRelay = HTTPResponse.error(
        404, code: "not_jotter_relay", message: "Memos go to the address in --relay; only a Jotter relay asks for one here.")

    /// `{"relay", "address", "pending", "state"}`.
    func state() -> HTTPResponse {
        guard let account else { return Self.notJotterRelay }
        do {
            return Self.describe(try account.destination(), account: account)
        } catch {
            return .error(503, code: "storage_unavailable", message: "The destination cannot be read right now.")
        }
    }

    /// `POST /destination {"address", "language"?}`: the relay mails a code to the address.
    func request(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        guard let account else { return respond(Self.notJotterRelay) }
        let fields = RelayJSON.object(request, allowed: ["address", "language"])
        let address = fields.flatMap { $0.address("address") }
        let language = fields.flatMap { $0.string("language", required: false, maximumBytes: 35) }
        guard case .success(let destination) = address, case .success(let asked) = language else {
            if case .failure(let failure) = address.flatMap({ _ in language }) { respond(failure.response) }
            return
        }
        let tag = localization.negotiate(query: asked, acceptLanguage: request.headers["Accept-Language"])
        Self.queue.async {
            respond(Self.relayed { () throws(DeliveryFailure) -> HTTPResponse in
                let answer = try account.requestCode(address: destination.address, language: tag)
                guard answer.status == 202 else { return Self.passThrough(answer) }
                var response = Self.describe(try account.destination(), account: account)
                response.status = 202
                return response
            })
        }
    }

    /// `POST /destination/confirm {"code"}`: the code for the pending address.
    func confirm(_ request: HTTPRequest, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        guard let account else { return respond(Self.notJotterRelay) }
        let code = RelayJSON.object(request, allowed: ["code"]).flatMap { $0.string("code", required: true, maximumBytes: 32) }
        guard case .success(let given) = code, let given else {
            if case .failure(let failure) = code { respond(failure.response) }
            return
        }
        let verified = verified
        Self.queue.async {
            respond(Self.relayed { () throws(DeliveryFailure) -> HTTPResponse in
                guard let answer = try account.confirm(code: given) else {
                    return .error(409, code: "no_pending_address", message: "Ask for a code first: POST /destination.")
                }
                guard answer.status == 200 else { return Self.passThrough(answer) }
                verified()
                return Self.describe(try account.destination(), account: account)
            })
        }
    }

    private static func describe(_ destination: JotterRelayAccount.Destination, account: JotterRelayAccount) -> HTTPResponse {
        var json = JSONWriter()
        json.object { json in
            json.field("relay", account.client.baseURL)
            json.field("address", destination.address)
            json.field("pending", destination.pending)
            json.field("state", destination.state)
            // The address verified until the relay forgot it: the page offers it again.
            if let previous = destination.previous, destination.state == "none" { json.field("previous", previous) }
        }
        return .json(200, json.bytes)
    }

    /// Runs a call to the relay; a relay that gave no answer is a `502` by kind (and hint).
    private static func relayed(_ call: () throws(DeliveryFailure) -> HTTPResponse) -> HTTPResponse {
        do {
            return try call()
        } catch {
            switch error.kind {
            case .rateLimited:
                // The relay answered: too many registrations or requests from this network for now (a
                // household behind one address shares the relay's per-address limits). Not "unreachable".
                var response = HTTPResponse.error(429, code: "rate_limited",
                                                  message: "The Jotter relay asks this composer to wait before it asks again.")
                response.headers.add(name: "Retry-After", value: String(max(1, (error.retryAfterMilliseconds ?? 60_000) / 1000)))
                return response
            case .unreachable, .timeout, .network, .serverError:
                var response = HTTPResponse.error(502, code: "relay_unreachable",
                                                  message: "The Jotter relay cannot be reached right now; try again soon.")
                response.headers.add(name: "Retry-After", value: String(max(1, (error.retryAfterMilliseconds ?? 30_000) / 1000)))
                return response
            case .io:
                return .error(503, code: "storage_unavailable", message: "The destination cannot be stored right now.")
            default:
                return .error(502, code: "relay_refused", message: "The Jotter relay refuses this composer (\(error.kind.rawValue))"
                              + (error.hint.map { ": \($0)" } ?? "") + "; check --relay.")
            }
        }
    }

    /// Fixed text for each code the relay may answer with; the relay's own message is not repeated.
    private static let messages: [String: String] = [
        "invalid_address": "That is not a plain email address (local@domain).",
        "code_cooldown": "A code was mailed less than a minute ago; wait a moment.",
        "code_hourly_cap": "Too many codes for this address this hour; try again later.",
        "code_daily_cap": "Too many codes for this address today; try again tomorrow.",
        "rate_limited": "Too many requests; try again later.",
        "invalid_code": "That code is not right.",
        "code_expired": "That code has expired; ask for a new one.",
        "code_spent": "That code can no longer be used; ask for a new one.",
        "no_code": "No code was asked for this address; ask for one.",
        "malformed_code": "The code is six digits.",
    ]

    private static func passThrough(_ answer: JotterRelayClient.Answer) -> HTTPResponse {
        let code = answer.errorCode.flatMap { messages[$0] == nil ? nil : $0 } ?? "relay_error"
        let status = [400, 409, 429].contains(answer.status) ? answer.status : 502
        var response = HTTPResponse.error(status, code: code,
                                          message: messages[code] ?? "The Jotter relay refused the request.")
        if let wait = answer.retryAfterMilliseconds {
            response.headers.add(name: "Retry-After", value: String(max(1, (wait + 999) / 1000)))
        }
        return response
    }
}
