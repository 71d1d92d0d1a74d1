import CQRencode

/// A QR code for a pairing link, drawn for a terminal or as SVG for the page. Both draw dark modules
/// dark and light modules light in explicit colours, with the standard four-module quiet zone, so the
/// code scans whatever the terminal's or the page's own colours are.
public struct QRCode: Sendable {
    /// Modules per side, without the quiet zone.
    public let size: Int
    private let modules: [Bool]

    /// The quiet zone on each side, in modules (ISO/IEC 18004 asks for four).
    static let quietZone = 4

    /// The code for `text` (byte mode, error correction M); nil if libqrencode cannot encode it.
    public init?(_ text: String) {
        guard let code = QRcode_encodeString(text, 0, QR_ECLEVEL_M, QR_MODE_8, 1) else { return nil }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        guard width > 0, let data = code.pointee.data else { return nil }
        size = width
        modules = (0..<width * width).map { data[$0] & 1 == 1 }
    }

    /// Whether the module at `row`, `column` (quiet zone included) is dark.
    func isDark(_ row: Int, _ column: Int) -> Bool {
        let r = row - Self.quietZone, c = column - Self.quietZone
        guard r >= 0, c >= 0, r < size, c < size else { return false }
        return modules[r * size + c]
    }

    /// Modules per side with the quiet zone.
    var fullSize: Int { size + 2 * Self.quietZone }

    /// Lines for a terminal: each character cell is two modules, an upper half block whose foreground
    /// is the upper module and whose background the lower, both as explicit 256-colour codes (16 black,
    /// 231 white) and reset at the end of every line. A terminal's own palette (dark or light) never
    /// shows, so the code is never drawn inverted.
    public func terminalLines() -> [String] {
        let escape = "\u{1B}["
        func colour(_ dark: Bool) -> String { dark ? "16" : "231" }
        var lines: [String] = []
        var row = 0
        while row < fullSize {
            var line = ""
            var current: (Bool, Bool)?
            for column in 0..<fullSize {
                let cell = (isDark(row, column), isDark(row + 1, column))
                if current.map({ $0 != cell }) ?? true {
                    line += escape + "38;5;" + colour(cell.0) + ";48;5;" + colour(cell.1) + "m"
                    current = cell
                }
                line += "▀"
            }
            lines.append(line + escape + "0m")
            row += 2
        }
        return lines
    }

    /// The code as an SVG image: one white square, one path of dark modules, `crispEdges` so that
    /// scaling never blurs a module into its neighbour. Markup only (no text from the link).
    public func svg(title: String = "QR code") -> String {
        let side = fullSize
        var path = ""
        for row in 0..<side {
            var column = 0
            while column < side {
                guard isDark(row, column) else {
                    column += 1
                    continue
                }
                var run = 1
                while column + run < side, isDark(row, column + run) { run += 1 }
                path += "M\(column) \(row)h\(run)v1h-\(run)z"
                column += run
            }
        }
        return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 \(side) \(side)\" "
            + "shape-rendering=\"crispEdges\" role=\"img\" aria-label=\"\(PageRoute.escapeHTML(title))\">"
            + "<rect width=\"\(side)\" height=\"\(side)\" fill=\"#fff\"/>"
            + "<path fill=\"#000\" d=\"\(path)\"/></svg>"
    }

    /// The lines for `text` in a terminal; nil if it cannot be encoded.
    public static func terminalLines(_ text: String) -> [String]? {
        QRCode(text)?.terminalLines()
    }

    /// The SVG for `text`; nil if it cannot be encoded.
    public static func svg(_ text: String) -> String? {
        QRCode(text)?.svg()
    }
}
