/// Search and replace by UTF-8 bytes (Foundation's `.literal` comparison, without Foundation): no
/// grouping into Characters and no canonical equivalence, so an escape like `%` → `%%` applies even
/// where a combining mark follows the `%`, and `\r` is found inside `\r\n`.
extension StringProtocol {
    /// The first range where `target`'s bytes appear; nil when they do not (or `target` is empty).
    func firstLiteralRange(of target: String) -> Range<String.Index>? {
        let text = Substring(self).utf8
        let needle = Array(target.utf8)
        guard let head = needle.first else { return nil }
        var start = text.startIndex
        while let candidate = text[start...].firstIndex(of: head) {
            var position = candidate
            var matched = 0
            while matched < needle.count, position < text.endIndex, text[position] == needle[matched] {
                text.formIndex(after: &position)
                matched += 1
            }
            if matched == needle.count { return candidate..<position }
            start = text.index(after: candidate)
        }
        return nil
    }

    /// Every occurrence of `target` (left to right, not overlapping) replaced with `replacement`.
    func replacingLiterally(_ target: String, with replacement: String) -> String {
        var rest = Substring(self)
        guard var match = rest.firstLiteralRange(of: target) else { return String(rest) }
        var result = ""
        result.reserveCapacity(rest.utf8.count + replacement.utf8.count)
        while true {
            result += rest[..<match.lowerBound]
            result += replacement
            rest = rest[match.upperBound...]
            guard let next = rest.firstLiteralRange(of: target) else { break }
            match = next
        }
        result += rest
        return result
    }
}
