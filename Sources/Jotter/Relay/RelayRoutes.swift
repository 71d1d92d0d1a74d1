/// The relay's HTTP API under `/v1`: JSON in, JSON out, every error `{"error":{"code","message"}}`
/// with a fixed message (never an echo of the request). Every route runs on the service's queue, so
/// no HTTP thread waits for the database.
struct RelayRoutes: Sendable {
    /// The rules the routes apply.
    let service: RelayService
    /// The relay's configuration (for the code lifetime and the registration mode).
    let configuration: RelayConfiguration
    /// Wrong device secrets per client (this node's count): ten, then one a minute, then `429`. A right
    /// secret is never refused by it: a guesser behind the same NAT cannot lock a device out.
    var failedSecrets = RateLimiter(limits: .init(burst: 10, perSecond: 10.0 / 600))

    /// How a route answers: once, from any thread.
    typealias Respond = @Sendable (HTTPResponse) -> Void

    /// The router with every relay route.
    func router() -> Router {
        var router = Router()
        add(&router, "POST", "/v1/devices") { request, _, respond in respond(register(request)) }
        add(&router, "POST", "/v1/destinations") { request, _, respond in
            authenticated(request, respond) { device in requestCode(request, device: device, respond: respond) }
        }
        add(&router, "POST", "/v1/destinations/confirm") { request, _, respond in
            authenticated(request, respond) { device in respond(confirm(request, device: device)) }
        }
        add(&router, "GET", "/v1/destinations") { request, _, respond in
            authenticated(request, respond) { device in respond(destinations(device: device)) }
        }
        // The address in the body, so no proxy's or server's access log in front of the relay has it.
        add(&router, "POST", "/v1/destinations/forget") { request, _, respond in
            authenticated(request, respond) { device in
                switch RelayJSON.object(request, allowed: ["address"]).flatMap({ $0.address("address") }) {
                case .success(let address): respond(removeDestination(address, device: device))
                case .failure(let error): respond(error.response)
                }
            }
        }
        // The same, from before: the address in the path.
        add(&router, "DELETE", "/v1/destinations/{address}") { request, parameters, respond in
            authenticated(request, respond) { device in
                respond(removeDestination(parameters["address"] ?? "", device: device))
            }
        }
        add(&router, "DELETE", "/v1/devices/me") { request, _, respond in
            authenticated(request, respond) { device in respond(answering {
                try service.revoke(deviceID: device)
                return HTTPResponse(status: 204)
            }) }
        }
        add(&router, "POST", "/v1/messages") { request, _, respond in
            authenticated(request, respond) { device in send(request, device: device, respond: respond) }
        }
        add(&router, "GET", "/v1/messages/{id}") { request, parameters, respond in
            authenticated(request, respond) { device in respond(status(id: parameters["id"] ?? "", device: device)) }
        }
        add(&router, "POST", "/v1/messages/{id}/retry") { request, parameters, respond in
            authenticated(request, respond) { device in
                respond(status(id: parameters["id"] ?? "", device: device, retryingFor: request.remoteAddress))
            }
        }
        return router
    }

    private func add(_ router: inout Router, _ method: String, _ pattern: String, _ handler: @escaping Router.Handler) {
        let queue = service.queue
        router.add(method, pattern) { request, parameters, respond in
            queue.async { handler(request, parameters, respond) }
        }
    }

    // MARK: Devices

    private func removeDestination(_ text: String, device: String) -> HTTPResponse {
        guard let address = DestinationAddress(text) else {
            return .error(400, code: "invalid_address", message: "That is not an email address this relay can send to.")
        }
        return removeDestination(address, device: device)
    }

    private func removeDestination(_ address: DestinationAddress, device: String) -> HTTPResponse {
        answering {
            try service.removeDestination(deviceID: device, address: address)
                ? HTTPResponse(status: 204)
                : .error(404, code: "destination_not_found", message: "This device has no such address.")
        }
    }

