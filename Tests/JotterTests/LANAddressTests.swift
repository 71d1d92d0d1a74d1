import Foundation
import Synchronization
import Testing
@testable import Jotter

/// LAN mode follows the machine's network while it runs: Wi-Fi that connects after the service started
/// at login, a new DHCP lease, a laptop carried to another network. Phones must reach it at the new
/// address (certificate, `Host` check, pairing links) without a restart, and a phone's open connection
/// must not break when the certificate changes under it.
///
/// All traffic goes to 127.0.0.1: curl and Python are told the LAN address (to verify the certificate and
/// send it as `Host`) and connect to loopback.
@Suite(.serialized)
struct LANAddressTests {
    static func server(_ directory: TemporaryDirectory, _ interfaces: TestInterfaces,
                       https: Bool = true) throws -> TestServer {
        try TestServer(dataDirectory: directory.file("data"), interfaces: interfaces) {
            $0.lan = true
            $0.insecureHTTP = !https
            $0.http.host = "127.0.0.1"
            // A test's keep-alive connection waits while the addresses change: never closed for that.
            $0.http.headerTimeoutSeconds = 120
            $0.http.requestTimeoutSeconds = 120
            $0.http.idleTimeoutSeconds = 120
        }
    }

    /// `GET path` over HTTPS as a phone at `address` would send it (certificate verified for `address`
    /// against the local CA, `Host: address:port`), connected to 127.0.0.1. The status, or nil when the
    /// TLS handshake or verification failed.
    static func get(_ server: TestServer, _ path: String, as address: String) throws -> Int? {
        let port = server.port
        let result = try Command.run("/usr/bin/curl", [
            "--silent", "--max-time", "30", "--output", "/dev/null", "--write-out", "%{http_code}",
            "--cacert", server.dataDirectory + "/tls/ca.pem",
            "--connect-to", "\(address):\(port):127.0.0.1:\(port)", "https://\(address):\(port)\(path)",
        ])
        return result.status == 0 ? Int(result.output) : nil
    }

    static func object(_ response: RawHTTP.Response) -> [String: Any] {
        response.json as? [String: Any] ?? [:]
    }

    /// A public address (or a VPN's 100.64/10) is one the local CA may not vouch for: the certificate leaves it
    /// out, so a phone opening it would be refused by its browser. No pairing link, `lan.json` or banner
    /// names it; before, the second link printed at start was one that could never work.
    @Test("An address the certificate cannot name is in no pairing link; with only such addresses, the banner says why")
    func addressesTheCertificateCannotNameAreInNoLink() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces(["10.20.30.40", "198.51.100.7"])
        let server = try Self.server(directory, interfaces)
        defer { server.stop() }
        let lan = try #require(server.application.lanInfo)
        #expect(lan.addresses == ["10.20.30.40", "198.51.100.7"], "both still pass the Host check")
        #expect(lan.unnamed == ["198.51.100.7"])
        #expect(lan.pairingURLs.count == 1 && lan.pairingURLs.allSatisfy { $0.hasPrefix("https://10.20.30.40:") }, "\(lan.pairingURLs)")
        let link = Self.object(try server.route("POST", "/pair/link"))
        #expect((link["urls"] as? [String])?.count == 1, "\(link)")
        let file = try String(contentsOfFile: server.dataDirectory + "/lan.json", encoding: .utf8)
        #expect(file.contains("10.20.30.40") && !file.contains("198.51.100.7"), "\(file)")
        #expect(try Self.get(server, "/healthz", as: "10.20.30.40") == 200)
        #expect(try Self.get(server, "/healthz", as: "198.51.100.7") == nil, "as the link would have failed")

