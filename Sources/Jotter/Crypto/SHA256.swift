import CCrypto

/// SHA-256.
public enum SHA256 {
    /// The SHA-256 digest of `bytes`.
    public static func hash<Bytes: ContiguousBytes>(_ bytes: Bytes) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBytes { input in
            output.withUnsafeMutableBufferPointer { out in
                _ = CCrypto.SHA256(input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count,
                                   out.baseAddress)
            }
        }
        return output
    }
}
