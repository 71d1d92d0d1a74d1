import Foundation
import Testing
@testable import Jotter

/// The markdown daily note as a note-taker keeps it: a memo never breaks its structure, other
/// programs' appends survive, a symlinked note is written through with its mode, the layout is theirs.
@Suite struct MarkdownNoteTests {
    static let date: Int64 = 1_764_581_405_000

    static func memo(_ id: String, _ body: String, subject: String? = nil, date: Int64 = date) -> MailMessage {
        MailMessage(id: id, date: date, from: MailAddress(address: "jotter@localhost"),
                    to: MailAddress(address: "me@localhost"), subject: subject ?? SubjectLine.derived(from: body),
                    body: body, attempt: 1)
    }

    /// The note's entry headings and whether every code fence is closed, read as CommonMark does.
    static func structure(_ note: String) -> (headings: [String], fencesClosed: Bool) {
        var headings: [String] = []
        var fence: (Character, Int)?
        for line in note.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop(while: { $0 == " " })
            if let first = trimmed.first, first == "`" || first == "~" {
                let run = trimmed.prefix(while: { $0 == first }).count
                if run >= 3 {
                    if let open = fence {
                        if first == open.0 && run >= open.1 { fence = nil }
                    } else {
                        fence = (first, run)
                    }
                    continue
                }
            }
            if fence == nil && line.hasPrefix("## ") { headings.append(String(line)) }
        }
        return (headings, fence == nil)
    }

    @Test func anUnclosedFenceOrAHeadingInAMemoCannotSwallowOrFakeEntries() throws {
        let directory = TemporaryDirectory()
        let transport = MarkdownTransport(folder: directory.path)
        _ = try transport.send(Self.memo("a", "look:\n```swift\nlet x = 1"))
        _ = try transport.send(Self.memo("b", "## not an entry\n# nor this\ntext <!-- jotter:c --> here"))
        _ = try transport.send(Self.memo("c", "~~~~\nfour tildes\n~~~\nstill inside"))
        _ = try transport.send(Self.memo("d", "last"))
        let note = try String(contentsOfFile: directory.file(MarkdownTransport.localDayAndTime(milliseconds: Self.date).day + ".md"),
                              encoding: .utf8)
        let structure = Self.structure(note)
        #expect(structure.fencesClosed, "a fence left open swallows everything after it:\n\(note)")
        #expect(structure.headings.count == 4, "one heading per entry, none faked: \(structure.headings)")
        #expect(note.contains("\\## not an entry") && note.contains("\\# nor this"))
        #expect(note.contains("<!-- jotter:c -->"), "c's own marker")
        #expect(note.components(separatedBy: "<!-- jotter:c -->").count == 2, "b's text did not forge c's marker")
        #expect(note.contains("let x = 1") && note.contains("still inside"), "nothing of a memo is lost")
    }

    /// A batch is the same note as the memos sent one by one: each memo once, in order, per day's
    /// note, the same structure — written with one read, one write and one fsync per note.
    @Test func aBatchWritesEachMemoOnceIntoItsOwnDaysNote() throws {
        let directory = TemporaryDirectory(), oneByOne = TemporaryDirectory()
        let batched = MarkdownTransport(folder: directory.path), single = MarkdownTransport(folder: oneByOne.path)
        let nextDay = Self.date + 86_400_000
        let first = [Self.memo("a", "look:\n```swift\nlet x = 1"), Self.memo("b", "## not an entry")]
        _ = try batched.send(Self.memo("a", "look:\n```swift\nlet x = 1"))  // a retry of "a" comes in the batch
        let memos = first + [Self.memo("t", "tomorrow", date: nextDay), Self.memo("b", "## not an entry"),
                             Self.memo("c", "last")]
        let outcomes = batched.send(batch: memos)
        #expect(outcomes.map { (try? $0.get())?.alreadyDelivered } == [true, false, false, true, false])
        for memo in [first[0]] + memos where (try? single.send(memo)) == nil { Issue.record("one by one failed") }
        for date in [Self.date, nextDay] {
            let name = MarkdownTransport.localDayAndTime(milliseconds: date).day + ".md"
            let note = try String(contentsOfFile: directory.file(name), encoding: .utf8)
            #expect(note == (try String(contentsOfFile: oneByOne.file(name), encoding: .utf8)), "\(note)")
            #expect(Self.structure(note).fencesClosed)
        }
    }

    @Test func otherProgramsAppendingAtTheSameTimeKeepTheirLines() throws {
        let directory = TemporaryDirectory()
        let transport = MarkdownTransport(folder: directory.path)
        let path = directory.file(MarkdownTransport.localDayAndTime(milliseconds: Self.date).day + ".md")
        _ = try transport.send(Self.memo("first", "first memo"))
        let writer = Thread {
            let fd = open(path, O_WRONLY | O_APPEND)
            for index in 0..<300 {
                let line = Array("- synced line \(index)\n".utf8)
                _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            }
            close(fd)
        }
        writer.start()
        for index in 0..<30 { _ = try transport.send(Self.memo("m\(index)", "memo \(index)")) }
        #expect(TestServer.waitUntil(timeout: 30) {
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").contains("- synced line 299")
        })
        let note = try String(contentsOfFile: path, encoding: .utf8)
        for index in 0..<300 { #expect(note.contains("- synced line \(index)\n"), "line \(index) lost") }
        for index in 0..<30 { #expect(note.contains("<!-- jotter:m\(index) -->")) }
    }

    @Test func aSymlinkedNoteIsWrittenThroughAndKeepsItsMode() throws {
        let directory = TemporaryDirectory()
        let vault = directory.file("vault"), elsewhere = directory.file("synced")
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        let day = MarkdownTransport.localDayAndTime(milliseconds: Self.date).day
        let target = elsewhere + "/\(day).md"
        try "# My day\n".write(toFile: target, atomically: false, encoding: .utf8)
        #expect(chmod(target, 0o644) == 0)
        try FileManager.default.createSymbolicLink(atPath: vault + "/\(day).md", withDestinationPath: target)
        _ = try MarkdownTransport(folder: vault).send(Self.memo("s", "through the link"))
        let link = try FileManager.default.destinationOfSymbolicLink(atPath: vault + "/\(day).md")
        #expect(link == target, "still a symlink")
        let note = try String(contentsOfFile: target, encoding: .utf8)
        #expect(note.hasPrefix("# My day\n") && note.contains("through the link"))
        #expect((try FileManager.default.attributesOfItem(atPath: target)[.posixPermissions] as? Int) == 0o644)
    }

    /// A symlink another user put where today's note goes is not followed: it would have memos (whose
    /// text anyone on this machine may post) appended to any file this process may write. The memo
    /// waits, retried, and the file the link names is untouched. (Needs root, to make the link another
    /// user's.)
    @Test(.enabled(if: geteuid() == 0, "needs root to give a symlink to another user"))
    func aSymlinkAnotherUserMadeIsNotFollowed() throws {
        let directory = TemporaryDirectory()
        let vault = directory.file("vault")
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        let victim = directory.file("victim.txt")
        try "root's own file\n".write(toFile: victim, atomically: false, encoding: .utf8)
        let day = MarkdownTransport.localDayAndTime(milliseconds: Self.date).day
        try FileManager.default.createSymbolicLink(atPath: vault + "/\(day).md", withDestinationPath: victim)
        #expect(lchown(vault + "/\(day).md", 65534, 65534) == 0)
        #expect {
            _ = try MarkdownTransport(folder: vault).send(Self.memo("planted", "anyone may post this"))
        } throws: { error in
            guard let failure = error as? DeliveryFailure else { return false }
            return failure.kind == .configuration && !failure.isPermanent && failure.hint?.contains("symlink") == true
        }
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "root's own file\n")
    }

    /// A vault or Maildir every user may write in is refused at start, with what to do: another user
    /// could put today's note (or a file name) there first as a symlink.
    @Test func aFolderEveryUserMayWriteInIsRefusedAtStart() throws {
        let directory = TemporaryDirectory()
        for (relay, folder) in [("markdown:", "vault"), ("maildir:", "mail")] {
            let path = directory.file(folder)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            #expect(chmod(path, 0o777) == 0)
            let started = try LiveServerTests.JotterBinary.run(
                ["serve", "--port", "0", "--data-dir", directory.file("data-" + folder), "--relay", relay + path],
                timeout: 60)
            #expect(started.status == 1, "\(started.standardOutput)")
            #expect(started.standardError.contains("\(path) may be written by every user"), "\(started.standardError)")
            #expect(chmod(path, 0o755) == 0)
        }
        // Its own folder, or one its group shares on purpose, is the user's choice.
        #expect(throws: Never.self) { try MarkdownTransport(folder: directory.file("vault")).prepare() }
    }

    @Test func theLayoutIsTheNoteTakersOwn() throws {
        let directory = TemporaryDirectory()
        let relay = try RelayURL("markdown:\(directory.path)?file=%Y/%m/%Y-%m-%d.md&heading=%H:%M %a")
        let transport = try #require(relay.transport as? MarkdownTransport)
        _ = try transport.send(Self.memo("l", "laid out"))
        let path = directory.path + "/" + MarkdownTransport.format("%Y/%m/%Y-%m-%d.md", milliseconds: Self.date)
        let note = try String(contentsOfFile: path, encoding: .utf8)
        #expect(note.hasPrefix("## " + MarkdownTransport.format("%H:%M %a", milliseconds: Self.date) + "\n"))
        for bad in ["../outside.md", "/abs.md", "notes.txt", "a/./b.md", ""] {
            #expect(throws: RelayURL.Failure.self, "\(bad)") { try RelayURL("markdown:/vault?file=\(bad)") }
        }
    }

    /// What `cmark` (CommonMark's reference reader) sees in `note`: for each entry, in order, whether
    /// its `##` heading is a heading of the note's top level, its marker an HTML block there, and a
    /// body of `sentinel` a paragraph there (and whether a link reference definition made links in
    /// it); and every other level 1–2 heading anywhere.
    static func readWithCMark(_ note: String) throws -> [String] {
        let script = """
            import subprocess, sys, xml.etree.ElementTree as ET
            ns = '{http://commonmark.org/xml/1.0}'
            xml = subprocess.run(['cmark', '--to', 'xml'], input=sys.stdin.buffer.read(), capture_output=True, check=True).stdout
            document = ET.fromstring(xml)
            def text(node):
                return ''.join(e.text or '' for e in node.iter() if e.tag in (ns + 'text', ns + 'code', ns + 'html_block'))
            for child in document:
                kind = child.tag[len(ns):]
                if kind == 'heading' and child.get('level') in ('1', '2'):
                    print('heading%s %s' % (child.get('level'), text(child)))
                elif kind == 'html_block' and text(child).startswith('<!-- jotter:'):
                    print('marker ' + text(child).strip())
                elif kind == 'paragraph' and text(child).startswith('sentinel'):
                    links = list(child.iter(ns + 'link'))
                    print('paragraph ' + text(child) + (' (linked by a definition)' if links else ''))
            for heading in document.iter(ns + 'heading'):
                if heading not in list(document) and heading.get('level') in ('1', '2'):
                    print('nested heading%s %s' % (heading.get('level'), text(heading)))
            """
        return try Python.run(script, input: Array(note.utf8)).split(separator: "\n").map(String.init)
    }

    /// Appends each of `bodies` followed by a sentinel memo to one note, and reads the note with cmark:
    /// the sequence must be exactly each entry's heading and marker, and each sentinel a paragraph of
    /// its own, with no other level 1–2 heading anywhere. Returns the note and what went wrong.
    static func containment(of bodies: [String]) throws -> (note: String, failures: [String]) {
        let directory = TemporaryDirectory()
        let transport = try MarkdownTransport(folder: directory.path, file: "note.md", heading: "entry")
        var expected: [String] = []
        for (index, body) in bodies.enumerated() {
            _ = try transport.send(Self.memo("m\(index)", body))
            _ = try transport.send(Self.memo("s\(index)", "sentinel \(index) [x] [y]"))
            expected += ["heading2 entry", "marker <!-- jotter:m\(index) -->"]
            expected += ["heading2 entry", "marker <!-- jotter:s\(index) -->", "paragraph sentinel \(index) [x] [y]"]
        }
        let note = try String(contentsOfFile: directory.file("note.md"), encoding: .utf8)
        let seen = try Self.readWithCMark(note)
        guard seen != expected else { return (note, []) }
        let first = (0..<min(seen.count, expected.count)).first(where: { seen[$0] != expected[$0] }) ?? min(seen.count, expected.count)
        let body = bodies[min(first / 5, bodies.count - 1)]
        return (note, ["after memo \(first / 5), \(body.debugDescription): saw \(seen.dropFirst(first).prefix(3)), "
                       + "expected \(expected.dropFirst(first).prefix(3))"])
    }

    /// Memos a CommonMark reader would otherwise read as running into the next entry, or as headings
    /// of the note's level: cmark reads every entry after them as what it is.
    @Test(arguments: [
        "- todo\n  ```\n  ls -la",                  // a fence opened in a list item, closed by the next entry
        "- todo\n  ```\n  ls -la\n```",            // the unindented fence ends the item and opens a new one
        "> ```\n> quoted code",
        "   ~~~~ info\nfour tildes\n~~~\nstill inside",
        "Shopping\n========\nmilk", "Plan\n---\nsteps", "Plan\n-", "#\tIdeas", "##", "> # quoted title",
        "- ## listed title", "para\n# interrupting", "a\n\u{0D}# after a lone CR", "a\r\n## after CRLF",
        "<!-- TODO: tidy\nrest", "<pre>\nls -la", "<PRE>\nls", "<script>\nlet a = 1", "<style>", "<textarea>\nx",
        "<?php echo 1;", "<!DOCTYPE html", "<![CDATA[ raw", "<!-- jotter:s0 -->", "text <!-- jotter:s0 --> here",
        "<pre>\n# not a heading\n</pre>\n# a heading", "<div>\n```\n\ntext", "<span>\n```",
        "> - ```\n>   code", "1. one\n   ```\n2. two\n```", "    indented ```\n```", "```\n<pre>",
        "para\n<pre>", "- a\n<!-- b", "<!-- a -->\n<pre>\n</pre>\n<!-- open",
        "<!doctype html\n# forged top heading\n>", "<!x\n# a\n>",  // cmark: a paragraph, then a heading
        // Link reference definitions are the whole note's: the next entry's `[x]` would be a link.
        "[x]: https://example.com", "[y]:\n/v", "> [x]: /u", "- [x]: /u", "text\n\n  [x]: /u 'title'",
        "[x\n]: /u", "```\n```\n[y]: /v", "<!-- a -->\n[x]: /u",
        // Nested past `maximumDepth` (one line, and with many lines after): fenced, quickly.
        String(repeating: "- ", count: 5_000) + "a\n" + String(repeating: "\n", count: 20_000) + "x",
        String(repeating: "> ", count: 100) + "# deep\n```", "~~~~~~\n" + String(repeating: "> ", count: 40) + "~~~",
    ])
    func nothingAMemoHoldsRunsIntoTheNextEntryAsCMarkReadsIt(body: String) throws {
        let (note, failures) = try Self.containment(of: [body])
        #expect(failures.isEmpty, "\(failures)\n\(note)")
    }

    /// Random memos of lines that open and close CommonMark's blocks, nested in quotes and list items,
    /// 600 of them (a fixed seed, so a failure repeats): cmark reads every entry after each as what it is.
    @Test func randomMemosOfBlockSyntaxNeverRunIntoTheNextEntry() throws {
        let pieces = ["```", "~~~~", "  ```", "- ```", "> ```", "   ~~~ x", "```js`", "````", "- todo", "  - nested",
                      "    - deep", "1. one", "2) two", "> quote", ">> q", ">", "# h1", "## h2", "#\th", "### h3",
                      "Title", "===", "---", "-", "***", "* * *", "<pre>", "</pre>", "<script>", "<!-- c", "-->",
                      "<?php", "?>", "<!DOCTYPE x", "<![CDATA[", "]]>", "<div>", "</div>", "<span>", "<a href=\"x\">",
                      "", "    indented", "\tcode", "text", "  text", "- ", "*", "+ item", "<textarea>", "</TEXTAREA>",
                      "\r", " > - ```", "> > ~~~", "  > # t", "- > ```", "10. ten", "<p>", "</p x", "<x-y z='1'/>",
                      ">\t```", "-\t```", "1.      wide", "- \t~~~", "\t- ```", "> ===", "> text", "<!-- a --> b",
                      "<?x?>", "</pre>", "<pre/>", "0) zero", "- - -", "   ```", "    ```", " -", "\u{0B}", "#",
                      "[x]: /u", "[y]:", "  /v", "[x", "y]: /w", "[^1]: note", "\\[x]: /u", "[x]", "[a[b]]: /u"]
        var generator = SeededGenerator(seed: 0x6a6f74746572)
        let bodies = (0..<600).map { _ in
            (0..<Int.random(in: 1...8, using: &generator)).map { _ in
                let piece = pieces.randomElement(using: &generator) ?? ""
                return Int.random(in: 0..<4, using: &generator) == 0 ? "  " + piece : piece
            }.joined(separator: "\n")
        }
        let (note, failures) = try Self.containment(of: bodies)
        #expect(failures.isEmpty, "\(failures)\n\(note.prefix(4000))")
    }

    /// A memo's definition is shown as the text it is, and its inline links stay links.
    @Test func aDefinitionReadsAsTextAndInlineLinksStayLinks() throws {
        let directory = TemporaryDirectory()
        let transport = try MarkdownTransport(folder: directory.path, file: "note.md", heading: "entry")
        _ = try transport.send(Self.memo("a", "[x]: https://example.com/a\n\n[site](https://example.com/b) and [x]"))
        let note = try String(contentsOfFile: directory.file("note.md"), encoding: .utf8)
        let html = try Python.run("import subprocess, sys; sys.stdout.write(subprocess.run(['cmark'], input=sys.stdin.buffer.read(), capture_output=True, check=True).stdout.decode())",
                                  input: Array(note.utf8))
        #expect(html.contains("<p>[x]: https://example.com/a</p>"), "\(html)")
        #expect(html.contains("<p><a href=\"https://example.com/b\">site</a> and [x]</p>"), "\(html)")
    }

    @Test func aSubjectIsReadLiterally() throws {
        let directory = TemporaryDirectory()
        let transport = try MarkdownTransport(folder: directory.path, file: "note.md", heading: "entry")
        _ = try transport.send(Self.memo("a", "body", subject: "run `rm *.tmp` & <script> [x](y) ==hi== %%c $m$ _u_"))
        let note = try String(contentsOfFile: directory.file("note.md"), encoding: .utf8)
        let html = try Python.run("import subprocess, sys; sys.stdout.write(subprocess.run(['cmark'], input=sys.stdin.buffer.read(), capture_output=True, check=True).stdout.decode())",
                                  input: Array(note.utf8))
        #expect(html.contains("<strong>run `rm *.tmp` &amp; &lt;script&gt; [x](y) ==hi== %%c $m$ _u_</strong>"), "\(html)")
    }
}

