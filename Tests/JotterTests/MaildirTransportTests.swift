import Foundation
import Testing
@testable import Jotter

/// What Python's `mailbox.Maildir` finds in a Maildir: one entry per message it would show.
private struct MaildirEntry {
    var key: String
    var subdir: String
    var flags: String
    var subject: String
    /// The decoded body, CRLF turned into LF and the final line terminator of the wire form removed.
    var body: String
    var messageID: String
    var defects: [String]
}

private enum MaildirReader {
    static let script = """
        import email, email.policy, json, mailbox, sys
        box = mailbox.Maildir(sys.argv[1], factory=None, create=False)
        entries = []
        for key in sorted(box.keys()):
            message = box.get_message(key)
            parsed = email.message_from_bytes(box.get_bytes(key), policy=email.policy.default)
            entries.append({
                'key': key, 'subdir': message.get_subdir(), 'flags': message.get_flags(),
                'subject': str(parsed['subject']), 'body': parsed.get_content(),
                'message_id': str(parsed['message-id']),
                'defects': [type(d).__name__ for d in parsed.defects],
            })
        print(json.dumps(entries))
        """

    static func read(_ path: String) throws -> [MaildirEntry] {
        let output = try Python.run(script, arguments: [path])
        let list = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [[String: Any]])
        return try list.map { object in
            var body = try #require(object["body"] as? String).replacingOccurrences(of: "\r\n", with: "\n")
            if body.hasSuffix("\n") { body.removeLast() }
            return MaildirEntry(
                key: try #require(object["key"] as? String), subdir: try #require(object["subdir"] as? String),
                flags: try #require(object["flags"] as? String), subject: try #require(object["subject"] as? String),
                body: body, messageID: try #require(object["message_id"] as? String),
                defects: try #require(object["defects"] as? [String]))
        }
    }
}

@Suite struct MaildirTransportTests {
    private static func message(id: String = "5d1e7a10-8c2b-4f3e-9a61-2b7c0d4e8f90", subject: String = "Buy milk 🥛",
                                body: String = "買い物リスト\n牛乳と卵", attempt: Int = 1) -> MailMessage {
        MailMessage(id: id, date: 1_764_581_405_123, from: MailAddress(name: "Jotter", address: "jotter@example.org"),
                    to: MailAddress(address: "me@example.net"), subject: subject, body: body, attempt: attempt)
    }

    private static func files(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    private static func mode(_ path: String) -> mode_t? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return info.st_mode & 0o777
    }

