import Foundation
import Testing
@testable import Jotter

/// Reads a rendered message back with Python's `email` package (policy `default`), a second and
/// independent reader, and reports what a mail client would show.
private enum Reader {
    struct Parsed {
        var subject: String
        /// The decoded body as Python returns it, with CRLF turned into LF.
        ///
        /// Python keeps the wire form's CRLF line endings in `get_content()`; on the wire every line
        /// ends in CRLF, so the memo's LF line breaks come back as CRLF and are turned back here.
        var body: String
        var messageID: String
        var dateEpochSeconds: Int64
        var from: String
        var to: String
        var contentType: String
        var charset: String?
        var transferEncoding: String
        var defects: [String]
        var bcc: String?
        var subjectCount: Int
        var headerNames: [String]
        /// Each mailbox of From, as (display name, address).
        var fromMailboxes: [[String]]
    }

    static let script = """
        import email, email.policy, email.utils, json, sys
        with open(sys.argv[1], 'rb') as f:
            message = email.message_from_binary_file(f, policy=email.policy.default)
        defects = [type(d).__name__ for d in message.defects]
        for value in message.values():
            defects += [type(d).__name__ for d in getattr(value, 'defects', [])]
        print(json.dumps({
            'subject': str(message['subject']), 'body': message.get_content(),
            'message_id': str(message['message-id']),
            'date': int(email.utils.parsedate_to_datetime(str(message['date'])).timestamp()),
            'from': str(message['from']), 'to': str(message['to']),
            'content_type': message.get_content_type(), 'charset': message.get_content_charset(),
            'cte': str(message['content-transfer-encoding']),
            'defects': defects, 'bcc': None if message['bcc'] is None else str(message['bcc']),
            'subject_count': len(message.get_all('subject') or []),
            'header_names': list(message.keys()),
            'from_mailboxes': [[a.display_name, a.addr_spec] for a in message['from'].addresses],
        }))
        """

