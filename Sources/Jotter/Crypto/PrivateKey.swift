import CCrypto

/// An OpenSSL `EVP_PKEY` (ECDSA P-256 for the local CA and the server), owned: freed on release.
final class PrivateKey {
    /// The `EVP_PKEY *`; valid as long as this object lives.
    let handle: OpaquePointer

    private init(owning handle: OpaquePointer) {
        self.handle = handle
    }

    deinit {
        EVP_PKEY_free(handle)
    }

    /// A fresh ECDSA P-256 key.
    static func p256() throws -> PrivateKey {
        guard let key = jotter_ec_p256_key() else { throw CertificateFiles.Failure.create(step: "key") }
        return PrivateKey(owning: key)
    }

    /// The key in `pem` (PKCS#8 or traditional); nil if it holds none.
    convenience init?(pem: String) {
        // A password callback that gives none: with NULL, OpenSSL would prompt on the terminal for an
        // encrypted key and hang a server start.
        let key: OpaquePointer? = OpenSSLBIO.reading(pem) {
            PEM_read_bio_PrivateKey($0, nil, { _, _, _, _ in 0 }, nil)
        }
        guard let key else {
            ERR_clear_error()
            return nil
        }
        self.init(owning: key)
    }

    /// The key as PKCS#8 PEM, unencrypted (the file holding it is mode 0600).
    func pem() throws -> String {
        guard let text = OpenSSLBIO.writing({ PEM_write_bio_PrivateKey($0, handle, nil, nil, 0, nil, nil) }) else {
            throw CertificateFiles.Failure.create(step: "encode key")
        }
        return text
    }
}

@available(*, unavailable) extension PrivateKey: Sendable {}
