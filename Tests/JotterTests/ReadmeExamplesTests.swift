import Foundation
import Testing
@testable import Jotter

/// Every relay URL the README shows starts as written: the parser accepts it (issue 12: the SMTP
/// example used to be refused for want of from=).
@Suite struct ReadmeExamplesTests {
    /// The relay URLs in the README: the first column of the Delivery table, and every `--relay …`
    /// in a code block.
    static func relayExamples() throws -> [String] {
        let readme = try String(contentsOfFile: Repository.root + "/README.md", encoding: .utf8)
        var examples: [String] = []
        for line in readme.split(separator: "\n") {
            if line.hasPrefix("| `") {
                let cell = line.dropFirst(3).prefix(while: { $0 != "`" })
                // "sendmail:?to=… or sendmail:/path" cells hold two examples.
                examples.append(String(cell))
                if let second = line.range(of: "` or `") {
                    examples.append(String(line[second.upperBound...].prefix(while: { $0 != "`" })))
                }
            }
            for match in line.matches(of: #/--relay[= ]+"?([a-z+]+:[^\s"`]+)/#) {
                examples.append(String(match.1))
            }
        }
        return examples.filter { $0.contains(":") && !$0.hasPrefix("relay") }
    }

    @Test func everyRelayExampleInTheReadmeParses() throws {
        let examples = try Self.relayExamples()
        #expect(examples.count >= 6, "found \(examples)")
        for example in examples {
            #expect(throws: Never.self, "\(example)") { _ = try RelayURL(example) }
        }
    }

    /// `make run ARGS="--lan"` (the README's way to serve phones) listens on every interface: the Makefile
    /// passed `--host 127.0.0.1` always, which outranks `--lan`'s default, and `JOTTER_PORT` likewise.
    @Test(arguments: [([String](), "0.0.0.0", 7373), (["HOST=192.0.2.1"], "192.0.2.1", 7373),
                      (["PORT=8080"], "0.0.0.0", 8080)])
    func makeRunPassesOnlyWhatIsSet(variables: [String], host: String, port: Int) throws {
        let clean = ["-u", "HOST", "-u", "PORT", "-u", "MAKEFLAGS", "-u", "MAKELEVEL"]
        let make = try Command.run("/usr/bin/env", clean + variables + ["make", "-s", "-n", "run", "ARGS=--lan"],
                                   in: Repository.root)
        #expect(make.status == 0, "\(make.errors)")
        let line = try #require(make.output.split(separator: "\n").last { $0.contains("jotter serve") })
        let arguments = line.split(separator: " ").map(String.init).drop { !$0.hasSuffix("jotter") }.dropFirst()
        guard case .serve(let configuration) = try CommandLineOptions.parse(Array(arguments), environment: [:],
                                                                           sourceRoot: Repository.root) else {
            Issue.record("not serve: \(line)")
            return
        }
        #expect(configuration.http.host == host, "\(line)")
        #expect(configuration.http.port == port, "\(line)")
    }
}