    static func parse(_ bytes: [UInt8]) throws -> Parsed {
        let directory = TemporaryDirectory()
        let path = directory.file("message.eml")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let output = try Python.run(script, arguments: [path])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
        return Parsed(
            subject: try #require(object["subject"] as? String),
            body: try #require(object["body"] as? String).replacingOccurrences(of: "\r\n", with: "\n"),
            messageID: try #require(object["message_id"] as? String),
            dateEpochSeconds: Int64(try #require(object["date"] as? Int)),
            from: try #require(object["from"] as? String),
            to: try #require(object["to"] as? String),
            contentType: try #require(object["content_type"] as? String),
            charset: object["charset"] as? String,
            transferEncoding: try #require(object["cte"] as? String),
            defects: try #require(object["defects"] as? [String]),
            bcc: object["bcc"] as? String,
            subjectCount: try #require(object["subject_count"] as? Int),
            headerNames: try #require(object["header_names"] as? [String]),
            fromMailboxes: try #require(object["from_mailboxes"] as? [[String]]))
    }
}

/// Shared fixtures and checks.
private enum Mail {
    static let date: Int64 = 1_764_581_405_123  // 2025-12-01T09:30:05.123Z
    static let id = "0b7f7c4e-3f1a-4c55-9d0e-5b1d2b0c9a11"

    static func message(subject: String, body: String, attempt: Int = 1) -> MailMessage {
        MailMessage(id: id, date: date, from: MailAddress(name: "Jotter", address: "jotter@example.org"),
                    to: MailAddress(address: "me@example.net"), subject: subject, body: body, attempt: attempt)
    }

    /// The body text a reader gets for `memo`, with the final line terminator the wire form adds
    /// removed: `get_content()` of a text part ends with a newline when the last line was terminated.
    /// (Only for memos that do not themselves end with a line break; see `everyEncodingTerminatesTheLastLine`.)
    static func memoText(_ parsed: Reader.Parsed) -> String {
        parsed.body.hasSuffix("\n") ? String(parsed.body.dropLast()) : parsed.body
    }

    /// The lines of `bytes` split at CRLF (the final empty piece after the last CRLF dropped).
    static func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while index + 1 < bytes.count {
            if bytes[index] == 13 && bytes[index + 1] == 10 {
                lines.append(bytes[start..<index])
                index += 2
                start = index
            } else {
                index += 1
            }
        }
        if start < bytes.count { lines.append(bytes[start...]) }
        return lines
    }

    static func headerLines(_ bytes: [UInt8]) -> [String] {
        lines(bytes).prefix(while: { !$0.isEmpty }).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The unfolded value of header `name`.
    static func header(_ name: String, in bytes: [UInt8]) -> String? {
        var value: String?
        for line in headerLines(bytes) {
            if line.hasPrefix(" ") || line.hasPrefix("\t") {
                if value != nil { value! += line }
            } else if value != nil {
                break
            } else if line.lowercased().hasPrefix(name.lowercased() + ":") {
                value = String(line.dropFirst(name.count + 1))
            }
        }
        return value
    }

    /// 7-bit only, CRLF only, lines ≤ 998 octets, header lines ≤ `headerLimit`, the expected headers once each.
    static func expectWellFormed(_ bytes: [UInt8], headerLimit: Int = 78,
                                 sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(bytes.allSatisfy { $0 < 0x80 }, "raw 8-bit byte in the message", sourceLocation: sourceLocation)
        var bareLineBreaks = 0
        for (index, byte) in bytes.enumerated() {
            if byte == 10 && (index == 0 || bytes[index - 1] != 13) { bareLineBreaks += 1 }
            if byte == 13 && (index + 1 == bytes.count || bytes[index + 1] != 10) { bareLineBreaks += 1 }
        }
        #expect(bareLineBreaks == 0, "bare CR or LF", sourceLocation: sourceLocation)
        #expect(bytes.suffix(2) == [13, 10], sourceLocation: sourceLocation)
        let all = lines(bytes)
        let longest = all.map(\.count).max() ?? 0
        #expect(longest <= 998, "a line of \(longest) octets", sourceLocation: sourceLocation)
        let headers = headerLines(bytes)
        #expect(headers.count < all.count, "no blank line after the header", sourceLocation: sourceLocation)
        for line in headers {
            #expect(line.utf8.count <= headerLimit, "header line of \(line.utf8.count): \(line)",
                    sourceLocation: sourceLocation)
        }
        let names = headers.filter { !$0.hasPrefix(" ") && !$0.hasPrefix("\t") }
            .map { $0.prefix(while: { $0 != ":" }).lowercased() }
        for required in ["date", "from", "to", "subject", "message-id", "mime-version", "content-type",
                         "content-transfer-encoding"] {
            #expect(names.filter { $0 == required }.count == 1, "header \(required)", sourceLocation: sourceLocation)
        }
    }

    /// The encoded-words of a header value, each of which must be at most 75 characters.
    static func encodedWords(_ value: String) -> [Substring] {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" }).filter { $0.hasPrefix("=?") }
    }

    /// Renders, checks the wire form, parses with Python and checks what every message must carry.
    static func roundTrip(subject: String, body: String, headerLimit: Int = 78,
                          sourceLocation: SourceLocation = #_sourceLocation) throws -> Reader.Parsed {
        let bytes = message(subject: subject, body: body).rendered()
        expectWellFormed(bytes, headerLimit: headerLimit, sourceLocation: sourceLocation)
        let parsed = try Reader.parse(bytes)
        #expect(parsed.defects.isEmpty, "defects: \(parsed.defects)", sourceLocation: sourceLocation)
        #expect(parsed.contentType == "text/plain", sourceLocation: sourceLocation)
        #expect(parsed.charset == "utf-8", sourceLocation: sourceLocation)
        #expect(parsed.messageID == "<\(id)@example.org>", sourceLocation: sourceLocation)
        #expect(parsed.dateEpochSeconds == date / 1000, sourceLocation: sourceLocation)
        #expect(parsed.subjectCount == 1, sourceLocation: sourceLocation)
        #expect(parsed.bcc == nil, sourceLocation: sourceLocation)
        #expect(parsed.subject == subject, sourceLocation: sourceLocation)
        return parsed
    }
}

@Suite struct MailMessageTests {
    // MARK: Subjects and bodies that come back exactly

