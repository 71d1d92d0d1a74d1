import Foundation
import Testing
@testable import Jotter

/// The local CA and the server certificates it signs, judged by the `openssl` command-line tool and
/// Python's `plistlib`, not by the code that made them.
@Suite struct CertificateTests {
    private static let day: Int64 = 86_400
    private var hostNames = ["testbox", "testbox.local"]
    private let names = ["localhost", "testbox.local"]
    private let addresses = ["192.168.1.20", "127.0.0.1"]

    private func make(_ directory: TemporaryDirectory, now: Int64? = nil, addresses: [String]? = nil) throws
        -> (LocalCertificateAuthority, ServerCertificate) {
        let tls = directory.file("tls")
        let authority = try LocalCertificateAuthority.loadOrCreate(directory: tls, hostNames: hostNames, now: now)
        let certificate = try ServerCertificate.loadOrRenew(directory: tls, authority: authority, names: names,
                                                            addresses: addresses ?? self.addresses, now: now)
        return (authority, certificate)
    }

    private func openssl(_ arguments: [String], _ directory: TemporaryDirectory) throws -> Command.Result {
        try Command.openssl(arguments, in: directory.file("tls"))
    }

    private func mode(_ path: String) throws -> Int? {
        try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
    }

    /// `openssl x509 -noout -startdate -enddate` as Unix times.
    private func validity(_ file: String, _ directory: TemporaryDirectory) throws -> (Int64, Int64) {
        let dates = try openssl(["x509", "-in", file, "-noout", "-startdate", "-enddate", "-dateopt", "iso_8601"],
                                directory).output
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ssX"
        let values = dates.split(separator: "\n").compactMap { line -> Int64? in
            guard let value = line.split(separator: "=", maxSplits: 1).last else { return nil }
            return formatter.date(from: String(value)).map { Int64($0.timeIntervalSince1970) }
        }
        try #require(values.count == 2, "dates: \(dates)")
        return (values[0], values[1])
    }

