/// What a DNS name on the public Internet can look like, checked byte by byte: a relay's destination
/// domains and the name Jotter gives in SMTP's `EHLO` both must be one.
enum DomainName {
    /// At least two labels of letters, digits and inner hyphens (1–63 bytes each, 253 in all), whose
    /// top-level label is not all digits (RFC 3696 §2: so `1.2`, or an IP address written without
    /// brackets, is no domain).
    static func isValid(_ name: Substring) -> Bool {
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard let top = labels.last, !top.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return false }
        return labels.count >= 2 && name.utf8.count <= 253 && labels.allSatisfy { label in
            (1...63).contains(label.utf8.count) && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.utf8.allSatisfy { isLetterOrDigit($0) || $0 == UInt8(ascii: "-") }
        }
    }

    /// An ASCII letter or digit.
    static func isLetterOrDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
    }
}