    /// A display name reads back as it was given, as one mailbox: `.` and `,` are not atom text, and
    /// `Doe, John <j@example.com>` would read as two mailboxes; long names fold.
    @Test(arguments: ["J. Smith", "Doe, John", ".hidden", #"Ana "the" O'Neil \ x"#, "Jotter",
                      "Jotter — Notizen von Ana María Fernández González", String(repeating: "日本語", count: 70),
                      String(repeating: "a", count: 90), "Dr. Ana Fernández"])
    func displayNamesReadBackAsOneMailbox(name: String) throws {
        let message = MailMessage(id: Mail.id, date: Mail.date, from: MailAddress(name: name, address: "jotter@example.org"),
                                  to: MailAddress(address: "me@example.net"), subject: "s", body: "b", attempt: 1)
        let bytes = message.rendered()
        Mail.expectWellFormed(bytes)
        let parsed = try Reader.parse(bytes)
        #expect(parsed.defects.isEmpty, "\(parsed.defects)")
        #expect(parsed.fromMailboxes.map { $0.last } == ["jotter@example.org"], "one mailbox: \(parsed.fromMailboxes)")
        let shown = parsed.fromMailboxes.first?.first ?? ""
        // Python's structured-header parser keeps the space between two encoded-words of a phrase,
        // which RFC 2047 (6.2) says to drop; its RFC 2047 decoder, read on the raw header, drops it.
        #expect(shown == name || shown.filter { $0 != " " } == name.filter { $0 != " " }, "\(shown)")
        let raw = try #require(Mail.header("From", in: bytes)).trimmingCharacters(in: .whitespaces)
        let decoder = "import email.header, sys; print(str(email.header.make_header(email.header.decode_header(sys.argv[1]))))"
        let decoded = try Python.run(decoder, arguments: [raw]).trimmingCharacters(in: .newlines)
        let written = name.utf8.allSatisfy { (0x20...0x7E).contains($0) } && MailAddress.needsQuotes(name) ? MailAddress.quoted(name) : name
        #expect(decoded == written + " <jotter@example.org>" || decoded == name + " <jotter@example.org>", "\(decoded)")
        // A mail API gets the same name, quoted where it must be.
        let json = try #require(try JSONSerialization.jsonObject(with: Data(ResendTransport.requestBody(message))) as? [String: Any])
        let script = "import email.utils, sys; print(repr(email.utils.getaddresses([sys.argv[1]])))"
        let viaAPI = try Python.run(script, arguments: [try #require(json["from"] as? String)])
        let expected = try Python.run("import sys; print(repr([(sys.argv[1], 'jotter@example.org')]))", arguments: [name])
        #expect(viaAPI == expected)
    }

    /// A composer's memo is the user's own: no Auto-Submitted, no Reply-To. A relay's says it was sent
    /// by a service, and that replies go to the recipient; its headers stay well formed.
    @Test func onlyARelaysMailIsMarkedAutoSubmitted() throws {
        var message = Mail.message(subject: "s", body: "b")
        #expect(Mail.header("Auto-Submitted", in: message.rendered()) == nil)
        #expect(Mail.header("Reply-To", in: message.rendered()) == nil)
        message.to = MailAddress(address: "ana.maria.fernandez.gonzalez.long.address@example.net")
        message.onBehalfOfRecipient = true
        let bytes = message.rendered()
        Mail.expectWellFormed(bytes)
        let parsed = try Reader.parse(bytes)
        #expect(parsed.defects.isEmpty)
        #expect(Mail.header("Auto-Submitted", in: bytes) == " auto-generated")
        #expect(Mail.header("Reply-To", in: bytes) == " <ana.maria.fernandez.gonzalez.long.address@example.net>")
    }

    @Test func asciiMemo() throws {
        let parsed = try Mail.roundTrip(subject: "Buy milk", body: "Buy milk\nand eggs, 2% please.")
        #expect(parsed.body == "Buy milk\nand eggs, 2% please.\n")
        #expect(parsed.transferEncoding == "7bit")
        #expect(parsed.from == "Jotter <jotter@example.org>")
        #expect(parsed.to == "me@example.net")
    }

    @Test func japaneseMemo() throws {
        let body = "今日は良い天気です。\n明日は雨が降るでしょう。\n買い物：牛乳、卵、パン"
        let parsed = try Mail.roundTrip(subject: "件名", body: body)
        #expect(Mail.memoText(parsed) == body)
    }

    @Test func japaneseSubjectOfTwelveCharacters() throws {
        let parsed = try Mail.roundTrip(subject: "日本語の件名のテストです", body: "本文")
        #expect(Mail.memoText(parsed) == "本文")
    }

    @Test func arabicMemo() throws {
        let body = "مرحبا بالعالم\nهذه مذكرة قصيرة: اشترِ الحليب."
        let parsed = try Mail.roundTrip(subject: "مذكرة", body: body)
        #expect(Mail.memoText(parsed) == body)
    }

    @Test func emojiMemo() throws {
        let subject = "👩‍💻 ship it 🇯🇵🇫🇷"
        let body = "🎉🎉 done 👩‍💻\n👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇦 🏴󠁧󠁢󠁳󠁣󠁴󠁿 👍🏽"
        let parsed = try Mail.roundTrip(subject: subject, body: body)
        #expect(Mail.memoText(parsed) == body)
        #expect(Mail.memoText(parsed).unicodeScalars.elementsEqual(body.unicodeScalars))
    }

    @Test func mixedLatinAccentsUseQuotedPrintable() throws {
        let body = "Café au lait, naïve résumé — ok\nSecond line"
        let parsed = try Mail.roundTrip(subject: "Café", body: body)
        #expect(parsed.body == body + "\n")
        #expect(parsed.transferEncoding == "quoted-printable")
    }

    @Test func veryLongMixedScriptSubjectIsFoldedIntoShortEncodedWords() throws {
        let subject = (0..<9).map { "Part \($0): 長い件名のテスト عنوان طويل جدا 👩‍💻🇯🇵" }.joined(separator: " — ")
        #expect(subject.count > 300)
        let parsed = try Mail.roundTrip(subject: subject, body: "body", headerLimit: 998)
        let bytes = Mail.message(subject: subject, body: "body").rendered()
        let value = try #require(Mail.header("Subject", in: bytes))
        let words = Mail.encodedWords(value)
        #expect(words.count > 5)
        for (index, word) in words.enumerated() {
            #expect(word.count <= 75, "encoded-word of \(word.count) characters")
            #expect((word.hasPrefix("=?UTF-8?B?") || word.hasPrefix("=?UTF-8?Q?")) && word.hasSuffix("?="))
            if index < words.count - 1 && word.hasPrefix("=?UTF-8?B?") {
                #expect(!word.dropLast(2).hasSuffix("="), "a padded word before the last: \(word)")
            }
        }
        let subjectLines = Mail.headerLines(bytes).drop(while: { !$0.hasPrefix("Subject:") })
            .prefix(while: { $0.hasPrefix("Subject:") || $0.hasPrefix(" ") })
        #expect(subjectLines.count == words.count)
        #expect(subjectLines.dropFirst().allSatisfy { $0.utf8.count <= 78 })
        #expect(parsed.subject == subject)
    }

    /// RFC 5322 section 2.1.1: header lines SHOULD be at most 78 characters. The first line of a folded
    /// subject is `Subject: ` (9) followed by a 72-character encoded-word: 81.
    @Test
    func foldedSubjectFirstLineFitsIn78() throws {
        for subject in [String(repeating: "長い件名のテスト", count: 40), "日本語の件名のテストです、長い",
                        String(repeating: "a", count: 80)] {
            let bytes = Mail.message(subject: subject, body: "x").rendered()
            for line in Mail.headerLines(bytes) {
                #expect(line.utf8.count <= 78, "header line of \(line.utf8.count): \(line)")
            }
            #expect(try Reader.parse(bytes).subject == subject)
        }
    }

    /// RFC 2047 section 2: an encoded-word is at most 75 characters, whatever the text.
    /// The encoder gives word for word what the reference gives, on texts of ASCII, 2-, 3- and 4-byte
    /// characters, combining marks and the characters Q must escape, at every starting column.
    @Test func encodedWordsAreThoseOfTheReference() {
        var generator = SeededGenerator(seed: 0x2047)
        let pieces = ["a", "Z", "9", " ", "=", "?", "_", "-", "/", ".", "é", "ß", "件", "名", "…", "😀", "👩‍💻",
                      "e\u{301}", "\u{0}", "\t", "buy milk", String(repeating: "x", count: 40)]
        for _ in 0..<3_000 {
            let count = Int.random(in: 0...40, using: &generator)
            let text = (0..<count).map { _ in pieces[Int.random(in: 0..<pieces.count, using: &generator)] }.joined()
            let column = [0, 1, 9, 30, 66, 70, 75][Int.random(in: 0..<7, using: &generator)]
            #expect(MIME.encodedWords(text, firstLineUsed: column)
                        == ReferenceEncodedWords.encodedWords(text, firstLineUsed: column), "\(text.debugDescription)")
        }
    }

    @Test
    func encodedWordsStayShortForALongGraphemeCluster() throws {
        let zalgo = "e" + String(repeating: "\u{301}", count: 30)  // one Character, 61 UTF-8 bytes
        let subject = "Z " + zalgo + " done"
        let bytes = Mail.message(subject: subject, body: "x").rendered()
        let value = try #require(Mail.header("Subject", in: bytes))
        for word in Mail.encodedWords(value) {
            #expect(word.count <= 75, "encoded-word of \(word.count) characters")
        }
        #expect(try Reader.parse(bytes).subject == subject)
    }

    @Test(arguments: ["Price =?UTF-8?B?SGk=?= today", "=?", "a =? b ?= c", "=?utf-8?q?not_encoded?="])
    func subjectContainingEncodedWordSyntaxIsTakenLiterally(subject: String) throws {
        let parsed = try Mail.roundTrip(subject: subject, body: "x")
        #expect(parsed.subject == subject)
    }

    @Test(arguments: [69, 70, 120])
    func asciiSubjectAroundTheFoldingLimit(length: Int) throws {
        let subject = String(String(repeating: "word ", count: 40).prefix(length - 1)) + "Z"
        #expect(subject.count == length)
        // Header lines up to 998 here: the 78-column rule is `foldedSubjectFirstLineFitsIn78`.
        let parsed = try Mail.roundTrip(subject: subject, body: "x", headerLimit: 998)
        #expect(parsed.subject == subject)
    }

    @Test func emptySubject() throws {
        let parsed = try Mail.roundTrip(subject: "", body: "no subject")
        #expect(parsed.subject == "")
        #expect(parsed.body == "no subject\n")
    }

    @Test func emptyBody() throws {
        let parsed = try Mail.roundTrip(subject: "Only a subject", body: "")
        #expect(Mail.memoText(parsed) == "")
    }

    // MARK: Bodies that careless software mangles

    @Test func linesStartingWithDotAndFrom() throws {
        let body = ".\n..double\n.hidden\nFrom me to you\nFrom\nfrom lowercase\n>From quoted\nend."
        let parsed = try Mail.roundTrip(subject: "dots", body: body)
        #expect(parsed.body == body + "\n")
        let bytes = Mail.message(subject: "dots", body: body).rendered()
        for line in Mail.lines(bytes) {
            #expect(!line.starts(with: Array("From ".utf8)), "an mbox reader would split the message here")
        }
    }

    /// Quoted-printable soft line breaks can put `From ` at the start of a wire line, which an mbox
    /// delivery (`sendmail:`) escapes to `>From ` — and the reader then sees `>From` in the memo.
    @Test
    func noWireLineStartsWithFromAfterASoftBreak() throws {
        let body = "From the start\n" + String(repeating: "a", count: 75) + "From here on"
        let bytes = Mail.message(subject: "soft", body: body).rendered()
        for line in Mail.lines(bytes) {
            #expect(!line.starts(with: Array("From ".utf8)), "\(String(decoding: line, as: UTF8.self))")
        }
        #expect(try Reader.parse(bytes).body == body + "\n")
    }

    @Test func bodyOf200KilobytesOfMixedText() throws {
        var body = ""
        var number = 0
        while body.utf8.count < 200 * 1024 {
            number += 1
            body += "Line \(number): café au lait, naïve résumé — ok; Ünïcödé and tabs\tand ends\n"
        }
        body += "last line"
        let parsed = try Mail.roundTrip(subject: "big", body: body)
        #expect(parsed.body == body + "\n")
    }

    @Test func bodyOf200KilobytesOfJapanese() throws {
        let body = String(repeating: "吾輩は猫である。名前はまだ無い。\n", count: 4500) + "終わり"
        #expect(body.utf8.count > 200 * 1024)
        let parsed = try Mail.roundTrip(subject: "大きい", body: body)
        #expect(Mail.memoText(parsed) == body)
    }

    @Test func lineOf2000CharactersWithoutSpaces() throws {
        let line = String(repeating: "abcdefghij", count: 200)
        let parsed = try Mail.roundTrip(subject: "long line", body: line + "\nnext")
        #expect(parsed.body == line + "\nnext\n")
    }

    @Test func lineOf2000JapaneseCharactersWithoutSpaces() throws {
        let line = String(repeating: "日本語", count: 667)
        let parsed = try Mail.roundTrip(subject: "long line", body: line)
        #expect(Mail.memoText(parsed) == line)
    }

    @Test func lineOf998AndOf999ASCIICharacters() throws {
        for count in [997, 998, 999, 1000] {
            let line = String(repeating: "x", count: count)
            let parsed = try Mail.roundTrip(subject: "edge", body: line)
            #expect(parsed.body == line + "\n")
        }
    }

    @Test func trailingSpacesAndTabsSurvive() throws {
        let ascii = "trailing   \n\ttabbed\tline\t\n  indented\nend "
        #expect(try Mail.roundTrip(subject: "ws", body: ascii).body == ascii + "\n")
        let accented = "café   \n\tnaïve\t\nend\t"
        #expect(try Mail.roundTrip(subject: "ws", body: accented).body == accented + "\n")
    }

    @Test func controlCharactersInTheBodySurvive() throws {
        let body = "page one\u{0C}page two\u{07}\u{7F} end"
        let parsed = try Mail.roundTrip(subject: "ctl", body: body)
        #expect(parsed.body == body + "\n")
    }

    @Test func equalsSignsAndQuotedPrintableLookalikes() throws {
        let body = "a=b\n=3D is not decoded twice\nç=C3=A7\nline ending in =\n="
        let parsed = try Mail.roundTrip(subject: "qp", body: body)
        #expect(parsed.body == body + "\n")
    }

    @Test(arguments: ["7bit", "quoted-printable"])
    func crlfLFAndCRBodiesRenderIdentically(encoding: String) throws {
        let lines = encoding == "7bit" ? ["first", "second", "", "fourth", ""] : ["première", "deuxième", "", "4", ""]
        let lf = lines.joined(separator: "\n")
        let crlf = lines.joined(separator: "\r\n")
        let cr = lines.joined(separator: "\r")
        let rendered = Mail.message(subject: "eol", body: lf).rendered()
        #expect(Mail.message(subject: "eol", body: crlf).rendered() == rendered)
        #expect(Mail.message(subject: "eol", body: cr).rendered() == rendered)
        let parsed = try Mail.roundTrip(subject: "eol", body: crlf)
        #expect(parsed.transferEncoding == encoding)
        #expect(parsed.body == lf + "\n")
    }

    @Test func crlfAndLFJapaneseBodiesRenderIdentically() throws {
        let lf = "一行目\n二行目\n\n四行目"
        let rendered = Mail.message(subject: "eol", body: lf).rendered()
        #expect(Mail.message(subject: "eol", body: lf.replacingOccurrences(of: "\n", with: "\r\n")).rendered()
                == rendered)
        let parsed = try Mail.roundTrip(subject: "eol", body: lf.replacingOccurrences(of: "\n", with: "\r\n"))
        #expect(parsed.transferEncoding == "base64")
        #expect(Mail.memoText(parsed) == lf)
    }

