import CCrypto
import Glibc

/// An OpenSSL `X509` certificate, owned: freed on release.
final class X509Certificate {
    /// The `X509 *`; valid as long as this object lives.
    let handle: OpaquePointer

    init(owning handle: OpaquePointer) {
        self.handle = handle
    }

    deinit {
        X509_free(handle)
    }

    /// The first certificate in `pem`; nil if it holds none.
    convenience init?(pem: String) {
        let certificate: OpaquePointer? = OpenSSLBIO.reading(pem) { PEM_read_bio_X509($0, nil, nil, nil) }
        guard let certificate else {
            ERR_clear_error()
            return nil
        }
        self.init(owning: certificate)
    }

    /// The certificate as PEM.
    func pem() throws -> String {
        guard let text = OpenSSLBIO.writing({ PEM_write_bio_X509($0, handle) }) else {
            throw CertificateFiles.Failure.create(step: "encode certificate")
        }
        return text
    }

    /// The certificate's DER encoding (what fingerprints are taken of, and what Android installs).
    var der: [UInt8] {
        let length = i2d_X509(handle, nil)
        guard length > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        bytes.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = i2d_X509(handle, &cursor)  // advances `cursor`, which is why it is a copy
        }
        return bytes
    }

    /// SHA-256 of `der` as `AB:CD:…`, the form browsers and phones show.
    static func fingerprint(of der: [UInt8]) -> String {
        SHA256.hash(der).map { byte in
            let hex = String(byte, radix: 16, uppercase: true)
            return byte < 16 ? "0" + hex : hex
        }.joined(separator: ":")
    }

    // MARK: Validity

    /// Seconds from `now` (Unix time) to the end of validity; negative once expired.
    func secondsUntilExpiry(from now: Int64) -> Int64? {
        Self.seconds(from: now, to: X509_get0_notAfter(handle))
    }

    /// Seconds from the start of validity to `now`; negative while not yet valid.
    func secondsSinceStart(at now: Int64) -> Int64? {
        Self.seconds(from: now, to: X509_get0_notBefore(handle)).map { -$0 }
    }

    /// notAfter − notBefore, in seconds.
    var lifetimeSeconds: Int64? {
        Self.seconds(between: X509_get0_notBefore(handle), and: X509_get0_notAfter(handle))
    }

    private static func seconds(from now: Int64, to time: UnsafePointer<ASN1_TIME>?) -> Int64? {
        guard let reference = ASN1_TIME_set(nil, time_t(now)) else { return nil }
        defer { ASN1_TIME_free(reference) }
        return seconds(between: UnsafePointer(reference), and: time)
    }

    /// `ASN1_TIME_diff`: days and seconds from `start` to `end` (both signed alike).
    private static func seconds(between start: UnsafePointer<ASN1_TIME>?,
                                and end: UnsafePointer<ASN1_TIME>?) -> Int64? {
        guard let start, let end else { return nil }
        var days: Int32 = 0, seconds: Int32 = 0
        guard ASN1_TIME_diff(&days, &seconds, start, end) == 1 else {
            ERR_clear_error()
            return nil
        }
        return Int64(days) * 86_400 + Int64(seconds)
    }

    // MARK: Names and issuer

    /// Whether `key` is this certificate's private key.
    func matches(_ key: PrivateKey) -> Bool {
        let matched = X509_check_private_key(handle, key.handle) == 1
        if !matched { ERR_clear_error() }
        return matched
    }

    /// Whether `issuer` signed this certificate (names, key identifiers and the signature itself).
    func isIssued(by issuer: X509Certificate) -> Bool {
        guard X509_check_issued(issuer.handle, handle) == X509_V_OK,
              let key = X509_get0_pubkey(issuer.handle), X509_verify(handle, key) == 1 else {
            ERR_clear_error()
            return false
        }
        return true
    }

    /// Whether this is a CA certificate (`basicConstraints` CA:TRUE).
    var isAuthority: Bool {
        X509_check_ca(handle) == 1
    }

    /// Whether the subject alternative names hold the DNS name `name` exactly (the subject's CN is not
    /// consulted: clients ignore it).
    func covers(dnsName name: String) -> Bool {
        X509_check_host(handle, name, name.utf8.count, UInt32(X509_CHECK_FLAG_NEVER_CHECK_SUBJECT), nil) == 1
    }

    /// Whether the subject alternative names hold the IP address `address` (v4 or v6 text).
    func covers(address: String) -> Bool {
        X509_check_ip_asc(handle, address, 0) == 1
    }

    /// Whether this CA's name constraints allow a certificate for `alternativeName` (`DNS:…`, `IP:…`),
    /// judged by OpenSSL's own matcher on a throwaway certificate naming only that.
    func permits(_ alternativeName: String) -> Bool {
        guard let raw = X509_get_ext_d2i(handle, NID_name_constraints, nil, nil) else { return true }
        let constraints = raw.assumingMemoryBound(to: NAME_CONSTRAINTS.self)
        defer { NAME_CONSTRAINTS_free(constraints) }
        guard let probe = X509_new() else { return false }
        defer { X509_free(probe) }
        guard jotter_x509_add_extension(probe, probe, NID_subject_alt_name, alternativeName) == 1 else {
            ERR_clear_error()
            return false
        }
        // NAME_CONSTRAINTS_check reads the names OpenSSL caches from the extensions; this fills that cache.
        _ = X509_get_extension_flags(probe)
        return NAME_CONSTRAINTS_check(probe, constraints) == X509_V_OK
    }
}

@available(*, unavailable) extension X509Certificate: Sendable {}
