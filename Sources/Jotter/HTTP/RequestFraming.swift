import CMicroHTTPD

/// What the HTTP layer refuses about a request's head before it reads a byte of the body: framing that
/// two HTTP implementations could read differently (request smuggling), and transfer codings Jotter
/// cannot decode. libmicrohttpd 0.9.75 accepts all of these (it reads folded lines and NUL bytes
/// silently, and waits forever on an unknown coding); its own refusals are listed in README "Security".
enum RequestFraming {
    /// Where libmicrohttpd left one header field in its read buffer.
    struct FieldSpan: Equatable, Sendable {
        var name: UInt
        var nameLength: Int
        var value: UInt
        var valueLength: Int
    }

    /// A request head as libmicrohttpd parsed it, with what the adapter saw in the raw bytes.
    struct Head: Sendable {
        var method = "GET"
        var version = "HTTP/1.1"
        var headers = HTTPHeaders()
        /// A header name that is not a token (whitespace before the colon, a folded line glued to it).
        var malformedName = false
        /// A header value with a control character other than tab (bare CR, …).
        var malformedValue = false
        /// The header lines lie where libmicrohttpd 0.9.75 leaves intact ones (see `layoutIsIntact`).
        var layoutIntact = true
        /// The request-target has no NUL byte.
        var targetIntact = true
    }

