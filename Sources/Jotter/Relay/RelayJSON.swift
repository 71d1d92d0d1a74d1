/// Reading the relay's request bodies: `application/json`, one object, only the expected members
/// (each at most once), each of the expected type. Read by Jotter's own strict JSON reader.
enum RelayJSON {
    /// Why a body was refused; its message is fixed text and names at most the member.
    struct Failure: Error, Sendable {
        /// The status code (400, or 415 for another media type).
        var status: Int
        /// A stable machine-readable code.
        var code: String
        /// Fixed text for a person.
        var message: String

        /// The JSON error response.
        var response: HTTPResponse { .error(status, code: code, message: message) }
    }

    /// The members of a request's JSON object.
    struct Fields: Sendable {
        /// The object.
        let value: JSONValue

        /// Member `key` as a string: nil when absent (allowed unless `required`).
        func string(_ key: String, required: Bool, maximumBytes: Int = .max) -> Result<String?, Failure> {
            guard let member = value[key], member != .null else {
                return required ? .failure(Failure(status: 400, code: "missing_field", message: "\(key) is required."))
                    : .success(nil)
            }
            guard let text = member.string else {
                return .failure(Failure(status: 400, code: "invalid_field", message: "\(key) must be a string."))
            }
            guard text.utf8.count <= maximumBytes else {
                return .failure(Failure(status: 400, code: "invalid_field", message: "\(key) is too long."))
            }
            return .success(text)
        }

        /// Member `key` as an RFC 3339 date and time (`2026-12-01T09:30:05.123Z`), in epoch milliseconds,
        /// from 1970 on (a mail's `Date` needs a four-digit year; no memo was written before); nil when absent.
        func moment(_ key: String) -> Result<Int64?, Failure> {
            string(key, required: false, maximumBytes: 64).flatMap { text in
                guard let text else { return .success(nil) }
                guard let milliseconds = Timestamp.milliseconds(rfc3339: text), milliseconds >= 0 else {
                    return .failure(Failure(status: 400, code: "invalid_field",
                                            message: "\(key) must be an RFC 3339 date and time from 1970 on, like 2026-12-01T09:30:05Z."))
                }
                return .success(milliseconds)
            }
        }

        /// Member `key` as an email address a relay can send to (one too long is no such address).
        func address(_ key: String) -> Result<DestinationAddress, Failure> {
            string(key, required: true).flatMap { text in
                guard let text, text.utf8.count <= 320, let address = DestinationAddress(text) else {
                    return .failure(Failure(status: 400, code: "invalid_address",
                                            message: "\(key) must be a plain email address (local@domain)."))
                }
                return .success(address)
            }
        }
    }

    /// The request's body as a JSON object with members from `allowed` only.
    static func object(_ request: HTTPRequest, allowed: Set<String>) -> Result<Fields, Failure> {
        guard request.headers.values("Content-Type").count <= 1 else {
            return .failure(Failure(status: 400, code: "bad_request", message: "More than one Content-Type header."))
        }
        let mediaType = (request.headers["Content-Type"] ?? "").split(separator: ";").first
            .map { $0.trimmingCharacters(in: " \t").lowercased() }
        guard mediaType == "application/json" else {
            return .failure(Failure(status: 415, code: "unsupported_media_type",
                                    message: "Send the body as application/json."))
        }
        let value: JSONValue
        do {
            value = try JSONValue.parse(request.body)
        } catch .duplicateKey {
            return .failure(Failure(status: 400, code: "repeated_field", message: "A member appears twice."))
        } catch {
            return .failure(Failure(status: 400, code: "invalid_json", message: "The body is not valid JSON."))
        }
        guard case .object = value else {
            return .failure(Failure(status: 400, code: "invalid_json", message: "The body must be a JSON object."))
        }
        if value.keys.contains(where: { !allowed.contains($0) }) {
            let names = allowed.sorted().joined(separator: ", ")
            return .failure(Failure(status: 400, code: "unknown_field",
                                    message: "The body has a member that is not one of: \(names)."))
        }
        return .success(Fields(value: value))
    }
}
