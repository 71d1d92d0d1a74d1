/// A pairing link as eight characters to type (`K7Q2-M9XD`): for a phone that cannot open the link —
/// an app added to the home screen has no address bar, and a camera may not read QR codes. Crockford's
/// base 32 (no I, L, O or U), so what is read aloud or misread as 0/O or 1/I/L still pairs: 40 random
/// bits, one use, for the link's 10 minutes, behind the same lockout as a link's token.
enum PairingCode {
    static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)
    static let length = 8

    /// Eight random characters of the alphabet.
    static func random() throws -> String {
        let bytes = try SecureRandom.bytes(count: 5)
        var bits: UInt64 = 0
        for byte in bytes { bits = bits << 8 | UInt64(byte) }
        var code = ""
        for index in (0..<length).reversed() {
            code.unicodeScalars.append(Unicode.Scalar(alphabet[Int((bits >> (5 * UInt64(index))) & 31)]))
        }
        return code
    }

    /// `K7Q2M9XD` as people read it: `K7Q2-M9XD`.
    static func formatted(_ code: String) -> String {
        String(code.prefix(4)) + "-" + String(code.dropFirst(4))
    }

    /// What was typed, as a code: case, spaces and dashes ignored, O read as 0 and I or L as 1. Nil if
    /// it is not eight characters of the alphabet (then it is a link's token, or nothing).
    static func normalized(_ typed: String) -> String? {
        var code = ""
        for byte in typed.utf8 {
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "-"), 0x09: continue
            case UInt8(ascii: "o"), UInt8(ascii: "O"): code.append("0")
            case UInt8(ascii: "i"), UInt8(ascii: "I"), UInt8(ascii: "l"), UInt8(ascii: "L"): code.append("1")
            default:
                let upper = byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z") ? byte - 32 : byte
                guard alphabet.contains(upper) else { return nil }
                code.unicodeScalars.append(Unicode.Scalar(upper))
            }
            if code.utf8.count > length { return nil }
        }
        return code.utf8.count == length ? code : nil
    }
}