    private func register(_ request: HTTPRequest) -> HTTPResponse {
        var invite: String?, secret: String?
        if !request.body.isEmpty {
            let fields: RelayJSON.Fields
            switch RelayJSON.object(request, allowed: ["invite", "secret"]) {
            case .success(let object): fields = object
            case .failure(let error): return error.response
            }
            switch fields.string("invite", required: false) {
            case .success(let value): invite = value
            case .failure(let error): return error.response
            }
            switch fields.string("secret", required: false) {
            case .success(let value): secret = value
            case .failure(let error): return error.response
            }
            if let secret, !RelayKeys.isDeviceSecret(secret) {
                return .error(400, code: "invalid_secret",
                              message: "A proposed secret is jrs_ and 43 base64url characters (256 random bits).")
            }
        }
        // Locked out after wrong invites: no invite is even looked at, so guessing stops (a right guess
        // would otherwise still register while the wrong ones get 429).
        if invite != nil, let seconds = failedSecrets.waiting(client: request.remoteAddress) {
            return Self.tooManyAttempts("invites", seconds)
        }
        return answering {
            switch try service.register(invite: invite, client: request.remoteAddress, secret: secret) {
            case .registered(let id, let secret):
                var json = JSONWriter()
                json.object { json in
                    json.field("device_id", id)
                    json.field("secret", secret)
                }
                return .json(201, json.bytes)
            case .inviteInvalid:
                if configuration.registration == .invite && invite == nil {
                    return .error(403, code: "invite_required", message: "This relay registers devices by invite only.")
                }
                // Counted with wrong secrets: a few, then 429, so invites are not guessed at speed.
                if let seconds = failedSecrets.retryAfter(client: request.remoteAddress) {
                    return Self.tooManyAttempts("invites", seconds)
                }
                return .error(403, code: "invite_invalid", message: "This invite is not valid (used, expired or unknown).")
            case .limited(let states):
                return Self.limited(states, code: "rate_limited", message: "Too many registrations; try again later.")
            case .secretRevoked:
                return .error(409, code: "secret_revoked",
                              message: "This secret belonged to a device that was revoked; register with a new secret.")
            }
        }
    }

    /// `429 too_many_attempts` with `Retry-After`: this client sent too many wrong `what`s (secrets, invites).
    private static func tooManyAttempts(_ what: String, _ seconds: Int) -> HTTPResponse {
        var response = HTTPResponse.error(429, code: "too_many_attempts",
                                          message: "Too many wrong \(what) from here; wait before trying again.")
        response.headers.add(name: "Retry-After", value: String(seconds))
        return response
    }

    /// Runs `handler` with the device the request's bearer secret belongs to, or answers `401`.
    private func authenticated(_ request: HTTPRequest, _ respond: Respond, _ handler: (String) -> Void) {
        guard let secret = Self.bearerSecret(request) else { return respond(Self.missingCredentials) }
        let device: String?
        do {
            device = try service.authenticate(secret: secret)
        } catch {
            return respond(Self.unavailable(error))
        }
        guard let device else {
            if let seconds = failedSecrets.retryAfter(client: request.remoteAddress) {
                return respond(Self.tooManyAttempts("secrets", seconds))
            }
            return respond(Self.unauthorized("invalid_credentials", "This secret is not a device's of this relay."))
        }
        handler(device)
    }

    // MARK: Destinations

    private func requestCode(_ request: HTTPRequest, device: String, respond: @escaping Respond) {
        let address: DestinationAddress, language: String?
        switch RelayJSON.object(request, allowed: ["address", "language"]).flatMap({ fields in
            fields.address("address").flatMap { address in
                // A language that is no language tag (too long, say) means English, as an unknown one does.
                fields.string("language", required: false).map { (address, $0.flatMap { $0.utf8.count <= 35 ? $0 : nil }) }
            }
        }) {
        case .success(let parsed): (address, language) = parsed
        case .failure(let error): return respond(error.response)
        }
        // An address is a path segment of `DELETE /v1/destinations/{address}`, where an encoded slash is
        // refused like in every path: one with a slash could be verified but never forgotten. (Addresses
        // verified before this check keep working.)
        guard !address.address.contains("/") else {
            return respond(.error(400, code: "invalid_address",
                                  message: "This relay cannot take an address with a slash in it."))
        }
        let lifetime = configuration.codes.lifetimeMilliseconds / 1000
        service.requestCode(deviceID: device, address: address, language: language,
                            client: request.remoteAddress) { result in
            respond(Self.answering(result) { outcome in
            switch outcome {
            case .sent(let states):
                var json = JSONWriter()
                json.object { $0.field("expires_in", lifetime) }
                var response = HTTPResponse.json(202, json.bytes)
                RateLimitFields.add(states, to: &response)
                return response
            case .limited(let reason, let seconds, let states):
                let (code, message) = Self.codeRefusal(reason)
                var response = HTTPResponse.error(429, code: code, message: message)
                response.headers.add(name: "Retry-After", value: String(seconds))
                RateLimitFields.add(states, to: &response)
                return response
            }
            })
        }
    }

