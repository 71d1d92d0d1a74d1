import CQRencode

/// A QR code drawn for a terminal with Unicode half blocks (two modules per character cell), dark
/// modules as spaces on a light background so it scans on dark and light terminals alike.
public enum QRCode {
    /// The lines of the code for `text`, with a quiet zone; nil if libqrencode cannot encode it.
    public static func terminalLines(_ text: String) -> [String]? {
        guard let code = QRcode_encodeString(text, 0, QR_ECLEVEL_M, QR_MODE_8, 1) else { return nil }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        guard let data = code.pointee.data else { return nil }
        let quiet = 2
        let size = width + 2 * quiet
        func dark(_ row: Int, _ column: Int) -> Bool {
            let r = row - quiet, c = column - quiet
            guard r >= 0, c >= 0, r < width, c < width else { return false }
            return data[r * width + c] & 1 == 1
        }
        var lines: [String] = []
        var row = 0
        while row < size {
            var line = ""
            for column in 0..<size {
                switch (dark(row, column), dark(row + 1, column)) {
                case (false, false): line += "█"
                case (true, false): line += "▄"
                case (false, true): line += "▀"
                case (true, true): line += " "
                }
            }
            lines.append(line)
            row += 2
        }
        return lines
    }
}
