/// MIME encoders: RFC 2047 encoded-words, quoted-printable and base64 (RFC 2045).
enum MIME {
    /// `Subject: …` appended to `out`: plain when it is short printable ASCII, else folded UTF-8
    /// encoded-words.
    static func appendSubjectHeader(_ subject: String, to out: inout [UInt8]) {
        let name = "Subject: "
        var isPlain = name.utf8.count + subject.utf8.count <= 78
        var previous: UInt8 = 0
        for byte in subject.utf8 where isPlain {
            // Printable ASCII, and no `=?` that a reader could take for the start of an encoded-word.
            isPlain = byte >= 0x20 && byte < 0x7F && !(previous == UInt8(ascii: "=") && byte == UInt8(ascii: "?"))
            previous = byte
        }
        if subject.isEmpty {
            out.append("Subject:")
        } else if isPlain {
            out.append(utf8: name)
            out.append(utf8: subject)
        } else {
            out.append(utf8: name)
            for (index, word) in encodedWords(subject, firstLineUsed: name.utf8.count).enumerated() {
                if index > 0 { out.append("\r\n ") }
                out.append(utf8: word)
            }
        }
    }

    /// `text` as UTF-8 encoded-words (RFC 2047), each at most 75 characters and the first fitting
    /// after `firstLineUsed` characters, to be joined by folding whitespace.
    ///
    /// Every word holds whole characters (section 5 rule 3), and every B word but the last holds a
    /// multiple of 3 bytes, so no word but the last ends in `=` padding: GMime (notmuch, Evolution)
    /// stops decoding at a padded word that is not the last. Where no such split exists (a run of
    /// 3-byte characters after one ASCII one, say) the word is Q-encoded, which has no padding; and a
    /// text that is mostly ASCII is Q-encoded throughout, being shorter so.
    static func encodedWords(_ text: String, firstLineUsed: Int) -> [String] {
        let utf8 = Array(text.utf8)
        // Where each character (Unicode scalar) ends, in bytes: before every byte that does not continue one.
        var characterEnds: [Int] = []
        characterEnds.reserveCapacity(utf8.count)
        for offset in utf8.indices.dropFirst() where utf8[offset] & 0xC0 != 0x80 { characterEnds.append(offset) }
        if !utf8.isEmpty { characterEnds.append(utf8.count) }
        let preferQ = qLength(utf8[...]) <= (utf8.count + 2) / 3 * 4
        var words: [String] = []
        var start = 0
        var lineUsed = firstLineUsed
        while start < characterEnds.count {
            // Room for the encoded text: a line of at most 76, folded lines start with one space.
            let room = max(8, min(75, 76 - lineUsed) - "=?UTF-8?B??=".count)
            let firstByte = start == 0 ? 0 : characterEnds[start - 1]
            var ends: [(count: Int, bytes: Int)] = []
            var index = start
            while index < characterEnds.count, characterEnds[index] - firstByte <= room {
                index += 1
                ends.append((index, characterEnds[index - 1] - firstByte))
            }
            let bytes = utf8[firstByte..<(firstByte + (ends.last?.bytes ?? 0))]
            let last = index == characterEnds.count
            var word: String?
            if !preferQ {
                if last, let all = ends.last, (all.bytes + 2) / 3 * 4 <= room {
                    // The last word may end in padding.
                    word = "=?UTF-8?B?" + base64(Array(bytes)) + "?="
                    index = all.count
                } else if let whole = ends.last(where: { $0.bytes % 3 == 0 && $0.bytes / 3 * 4 <= room }) {
                    word = "=?UTF-8?B?" + base64(Array(bytes.prefix(whole.bytes))) + "?="
                    index = whole.count
                }
            }
            if word == nil {
                // Q: the longest run of whole characters whose encoding fits (each byte encodes alone, so the
                // length grows character by character).
                var taken = 0, takenBytes = 0, length = 0
                for end in ends {
                    let character = (bytes.startIndex + takenBytes)..<(bytes.startIndex + end.bytes)
                    let grown = length + qLength(bytes[character])
                    guard grown <= room || taken == 0 else { break }
                    taken = end.count
                    takenBytes = end.bytes
                    length = grown
                }
                word = "=?UTF-8?Q?" + qEncode(bytes.prefix(takenBytes)) + "?="
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
    static func qEncode<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 3)
        for byte in bytes {
            if isQSafe(byte) {
                out.append(byte)
            } else if byte == 0x20 {
                out.append(UInt8(ascii: "_"))
            } else {
                out.append(UInt8(ascii: "="))
                out.append(hexDigit(byte >> 4))
                out.append(hexDigit(byte & 15))
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// How long `qEncode(bytes)` is.
    private static func qLength(_ bytes: ArraySlice<UInt8>) -> Int {
        bytes.reduce(0) { $0 + (isQSafe($1) || $1 == 0x20 ? 1 : 3) }
    }

    private static func isQSafe(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "!"), UInt8(ascii: "*"), UInt8(ascii: "+"),
             UInt8(ascii: "-"), UInt8(ascii: "/"):
            true
        default:
            false
        }
    }

    /// The body for the wire, CRLF line endings whatever its own (CRLF, LF or CR), appended to `out`:
    /// `7bit` when every line is short printable ASCII that does not start with `From `, base64 when more
    /// than a third of its bytes are not ASCII, quoted-printable otherwise. Returns the encoding's name.
    static func appendBody(_ body: String, to out: inout [UInt8]) -> StaticString {
        var body = body
        return body.withUTF8 { utf8 in
            let lines = lineRanges(utf8)
            let nonASCII = utf8.reduce(0) { $0 + ($1 >= 0x80 ? 1 : 0) }
            let sevenBit = nonASCII == 0
                && lines.allSatisfy { line in
                    line.count <= 998 && !utf8[line].starts(with: "From ".utf8)
                        && utf8[line].allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 < 0x7F) }
                }
            if sevenBit {
                for line in lines {
                    out.append(contentsOf: utf8[line])
                    out.append("\r\n")
                }
                return "7bit"
            }
            // The text with its lines joined by LF is the one whose share of non-ASCII bytes decides.
            if nonASCII * 3 > lines.reduce(lines.count - 1, { $0 + $1.count }) {
                var text: [UInt8] = []
                text.reserveCapacity(utf8.count + lines.count + 2)
                for line in lines {
                    text.append(contentsOf: utf8[line])
                    text.append("\r\n")
                }
                let encoded = base64(text).utf8
                out.reserveCapacity(out.count + encoded.count + encoded.count / 76 * 2 + 2)
                var column = 0
                for byte in encoded {
                    out.append(byte)
                    column += 1
                    if column == 76 {
                        out.append("\r\n")
                        column = 0
                    }
                }
                if column > 0 { out.append("\r\n") }
                return "base64"
            }
            for line in lines {
                appendQuotedPrintable(utf8[line], to: &out)
                out.append("\r\n")
            }
            return "quoted-printable"
        }
    }

