import Testing
@testable import Jotter

/// `TerminalColumns` against Python's `unicodedata` (its East Asian Width and general category), a
/// second and independent reading of Unicode's tables, over the scripts a memo's subject is written in.
@Suite struct TerminalColumnsTests {
    @Test func scalarsCountAsPythonsUnicodeTablesSay() throws {
        let ranges: [ClosedRange<UInt32>] = [
            0x20...0x7E, 0xA0...0x24F, 0x300...0x36F, 0x370...0x52F, 0x590...0x6FF, 0x900...0x97F, 0xE00...0xE7F,
            0x1100...0x11FF, 0x2000...0x206F, 0x2E80...0x303F, 0x3040...0x30FF, 0x3100...0x33FF, 0x3400...0x4DBF,
            0x4E00...0x9FFF, 0xA960...0xA97F, 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE00...0xFE6F, 0xFF00...0xFFEF,
            0x1F300...0x1F64F, 0x1F680...0x1F6FF, 0x1F900...0x1F9FF, 0x20000...0x2A6DF,
        ]
        // Scalars both versions of Unicode assign (Python's may be older than Swift's): unassigned ones
        // and those new since are left out by Python's own category.
        let script = """
            import sys, unicodedata
            out = []
            for line in sys.stdin:
                low, high = (int(x, 16) for x in line.split())
                for value in range(low, high + 1):
                    c = chr(value)
                    category = unicodedata.category(c)
                    if category in ('Cn', 'Cs', 'Co'):
                        continue
                    width = 0 if category in ('Mn', 'Me', 'Cf') or 0x1160 <= value <= 0x11FF else \\
                        2 if unicodedata.east_asian_width(c) in ('W', 'F') else 1
                    out.append('%x %d' % (value, width))
            sys.stdout.write('\\n'.join(out) + '\\n')
            """
        let input = ranges.map { String($0.lowerBound, radix: 16) + " " + String($0.upperBound, radix: 16) }
            .joined(separator: "\n") + "\n"
        let lines = try Python.run(script, input: Array(input.utf8)).split(separator: "\n")
        #expect(lines.count > 80_000)
        var mismatches: [String] = []
        for line in lines {
            let parts = line.split(separator: " ")
            guard let value = UInt32(parts[0], radix: 16), let scalar = Unicode.Scalar(value),
                  scalar.properties.generalCategory != .unassigned else { continue }
            let expected = Int(parts[1]) ?? -1
            let ours = TerminalColumns.count(Character(scalar))
            if ours != expected { mismatches.append("U+\(parts[0]) \(ours) against \(expected)") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) differ: \(mismatches.prefix(20))")
    }

    @Test func graphemesAndPrefixes() {
        #expect(TerminalColumns.count("buy milk") == 8)
        #expect(TerminalColumns.count("日本語のメモ") == 12)
        #expect(TerminalColumns.count("café") == 4 && TerminalColumns.count("cafe\u{301}") == 4)
        #expect(TerminalColumns.count("👍🏽") == 2 && TerminalColumns.count("🇫🇷") == 2 && TerminalColumns.count("❤️") == 2)
        #expect(TerminalColumns.count("👩‍👩‍👧") == 2)
        #expect(TerminalColumns.count("한국어") == 6)
        #expect(TerminalColumns.prefix("日本語のメモ", columns: 5) == "日本")
        #expect(TerminalColumns.prefix("ab日本", columns: 3) == "ab")
    }
}