    @Test func theCAAndItsServerCertificateAreWhatOpenSSLExpects() throws {
        let directory = TemporaryDirectory()
        let (authority, certificate) = try make(directory)
        #expect(authority.isNew && certificate.isNew && certificate.renewal == .missing)

        let verified = try openssl(["verify", "-CAfile", "ca.pem", "cert.pem"], directory)
        #expect(verified.status == 0 && verified.output.contains("cert.pem: OK"), "\(verified.errors)")

        let ca = try openssl(["x509", "-in", "ca.pem", "-noout", "-text"], directory).output
        #expect(ca.contains("CA:TRUE, pathlen:0"))
        #expect(ca.contains("X509v3 Key Usage: critical") && ca.contains("Certificate Sign, CRL Sign"))
        #expect(ca.contains("X509v3 Subject Key Identifier"))
        #expect(ca.contains("X509v3 Name Constraints: critical"))
        #expect(!ca.contains("DNS:testbox"), "the machine's own name would admit every name under it")
        for permitted in ["DNS:localhost", "DNS:local", "IP:10.0.0.0/255.0.0.0",
                          "IP:172.16.0.0/255.240.0.0", "IP:192.168.0.0/255.255.0.0", "IP:127.0.0.0/255.0.0.0",
                          "IP:169.254.0.0/255.255.0.0", "IP:FC00:0:0:0:0:0:0:0/FE00:0:0:0:0:0:0:0",
                          "IP:FE80:0:0:0:0:0:0:0/FFC0:0:0:0:0:0:0:0", "email:.invalid"] {
            #expect(ca.contains(permitted), "CA permits \(permitted)")
        }
        #expect(ca.contains("Subject: CN = Jotter local CA (testbox)"))
        #expect(ca.contains("ecdsa-with-SHA256") && ca.contains("prime256v1"))
        let (caStart, caEnd) = try validity("ca.pem", directory)
        #expect(caEnd - caStart > 9 * 365 * Self.day, "a CA may last about ten years")

        let leaf = try openssl(["x509", "-in", "cert.pem", "-noout", "-text"], directory).output
        #expect(leaf.contains("CA:FALSE"))
        #expect(leaf.contains("TLS Web Server Authentication"))
        #expect(leaf.contains("Digital Signature"))
        #expect(leaf.contains("X509v3 Authority Key Identifier"))
        #expect(leaf.contains("prime256v1"))
        for name in ["DNS:localhost", "DNS:testbox.local", "IP Address:192.168.1.20", "IP Address:127.0.0.1"] {
            #expect(leaf.contains(name), "certificate names \(name)")
        }
        #expect(!leaf.contains("DNS:testbox,") && !leaf.contains("DNS:testbox\n"), "the bare name is left out")
        let (start, end) = try validity("cert.pem", directory)
        #expect(end - start <= 825 * Self.day, "Apple's cap on server certificates")
        #expect(end - start == ServerCertificate.lifetimeDays * Self.day)
        #expect(abs(start - (Int64(Date().timeIntervalSince1970) - 3600)) < 120, "valid from an hour ago")

        let fingerprint = try openssl(["x509", "-in", "ca.pem", "-noout", "-fingerprint", "-sha256"], directory)
        #expect(fingerprint.output.trimmingCharacters(in: .whitespacesAndNewlines)
            == "sha256 Fingerprint=" + authority.fingerprint)
        _ = try openssl(["x509", "-in", "ca.pem", "-outform", "DER", "-out", "ca.der"], directory)
        #expect(try Array(Data(contentsOf: URL(fileURLWithPath: directory.file("tls/ca.der"))))
            == authority.certificateDER)
        #expect(try mode(directory.file("tls/ca-key.pem")) == 0o600)
        #expect(try mode(directory.file("tls/key.pem")) == 0o600)
        #expect(try mode(directory.file("tls")) == 0o700)
    }

    /// Whoever gets hold of the CA's key still cannot vouch for a public site with it, nor sign mail:
    /// clients that trust the CA refuse such a certificate.
    @Test func aCertificateForAPublicNameUnderTheCAFailsVerification() throws {
        let directory = TemporaryDirectory()
        _ = try make(directory)
        func forge(_ name: String, _ alternative: String?, subject: String? = nil,
                   usage: String = "serverAuth") throws -> Command.Result {
            let extensions = directory.file("tls/\(name).ext")
            try ((alternative.map { "subjectAltName=\($0)\n" } ?? "")
                + "basicConstraints=CA:FALSE\nextendedKeyUsage=\(usage)\n")
                .write(toFile: extensions, atomically: true, encoding: .utf8)
            let request = try openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                       "-nodes", "-keyout", "\(name)-key.pem", "-subj", subject ?? "/CN=\(name)",
                                       "-out", "\(name).csr"], directory)
            try #require(request.status == 0, "\(request.errors)")
            let signed = try openssl(["x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                                      "-set_serial", "7", "-days", "30", "-extfile", extensions,
                                      "-out", "\(name).pem"], directory)
            try #require(signed.status == 0, "\(signed.errors)")
            return try openssl(["verify", "-CAfile", "ca.pem", "\(name).pem"], directory)
        }
        let control = try forge("printer.local", "DNS:printer.local")
        #expect(control.status == 0, "the same recipe for a local name verifies: \(control.errors)")
        let site = try forge("example.com", "DNS:example.com")
        #expect(site.status != 0)
        #expect((site.output + site.errors).contains("permitted subtree violation"))
        let address = try forge("public-address", "IP:8.8.8.8")
        #expect(address.status != 0)
        #expect((address.output + address.errors).contains("permitted subtree violation"))
        // Signed mail (S/MIME), the address named either way a mail client reads it.
        let mail = try forge("mail", "email:ceo@example.com", usage: "emailProtection")
        #expect(mail.status != 0)
        #expect((mail.output + mail.errors).contains("permitted subtree violation"), "\(mail.output) \(mail.errors)")
        let inSubject = try forge("mail-subject", nil, subject: "/CN=ceo/emailAddress=ceo@example.com",
                                  usage: "emailProtection")
        #expect(inSubject.status != 0)
        #expect((inSubject.output + inSubject.errors).contains("permitted subtree violation"),
                "\(inSubject.output) \(inSubject.errors)")
        let mailAtLocal = try forge("mail-local", "email:me@box.local", usage: "emailProtection")
        #expect(mailAtLocal.status != 0, "not even for a .local address")
    }

    /// The CA's own view of its constraints, as the start's warnings use it.
    @Test func theCAPermitsNoMailAddress() throws {
        let directory = TemporaryDirectory()
        let (authority, _) = try make(directory)
        let signer = try authority.signer()
        #expect(!signer.certificate.permits("email:someone@example.com"))
        #expect(!signer.certificate.permits("email:me@box.local"))
        #expect(signer.certificate.permits("DNS:box.local"))
    }

    /// A machine named like a public top-level domain (`dev`, `app`): its CA must not vouch for the
    /// public names under it, as it would if the host name were among its permitted names.
    @Test func aMachineNamedLikeATopLevelDomainGetsNoCAForThatDomain() throws {
        var test = self
        test.hostNames = ["dev", "dev.local"]
        let directory = TemporaryDirectory()
        _ = try test.make(directory)
        let extensions = directory.file("tls/site.ext")
        try "subjectAltName=DNS:www.google.dev\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(toFile: extensions, atomically: true, encoding: .utf8)
        let request = try openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                   "-keyout", "site-key.pem", "-subj", "/CN=www.google.dev", "-out", "site.csr"], directory)
        try #require(request.status == 0, "\(request.errors)")
        let signed = try openssl(["x509", "-req", "-in", "site.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                                  "-set_serial", "9", "-days", "30", "-extfile", extensions, "-out", "site.pem"], directory)
        try #require(signed.status == 0, "\(signed.errors)")
        let verified = try openssl(["verify", "-CAfile", "ca.pem", "site.pem"], directory)
        #expect(verified.status != 0 && (verified.output + verified.errors).contains("permitted subtree violation"),
                "\(verified.output) \(verified.errors)")
    }

    @Test func reloadingKeepsTheCAAndTheCertificate() throws {
        let directory = TemporaryDirectory()
        let (authority, certificate) = try make(directory)
        let (again, same) = try make(directory)
        #expect(!again.isNew && again.fingerprint == authority.fingerprint)
        #expect(again.certificateDER == authority.certificateDER)
        #expect(!same.isNew && same.renewal == nil)
        #expect(same.certificatePEM == certificate.certificatePEM && same.privateKeyPEM == certificate.privateKeyPEM)
        #expect(same.fingerprint == certificate.fingerprint)
    }

    @Test func renewsUnderTheSameCAWhenAThirdOfItsLifeRemains() throws {
        let directory = TemporaryDirectory()
        let start = Int64(Date().timeIntervalSince1970)
        let (authority, first) = try make(directory, now: start)
        let (_, later) = try make(directory, now: start + 500 * Self.day)
        #expect(!later.isNew, "320 days left: kept")
        let renewAt = start + 700 * Self.day
        let (sameAuthority, renewed) = try make(directory, now: renewAt)
        #expect(renewed.renewal == .expiring, "120 days left: renewed")
        #expect(renewed.fingerprint != first.fingerprint && renewed.privateKeyPEM != first.privateKeyPEM)
        #expect(sameAuthority.fingerprint == authority.fingerprint && !sameAuthority.isNew)
        let verified = try openssl(["verify", "-attime", String(renewAt), "-CAfile", "ca.pem", "cert.pem"], directory)
        #expect(verified.status == 0, "valid then, under the same CA: \(verified.errors)")
        let (notBefore, _) = try validity("cert.pem", directory)
        #expect(notBefore == renewAt - 3600)
        let (_, kept) = try make(directory, now: renewAt + Self.day)
        #expect(!kept.isNew, "a fresh certificate is not renewed again")
        let (_, early) = try make(directory, now: renewAt - 2 * 3600)
        #expect(early.renewal == .expiring, "a certificate not yet valid (clock moved back) is replaced")
    }

    /// The layout of Jotter before the CA: a self-signed ten-year certificate in tls/cert.pem.
    @Test func anOldSelfSignedCertificateIsReplaced() throws {
        let directory = TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("tls"), withIntermediateDirectories: true)
        let old = try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                               "-keyout", "key.pem", "-out", "cert.pem", "-days", "3650",
                               "-subj", "/CN=Jotter on this machine",
                               "-addext", "subjectAltName=DNS:localhost,DNS:testbox,DNS:testbox.local,"
                                   + "IP:192.168.1.20,IP:127.0.0.1"], directory)
        try #require(old.status == 0, "\(old.errors)")
        let (_, certificate) = try make(directory)
        #expect(certificate.renewal == .otherIssuer)
        #expect(try openssl(["verify", "-CAfile", "ca.pem", "cert.pem"], directory).status == 0)
        let (start, end) = try validity("cert.pem", directory)
        #expect(end - start <= 825 * Self.day)
    }

    @Test func aMissingNameOrAddressRenewsButOnesTheCAMayNotNameAreLeftOut() throws {
        let directory = TemporaryDirectory()
        let (_, first) = try make(directory)
        let (_, moved) = try make(directory, addresses: addresses + ["10.1.2.3"])
        #expect(moved.renewal == .names)
        #expect(try openssl(["x509", "-in", "cert.pem", "-noout", "-ext", "subjectAltName"], directory)
            .output.contains("IP Address:10.1.2.3"))
        #expect(moved.fingerprint != first.fingerprint)

        let (_, public1) = try make(directory, addresses: addresses + ["10.1.2.3", "8.8.8.8", "fe80::1", "not-an-ip"])
        #expect(public1.renewal == .names, "fe80::1 is new")
        #expect(public1.omitted == ["8.8.8.8", "not-an-ip"])
        let (_, public2) = try make(directory, addresses: addresses + ["10.1.2.3", "8.8.8.8", "fe80::1"])
        #expect(!public2.isNew, "an address the CA may not name does not renew at every start")
        let san = try openssl(["x509", "-in", "cert.pem", "-noout", "-ext", "subjectAltName"], directory).output
        #expect(!san.contains("8.8.8.8") && san.contains("FE80:0:0:0:0:0:0:1"))
        #expect(try openssl(["verify", "-CAfile", "ca.pem", "cert.pem"], directory).status == 0)
    }

    @Test func brokenFilesAreRenewedOrNamedInTheError() throws {
        let directory = TemporaryDirectory()
        let (authority, _) = try make(directory)
        try "garbage".write(toFile: directory.file("tls/cert.pem"), atomically: true, encoding: .utf8)
        let (_, renewed) = try make(directory)
        #expect(renewed.renewal == .unreadable)

        // A key that is not the certificate's (a crash between the two renames) is renewed too.
        let other = TemporaryDirectory()
        _ = try make(other)
        try FileManager.default.removeItem(atPath: directory.file("tls/key.pem"))
        try FileManager.default.copyItem(atPath: other.file("tls/key.pem"), toPath: directory.file("tls/key.pem"))
        #expect(try make(directory).1.renewal == .unreadable)

        let caKey = directory.file("tls/ca-key.pem")
        try FileManager.default.moveItem(atPath: caKey, toPath: caKey + ".saved")
        let missing = #expect(throws: (any Error).self) { try make(directory) }
        #expect("\(missing.map { "\($0)" } ?? "")".contains(caKey), "names the missing key")
        try FileManager.default.moveItem(atPath: caKey + ".saved", toPath: caKey)

        let caPath = directory.file("tls/ca.pem")
        let saved = try String(contentsOfFile: caPath, encoding: .utf8)
        try "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
            .write(toFile: caPath, atomically: true, encoding: .utf8)
        let unreadable = #expect(throws: (any Error).self) { try make(directory) }
        let text = unreadable.map { "\($0)" } ?? ""
        #expect(text.contains(caPath) && !text.contains("error:"), "a path, not an OpenSSL dump: \(text)")
        try saved.write(toFile: caPath, atomically: true, encoding: .utf8)
        #expect(try make(directory).0.fingerprint == authority.fingerprint, "a CA is never replaced silently")

        // Only a key left by a crash before ca.pem was written: a new CA.
        try FileManager.default.removeItem(atPath: caPath)
        let fresh = try make(directory)
        #expect(fresh.0.isNew && fresh.0.fingerprint != authority.fingerprint)
        #expect(fresh.1.renewal == .otherIssuer)
    }

    @Test func theMobileConfigIsAPropertyListHoldingTheCA() throws {
        let directory = TemporaryDirectory()
        let (authority, _) = try make(directory)
        let script = """
            import base64, json, plistlib, sys, uuid
            profile = plistlib.loads(sys.stdin.buffer.read())
            inner = profile['PayloadContent'][0]
            print(json.dumps({
                'type': profile['PayloadType'], 'name': profile['PayloadDisplayName'],
                'identifier': profile['PayloadIdentifier'], 'uuid': str(uuid.UUID(profile['PayloadUUID'])),
                'version': profile['PayloadVersion'], 'inner_type': inner['PayloadType'],
                'inner_identifier': inner['PayloadIdentifier'], 'inner_uuid': str(uuid.UUID(inner['PayloadUUID'])),
                'der': base64.b64encode(inner['PayloadContent']).decode(),
            }))
            """
        let output = try Python.run(script, input: authority.mobileConfig)
        let profile = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
        #expect(profile["type"] as? String == "Configuration")
        #expect(profile["name"] as? String == "Jotter on testbox")
        #expect(profile["version"] as? Int == 1)
        #expect(profile["inner_type"] as? String == "com.apple.security.root")
        #expect(profile["der"] as? String == Data(authority.certificateDER).base64EncodedString())
        let hex = authority.fingerprint.replacingOccurrences(of: ":", with: "").lowercased()
        #expect(profile["identifier"] as? String == "local.jotter.ca." + hex.prefix(8))
        #expect((profile["inner_identifier"] as? String)?.hasPrefix("local.jotter.ca." + hex.prefix(8)) == true)
        #expect(profile["uuid"] as? String != profile["inner_uuid"] as? String)

        let (reloaded, _) = try make(directory)
        #expect(reloaded.mobileConfig == authority.mobileConfig, "stable: installing again replaces the profile")
        let other = TemporaryDirectory()
        let (otherAuthority, _) = try make(other)
        #expect(otherAuthority.mobileConfig != authority.mobileConfig)
    }
}

