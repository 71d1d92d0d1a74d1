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

    /// The header form: an encoded-word display name if it needs one, then `<address>`.
    var headerValue: String {
        var bytes: [UInt8] = []
        appendHeaderValue(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `headerValue`'s bytes, appended to `out`.
    func appendHeaderValue(to out: inout [UInt8]) {
        if !name.isEmpty {
            // Atom text as it is: ASCII letters, digits, space and `-_.`.
            let isAtomText = name.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                     UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: " "), UInt8(ascii: "-"),
                     UInt8(ascii: "_"), UInt8(ascii: "."):
                    true
                default:
                    false
                }
            }
            if isAtomText {
                out.append(utf8: name)
            } else {
                out.append(contentsOf: MIME.encodedWords(name, firstLineUsed: 0).joined(separator: " ").utf8)
            }
            out.append(0x20)
        }
        out.append(UInt8(ascii: "<"))
        out.append(utf8: address)
        out.append(UInt8(ascii: ">"))
    }
}
