/// MIME encoders: RFC 2047 encoded-words, quoted-printable and base64 (RFC 2045).
enum MIME {
    /// `Subject: …`, plain when it is short printable ASCII, else folded UTF-8 encoded-words.
    static func subjectHeader(_ subject: String) -> String {
        let name = "Subject: "
        let isPlain = subject.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
            && name.count + subject.utf8.count <= 78 && !subject.contains("=?")
        if isPlain { return name + subject }
        if subject.isEmpty { return "Subject:" }
        return name + encodedWords(subject, firstLineUsed: name.count).joined(separator: "\r\n ")
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
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 3)
        for byte in bytes {
            if isQSafe(byte) {
                out.append(byte)
            } else if byte == 0x20 {
                out.append(UInt8(ascii: "_"))
            } else {
                out.append(UInt8(ascii: "="))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 15)])
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

    static func encodeBody(_ body: String) -> (encoding: String, bytes: [UInt8]) {
        let lines = normalizedLines(body)
        let utf8 = lines.joined(separator: "\n").utf8
        let nonASCII = utf8.reduce(0) { $0 + ($1 >= 0x80 ? 1 : 0) }
        let sevenBit = nonASCII == 0
            && lines.allSatisfy { line in
                line.utf8.count <= 998 && !line.hasPrefix("From ")
                    && line.utf8.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 < 0x7F) }
            }
        if sevenBit {
            return ("7bit", Array((lines.joined(separator: "\r\n") + "\r\n").utf8))
        }
        if nonASCII * 3 > utf8.count {
            let encoded = base64(Array((lines.joined(separator: "\r\n") + "\r\n").utf8))
            var out: [UInt8] = []
            out.reserveCapacity(encoded.utf8.count + encoded.utf8.count / 76 * 2 + 2)
            var column = 0
            for byte in encoded.utf8 {
                out.append(byte)
                column += 1
                if column == 76 {
                    out += [13, 10]
                    column = 0
                }
            }
            if column > 0 { out += [13, 10] }
            return ("base64", out)
        }
        var out: [UInt8] = []
        for line in lines {
            out += quotedPrintable(Array(line.utf8))
            out += [13, 10]
        }
        return ("quoted-printable", out)
    }

    /// The body's lines, whatever its line breaks (CRLF, LF, CR).
    static func normalizedLines(_ body: String) -> [String] {
        var lines: [String] = []
        var current = ""
        var previousWasCR = false
        for scalar in body.unicodeScalars {
            if scalar == "\r" {
                lines.append(current)
                current = ""
                previousWasCR = true
                continue
            }
            if scalar == "\n" {
                if !previousWasCR {
                    lines.append(current)
                    current = ""
                }
                previousWasCR = false
                continue
            }
            previousWasCR = false
            current.unicodeScalars.append(scalar)
        }
        lines.append(current)
        return lines
    }

    /// One line, quoted-printable, soft-broken at 76 columns. An `F` or `.` that starts a wire line (the
    /// line's first byte, or the first after a soft break) is encoded, so `From ` lines survive mbox
    /// readers and `.` lines survive careless SMTP relays.
    static func quotedPrintable(_ line: [UInt8]) -> [UInt8] {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        var column = 0
        for (index, byte) in line.enumerated() {
            let isLast = index == line.count - 1
            let mustEncode = byte == 0x3D || byte >= 0x7F || (byte < 0x20 && byte != 0x09)
                || (isLast && (byte == 0x20 || byte == 0x09))
            var piece: [UInt8] = mustEncode ? [0x3D, hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]] : [byte]
            if column + piece.count > 75 {
                out += [0x3D, 13, 10]
                column = 0
            }
            if column == 0 && (byte == 0x2E || byte == 0x46) {
                piece = [0x3D, hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
            out += piece
            column += piece.count
        }
        return out
    }

    /// Base64 of `bytes` (OpenSSL's: the one encoder in Jotter).
    static func base64(_ bytes: [UInt8]) -> String {
        Base64.encode(bytes)
    }
}
