import CCrypto
import Glibc

/// The self-signed certificate LAN mode serves HTTPS with: ECDSA P-256, SHA-256, valid ten years,
/// naming every address the server can be reached at. Kept in the data directory so a phone that
/// trusted it once keeps trusting it.
public struct SelfSignedCertificate: Sendable {
    /// The certificate, PEM.
    public let certificatePEM: String
    /// The private key, PEM (PKCS#8).
    public let privateKeyPEM: String
    /// SHA-256 of the certificate's DER form, as `AB:CD:…` (what a browser shows).
    public let fingerprint: String

    /// Why a certificate could not be made or read.
    public enum Failure: Error, CustomStringConvertible, Sendable {
        case generate(String)
        case read(path: String)

        public var description: String {
            switch self {
            case .generate(let step): return "cannot create the HTTPS certificate (\(step))"
            case .read(let path): return "cannot read the HTTPS certificate in \(path)"
            }
        }
    }

    /// Loads `directory/cert.pem` and `directory/key.pem`, creating them (key mode 0600) if missing.
    public static func loadOrCreate(directory: String, names: [String],
                                    addresses: [String]) throws -> SelfSignedCertificate {
        try DataDirectory.makeDirectories(directory, mode: 0o700)
        let certificatePath = directory + "/cert.pem", keyPath = directory + "/key.pem"
        if let certificate = readFile(certificatePath), let key = readFile(keyPath) {
            return try SelfSignedCertificate(certificatePEM: certificate, privateKeyPEM: key)
        }
        let created = try generate(names: names, addresses: addresses)
        guard writeFile(keyPath, created.privateKeyPEM, mode: 0o600),
              writeFile(certificatePath, created.certificatePEM, mode: 0o644) else {
            throw Failure.read(path: directory)
        }
        return created
    }

    init(certificatePEM: String, privateKeyPEM: String) throws {
        self.certificatePEM = certificatePEM
        self.privateKeyPEM = privateKeyPEM
        guard let der = Self.der(fromPEM: certificatePEM) else { throw Failure.read(path: "cert.pem") }
        fingerprint = SHA256.hash(der).map { byte in
            let hex = String(byte, radix: 16, uppercase: true)
            return byte < 16 ? "0" + hex : hex
        }.joined(separator: ":")
    }

    /// A new key pair and certificate for `names` (DNS) and `addresses` (IP).
    static func generate(names: [String], addresses: [String]) throws -> SelfSignedCertificate {
        guard let key = jotter_ec_p256_key() else { throw Failure.generate("key") }
        defer { EVP_PKEY_free(key) }
        guard let certificate = X509_new() else { throw Failure.generate("certificate") }
        defer { X509_free(certificate) }
        let serial = try SecureRandom.bytes(count: 16)
        var ok = X509_set_version(certificate, 2) == 1
        if let number = BN_bin2bn(serial, Int32(serial.count), nil) {
            BN_set_bit(number, 0)  // never zero
            BN_clear_bit(number, 127)  // positive
            ok = ok && BN_to_ASN1_INTEGER(number, X509_get_serialNumber(certificate)) != nil
            BN_free(number)
        }
        ok = ok && X509_gmtime_adj(X509_getm_notBefore(certificate), -3600) != nil
        ok = ok && X509_gmtime_adj(X509_getm_notAfter(certificate), 10 * 365 * 86_400) != nil
        ok = ok && X509_set_pubkey(certificate, key) == 1
        if let name = X509_get_subject_name(certificate) {
            ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, "Jotter on this machine", -1, -1, 0) == 1
            ok = ok && X509_set_issuer_name(certificate, name) == 1
        }
        let alternatives = names.map { "DNS:\($0)" } + addresses.map { "IP:\($0)" }
        ok = ok && jotter_x509_add_extension(certificate, NID_subject_alt_name,
                                             alternatives.joined(separator: ",")) == 1
        ok = ok && jotter_x509_add_extension(certificate, NID_basic_constraints, "critical,CA:FALSE") == 1
        ok = ok && jotter_x509_add_extension(certificate, NID_ext_key_usage, "serverAuth") == 1
        ok = ok && X509_sign(certificate, key, EVP_sha256()) > 0
        guard ok else { throw Failure.generate("sign") }
        guard let certificatePEM = pem({ PEM_write_bio_X509($0, certificate) }),
              let keyPEM = pem({ PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }) else {
            throw Failure.generate("encode")
        }
        return try SelfSignedCertificate(certificatePEM: certificatePEM, privateKeyPEM: keyPEM)
    }

    private static func pem(_ write: (OpaquePointer) -> Int32) -> String? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { return nil }
        var data: UnsafeMutablePointer<CChar>?
        let count = jotter_bio_contents(bio, &data)
        guard count > 0, let data else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
    }

    private static func der(fromPEM pem: String) -> [UInt8]? {
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        return Base64.decode(body)
    }

    private static func readFile(_ path: String) -> String? {
        guard let bytes = try? FileIO.read(path: path, limit: 1 << 20), !bytes.isEmpty else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func writeFile(_ path: String, _ text: String, mode: mode_t) -> Bool {
        (try? FileIO.writeFile(path, Array(text.utf8), mode: mode)) != nil
    }
}

/// Standard base64 decoding (RFC 4648), ignoring whitespace; nil on any other invalid character.
enum Base64 {
    static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(byte - 65)
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(byte - 97 + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(byte - 48 + 52)
            case UInt8(ascii: "+"), UInt8(ascii: "-"): values.append(62)
            case UInt8(ascii: "/"), UInt8(ascii: "_"): values.append(63)
            case UInt8(ascii: "="), 9, 10, 13, 32: continue
            default: return nil
            }
        }
        var output: [UInt8] = []
        var index = 0
        while index + 1 < values.count {
            let chunk = values[index..<min(index + 4, values.count)]
            let a = chunk[chunk.startIndex], b = chunk[chunk.startIndex + 1]
            output.append(a << 2 | b >> 4)
            if chunk.count > 2 {
                let c = chunk[chunk.startIndex + 2]
                output.append((b & 0x0F) << 4 | c >> 2)
                if chunk.count > 3 { output.append((c & 0x03) << 6 | chunk[chunk.startIndex + 3]) }
            }
            index += 4
        }
        return output
    }
}