    /// Whatever the transfer encoding, the reader gets the memo followed by one line break
    /// (`get_content()` of 7bit and quoted-printable bodies does; base64 bodies lack it, so a
    /// Japanese memo ending in a line break loses it).
    @Test
    func everyEncodingTerminatesTheLastLine() throws {
        for body in ["hello", "café", "日本語", "日本語\n", "مرحبا\n\n"] {
            let parsed = try Reader.parse(Mail.message(subject: "x", body: body).rendered())
            #expect(parsed.body == body + "\n", "\(parsed.transferEncoding)")
        }
    }

    // MARK: Headers

    @Test func messageIDAndBytesAreStableAcrossRenderingsAndAttempts() throws {
        let first = Mail.message(subject: "件名 👩‍💻", body: "本文", attempt: 1)
        let retry = Mail.message(subject: "件名 👩‍💻", body: "本文", attempt: 2)
        #expect(first.messageID == "<\(Mail.id)@example.org>")
        #expect(first.rendered() == first.rendered())
        #expect(retry.rendered() == first.rendered())
        #expect(Mail.header("Message-ID", in: retry.rendered()) == " <\(Mail.id)@example.org>")
        #expect(try Reader.parse(retry.rendered()).messageID == "<\(Mail.id)@example.org>")
    }

