import CCrypto

/// OpenSSL's CSPRNG.
public enum SecureRandom {
    /// `count` random bytes from `RAND_bytes`.
    public static func bytes(count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        guard ok == 1 else { throw CryptoError.randomFailed }
        return bytes
    }
}
