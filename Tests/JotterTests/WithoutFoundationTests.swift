import Foundation
import Testing
@testable import Jotter

/// What replaced Foundation in the server (it links no Foundation, to save memory): child processes by
/// `posix_spawn`, the environment from `environ`, literal search and replace, Unicode trimming,
/// `lan.json` by Jotter's own JSON reader and writer, directory listing by `readdir`. (This target
/// still imports Foundation, to compare with it.)
@Suite struct WithoutFoundationTests {
    // MARK: The binary

    /// The point of it all: `jotter` loads no Foundation (Foundation, its ICU and internationalization
    /// libraries took ~6.6 MB of an idle server's 33 MB; FoundationEssentials another 3 MB).
    @Test func theBinaryLinksNoFoundation() throws {
        let ldd = try LiveServerTests.JotterBinary.run([LiveServerTests.JotterBinary.path], executable: "/usr/bin/ldd")
        #expect(ldd.status == 0, "\(ldd.standardError)")
        #expect(ldd.standardOutput.contains("libswiftCore"), "ldd listed its libraries")
        #expect(!ldd.standardOutput.contains("Foundation"), "\(ldd.standardOutput)")
        #expect(!ldd.standardOutput.lowercased().contains("icu"), "\(ldd.standardOutput)")
    }

    // MARK: ChildProcess

    /// Runs `sh -c script` with `input` on a pipe; returns how it ended and what it wrote.
    private static func shell(_ script: String, input: String = "") throws -> (ChildProcess.Termination, String) {
        let (child, stdin, stdout) = try ChildProcess.spawn("/bin/sh", arguments: ["-c", script], input: .pipe, output: .pipe)
        let writer = try #require(stdin), reader = try #require(stdout)
        try FileIO.write(writer, Array(input.utf8))
        close(writer)
        let output = try FileIO.readAll(reader, limit: 1 << 20)
        close(reader)
        return (try child.wait(), String(decoding: output, as: UTF8.self))
    }

    @Test func aChildReadsItsInputAndItsOutputAndErrorComeBackTogether() throws {
        let (end, output) = try Self.shell("cat; echo oops >&2; exit 3", input: "line one\nline two\n")
        #expect(end == .exited(3))
        #expect(output == "line one\nline two\noops\n")
    }

    @Test func aSignalThatEndsAChildIsReportedAsOne() throws {
        #expect(try Self.shell("kill -TERM $$").0 == .signalled(SIGTERM))
        #expect(try Self.shell("exit 0").0 == .exited(0))
    }

