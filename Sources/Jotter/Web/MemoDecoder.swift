/// Turns a request body into a memo's subject and body, for every form `POST /send` accepts.
public enum MemoDecoder {
    /// The decoded memo: `subject` is nil when the client gave none.
    public struct Memo: Equatable, Sendable {
        /// The subject the client gave (nil when none, or blank).
        public var subject: String?
        /// The memo's text, line breaks normalised to LF.
        public var body: String
    }

    /// Decodes `body` according to `contentType` (a missing type is read as plain text).
    public static func decode(contentType: String?, body: [UInt8]) throws(MemoDecodingError) -> Memo {
        let media = MediaType(contentType ?? "text/plain")
        let memo: Memo
        switch media.type {
        case "text/plain":
            guard ["utf-8", "us-ascii", "utf8"].contains(media.parameters["charset"]?.lowercased() ?? "utf-8") else {
                throw .unsupportedCharset
            }
            memo = Memo(subject: nil, body: try text(body))
        case "application/x-www-form-urlencoded":
            memo = try urlEncoded(body)
        case "application/json":
            memo = try json(body)
        case "multipart/form-data":
            guard let boundary = media.parameters["boundary"], !boundary.isEmpty, boundary.utf8.count <= 200 else {
                throw .undecodable("multipart/form-data needs a boundary parameter.")
            }
            memo = try multipart(body, boundary: Array(boundary.utf8))
        default:
            throw .unsupportedMediaType
        }
        // A blank subject is no subject: the plain form always sends `subject=`.
        let subject = memo.subject.map(dropByteOrderMark).flatMap { isBlank($0) ? nil : normalizeLineBreaks($0) }
        let normalized = Memo(subject: subject, body: normalizeLineBreaks(dropByteOrderMark(memo.body)))
        if isBlank(normalized.body) && isBlank(normalized.subject ?? "") {
            throw .empty
        }
        return normalized
    }

