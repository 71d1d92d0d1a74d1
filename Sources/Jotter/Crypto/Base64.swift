import CCrypto

/// Standard base64 (RFC 4648, with padding, one line), by OpenSSL's `EVP_EncodeBlock`.
enum Base64 {
    /// `bytes` in base64.
    static func encode(_ bytes: [UInt8]) -> String {
        guard !bytes.isEmpty else { return "" }
        // EVP_EncodeBlock writes 4 characters per 3 bytes (rounded up) and a NUL.
        var output = [UInt8](repeating: 0, count: (bytes.count + 2) / 3 * 4 + 1)
        let written = output.withUnsafeMutableBufferPointer { out in
            bytes.withUnsafeBufferPointer { input in
                EVP_EncodeBlock(out.baseAddress, input.baseAddress, Int32(input.count))
            }
        }
        return String(decoding: output.prefix(Int(max(written, 0))), as: UTF8.self)
    }
}
