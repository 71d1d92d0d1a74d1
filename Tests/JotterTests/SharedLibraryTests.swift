import Foundation
import Testing
@testable import Jotter

/// libcurl and libpq are opened when a relay or a store needs them, not linked: a server that delivers to
/// its Maildir maps neither (nor the twenty-odd libraries they pull in), and one that cannot open them says
/// which package is missing instead of failing every delivery.
@Suite struct SharedLibraryTests {
    /// The shared objects process `pid` has mapped (`/proc/PID/maps`), by file name.
    private static func mappedLibraries(_ pid: Int32) throws -> Set<String> {
        // Read to the end (a /proc file has no size to read up to).
        let fd = open("/proc/\(pid)/maps", O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        let maps = String(decoding: try FileIO.readAll(fd, limit: 16 << 20), as: UTF8.self)
        return Set(maps.split(separator: "\n").compactMap { line in
            line.split(separator: " ", omittingEmptySubsequences: true).last.flatMap { path in
                path.hasPrefix("/") ? String(path.split(separator: "/").last ?? "") : nil
            }
        })
    }

    private static func mapsLibrary(_ libraries: Set<String>, _ prefix: String) -> Bool {
        libraries.contains { $0.hasPrefix(prefix + ".so") || $0.hasPrefix(prefix + "-") }
    }

    /// POSTs `body` to the binary's `/send`; the memo's id.
    private static func send(_ server: ServeProcess, _ body: String) throws -> String {
        let sent = try RawHTTP.request(port: server.port, method: "POST", path: "/send",
                                       headers: [("Content-Type", "text/plain")], body: Array(body.utf8))
        #expect(sent.status == 204)
        return try #require(sent.header("X-Message-Id"))
    }

    @Test func aServerThatDeliversToItsMaildirMapsNeitherLibcurlNorLibpq() throws {
        let directory = TemporaryDirectory()
        let server = try ServeProcess(directory: directory)
        defer { server.stop() }
        let id = try Self.send(server, "buy milk")
        #expect(TestServer.waitUntil {
            ((try? FileManager.default.contentsOfDirectory(atPath: server.data + "/Maildir/new")) ?? []).contains { $0.contains(id) }
        }, "delivered to the Maildir")
        let libraries = try Self.mappedLibraries(server.process.processIdentifier)
        #expect(Self.mapsLibrary(libraries, "libsqlite3"), "read its own maps: \(libraries.sorted())")
        for absent in ["libcurl", "libpq", "libssl", "libkrb5", "libldap-2.5", "libssh2", "libnghttp2"] {
            #expect(!Self.mapsLibrary(libraries, absent), "\(absent) mapped: \(libraries.sorted())")
        }
    }

    @Test func aServerThatDeliversOverSMTPOpensLibcurlAndNotLibpq() throws {
        let directory = TemporaryDirectory()
        let smtp = try SMTPServer(mode: .plain, directory: directory.file("smtp"))
        defer { smtp.stop() }
        let server = try ServeProcess(directory: directory, arguments: [
            "--relay", "smtp://127.0.0.1:\(smtp.port)?tls=none&from=jotter@example.com&to=me@example.com",
        ])
        defer { server.stop() }
        _ = try Self.send(server, "over SMTP")
        #expect(TestServer.waitUntil(timeout: 30) { smtp.received.count == 1 }, "delivered through libcurl")
        let libraries = try Self.mappedLibraries(server.process.processIdentifier)
        #expect(Self.mapsLibrary(libraries, "libcurl"), "\(libraries.sorted())")
        #expect(!Self.mapsLibrary(libraries, "libpq"), "\(libraries.sorted())")
    }

    /// Runs `jotter` with `arguments` where libcurl's file reads as empty: in a mount namespace of its own
    /// (`unshare -m`, root only), the library found by `ldconfig` has `/dev/null` mounted over it.
    private static func withoutLibcurl(_ arguments: [String]) throws -> LiveServerTests.JotterBinary.Finished {
        let script = """
            library=$(readlink -f "$(/sbin/ldconfig -p | awk '/libcurl\\.so\\.4 /{ print $NF; exit }')")
            [ -f "$library" ] || { echo "no libcurl.so.4 found" >&2; exit 99; }
            mount --make-rprivate / && mount --bind /dev/null "$library" || exit 98
            exec "$0" "$@"
            """
        return try LiveServerTests.JotterBinary.run(["-m", "/bin/sh", "-c", script, LiveServerTests.JotterBinary.path]
                                                    + arguments, executable: "/usr/bin/unshare")
    }

    /// Whether this machine lets a test make a mount namespace (root, with CAP_SYS_ADMIN).
    static let canHideLibraries: Bool = {
        guard getuid() == 0, let finished = try? LiveServerTests.JotterBinary.run(
            ["-m", "/bin/sh", "-c", "mount --make-rprivate / && mount --bind /dev/null /dev/null"],
            executable: "/usr/bin/unshare") else { return false }
        return finished.status == 0
    }()

    /// On a machine where libcurl cannot be loaded, an SMTP relay is refused at start and `jotter send`
    /// exits 72, each naming the package; nothing hangs or retries.
    @Test(.enabled(if: canHideLibraries, "needs root and a mount namespace"))
    func withoutLibcurlAnSMTPRelayIsRefusedAtStartAndSendExits72() throws {
        let directory = TemporaryDirectory()
        let serve = try Self.withoutLibcurl([
            "serve", "--port", "0", "--data-dir", directory.file("data"),
            "--relay", "smtp://127.0.0.1:1?tls=none&from=jotter@example.com&to=me@example.com",
        ])
        #expect(serve.status != 0 && serve.status < 90, "\(serve.status): \(serve.standardError)")
        #expect(serve.standardError.contains("this relay needs libcurl") && serve.standardError.contains("libcurl4 package"),
                "\(serve.standardError)")
        #expect(!serve.standardOutput.contains("Listening"), "\(serve.standardOutput)")

        let send = try Self.withoutLibcurl(["send", "--url", "http://127.0.0.1:1", "buy milk"])
        #expect(send.status == 72, "\(send.status): \(send.standardError)")
        #expect(send.standardError.hasPrefix("jotter send: libcurl.so.4 cannot be used")
                && send.standardError.contains("libcurl4 package"), "\(send.standardError)")
    }

    @Test func aLibraryThatCannotBeOpenedIsNamedWithItsPackage() {
        #expect {
            try CurlLibrary.load(soname: "libjotter-absent.so.9", package: "jotter-absent")
        } throws: { error in
            guard let missing = error as? SharedLibrary.Missing else { return false }
            return missing.soname == "libjotter-absent.so.9" && missing.reason.contains("libjotter-absent.so.9")
                && "\(missing)".contains("the jotter-absent package")
        }
    }

    /// A library of that name that is not the one expected (no such function) is refused too, not called.
    @Test func aLibraryWithoutTheFunctionsIsRefused() {
        #expect(throws: SharedLibrary.Missing(soname: "libz.so.1", package: "libcurl4", reason: "it lacks curl_global_init")) {
            try CurlLibrary.load(soname: "libz.so.1", package: "libcurl4")
        }
        #expect(throws: SharedLibrary.Missing(soname: "libz.so.1", package: "libpq5", reason: "it lacks PQconnectdb")) {
            try PostgresLibrary.load(soname: "libz.so.1", package: "libpq5")
        }
    }

    /// Without libpq, a PostgreSQL store fails to connect with the reason and the package, as the relay prints it.
    @Test func aPostgreSQLStoreWithoutLibpqSaysWhichPackageIsMissing() {
        let missing = SharedLibrary.Missing(soname: "libpq.so.5", package: "libpq5",
                                            reason: "libpq.so.5: cannot open shared object file: No such file or directory")
        #expect {
            try PostgresConnection.opened(.failure(missing))
        } throws: { error in
            "\(error)" == "PostgreSQL connect: libpq.so.5 cannot be used (libpq.so.5: cannot open shared object file: "
                + "No such file or directory); on Debian it comes with the libpq5 package"
        }
    }

    /// Without libcurl, an SMTP, API or Jotter relay is refused when the server starts (its delivery could
    /// only fail and be retried for ever); the message names the package.
    @Test func aRelayThatNeedsLibcurlIsRefusedAtStartWithoutIt() {
        let missing = SharedLibrary.Missing(soname: "libcurl.so.4", package: "libcurl4", reason: "not found")
        #expect {
            try RelayURL.requireCurl(.failure(missing))
        } throws: { error in
            "\(error)".contains("needs libcurl") && "\(error)".contains("libcurl4 package")
        }
        #expect(throws: Never.self) { try RelayURL.requireCurl() }
        #expect(throws: Never.self) { try RelayURL("smtp://127.0.0.1:25?tls=none&from=a@example.com&to=b@example.com") }
    }
}