    @Test(arguments: [Int64(0), 951_782_400_000, 1_764_581_405_999, 4_102_444_799_000])
    func dateHeaderIsTheAcceptanceTimeToTheSecond(milliseconds: Int64) throws {
        var message = Mail.message(subject: "when", body: "x")
        message.date = milliseconds
        let bytes = message.rendered()
        let parsed = try Reader.parse(bytes)
        #expect(parsed.dateEpochSeconds == milliseconds / 1000)
        #expect(parsed.defects.isEmpty)
        #expect(Mail.header("Date", in: bytes)?.hasSuffix(" +0000") == true)
    }

    @Test func dateHeaderText() {
        let bytes = Mail.message(subject: "when", body: "x").rendered()
        #expect(Mail.header("Date", in: bytes) == " Mon, 01 Dec 2025 09:30:05 +0000")
    }

    @Test func contentHeaders() throws {
        let bytes = Mail.message(subject: "x", body: "y").rendered()
        #expect(Mail.header("MIME-Version", in: bytes) == " 1.0")
        #expect(Mail.header("Content-Type", in: bytes) == " text/plain; charset=utf-8")
    }

    @Test func nonASCIIDisplayNameIsEncoded() throws {
        var message = Mail.message(subject: "x", body: "y")
        message.from = MailAddress(name: "ジョッター", address: "jotter@example.org")
        message.to = MailAddress(name: "Zoë O'Brien", address: "zoe@example.net")
        let bytes = message.rendered()
        Mail.expectWellFormed(bytes)
        let parsed = try Reader.parse(bytes)
        #expect(parsed.defects.isEmpty)
        #expect(parsed.from == "ジョッター <jotter@example.org>")
        #expect(parsed.to.hasSuffix("<zoe@example.net>"))
        #expect(parsed.to.contains("Zoë O'Brien"))
    }