    static func text(_ bytes: some Collection<UInt8>) throws(MemoDecodingError) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .undecodable("The memo is not valid UTF-8.")
        }
        return text
    }

    /// A leading U+FEFF (what some editors and Windows tools put first) is not part of the memo.
    private static func dropByteOrderMark(_ text: String) -> String {
        text.unicodeScalars.first == "\u{FEFF}" ? String(text.unicodeScalars.dropFirst()) : text
    }

    /// Nothing a reader could see (`Unicode.Scalar.isInvisible`): such a subject is no subject, and such
    /// a memo with no subject is empty, not a blank email.
    private static func isBlank(_ text: String) -> Bool {
        text.unicodeScalars.allSatisfy(\.isInvisible)
    }

    /// CRLF and lone CR become LF: one memo, one representation, whichever client sent it.
    private static func normalizeLineBreaks(_ text: String) -> String {
        // Over the contiguous bytes: the generic search through `String.UTF8View` cost 28 instructions a
        // byte, a quarter of the Swift code's work for a 300-byte memo.
        var text = text
        guard text.withUTF8({ $0.contains(13) }) else { return text }
        return text.replacingLiterally("\r\n", with: "\n").replacingLiterally("\r", with: "\n")
    }

    // MARK: application/x-www-form-urlencoded

    /// Fields `body` and `subject`; when neither is present, or the body is not a form at all, the raw
    /// body is the memo, so `curl -d "buy milk"` (which sends this type) means what it says. A form is
    /// `name=value` pairs whose names are words (letters, digits, `_`, `-`, `.`): `curl -d "body=milk &
    /// eggs"` has a piece ` eggs` that is no pair (its `&` was meant as text), and `mailto:a@b?subject=Hi&
    /// body=Hello` a name no form has. Read as a form, each lost what followed the `&` — with a 204.
    static func urlEncoded(_ bytes: [UInt8]) throws(MemoDecodingError) -> Memo {
        let pairs = bytes.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true)
        let isForm = pairs.allSatisfy { pair in
            guard let equals = pair.firstIndex(of: UInt8(ascii: "=")), equals > pair.startIndex else { return false }
            return pair[..<equals].allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                    || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                    || byte == UInt8(ascii: "%") || byte == UInt8(ascii: "+")
            }
        }
        guard isForm else { return Memo(subject: nil, body: try text(bytes)) }
        var body: String?
        var subject: String?
        for pair in pairs {
            guard let equals = pair.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let name = percentDecoded(pair[pair.startIndex..<equals])
            guard name == Array("body".utf8) || name == Array("subject".utf8) else { continue }
            guard let value = percentDecoded(pair[(equals + 1)...]) else {
                throw .undecodable("A form field is not correctly percent-encoded.")
            }
            if name == Array("body".utf8) {
                guard body == nil else { throw .repeatedField("body") }
                body = try text(value)
            } else {
                guard subject == nil else { throw .repeatedField("subject") }
                subject = try text(value)
            }
        }
        if body == nil && subject == nil {
            return Memo(subject: nil, body: try text(bytes))
        }
        return Memo(subject: subject, body: body ?? "")
    }

    /// `+` is a space and `%XX` a byte; nil for a malformed escape.
    static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "+") {
                out.append(0x20)
            } else if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex,
                      let high = bytes[index + 1].hexDigitValue, let low = bytes[index + 2].hexDigitValue else { return nil }
                out.append(high << 4 | low)
                index += 2
            } else {
                out.append(byte)
            }
            index += 1
        }
        return out
    }


    // MARK: application/json

    /// `{"body": "…", "subject": "…"}`: both optional strings (or null); other members are ignored,
    /// a member given twice is refused.
    static func json(_ bytes: [UInt8]) throws(MemoDecodingError) -> Memo {
        let shape = MemoDecodingError.undecodable("The body is not a JSON object with string fields \"body\" and \"subject\".")
        let value: JSONValue
        do {
            // A byte order mark before the JSON (Windows Notepad's UTF-8) is no part of it (RFC 8259 §8.1
            // lets a parser ignore it): a text/plain memo's is dropped, and so is this one.
            value = try JSONValue.parse(bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(bytes.dropFirst(3)) : bytes)
        } catch .duplicateKey(let key) {
            throw key == "body" || key == "subject" ? .repeatedField(key) : shape
        } catch {
            throw shape
        }
        guard case .object = value else { throw shape }
        func field(_ name: String) throws(MemoDecodingError) -> String? {
            switch value[name] {
            case nil, .null?: return nil
            case .string(let text)?: return text
            default: throw shape
            }
        }
        return Memo(subject: try field("subject"), body: try field("body") ?? "")
    }

    // MARK: multipart/form-data (RFC 7578)

    /// Parts named `body` and `subject` (a part may be a file upload); other parts are ignored.
    static func multipart(_ bytes: [UInt8], boundary: [UInt8]) throws(MemoDecodingError) -> Memo {
        let malformed = MemoDecodingError.undecodable("The multipart body is malformed.")
        let delimiter = Array("--".utf8) + boundary
        guard var cursor = find(delimiter, in: bytes, from: 0) else { throw malformed }
        var body: String?
        var subject: String?
        while true {
            cursor += delimiter.count
            if bytes[cursor...].starts(with: Array("--".utf8)) { break }  // close delimiter
            // Skip transport padding and the CRLF after the delimiter.
            while cursor < bytes.count && (bytes[cursor] == 0x20 || bytes[cursor] == 0x09) { cursor += 1 }
            guard bytes[cursor...].starts(with: [13, 10]) else { throw malformed }
            cursor += 2
            guard let headerEnd = find([13, 10, 13, 10], in: bytes, from: cursor) else { throw malformed }
            let headers = try text(bytes[cursor..<headerEnd])
            let contentStart = headerEnd + 4
            guard let next = find([13, 10] + delimiter, in: bytes, from: contentStart) else { throw malformed }
            let content = bytes[contentStart..<next]
            let name = header("Content-Disposition", in: headers).flatMap { MediaType($0).parameters["name"] }
            // RFC 7578 deprecates the header, but a client that sends one (base64, quoted-printable) means
            // the text is encoded: stored as it came, the memo would be its encoding.
            if name == "body" || name == "subject",
               let encoding = header("Content-Transfer-Encoding", in: headers)?.trimmingASCIISpaces(),
               !["7bit", "8bit", "binary"].contains(where: { String(encoding).caseInsensitiveEquals($0) }) {
                throw .undecodable("A part's Content-Transfer-Encoding is not decoded here: send its text as it is.")
            }
            switch name {
            case "body":
                guard body == nil else { throw .repeatedField("body") }
                body = try text(content)
            case "subject":
                guard subject == nil else { throw .repeatedField("subject") }
                subject = try text(content)
            default: break
            }
            cursor = next + 2
        }
        guard body != nil || subject != nil else {
            throw .undecodable("The multipart body has no \"body\" field.")
        }
        return Memo(subject: subject, body: body ?? "")
    }

    /// The value of a part's header `name` (the first, if repeated).
    private static func header(_ name: String, in headers: String) -> String? {
        for line in headers.split(separator: "\r\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, String(parts[0]).caseInsensitiveEquals(name) else { continue }
            return String(parts[1])
        }
        return nil
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, haystack.count >= needle.count, start <= haystack.count - needle.count else {
            return nil
        }
        let first = needle[0]
        var index = start
        let last = haystack.count - needle.count
        while index <= last {
            if haystack[index] == first && haystack[index..<(index + needle.count)].elementsEqual(needle) {
                return index
            }
            index += 1
        }
        return nil
    }
}
