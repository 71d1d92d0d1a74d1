/// Trimming by Unicode scalar, as Foundation's `trimmingCharacters(in:)` did, without Foundation.
/// (For protocol fields, trim ASCII white space instead: `trimmingASCIISpaces()`.)
extension StringProtocol {
    /// Without leading and trailing scalars that `drop` accepts.
    func trimmingScalars(where drop: (Unicode.Scalar) -> Bool) -> String {
        let scalars = Substring(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !drop($0) }),
              let last = scalars.lastIndex(where: { !drop($0) }) else { return "" }
        return String(Substring(scalars[first...last]))
    }

    /// Without leading and trailing blanks: Unicode's space separators (general category Zs) and tab,
    /// Foundation's `CharacterSet.whitespaces`.
    func trimmingWhitespace() -> String {
        trimmingScalars { $0 == "\t" || $0.properties.generalCategory == .spaceSeparator }
    }

    /// Without leading and trailing white space and line breaks (Unicode's `White_Space`),
    /// Foundation's `CharacterSet.whitespacesAndNewlines`.
    func trimmingWhitespaceAndNewlines() -> String {
        trimmingScalars { $0.properties.isWhitespace }
    }
}
