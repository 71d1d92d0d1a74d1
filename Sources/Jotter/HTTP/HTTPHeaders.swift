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