    private static func contents(_ path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: path).map { Array($0) }
    }

    @Test func deliveryWritesOneMessageThatPythonReads() throws {
        let directory = TemporaryDirectory()
        let maildir = directory.file("Maildir")
        let transport = MaildirTransport(path: maildir)
        let message = Self.message()
        let receipt = try transport.send(message)
        #expect(receipt.alreadyDelivered == false)
        let delivered = Self.files(maildir + "/new")
        #expect(delivered == [MaildirTransport.fileName(for: message)])
        #expect(Self.files(maildir + "/cur").isEmpty)
        // Local line endings, as every MDA writes them (CRLF read as a CR left in each line).
        #expect(Self.contents(maildir + "/new/" + delivered[0]) == message.renderedLocally())
        #expect(!message.renderedLocally().contains(13) && message.rendered().contains(13))
        let entries = try MaildirReader.read(maildir)
        try #require(entries.count == 1)
        #expect(entries[0].subdir == "new")
        #expect(entries[0].subject == "Buy milk 🥛")
        #expect(entries[0].body == "買い物リスト\n牛乳と卵")
        #expect(entries[0].messageID == "<5d1e7a10-8c2b-4f3e-9a61-2b7c0d4e8f90@example.org>")
        #expect(entries[0].defects.isEmpty)
    }

    @Test func aBatchDeliversEachMessageOnceAndRepeatsLeaveOneCopy() throws {
        let directory = TemporaryDirectory()
        let maildir = directory.file("Maildir")
        let transport = MaildirTransport(path: maildir)  // not prepared: the batch makes the folders
        let ids = (0..<10).map { String(format: "00000000-0000-4000-8000-%012d", $0) }
        let batch = ids.map { Self.message(id: $0, subject: "Memo \($0.suffix(2))", body: "body \($0.suffix(2))") }
        let first = transport.send(batch: batch)
        #expect(first.count == 10)
        #expect(first.allSatisfy { (try? $0.get())?.alreadyDelivered == false })
        #expect(Self.files(maildir + "/new").count == 10 && Self.files(maildir + "/tmp").isEmpty)
        // The same batch again, with two new messages among them: only those two are written.
        let again = transport.send(batch: batch + [Self.message(id: "00000000-0000-4000-8000-000000000010"),
                                                   Self.message(id: "00000000-0000-4000-8000-000000000011")])
        #expect(again.prefix(10).allSatisfy { (try? $0.get())?.alreadyDelivered == true })
        #expect(again.suffix(2).allSatisfy { (try? $0.get())?.alreadyDelivered == false })
        let entries = try MaildirReader.read(maildir)
        #expect(entries.count == 12 && entries.allSatisfy(\.defects.isEmpty))
        #expect(Set(entries.map(\.messageID)).count == 12)
        #expect(entries.contains { $0.subject == "Memo 07" && $0.body == "body 07" })
    }

    @Test func aBatchIntoAFolderThatCannotBeWrittenFailsEachMessageTransiently() throws {
        let directory = TemporaryDirectory()
        let blocker = directory.file("not-a-folder")
        #expect(FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8)))
        let transport = MaildirTransport(path: blocker + "/Maildir")
        let outcomes = transport.send(batch: [Self.message(id: "00000000-0000-4000-8000-000000000001"),
                                              Self.message(id: "00000000-0000-4000-8000-000000000002")])
        #expect(outcomes.count == 2)
        for outcome in outcomes {
            guard case .failure(let failure) = outcome else {
                Issue.record("delivered into a file")
                continue
            }
            #expect(failure.kind == .io && !failure.isPermanent)
        }
    }

    @Test func deliveryOfAnASCIIMemoRoundTripsExactly() throws {
        let directory = TemporaryDirectory()
        let transport = MaildirTransport(path: directory.path)
        _ = try transport.send(Self.message(subject: "Call Sam", body: "Call Sam at 5\n\n.\nFrom the office\ttab "))
        let entries = try MaildirReader.read(directory.path)
        #expect(entries.count == 1)
        #expect(entries.first?.subject == "Call Sam")
        #expect(entries.first?.body == "Call Sam at 5\n\n.\nFrom the office\ttab ")
    }

    @Test func sameIDTwiceLeavesOneFile() throws {
        let directory = TemporaryDirectory()
        let maildir = directory.file("Maildir")
        let transport = MaildirTransport(path: maildir)
        let first = try transport.send(Self.message(attempt: 1))
        let again = try transport.send(Self.message(attempt: 1))
        let retry = try transport.send(Self.message(attempt: 2))
        #expect(first.alreadyDelivered == false)
        #expect(again.alreadyDelivered == true)
        #expect(retry.alreadyDelivered == true)
        #expect(Self.files(maildir + "/new").count == 1)
        #expect(Self.files(maildir + "/tmp").isEmpty)
        #expect(try MaildirReader.read(maildir).count == 1)
    }

    @Test(arguments: [":2,S", ":2,", ":2,RS", ""])
    func retryAfterAMailClientReadItDoesNotDeliverAgain(suffix: String) throws {
        let directory = TemporaryDirectory()
        let maildir = directory.file("Maildir")
        let transport = MaildirTransport(path: maildir)
        let message = Self.message()
        _ = try transport.send(message)
        let name = MaildirTransport.fileName(for: message)
        // What a mail client does when it shows the message: new/name → cur/name:2,S.
        try FileManager.default.moveItem(atPath: maildir + "/new/" + name, toPath: maildir + "/cur/" + name + suffix)
        let receipt = try transport.send(Self.message(attempt: 2))
        #expect(receipt.alreadyDelivered == true)
        #expect(Self.files(maildir + "/new").isEmpty)
        #expect(Self.files(maildir + "/cur") == [name + suffix])
        #expect(Self.files(maildir + "/tmp").isEmpty)
        let entries = try MaildirReader.read(maildir)
        #expect(entries.count == 1)
        #expect(entries.first?.subdir == "cur")
        #expect(entries.first?.subject == "Buy milk 🥛")
    }

    /// A first attempt at a memo an earlier process accepted may follow a delivery whose record a power
    /// loss undid (attempt number and all): it too finds the copy a mail client has moved to `cur/`.
    @Test func aFirstAttemptThatMayRepeatFindsTheCopyInCur() throws {
        let directory = TemporaryDirectory()
        let transport = MaildirTransport(path: directory.path)
        let message = Self.message()
        _ = try transport.send(message)
        let name = MaildirTransport.fileName(for: message)
        try FileManager.default.moveItem(atPath: directory.file("new/" + name), toPath: directory.file("cur/" + name + ":2,S"))
        var again = Self.message(attempt: 1)
        again.mayHaveBeenDelivered = true
        #expect(try transport.send(again).alreadyDelivered == true)
        #expect(Self.files(directory.file("new")).isEmpty)
    }

    /// `new/` removed while Jotter runs (a mail client's cleanup, a hand): made again at the next delivery,
    /// as `tmp/` and the whole Maildir are, instead of failing every memo until a restart.
    @Test func aRemovedNewFolderIsMadeAgain() throws {
        let directory = TemporaryDirectory()
        let transport = MaildirTransport(path: directory.path)
        try transport.prepare()
        try FileManager.default.removeItem(atPath: directory.file("new"))
        let receipt = try transport.send(Self.message())
        #expect(receipt.alreadyDelivered == false)
        #expect(Self.files(directory.file("new")) == [MaildirTransport.fileName(for: Self.message())])
        #expect(Self.files(directory.file("tmp")).isEmpty)
    }

    @Test func retryOfAnUndeliveredMessageDelivers() throws {
        let directory = TemporaryDirectory()
        let transport = MaildirTransport(path: directory.path)
        try transport.prepare()
        try "1.other:2,S".write(toFile: directory.file("cur/1.other:2,S"), atomically: false, encoding: .utf8)
        let receipt = try transport.send(Self.message(attempt: 3))
        #expect(receipt.alreadyDelivered == false)
        #expect(Self.files(directory.file("new")) == [MaildirTransport.fileName(for: Self.message())])
    }

    @Test func tmpIsEmptyAfterDeliveryAndAStaleTemporaryFileIsReplaced() throws {
        let directory = TemporaryDirectory()
        let transport = MaildirTransport(path: directory.path)
        try transport.prepare()
        let message = Self.message()
        let name = MaildirTransport.fileName(for: message)
        // An earlier attempt died after writing half a file to tmp/.
        try "Subject: half".write(toFile: directory.file("tmp/" + name), atomically: false, encoding: .utf8)
        let receipt = try transport.send(message)
        #expect(receipt.alreadyDelivered == false)
        #expect(Self.files(directory.file("tmp")).isEmpty)
        #expect(Self.contents(directory.file("new/" + name)) == message.renderedLocally())
        #expect(try MaildirReader.read(directory.path).first?.subject == "Buy milk 🥛")
    }

    @Test func aFirstAttemptNeverReplacesAFileAlreadyInNew() throws {
        let directory = TemporaryDirectory()
        let transport = MaildirTransport(path: directory.path)
        try transport.prepare()
        let message = Self.message()
        let name = MaildirTransport.fileName(for: message)
        // A first attempt does not look before writing (only retries do); the link still refuses.
        try "Subject: the first copy".write(toFile: directory.file("new/" + name), atomically: false, encoding: .utf8)
        let receipts = transport.send(batch: [message, Self.message(id: "00000000-0000-4000-8000-000000000077")])
        #expect((try? receipts[0].get())?.alreadyDelivered == true)
        #expect((try? receipts[1].get())?.alreadyDelivered == false)
        #expect(Self.contents(directory.file("new/" + name)) == Array("Subject: the first copy".utf8))
        #expect(Self.files(directory.file("tmp")).isEmpty)
        #expect(Self.files(directory.file("new")).count == 2)
    }

    @Test func prepareMakesPrivateDirectories() throws {
        let directory = TemporaryDirectory()
        let maildir = directory.file("nested/deeper/Maildir")
        try MaildirTransport(path: maildir).prepare()
        for folder in ["", "/tmp", "/new", "/cur"] {
            #expect(Self.mode(maildir + folder) == 0o700, "mode of Maildir\(folder)")
        }
        #expect(Self.mode(directory.file("nested")) == 0o700)
    }

    @Test func firstDeliveryWithoutPrepareMakesPrivateDirectoriesAndFile() throws {
        let directory = TemporaryDirectory()
        let maildir = directory.file("nested/deeper/Maildir")
        let transport = MaildirTransport(path: maildir)
        #expect(Self.mode(directory.file("nested")) == nil, "a transport creates nothing until used")
        _ = try transport.send(Self.message())
        for folder in ["", "/tmp", "/new", "/cur"] {
            #expect(Self.mode(maildir + folder) == 0o700, "mode of Maildir\(folder)")
        }
        let delivered = Self.files(maildir + "/new")
        try #require(delivered.count == 1)
        #expect(Self.mode(maildir + "/new/" + delivered[0]) == 0o600)
    }

    @Test func aMaildirRemovedWhileRunningIsMadeAgain() throws {
        let directory = TemporaryDirectory()
        let maildir = directory.file("Maildir")
        let transport = MaildirTransport(path: maildir)
        try transport.prepare()
        try FileManager.default.removeItem(atPath: maildir)
        #expect(try transport.send(Self.message()).alreadyDelivered == false)
        #expect(try MaildirReader.read(maildir).count == 1)
    }

    @Test func parsingAMaildirRelayURLCreatesNothing() throws {
        let directory = TemporaryDirectory()
        for relay in ["maildir:" + directory.file("a/Maildir"), "maildir://" + directory.file("b%20c/Maildir"),
                      "markdown:" + directory.file("vault/notes")] {
            _ = try RelayURL(relay)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
        let relay = try RelayURL("maildir://" + directory.file("b%20c/Maildir"))
        try relay.transport.prepare()
        #expect(Self.mode(directory.file("b c/Maildir/new")) == 0o700)
    }

    @Test func twoIDsMakeTwoFiles() throws {
        let directory = TemporaryDirectory()
        let transport = MaildirTransport(path: directory.path)
        let first = Self.message(id: "11111111-1111-4111-8111-111111111111", subject: "first", body: "one")
        let second = Self.message(id: "22222222-2222-4222-8222-222222222222", subject: "second", body: "two")
        #expect(try transport.send(first).alreadyDelivered == false)
        #expect(try transport.send(second).alreadyDelivered == false)
        #expect(Self.files(directory.file("new")).count == 2)
        let entries = try MaildirReader.read(directory.path)
        #expect(Set(entries.map(\.subject)) == ["first", "second"])
        #expect(Set(entries.map(\.body)) == ["one", "two"])
        #expect(Set(entries.map(\.messageID)) == ["<11111111-1111-4111-8111-111111111111@example.org>",
                                                  "<22222222-2222-4222-8222-222222222222@example.org>"])
    }

    @Test func existingMaildirIsReused() throws {
        let directory = TemporaryDirectory()
        _ = try MaildirTransport(path: directory.path).send(Self.message(id: "a", subject: "a", body: "a"))
        let transport = MaildirTransport(path: directory.path)
        _ = try transport.send(Self.message(id: "b", subject: "b", body: "b"))
        #expect(try MaildirReader.read(directory.path).map(\.subject).sorted() == ["a", "b"])
    }

    @Test func maildirUnderARegularFileIsATransientIOFailure() throws {
        let directory = TemporaryDirectory()
        try "not a directory".write(toFile: directory.file("file"), atomically: false, encoding: .utf8)
        let transport = MaildirTransport(path: directory.file("file/Maildir"))
        #expect(throws: DeliveryFailure(.io, permanent: false)) { try transport.prepare() }
        #expect(throws: DeliveryFailure(.io, permanent: false)) { _ = try transport.send(Self.message()) }
    }
}
