// TEMPORARY until the qr-polarity branch lands.
extension QRCode {
    static func svg(_ text: String) -> String? { "<svg></svg>" }
}