    /// Where the lines of `text` are, whatever its line breaks (CRLF, LF, CR): a text of n breaks has
    /// n + 1 lines, the last one possibly empty.
    static func lineRanges(_ text: UnsafeBufferPointer<UInt8>) -> [Range<Int>] {
        var lines: [Range<Int>] = []
        var start = 0
        var index = 0
        while index < text.count {
            let byte = text[index]
            if byte == 13 || byte == 10 {
                lines.append(start..<index)
                if byte == 13 && index + 1 < text.count && text[index + 1] == 10 { index += 1 }
                start = index + 1
            }
            index += 1
        }
        lines.append(start..<text.count)
        return lines
    }

    /// One line, quoted-printable, soft-broken at 76 columns, appended to `out`. An `F` or `.` that
    /// starts a wire line (the line's first byte, or the first after a soft break) is encoded, so `From `
    /// lines survive mbox readers and `.` lines survive careless SMTP relays.
    static func appendQuotedPrintable(_ line: Slice<UnsafeBufferPointer<UInt8>>, to out: inout [UInt8]) {
        var column = 0
        for index in line.indices {
            let byte = line[index]
            let isLast = index == line.endIndex - 1
            var encode = byte == 0x3D || byte >= 0x7F || (byte < 0x20 && byte != 0x09)
                || (isLast && (byte == 0x20 || byte == 0x09))
            if column + (encode ? 3 : 1) > 75 {
                out.append("=\r\n")
                column = 0
            }
            if column == 0 && (byte == 0x2E || byte == 0x46) { encode = true }
            if encode {
                out.append(0x3D)
                out.append(hexDigit(byte >> 4))
                out.append(hexDigit(byte & 0x0F))
                column += 3
            } else {
                out.append(byte)
                column += 1
            }
        }
    }

    /// An upper-case hexadecimal digit for 0–15.
    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "A") + value - 10
    }

    /// Base64 of `bytes` (OpenSSL's: the one encoder in Jotter).
    static func base64(_ bytes: [UInt8]) -> String {
        Base64.encode(bytes)
    }
}