        // The machine moves to a network with only a public address: no link, and the banner says why.
        interfaces.set(["198.51.100.7"])
        #expect(server.application.refreshLANAddresses())
        let moved = try #require(server.application.lanInfo)
        #expect(moved.pairingURLs.isEmpty)
        let banner = LANBanner.text(moved, host: "0.0.0.0")
        #expect(banner.contains("No LAN address a phone can open over HTTPS") && banner.contains("198.51.100.7"), "\(banner)")
        #expect(LANBanner.changedText(moved).contains("no LAN address now"))
    }

    @Test("--lan with a loopback --host: the banner says phones cannot reach it, not 'is this machine on a network?'")
    func aLoopbackHostIsNamedAsTheReason() throws {
        let lan = LANInfo(addresses: [], scheme: "https", fingerprint: "AB:CD", pairingToken: "token")
        for host in ["127.0.0.1", "localhost", "::1"] {
            let banner = LANBanner.text(lan, host: host)
            #expect(banner.contains("--host \(host) answers this computer only") && !banner.contains("on a network?"), "\(banner)")
        }
        #expect(LANBanner.text(lan, host: "0.0.0.0").contains("No LAN address found: is this machine on a network?"))
    }

    @Test("A network that comes up after start is followed without a restart")
    func aNetworkThatComesUpLaterIsFollowed() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces([])  // started at login, before Wi-Fi
        let server = try Self.server(directory, interfaces)
        defer { server.stop() }
        let application = server.application
        #expect(application.lanInfo?.addresses == [])
        #expect(try Self.get(server, "/healthz", as: "10.20.30.40") == nil, "no certificate names it yet")
        let before = try server.route("POST", "/pair/link")
        #expect(before.status == 201 && Self.object(before)["url"] is NSNull, "no address to put in a link")
        let certificate = try String(contentsOfFile: server.dataDirectory + "/tls/cert.pem", encoding: .utf8)

        interfaces.set(["10.20.30.40"])
        #expect(application.refreshLANAddresses())
        #expect(!application.refreshLANAddresses(), "unchanged: nothing to do")

        #expect(try Self.get(server, "/healthz", as: "10.20.30.40") == 200, "certificate and Host check follow")
        #expect(try Self.get(server, "/healthz", as: "127.0.0.1") == 200, "this machine still verifies")
        #expect(try String(contentsOfFile: server.dataDirectory + "/tls/cert.pem", encoding: .utf8) != certificate)
        let link = try server.route("POST", "/pair/link")
        let url = try #require(Self.object(link)["url"] as? String)
        #expect(url.hasPrefix("https://10.20.30.40:\(server.port)/#pair="))
        let file = try String(contentsOfFile: server.dataDirectory + "/lan.json", encoding: .utf8)
        #expect(file.contains("\"addresses\":[\"10.20.30.40\"]"), "for jotter pair: \(file)")
        #expect(application.lanInfo?.addresses == ["10.20.30.40"])
        #expect(server.logs.captured.contains("the LAN addresses changed"))
        #expect(!server.logs.captured.contains("10.20.30.40"), "the log counts addresses, it does not name them")

        // The daemon that served the old certificate stops once its connections have ended.
        #expect(TestServer.waitUntil(timeout: 60) { application.server.daemonCount == 1 })
    }

    @Test("An address the machine no longer has is refused, the new one answered")
    func anAddressThatGoesAwayIsRefused() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces(["192.168.1.20"])
        let server = try Self.server(directory, interfaces)
        defer { server.stop() }
        let application = server.application
        #expect(try Self.get(server, "/healthz", as: "192.168.1.20") == 200)

        interfaces.set(["10.0.0.7", "192.168.1.21"])  // another network: its address first
        #expect(application.refreshLANAddresses())
        #expect(try Self.get(server, "/healthz", as: "10.0.0.7") == 200)
        #expect(try Self.get(server, "/healthz", as: "192.168.1.21") == 200)
        let stale = try server.route("GET", "/healthz", headers: [("Host", "192.168.1.20:\(server.port)")])
        #expect(stale.status == 403 && stale.errorCode == "forbidden_host")
        let urls = try #require(Self.object(try server.route("POST", "/pair/link"))["urls"] as? [String])
        #expect(urls.map { $0.components(separatedBy: "/#")[0] }
            == ["https://10.0.0.7:\(server.port)", "https://192.168.1.21:\(server.port)"])

        // Back home: the certificate names that address again (issued anew: it names only the addresses of now).
        interfaces.set(["192.168.1.20"])
        #expect(application.refreshLANAddresses())
        #expect(try Self.get(server, "/healthz", as: "192.168.1.20") == 200)
        #expect(try server.route("GET", "/healthz", headers: [("Host", "10.0.0.7:\(server.port)")]).status == 403)
    }

    @Test("A phone's open connection is answered across a certificate change, and new ones get the new certificate")
    func anOpenConnectionSurvivesTheChange() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces(["192.168.1.20"])
        let server = try Self.server(directory, interfaces)
        defer { server.stop() }
        let application = server.application
        let ready = directory.file("ready"), changed = directory.file("changed")
        // One keep-alive connection: a request, then (once the address has changed) another on the same
        // connection; then a new connection, whose certificate must name the new address.
        let script = """
            import http.client, json, os, ssl, sys, time
            port, ca, ready, changed = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
            context = ssl.create_default_context(cafile=ca)
            def get(connection, host):
                connection.request('GET', '/healthz', headers={'Host': '%s:%d' % (host, port)})
                response = connection.getresponse()
                response.read()
                return response.status
            old = http.client.HTTPSConnection('127.0.0.1', port, context=context, timeout=30)
            first = get(old, '192.168.1.20')
            open(ready, 'w').close()
            deadline = time.monotonic() + 60
            while not os.path.exists(changed) and time.monotonic() < deadline:
                time.sleep(0.05)
            second = get(old, '10.0.0.7')
            names = [value for kind, value in old.sock.getpeercert()['subjectAltName'] if kind == 'IP Address']
            old.close()
            new = http.client.HTTPSConnection('127.0.0.1', port, context=context, timeout=30)
            third = get(new, '10.0.0.7')
            new_names = [value for kind, value in new.sock.getpeercert()['subjectAltName'] if kind == 'IP Address']
            new.close()
            print(json.dumps({'first': first, 'second': second, 'third': third,
                              'old_names': names, 'new_names': new_names}))
            """
        let result = Mutex<Result<String, any Error>?>(nil)
        let finished = DispatchSemaphore(value: 0)
        let arguments = [String(server.port), server.dataDirectory + "/tls/ca.pem", ready, changed]
        Thread.detachNewThread {
            result.withLock { $0 = Result { try Python.run(script, arguments: arguments) } }
            finished.signal()
        }
        #expect(TestServer.waitUntil(timeout: 60) { FileManager.default.fileExists(atPath: ready) })
        interfaces.set(["10.0.0.7"])
        #expect(application.refreshLANAddresses())
        #expect(application.server.daemonCount == 2, "the old daemon still holds the phone's connection")
        #expect(FileManager.default.createFile(atPath: changed, contents: nil))
        #expect(finished.wait(timeout: .now() + 120) == .success)
        let output = try #require(try result.withLock { $0 }?.get())
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
        #expect(answer["first"] as? Int == 200)
        #expect(answer["second"] as? Int == 200, "the open connection is answered, with the new Host")
        #expect(answer["third"] as? Int == 200)
        #expect((answer["old_names"] as? [String])?.contains("192.168.1.20") == true)
        #expect((answer["new_names"] as? [String])?.contains("10.0.0.7") == true, "\(output)")
        #expect((answer["new_names"] as? [String])?.contains("192.168.1.20") == false)
        #expect(TestServer.waitUntil(timeout: 60) { application.server.daemonCount == 1 },
                "the old daemon stops once the phone closed its connection")
    }

    @Test("Stopping while a replaced certificate's connection is still open stops both daemons")
    func stopWhileTheOldDaemonHoldsAConnection() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces(["192.168.1.20"])
        let server = try Self.server(directory, interfaces)
        let application = server.application
        let ready = directory.file("ready"), done = directory.file("done")
        let script = """
            import http.client, os, ssl, sys, time
            port, ca, ready, done = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
            connection = http.client.HTTPSConnection('127.0.0.1', port, context=ssl.create_default_context(cafile=ca),
                                                     timeout=30)
            connection.request('GET', '/healthz', headers={'Host': '192.168.1.20:%d' % port})
            response = connection.getresponse()
            response.read()
            open(ready, 'w').close()
            deadline = time.monotonic() + 90
            while not os.path.exists(done) and time.monotonic() < deadline:
                time.sleep(0.05)
            try:
                connection.request('GET', '/healthz', headers={'Host': '192.168.1.20:%d' % port})
                print('answered %d' % connection.getresponse().status)
            except Exception as error:
                print('closed ' + type(error).__name__)
            """
        let result = Mutex<String?>(nil)
        let finished = DispatchSemaphore(value: 0)
        let arguments = [String(server.port), server.dataDirectory + "/tls/ca.pem", ready, done]
        Thread.detachNewThread {
            let output = (try? Python.run(script, arguments: arguments)) ?? "python failed"
            result.withLock { $0 = output }
            finished.signal()
        }
        defer { _ = FileManager.default.createFile(atPath: done, contents: nil) }  // lets Python end
        #expect(TestServer.waitUntil(timeout: 60) { FileManager.default.fileExists(atPath: ready) })
        interfaces.set(["10.0.0.7"])
        #expect(application.refreshLANAddresses())
        #expect(application.server.daemonCount == 2)
        let started = Date()
        server.stop()
        #expect(Date().timeIntervalSince(started) < 30, "stop does not wait for the phone to hang up")
        #expect(application.server.daemonCount == 0)
        _ = FileManager.default.createFile(atPath: done, contents: nil)
        #expect(finished.wait(timeout: .now() + 120) == .success)
        let output = result.withLock { $0 } ?? ""
        #expect(output.hasPrefix("closed"), "the replaced daemon was stopped with the server: \(output)")
    }

    @Test("A certificate that could not be made is made at the next check, though the addresses did not change again")
    func aFailedCertificateIsTriedAgain() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces(["192.168.1.20"])
        let server = try Self.server(directory, interfaces)
        defer { server.stop() }
        let application = server.application
        // Something stands where the certificate is written: a directory with a file in it.
        let path = server.dataDirectory + "/tls/cert.pem"
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect(FileManager.default.createFile(atPath: path + "/in-the-way", contents: nil))

        interfaces.set(["10.0.0.7"])
        #expect(application.refreshLANAddresses(), "the Host check and links follow all the same")
        #expect(try Self.get(server, "/healthz", as: "10.0.0.7") == nil, "no certificate names it")
        #expect(server.logs.captured.contains("trying again at the next check"))

        try FileManager.default.removeItem(atPath: path)
        #expect(!application.refreshLANAddresses(), "the addresses did not change")
        #expect(try Self.get(server, "/healthz", as: "10.0.0.7") == 200, "the certificate was made and is served")
    }

    @Test("Plain HTTP on the LAN (--insecure-http) follows the addresses too")
    func plainHTTPFollowsTheAddresses() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces(["192.168.1.20"])
        let server = try Self.server(directory, interfaces, https: false)
        defer { server.stop() }
        interfaces.set(["192.168.7.3"])
        #expect(server.application.refreshLANAddresses())
        #expect(try server.route("GET", "/healthz", headers: [("Host", "192.168.7.3:\(server.port)")]).status == 200)
        let url = try #require(Self.object(try server.route("POST", "/pair/link"))["url"] as? String)
        #expect(url.hasPrefix("http://192.168.7.3:\(server.port)/#pair="))
        #expect(server.application.server.daemonCount == 1, "no certificate, no second daemon")
    }

    @Test("A server whose addresses were given does not follow the machine's")
    func fixedAddressesStay() throws {
        let directory = TemporaryDirectory()
        let interfaces = TestInterfaces(["10.9.9.9"])
        let server = try TestServer(dataDirectory: directory.file("data"), interfaces: interfaces) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.http.host = "127.0.0.1"
            $0.lanAddresses = ["192.0.2.10"]
        }
        defer { server.stop() }
        #expect(!server.application.refreshLANAddresses())
        #expect(server.application.lanInfo?.addresses == ["192.0.2.10"])
    }

    /// Whether this machine lets a test make a network namespace with an interface of its own (root, as
    /// CI runs; `unshare` and `ip` from util-linux and iproute2).
    static let canMakeInterfaces: Bool = {
        let probe = try? Command.run("/usr/bin/unshare", ["-n", "/bin/sh", "-c",
                                                          "PATH=/usr/sbin:/usr/bin:/sbin:/bin ip tuntap add dev probe0 mode tun"])
        return probe?.status == 0
    }()

    /// The real binary, in a network namespace of its own that has only loopback when it starts: an
    /// interface then comes up with an address (Wi-Fi connecting after login), and the kernel's notice,
    /// not a test's call, makes the server follow it.
    @Test("jotter serve --lan follows an interface that comes up after it started",
          .enabled(if: canMakeInterfaces, "needs root: a network namespace and a TUN interface"))
    func theBinaryFollowsANewInterface() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data"), output = directory.file("stdout"), errors = directory.file("stderr")
        let script = #"""
            set -u
            export PATH=/usr/sbin:/usr/bin:/sbin:/bin
            jotter=$1 data=$2 public=$3 output=$4 errors=$5
            ip link set lo up
            "$jotter" serve --lan --host 0.0.0.0 --port 0 --data-dir "$data" --public-dir "$public" >"$output" 2>"$errors" &
            server=$!
            trap 'kill -KILL $server 2>/dev/null; wait $server 2>/dev/null' EXIT
            port=
            for _ in $(seq 1200); do
                port=$(sed -n 's|^Listening on https://127[.]0[.]0[.]1:\([0-9]*\)$|\1|p' "$output")
                [ -n "$port" ] && break
                sleep 0.05
            done
            [ -n "$port" ] || { echo "no Listening line"; exit 1; }
            before=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$data/tls/ca.pem" \
                --connect-to "10.77.0.9:$port:127.0.0.1:$port" "https://10.77.0.9:$port/healthz")
            ip tuntap add dev jotter0 mode tun && ip addr add 10.77.0.9/24 dev jotter0 && ip link set jotter0 up || exit 1
            # Well before the server's own check every minute: only the kernel's notice can make it in time.
            after=000
            deadline=$((SECONDS + 30))
            while [ $SECONDS -lt $deadline ]; do
                after=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$data/tls/ca.pem" \
                    --connect-to "10.77.0.9:$port:127.0.0.1:$port" "https://10.77.0.9:$port/healthz")
                # The log goes out through its own buffer: wait for it too before the server is killed.
                [ "$after" = 200 ] && grep -q '^The network changed' "$output" \
                    && grep -q 'the LAN addresses changed' "$errors" && break
                sleep 0.05
            done
            echo "port=$port before=$before after=$after"
            """#
        let finished = try LiveServerTests.JotterBinary.run(
            ["-n", "/bin/bash", "-c", script, "bash", LiveServerTests.JotterBinary.path, data, Repository.publicDirectory,
             output, errors], executable: "/usr/bin/unshare", timeout: 240)
        let log = String(decoding: Evidence.fileBytes(errors), as: UTF8.self)
        let printed = String(decoding: Evidence.fileBytes(output), as: UTF8.self)
        let line = finished.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        let port = try #require(line.firstMatch(of: #/port=([0-9]+)/#).map { String($0.1) }, "\(line) \(finished.standardError)")
        #expect(line.hasSuffix("before=000 after=200"), "no certificate named it before; it answers after: \(line)\n\(log)")
        #expect(printed.contains("No LAN address found"), "started before the network: \(printed)")
        #expect(printed.contains("The network changed: phones now reach Jotter at https://10.77.0.9:\(port)"), "\(printed)")
        #expect(log.contains("the LAN addresses changed"))
    }

    /// A LAN server that crashed leaves `lan.json` behind; a server started without --lan clears it, so
    /// `jotter pair` prints no link to a server that is not there.
    @Test func aServerWithoutLANClearsWhatACrashedLANServerLeft() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        let stale = data + "/lan.json"
        try #"{"scheme":"https","port":1,"addresses":["192.168.1.20"]}"#.write(toFile: stale, atomically: true, encoding: .utf8)
        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        #expect(!FileManager.default.fileExists(atPath: stale))
        #expect(throws: (any Error).self) { _ = try PairCommand.run(dataDirectory: data) }
    }

    /// A CA as an older Jotter made it, in `tls`: name constraints permitting `dnsNames` and `networks` only.
    static func makeOlderCA(in tls: String, dnsNames: [String], networks: [String]) throws {
        try FileManager.default.createDirectory(atPath: tls, withIntermediateDirectories: true)
        let constraints = dnsNames.map { "permitted;DNS:\($0)" } + networks.map { "permitted;IP:\($0)" }
        try ("[req]\ndistinguished_name=dn\n[dn]\n[v3_ca]\nbasicConstraints=critical,CA:TRUE,pathlen:0\n"
            + "keyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\n"
            + "nameConstraints=critical," + constraints.joined(separator: ",") + "\n")
            .write(toFile: tls + "/ca.cnf", atomically: true, encoding: .utf8)
        let made = try Command.openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                        "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "3650", "-subj", "/CN=old CA",
                                        "-config", "ca.cnf", "-extensions", "v3_ca"], in: tls)
        try #require(made.status == 0, "\(made.errors)")
    }

    /// A CA made before its names were narrowed (one that admits this machine's bare host name) keeps
    /// working, its certificates keep naming that name, and the start warns once, not at every change.
    @Test(.enabled(if: NetworkInterfaces.hostNames().contains { !$0.contains(".") }, "a host name without a dot"))
    func anOlderWideCAWarnsOnceAndKeepsItsNames() throws {
        let name = try #require(NetworkInterfaces.hostNames().first { !$0.contains(".") })
        let directory = TemporaryDirectory()
        let tls = directory.file("data/tls")
        try Self.makeOlderCA(in: tls, dnsNames: ["localhost", "local", name],
                             networks: ["10.0.0.0/255.0.0.0", "192.168.0.0/255.255.0.0", "127.0.0.0/255.0.0.0"])
        let interfaces = TestInterfaces(["192.168.1.20"])
        let server = try Self.server(directory, interfaces)
        defer { server.stop() }
        let san = try Command.openssl(["x509", "-in", "cert.pem", "-noout", "-ext", "subjectAltName"], in: tls).output
        #expect(san.contains("DNS:\(name)"), "the old CA's certificate keeps the bare name: \(san)")
        interfaces.set(["10.0.0.7"])
        #expect(server.application.refreshLANAddresses())
        let warnings = server.logs.captured.components(separatedBy: "may vouch for every name under").count - 1
        #expect(warnings == 1, "warned once, at start: \(warnings)")
    }

    /// A CA made before e-mail was constrained (the same constraints otherwise) keeps serving phones that
    /// trust it, and the start says, once, that it could sign mail. A CA made now does not warn.
    @Test func anOlderCAThatCouldSignMailWarnsOnce() throws {
        let directory = TemporaryDirectory()
        try Self.makeOlderCA(in: directory.file("data/tls"), dnsNames: ["localhost", "local"],
                             networks: LocalCertificateAuthority.permittedNetworks)
        let warning = "may vouch for e-mail addresses"
        let interfaces = TestInterfaces(["192.168.1.20"])
        do {
            let server = try Self.server(directory, interfaces)
            defer { server.stop() }
            #expect(try Self.get(server, "/healthz", as: "192.168.1.20") == 200, "the old CA still serves")
            interfaces.set(["10.0.0.7"])
            #expect(server.application.refreshLANAddresses())
            let warnings = server.logs.captured.components(separatedBy: warning).count - 1
            #expect(warnings == 1, "warned once, at start: \(warnings)")
        }
        let fresh = TemporaryDirectory()
        let server = try Self.server(fresh, TestInterfaces(["192.168.1.20"]))
        defer { server.stop() }
        #expect(!server.logs.captured.contains(warning), "a CA made now cannot sign mail")
        #expect(server.logs.captured.contains("created a local certificate authority"))
    }
}
