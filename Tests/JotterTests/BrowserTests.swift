import Foundation
import Synchronization
import Testing
@testable import Jotter

/// Debian's Chromium, which the suite drives (its package installs this launcher).
private let chromiumInstalled = FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")

/// The page in a real browser: Debian's headless Chromium, driven over the DevTools protocol by
/// `Tests/Browser/page_test.py`, against a whole Jotter started in-process on 127.0.0.1.
///
/// The driver only observes (and prints one JSON object); these tests decide. Every scenario also
/// checks that the page asked no host but its own origin and logged no error or exception.
/// Skipped only when /usr/bin/chromium is missing (`apt-get install chromium`; CI installs it).
@Suite(.serialized, .enabled(if: chromiumInstalled, "needs /usr/bin/chromium (apt-get install chromium)"))
struct BrowserTests {
    static let driver = Repository.root + "/Tests/Browser/page_test.py"

    // MARK: Scenarios

    @Test("Ctrl+Enter empties and refocuses the textarea in the same task; the memo arrives once")
    func sendClearsAtOnceAndDeliversOnce() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("send", server: server)
        Self.expectClean(seen)
        let memo = try #require(seen["memo"].string)
        #expect(seen["before"]["active"].string == "body", "the textarea has no focus at load (autofocus)")
        #expect(seen["typed"].string == memo, "typing did not reach the textarea")

        let send = seen["after_keydown"]["probe"]["sends"][0]
        #expect(send["valueBefore"].string == memo)
        #expect(send["sameTask"]["empty"].bool == true, "textarea not empty right after the keydown: \(send)")
        #expect(send["sameTask"]["focused"].bool == true, "textarea not focused right after the keydown: \(send)")
        #expect(seen["after_keydown"]["body"].string == "")
        #expect(seen["after_keydown"]["active"].string == "body")

        // The POST carried an Idempotency-Key, got 204, and the page forgot the memo.
        let posts = seen["send_requests"].array
        #expect(posts.count == 1, "POSTs to /send: \(seen["send_requests"])")
        #expect(posts.first?["status"].int == 204)
        #expect(posts.first?["headers"]["Idempotency-Key"].string?.isEmpty == false, "no Idempotency-Key")
        #expect(seen["settled"]["outbox"].array.isEmpty, "the page still holds: \(seen["settled"]["outbox"])")
        #expect(seen["settled"]["pending"]["hidden"].bool == true)
        // A screen reader hears that the memo went (the live region; the page itself only empties).
        #expect(seen["live"].string == (try Self.translations("en"))["announce_sent"], "announced: \(seen["live"])")

