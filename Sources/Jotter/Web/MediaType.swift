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

    /// Splits on `;` outside quotes.
    private static func splitParameters(_ value: String) -> [Substring] {
        var pieces: [Substring] = []
        var start = value.startIndex
        var inQuotes = false
        var index = value.startIndex
        while index < value.endIndex {
            let character = value[index]
            if character == "\"" { inQuotes.toggle() }
            if character == ";" && !inQuotes {
                pieces.append(value[start..<index])
                start = value.index(after: index)
            }
            index = value.index(after: index)
        }
        pieces.append(value[start...])
        return pieces
    }
}