    /// The refusal for `head`, or nil when its framing is unambiguous.
    static func refusal(_ head: Head, maxBodyBytes: Int) -> HTTPResponse? {
        if !head.targetIntact { return badRequest("The request line contains a NUL byte.") }
        if !head.layoutIntact { return badRequest("Folded header lines and NUL bytes in headers are refused.") }
        if head.malformedName {
            return badRequest("A header name is malformed (no whitespace is allowed before the colon).")
        }
        if head.malformedValue { return badRequest("A header value contains a control character.") }
        // One pass over the fields (this runs for every request): the Host, Content-Length and
        // Transfer-Encoding values, and how many of each there were.
        var host: String?, length: String?, encoding: String?
        var hostCount = 0, lengthCount = 0, encodingCount = 0
        for field in head.headers.fields {
            if field.name.caseInsensitiveEquals("Host") {
                hostCount += 1
                host = host ?? field.value
            } else if field.name.caseInsensitiveEquals("Content-Length") {
                lengthCount += 1
                length = length ?? field.value
            } else if field.name.caseInsensitiveEquals("Transfer-Encoding") {
                encodingCount += 1
                encoding = encoding ?? field.value
            }
        }
        if hostCount != 1 { return badRequest("A request needs exactly one Host header.") }
        if let host, !isValidHost(host) { return badRequest("The Host header is malformed.") }
        if lengthCount > 1 { return badRequest("More than one Content-Length header.") }
        if encodingCount > 1 { return badRequest("More than one Transfer-Encoding header.") }
        if lengthCount > 0 && encodingCount > 0 {
            return badRequest("Content-Length together with Transfer-Encoding.")
        }
        if let encoding, let refusal = transferCodingRefusal(encoding, version: head.version) {
            return refusal
        }
        if let length {
            guard !length.isEmpty, length.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                return badRequest("Content-Length is not a number.")
            }
            // Digits beyond Int's range are a length beyond any cap, not a malformed one.
            guard let value = Int(length), value <= maxBodyBytes else { return tooLarge(maxBodyBytes) }
        }
        // No GET or HEAD here takes a body. Refused before any of the memory bodies share is set aside for
        // one: a device that is not paired may GET the page, and with a body it could hold that memory.
        if head.method == "GET" || head.method == "HEAD", encoding != nil || (length.flatMap { Int($0) } ?? 0) > 0 {
            return badRequest("A GET or HEAD request has no body.")
        }
        return nil
    }

    /// Only `chunked` is decoded; any other coding is `501`, a malformed list `400` (RFC 9112 §6.1, §6.3).
    private static func transferCodingRefusal(_ value: String, version: String) -> HTTPResponse? {
        if version == "HTTP/1.0" { return badRequest("Transfer-Encoding is not allowed in an HTTP/1.0 request.") }
        // Compared in ASCII, as libmicrohttpd does: Unicode folding would read `chun\u{212A}ed` (a Kelvin
        // sign) as chunked, where libmicrohttpd sees no coding at all and reads the body as the next request.
        let codings = value.split(separator: ",", omittingEmptySubsequences: false)
            .map { String(String($0).trimmingASCIISpaces()) }
        if codings.contains(where: { !$0.isEmpty && !$0.caseInsensitiveEquals("chunked") }) {
            return Router.finish(.error(501, code: "not_implemented",
                                        message: "Only the chunked transfer coding is supported."))
        }
        // libmicrohttpd decodes chunked only when the value is that word and nothing else: it keeps trailing
        // spaces and tabs, and reads an empty value or `chunked ` as no coding at all, taking the rest of the
        // connection for the body (no answer, and a request pipelined behind it swallowed). `value` is the
        // value as it stores and compares it.
        if codings.count != 1 || !value.caseInsensitiveEquals("chunked") {
            return badRequest("Transfer-Encoding must be exactly chunked.")
        }
        return nil
    }

    static func badRequest(_ message: String) -> HTTPResponse {
        Router.finish(.error(400, code: "bad_request", message: message))
    }

    static func tooLarge(_ limit: Int) -> HTTPResponse {
        Router.finish(.error(413, code: "too_large",
                             message: "The request body is larger than the server accepts (\(limit) bytes)."))
    }

    /// RFC 9110 `token`: what a header name must be.
    static func isToken(_ bytes: UnsafeRawBufferPointer) -> Bool {
        !bytes.isEmpty && bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"), UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"),
                 UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "^"),
                 UInt8(ascii: "`"), UInt8(ascii: "|"):
                return true
            default:
                return false
            }
        }
    }

    /// RFC 9110 `field-value`: visible characters, space, tab and obs-text; no other control character.
    static func isFieldValue(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }
    }

    /// RFC 9110 §7.2 `uri-host [":" port]`: an IP literal in brackets or a reg-name, and a port of digits
    /// only (`+80`, ` 80` and `80x` are malformed). Whether the name is one Jotter answers to is
    /// `RequestPolicy`'s question.
    static func isValidHost(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { isValidHost(bytes: $0) }  // the string's own bytes, not a copy
    }

    private static func isValidHost(bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var rest = bytes[...]
        if rest.first == UInt8(ascii: "[") {
            guard let close = rest.firstIndex(of: UInt8(ascii: "]")) else { return false }
            let literal = rest[(rest.startIndex + 1)..<close]
            let isLiteral = { (byte: UInt8) in
                byte.hexDigitValue != nil || byte == UInt8(ascii: ":") || byte == UInt8(ascii: ".")
            }
            guard !literal.isEmpty, literal.allSatisfy(isLiteral) else { return false }
            rest = rest[(close + 1)...]
        } else {
            let end = rest.firstIndex(of: UInt8(ascii: ":")) ?? rest.endIndex
            guard rest[..<end].allSatisfy(isRegNameCharacter) else { return false }
            rest = rest[end...]
        }
        if rest.isEmpty { return true }
        guard rest.first == UInt8(ascii: ":") else { return false }
        return rest.dropFirst().allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    /// RFC 3986 reg-name: unreserved, pct-encoded (its `%`), sub-delims.
    private static func isRegNameCharacter(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "%") || (RequestPath.isPathCharacter(byte) && byte != UInt8(ascii: ":")
                                      && byte != UInt8(ascii: "@"))
    }

    /// Whether libmicrohttpd 0.9.75 left every header line in place, as it does for well-formed ones.
    ///
    /// It parses in its read buffer: each line's CR LF (or bare LF) becomes NULs, the colon a NUL, and
    /// name and value are pointers into the line, so consecutive fields sit one line ending apart. Two
    /// things break that, and nothing else: a folded line (obs-fold), which 0.9.75 glues to the *name*
    /// in a fresh allocation elsewhere (`X: a` + ` b` becomes `Xb: a`), and a NUL byte inside a value,
    /// which ends the C string early and hides the rest of the line. Only addresses are compared; no
    /// memory is read. `requestLineEnd` is the address just past the HTTP version, `headerEnd` the first
    /// byte after the blank line.
    static func layoutIsIntact(requestLineEnd: UInt, fields: [FieldSpan], headerEnd: UInt) -> Bool {
        var lineEnd = requestLineEnd
        for field in fields {
            guard field.name > lineEnd, field.name - lineEnd <= 2 else { return false }
            let nameEnd = field.name + UInt(field.nameLength)
            guard field.value > nameEnd else { return false }
            lineEnd = field.value + UInt(field.valueLength)
        }
        guard headerEnd > lineEnd else { return false }
        return (2...4).contains(headerEnd - lineEnd)
    }

    /// Whether this libmicrohttpd lays headers out as `layoutIsIntact` expects: verified for 0.9.75, the
    /// version Debian 12 ships. Another version may place them differently, so the check is off there.
    static let checksLayout: Bool = {
        guard let version = MHD_get_version() else { return false }
        return String(cString: version) == "0.9.75"
    }()
}