        try Self.expectDeliveredOnce(server, body: memo)
    }

    @Test("Ctrl+Enter in the subject field sends both and brings the focus back to the empty textarea")
    func sendFromSubjectRefocusesTextarea() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("subject", server: server)
        Self.expectClean(seen)
        let memo = try #require(seen["memo"].string), subject = try #require(seen["subject"].string)
        #expect(seen["before"]["active"].string == "subject" && seen["before"]["subject"].string == subject,
                "the subject was not typed into its field: \(seen["before"])")
        let send = seen["after_keydown"]["probe"]["sends"][0]
        #expect(send["focusBefore"].string == "subject")
        #expect(send["sameTask"]["empty"].bool == true && send["sameTask"]["subjectEmpty"].bool == true,
                "not emptied in the same task: \(send)")
        #expect(send["sameTask"]["focused"].bool == true,
                "the textarea did not get the focus in the same task: \(send)")
        #expect(seen["settled"]["outbox"].array.isEmpty)
        let message = try Self.expectDeliveredOnce(server, body: memo)
        #expect(message["subject"] as? String == subject)
    }

    @Test("The Send button sends too: the textarea is empty and keeps the focus")
    func sendButtonClears() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("button", server: server)
        Self.expectClean(seen)
        let memo = try #require(seen["memo"].string)
        let send = seen["after_click"]["probe"]["sends"][0]
        #expect(send["via"].string == "click", "no click on #send seen: \(seen["after_click"]["probe"])")
        #expect(send["sameTask"]["empty"].bool == true, "not emptied in the same task: \(send)")
        #expect(send["sameTask"]["focused"].bool == true, "the textarea lost the focus: \(send)")
        #expect(seen["after_click"]["active"].string == "body")
        #expect(seen["send_requests"].array.first?["status"].int == 204)
        #expect(seen["settled"]["outbox"].array.isEmpty)
        try Self.expectDeliveredOnce(server, body: memo)
    }

    @Test("A memo sent while the server is down stays in the page and arrives once after a restart")
    func keepsMemoWhileServerIsDownThenDeliversOnce() throws {
        let directory = TemporaryDirectory()
        // The same origin before and after the restart, so the page's localStorage is the same.
        let port = try Self.freePort()
        let configure: (inout Configuration) -> Void = { $0.http.port = port }
        let first = try TestServer(dataDirectory: directory.path, configure: configure)
        let current = Mutex<TestServer?>(first)
        defer { current.withLock { $0?.stop() } }

        let seen = try Self.drive("restart", server: first) { step in
            switch step {
            case "stop-server":
                current.withLock { server in server?.stop(); server = nil }
            case "start-server":
                let restarted = try Self.startServer(dataDirectory: directory.path, configure: configure)
                current.withLock { $0 = restarted }
            default:
                Issue.record("unexpected step \(step)")
            }
        }
        // Only the refused connections to /send while the server was away may show up as errors, and
        // the favicon's, which the browser (not the page) fetches when it likes: on a loaded machine
        // that can be after the server stopped.
        Self.expectClean(seen, allowing: { entry in
            entry["source"].string == "network" && entry["text"].string?.contains("ERR_CONNECTION_REFUSED") == true
                && (entry["url"].string.map { $0.hasSuffix("/send") || $0.hasSuffix("/icon.svg") } ?? false)
        })
        #expect(seen["steps"].array.map(\.string) == ["stop-server", "start-server"])
        let memo = try #require(seen["memo"].string)

        let sent = seen["after_keydown"]
        #expect(sent["body"].string == "" && sent["active"].string == "body", "not reset at once: \(sent)")
        let down = seen["while_down"]
        let kept = down["outbox"].array
        #expect(kept.count == 1 && kept.first?["body"].string == memo, "jotter.outbox while down: \(down["outbox"])")
        #expect(down["pending"]["hidden"].bool == false, "pending indicator hidden: \(down["pending"])")
        #expect(down["pending"]["display"].string != "none")
        #expect(down["pending"]["opacity"].double.map { $0 > 0.5 } == true, "pending indicator not visible yet")
        #expect(down["pending"]["text"].string?.hasPrefix("1") == true, "pending text: \(down["pending"])")

        #expect(!seen["delivered_by"].isNull, "the page never delivered the memo after the restart")
        #expect(seen["settled"]["outbox"].array.isEmpty, "the page still holds: \(seen["settled"]["outbox"])")
        #expect(seen["settled"]["pending"]["hidden"].bool == true)
        // Every attempt is the same memo under the same key; exactly one succeeded.
        let posts = seen["send_requests"].array
        let keys = Set(posts.compactMap { $0["headers"]["Idempotency-Key"].string })
        #expect(keys.count == 1 && posts.count >= 2, "attempts: \(seen["send_requests"])")
        #expect(posts.filter { $0["status"].int == 204 }.count == 1, "attempts: \(seen["send_requests"])")

        let server = try #require(current.withLock { $0 })
        try Self.expectDeliveredOnce(server, body: memo)
    }

    @Test("Switching the language to Japanese keeps the memo, the subject, the caret and the focus")
    func languageSwitchKeepsEverything() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("language", server: server, maildir: false)
        Self.expectClean(seen)
        let before = seen["before"], after = seen["after"]
        #expect(before["html_lang"].string == "en")
        #expect(before["subject"].string == "Groceries" && before["body"].string == "eggs and rice",
                "typing went elsewhere: \(before)")
        #expect(seen["popup_opened"].bool == true, "the language list did not open on a click")
        #expect(after["html_lang"].string == "ja", "<html lang> after the switch: \(after["html_lang"])")
        #expect(after["body"].string == before["body"].string, "the memo changed: \(after["body"])")
        #expect(after["subject"].string == before["subject"].string, "the subject changed: \(after["subject"])")
        #expect(after["active"].string == "body", "focus after the switch: \(after["active"])")
        #expect(after["selection"].array.map(\.int) == [4, 7], "selection after the switch: \(after["selection"])")
        #expect(seen["typed_after"].string == "eggs and rice ok", "typing after the switch: \(seen["typed_after"])")
        let japanese = try Self.translations("ja")
        #expect(seen["send_label_after"].string == japanese["send"], "the page is not in Japanese")
        #expect(seen["body_placeholder_after"].string == japanese["bodyPlaceholder"])
        #expect(after["stored_lang"].string == "ja")
        #expect(after["location"].string?.hasSuffix("?lang=ja") == true, "URL after the switch: \(after["location"])")
    }

    @Test("?lang=ar is right-to-left and mirrored: the send button sits left of the subject")
    func arabicIsRightToLeft() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("rtl", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["state"]["html_lang"].string == "ar")
        #expect(seen["state"]["html_dir"].string == "rtl")
        #expect(seen["state"]["active"].string == "body")
        let layout = seen["layout"]
        let sendX = try #require(layout["send"]["x"].double), subjectX = try #require(layout["subject"]["x"].double)
        #expect(sendX < subjectX, "not mirrored: send at x=\(sendX), subject at x=\(subjectX)")
        #expect(layout["body_direction"].string == "rtl")
        let width = layout["send"]["width"].double ?? 0, height = layout["send"]["height"].double ?? 0
        #expect(width >= 44 && height >= 44, "send button \(width)×\(height) is below 44×44")
    }

    @Test("The privacy overlay covers the page while it is hidden and is gone when it is visible")
    func privacyOverlayWhileHidden() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("privacy", server: server, maildir: false)
        Self.expectClean(seen)
        let before = seen["visible_before"], hidden = seen["hidden"], again = seen["visible_again"]
        #expect(before["visibility"].string == "visible" && before["display"].string == "none")
        #expect(hidden["visibility"].string == "hidden", "the tab never became hidden: \(hidden)")
        #expect(hidden["display"].string != "none", "no overlay while hidden: \(hidden)")
        #expect(hidden["covers_viewport"].bool == true)
        #expect(hidden["on_top_of_textarea"].string == "privacy", "the memo shows through: \(hidden)")
        #expect(again["visibility"].string == "visible")
        #expect(again["display"].string == "none", "overlay still shown when visible: \(again)")
        #expect(again["on_top_of_textarea"].string == "body")
        #expect(again["body"].string == "Private thought", "the memo was lost: \(again)")
        #expect(seen["active_after"].string == "body")
    }

    @Test("Without JavaScript the form posts the memo, 303 brings back an empty page in its language, it arrives once")
    func formPostWithoutJavaScript() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("nojs", server: server)
        Self.expectClean(seen)
        let memo = try #require(seen["memo"].string)
        #expect(seen["script_ran"].bool == false, "the page's script ran: JavaScript was not off")
        #expect(seen["before"]["active"].string == "body", "no autofocus without JavaScript")
        #expect(seen["typed"].string == memo)
        let posts = seen["form_posts"].array
        #expect(posts.count == 1, "form posts: \(seen["form_posts"])")
        #expect(posts.first?["status"].int == 303)
        #expect(posts.first?["headers"]["Content-Type"].string == "application/x-www-form-urlencoded")
        #expect(seen["after"]["body"].string == "", "the page came back with: \(seen["after"])")
        #expect(seen["after"]["location"].string == (seen["url"].string ?? "") + "?lang=de")
        #expect(seen["after"]["lang"].string == "de", "the page came back in another language")
        #expect(seen["after"]["active"].string == "body")

        let message = try Self.expectDeliveredOnce(server, body: memo)
        // The form always sends its subject field, empty here: the subject is then the memo's first
        // line, as for the page's own POST.
        #expect(message["subject"] as? String == memo, "subject: \(message["subject"] ?? "none")")
    }

    @Test("While the mail server refuses, the page says so and History says why the memo waits")
    func aRefusingRelayShowsOnThePage() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.fail(DeliveryFailure(.auth, permanent: true)))
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }

        let seen = try Self.drive("relay", server: server, maildir: false)
        Self.expectClean(seen)
        let strings = try Self.translations("en")
        #expect(seen["relay"]["hidden"].bool == false, "no relay line: \(seen["relay"])")
        #expect(seen["relay"]["visible"].bool == true)
        #expect(seen["relay"]["text"].string == strings["relay_refused"])
        let entries = seen["history"].array.compactMap(\.string)
        #expect(entries.count == 1)
        #expect(entries.first?.contains(strings["waiting_relay_refused"] ?? "?") == true, "\(entries)")
        #expect(entries.first?.contains(strings["error_auth"] ?? "?") == true, "\(entries)")
        #expect(transport.messages.count == 1)
    }

    @Test("A damaged page in the server's database shows on the page, which still opens ready to write",
          arguments: ["memos", "the index /healthz reads"])
    func aDamagedDatabaseShowsOnThePage(damaged: String) throws {
        let (directory, data) = try DamagedPagesTests.dataDirectory(memos: 120, marker: "browser")
        _ = directory
        if damaged == "memos" {
            try DamagedPagesTests.damageAMessagesPage(in: data)
        } else {
            try DamagedPagesTests.damageTheStoppedIndex(in: data)  // /healthz answers 503, and says why
        }
        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        // The page asks /healthz once, at load: the check at start must have spoken by then.
        #expect(server.waitUntil(timeout: 60) { server.outbox.damage != nil })

        let seen = try Self.drive("damaged", server: server, maildir: false)
        // The browser logs the 503 /healthz answers with (it still says why: the page reads it).
        Self.expectClean(seen) { damaged != "memos" && $0["url"].string?.hasSuffix("/healthz") == true }
        #expect(seen["relay"]["hidden"].bool == false, "no status line: \(seen["relay"])")
        #expect(seen["relay"]["visible"].bool == true)
        #expect(seen["relay"]["text"].string == (try Self.translations("en"))["storage_damaged"])
    }

    @Test("Memos failed for good are on the page's status line until retried; Ctrl+Enter sends with focus anywhere")
    func failedMemosShowOnThePage() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.fail(DeliveryFailure(.tooLarge, permanent: true)))
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let seen = try Self.drive("failed", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["active_before_shortcut"].string == "BODY", "\(seen["active_before_shortcut"])")
        #expect(seen["body_after_shortcut"].string == "", "the shortcut did nothing with focus outside the form")
        #expect(seen["send_requests"].array.count == 2, "\(seen["send_requests"])")
        let strings = try Self.translations("en")
        let template = try #require(strings["failed_memos"])
        #expect(seen["relay"]["hidden"].bool == false && seen["relay"]["visible"].bool == true, "\(seen["relay"])")
        #expect(seen["relay"]["text"].string == template.replacingOccurrences(of: "{n}", with: "2"), "\(seen["relay"])")
        #expect(try server.outbox.history.counts()[.failed] == 2)
    }

    @Test("Escape in Settings closes Settings, not the rating prompt too; History shows older memos on request")
    func dialogsKeepTheirKeysAndHistoryPages() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        for index in 0..<99 {  // a script's memos: they count toward the prompt, which only the page's can show
            #expect(try server.route("POST", "/", headers: [("Content-Type", "text/plain")],
                                     body: Array("scripted \(index)".utf8)).status == 204)
        }
        let seen = try Self.drive("dialogs", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["rating_shown"].bool == true, "the prompt never showed: \(seen)")
        #expect(seen["rating_after_escape"].bool == true, "Escape in Settings dismissed the rating prompt too")
        #expect(!seen["rating_events"].array.contains { $0.string?.contains("dismissed") == true }, "\(seen["rating_events"])")
        #expect(seen["history_first"].int == 50)
        let older = try Self.translations("en")["older"]
        #expect(seen["older"]["hidden"].bool == false && seen["older"]["text"].string == older)
        #expect(seen["history_then"].int == 100, "\(seen["history_then"])")
        #expect(seen["older_then"].bool == true, "nothing older is left")
    }

    @Test("A memo no one could see is not sent (the server would refuse it); one visible character is a memo")
    func blankMemosStayOnThePage() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("blank", server: server, maildir: false)
        Self.expectClean(seen)
        let blank = seen["blank"].array
        #expect(blank.count == 5)
        for (index, attempt) in blank.enumerated() {
            #expect(attempt["kept"].bool == true && attempt["sends"].int == 0, "blank \(index): \(attempt)")
        }
        #expect(seen["visible_sends"].array.map(\.int) == [204], "\(seen["visible_sends"])")
        #expect(try server.outbox.history.acceptedCount() == 1)
    }

    @Test("A server back after half a minute gets the memo within seconds: the page asks at least every 10 s")
    func aServerThatComesBackIsAskedSoon() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("comeback", server: server, maildir: false, timeout: 120)
        Self.expectClean(seen, allowing: { $0["text"].string?.contains("ERR_CONNECTION_REFUSED") == true })
        #expect(seen["delivered"].bool == true, "\(seen)")
        #expect(seen["given"].array.compactMap(\.string) == ["no answer", "no answer", "no answer", "no answer", "no answer", "server"])
        let gaps = seen["gaps"].array.compactMap(\.double)
        #expect(gaps.count == 5, "\(gaps)")
        // 1, 2, 4 and 8 s, then 10 (not 16): each after the previous try has failed, so a loaded machine only
        // makes a gap longer by the time a try takes, never shorter.
        #expect(gaps.last.map { $0 >= 9.5 && $0 < 14 } == true, "\(gaps)")
        #expect(gaps.dropLast().last.map { $0 >= 7.5 } == true, "the backoff still grows: \(gaps)")
    }

    @Test("Undo the server never answers puts the text back and says the memo may still go")
    func anUnansweredUndoSaysTheMemoMayStillGo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path) { $0.undoMilliseconds = 120_000 }
        defer { server.stop() }
        let seen = try Self.drive("undo_unreachable", server: server, maildir: false, timeout: 120)
        Self.expectClean(seen, allowing: { $0["text"].string?.contains("ERR_CONNECTION_REFUSED") == true })
        #expect(seen["given"].array.compactMap(\.string) == Array(repeating: "no answer", count: 5), "\(seen["given"])")
        let strings = try Self.translations("en")
        #expect(seen["state"]["code"].string == "undo_unsure", "\(seen["state"])")
        #expect(seen["state"]["text"].string == strings["state_undo_unsure"])
        #expect(seen["body_has_memo"].bool == true, "the text came back")
        #expect(try server.outbox.history.counts()[.queued] == 1, "the server still holds it, as the page says")
    }

    @Test("Undo pressed after the server's window closed says it is too late")
    func aLateUndoSaysSo() throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let server = try TestServer(dataDirectory: directory.path, clock: clock) { $0.undoMilliseconds = 30_000 }
        defer { server.stop() }
        let seen = try Self.drive("undo_late", server: server, maildir: false) { step in
            #expect(step == "close-window")
            clock.advance(milliseconds: 31_000)
        }
        Self.expectClean(seen, allowing: { $0["url"].string?.contains("/history/") == true && $0["text"].string?.contains("409") == true })
        let strings = try Self.translations("en")
        #expect(seen["state"]["code"].string == "undo_late", "\(seen["state"])")
        #expect(seen["state"]["text"].string == strings["state_undo_late"])
        #expect(seen["body"].string == "", "the text is not put back: the memo goes")
        #expect(seen["requests_after"].array.count == 1)
    }

    @Test("Sending a memo retires the previous memo's Undo at once, even while the new memo's POST is held")
    func undoIsOnlyForTheNewestMemo() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport) { $0.undoMilliseconds = 60_000 }
        defer { server.stop() }
        let seen = try Self.drive("undo_superseded", server: server, maildir: false, timeout: 90)
        Self.expectClean(seen)
        #expect(seen["undo_for_a"].bool == true, "no Undo for the first memo")
        // B is on its way (its POST held): A's Undo is gone, and nothing took A back.
        #expect(seen["undo_while_b_held"].bool == false, "Undo for the memo before stayed while B was on its way")
        #expect(seen["body_while_b_held"].string == "", "\(seen["body_while_b_held"])")
        #expect(seen["undo_for_b"].bool == true, "no Undo once B's 204 came")
        #expect(seen["undo_while_c_held"].bool == false)
        // C's 204 came after D was sent: no Undo for C.
        #expect(seen["undo_while_d_held"].bool == false, "C's late 204 offered Undo while D, sent after it, was held")
        #expect(seen["undo_for_d"].bool == true, "no Undo once D's 204 came")
        let d = try #require(seen["d"].string)
        #expect(seen["body"].string == d, "\(seen["body"])")
        let deletes = seen["deletes"].array
        #expect(deletes.count == 1, "\(deletes)")
        #expect(deletes.first?["status"].int == 200)
        // Only D is taken back; A, B and C stay in the server's hands.
        let records = try server.outbox.history.latest(limit: 10)
        #expect(records.count == 4)
        let cancelled = records.filter { $0.status == .cancelled }
        #expect(cancelled.count == 1, "\(records.map(\.status))")
        #expect(cancelled.first.map { deletes.first?["url"].string?.hasSuffix("/history/" + $0.id) == true } == true,
                "the DELETE was not for D: \(deletes)")
        #expect(records.filter { $0.status == .queued }.count == 3, "\(records.map(\.status))")
    }

    @Test("Undo answered by a captive portal's 200 page puts the text back but says the memo may still go")
    func undoAnsweredByAPortalIsNotTakenForTheServers() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path) { $0.undoMilliseconds = 120_000 }
        defer { server.stop() }
        let seen = try Self.drive("undo_portal", server: server, maildir: false, timeout: 60)
        Self.expectClean(seen)
        #expect(seen["undo_shown"].bool == true, "no Undo button")
        #expect(seen["given"].array.compactMap(\.int) == [200], "\(seen["given"])")
        let strings = try Self.translations("en")
        #expect(seen["state"]["code"].string == "undo_unsure", "\(seen["state"])")
        #expect(seen["state"]["text"].string == strings["state_undo_unsure"])
        #expect(seen["body_has_memo"].bool == true, "the text came back")
        #expect(seen["live"].string != strings["announce_restored"], "a screen reader heard that the memo is back")
        #expect(try server.outbox.history.counts()[.queued] == 1, "the server still holds it, as the page says")
    }

    @Test("A memo a Jotter relay has taken but not delivered shows in History as on its way, and why")
    func aMemoAtTheRelayShowsAsOnItsWay() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.fail(DeliveryFailure(.relayPending, permanent: false)))
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }

        let seen = try Self.drive("relay_pending", server: server, maildir: false)
        Self.expectClean(seen)
        let strings = try Self.translations("en")
        let entries = seen["history"].array
        #expect(entries.count == 1, "\(seen["history"])")
        #expect(entries.first?["status"].string == strings["status_sending"], "\(seen["history"])")
        #expect(entries.first?["text"].string?.contains(strings["error_relay_pending"] ?? "?") == true, "\(seen["history"])")
        #expect(entries.first?["retry"].bool == false)
        let id = try #require(try server.outbox.history.latest(limit: 1).first?.id)
        #expect([.retrying, .sending].contains(try server.outbox.history.record(id: id)?.status))
    }

    @Test("Text shared from another app opens in the page ready to send, and is not sent by itself")
    func sharedTextWaitsInThePage() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("share", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["after"]["subject"].string == "Idea 💡")
        #expect(seen["after"]["body"].string == "Read this later\nhttps://example.org/a?b=1")
        #expect(seen["after"]["location"].string == seen["url"].string, "the shared text left the address bar")
        #expect(seen["send_requests"].array.isEmpty, "sent by itself: \(seen["send_requests"])")
        #expect(try server.outbox.history.acceptedCount() == 0)
        let manifest = try JSONValue.parse(Array(try server.route("GET", "/manifest.webmanifest").body))
        #expect(manifest["share_target"]?["action"]?.string == "/")
        #expect(manifest["share_target"]?["params"]?["text"]?.string == "text")
    }

    @Test("With an undo window, Undo takes the memo back: its text returns and it is never delivered")
    func undoTakesTheMemoBack() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport) { $0.undoMilliseconds = 30_000 }
        defer { server.stop() }
        let seen = try Self.drive("undo", server: server, maildir: false)
        Self.expectClean(seen)
        let memo = try #require(seen["memo"].string)
        #expect(seen["undo_shown"].bool == true, "no Undo button")
        let strings = try Self.translations("en")
        #expect(seen["undo_label"].string == strings["undo"])
        #expect(seen["after"]["body"].string == memo, "the text came back")
        #expect(seen["requests_after"].array.first?["status"].int == 200)
        // A screen reader hears that Undo is there, and that the memo came back (the button and the text
        // appear in silence).
        #expect(seen["live_sent"].string == strings["announce_sent_undo"], "\(seen["live_sent"])")
        #expect(seen["live_restored"].string == strings["announce_restored"], "\(seen["live_restored"])")
        let id = try #require(try server.outbox.history.latest(limit: 1).first?.id)
        #expect(try server.outbox.history.record(id: id)?.status == .cancelled)
        #expect(transport.messages.isEmpty, "never handed to the relay")
    }

    @Test("Undo after the next memo was begun: the memo taken back returns, and what was typed since stays")
    func undoKeepsWhatWasTypedSince() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport) { $0.undoMilliseconds = 30_000 }
        defer { server.stop() }
        let seen = try Self.drive("undo_typing", server: server, maildir: false)
        Self.expectClean(seen)
        let memo = try #require(seen["memo"].string)
        #expect(seen["undo_shown"].bool == true, "no Undo button")
        #expect(seen["after"]["body"].string == memo + "\n\nNext thought", "\(seen["after"])")
        #expect(seen["requests_after"].array.first?["status"].int == 200)
        let id = try #require(try server.outbox.history.latest(limit: 1).first?.id)
        #expect(try server.outbox.history.record(id: id)?.status == .cancelled)
        #expect(transport.messages.isEmpty, "never handed to the relay")
    }

    @Test("A memo longer than the server takes comes back into the page, which says why; nothing is left pending")
    func aMemoTooLongComesBack() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("too_large", server: server, maildir: false)
        Self.expectClean(seen, allowing: PhoneBrowserTests.refusals(["/send": [413]]))
        #expect(seen["send_statuses"].array.map(\.int) == [413])
        #expect(seen["body_length"].int == seen["length"].int, "the text is back whole")
        #expect(seen["note"].string == (try Self.translations("en"))["state_too_large"], "\(seen["note"])")
        #expect(seen["pending"].int == 0)
        #expect(try server.outbox.history.acceptedCount() == 0)
    }

    @Test("Sharing into Jotter keeps the draft that was waiting: both are in the page, the draft first")
    func sharingKeepsTheDraft() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("share_with_draft", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["draft"].string?.contains("Unsent draft") == true, "no draft saved: \(seen["draft"])")
        #expect(seen["after"]["body"].string == "Unsent draft\n\nRead this later", "\(seen["after"])")
        #expect(seen["after"]["draft"].string?.contains("Read this later") == true, "the merged text is the draft now")
        #expect(try server.outbox.history.acceptedCount() == 0, "nothing sent by itself")
    }

    @Test("Where the browser keeps nothing on the device, a memo still goes out and the page says it lives in the tab")
    func withoutStorageThePageSaysSo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("no_storage", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["note"].string == (try Self.translations("en"))["state_no_storage"], "\(seen["note"])")
        #expect(seen["send_statuses"].array.map(\.int) == [204])
        #expect(try server.outbox.history.acceptedCount() == 1)
    }

    @Test("Memos an earlier page set aside as refused come back into the page, once, in their order")
    func memosSetAsideBeforeComeBack() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("old_rejected", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["body"].string == "first refused\n\nsecond refused", "\(seen["body"])")
        #expect(seen["left"].isNull, "\(seen["left"])")
        #expect(try server.outbox.history.acceptedCount() == 0)
    }

    @Test("Settings turns undo on for this device: the window rides on each memo, Undo takes it back")
    func undoSettingTurnsUndoOn() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)   // no --undo-seconds
        defer { server.stop() }
        let seen = try Self.drive("undo_setting", server: server, maildir: false)
        Self.expectClean(seen)
        let memo = try #require(seen["memo"].string)
        let offOption = try Self.translations("en")["undoOff"]
        #expect(seen["options"][0][1].string == offOption, "the first choice is Off: \(seen["options"])")
        #expect(seen["options"][2][0].string == "10")
        #expect(seen["chosen"].string == "10" && seen["stored"].string == "10", "not chosen by keyboard")
        #expect(seen["active_after_close"].string == "body", "closing Settings did not give the textarea back")
        #expect(seen["send_requests"][0]["headers"]["Undo-Seconds"].string == "10", "\(seen["send_requests"])")
        #expect(seen["undo_shown"].bool == true, "no Undo button")
        #expect(seen["after"]["body"].string == memo, "the text came back")
        #expect(seen["requests_after"].array.first?["status"].int == 200)
        let id = try #require(try server.outbox.history.latest(limit: 1).first?.id)
        #expect(try server.outbox.history.record(id: id)?.status == .cancelled)
        #expect(transport.messages.isEmpty, "never handed to the relay")
    }

    @Test("Through a Jotter relay: a memo waits until Settings confirm an address with the mailed code, then goes out")
    func destinationIsConfirmedInSettings() throws {
        let relayDirectory = TemporaryDirectory(), directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: relayDirectory.path)
        defer { relay.stop() }
        let server = try TestServer(dataDirectory: directory.path, relay: "jotter+http://127.0.0.1:\(relay.port)") {
            $0.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 1000)
        }
        defer { server.stop() }
        let address = "ana@example.com"
        var known = Set<String>()
        let seen = try Self.drive(driver: Self.driver, scenario: "destination", server: server, maildir: false) { step in
            switch step {
            case "memo-held":
                // Held, and the breaker says why (its state is set on the worker's queue, a moment apart).
                #expect(server.waitUntil(timeout: 20) {
                    guard case .refused(let kind, _, _) = server.application.worker.relayState else { return false }
                    return kind == "unverified" && (try? server.outbox.history.latest(limit: 1).first?.status) == .held
                }, "the memo was not held while no address is confirmed")
                known = try relay.mailFiles(to: address)
                return "ok"
            case "code":
                return try relay.newCode(to: address, known: known)
            default:
                Issue.record("unexpected step \(step)")
                return "ok"
            }
        }
        Self.expectClean(seen, allowing: { entry in
            // The wrong code's 400 is the answer the page shows, not a fault.
            entry["source"].string == "network" && entry["url"].string?.hasSuffix("/destination/confirm") == true
        })
        let text = try Self.translations("en")
        let memo = try #require(seen["memo"].string)
        #expect(seen["relay_line"].string == text["relay_unverified"], "\(seen["relay_line"])")
        #expect(seen["before"].string == text["destNone"])
        #expect(seen["prompt"].string == text["codePrompt"]?.replacingOccurrences(of: "{address}", with: address))
        #expect(seen["code_focused"].bool == true, "the code field did not get the focus")
        #expect(seen["wrong"].string == text["dest_invalid_code"])
        #expect(seen["after"].string == text["destVerified"]?.replacingOccurrences(of: "{address}", with: address))
        #expect(seen["error_after"].string == "")
        #expect(TestServer.waitUntil(timeout: 20) {
            ((try? relay.mails(to: address)) ?? []).contains { RelayServer.sameBody($0.message["body"], memo) }
        }, "the memo did not reach the address")
        #expect(try relay.mails(to: address).filter { RelayServer.sameBody($0.message["body"], memo) }.count == 1)
    }

    // MARK: Several tabs, and answers that are not the server's

    /// Failed sends are what these scenarios are about: network entries for /send (a refused or
    /// blocked connection, a status the test gave) are expected; anything else is not.
    static func sendFailures(_ entry: Observed) -> Bool {
        entry["source"].string == "network" && (entry["url"].string.map { $0.hasSuffix("/send") } ?? false)
    }

    /// The other tab logged no exception and no console error either.
    static func expectOtherTabClean(_ seen: Observed, sourceLocation: SourceLocation = #_sourceLocation) {
        let problems = seen["tab_problems"]
        #expect(problems["exceptions"].array.isEmpty && problems["console_errors"].array.isEmpty,
                "the other tab: \(problems)", sourceLocation: sourceLocation)
        #expect(problems["log_errors"].array.filter { !sendFailures($0) }.isEmpty, "the other tab: \(problems)",
                sourceLocation: sourceLocation)
    }

    @Test("Two tabs: one drains the backlog while the other adds memos; every memo reaches the server, once")
    func twoTabsLoseNoMemo() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let seen = try Self.drive("two_tabs", server: server, maildir: false, timeout: 150)
        Self.expectClean(seen, allowing: Self.sendFailures)
        Self.expectOtherTabClean(seen)
        let memos = seen["memos"].array.compactMap(\.string)
        #expect(memos.count == 45 && seen["queued"].int == 30, "\(seen["queued"]) queued of \(memos.count)")
        #expect(seen["left"].array.isEmpty, "still in the page: \(seen["left"])")
        #expect(TestServer.waitUntil(timeout: 30) { transport.messages.count >= memos.count })
        let delivered = transport.messages.map(\.subject)
        #expect(Set(delivered) == Set(memos), "missing: \(Set(memos).subtracting(delivered).sorted())")
        #expect(try server.outbox.history.acceptedCount() == Int64(memos.count), "a memo was stored twice")
    }

    @Test("An earlier page's outbox (one list) and draft: its memos go, once each, and the draft comes back")
    func anEarlierPagesOutboxIsSent() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let seen = try Self.drive("old_outbox", server: server, maildir: false)
        Self.expectClean(seen, allowing: Self.sendFailures)
        let memos = seen["memos"].array.compactMap(\.string)
        #expect(memos.count == 2)
        #expect(seen["settled"]["outbox"].array.isEmpty, "\(seen["settled"]["outbox"])")
        #expect(seen["old_key"].isNull, "the old list is still there: \(seen["old_key"])")
        #expect(seen["settled"]["body"].string == seen["draft"].string, "the draft: \(seen["settled"]["body"])")
        #expect(TestServer.waitUntil(timeout: 20) { transport.messages.count >= 2 })
        usleep(300_000)
        #expect(transport.messages.map(\.body) == memos, "\(transport.messages.map(\.body))")
        #expect(try server.outbox.history.acceptedCount() == 2)
    }

    @Test("A tab showing the text another tab sends clears it; a tab's own draft outlives a send in another")
    func draftsBelongToTheirTab() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let seen = try Self.drive("tabs_draft", server: server, maildir: false, timeout: 90)
        Self.expectClean(seen)
        Self.expectOtherTabClean(seen)
        let memo = try #require(seen["memo"].string), quick = try #require(seen["quick"].string)
        #expect(seen["b_opened_with"].string == memo, "the new tab did not get the draft: \(seen["b_opened_with"])")
        #expect(seen["b_after_a_sent"].string == "", "tab B still shows what A sent: \(seen["b_after_a_sent"])")
        #expect(seen["c_opened_with"].string == seen["draft"].string, "B's draft was lost: \(seen["c_opened_with"])")
        #expect(TestServer.waitUntil(timeout: 20) { transport.messages.count >= 2 })
        usleep(300_000)
        #expect(transport.messages.map(\.body) == [memo, quick], "\(transport.messages.map(\.body))")
        #expect(try server.outbox.history.acceptedCount() == 2)
    }

    @Test("After a paste the storage quota refused, later memos are kept in storage again: a reload keeps them")
    func storageIsTriedAgainAfterTheQuota() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let seen = try Self.drive("quota", server: server, maildir: false, timeout: 120)
        Self.expectClean(seen, allowing: Self.sendFailures)
        let memo = try #require(seen["memo"].string)
        #expect(seen["note_big"].string == "too_large", "\(seen["note_big"])")
        #expect(seen["note_after"].string != "no_storage", "the page says storage refuses memos: it takes them")
        #expect(seen["stored"].array.compactMap { $0["body"].string } == [memo], "in storage: \(seen["stored"])")
        #expect(seen["after_reload"].array.compactMap { $0["body"].string } == [memo],
                "after a reload: \(seen["after_reload"])")
        #expect(seen["settled"]["outbox"].array.isEmpty)
        #expect(TestServer.waitUntil(timeout: 20) { !transport.messages.isEmpty })
        usleep(300_000)
        #expect(transport.messages.map(\.body) == [memo])
    }

    @Test("A captive portal's 200 is not the server's answer: the memo stays and goes later; a 409 brings it back")
    func onlyTheServersAnswerForgetsAMemo() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let seen = try Self.drive("portal", server: server, maildir: false, timeout: 60)
        Self.expectClean(seen, allowing: Self.sendFailures)
        let memo = try #require(seen["memo"].string), refused = try #require(seen["refused_memo"].string)
        #expect(seen["answers"].array.first?.int == 200, "the portal never answered: \(seen["answers"])")
        #expect(seen["left"].array.isEmpty && !seen["left"].isNull, "the memo never went: \(seen["left"])")
        #expect(TestServer.waitUntil(timeout: 20) { !transport.messages.isEmpty })
        #expect(transport.messages.map(\.body) == [memo], "\(transport.messages.map(\.body))")
        #expect(seen["after_conflict"]["body"].string == refused, "the 409's memo: \(seen["after_conflict"])")
        #expect(seen["after_conflict"]["outbox"].array.isEmpty)
        #expect(seen["note"].string == (try Self.translations("en"))["state_refused"], "\(seen["note"])")
        #expect(try server.outbox.history.acceptedCount() == 1)
    }

    @Test("While sends fail the page says why (the server's error, no answer); a memo taken ends each warning")
    func thePageSaysWhySendsFail() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("reasons", server: server, maildir: false, timeout: 90)
        Self.expectClean(seen, allowing: Self.sendFailures)
        let text = try Self.translations("en")
        #expect(seen["answers"].array.prefix(2).map(\.description) == ["500", "no answer"], "\(seen["answers"])")
        #expect(seen["on_500"]["text"].string == text["state_server_error"]?.replacingOccurrences(of: "{status}", with: "500"),
                "\(seen["on_500"])")
        #expect(seen["on_500"]["shown"].bool == true)
        #expect(seen["on_no_answer"]["text"].string == text["state_unreachable"], "\(seen["on_no_answer"])")
        #expect(seen["after_success"]["text"].string == "", "the warning stayed: \(seen["after_success"])")
        #expect(seen["on_too_large"]["text"].string == text["state_too_large"], "\(seen["on_too_large"])")
        #expect(seen["after_next"]["text"].string == "", "the warning stayed: \(seen["after_next"])")
        #expect(try server.outbox.history.acceptedCount() == 2)
    }

    @Test("With the server gone before the page fetched its strings, a failed send still says why, in its language")
    func noAnswerIsSaidWithoutTheStrings() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("unreachable_cold", server: server, maildir: false)
        Self.expectClean(seen, allowing: { entry in
            Self.sendFailures(entry) || entry["url"].string?.contains("/i18n/") == true
        })
        #expect(seen["note"].string == (try Self.translations("de"))["state_unreachable"], "\(seen["note"])")
        #expect(seen["pending"].int == 1)
    }

    @Test("200,000 bytes of quotes and control characters go whole, without and with a subject (JSON doubled them)")
    func escapingDoesNotCountAgainstTheCap() throws {
        let directory = TemporaryDirectory()
        let transport = ControlledTransport(.deliver)
        let server = try TestServer(dataDirectory: directory.path, transport: transport)
        defer { server.stop() }
        let seen = try Self.drive("escapes", server: server, maildir: false, timeout: 60)
        Self.expectClean(seen)
        #expect(seen["length"].int == 200_000)
        #expect(seen["send_requests"].array.map { $0["status"].int } == [204, 204], "\(seen["send_requests"])")
        #expect(seen["note"].string == "", "\(seen["note"])")
        #expect(seen["settled"]["outbox"].array.isEmpty)
        #expect(TestServer.waitUntil(timeout: 20) { transport.messages.count >= 2 })
        let body = String(repeating: "\"\u{1}", count: 100_000)
        #expect(transport.messages.map(\.body) == [body, body], "the memos changed on the way")
        #expect(transport.messages.last?.subject == "Quotes")
    }

    @Test("The language chosen in the menu comes back on the next visit; ?lang= still wins")
    func theChosenLanguageComesBack() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let seen = try Self.drive("saved_lang", server: server, maildir: false)
        Self.expectClean(seen)
        #expect(seen["first"].string == "en")
        let again = seen["again"]
        #expect(again["lang"].string == "ja" && again["menu"].string == "ja", "\(again)")
        #expect(again["send"].string == (try Self.translations("ja"))["send"])
        #expect(again["body"].string == "typed at once" && again["active"].string == "body", "\(again)")
        #expect(seen["with_query"]["lang"].string == "fr" && seen["with_query"]["menu"].string == "fr", "\(seen["with_query"])")
    }

    // MARK: Driver

    /// The driver's JSON, read by path: `seen["after"]["pending"]["hidden"].bool`. A missing key or
    /// index reads as null.
    struct Observed: CustomStringConvertible {
        private let value: Any?

        init(_ value: Any?) {
            self.value = value is NSNull ? nil : value
        }

        subscript(key: String) -> Observed { Observed((value as? [String: Any])?[key]) }
        subscript(index: Int) -> Observed {
            let array = (value as? [Any]) ?? []
            return Observed(array.indices.contains(index) ? array[index] : nil)
        }
        var string: String? { value as? String }
        var double: Double? { (value as? NSNumber)?.doubleValue }
        var int: Int? { (value as? NSNumber)?.intValue }
        var bool: Bool? { value as? Bool }
        var array: [Observed] { ((value as? [Any]) ?? []).map(Observed.init) }
        var isNull: Bool { value == nil }
        var description: String {
            guard let value else { return "null" }
            guard JSONSerialization.isValidJSONObject(value),
                  let data = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]) else {
                return String(describing: value)
            }
            return String(decoding: data, as: UTF8.self)
        }
    }

    /// Set once the driver has exited, so the watchdog never signals a reused pid.
    final class Flag: Sendable {
        let state = Mutex(false)
    }

    struct DriverFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs one scenario of the driver against `server` and returns its observations. For scenarios
    /// that need the server stopped or started, the driver prints `{"await": STEP}`; `step` does it,
    /// then the driver is told to go on.
    static func drive(_ scenario: String, server: TestServer, maildir: Bool = true, timeout: Double = 40,
                      step: (String) throws -> Void = { _ in }) throws -> Observed {
        try drive(driver: driver, scenario: scenario, server: server, maildir: maildir, timeout: timeout) {
            try step($0)
            return "ok"
        }
    }

    /// Runs `scenario` of the driver script at `driver` (with `arguments` added) against `server`. For
    /// each `{"await": STEP}` it prints, `answer` does the step and returns the line the driver reads
    /// back (a pairing token, or "ok").
    static func drive(driver: String, scenario: String, server: TestServer, arguments extra: [String] = [],
                      maildir: Bool = true, timeout: Double = 40,
                      answer: (String) throws -> String) throws -> Observed {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        var arguments = [driver, "--url", "http://127.0.0.1:\(server.port)", "--scenario", scenario,
                         "--timeout", String(Int(timeout))] + extra
        if maildir { arguments += ["--maildir", server.maildir] }
        process.arguments = arguments
        let output = Pipe(), input = Pipe()
        let errors = TemporaryDirectory()
        let errorPath = errors.file("stderr")
        _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
        let errorHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: errorPath))
        process.standardOutput = output
        process.standardInput = input
        process.standardError = errorHandle
        try process.run()
        try errorHandle.close()
        // The driver limits itself (SIGALRM); this is the backstop if it hangs anyway. SIGTERM lets it
        // close its browser.
        let pid = process.processIdentifier
        let finished = Flag()
        let watchdog = DispatchWorkItem {
            finished.state.withLock { done in if !done { kill(pid, SIGTERM) } }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout + 10, execute: watchdog)
        defer {
            watchdog.cancel()
            if process.isRunning { process.terminate() }
        }

        var result: Observed?
        var buffer = Data()
        let reader = output.fileHandleForReading
        readLoop: while true {
            let chunk = reader.availableData
            if chunk.isEmpty { break }
            buffer.append(chunk)
            while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = buffer[buffer.startIndex..<newline]
                buffer = Data(buffer[buffer.index(after: newline)...])
                guard let object = try? JSONSerialization.jsonObject(with: line) as? [String: Any] else { continue }
                if let name = object["await"] as? String {
                    let reply: String
                    do {
                        reply = try answer(name)
                    } catch {
                        try? input.fileHandleForWriting.close()
                        throw error
                    }
                    input.fileHandleForWriting.write(Data((reply + "\n").utf8))
                } else {
                    result = Observed(object)
                    break readLoop
                }
            }
        }
        process.waitUntilExit()
        finished.state.withLock { $0 = true }
        try? input.fileHandleForWriting.close()
        guard let result else {
            let stderr = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
            let name = URL(fileURLWithPath: driver).lastPathComponent
            throw DriverFailure(description: "\(name) \(scenario) printed no observations "
                                + "(exit \(process.terminationStatus)): \(stderr.suffix(3000))")
        }
        return result
    }

    // MARK: Checks

    /// The scenario ran to the end, every request went to the page's own origin, and nothing was
    /// logged as an error: no console.error, no uncaught exception, no failed load (a 404 counts).
    static func expectClean(_ seen: Observed, allowing allowed: (Observed) -> Bool = { _ in false },
                            sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(seen["error"].isNull, "the driver stopped: \(seen["error"]) \(seen["chromium_stderr"])",
                sourceLocation: sourceLocation)
        #expect(!seen["requests"].array.isEmpty, "no request recorded", sourceLocation: sourceLocation)
        #expect(seen["foreign_requests"].array.isEmpty, "requests to another origin: \(seen["foreign_requests"])",
                sourceLocation: sourceLocation)
        let problems = seen["problems"]
        #expect(problems["console_errors"].array.isEmpty, "console errors: \(problems["console_errors"])",
                sourceLocation: sourceLocation)
        #expect(problems["exceptions"].array.isEmpty, "exceptions: \(problems["exceptions"])",
                sourceLocation: sourceLocation)
        let logged = problems["log_errors"].array.filter { !allowed($0) }
        #expect(logged.isEmpty, "errors in the log: \(logged)", sourceLocation: sourceLocation)
    }

    /// Exactly one message in the Maildir, with `body` (as Python's email package reads it), and one
    /// memo in the outbox. Returns the parsed message.
    @discardableResult
    static func expectDeliveredOnce(_ server: TestServer, body: String,
                                    sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
        #expect(server.waitUntil { !server.deliveredFiles().isEmpty }, "nothing arrived in the Maildir",
                sourceLocation: sourceLocation)
        usleep(500_000)  // a second copy would be written as promptly as the first
        let files = server.deliveredFiles()
        #expect(files.count == 1, "\(files.count) messages in the Maildir", sourceLocation: sourceLocation)
        let stored = try server.outbox.history.counts().values.reduce(0, +)
        #expect(stored == 1, "\(stored) memos in the outbox", sourceLocation: sourceLocation)
        let file = try #require(files.first, sourceLocation: sourceLocation)
        let message = try Python.parseMessage(atPath: file)
        let delivered = (message["body"] as? String)?.replacingOccurrences(of: "\r\n", with: "\n")
        #expect(delivered == body || delivered == body + "\n",
                "delivered \(String(describing: delivered)) instead of \(body.debugDescription)",
                sourceLocation: sourceLocation)
        return message
    }

    // MARK: Helpers

    /// A port nobody listens on right now (bound to 0 and released), for a server that must come
    /// back on the same origin.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw DriverFailure(description: "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr in
                bind(fd, sockaddr, length) == 0 && getsockname(fd, sockaddr, &length) == 0
            }
        }
        guard bound else { throw DriverFailure(description: "cannot bind 127.0.0.1:0") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// A server on a fixed port; retried for up to 10 s in case the old socket is not released yet.
    static func startServer(dataDirectory: String, configure: @escaping (inout Configuration) -> Void) throws
        -> TestServer {
        var lastError: (any Error)?
        for _ in 0..<100 {
            do {
                return try TestServer(dataDirectory: dataDirectory, configure: configure)
            } catch {
                lastError = error
                usleep(100_000)
            }
        }
        throw lastError ?? DriverFailure(description: "server did not start")
    }

    /// `Public/i18n/<tag>.json`.
    static func translations(_ tag: String) throws -> [String: String] {
        let data = try Data(contentsOf: URL(fileURLWithPath: Repository.publicDirectory + "/i18n/\(tag).json"))
        return (try JSONSerialization.jsonObject(with: data) as? [String: String]) ?? [:]
    }
}
