import Foundation
import Testing
@testable import Jotter

/// The pairing QR code, read back by a real decoder (zbar): from the terminal drawing on a dark and on
/// a light terminal, and from the page's SVG rendered by librsvg.
@Suite struct QRCodeTests {
    static let link = "https://192.168.1.23:7373/#pair=Qm9vdHN0cmFwLXRva2VuLTAxMjM0NTY3ODk"

    /// Paints terminal lines the way a terminal does: cells without explicit colours take the
    /// terminal's defaults (`darkTerminal` decides which), an upper half block is foreground above and
    /// background below. Returns a PGM image, 8 pixels per module.
    static func paint(_ lines: [String], darkTerminal: Bool) -> [UInt8] {
        let defaultForeground: UInt8 = darkTerminal ? 230 : 20, defaultBackground: UInt8 = darkTerminal ? 20 : 230
        var rows: [[UInt8]] = []
        for line in lines {
            var foreground = defaultForeground, background = defaultBackground
            var upper: [UInt8] = [], lower: [UInt8] = []
            var scalars = Array(line.unicodeScalars)[...]
            while let scalar = scalars.first {
                scalars = scalars.dropFirst()
                if scalar == "\u{1B}" {
                    // CSI parameters up to the final 'm'.
                    var parameters = ""
                    scalars = scalars.dropFirst()  // "["
                    while let next = scalars.first, next != "m" {
                        parameters.unicodeScalars.append(next)
                        scalars = scalars.dropFirst()
                    }
                    scalars = scalars.dropFirst()
                    let codes = parameters.split(separator: ";").compactMap { Int($0) }
                    var index = 0
                    while index < codes.count {
                        switch codes[index] {
                        case 0: foreground = defaultForeground; background = defaultBackground
                        case 38 where index + 2 < codes.count: foreground = level(codes[index + 2]); index += 2
                        case 48 where index + 2 < codes.count: background = level(codes[index + 2]); index += 2
                        default: break
                        }
                        index += 1
                    }
                    continue
                }
                switch scalar {
                case "▀": upper.append(foreground); lower.append(background)
                case "▄": upper.append(background); lower.append(foreground)
                case "█": upper.append(foreground); lower.append(foreground)
                default: upper.append(background); lower.append(background)
                }
            }
            rows.append(upper)
            rows.append(lower)
        }
        let scale = 8, width = (rows.map(\.count).max() ?? 0) * scale, height = rows.count * scale
        var image = Array("P5\n\(width) \(height)\n255\n".utf8)
        for row in rows {
            let line = row.flatMap { Array(repeating: $0, count: scale) }
                + Array(repeating: defaultBackground, count: width - row.count * scale)
            for _ in 0..<scale { image += line }
        }
        return image
    }

    /// A 256-colour index as a grey level (only black 16 and white 231 are expected).
    static func level(_ index: Int) -> UInt8 { index == 231 || index == 15 || index == 7 ? 255 : 0 }

    /// What zbarimg reads in the image at `path`.
    static func decode(_ path: String) throws -> String {
        let finished = try LiveServerTests.JotterBinary.run(["--raw", "-q", path], executable: "/usr/bin/zbarimg")
        #expect(finished.status == 0, "zbarimg found no code")
        return finished.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(arguments: [true, false])
    func terminalCodeScansOnDarkAndLightTerminals(darkTerminal: Bool) throws {
        let lines = try #require(QRCode.terminalLines(Self.link))
        #expect(lines.allSatisfy { $0.hasSuffix("\u{1B}[0m") }, "every line resets its colours")
        let directory = TemporaryDirectory()
        let path = directory.file("code.pgm")
        try Data(Self.paint(lines, darkTerminal: darkTerminal)).write(to: URL(fileURLWithPath: path))
        #expect(try Self.decode(path) == Self.link)
    }

    @Test func svgCodeScansWhenRendered() throws {
        let svg = try #require(QRCode.svg(Self.link))
        #expect(svg.hasPrefix("<svg "))
        #expect(svg.contains("role=\"img\""))
        #expect(!svg.contains("pair="), "the link itself is not in the markup")
        let directory = TemporaryDirectory()
        try Data(svg.utf8).write(to: URL(fileURLWithPath: directory.file("code.svg")))
        let rendered = try LiveServerTests.JotterBinary.run(
            ["-w", "400", "-b", "white", "-o", directory.file("code.png"), directory.file("code.svg")],
            executable: "/usr/bin/rsvg-convert")
        #expect(rendered.status == 0)
        #expect(try Self.decode(directory.file("code.png")) == Self.link)
    }

    @Test func codeHasTheStandardQuietZone() throws {
        let code = try #require(QRCode(Self.link))
        for index in 0..<QRCode.quietZone {
            #expect(!(0..<code.size + 8).contains { code.isDark(index, $0) || code.isDark($0, index) })
        }
        #expect(code.isDark(QRCode.quietZone, QRCode.quietZone), "a finder pattern's corner")
    }
}
