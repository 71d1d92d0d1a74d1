/// How many columns of a terminal text takes, as terminals count them (`wcwidth`'s rules, without
/// depending on the locale): a wide East Asian character or an emoji takes two, a combining mark or a
/// format character none, anything else one. `jotter history` aligns its table by this, so a Japanese
/// or an emoji subject does not push the columns after it out of line.
enum TerminalColumns {
    /// The columns `text` takes.
    static func count(_ text: some StringProtocol) -> Int {
        text.reduce(0) { $0 + count($1) }
    }

    /// The columns one character (a grapheme: a base, its marks, an emoji sequence) takes.
    static func count(_ character: Character) -> Int {
        let scalars = character.unicodeScalars
        // An emoji shown as one (🙂, 👍🏽, 🇫🇷, ❤️ with its variation selector) is two columns, however many
        // scalars make it up.
        if scalars.contains(where: { $0.properties.isEmojiPresentation })
            || (scalars.count > 1 && scalars.contains { $0.value == 0xFE0F }) { return 2 }
        return scalars.reduce(0) { $0 + count($1) }
    }

    /// The columns one scalar takes on its own.
    static func count(_ scalar: Unicode.Scalar) -> Int {
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: break
        }
        let value = scalar.value
        if (0x1160...0x11FF).contains(value) { return 0 }  // Hangul vowels and finals join the syllable before
        return wide.contains { $0.contains(value) } ? 2 : 1
    }

    /// East Asian Wide and Fullwidth blocks (Unicode's EastAsianWidth.txt, W and F, as wcwidth groups them).
    private static let wide: [ClosedRange<UInt32>] = [
        0x1100...0x115F, 0x2329...0x232A, 0x2E80...0x303E, 0x3041...0x3247, 0x3250...0x33FF, 0x3400...0x4DBF,
        0x4E00...0x9FFF, 0xA000...0xA4CF, 0xA960...0xA97F, 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE10...0xFE19,
        0xFE30...0xFE6F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x20000...0x2FFFD, 0x30000...0x3FFFD,
    ]

    /// The longest start of `text` that fits in `columns` columns.
    static func prefix(_ text: String, columns: Int) -> String {
        var used = 0
        var end = text.startIndex
        for index in text.indices {
            let width = count(text[index])
            guard used + width <= columns else { break }
            used += width
            end = text.index(after: index)
        }
        return String(text[..<end])
    }
}
