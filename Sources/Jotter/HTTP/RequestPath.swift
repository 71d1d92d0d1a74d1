/// The one normalisation of a request's path. `Application` applies it once, before the request policy
/// and the router, so the two always judge the same path (`//history` is `/history` for both).
///
/// Input: the path part of the request-target as the client sent it (still percent-encoded, no query).
/// Output: the path decoded, with empty and `.` segments dropped (`//history`, `/./history` and
/// `/history/` are all `/history`). Refused with `400`: a target that is not a path (`*`,
/// `http://host/…`), a `..` segment (also encoded), an encoded `/` or `\`, a `%` without two hex digits,
/// an encoded control character or NUL, and any byte a path may not carry (space, control, `\`,
/// non-ASCII, … — RFC 3986 §3.3 `pchar`).
public enum RequestPath {
    /// Why a path was refused.
    public enum Refusal: HTTPResponseError, Equatable, Sendable {
        /// Not an origin-form target (RFC 9112 §3.2.1).
        case notAPath
        /// A `..` segment: Jotter has no use for one, and resolving it is where servers go wrong.
        case dotSegment
        /// `%2F` or `%5C`: a separator that the router would not see as one.
        case encodedSeparator
        /// `%` without two hex digits, an encoded control character, or bytes that are not UTF-8.
        case badEscape
        /// A byte that may not appear in a path.
        case badCharacter

        public var status: Int { 400 }
        public var code: String { "bad_path" }
        public var message: String {
            switch self {
            case .notAPath: return "The request target must be a path starting with /."
            case .dotSegment: return "Paths with .. segments are refused."
            case .encodedSeparator: return "Paths with an encoded / or \\ are refused."
            case .badEscape: return "The path has a malformed or forbidden percent-escape."
            case .badCharacter: return "The path contains a character that is not allowed in a URL path."
            }
        }
    }

    /// `request` with its path normalised; nil after calling `refuse` if the path is refused.
    public static func normalized(_ request: HTTPRequest, refuse: (Refusal) -> Void) -> HTTPRequest? {
        switch normalize(request.path) {
        case .success(let path):
            var request = request
            request.path = path
            return request
        case .failure(let refusal):
            refuse(refusal)
            return nil
        }
    }

    /// The refusal for a request's head, judged before its body is read (an `HTTPServer.Admission`): its
    /// path's, or else what `judge` says of the head with its path normalised, as the handler will see it.
    public static func refusal(forHead head: HTTPRequest, judge: (HTTPRequest) -> HTTPResponse?) -> HTTPResponse? {
        switch normalize(head.path) {
        case .success(let path):
            var head = head
            head.path = path
            return judge(head)
        case .failure(let refusal):
            return refusal.response
        }
    }

    /// The canonical form of `raw`, or why it is refused.
    public static func normalize(_ raw: String) -> Result<String, Refusal> {
        if isCanonical(raw) { return .success(raw) }
        let bytes = Array(raw.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return .failure(.notAPath) }
        var segments: [String] = []
        for rawSegment in bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            switch decode(rawSegment) {
            case .failure(let refusal): return .failure(refusal)
            case .success(let segment):
                if segment == "." { continue }
                if segment == ".." { return .failure(.dotSegment) }
                segments.append(segment)
            }
        }
        return .success("/" + segments.joined(separator: "/"))
    }

    private static func decode(_ segment: ArraySlice<UInt8>) -> Result<String, Refusal> {
        var decoded: [UInt8] = []
        decoded.reserveCapacity(segment.count)
        var index = segment.startIndex
        while index < segment.endIndex {
            let byte = segment[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < segment.endIndex, let high = segment[index + 1].hexDigitValue,
                      let low = segment[index + 2].hexDigitValue else {
                    return .failure(.badEscape)
                }
                let value = high << 4 | low
                if value == UInt8(ascii: "/") || value == UInt8(ascii: "\\") { return .failure(.encodedSeparator) }
                if value < 0x20 || value == 0x7F { return .failure(.badEscape) }
                decoded.append(value)
                index += 3
                continue
            }
            guard isPathCharacter(byte) else { return .failure(.badCharacter) }
            decoded.append(byte)
            index += 1
        }
        guard let text = String(validating: decoded, as: UTF8.self) else { return .failure(.badEscape) }
        return .success(text)
    }

    /// RFC 3986 `pchar` without `%`: unreserved, sub-delims, `:` and `@`.
    static func isPathCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
             UInt8(ascii: "~"), UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","),
             UInt8(ascii: ";"), UInt8(ascii: "="), UInt8(ascii: ":"), UInt8(ascii: "@"):
            return true
        default:
            return false
        }
    }

    /// Already canonical: starts with `/`, no escape, no empty, `.` or `..` segment, only path characters.
    /// Every request from the page and from curl looks like this; one pass, no allocation.
    private static func isCanonical(_ raw: String) -> Bool {
        let bytes = raw.utf8
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        var length = 0, dots = 0
        for byte in bytes.dropFirst() {
            if byte == UInt8(ascii: "/") {
                if length == 0 || (dots == length && length <= 2) { return false }
                length = 0
                dots = 0
            } else {
                guard isPathCharacter(byte) else { return false }
                length += 1
                if byte == UInt8(ascii: ".") { dots += 1 }
            }
        }
        return length > 0 && !(dots == length && length <= 2)
    }

}
