/// A JSON value (RFC 8259), read by Jotter's own small parser: the few JSON bodies Jotter accepts
/// (a memo, a rating, a pairing) are read by code the fuzzers can see into, and read strictly — a
/// key that appears twice in one object is refused rather than resolved one way or another.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// A number, as written (its grammar checked); `double` and `integer` read it.
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in document order; keys are unique.
    case object([(key: String, value: JSONValue)])

    /// Why bytes are not one JSON value.
    public enum ParseError: Error, Sendable, Equatable {
        case malformed(offset: Int)
        case duplicateKey(String)
        case tooDeep
    }

    /// Nesting deeper than this is refused (no input of Jotter's needs more than 2).
    public static let maximumDepth = 64

    /// Parses `bytes` as exactly one JSON value (surrounding whitespace allowed).
    public static func parse(_ bytes: some Collection<UInt8>) throws(ParseError) -> JSONValue {
        var parser = Parser(bytes: Array(bytes))
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == parser.bytes.count else { throw .malformed(offset: parser.index) }
        return value
    }

    /// The member `key` of an object (nil for other values or a missing key).
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first(where: { $0.key == key })?.value
    }

    /// The keys of an object, in order.
    public var keys: [String] {
        guard case .object(let members) = self else { return [] }
        return members.map(\.key)
    }

    /// The string, if this is one.
    public var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The number as an integer, if it is one written without fraction or exponent and fits.
    public var integer: Int? {
        guard case .number(let text) = self, !text.contains(where: { ".eE".contains($0) }) else { return nil }
        return Int(text)
    }

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.number(let a), .number(let b)): return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: return false
        }
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        mutating func skipWhitespace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        private var malformed: ParseError { .malformed(offset: index) }

        mutating func value(depth: Int) throws(ParseError) -> JSONValue {
            guard depth < JSONValue.maximumDepth else { throw .tooDeep }
            guard index < bytes.count else { throw malformed }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            default: return .number(try number())
            }
        }

        private mutating func literal(_ word: String) throws(ParseError) {
            let expected = Array(word.utf8)
            guard bytes.count - index >= expected.count,
                  bytes[index..<(index + expected.count)].elementsEqual(expected) else { throw malformed }
            index += expected.count
        }

        private mutating func object(depth: Int) throws(ParseError) -> JSONValue {
            index += 1
            var members: [(key: String, value: JSONValue)] = []
            var seen = Set<String>()
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw malformed }
                let key = try string()
                guard seen.insert(key).inserted else { throw .duplicateKey(key) }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw malformed }
                index += 1
                skipWhitespace()
                members.append((key, try value(depth: depth + 1)))
                skipWhitespace()
                guard index < bytes.count else { throw malformed }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                guard bytes[index] == UInt8(ascii: "}") else { throw malformed }
                index += 1
                return .object(members)
            }
        }

        private mutating func array(depth: Int) throws(ParseError) -> JSONValue {
            index += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipWhitespace()
                elements.append(try value(depth: depth + 1))
                skipWhitespace()
                guard index < bytes.count else { throw malformed }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                guard bytes[index] == UInt8(ascii: "]") else { throw malformed }
                index += 1
                return .array(elements)
            }
        }

        /// A string at `index` (its opening quote): escapes decoded, UTF-8 validated, control
        /// characters refused, `\u` surrogates paired (a lone one is refused).
        private mutating func string() throws(ParseError) -> String {
            index += 1
            var out: [UInt8] = []
            while true {
                guard index < bytes.count else { throw malformed }
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let text = String(validating: out, as: UTF8.self) else { throw malformed }
                    return text
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw malformed }
                    let escape = bytes[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"),
                                  bytes[index + 1] == UInt8(ascii: "u") else { throw malformed }
                            index += 2
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw malformed }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw malformed
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw malformed }
                        out.append(contentsOf: Array(String(Character(unicode)).utf8))
                    default:
                        throw malformed
                    }
                default:
                    guard byte >= 0x20 else { throw malformed }
                    out.append(byte)
                    index += 1
                }
            }
        }

        private mutating func hex4() throws(ParseError) -> UInt32 {
            guard bytes.count - index >= 4 else { throw malformed }
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let digit = bytes[index].hexDigitValue else { throw malformed }
                value = value << 4 | UInt32(digit)
                index += 1
            }
            return value
        }

        /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
        private mutating func number() throws(ParseError) -> String {
            let start = index
            func digits(_ parser: inout Parser) -> Int {
                let begin = parser.index
                while parser.index < parser.bytes.count, (0x30...0x39).contains(parser.bytes[parser.index]) {
                    parser.index += 1
                }
                return parser.index - begin
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count else { throw malformed }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
            } else {
                guard digits(&self) > 0 else { throw malformed }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard digits(&self) > 0 else { throw malformed }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                    index += 1
                }
                guard digits(&self) > 0 else { throw malformed }
            }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }
    }
}
