/// A parsed `type/subtype; name=value; …` header value (Content-Type, Content-Disposition).
struct MediaType {
    /// The lowercased `type/subtype` (or disposition type).
    var type: String
    /// Parameters, names lowercased, quotes removed.
    var parameters: [String: String] = [:]

    init(_ value: String) {
        var pieces = MediaType.splitParameters(value)
        type = pieces.isEmpty ? "" : String(pieces.removeFirst().trimmingCharacters(in: " \t")).lowercased()
        for piece in pieces {
            guard let equals = piece.firstIndex(of: "=") else { continue }
            let name = piece[..<equals].trimmingCharacters(in: " \t").lowercased()
            var value = piece[piece.index(after: equals)...].trimmingCharacters(in: " \t")
            if value.count >= 2 && value.hasPrefix("\"") && value.hasSuffix("\"") {
                value = value.dropFirst().dropLast()
            }
            parameters[name] = String(value).replacingLiterally("\\\"", with: "\"")
        }
    }

    /// Splits on `;` outside quotes. By byte: both are ASCII, and a header value is bytes (a quote
    /// followed by a combining mark is still a quote; by `Character` it was not).
    private static func splitParameters(_ value: String) -> [Substring] {
        var pieces: [Substring] = []
        let bytes = value.utf8
        var start = bytes.startIndex
        var inQuotes = false
        var index = bytes.startIndex
        while index < bytes.endIndex {
            switch bytes[index] {
            case UInt8(ascii: "\""): inQuotes.toggle()
            case UInt8(ascii: ";") where !inQuotes:
                pieces.append(value[start..<index])
                start = bytes.index(after: index)
            default: break
            }
            bytes.formIndex(after: &index)
        }
        pieces.append(value[start...])
        return pieces
    }
}