/// `serve --lan` over HTTPS, checked with `curl` trusting only the local CA.
@Suite struct CertificateLiveTests {
    private func lanServer(_ directory: TemporaryDirectory, clock: any WallClock = SystemClock(),
                           trustsLoopback: Bool = true) throws -> TestServer {
        try TestServer(dataDirectory: directory.file("data"), clock: clock) {
            $0.lan = true
            $0.lanTrustsLoopback = trustsLoopback
            $0.http.host = "127.0.0.1"
        }
    }

    /// `curl` trusting only `data/tls/ca.pem`: the status, the content type, and the body in a file.
    private func curl(_ server: TestServer, _ path: String, host: String = "127.0.0.1",
                      arguments: [String] = []) throws -> (status: Int, contentType: String, body: [UInt8]) {
        let bodyPath = server.dataDirectory + "/curl-body"
        let result = try Command.run("/usr/bin/curl", [
            "--silent", "--show-error", "--max-time", "30", "--cacert", server.dataDirectory + "/tls/ca.pem",
            "--output", bodyPath, "--write-out", "%{http_code} %{content_type}",
        ] + arguments + ["https://\(host):\(server.port)\(path)"])
        try #require(result.status == 0, "curl: \(result.errors)")
        let parts = result.output.split(separator: " ", maxSplits: 1).map(String.init)
        let body = (try? Data(contentsOf: URL(fileURLWithPath: bodyPath))).map(Array.init) ?? []
        return (Int(parts[0]) ?? 0, parts.count > 1 ? parts[1] : "", body)
    }