    private static func codeRefusal(_ reason: String) -> (code: String, message: String) {
        switch reason {
        case "cooldown":
            return ("code_cooldown",
                    "A code was sent to this address less than a minute ago; wait before asking again.")
        case "address_hourly":
            return ("code_hourly_cap", "Too many codes for this address in the last hour; try again later.")
        case "address_daily":
            return ("code_daily_cap", "Too many codes for this address today; try again later.")
        case "domain-codes-day":
            return ("code_domain_daily_cap",
                    "This relay has sent as many codes to this mail domain today as it sends; try again tomorrow.")
        default:
            return ("rate_limited", "Too many code requests from this network; try again later.")
        }
    }

    private func confirm(_ request: HTTPRequest, device: String) -> HTTPResponse {
        let address: DestinationAddress, code: String
        switch RelayJSON.object(request, allowed: ["address", "code"]).flatMap({ fields in
            fields.address("address").map { address in
                // Anything but six digits, a number or a long string included, is a malformed code.
                (address, fields.value["code"]?.string ?? "")
            }
        }) {
        case .success(let parsed): (address, code) = parsed
        case .failure(let error): return error.response
        }
        guard VerificationCode.isWellFormed(code) else {
            return .error(400, code: "malformed_code", message: "The code is six digits.")
        }
        return answering {
            switch try service.confirm(deviceID: device, address: address, code: code) {
            case .verified:
                var json = JSONWriter()
                json.object { json in
                    json.field("address", address.address)
                    json.field("state", "verified")
                }
                return .json(200, json.bytes)
            case .wrong:
                return .error(400, code: "invalid_code", message: "That is not the code we mailed.")
            case .expired:
                return .error(400, code: "code_expired", message: "This code has expired; ask for a new one.")
            case .spent:
                return .error(400, code: "code_spent",
                              message: "This code was used, or had too many wrong tries; ask for a new one.")
            case .noCode:
                return .error(400, code: "no_code", message: "Ask for a code for this address first.")
            }
        }
    }

    private func destinations(device: String) -> HTTPResponse {
        answering {
            let destinations = try service.destinations(deviceID: device)
            var json = JSONWriter()
            json.object { json in
                json.key("destinations")
                json.array { json in
                    for destination in destinations {
                        json.object { json in
                            json.field("address", destination.address)
                            json.field("state", destination.verifiedAt == nil ? "pending" : "verified")
                            json.field("verified_at", destination.verifiedAt.map(Timestamp.iso8601(milliseconds:)))
                        }
                    }
                }
            }
            return .json(200, json.bytes)
        }
    }

    // MARK: Messages