    // MARK: Header injection

    @Test func unsanitizedSubjectWithCRLFCannotAddHeaders() throws {
        let bytes = Mail.message(subject: "hi\r\nBcc: x@y\r\n\r\nfake body", body: "real body").rendered()
        Mail.expectWellFormed(bytes)
        let parsed = try Reader.parse(bytes)
        #expect(parsed.bcc == nil)
        #expect(parsed.subjectCount == 1)
        #expect(!parsed.headerNames.contains(where: { $0.lowercased() == "bcc" }))
        #expect(parsed.body == "real body\n")
    }
}

@Suite struct SubjectLineTests {
    @Test func derivedIsTheFirstNonBlankLine() {
        #expect(SubjectLine.derived(from: "\n\n   \n\t\n  Buy milk  \nand eggs") == "Buy milk")
        #expect(SubjectLine.derived(from: "\r\n\r\nFirst\r\nSecond") == "First")
        #expect(SubjectLine.derived(from: "only line") == "only line")
    }

    @Test(arguments: ["", " ", "\n\n", " \t\r\n \n"])
    func derivedFromABlankBodyIsEmpty(body: String) {
        #expect(SubjectLine.derived(from: body) == "")
    }

    @Test func shortLineIsKeptWhole() {
        let line = String(repeating: "x", count: 60)
        #expect(SubjectLine.derived(from: line + "\nmore") == line)
    }

