/// A minimal streaming JSON writer (no Foundation: fast, and exact about escaping).
public struct JSONWriter {
    /// The JSON text so far.
    public private(set) var bytes: [UInt8] = []
    private var needsComma = false

    /// An empty writer.
    public init() {}

    /// `{ … }`.
    public mutating func object(_ body: (inout JSONWriter) -> Void) {
        separate()
        bytes.append(0x7B)
        needsComma = false
        body(&self)
        bytes.append(0x7D)
        needsComma = true
    }

    /// `[ … ]`.
    public mutating func array(_ body: (inout JSONWriter) -> Void) {
        separate()
        bytes.append(0x5B)
        needsComma = false
        body(&self)
        bytes.append(0x5D)
        needsComma = true
    }

    /// The `"error": {"code", "message"}` member every error answer has, with `more` members in it after.
    public mutating func error(code: String, message: String, _ more: (inout JSONWriter) -> Void = { _ in }) {
        key("error")
        object { json in
            json.field("code", code)
            json.field("message", message)
            more(&json)
        }
    }

    /// An object key; the value follows.
    public mutating func key(_ key: String) {
        separate()
        string(key)
        bytes.append(0x3A)
        needsComma = false
    }

    /// `"key": "value"` (or `null`).
    public mutating func field(_ key: String, _ value: String?) {
        self.key(key)
        value.map { self.value($0) } ?? null()
    }

    /// `"key": 42` (or `null`).
    public mutating func field(_ key: String, _ value: Int64?) {
        self.key(key)
        value.map { self.value($0) } ?? null()
    }

    /// `"key": true|false`.
    public mutating func field(_ key: String, _ value: Bool) {
        self.key(key)
        separate()
        bytes += (value ? "true" : "false").utf8
        needsComma = true
    }

    /// A string value.
    public mutating func value(_ text: String) {
        separate()
        string(text)
        needsComma = true
    }

    /// An integer value.
    public mutating func value(_ number: Int64) {
        separate()
        bytes += String(number).utf8
        needsComma = true
    }

    /// `null`.
    public mutating func null() {
        separate()
        bytes += "null".utf8
        needsComma = true
    }

    private mutating func separate() {
        if needsComma { bytes.append(0x2C) }
    }

    private mutating func string(_ text: String) {
        let hex = Array("0123456789abcdef".utf8)
        bytes.append(0x22)
        for byte in text.utf8 {
            switch byte {
            case 0x22: bytes += [0x5C, 0x22]
            case 0x5C: bytes += [0x5C, 0x5C]
            case 0x0A: bytes += [0x5C, 0x6E]
            case 0x0D: bytes += [0x5C, 0x72]
            case 0x09: bytes += [0x5C, 0x74]
            case 0x3C, 0x3E, 0x26, 0..<0x20:  // control characters, and <>& so JSON is safe in any context
                bytes += [0x5C, 0x75, 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            default: bytes.append(byte)
            }
        }
        bytes.append(0x22)
    }
}