    private func send(_ request: HTTPRequest, device: String, respond: @escaping Respond) {
        let keys = request.headers.values("Idempotency-Key")
        guard keys.count <= 1, keys.allSatisfy(Self.validIdempotencyKey) else {
            return respond(.error(400, code: "invalid_idempotency_key",
                                  message: "Idempotency-Key must be one value of 1-256 visible ASCII characters."))
        }
        let to: DestinationAddress, body: String, writtenAt: Int64?
        var subject: String?
        switch RelayJSON.object(request, allowed: ["to", "subject", "body", "written_at"]).flatMap({ fields in
            fields.address("to").flatMap { to in
                fields.string("subject", required: false, maximumBytes: RelayConfiguration.maxSubjectBytes).flatMap { subject in
                    fields.string("body", required: true).flatMap { body in
                        fields.moment("written_at").map { (to, subject, body ?? "", $0) }
                    }
                }
            }
        }) {
        case .success(let parsed): (to, subject, body, writtenAt) = parsed
        case .failure(let error): return respond(error.response)
        }
        // Nothing a reader could see is no body, as the composer counts it (it mailed spaces and tabs); a
        // blank subject is none, so the body's first line is the subject (it mailed an empty Subject:).
        guard !body.unicodeScalars.allSatisfy(\.isInvisible) else {
            return respond(.error(400, code: "empty", message: "The message has no body."))
        }
        if let given = subject, given.unicodeScalars.allSatisfy(\.isInvisible) { subject = nil }
        guard body.utf8.count <= RelayConfiguration.maxMessageBodyBytes else {
            return respond(.error(413, code: "too_large", message: "The message body is larger than a relay accepts "
                                      + "(\(RelayConfiguration.maxMessageBodyBytes) bytes of UTF-8)."))
        }
        service.send(deviceID: device, to: to, subject: subject, body: body, writtenAt: writtenAt,
                     idempotencyKey: keys.first, client: request.remoteAddress) { result in
            respond(Self.answering(result) { outcome in
            switch outcome {
            case .accepted(let id, let states):
                var response = Self.accepted(id)
                RateLimitFields.add(states, to: &response)
                return response
            case .replayed(let id):
                var response = Self.accepted(id)
                response.headers.add(name: "Idempotent-Replayed", value: "true")
                return response
            case .conflict(let id):
                // The message the key was used for (this device's own): a composer whose first 202 was lost
                // and whose address changed since follows that message instead of failing a memo the relay has.
                var json = JSONWriter()
                json.object { json in
                    json.error(code: "idempotency_conflict",
                               message: "This Idempotency-Key was already used for a different message.") { json in
                        if let id { json.field("message_id", id) }
                    }
                }
                return .json(409, json.bytes)
            case .inFlight(let seconds):
                var response = HTTPResponse.error(
                    409, code: "idempotency_in_flight",
                    message: "A request with this Idempotency-Key is still in progress; retry after Retry-After.")
                // The holder usually answers within milliseconds; one that died holds the key until its
                // lease ends. A few seconds between tries serve both.
                response.headers.add(name: "Retry-After", value: String(min(max(seconds, 1), 5)))
                return response
            case .unverified:
                return .error(403, code: "destination_unverified",
                              message: "This device has not verified that address; ask for a code first.")
            case .limited(let states):
                return Self.limited(states, code: "rate_limited", message: "Too many messages; try again later.")
            }
            })
        }
    }

    private static func accepted(_ id: String) -> HTTPResponse {
        var json = JSONWriter()
        json.object { $0.field("id", id) }
        var response = HTTPResponse.json(202, json.bytes)
        response.messageID = id
        return response
    }

    /// Message `id`'s record; with `retryingFor` (the client), a message the relay gave up on (`failed`)
    /// is first put back in its queue — its sender's Retry, passed on, charged as a send. Any other
    /// status is left as it is, so asking twice does no more than asking once.
    private func status(id: String, device: String, retryingFor client: String? = nil) -> HTTPResponse {
        answering {
            let id = id.lowercased()
            let notFound = HTTPResponse.error(404, code: "not_found", message: "This device sent no such message.")
            guard id.utf8.count <= 64 else { return notFound }
            let record: MessageRecord
            if let client {
                switch try service.retry(deviceID: device, id: id, client: client) {
                case nil: return notFound
                case .limited(let states)?:
                    return Self.limited(states, code: "rate_limited", message: "Too many messages; try again later.")
                case .record(let found)?: record = found
                }
            } else {
                guard let found = try service.status(deviceID: device, id: id) else { return notFound }
                record = found
            }
            var json = JSONWriter()
            json.object { json in
                json.field("id", record.id)
                // Waiting because this relay's mail account is refused (nodes sharing a PostgreSQL queue
                // put such a message back for each other, rather than hold it): held, as one node says it.
                let refusedHere = record.status == .retrying
                    && record.lastError.map(DeliveryFailure.relayRefusalKinds.contains) == true
                json.field("status", refusedHere ? DeliveryStatus.held.rawValue : record.status.rawValue)
                json.field("created_at", Timestamp.iso8601(milliseconds: record.createdAt))
                json.field("attempts", Int64(record.attempts))
                json.field("next_attempt_at", record.nextAttemptAt.map(Timestamp.iso8601(milliseconds:)))
                json.field("delivered_at", record.deliveredAt.map(Timestamp.iso8601(milliseconds:)))
                json.field("last_error", record.lastError)
            }
            var response = HTTPResponse.json(200, json.bytes)
            response.messageID = record.id
            return response
        }
    }

