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

    /// The domain part, used on the right of the `Message-ID`.
    public var domain: String {
        address.split(separator: "@").last.map(String.init) ?? "localhost"
    }

    /// The header form: an encoded-word display name if it needs one, then `<address>`.
    var headerValue: String {
        guard !name.isEmpty else { return "<\(address)>" }
        let isAtomText = name.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || $0.properties.numericType != nil
                || " -_.".unicodeScalars.contains($0))
        }
        let display = isAtomText ? name : MIME.encodedWords(name, firstLineUsed: 0).joined(separator: " ")
        return "\(display) <\(address)>"
    }
}
