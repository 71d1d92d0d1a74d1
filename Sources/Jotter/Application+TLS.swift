extension Application {
    /// LAN mode's HTTPS: the local CA and the server certificate it signs, from `directory`.
    struct TLS {
        let authority: LocalCertificateAuthority
        let certificate: ServerCertificate

        /// What the server presents: its certificate, then the CA's. A client that trusts the CA needs
        /// only the first; sending the CA too lets a client show the whole chain when asked to trust it.
        /// (libmicrohttpd hands the PEM to GnuTLS, which takes a chain, leaf first.)
        var chainPEM: String { certificate.certificatePEM + authority.certificatePEM }

        /// The CA as the pairing screen offers it.
        var trustAnchor: TrustAnchor {
            TrustAnchor(fingerprint: authority.fingerprint, certificate: authority.certificateDER,
                        mobileConfig: authority.mobileConfig)
        }
    }

    /// What LAN mode's certificate must name besides the LAN addresses, and where it is kept.
    struct CertificateRequest: Sendable {
        var directory: String
        var machineNames: [String]
        var names: [String]
    }

    /// The CA and a certificate naming `request`'s names and `addresses` (and 127.0.0.1).
    static func loadTLS(_ request: CertificateRequest, addresses: [String], clock: any WallClock,
                        logger: Logger, atStart: Bool = true) throws -> TLS {
        try loadTLS(directory: request.directory, machineNames: request.machineNames, names: request.names,
                    addresses: addresses + ["127.0.0.1"], now: clock.nowMilliseconds() / 1000,
                    logger: logger.labelled("tls"), atStart: atStart)
    }

    /// Loads (or creates) the local CA and the server certificate, renewing the latter when due, and
    /// says so in the log: fingerprints, dates and reasons only, never a key.
    static func loadTLS(directory: String, machineNames: [String], names: [String], addresses: [String],
                        now: Int64, logger: Logger, atStart: Bool = true) throws -> TLS {
        let authority = try LocalCertificateAuthority.loadOrCreate(directory: directory, hostNames: machineNames,
                                                                   now: now)
        if authority.isNew {
            logger.notice("created a local certificate authority; phones must trust it once",
                          metadata: ["ca.fingerprint": authority.fingerprint])
        }
        // A CA made before its names were narrowed to localhost and .local may vouch for this machine's bare
        // host name, and every name under it (which can be a public top-level domain: `dev`, `app`). Its
        // certificates keep naming the bare name (phones may reach the machine by it); at start, a warning.
        var names = names
        if !authority.isNew, let signer = try? authority.signer() {
            let wide = machineNames.filter { name in
                !name.contains(".") && name != "local" && name != "localhost" && signer.certificate.permits("DNS:" + name)
            }
            names += wide
            if atStart, !wide.isEmpty {
                logger.warning("the local CA may vouch for every name under this machine's host name; "
                    + "move the data directory's tls/ away to make a narrower one (phones then trust the new one once)")
            }
            // A CA made before e-mail was constrained could sign mail (S/MIME) that a phone trusting it accepts.
            if atStart, signer.certificate.permits("email:someone@example.com") {
                logger.warning("the local CA may vouch for e-mail addresses (signed mail); "
                    + "move the data directory's tls/ away to make a narrower one (phones then trust the new one once)")
            }
        }
        let certificate = try ServerCertificate.loadOrRenew(directory: directory, authority: authority,
                                                            names: names, addresses: addresses, now: now)
        if let renewal = certificate.renewal {
            logger.notice("issued a new HTTPS certificate under the local CA", metadata: [
                "reason": renewal.rawValue,
                "not_after": Timestamp.iso8601(milliseconds: certificate.notAfter * 1000),
            ])
        }
        if !certificate.omitted.isEmpty {
            logger.warning("the local CA may not vouch for some of this machine's names or addresses; "
                + "phones cannot reach it by those", metadata: ["omitted": certificate.omitted.joined(separator: " ")])
        }
        return TLS(authority: authority, certificate: certificate)
    }
}
