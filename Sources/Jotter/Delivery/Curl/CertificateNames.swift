import CCurl

/// Why a relay's certificate did not verify, when the reason is its names: the chain is trusted but
/// the certificate is for other hosts (`smtp.example.com` configured, `mail.example.net` served).
///
/// After a verification failure the transport connects once more — handshake only, no login, no mail,
/// the host name left unchecked — and reads the names the server's certificate is for. Those names are
/// the server's public identity (no secret, no memo text), so the hint may be logged and shown.
enum CertificateNames {
    /// Where and how the transport connects (the same TLS settings as the failed attempt).
    struct Target: Sendable {
        var url: String
        var protocols: String
        /// STARTTLS on a plain-text protocol (`smtp://`), instead of TLS from the first byte.
        var startTLS: Bool
        var host: String
        var caFile: String?
        var timeoutSeconds: Int
    }

    /// The names the certificate is for when the chain verifies but the host name does not match;
    /// nil when anything else is wrong (an unknown CA, an expired certificate, no answer).
    static func mismatch(_ target: Target) -> [String]? {
        guard let handle = try? EasyHandle() else { return nil }
        do {
            try handle.set(CURLOPT_URL, target.url)
            try handle.set(CURLOPT_PROTOCOLS_STR, target.protocols)
            try handle.set(CURLOPT_NOSIGNAL, 1)
            try handle.set(CURLOPT_CONNECTTIMEOUT, min(target.timeoutSeconds, 15))
            try handle.set(CURLOPT_TIMEOUT, min(target.timeoutSeconds, 15))
            if target.startTLS { try handle.set(CURLOPT_USE_SSL, Int(CURLUSESSL_ALL.rawValue)) }
            try handle.set(CURLOPT_SSL_VERIFYPEER, 1)
            try handle.set(CURLOPT_SSL_VERIFYHOST, 0)
            if let caFile = target.caFile { try handle.set(CURLOPT_CAINFO, caFile) }
            try handle.set(CURLOPT_CERTINFO, 1)
            try handle.set(CURLOPT_CONNECT_ONLY, 1)
            try handle.perform()
        } catch {
            return nil
        }
        guard let leaf = handle.certificateInfo.first else { return nil }
        let names = names(certificateInfo: leaf)
        return names.isEmpty ? nil : names
    }

    /// The DNS names and IP addresses of a certificate's subjectAltName (else its subject's CN), from
    /// libcurl's description of it (`X509v3 Subject Alternative Name:DNS:a, IP Address:127.0.0.1`).
    static func names(certificateInfo entries: [String]) -> [String] {
        let altName = "X509v3 Subject Alternative Name:"
        if let line = entries.first(where: { $0.hasPrefix(altName) }) {
            return line.dropFirst(altName.count).split(separator: ",").compactMap { part in
                let entry = part.trimmingCharacters(in: " ")
                for prefix in ["DNS:", "IP Address:"] where entry.hasPrefix(prefix) {
                    return String(entry.dropFirst(prefix.count))
                }
                return nil
            }
        }
        guard let subject = entries.first(where: { $0.hasPrefix("Subject:") }),
              let range = subject.firstLiteralRange(of: "CN = ") ?? subject.firstLiteralRange(of: "CN=") else { return [] }
        let common = subject[range.upperBound...].prefix { $0 != "," && $0 != "/" }
        let name = common.trimmingCharacters(in: " ")
        return name.isEmpty ? [] : [String(name)]
    }

    /// The hint a refusal carries: "the certificate is for a, b — not host".
    static func hint(names: [String], host: String) -> String {
        "the certificate is for \(names.prefix(8).joined(separator: ", "))\(names.count > 8 ? ", …" : "") — not \(host)"
    }
}

extension DeliveryFailure {
    /// This failure, with a hint naming the certificate's names when `error` is a verification that
    /// failed on them alone.
    func explainingCertificate(_ error: CurlError, _ target: @autoclosure () -> CertificateNames.Target) -> DeliveryFailure {
        guard kind == .tls, CURLcode(rawValue: UInt32(error.code)) == CURLE_PEER_FAILED_VERIFICATION else { return self }
        let target = target()
        guard let names = CertificateNames.mismatch(target) else { return self }
        var explained = self
        explained.hint = CertificateNames.hint(names: names, host: target.host)
        return explained
    }
}
