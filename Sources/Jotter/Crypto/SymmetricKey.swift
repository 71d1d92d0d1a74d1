import CCrypto

/// 32 secret bytes held in memory Jotter owns, zeroed with `OPENSSL_cleanse` when released.
///
/// `@unchecked Sendable`: the bytes are written once in `init` and only read afterwards.
public final class SymmetricKey: @unchecked Sendable {
    /// The key length AES-256 needs.
    public static let byteCount = 32

    private let storage: UnsafeMutableRawBufferPointer

    /// Copies `bytes` (exactly 32 of them) into the key.
    public init<Bytes: Collection>(bytes: Bytes) throws where Bytes.Element == UInt8 {
        guard bytes.count == Self.byteCount else { throw CryptoError.invalidKeyLength }
        storage = .allocate(byteCount: Self.byteCount, alignment: 16)
        storage.copyBytes(from: bytes)
    }

    /// A fresh key from OpenSSL's CSPRNG.
    public static func random() throws -> SymmetricKey {
        var bytes = try SecureRandom.bytes(count: byteCount)
        defer { bytes.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        return try SymmetricKey(bytes: bytes)
    }

    deinit {
        OPENSSL_cleanse(storage.baseAddress, storage.count)
        storage.deallocate()
    }

    /// Lends the key bytes to `body`; the pointer must not escape.
    public func withUnsafeBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try body(UnsafeRawBufferPointer(storage))
    }

    /// A subkey for one purpose (HMAC-SHA256 of the purpose under this key), so one secret serves
    /// encryption and keyed hashing without reusing the same key for both.
    public func derived(purpose: String) throws -> SymmetricKey {
        var bytes = HMAC.sha256(Array(purpose.utf8), key: self)
        defer { bytes.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        return try SymmetricKey(bytes: bytes)
    }
}

/// Failures of the crypto layer. They carry no key or plaintext bytes.
public enum CryptoError: Error, Equatable, Sendable {
    case invalidKeyLength
    case randomFailed
    case sealFailed
    /// Authentication failed: wrong key, tampered bytes, or a payload moved to another id.
    case authenticationFailure
    case malformedSealedBox
}

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

/// Byte buffers that can lend their storage; `[UInt8]` and `ArraySlice<UInt8>` conform.
public protocol ContiguousBytes {
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: ContiguousBytes where Element == UInt8 {}
extension ArraySlice: ContiguousBytes where Element == UInt8 {}
