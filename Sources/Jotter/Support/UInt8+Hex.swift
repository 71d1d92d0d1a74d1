extension UInt8 {
    /// The value of an ASCII hex digit (`0`–`9`, `a`–`f`, `A`–`F`), else nil: for percent-escapes in
    /// URLs, paths and forms, and `\u` escapes in JSON.
    var hexDigitValue: UInt8? {
        switch self {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return self - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return self - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return self - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
