import CCrypto
import Synchronization

/// An AES-256-GCM key prepared once for many messages: OpenSSL expands the key (its round keys and
/// GHASH table) when a context is first keyed, and every message after that sets only its nonce.
/// Keying a context for each message cost more than the rest of sealing a short memo (callgrind, a
/// memo's two seals: 12,400 instructions with a context keyed for each, 9,000 with the context kept;
/// see bench/README.md).
///
/// One context seals and one opens, each made on first use and used by one thread at a time (a lock
/// each: sealing a memo holds it for microseconds). Freeing a context wipes its key schedule.
final class AESGCMKey: Sendable {
    private let key: SymmetricKey
    private let sealing = Mutex<OpaquePointer?>(nil)
    private let opening = Mutex<OpaquePointer?>(nil)

    init(_ key: SymmetricKey) {
        self.key = key
    }

    deinit {
        sealing.withLock { EVP_CIPHER_CTX_free($0) }
        opening.withLock { EVP_CIPHER_CTX_free($0) }
    }

    /// Encrypts and authenticates `plaintext` under a fresh random nonce, binding `associatedData` (not
    /// encrypted) to it.
    func seal(_ plaintext: [UInt8], authenticating associatedData: [UInt8]) throws -> AESGCM.SealedBox {
        try seal(plaintext, nonce: SecureRandom.bytes(count: AESGCM.nonceByteCount), authenticating: associatedData)
    }

    /// Encrypts and authenticates `plaintext` under `nonce` (fresh random bytes, never reused), binding
    /// `associatedData` (not encrypted) to it.
    func seal(_ plaintext: [UInt8], nonce: [UInt8], authenticating associatedData: [UInt8]) throws -> AESGCM.SealedBox {
        let nonceCount = AESGCM.nonceByteCount, tagCount = AESGCM.tagByteCount
        guard nonce.count == nonceCount else { throw CryptoError.sealFailed }
        var output = [UInt8](repeating: 0, count: nonceCount + plaintext.count + tagCount)
        output.replaceSubrange(0..<nonceCount, with: nonce)
        let ok: Bool = sealing.withLock { context in
            guard let context = keyed(&context, encrypting: true) else { return false }
            return output.withUnsafeMutableBufferPointer { out in
                guard let outBase = out.baseAddress, EVP_EncryptInit_ex(context, nil, nil, nil, nonce) == 1 else {
                    return false
                }
                var length: Int32 = 0
                if !associatedData.isEmpty {
                    guard EVP_EncryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1
                    else { return false }
                }
                let body = outBase + nonceCount
                if !plaintext.isEmpty {
                    guard EVP_EncryptUpdate(context, body, &length, plaintext, Int32(plaintext.count)) == 1
                    else { return false }
                }
                guard EVP_EncryptFinal_ex(context, body + plaintext.count, &length) == 1 else { return false }
                return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagCount), body + plaintext.count) == 1
            }
        }
        guard ok else { throw CryptoError.sealFailed }
        return try AESGCM.SealedBox(combined: output)
    }

    /// Decrypts `box`, failing with `.authenticationFailure` if any byte or the associated data differs.
    func open(_ box: AESGCM.SealedBox, authenticating associatedData: [UInt8]) throws -> [UInt8] {
        let nonceCount = AESGCM.nonceByteCount, tagCount = AESGCM.tagByteCount
        let combined = box.combined
        let cipherCount = combined.count - nonceCount - tagCount
        var plaintext = [UInt8](repeating: 0, count: cipherCount)
        let ok: Bool = opening.withLock { context in
            guard let context = keyed(&context, encrypting: false) else { return false }
            return combined.withUnsafeBufferPointer { input in
                plaintext.withUnsafeMutableBufferPointer { out in
                    guard let base = input.baseAddress, EVP_DecryptInit_ex(context, nil, nil, nil, base) == 1 else {
                        return false
                    }
                    var length: Int32 = 0
                    if !associatedData.isEmpty {
                        guard EVP_DecryptUpdate(context, nil, &length, associatedData,
                                                Int32(associatedData.count)) == 1 else { return false }
                    }
                    if cipherCount > 0 {
                        guard EVP_DecryptUpdate(context, out.baseAddress, &length, base + nonceCount,
                                                Int32(cipherCount)) == 1 else { return false }
                    }
                    let tag = UnsafeMutableRawPointer(mutating: base + nonceCount + cipherCount)
                    guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagCount), tag) == 1 else {
                        return false
                    }
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

    /// `context`, made and keyed (for encrypting or decrypting) if it is not yet; nil if OpenSSL fails,
    /// and then the next call tries again.
    private func keyed(_ context: inout OpaquePointer?, encrypting: Bool) -> OpaquePointer? {
        if let context { return context }
        guard let made = EVP_CIPHER_CTX_new() else { return nil }
        let cipher = AESGCM.cipher ?? EVP_aes_256_gcm()
        let ok = key.withUnsafeBytes { bytes in
            let key = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self)
            return encrypting ? EVP_EncryptInit_ex(made, cipher, nil, key, nil) == 1
                              : EVP_DecryptInit_ex(made, cipher, nil, key, nil) == 1
        }
        guard ok else {
            EVP_CIPHER_CTX_free(made)
            return nil
        }
        context = made
        return made
    }
}
