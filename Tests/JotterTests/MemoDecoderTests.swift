import Testing
@testable import Jotter

/// Every body form `POST /send` accepts, and every way a body can fail to be a memo.
@Suite struct MemoDecoderTests {
    // MARK: Helpers

    private static func decode(_ contentType: String?, _ body: String) throws(MemoDecodingError) -> MemoDecoder.Memo {
        try MemoDecoder.decode(contentType: contentType, body: Array(body.utf8))
    }

    /// The error `decode` throws, or nil when it decodes.
    private static func failure(_ contentType: String?, _ body: [UInt8]) -> MemoDecodingError? {
        do {
            _ = try MemoDecoder.decode(contentType: contentType, body: body)
            return nil
        } catch {
            return error
        }
    }

    private static func failure(_ contentType: String?, _ body: String) -> MemoDecodingError? {
        failure(contentType, Array(body.utf8))
    }

    /// A `multipart/form-data` body as curl `-F` builds it: CRLF everywhere, `--boundary--` at the end.
    private static func multipart(boundary: String, parts: [(headers: [String], content: String)]) -> String {
        var text = ""
        for part in parts {
            text += "--\(boundary)\r\n"
            for header in part.headers { text += header + "\r\n" }
            text += "\r\n" + part.content + "\r\n"
        }
        return text + "--\(boundary)--\r\n"
    }

    private static let curlBoundary = "------------------------d74496d66958873e"
    private static let curlType = "multipart/form-data; boundary=\(curlBoundary)"

    private static func field(_ name: String, _ value: String) -> (headers: [String], content: String) {
        (["Content-Disposition: form-data; name=\"\(name)\""], value)
    }

    // MARK: text/plain

    @Test(arguments: ["text/plain", "text/plain; charset=utf-8", "text/plain;charset=UTF-8",
                      "TEXT/PLAIN; Charset=\"utf-8\"", "text/plain; charset=us-ascii"])
    func plainTextIsTheBody(contentType: String) throws {
        let memo = try Self.decode(contentType, "buy milk\nand eggs")
        #expect(memo == MemoDecoder.Memo(subject: nil, body: "buy milk\nand eggs"))
    }

