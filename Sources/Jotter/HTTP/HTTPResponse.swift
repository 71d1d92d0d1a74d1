/// A response as routes build it; the server adapter turns it into libmicrohttpd's.
public struct HTTPResponse: Sendable {
    /// The status code.
    public var status: Int
    /// Header fields (the security headers are added by `Router`).
    public var headers: HTTPHeaders
    /// The body bytes.
    public var body: [UInt8]
    /// The message id this response is about, for the request log (never a header unless a route adds one).
    public var messageID: String?
    /// The route that answered (`/history/{id}`), logged instead of the raw path.
    public var route: String?
    /// Set only on a response that is identical every time (see `ReusableResponse`).
    public var reusable: ReusableResponse?
    /// `Router.finish` has added its headers (a response built once, ahead, is not finished again).
    var finished = false

    /// Creates a response.
    public init(status: Int, headers: HTTPHeaders = [:], body: [UInt8] = [], messageID: String? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.messageID = messageID
    }

    /// The same response with another status.
    public func with(status: Int) -> HTTPResponse {
        var copy = self
        copy.status = status
        return copy
    }

    /// A JSON response from already-encoded bytes.
    public static func json(_ status: Int, _ body: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body)
    }

    /// `{"error":{"code":…,"message":…}}`. Messages are fixed text: never echo request content.
    public static func error(_ status: Int, code: String, message: String) -> HTTPResponse {
        var json = JSONWriter()
        json.object { $0.error(code: code, message: message) }
        return .json(status, json.bytes)
    }
}
