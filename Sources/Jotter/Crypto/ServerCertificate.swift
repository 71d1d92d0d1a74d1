import CCrypto
import Glibc

/// The certificate LAN mode serves HTTPS with: ECDSA P-256, signed by the local CA, naming the names
/// and addresses the server is reached at. Valid 820 days, because Apple platforms refuse server
/// certificates valid longer than 825 days when their CA was installed by the user; renewed at start
/// when due, under the same CA, so a phone that trusts the CA never notices.
public struct ServerCertificate: Sendable {
    /// The certificate, PEM (`cert.pem`).
    public let certificatePEM: String
    /// The private key, PEM (PKCS#8; `key.pem`, mode 0600).
    public let privateKeyPEM: String
    /// SHA-256 of the certificate's DER form, `AB:CD:…`.
    public let fingerprint: String
    /// When it stops being valid, Unix time.
    public let notAfter: Int64
    /// Why this call issued a new certificate; nil if the one on disk was kept.
    public let renewal: Renewal?
    /// Names and addresses asked for that the CA may not vouch for (public addresses, or names the CA
    /// was not made with), left out of the certificate.
    public let omitted: [String]

    /// Whether this call issued the certificate.
    public var isNew: Bool { renewal != nil }

    /// Why a new certificate was issued.
    public enum Renewal: String, Sendable {
        /// There was none.
        case missing
        /// `cert.pem` or `key.pem` could not be read, or they are not a pair.
        case unreadable
        /// Not signed by the local CA (e.g. the self-signed certificate of Jotter before the CA).
        case otherIssuer = "other_issuer"
        /// Less than a third of its lifetime (at least 90 days) left, or not yet valid.
        case expiring
        /// A name or address asked for is not in it.
        case names
    }

    /// Validity of a new certificate: under Apple's 825-day cap, with room for clock skew.
    public static let lifetimeDays: Int64 = 820
    /// Renewal happens once less than this is left, or a third of the lifetime if that is more.
    static let minimumRemainingSeconds: Int64 = 90 * 86_400

    /// Loads `directory/cert.pem` and `directory/key.pem`, issuing a new key and certificate signed by
    /// `authority` when they are missing, unreadable, not the CA's, due for renewal, or lack one of
    /// `names` (DNS) or `addresses` (IP) that the CA may vouch for. `now` is Unix time (tests move it).
    public static func loadOrRenew(directory: String, authority: LocalCertificateAuthority, names: [String],
                                   addresses: [String], now: Int64? = nil) throws -> ServerCertificate {
        let now = now ?? Int64(time(nil))
        try DataDirectory.makeDirectories(directory, mode: 0o700)
        let certificatePath = directory + "/cert.pem", keyPath = directory + "/key.pem"
        let signer = try authority.signer()
        let wanted = Wanted(names: names, addresses: addresses, authority: signer.certificate)
        let certificateText = (try? CertificateFiles.read(certificatePath)) ?? nil
        let keyText = (try? CertificateFiles.read(keyPath)) ?? nil
        let loaded = certificateText.flatMap(X509Certificate.init(pem:))
        let key = keyText.flatMap(PrivateKey.init(pem:))
        let reason = renewal(certificate: loaded, key: key, found: certificateText != nil && keyText != nil,
                             authority: signer.certificate, wanted: wanted, now: now)
        if reason == nil, let loaded, let certificateText, let keyText {
            return ServerCertificate(certificatePEM: certificateText, privateKeyPEM: keyText,
                                     fingerprint: X509Certificate.fingerprint(of: loaded.der),
                                     notAfter: now + (loaded.secondsUntilExpiry(from: now) ?? 0),
                                     renewal: nil, omitted: wanted.omitted)
        }
        let newKey = try PrivateKey.p256()
        let notBefore = now - 3600  // a phone whose clock is a little behind still accepts it
        let certificate = try X509Certificate.issue(
            commonName: "Jotter on \(authority.machineName.prefix(50))", key: newKey,
            validity: notBefore...(notBefore + lifetimeDays * 86_400),
            extensions: [
                .init(nid: NID_subject_alt_name, value: wanted.alternativeNames.joined(separator: ",")),
                .init(nid: NID_basic_constraints, value: "critical,CA:FALSE"),
                .init(nid: NID_key_usage, value: "critical,digitalSignature"),
                .init(nid: NID_ext_key_usage, value: "serverAuth"),
                .init(nid: NID_subject_key_identifier, value: "hash"),
                .init(nid: NID_authority_key_identifier, value: "keyid:always"),
            ],
            issuer: signer.certificate, issuerKey: signer.key)
        let issued = ServerCertificate(certificatePEM: try certificate.pem(), privateKeyPEM: try newKey.pem(),
                                       fingerprint: X509Certificate.fingerprint(of: certificate.der),
                                       notAfter: notBefore + lifetimeDays * 86_400,
                                       renewal: reason ?? .unreadable, omitted: wanted.omitted)
        // Key first: a crash between the two renames leaves a pair that does not match, which the next
        // start renews.
        try CertificateFiles.replace(keyPath, with: issued.privateKeyPEM, mode: 0o600)
        try CertificateFiles.replace(certificatePath, with: issued.certificatePEM, mode: 0o644)
        try CertificateFiles.sync(directory)
        return issued
    }

    /// Why the certificate on disk will not do; nil if it will.
    private static func renewal(certificate: X509Certificate?, key: PrivateKey?, found: Bool,
                                authority: X509Certificate, wanted: Wanted, now: Int64) -> Renewal? {
        guard found else { return .missing }
        guard let certificate, let key, certificate.matches(key) else { return .unreadable }
        guard certificate.isIssued(by: authority) else { return .otherIssuer }
        guard let lifetime = certificate.lifetimeSeconds, let left = certificate.secondsUntilExpiry(from: now),
              let age = certificate.secondsSinceStart(at: now),
              age >= 0, left >= max(lifetime / 3, minimumRemainingSeconds) else { return .expiring }
        guard wanted.names.allSatisfy(certificate.covers(dnsName:)),
              wanted.addresses.allSatisfy(certificate.covers(address:)) else { return .names }
        return nil
    }

    /// The names and addresses a certificate should hold: those asked for that the CA permits.
    private struct Wanted {
        var names: [String] = [], addresses: [String] = [], omitted: [String] = []

        init(names: [String], addresses: [String], authority: X509Certificate) {
            for name in names.map({ $0.lowercased() }) where !self.names.contains(name) {
                if LocalCertificateAuthority.isHostName(name), authority.permits("DNS:" + name) {
                    self.names.append(name)
                } else if !omitted.contains(name) {
                    omitted.append(name)
                }
            }
            for address in addresses where !self.addresses.contains(address) {
                if Self.isIPAddress(address), authority.permits("IP:" + address) {
                    self.addresses.append(address)
                } else if !omitted.contains(address) {
                    omitted.append(address)
                }
            }
            if self.names.isEmpty && self.addresses.isEmpty { self.names = ["localhost"] }
        }

        /// `DNS:…` and `IP:…` entries for subjectAltName.
        var alternativeNames: [String] {
            names.map { "DNS:" + $0 } + addresses.map { "IP:" + $0 }
        }

        private static func isIPAddress(_ text: String) -> Bool {
            var buffer = in6_addr()
            return inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1
        }
    }
}