    @Test func longLineIsCutAtAWordNear60() {
        let line = "The quick brown fox jumps over the lazy dog and keeps running far away into the hills"
        let subject = SubjectLine.derived(from: line)
        #expect(subject.hasSuffix("…"))
        let kept = String(subject.dropLast())
        #expect(kept.count <= 60)
        #expect(kept.count >= 30)
        #expect(line.hasPrefix(kept))
        #expect(line.dropFirst(kept.count).first == " ", "cut inside a word")
        #expect(subject == "The quick brown fox jumps over the lazy dog and keeps…")
    }

    @Test func longWordWithoutSpacesIsCutAt60Characters() {
        let line = String(repeating: "日本語", count: 40)
        let subject = SubjectLine.derived(from: line)
        #expect(subject == String(line.prefix(60)) + "…")
    }

    @Test func cuttingNeverSplitsAnEmoji() {
        let line = String(repeating: "👩‍💻", count: 70)
        let subject = SubjectLine.derived(from: line)
        #expect(subject == String(repeating: "👩‍💻", count: 60) + "…")
        #expect(subject.unicodeScalars.count == 60 * 3 + 1)
    }

    @Test(arguments: ["a\r\nb", "a\rb", "a\nb", "a\u{2028}b", "a\u{2029}b", "a\u{85}b", "a\u{0B}b", "a\u{0C}b"])
    func derivedNeverContainsLineBreaks(body: String) {
        let subject = SubjectLine.derived(from: body)
        #expect(subject == "a")
        #expect(!subject.unicodeScalars.contains { $0 == "\r" || $0 == "\n" })
    }

    /// A first line with nothing to read (a no-break or ideographic space, a zero-width one, a bell) is
    /// skipped as a blank one is, as the server's "empty memo" check counts it: the subject is the first
    /// line a reader can see. Its invisible ends are trimmed, and a given subject's too.
    @Test(arguments: ["\u{A0}", "\u{3000}", "\u{200B}", "\u{7}", "\u{FEFF}\u{200D}", " \u{A0}\t\u{2060} "])
    func aFirstLineWithNothingVisibleIsSkipped(line: String) {
        #expect(SubjectLine.derived(from: line + "\nMeeting notes for Tuesday") == "Meeting notes for Tuesday")
        #expect(SubjectLine.derived(from: line + "\n会議メモ") == "会議メモ")
        #expect(SubjectLine.derived(from: line + "Meeting" + line + "\nrest") == "Meeting")
        #expect(SubjectLine.sanitized(line + "件名" + line) == "件名")
        #expect(SubjectLine.sanitized("a\u{3000}b") == "a\u{3000}b", "inside, it is text")
    }

    @Test func anEmptySubjectHeaderHasNoTrailingSpace() {
        let message = MailMessage(id: "empty-subject", date: 1_764_581_405_000, from: MailAddress(address: "a@example.com"),
                                  to: MailAddress(address: "b@example.com"), subject: "", body: "text")
        let rendered = String(decoding: message.rendered(), as: UTF8.self)
        #expect(rendered.contains("\r\nSubject:\r\n"), "\(rendered)")
    }

    @Test func derivedTurnsControlCharactersIntoSpaces() {
        #expect(SubjectLine.derived(from: "tab\there\u{0}and\u{7}bell") == "tab here and bell")
    }

    @Test func sanitizedPutsTheSubjectOnOneLine() {
        #expect(SubjectLine.sanitized("hi\r\nBcc: x@y") == "hi Bcc: x@y")
        #expect(SubjectLine.sanitized("a\r\n\r\n\tb") == "a b")
        #expect(SubjectLine.sanitized("\r\n  leading and trailing \r\n") == "leading and trailing")
        #expect(SubjectLine.sanitized("a\u{0}b\u{1B}c\u{7F}d\u{85}e\u{2028}f\u{2029}g") == "a b c d e f g")
        #expect(SubjectLine.sanitized("many    spaces") == "many spaces")
        #expect(SubjectLine.sanitized("件名 👩‍💻 🇯🇵") == "件名 👩‍💻 🇯🇵")
        #expect(SubjectLine.sanitized("") == "")
        #expect(SubjectLine.sanitized("\r\n") == "")
    }