    @Test func curlVerifiesTheServerWithTheCAAndDownloadsIt() throws {
        let directory = TemporaryDirectory()
        let server = try lanServer(directory)
        defer { server.stop() }
        let anchor = try #require(server.application.lanInfo?.trustAnchor)
        #expect(server.application.lanInfo?.fingerprint == anchor.fingerprint, "the banner shows the CA's")

        #expect(try curl(server, "/healthz").status == 200)
        #expect(try curl(server, "/healthz", host: "localhost").status == 200, "the name verifies too")

        let crt = try curl(server, "/jotter-ca.crt")
        #expect(crt.status == 200 && crt.contentType == "application/x-x509-ca-cert")
        #expect(crt.body == anchor.certificate)
        #expect(X509Certificate.fingerprint(of: crt.body) == anchor.fingerprint)

        let profile = try curl(server, "/jotter-ca.mobileconfig")
        #expect(profile.status == 200 && profile.contentType == "application/x-apple-aspen-config")
        #expect(profile.body == anchor.mobileConfig)

        // The server sends its certificate and the CA's (GnuTLS takes the concatenated PEM as a chain).
        let chain = try Command.run("/usr/bin/openssl", [
            "s_client", "-connect", "127.0.0.1:\(server.port)", "-showcerts", "-verify_return_error",
            "-CAfile", server.dataDirectory + "/tls/ca.pem",
        ])
        #expect(chain.output.components(separatedBy: "-----BEGIN CERTIFICATE-----").count - 1 == 2)
        #expect(chain.output.contains("Verify return code: 0 (ok)"))
        // TLS 1.2 and 1.3 only: 1.0 and 1.1 (and their SHA-1 CBC suites) are refused.
        for old in ["-tls1", "-tls1_1"] {
            let refused = try Command.run("/usr/bin/openssl", [
                "s_client", "-connect", "127.0.0.1:\(server.port)", old, "-cipher", "ALL:@SECLEVEL=0",
                "-CAfile", server.dataDirectory + "/tls/ca.pem",
            ])
            #expect(refused.status != 0 && refused.output.contains("Cipher is (NONE)"),
                    "\(old) refused: \(refused.output.suffix(400))")
        }
        let modern = try Command.run("/usr/bin/openssl", [
            "s_client", "-connect", "127.0.0.1:\(server.port)", "-tls1_2", "-CAfile", server.dataDirectory + "/tls/ca.pem",
        ])
        #expect(modern.output.contains("Verify return code: 0 (ok)"), "TLS 1.2 still served")

