import CCrypto
import Glibc

extension X509Certificate {
    /// An X.509 v3 extension in OpenSSL's configuration syntax, e.g. `(NID_key_usage, "critical,keyCertSign")`.
    struct Extension {
        let nid: Int32
        let value: String
    }

    /// Signs a new certificate for `key` named `commonName`, valid over `validity` (Unix seconds),
    /// carrying `extensions`; signed by `issuer` with `issuerKey`, or self-signed when `issuer` is nil.
    /// The serial number is 127 random bits.
    static func issue(commonName: String, key: PrivateKey, validity: ClosedRange<Int64>,
                      extensions: [Extension], issuer: X509Certificate?, issuerKey: PrivateKey) throws
        -> X509Certificate {
        guard let handle = X509_new() else { throw CertificateFiles.Failure.create(step: "certificate") }
        let certificate = X509Certificate(owning: handle)
        var ok = X509_set_version(handle, 2) == 1  // v3
        ok = ok && setRandomSerial(handle)
        ok = ok && ASN1_TIME_set(X509_getm_notBefore(handle), time_t(validity.lowerBound)) != nil
        ok = ok && ASN1_TIME_set(X509_getm_notAfter(handle), time_t(validity.upperBound)) != nil
        ok = ok && X509_set_pubkey(handle, key.handle) == 1
        if let subject = X509_get_subject_name(handle) {
            ok = ok && X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, commonName, -1, -1, 0) == 1
            ok = ok && X509_set_issuer_name(handle, issuer.map { X509_get_subject_name($0.handle) } ?? subject) == 1
        } else {
            ok = false
        }
        guard ok else {
            ERR_clear_error()
            throw CertificateFiles.Failure.create(step: "certificate fields")
        }
        for item in extensions {
            // The issuer is where authorityKeyIdentifier comes from; the certificate itself when self-signed.
            guard jotter_x509_add_extension(handle, issuer?.handle ?? handle, item.nid, item.value) == 1 else {
                ERR_clear_error()
                throw CertificateFiles.Failure.create(step: "extension \(String(cString: OBJ_nid2sn(item.nid)))")
            }
        }
        guard X509_sign(handle, issuerKey.handle, EVP_sha256()) > 0 else {
            ERR_clear_error()
            throw CertificateFiles.Failure.create(step: "sign")
        }
        return certificate
    }

    /// A positive, non-zero serial of 127 random bits (RFC 5280 allows 20 octets; CAs use ≥ 64 bits).
    private static func setRandomSerial(_ handle: OpaquePointer) -> Bool {
        guard let bytes = try? SecureRandom.bytes(count: 16),
              let number = BN_bin2bn(bytes, Int32(bytes.count), nil) else { return false }
        defer { BN_free(number) }
        BN_set_bit(number, 0)  // never zero
        BN_clear_bit(number, 127)  // positive
        return BN_to_ASN1_INTEGER(number, X509_get_serialNumber(handle)) != nil
    }
}