    // MARK: Answers

    /// `Idempotency-Key` must be 1–256 visible ASCII characters (as the mail APIs require).
    static func validIdempotencyKey(_ key: String) -> Bool {
        (1...256).contains(key.utf8.count) && key.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// Runs `body`; a storage failure is `503` (nothing was accepted), never a `2xx`.
    private func answering(_ body: () throws -> HTTPResponse) -> HTTPResponse {
        do {
            return try body()
        } catch {
            return Self.unavailable(error)
        }
    }

    /// The answer for `result`: `answer`'s for a success, `503` for a storage failure.
    private static func answering<T>(_ result: Result<T, any Error>, _ answer: (T) -> HTTPResponse) -> HTTPResponse {
        switch result {
        case .success(let value): return answer(value)
        case .failure(let error): return unavailable(error)
        }
    }

    private static func unavailable(_ error: any Error) -> HTTPResponse {
        if let failure = error as? RelayService.StorageFailure, failure.outcomeUnknown {
            let message = switch failure.stored {
            case .keyedMessage:
                "The relay's database failed while storing this message, which may be stored: send it again "
                    + "with the same Idempotency-Key after Retry-After to find out; it will not be sent twice."
            case .message:
                "The relay's database failed while storing this message, which may be stored and sent: sent "
                    + "again, it may arrive twice (with an Idempotency-Key, a retry is always safe)."
            case .code:
                "The relay's database failed while storing this code's mail, which may be sent: look in the "
                    + "inbox before asking for another code."
            }
            var response = HTTPResponse.error(503, code: "storage_outcome_unknown", message: message)
            response.headers.add(name: "Retry-After", value: String(failure.retryAfterSeconds))
            return response
        }
        let diskFull = (error as? RelayService.StorageFailure)?.diskFull
            ?? (error as? DatabaseError)?.isDiskFull ?? false
        var response = HTTPResponse.error(503, code: "storage_unavailable",
                                          message: diskFull ? "The relay's disk is full; nothing was stored."
                                              : "The relay could not use its database; nothing was stored or changed.")
        response.headers.add(name: "Retry-After", value: "30")
        return response
    }

    /// The secret of the request's one `Authorization: Bearer <secret>` header; nil without one (also read
    /// on a message's head, before its body: `RelayApplication.bodyRefusal`).
    static func bearerSecret(_ request: HTTPRequest) -> String? {
        let values = request.headers.values("Authorization")
        guard values.count == 1, let value = values.first, value.utf8.count > 7,
              value.prefix(7).lowercased() == "bearer " else { return nil }
        return String(String(value.dropFirst(7)).trimmingASCIISpaces())
    }

    /// `401` for a request without `Authorization: Bearer`.
    static var missingCredentials: HTTPResponse {
        unauthorized("missing_credentials", "Send Authorization: Bearer <secret>.")
    }

    private static func unauthorized(_ code: String, _ message: String) -> HTTPResponse {
        var response = HTTPResponse.error(401, code: code, message: message)
        response.headers.add(name: "WWW-Authenticate", value: "Bearer")
        return response
    }

    private static func limited(_ states: [LimitState], code: String, message: String) -> HTTPResponse {
        var response = HTTPResponse.error(429, code: code, message: message)
        let wait = states.filter(\.refused).map(\.resetSeconds).max() ?? 1
        response.headers.add(name: "Retry-After", value: String(wait))
        RateLimitFields.add(states, to: &response)
        return response
    }
}
