import Foundation
import Testing
@testable import Jotter

/// Subjects and display names as notmuch shows them: notmuch reads mail with GMime, which stops
/// decoding at a base64 encoded-word that ends in `=` padding when it is not the last one (Python
/// and Dovecot read on). Debian's `notmuch` is a test dependency.
@Suite struct GMimeReaderTests {
    /// What notmuch decodes from each message: [(subject, from)] in the order given.
    static func readWithNotmuch(_ messages: [MailMessage]) throws -> [(subject: String, from: String)] {
        let directory = TemporaryDirectory()
        let mail = directory.file("mail")
        for folder in ["cur", "new", "tmp"] {
            try FileManager.default.createDirectory(atPath: mail + "/" + folder, withIntermediateDirectories: true)
        }
        for (index, message) in messages.enumerated() {
            try Data(message.rendered()).write(to: URL(fileURLWithPath: mail + "/cur/\(index).test:2,S"))
        }
        let config = directory.file("notmuch-config")
        try "[database]\npath=\(mail)\n[new]\ntags=new\n[maildir]\nsynchronize_flags=false\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let indexed = try LiveServerTests.JotterBinary.run(["--config=" + config, "new", "--quiet"],
                                                           executable: "/usr/bin/notmuch", timeout: 60)
        #expect(indexed.status == 0, "notmuch new: \(indexed.standardError)")
        var results: [(String, String)] = []
        for message in messages {
            let shown = try LiveServerTests.JotterBinary.run(
                ["--config=" + config, "show", "--format=json", "--body=false", "id:\(message.id)@example.org"],
                executable: "/usr/bin/notmuch", timeout: 60)
            #expect(shown.status == 0, "notmuch show: \(shown.standardError)")
            let headers = try #require(Self.headers(in: try JSONSerialization.jsonObject(with: Data(shown.standardOutput.utf8))))
            results.append((headers["Subject"] ?? "", headers["From"] ?? ""))
        }
        return results
    }

    /// The first `headers` object in notmuch's nested JSON.
    private static func headers(in json: Any) -> [String: String]? {
        if let object = json as? [String: Any] {
            if let headers = object["headers"] as? [String: String] { return headers }
            for value in object.values { if let found = headers(in: value) { return found } }
        } else if let array = json as? [Any] {
            for value in array { if let found = headers(in: value) { return found } }
        }
        return nil
    }

    static let subjects = [
        String(repeating: "😀", count: 30),
        "a" + String(repeating: "日", count: 40),
        String(repeating: "長い件名のテスト", count: 12),
        "Meeting: Café ☕ at 10 — don't be late! 🎉🎉🎉 " + String(repeating: "é", count: 50),
        String(repeating: "مرحبا ", count: 20),
        "👩‍💻 ship it 🇯🇵🇫🇷 " + String(repeating: "x", count: 90),
        String(repeating: "ab", count: 60),
    ]

    @Test func notmuchDecodesEveryLongSubjectInFull() throws {
        let messages = Self.subjects.enumerated().map { index, subject in
            MailMessage(id: "gmime-\(index)", date: 1_764_581_405_000,
                        from: MailAddress(name: "Jotter", address: "jotter@example.org"),
                        to: MailAddress(address: "me@example.net"), subject: subject, body: "x", attempt: 1)
        }
        let read = try Self.readWithNotmuch(messages)
        for (subject, shown) in zip(Self.subjects, read) {
            #expect(shown.subject == subject, "notmuch shows \(shown.subject.count) of \(subject.count) characters")
        }
    }

    @Test func notmuchDecodesALongNonASCIIDisplayName() throws {
        let name = "Jötter für " + String(repeating: "📝", count: 25)
        let message = MailMessage(id: "gmime-name", date: 1_764_581_405_000,
                                  from: MailAddress(name: name, address: "jotter@example.org"),
                                  to: MailAddress(address: "me@example.net"), subject: "s", body: "x", attempt: 1)
        let read = try Self.readWithNotmuch([message])
        #expect(read.first?.from == "\(name) <jotter@example.org>")
    }
}
