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
}
