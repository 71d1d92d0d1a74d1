import CCrypto

/// AES-256-GCM through OpenSSL's EVP interface, shaped like CryptoKit's `AES.GCM`.
public enum AESGCM {
    static let nonceByteCount = 12
    static let tagByteCount = 16

    /// The cipher, fetched from OpenSSL's default provider once. With `EVP_aes_256_gcm()` every init
    /// fetches it again (a locked lookup that parses a property query), which cost more than sealing a
    /// memo. A fetched `EVP_CIPHER` is immutable and shared by every thread, so it is never freed.
    nonisolated(unsafe) static let cipher: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)

    /// A sealed message: `nonce ‖ ciphertext ‖ tag`, the form that is stored.
    public struct SealedBox: Sendable, Equatable {
        /// The bytes to store.
        public let combined: [UInt8]

        /// Wraps stored bytes; fails if they are too short to hold a nonce and a tag.
        public init(combined: [UInt8]) throws {
            guard combined.count >= AESGCM.nonceByteCount + AESGCM.tagByteCount else {
                throw CryptoError.malformedSealedBox
            }
            self.combined = combined
        }
    }

    /// Encrypts and authenticates `plaintext`, binding `authenticating` (not encrypted) to it.
    public static func seal(_ plaintext: [UInt8], using key: SymmetricKey,
                            authenticating associatedData: [UInt8] = []) throws -> SealedBox {
        try AESGCMKey(key).seal(plaintext, authenticating: associatedData)
    }

    /// Decrypts `box`, failing with `.authenticationFailure` if any byte or the associated data differs.
    public static func open(_ box: SealedBox, using key: SymmetricKey,
                            authenticating associatedData: [UInt8] = []) throws -> [UInt8] {
        try AESGCMKey(key).open(box, authenticating: associatedData)
    }
}
