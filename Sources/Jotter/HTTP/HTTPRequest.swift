/// One request, fully received: what routes see. Independent of libmicrohttpd.
public struct HTTPRequest: Sendable {
    /// `GET`, `POST`, …
    public var method: String
    /// The path without the query (`/history/…`).
    public var path: String
    /// Query arguments, decoded.
    public var query: [(name: String, value: String)]
    /// Header fields.
    public var headers: HTTPHeaders
    /// The body (chunked uploads already joined).
    public var body: [UInt8]
    /// The client's IP address ("" when unknown, as in router-level tests).
    public var remoteAddress: String

    /// Creates a request.
    public init(method: String, path: String, query: [(name: String, value: String)] = [],
                headers: HTTPHeaders = [:], body: [UInt8] = [], remoteAddress: String = "") {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
    }

    /// The first query argument called `name`.
    public func queryValue(_ name: String) -> String? {
        query.first(where: { $0.name == name })?.value
    }
}
