/// Header fields in arrival order, looked up without regard to case.
public struct HTTPHeaders: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    /// The fields as received.
    public private(set) var fields: [(name: String, value: String)]

    /// Headers from `fields`.
    public init(_ fields: [(name: String, value: String)] = []) {
        self.fields = fields
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.fields = elements.map { (name: $0.0, value: $0.1) }
    }

    /// Appends a field.
    public mutating func add(name: String, value: String) {
        fields.append((name: name, value: value))
    }

    /// The first value of `name`.
    public subscript(name: String) -> String? {
        fields.first(where: { $0.name.caseInsensitiveEquals(name) })?.value
    }

    /// Every value of `name`.
    public func values(_ name: String) -> [String] {
        fields.filter { $0.name.caseInsensitiveEquals(name) }.map(\.value)
    }

    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.fields.elementsEqual(rhs.fields) { $0.name == $1.name && $0.value == $1.value }
    }
}

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

extension String {
    /// ASCII case-insensitive equality (header names are ASCII).
    func caseInsensitiveEquals(_ other: String) -> Bool {
        let lhs = utf8, rhs = other.utf8
        guard lhs.count == rhs.count else { return false }
        return zip(lhs, rhs).allSatisfy { a, b in
            a == b || (a | 0x20 == b | 0x20 && (a | 0x20) >= 0x61 && (a | 0x20) <= 0x7A)
        }
    }
}