    /// The byte-by-byte path for ASCII gives exactly what the Unicode path gives, on bodies built from
    /// the characters that matter (newlines, CR LF, spaces, tabs, controls, DEL) around the 60-character cut.
    @Test func asciiSubjectsAreThoseOfTheUnicodeRules() {
        var generator = SeededGenerator(seed: 0x5EED)
        let pieces = ["a", "word", "x", " ", "  ", "\t", "\n", "\r", "\r\n", "\u{0B}", "\u{0C}", "\u{0}", "\u{7}",
                      "\u{1B}", "\u{7F}", "~", "Buy milk",
                      String(repeating: "y", count: 29), String(repeating: "z", count: 61)]
        for _ in 0..<5_000 {
            let count = Int.random(in: 0...24, using: &generator)
            let body = (0..<count).map { _ in pieces[Int.random(in: 0..<pieces.count, using: &generator)] }.joined()
            let fast = SubjectLine.asciiDerived(from: body)
            #expect(fast == SubjectLine.derivedByCharacters(from: body), "\(Array(body.utf8))")
            #expect(SubjectLine.sanitized(body) == SubjectLine.sanitizedByScalars(body), "\(Array(body.utf8))")
        }
        // Anything else before the first line's end takes the Unicode path.
        #expect(SubjectLine.asciiDerived(from: "\n  caf\u{E9}") == nil)
        #expect(SubjectLine.asciiDerived(from: "a\u{85}b") == nil)
        #expect(SubjectLine.asciiDerived(from: "first line\nthen caf\u{E9}") == "first line")
    }

    @Test(arguments: ["hi\r\nBcc: x@y", "hi\nBcc: x@y", "hi\rBcc: x@y", "hi\r\n\r\nBcc: x@y\r\nTo: z@w",
                      "ok\u{2028}Bcc: x@y", "件名\r\nBcc: x@y"])
    func sanitizedSubjectRendersAsOneSubjectHeaderAndNoBcc(subject: String) throws {
        let clean = SubjectLine.sanitized(subject)
        #expect(!clean.unicodeScalars.contains { $0 == "\r" || $0 == "\n" })
        let bytes = Mail.message(subject: clean, body: "body").rendered()
        Mail.expectWellFormed(bytes)
        let parsed = try Reader.parse(bytes)
        #expect(parsed.bcc == nil)
        #expect(parsed.subjectCount == 1)
        #expect(parsed.subject == clean)
        #expect(parsed.headerNames.filter { $0.lowercased() == "to" }.count == 1)
        let bccLines = Mail.headerLines(bytes).filter { $0.lowercased().hasPrefix("bcc") }
        #expect(bccLines.isEmpty)
    }
}

/// SplitMix64: the same pseudo-random sequence on every run, so a failing input can be found again.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}

/// The first, straightforward encoder of RFC 2047 words (a Q-encoding of every prefix, a String per
/// character), kept as the reference the faster `MIME.encodedWords` must agree with.
enum ReferenceEncodedWords {
    static func encodedWords(_ text: String, firstLineUsed: Int) -> [String] {
        let characters = text.unicodeScalars.map { Array(String($0).utf8) }
        let preferQ = qLength(Array(text.utf8)) <= (text.utf8.count + 2) / 3 * 4
        var words: [String] = []
        var start = 0
        var lineUsed = firstLineUsed
        while start < characters.count {
            // Room for the encoded text: a line of at most 76, folded lines start with one space.
            let room = max(8, min(75, 76 - lineUsed) - "=?UTF-8?B??=".count)
            var bytes: [UInt8] = [], ends: [(count: Int, bytes: Int)] = []
            var index = start
            while index < characters.count, bytes.count + characters[index].count <= room {
                bytes += characters[index]
                index += 1
                ends.append((index, bytes.count))
            }
            let last = index == characters.count
            var word: String?
            if !preferQ {
                if last, let all = ends.last, (all.bytes + 2) / 3 * 4 <= room {
                    // The last word may end in padding.
                    word = "=?UTF-8?B?" + MIME.base64(bytes) + "?="
                    index = all.count
                } else if let whole = ends.last(where: { $0.bytes % 3 == 0 && $0.bytes / 3 * 4 <= room }) {
                    word = "=?UTF-8?B?" + MIME.base64(Array(bytes.prefix(whole.bytes))) + "?="
                    index = whole.count
                }
            }
            if word == nil {
                // Q: the longest run of whole characters whose encoding fits.
                var taken = 0, encoded = ""
                for end in ends {
                    let candidate = qEncode(Array(bytes.prefix(end.bytes)))
                    guard candidate.count <= room || taken == 0 else { break }
                    taken = end.count
                    encoded = candidate
                }
                word = "=?UTF-8?Q?" + encoded + "?="
                index = taken
            }
            if let word { words.append(word) }
            start = index
            lineUsed = 1
        }
        return words
    }

    /// Q encoding (RFC 2047 4.2) restricted to what is safe in any header context, phrases included:
    /// letters, digits and `!*+-/` as they are, space as `_`, every other byte as `=XX`.
    static func qEncode(_ bytes: [UInt8]) -> String {
        var out = ""
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "!"), UInt8(ascii: "*"), UInt8(ascii: "+"),
                 UInt8(ascii: "-"), UInt8(ascii: "/"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case 0x20:
                out += "_"
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                out += "=" + String(decoding: [hex[Int(byte >> 4)], hex[Int(byte & 15)]], as: UTF8.self)
            }
        }
        return out
    }

    private static func qLength(_ bytes: [UInt8]) -> Int {
        qEncode(bytes).count
    }
}