    /// A JSON memo saved by Windows Notepad starts with a UTF-8 byte order mark: taken, as a text/plain
    /// memo's is (it was refused as undecodable).
    @Test func aByteOrderMarkBeforeJSONIsNoPartOfIt() throws {
        let memo = try MemoDecoder.decode(contentType: "application/json",
                                          body: [0xEF, 0xBB, 0xBF] + Array(#"{"subject":"from notepad","body":"hello"}"#.utf8))
        #expect(memo.subject == "from notepad" && memo.body == "hello")
        #expect(throws: MemoDecodingError.self) {
            _ = try MemoDecoder.decode(contentType: "application/json", body: [0xEF, 0xBB] + Array(#"{"body":"x"}"#.utf8))
        }
    }

    @Test func missingContentTypeIsPlainText() throws {
        let memo = try Self.decode(nil, "call Sam at 5")
        #expect(memo == MemoDecoder.Memo(subject: nil, body: "call Sam at 5"))
    }

    @Test func plainTextKeepsUnicodeAndFormCharactersVerbatim() throws {
        let text = "件名なし 👩‍💻 🇯🇵 مرحبا body=x&subject=y 100% a+b"
        let memo = try Self.decode("text/plain; charset=utf-8", text)
        #expect(memo == MemoDecoder.Memo(subject: nil, body: text))
    }

    @Test func crlfAndLoneCRBecomeLF() throws {
        let memo = try Self.decode("text/plain", "one\r\ntwo\rthree\nfour\r\n")
        #expect(memo.body == "one\ntwo\nthree\nfour\n")
        #expect(!memo.body.utf8.contains(13))
    }

    // MARK: application/x-www-form-urlencoded

    @Test func formFieldsBodyAndSubject() throws {
        let memo = try Self.decode("application/x-www-form-urlencoded",
                                   "subject=Groceries%21&body=buy+milk%0D%0Aand+%E2%9C%93+eggs+50%25")
        #expect(memo == MemoDecoder.Memo(subject: "Groceries!", body: "buy milk\nand ✓ eggs 50%"))
    }

    @Test func formFieldsInAnyOrderWithUnknownFieldsIgnored() throws {
        let memo = try Self.decode("application/x-www-form-urlencoded; charset=UTF-8",
                                   "x=1&body=%E4%BB%B6%E5%90%8D&&lang=ja&subject=a%2Bb%3Dc")
        #expect(memo == MemoDecoder.Memo(subject: "a+b=c", body: "件名"))
    }

    @Test func formWithOnlyBodyHasNoSubject() throws {
        let memo = try Self.decode("application/x-www-form-urlencoded", "body=hello")
        #expect(memo == MemoDecoder.Memo(subject: nil, body: "hello"))
    }

    @Test func formWithOnlySubjectHasAnEmptyBody() throws {
        let memo = try Self.decode("application/x-www-form-urlencoded", "subject=just+a+title")
        #expect(memo == MemoDecoder.Memo(subject: "just a title", body: ""))
    }

    /// `curl -d "buy milk"` sends this type with no fields: the raw text is the memo, not decoded.
    @Test(arguments: ["buy milk", "50% off", "a+b=c", "x=1", "discount=50%", "x=%zz", "日本語のメモ"])
    func formWithoutKnownFieldsIsTheRawMemo(raw: String) throws {
        let memo = try Self.decode("application/x-www-form-urlencoded", raw)
        #expect(memo == MemoDecoder.Memo(subject: nil, body: raw))
    }

    /// Text that only looks like a form somewhere (an `&` meant as text, a URL with `?subject=…&body=…`)
    /// is the memo as sent: read as a form, what followed the `&` was dropped, and the server said 204.
    @Test(arguments: ["subject=Groceries&body=milk & eggs", "mailto:bob@example.com?subject=Hi&body=Hello there",
                      "body=tea&biscuits", "note: body=x", "body=a&b c=d", "=x&body=y"])
    func textThatOnlyLooksLikeAFormIsTheRawMemo(raw: String) throws {
        let memo = try Self.decode("application/x-www-form-urlencoded", raw)
        #expect(memo == MemoDecoder.Memo(subject: nil, body: raw))
    }

    @Test func formFieldLineBreaksBecomeLF() throws {
        let memo = try Self.decode("application/x-www-form-urlencoded", "subject=a%0Db&body=one%0D%0Atwo%0Dthree")
        #expect(memo == MemoDecoder.Memo(subject: "a\nb", body: "one\ntwo\nthree"))
    }

    // MARK: application/json

    @Test func jsonBodyAndSubject() throws {
        let memo = try Self.decode("application/json",
                                   #"{"subject": "Idea \ud83d\udca1", "body": "line 1\r\nline 2", "extra": [1, 2]}"#)
        #expect(memo == MemoDecoder.Memo(subject: "Idea 💡", body: "line 1\nline 2"))
    }

    @Test func jsonBodyOnly() throws {
        let memo = try Self.decode("application/json; charset=utf-8", #"{"body":"مرحبا بالعالم"}"#)
        #expect(memo == MemoDecoder.Memo(subject: nil, body: "مرحبا بالعالم"))
    }

    @Test func jsonSubjectOnly() throws {
        let memo = try Self.decode("application/json", #"{"subject":"title only"}"#)
        #expect(memo == MemoDecoder.Memo(subject: "title only", body: ""))
    }

    // MARK: multipart/form-data

    @Test func multipartAsCurlBuildsIt() throws {
        let body = Self.multipart(boundary: Self.curlBoundary, parts: [
            Self.field("subject", "Groceries"),
            Self.field("body", "buy milk"),
        ])
        let memo = try Self.decode(Self.curlType, body)
        #expect(memo == MemoDecoder.Memo(subject: "Groceries", body: "buy milk"))
    }

    /// `curl -F body=@memo.txt` sends the part with a filename and its own Content-Type.
    @Test func multipartFileUploadPart() throws {
        let body = Self.multipart(boundary: Self.curlBoundary, parts: [
            (["Content-Disposition: form-data; name=\"body\"; filename=\"memo.txt\"",
              "Content-Type: text/plain"], "from a file\r\nsecond line"),
        ])
        let memo = try Self.decode(Self.curlType, body)
        #expect(memo == MemoDecoder.Memo(subject: nil, body: "from a file\nsecond line"))
    }

    @Test func multipartPartWithContentTypeAndQuotedBoundary() throws {
        let boundary = "a quoted;boundary"
        let body = Self.multipart(boundary: boundary, parts: [
            (["Content-Disposition: form-data; name=\"subject\"", "Content-Type: text/plain; charset=utf-8"], "件名"),
            (["content-disposition: form-data; name=body"], "本文です"),
        ])
        let memo = try Self.decode("multipart/form-data; boundary=\"\(boundary)\"", body)
        #expect(memo == MemoDecoder.Memo(subject: "件名", body: "本文です"))
    }

    @Test func multipartIgnoresExtraPartsAndPreamble() throws {
        let body = "This is a preamble.\r\n" + Self.multipart(boundary: Self.curlBoundary, parts: [
            Self.field("token", "abc"),
            (["Content-Disposition: form-data; name=\"attachment\"; filename=\"a.bin\"",
              "Content-Type: application/octet-stream"], "\u{1}\u{2}binary"),
            Self.field("body", "the memo"),
            Self.field("lang", "en"),
        ])
        let memo = try Self.decode(Self.curlType, body)
        #expect(memo == MemoDecoder.Memo(subject: nil, body: "the memo"))
    }

    /// A part that says its text is encoded is refused, not stored as its encoding ("aGVsbG8=" for "hello");
    /// one that says it is not (7bit, 8bit, binary: what some clients send anyway) is taken as it is.
    @Test(arguments: ["base64", "Quoted-Printable", " x-uuencode"])
    func multipartEncodedPartIsRefused(encoding: String) {
        let body = Self.multipart(boundary: Self.curlBoundary, parts: [
            (["Content-Disposition: form-data; name=\"body\"", "Content-Transfer-Encoding: \(encoding)"], "aGVsbG8="),
        ])
        let error = Self.failure(Self.curlType, Array(body.utf8))
        #expect(error?.status == 400, "\(String(describing: error))")
    }

    @Test func multipartUnencodedPartIsTaken() throws {
        let body = Self.multipart(boundary: Self.curlBoundary, parts: [
            (["Content-Disposition: form-data; name=\"subject\"", "Content-Transfer-Encoding: 8BIT"], "Grüße"),
            (["Content-Disposition: form-data; name=\"body\"", "content-transfer-encoding: binary"], "as it is"),
            (["Content-Disposition: form-data; name=\"file\"", "Content-Transfer-Encoding: base64"], "aWdub3JlZA=="),
        ])
        #expect(try Self.decode(Self.curlType, body) == MemoDecoder.Memo(subject: "Grüße", body: "as it is"))
    }

    @Test func multipartValueWithCRLFAndDashes() throws {
        let value = "first\r\nsecond\r\n--not-the-boundary\r\n-- \r\nlast"
        let body = Self.multipart(boundary: Self.curlBoundary, parts: [Self.field("body", value)])
        let memo = try Self.decode(Self.curlType, body)
        #expect(memo.body == "first\nsecond\n--not-the-boundary\n-- \nlast")
    }

    // MARK: Errors: empty

    @Test(arguments: [nil, "text/plain", "application/x-www-form-urlencoded"] as [String?])
    func emptyBodyIsEmpty(contentType: String?) {
        let error = Self.failure(contentType, [])
        #expect(error == .empty)
        #expect(error?.status == 400)
        #expect(error?.code == "empty")
    }

    @Test(arguments: [" ", "\n", "\r\n\r\n", " \t \n ", "\u{3000}", "\u{00A0}\u{2028}"])
    func whitespaceOnlyIsEmpty(text: String) {
        #expect(Self.failure("text/plain", text) == .empty)
        #expect(Self.failure(nil, text) == .empty)
    }

    @Test(arguments: ["body=", "body=+++", "body=%20%0A&subject=", "subject=%09&body=%0D%0A"])
    func blankFormFieldsAreEmpty(form: String) {
        let error = Self.failure("application/x-www-form-urlencoded", form)
        #expect(error == .empty)
        #expect(error?.status == 400)
    }

    @Test(arguments: ["{}", #"{"body":""}"#, #"{"subject":"","body":""}"#, #"{"body":"  \n"}"#,
                      #"{"body":null}"#, #"{"other":"x"}"#])
    func jsonWithoutContentIsEmpty(json: String) {
        let error = Self.failure("application/json", json)
        #expect(error == .empty)
        #expect(error?.status == 400)
        #expect(error?.code == "empty")
    }

    /// Control and invisible format characters are nothing to read either: not a blank email.
    @Test(arguments: [#"{"subject":"\u0001"}"#, #"{"subject":"\u0000","body":""}"#, #"{"body":"\u200b\u0007"}"#,
                      #"{"subject":"\ufeff\u200d","body":" \u0000 "}"#])
    func invisibleOnlyIsEmpty(json: String) {
        #expect(Self.failure("application/json", json) == .empty)
    }

    @Test func aSubjectOfControlCharactersIsNoSubject() throws {
        #expect(Self.failure("application/x-www-form-urlencoded", "subject=%01&body=") == .empty)
        let memo = try Self.decode("application/json", #"{"subject":"\u0001\u0002","body":"the text"}"#)
        #expect(memo.subject == nil && memo.body == "the text")
        let kept = try Self.decode("application/json", #"{"body":"\u0000visible"}"#)
        #expect(kept.body == "\u{0}visible", "a memo with something to read keeps its bytes")
        // A visible format character (Arabic end of ayah), or an Arabic word between direction marks, is text.
        #expect(try Self.decode("application/json", #"{"body":"\u06dd"}"#).body == "\u{06DD}")
        #expect(try Self.decode("application/json", #"{"body":"\u200f\u0633\u0644\u0627\u0645\u200f"}"#).body.unicodeScalars.count == 6)
    }

    @Test func multipartWithBlankBodyIsEmpty() {
        let body = Self.multipart(boundary: Self.curlBoundary, parts: [Self.field("body", " \r\n ")])
        #expect(Self.failure(Self.curlType, body) == .empty)
    }

    // MARK: Errors: undecodable (400)

    /// Whatever the code, an empty body with these types is refused with 400.
    @Test(arguments: ["application/json", curlType])
    func emptyStructuredBodyIsRefused(contentType: String) {
        let error = Self.failure(contentType, [])
        #expect(error?.status == 400)
    }

    @Test(arguments: ["{", "not json", #"{"body": "unterminated}"#, "[]", #"["body","x"]"#, #""just a string""#,
                      "42", #"{"body": 42}"#, #"{"body": true}"#, #"{"subject": ["a"], "body": "x"}"#,
                      #"{"body": {"text": "x"}}"#])
    func invalidJSONIsUndecodable(json: String) {
        let error = Self.failure("application/json", json)
        #expect(error?.code == "undecodable")
        #expect(error?.status == 400)
    }

    @Test(arguments: [[0xFF], [0xC3], [0x62, 0x75, 0x79, 0xC0, 0xAF], [0xED, 0xA0, 0x80], Array("ok".utf8) + [0xFE]]
          as [[UInt8]])
    func invalidUTF8PlainTextIsUndecodable(bytes: [UInt8]) {
        for contentType in [nil, "text/plain", "text/plain; charset=utf-8"] as [String?] {
            let error = Self.failure(contentType, bytes)
            #expect(error?.code == "undecodable")
            #expect(error?.status == 400)
        }
    }

    @Test(arguments: ["body=%FF", "body=ok&subject=%C3", "subject=%ED%A0%80"])
    func invalidUTF8FormFieldIsUndecodable(form: String) {
        let error = Self.failure("application/x-www-form-urlencoded", form)
        #expect(error?.code == "undecodable")
        #expect(error?.status == 400)
    }

    @Test func invalidUTF8RawFormIsUndecodable() {
        let error = Self.failure("application/x-www-form-urlencoded", Array("buy ".utf8) + [0xFF])
        #expect(error?.code == "undecodable")
    }

    @Test(arguments: ["body=50%", "body=%zz", "body=%4", "subject=%G1&body=x", "body=100%25+sure%2"])
    func badPercentEscapeInKnownFieldIsUndecodable(form: String) {
        let error = Self.failure("application/x-www-form-urlencoded", form)
        #expect(error?.code == "undecodable")
        #expect(error?.status == 400)
    }

    @Test func invalidJSONUTF8IsUndecodable() {
        let error = Self.failure("application/json", Array(#"{"body":""#.utf8) + [0xFF] + Array(#""}"#.utf8))
        #expect(error?.code == "undecodable")
    }

    @Test(arguments: ["multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; charset=utf-8",
                      "multipart/form-data; boundary=\"\"",
                      "multipart/form-data; boundary=" + String(repeating: "b", count: 201)])
    func multipartWithoutUsableBoundaryIsRefused(contentType: String) {
        let body = Self.multipart(boundary: "b", parts: [Self.field("body", "x")])
        let error = Self.failure(contentType, body)
        #expect(error?.code == "undecodable")
        #expect(error?.status == 400)
    }

    @Test(arguments: [
        "--XYZ",
        "--XYZ\r\n",
        "--XYZ-",
        "--XYZ\r\nContent-Disposition: form-data; name=\"body\"",
        "--XYZ\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\nbuy mi",
        "--XYZ\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\nbuy milk\r\n--XYZ",
        "--XYZ\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\nbuy milk\r\n--XYZ\r\n",
        "--XYZ garbage\r\n",
        "no delimiter at all",
        "--OTHER\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\nx\r\n--OTHER--\r\n",
    ])
    func truncatedOrMalformedMultipartIsUndecodable(body: String) {
        let error = Self.failure("multipart/form-data; boundary=XYZ", body)
        #expect(error?.code == "undecodable")
        #expect(error?.status == 400)
    }

    @Test func multipartWithoutBodyOrSubjectPartIsRefused() {
        let body = Self.multipart(boundary: Self.curlBoundary, parts: [
            Self.field("text", "wrong field name"),
            (["Content-Disposition: form-data; filename=\"memo.txt\""], "no name"),
            (["Content-Type: text/plain"], "no disposition"),
        ])
        let error = Self.failure(Self.curlType, body)
        #expect(error?.code == "undecodable")
        #expect(error?.status == 400)
    }

    @Test func multipartOnlyCloseDelimiterIsRefused() {
        let error = Self.failure(Self.curlType, "--\(Self.curlBoundary)--\r\n")
        #expect(error?.status == 400)
    }

    @Test func multipartInvalidUTF8ValueIsUndecodable() {
        let head = "--XYZ\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\n"
        let bytes = Array(head.utf8) + [0x61, 0xFF, 0x62] + Array("\r\n--XYZ--\r\n".utf8)
        let error = Self.failure("multipart/form-data; boundary=XYZ", bytes)
        #expect(error?.code == "undecodable")
    }

    // MARK: Errors: unsupported media type (415)

    @Test(arguments: ["text/html", "application/xml", "image/png", "application/octet-stream",
                      "text/markdown", "application/jsonx", "multipart/mixed; boundary=x", ""])
    func unsupportedMediaTypes(contentType: String) {
        let error = Self.failure(contentType, "buy milk")
        #expect(error == .unsupportedMediaType)
        #expect(error?.status == 415)
        #expect(error?.code == "unsupported_media_type")
    }

    /// text/plain it is, in a character set not read: said as such, not "send text/plain".
    @Test(arguments: ["text/plain;charset=latin1", "text/plain; charset=ISO-8859-1", "text/plain; charset=utf-16"])
    func unsupportedCharsets(contentType: String) {
        let error = Self.failure(contentType, "buy milk")
        #expect(error == .unsupportedCharset)
        #expect(error?.status == 415 && error?.code == "unsupported_charset")
        #expect(error?.message.contains("UTF-8") == true)
    }

    // MARK: Error messages never quote the body

    @Test func errorMessagesDoNotEchoTheMemo() {
        let secret = "my-secret-password"
        let cases: [(String?, [UInt8])] = [
            ("application/json", Array("{\"body\": \"\(secret)\"".utf8)),
            ("application/x-www-form-urlencoded", Array("body=\(secret)%".utf8)),
            ("text/plain", Array(secret.utf8) + [0xFF]),
            ("multipart/form-data; boundary=XYZ", Array("--XYZ\r\n\(secret)".utf8)),
            ("text/html", Array(secret.utf8)),
        ]
        for (contentType, body) in cases {
            let error = Self.failure(contentType, body)
            #expect(error != nil)
            #expect(error.map { !$0.message.contains(secret) && !$0.message.isEmpty } == true)
        }
    }
}
