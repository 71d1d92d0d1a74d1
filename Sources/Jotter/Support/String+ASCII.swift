/// ASCII-only text helpers for protocol fields (header names, header values), where Unicode case
/// folding and Unicode white space would be wrong.
extension String {
    /// ASCII case-insensitive equality (header names are ASCII).
    func caseInsensitiveEquals(_ other: String) -> Bool {
        let lhs = utf8, rhs = other.utf8
        guard lhs.count == rhs.count else { return false }
        return zip(lhs, rhs).allSatisfy { a, b in
            a == b || (a | 0x20 == b | 0x20 && (a | 0x20) >= 0x61 && (a | 0x20) <= 0x7A)
        }
    }

    /// Without leading and trailing spaces and tabs (HTTP's optional white space, RFC 9110 §5.6.3).
    func trimmingASCIISpaces() -> Substring {
        Substring(self).trimmingCharacters(in: " \t")
    }
}