    @Test func aProgramThatIsNotThereIsASpawnError() {
        #expect(throws: SystemError(code: ENOENT)) {
            try ChildProcess.spawn("/nonexistent/sendmail", arguments: [], input: .pipe, output: .discard)
        }
    }

    /// Jotter ignores SIGPIPE (and main SIGINT and SIGTERM): a child starts with every signal at its
    /// default, in its own process group, with none of Jotter's descriptors but 0, 1 and 2.
    @Test func aChildInheritsNoIgnoredSignalNoDescriptorAndNoProcessGroup() throws {
        let previous = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, previous) }
        let leaked = open("/dev/null", O_RDONLY)  // not close-on-exec
        defer { close(leaked) }
        try #require(leaked > 2)
        let (end, output) = try Self.shell("""
            grep SigIgn /proc/$$/status | cut -f2
            [ -e /proc/$$/fd/\(leaked) ] && echo open || echo closed
            [ "$(ps -o pgid= -p $$ | tr -d ' ')" = "$$" ] && echo leader || echo follower
            """)
        #expect(end == .exited(0))
        let lines = output.split(separator: "\n").map(String.init)
        try #require(lines.count == 3, "\(output)")
        // Only glibc's own two real-time signals (32 and 33), which it keeps ignored.
        let ignored = UInt64(lines[0], radix: 16) ?? .max
        #expect(ignored & ~UInt64(0x1_8000_0000) == 0, "SigIgn \(lines[0])")
        #expect(lines[1] == "closed")
        #expect(lines[2] == "leader")
    }

    @Test func discardedOutputGoesNowhere() throws {
        let (child, stdin, stdout) = try ChildProcess.spawn("/bin/sh", arguments: ["-c", "echo out; echo err >&2"],
                                                            input: .pipe, output: .discard)
        #expect(stdout == nil)
        if let stdin { close(stdin) }
        #expect(try child.wait() == .exited(0))
    }

    // MARK: Environment

    @Test func theEnvironmentIsGetenvs() {
        let environment = ProcessEnvironment.current
        for name in ["PATH", "HOME"] {
            #expect(environment[name] == getenv(name).map { String(cString: $0) })
        }
        #expect(environment == ProcessInfo.processInfo.environment)
    }

    // MARK: Literal search and replace

    @Test func replacingIsByteForByte() {
        #expect("a%b%%c".replacingLiterally("%", with: "%%") == "a%%b%%%%c")
        #expect("nothing here".replacingLiterally("%", with: "%%") == "nothing here")
        #expect("".replacingLiterally("x", with: "y") == "")
        #expect("abc".replacingLiterally("", with: "y") == "abc", "an empty target matches nothing")
        #expect("aaa".replacingLiterally("aa", with: "b") == "ba", "left to right, not overlapping")
        #expect("日本語 {code} 語".replacingLiterally("{code}", with: "123456") == "日本語 123456 語")
        // An escape applies even where a combining mark follows (Characters would group them).
        #expect("%\u{301}".replacingLiterally("%", with: "%%") == "%%\u{301}")
        #expect("\\\u{301}".replacingLiterally("\\", with: "\\\\") == "\\\\\u{301}")
        // CR LF, then lone CR: "\r\r\n" is two line breaks (as Foundation made it), not one CR LF.
        let text = "a\r\r\nb\rc\r\n"
        #expect(text.replacingLiterally("\r\n", with: "\n").replacingLiterally("\r", with: "\n") == "a\n\nb\nc\n")
    }

    @Test func headerNamesCompareWithoutRegardToASCIICaseOnly() {
        #expect("Content-Type".caseInsensitiveEquals("content-TYPE"))
        #expect("X-1_@[".caseInsensitiveEquals("x-1_@["))
        #expect(!"Host".caseInsensitiveEquals("Hosts") && !"Host".caseInsensitiveEquals("Hos"))
        // Only letters fold: '@' (0x40) and '`' (0x60), '[' and '{' differ by the same bit.
        #expect(!"@".caseInsensitiveEquals("`") && !"[".caseInsensitiveEquals("{"))
        #expect(!"K".caseInsensitiveEquals("\u{212A}"), "the Kelvin sign is not a K here")
        #expect("".caseInsensitiveEquals(""))
        let bridged = String(decoding: Array("ACCEPT".utf8), as: UTF8.self)
        #expect(bridged.caseInsensitiveEquals(String("xaccept".dropFirst())))
    }

    @Test func searchingFindsTheFirstOccurrence() throws {
        let html = "<p>é</p><script>one</script><script>two</script>"
        let range = try #require(html.firstLiteralRange(of: "<script>"))
        #expect(html[..<range.lowerBound] == "<p>é</p>")
        #expect(html[range.upperBound...].hasPrefix("one"))
        #expect(html.firstLiteralRange(of: "<style>") == nil)
        #expect(PageRoute.elementContents(tag: "script", in: html) == ["one", "two"])
        #expect(PageRoute.render("{{a}} {{b}} {{", values: ["a": "<1>"]) == "&lt;1&gt; {{b}} {{")
    }

    // MARK: Trimming

    @Test(arguments: ["  a b  ", "\t\u{A0}x\u{3000}", "\n x \n", "\u{2028}y\u{2029}", "", " \t ", "é\u{301} ", "\r\nz"])
    func trimmingMatchesFoundation(text: String) {
        #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespaces))
        #expect(text.trimmingWhitespaceAndNewlines() == text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func addressesAreTrimmedOfUnicodeBlanks() throws {
        let address = try RelayURL.address("\u{A0} \"Ana\" <ana@example.com>\t")
        #expect(address.address == "ana@example.com")
        #expect(address.name == "Ana")
        // Quotes belong to the name unless they quote all of it; a quoted one is unescaped.
        #expect(try RelayURL.address("Say \"hi\" <me@example.com>").name == "Say \"hi\"")
        #expect(try RelayURL.address("\"Ana \\\"A\\\" Diaz\" <ana@example.com>").name == "Ana \"A\" Diaz")
        #expect(try RelayURL.address("\"Ana\" \"Diaz\" <ana@example.com>").name == "\"Ana\" \"Diaz\"")
        #expect(try RelayURL.address("Jötter <j@example.com>").name == "Jötter")
    }

    // MARK: Relay placeholder

    @Test func thePlaceholderRecipientGoesAtTheEndOfTheQuery() {
        #expect(RelayApplication.withRecipientPlaceholder("resend://re_x") == "resend://re_x?to=recipient@relay.invalid")
        #expect(RelayApplication.withRecipientPlaceholder("resend://re_x?") == "resend://re_x?to=recipient@relay.invalid")
        #expect(RelayApplication.withRecipientPlaceholder("RESEND://re_x?from=a@b.c&#frag")
            == "RESEND://re_x?from=a@b.c&to=recipient@relay.invalid#frag")
        #expect(RelayApplication.withRecipientPlaceholder("resend://re_x?t%6F=a@b.c") == "resend://re_x?t%6F=a@b.c",
                "a query item named to, however it is written")
        #expect(RelayApplication.withRecipientPlaceholder("resend://re_x?to") == "resend://re_x?to")
    }

    // MARK: Files

    @Test func lanJSONRoundTrips() throws {
        var lan = LANInfo(addresses: ["192.0.2.7", "fe80::1"], scheme: "https", fingerprint: "AB:CD", pairingToken: "t")
        lan.port = 8443
        let read = try #require(LANRuntimeFile.decode(LANRuntimeFile.encode(lan), token: "other"))
        #expect(read.addresses == lan.addresses && read.scheme == "https" && read.fingerprint == "AB:CD")
        #expect(read.port == 8443 && read.pairingToken == "other")

        lan.fingerprint = nil
        let bytes = LANRuntimeFile.encode(lan)
        #expect(!String(decoding: bytes, as: UTF8.self).contains("fingerprint"))
        #expect(try #require(LANRuntimeFile.decode(bytes, token: "t")).fingerprint == nil)
    }

    /// What the Foundation build wrote (JSONEncoder escapes `/`, orders keys its own way) still reads.
    @Test func lanJSONFromTheFoundationBuildReads() throws {
        let old = #"{"addresses":["10.0.0.2"],"scheme":"http","fingerprint":null,"port":7373,"x":"a\/b"}"#
        let read = try #require(LANRuntimeFile.decode(Array(old.utf8), token: "t"))
        #expect(read.addresses == ["10.0.0.2"] && read.scheme == "http" && read.port == 7373 && read.fingerprint == nil)
        #expect(LANRuntimeFile.decode(Array(#"{"scheme":"http","port":"7373","addresses":[]}"#.utf8), token: "t") == nil)
        #expect(LANRuntimeFile.decode(Array("not json".utf8), token: "t") == nil)
    }

    @Test func staticFilesAreListedAndTypedByExtension() throws {
        let directory = TemporaryDirectory()
        for name in ["a.SVG", "b.png", "index.html", ".hidden.png", "noextension", "c.unknown"] {
            try FileIO.writeFile(directory.file(name), Array("x".utf8), mode: 0o644)
        }
        mkdir(directory.file("sub.png"), 0o755)
        #expect(Set(StaticFiles.names(in: directory.path)) == [
            "a.SVG", "b.png", "index.html", ".hidden.png", "noextension", "c.unknown", "sub.png"])
        #expect(StaticFiles.names(in: directory.file("missing")).isEmpty)
        let files = StaticFiles(publicDirectory: directory.path)
        #expect(Set(files.files.keys) == ["a.SVG", "b.png"], "no page, hidden file, directory or unknown type")
        #expect(files.files["a.SVG"]?.type == "image/svg+xml")
        #expect(StaticFiles.pathExtension("icon.tar.gz") == "gz")
        #expect(StaticFiles.pathExtension(".profile") == "")
        #expect(StaticFiles.pathExtension("name.") == "")
    }

    @Test func translationsAreAnObjectOfStrings() {
        #expect(Localization.table(Array(#"{"a":"1","b":"ü"}"#.utf8)) == ["a": "1", "b": "ü"])
        #expect(Localization.table(Array(#"{"a":1}"#.utf8)) == nil)
        #expect(Localization.table(Array(#"["a"]"#.utf8)) == nil)
        #expect(Localization.table(Array(#"{"a":"1","a":"2"}"#.utf8)) == nil, "a key twice is refused")
    }
}
