/// A mailbox (`name <address>`).
public struct MailAddress: Sendable, Equatable {
    /// The display name, or empty.
    public var name: String
    /// The address (`local@domain`).
    public var address: String

    /// Creates an address.
    public init(name: String = "", address: String) {
        self.name = name
        self.address = address
    }

    /// The domain part, used on the right of the `Message-ID`: what follows the last `@` that is not
    /// at the end ("localhost" for an address of only `@`s).
    public var domain: String {
        var utf8 = Substring(address).utf8
        while utf8.last == UInt8(ascii: "@") { utf8.removeLast() }
        guard !utf8.isEmpty else { return "localhost" }
        let start = utf8.lastIndex(of: UInt8(ascii: "@")).map(utf8.index(after:)) ?? utf8.startIndex
        return String(Substring(utf8[start...]))
    }

    /// The header form: the display name as it is, quoted, or as encoded-words, then `<address>`.
    var headerValue: String {
        var bytes: [UInt8] = []
        appendHeaderValue(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `headerValue`'s bytes, appended to `out` after a header name of `headerNameLength` characters
    /// (`From: ` is 6). A name of atoms (letters, digits, `-`, `_`, spaces) goes as it is; other
    /// printable ASCII in a quoted string (`"J. Smith"`, `"Doe, John"`: a `.` or `,` is not atom
    /// text, and a reader would see two mailboxes in `Doe, John <j@example.com>`); anything else, or a
    /// line that would pass 78 characters, as encoded-words folded one to a line.
    func appendHeaderValue(to out: inout [UInt8], headerNameLength: Int = 0) {
        if !name.isEmpty {
            let printable = name.utf8.allSatisfy { (0x20...0x7E).contains($0) }
            let quoted = Self.needsQuotes(name)
            let length = headerNameLength + name.utf8.count + (quoted ? 2 : 0) + 1 + address.utf8.count + 2
            if printable && length <= 78 {
                out.append(utf8: quoted ? Self.quoted(name) : name)
                out.append(0x20)
            } else {
                let words = MIME.encodedWords(name, firstLineUsed: headerNameLength)
                out.append(contentsOf: words.joined(separator: "\r\n ").utf8)
                let lastLine = (words.count == 1 ? headerNameLength : 1) + (words.last?.utf8.count ?? 0)
                out.append(contentsOf: lastLine + 1 + address.utf8.count + 2 > 78 ? [13, 10, 0x20] : [0x20])
            }
        }
        out.append(UInt8(ascii: "<"))
        out.append(utf8: address)
        out.append(UInt8(ascii: ">"))
    }

    /// The form for a mail API's JSON (RFC 6532: UTF-8 as it is), the name quoted where it must be.
    var unicodeValue: String {
        guard !name.isEmpty else { return address }
        return (Self.needsQuotes(name) ? Self.quoted(name) : name) + " <" + address + ">"
    }

    /// Whether `name` holds anything but atoms (letters, digits, `-`, `_`; any non-ASCII) and spaces.
    static func needsQuotes(_ name: String) -> Bool {
        !name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: " "), UInt8(ascii: "-"),
                 UInt8(ascii: "_"), 0x80...:
                true
            default:
                false
            }
        }
    }

    /// `text` as an RFC 5322 quoted-string: `"` and `\` escaped, control characters dropped.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars where scalar.value >= 0x20 && scalar.value != 0x7F {
            if scalar == "\"" || scalar == "\\" { out.append("\\") }
            out.unicodeScalars.append(scalar)
        }
        return out + "\""
    }
}