        let key = try String(contentsOfFile: server.dataDirectory + "/tls/key.pem", encoding: .utf8)
        let body = key.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        #expect(!server.logs.captured.contains(body), "no key in the log")
        #expect(server.logs.captured.contains("issued a new HTTPS certificate"))
    }

    /// A name given with `--allowed-host` passes the Host check, so it must be in the certificate too:
    /// `https://mybox.local` verifies (resolved to 127.0.0.1 here). A name the CA may not vouch for
    /// (a public one) is left out, with a warning, and the server still starts.
    @Test func anAllowedHostIsInTheCertificate() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.lanTrustsLoopback = true
            $0.http.host = "127.0.0.1"
            $0.allowedHosts = ["mybox.local", "notes.example.com"]
        }
        defer { server.stop() }
        let verified = try curl(server, "/healthz", host: "mybox.local",
                                arguments: ["--resolve", "mybox.local:\(server.port):127.0.0.1"])
        #expect(verified.status == 200)
        #expect(server.logs.captured.contains("may not vouch") && server.logs.captured.contains("notes.example.com"),
                "a public name is left out, and the log says so")
    }

    /// A phone paired while the old certificate was served keeps working after a restart that renews
    /// it: it trusts the CA, and its device token does not depend on the certificate.
    @Test func aPairedDeviceKeepsWorkingAfterTheCertificateIsRenewed() throws {
        let directory = TemporaryDirectory()
        let day: Int64 = 86_400_000
        let past = ManualClock(milliseconds: SystemClock().nowMilliseconds() - 700 * day)
        let first = try lanServer(directory, clock: past, trustsLoopback: false)
        let pairing = try #require(first.application.lanInfo?.pairingToken)
        let paired = try curl(first, "/pair", arguments: [
            "--header", "Content-Type: application/json",
            "--data", "{\"pairing_token\":\"\(pairing)\",\"name\":\"phone\"}",
        ])
        first.stop()
        #expect(paired.status == 201)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(paired.body)) as? [String: Any])
        let device = try #require(object["device_token"] as? String)
        let oldCertificate = try String(contentsOfFile: directory.file("data/tls/cert.pem"), encoding: .utf8)
        let authority = try #require(first.application.lanInfo?.trustAnchor?.fingerprint)

        let second = try lanServer(directory, trustsLoopback: false)
        defer { second.stop() }
        #expect(second.logs.captured.contains("reason=expiring"), "renewed: 120 days were left")
        #expect(try String(contentsOfFile: directory.file("data/tls/cert.pem"), encoding: .utf8) != oldCertificate)
        #expect(second.application.lanInfo?.trustAnchor?.fingerprint == authority, "same CA")
        #expect(try curl(second, "/healthz").status == 401, "a token is still required")
        #expect(try curl(second, "/healthz", arguments: ["--header", "Authorization: Bearer \(device)"]).status == 200)
    }
}
