import CCrypto

/// Keyed hashing (HMAC-SHA256) and constant-time comparison.
public enum HMAC {
    /// HMAC-SHA256 of `message` under `key`.
    public static func sha256(_ message: [UInt8], key: SymmetricKey) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        key.withUnsafeBytes { keyBytes in
            message.withUnsafeBufferPointer { messageBytes in
                output.withUnsafeMutableBufferPointer { out in
                    _ = CCrypto.HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count),
                                     messageBytes.baseAddress, messageBytes.count, out.baseAddress, &length)
                }
            }
        }
        return output
    }

    /// Compares two byte strings in time that depends only on their length.
    public static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        if lhs.isEmpty { return true }
        return lhs.withUnsafeBytes { l in
            rhs.withUnsafeBytes { r in CRYPTO_memcmp(l.baseAddress, r.baseAddress, l.count) == 0 }
        }
    }
}
