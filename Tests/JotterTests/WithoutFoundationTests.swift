import Foundation
import Testing
@testable import Jotter

/// What replaced Foundation in the server (it links no Foundation, to save memory): child processes by
/// `posix_spawn`. (This target still imports Foundation, to compare with it.)
@Suite struct WithoutFoundationTests {
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
}
