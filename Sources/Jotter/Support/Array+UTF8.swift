/// Appending text to a byte buffer in one copy. `append(contentsOf: "…".utf8)` copies a `String.UTF8View`
/// element by element through the generic sequence path: about 165 instructions for a short literal under
/// callgrind, where a buffer copy is a few dozen. Log lines and mail messages are built this way.
extension Array where Element == UInt8 {
    /// Appends a literal's UTF-8 bytes.
    mutating func append(_ literal: StaticString) {
        literal.withUTF8Buffer { append(contentsOf: $0) }
    }

    /// Appends `text`'s UTF-8 bytes.
    mutating func append(utf8 text: String) {
        var text = text
        text.withUTF8 { append(contentsOf: $0) }
    }
}
