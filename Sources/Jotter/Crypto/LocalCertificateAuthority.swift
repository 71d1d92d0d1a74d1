import CCrypto
import Glibc

/// This machine's own certificate authority, for LAN mode: a phone trusts it once (`/jotter-ca.crt`,
/// `/jotter-ca.mobileconfig`) and from then on every server certificate it signs, renewals included.
///
/// Its name constraints keep an installed CA harmless should its key leak: it can vouch only for this
/// machine's names, `localhost`, names under `local` (mDNS), and private, loopback and link-local
/// addresses — never a public site, and no e-mail address (a phone that trusts it for HTTPS would
/// otherwise accept S/MIME mail signed under it). Ten years of validity is allowed for a CA; the 825-day cap that
/// Apple platforms apply is for server certificates (`ServerCertificate`).
public struct LocalCertificateAuthority: Sendable {
    /// The CA certificate, PEM (`ca.pem`).
    public let certificatePEM: String
    /// The CA certificate, DER: what a phone installs.
    public let certificateDER: [UInt8]
    /// SHA-256 of `certificateDER`, `AB:CD:…`: what a phone shows for the CA.
    public let fingerprint: String
    /// The machine's name as profiles show it ("Jotter on NAME").
    public let machineName: String
    /// Whether this call created the CA (phones must trust it anew).
    public let isNew: Bool
    /// The CA's key, PEM (`ca-key.pem`, mode 0600); kept only to sign server certificates.
    let privateKeyPEM: String

    /// The only mail domain a CA made since 2026-12-07 may vouch for: none can exist under it.
    static let noMailDomain = ".invalid"

    /// How long a new CA is valid.
    public static let lifetimeDays: Int64 = 3650

    /// The address ranges a server certificate may name, as `address/mask` (RFC 1918, loopback,
    /// IPv4 link-local, IPv6 unique-local fc00::/7 and link-local fe80::/10).
    static let permittedNetworks = [
        "10.0.0.0/255.0.0.0", "172.16.0.0/255.240.0.0", "192.168.0.0/255.255.0.0", "127.0.0.0/255.0.0.0",
        "169.254.0.0/255.255.0.0", "fc00::/fe00::", "fe80::/ffc0::",
    ]

    /// Loads `directory/ca.pem` and `directory/ca-key.pem`, creating both if there is no `ca.pem`.
    /// The first of `hostNames` (this machine's names) names the CA and its profile; the DNS names a new CA
    /// may vouch for are `localhost` and `local` only (`extensions`), and an existing CA keeps the
    /// constraints it was made with. `now` is Unix time (tests move it).
    public static func loadOrCreate(directory: String, hostNames: [String],
                                    now: Int64? = nil) throws -> LocalCertificateAuthority {
        let now = now ?? Int64(time(nil))
        try DataDirectory.makeDirectories(directory, mode: 0o700)
        let certificatePath = directory + "/ca.pem", keyPath = directory + "/ca-key.pem"
        let names = hostNames.map { $0.lowercased() }.filter(isHostName)
        let machineName = names.first ?? "this machine"
        if let certificateText = try CertificateFiles.read(certificatePath) {
            guard let keyText = try CertificateFiles.read(keyPath) else {
                throw CertificateFiles.Failure.incomplete(path: certificatePath, missing: keyPath)
            }
            guard let certificate = X509Certificate(pem: certificateText) else {
                throw CertificateFiles.Failure.unreadable(path: certificatePath)
            }
            guard let key = PrivateKey(pem: keyText) else { throw CertificateFiles.Failure.unreadable(path: keyPath) }
            guard certificate.matches(key) else { throw CertificateFiles.Failure.mismatch(path: keyPath) }
            guard certificate.isAuthority else {
                throw CertificateFiles.Failure.unusable(path: certificatePath, reason: "is not a CA certificate")
            }
            guard let left = certificate.secondsUntilExpiry(from: now), left > 0 else {
                throw CertificateFiles.Failure.unusable(path: certificatePath, reason: "has expired")
            }
            return try LocalCertificateAuthority(certificate: certificate, privateKeyPEM: keyText,
                                                 machineName: machineName, isNew: false)
        }
        // No ca.pem: a ca-key.pem alone is what a crash between the two writes leaves, and no phone can
        // trust a certificate that was never written, so start afresh.
        let key = try PrivateKey.p256()
        let certificate = try X509Certificate.issue(
            commonName: "Jotter local CA (\(machineName.prefix(40)))", key: key,
            validity: (now - 3600)...(now + lifetimeDays * 86_400),
            extensions: extensions(), issuer: nil, issuerKey: key)
        let keyPEM = try key.pem()
        try CertificateFiles.replace(keyPath, with: keyPEM, mode: 0o600)
        try CertificateFiles.replace(certificatePath, with: try certificate.pem(), mode: 0o644)
        try CertificateFiles.sync(directory)
        return try LocalCertificateAuthority(certificate: certificate, privateKeyPEM: keyPEM,
                                             machineName: machineName, isNew: true)
    }

    private init(certificate: X509Certificate, privateKeyPEM: String, machineName: String, isNew: Bool) throws {
        certificatePEM = try certificate.pem()
        certificateDER = certificate.der
        fingerprint = X509Certificate.fingerprint(of: certificateDER)
        self.privateKeyPEM = privateKeyPEM
        self.machineName = machineName
        self.isNew = isNew
    }

    /// The extensions of a new CA: a CA that signs end-entity certificates only (pathlen 0), within
    /// critical name constraints.
    ///
    /// RFC 5280 4.2.1.10: a DNS constraint admits the name and any name with labels added on the left, so
    /// "local" admits "box.local" (no leading dot: that form is only defined for URIs). So only `localhost`
    /// and `local`, which no public site can have: the machine's own host name would admit everything
    /// under it, and a machine called `dev` or `app` (public top-level domains) would have a CA that can
    /// vouch for `www.google.dev`. Phones reach this machine by address or by `name.local`.
    ///
    /// A name form with no permitted subtree is not constrained at all, so e-mail gets one that no address
    /// can be in: `.invalid` (RFC 6761), which OpenSSL also applies to an `emailAddress` in a subject.
    /// Clients that do not check e-mail constraints are unaffected: the server certificates name none.
    static func extensions() -> [X509Certificate.Extension] {
        let dnsNames = ["localhost", "local"]
        let permitted = dnsNames.map { "permitted;DNS:\($0)" } + permittedNetworks.map { "permitted;IP:\($0)" }
            + ["permitted;email:\(noMailDomain)"]
        return [
            .init(nid: NID_basic_constraints, value: "critical,CA:TRUE,pathlen:0"),
            .init(nid: NID_key_usage, value: "critical,keyCertSign,cRLSign"),
            .init(nid: NID_subject_key_identifier, value: "hash"),
            .init(nid: NID_name_constraints, value: "critical," + permitted.joined(separator: ",")),
        ]
    }

    /// The CA certificate and key, parsed afresh for signing.
    func signer() throws -> (certificate: X509Certificate, key: PrivateKey) {
        guard let certificate = X509Certificate(pem: certificatePEM), let key = PrivateKey(pem: privateKeyPEM) else {
            throw CertificateFiles.Failure.create(step: "read the local CA")
        }
        return (certificate, key)
    }

    /// A plain DNS name: letters, digits, `-`, `_` and inner dots (what a certificate can name, and
    /// what OpenSSL's configuration syntax can carry without quoting).
    static func isHostName(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 253, !name.hasPrefix("."), !name.hasSuffix("."),
              !name.contains("..") else { return false }
        return name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                return true
            default:
                return false
            }
        }
    }
}
