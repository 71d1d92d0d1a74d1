/// Errors that map to an HTTP error response.
public protocol HTTPResponseError: Error {
    /// The status code.
    var status: Int { get }
    /// A stable machine-readable code (`empty`, `too_large`, …).
    var code: String { get }
    /// A fixed human-readable message.
    var message: String { get }
}

extension HTTPResponseError {
    /// The JSON error response.
    public var response: HTTPResponse {
        .error(status, code: code, message: message)
    }
}
