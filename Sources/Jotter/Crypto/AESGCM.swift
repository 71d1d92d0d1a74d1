import CCrypto

/// AES-256-GCM through OpenSSL's EVP interface, shaped like CryptoKit's `AES.GCM`.
public enum AESGCM {
    static let nonceByteCount = 12
    static let tagByteCount = 16

    /// The cipher, fetched from OpenSSL's default provider once. With `EVP_aes_256_gcm()` every init
    /// fetches it again (a locked lookup that parses a property query), which cost more than sealing a
    /// memo. A fetched `EVP_CIPHER` is immutable and shared by every thread, so it is never freed.
    nonisolated(unsafe) private static let cipher: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)

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
        try seal(plaintext, using: key, nonce: try SecureRandom.bytes(count: nonceByteCount),
                 authenticating: associatedData)
    }

    /// `seal(_:using:authenticating:)` with a nonce the caller drew from `SecureRandom` itself (with
    /// other random bytes it needs, in one call). A nonce must be fresh random bytes, never reused.
    static func seal(_ plaintext: [UInt8], using key: SymmetricKey, nonce: [UInt8],
                     authenticating associatedData: [UInt8]) throws -> SealedBox {
        guard nonce.count == nonceByteCount else { throw CryptoError.sealFailed }
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError.sealFailed }
        defer { EVP_CIPHER_CTX_free(context) }

        var output = [UInt8](repeating: 0, count: nonceByteCount + plaintext.count + tagByteCount)
        output.replaceSubrange(0..<nonceByteCount, with: nonce)
        let ok: Bool = key.withUnsafeBytes { keyBytes in
            output.withUnsafeMutableBufferPointer { out in
                guard let outBase = out.baseAddress,
                      EVP_EncryptInit_ex(context, cipher ?? EVP_aes_256_gcm(), nil,
                                         keyBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), nonce) == 1
                else { return false }
                var length: Int32 = 0
                if !associatedData.isEmpty {
                    guard EVP_EncryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1
                    else { return false }
                }
                let body = outBase + nonceByteCount
                if !plaintext.isEmpty {
                    guard EVP_EncryptUpdate(context, body, &length, plaintext, Int32(plaintext.count)) == 1
                    else { return false }
                }
                guard EVP_EncryptFinal_ex(context, body + plaintext.count, &length) == 1 else { return false }
                return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagByteCount),
                                           body + plaintext.count) == 1
            }
        }
        guard ok else { throw CryptoError.sealFailed }
        return try SealedBox(combined: output)
    }

    /// Decrypts `box`, failing with `.authenticationFailure` if any byte or the associated data differs.
    public static func open(_ box: SealedBox, using key: SymmetricKey,
                            authenticating associatedData: [UInt8] = []) throws -> [UInt8] {
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError.authenticationFailure }
        defer { EVP_CIPHER_CTX_free(context) }
        let combined = box.combined
        let cipherCount = combined.count - nonceByteCount - tagByteCount
        var plaintext = [UInt8](repeating: 0, count: cipherCount)
        let ok: Bool = key.withUnsafeBytes { keyBytes in
            combined.withUnsafeBufferPointer { input in
                plaintext.withUnsafeMutableBufferPointer { out in
                    guard let base = input.baseAddress,
                          EVP_DecryptInit_ex(context, cipher ?? EVP_aes_256_gcm(), nil,
                                             keyBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), base) == 1
                    else { return false }
                    var length: Int32 = 0
                    if !associatedData.isEmpty {
                        guard EVP_DecryptUpdate(context, nil, &length, associatedData,
                                                Int32(associatedData.count)) == 1 else { return false }
                    }
                    if cipherCount > 0 {
                        guard EVP_DecryptUpdate(context, out.baseAddress, &length, base + nonceByteCount,
                                                Int32(cipherCount)) == 1 else { return false }
                    }
                    let tag = UnsafeMutableRawPointer(mutating: base + nonceByteCount + cipherCount)
                    guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagByteCount), tag) == 1
                    else { return false }
                    var finalLength: Int32 = 0
                    var scratch: UInt8 = 0
                    return withUnsafeMutablePointer(to: &scratch) { scratchPointer in
                        EVP_DecryptFinal_ex(context, out.baseAddress ?? scratchPointer, &finalLength) == 1
                    }
                }
            }
        }
        guard ok else {
            plaintext.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
            throw CryptoError.authenticationFailure
        }
        return plaintext
    }
}
