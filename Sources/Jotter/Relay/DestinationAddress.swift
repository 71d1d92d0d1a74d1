/// An address a device may send to, once verified: a plain ASCII `local@domain`, checked strictly
/// enough that it can never break a mail header or an SMTP command.
public struct DestinationAddress: Sendable, Equatable {
    /// The address as it is mailed and listed: as given, with its domain lowercased.
    public let address: String
    /// The form that identifies it for verification and limits: all lowercased (providers treat
    /// the local part without case, and a cap must not be dodged by changing case).
    public let normalized: String
    /// The mailbox the address reaches, as far as it is widely known: `normalized` without a `+tag`
    /// (`ana+x@` and `ana@` are one inbox almost everywhere), and at Gmail without dots (which Gmail
    /// ignores). Caps on codes mailed to an address count per mailbox, so that a flood cannot be
    /// spread over made-up variants of one inbox.
    public let mailbox: String

    /// Parses `text` (surrounding spaces ignored); nil if it is not an acceptable address.
    public init?(_ text: String) {
        let trimmed = Substring(text).trimmingCharacters(in: " \t")
        guard (3...254).contains(trimmed.utf8.count) else { return nil }
        let parts = trimmed.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, Self.isLocalPart(parts[0]), DomainName.isValid(parts[1]) else { return nil }
        address = String(parts[0]) + "@" + parts[1].lowercased()
        normalized = address.lowercased()
        mailbox = Self.mailbox(local: parts[0].lowercased(), domain: parts[1].lowercased())
    }

    private static func mailbox(local: String, domain: String) -> String {
        var local = Substring(local)
        if let plus = local.firstIndex(of: "+"), plus > local.startIndex { local = local[..<plus] }
        guard domain == "gmail.com" || domain == "googlemail.com" else { return local + "@" + domain }
        let undotted = local.filter { $0 != "." }
        return (undotted.isEmpty ? String(local) : undotted) + "@gmail.com"
    }

    /// RFC 5321 dot-atom local part, at most 64 characters (no quoted strings).
    private static func isLocalPart(_ local: Substring) -> Bool {
        let special = Set("!#$%&'*+/=?^_`{|}~-".utf8)
        return (1...64).contains(local.utf8.count) && !local.hasPrefix(".") && !local.hasSuffix(".")
            && !local.contains("..")
            && local.utf8.allSatisfy { DomainName.isLetterOrDigit($0) || special.contains($0) || $0 == UInt8(ascii: ".") }
    }
}
