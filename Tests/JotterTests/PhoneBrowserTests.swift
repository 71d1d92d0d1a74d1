import Foundation
import Testing
@testable import Jotter

/// Debian's Chromium, which the suite drives.
private let chromiumInstalled = FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")

/// The phone's journey (issue 8) in a real browser: headless Chromium made a phone (390×844, mobile,
/// touch, an Android Chrome User-Agent), driven by `Tests/Browser/phone_test.py` against a whole
/// Jotter in LAN mode on 127.0.0.1 with loopback not trusted, so the browser plays the phone and must
/// pair. The driver observes; these tests decide, as in `BrowserTests`.
///
/// Screenshots for people to look at go to `.build/artifacts/phone/`.
@Suite(.serialized, .enabled(if: chromiumInstalled, "needs /usr/bin/chromium (apt-get install chromium)"))
struct PhoneBrowserTests {
    typealias Observed = BrowserTests.Observed

    static let driver = Repository.root + "/Tests/Browser/phone_test.py"
    static let artifacts = Repository.root + "/.build/artifacts/phone"

    /// LAN mode over plain HTTP, loopback not trusted: the test's browser is a phone.
    static func phoneServer(_ directory: TemporaryDirectory, clock: any WallClock = SystemClock()) throws
        -> TestServer {
        try TestServer(dataDirectory: directory.path, clock: clock) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanTrustsLoopback = false
        }
    }

    static func drive(_ scenario: String, server: TestServer, lang: String = "en",
                      answer: (String) throws -> String = { _ in "ok" }) throws -> Observed {
        try BrowserTests.drive(driver: driver, scenario: scenario, server: server,
                               arguments: ["--lang", lang, "--artifacts", artifacts], timeout: 120, answer: answer)
    }

    // MARK: Scenarios

    @Test("Unpaired: says so in its language, keeps the memos, no retries; a link in the same tab sends each once",
          arguments: ["en", "ja", "ar"])
    func unpairedPhoneWaitsThenPairsInTheSameTab(lang: String) throws {
        let directory = TemporaryDirectory()
        let server = try Self.phoneServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let text = try BrowserTests.translations(lang)

        let seen = try Self.drive("unpaired", server: server, lang: lang) { step in
            #expect(step == "pairing-token")
            return try registry.issuePairingToken().token
        }
        BrowserTests.expectClean(seen, allowing: Self.refusals(["/send": [401], "/history": [401]]))
        let memos = seen["memos"].array.compactMap(\.string)
        #expect(memos.count == 2)
        for tapped in seen["typed_and_tapped"].array {
            #expect(tapped["body"].string == "", "a tap on Send did not send: \(tapped)")
        }

        // Where it stands, in its language (first from the 401 of the first memo, then from GET
        // /pairing), and for as long as it is so.
        let notPaired = try #require(text["state_not_paired"])
        #expect(seen["not_paired_by_401"]["state"]["text"].string == notPaired,
                "#state after a 401: \(seen["not_paired_by_401"]["state"])")
        #expect(seen["not_paired"]["state"]["code"].string == "not_paired", "#state: \(seen["not_paired"]["state"])")
        #expect(seen["not_paired"]["state"]["text"].string == notPaired, "#state: \(seen["not_paired"]["state"])")
        let waiting = seen["after_window"]
        #expect(waiting["state"]["text"].string == notPaired && waiting["state"]["display"].string != "none"
                    && (waiting["state"]["opacity"].double ?? 0) > 0.9, "the state went away: \(waiting["state"])")
        #expect(waiting["outbox"].array.compactMap { $0["body"].string } == memos,
                "jotter.outbox while not paired: \(waiting["outbox"])")
        #expect(waiting["pending"]["shown"].bool == true && waiting["pending"]["text"].string?.hasPrefix("2") == true,
                "pending: \(waiting["pending"])")

        // No retry storm: one refused attempt (the first memo's), none once the state is known.
        #expect(seen["sends_before_window"].array.map(\.int) == [401], "POST /send: \(seen["sends_before_window"])")
        #expect(seen["sends_in_window"].array.isEmpty, "POST /send in 3 s while not paired: \(seen["sends_in_window"])")
        #expect(!seen["all_statuses"].array.contains { $0.int == 429 }, "a 429: \(seen["all_statuses"])")

        // History says why, not "can't load".
        let history = seen["history"]
        #expect(history["open"].bool == true && history["error_shown"].bool == true, "History: \(history)")
        #expect(history["error"].string == notPaired, "History says: \(history["error"])")
        #expect(history["empty_shown"].bool == false)

        Self.expectReadableLayout(seen["layout"], rightToLeft: lang == "ar")
        #expect(waiting["pair_open"]["shown"].bool == false, "a phone is offered 'Pair a phone'")
        #expect(waiting["html_lang"].string == lang)

        // The link, set as the hash of the open tab: paired at once, the token gone from the address bar.
        let name = try #require(try registry.list().first?.name)
        #expect(name == "Android — Pixel 8")
        let paired = try #require(text["state_paired"]).replacingOccurrences(of: "{name}", with: name)
        #expect(seen["pair_requests"].array.map(\.int) == [201], "POST /pair: \(seen["pair_requests"])")
        #expect(seen["paired"]["state"]["code"].string == "paired")
        #expect(seen["paired"]["state"]["text"].string == paired || seen["settled"]["states"].array.contains {
            $0["code"].string == "paired" && $0["text"].string == paired
        }, "never said \(paired.debugDescription): \(seen["settled"]["states"])")
        let settled = seen["settled"]
        #expect(seen["url_holds_token"].bool == false, "the token is still in the URL: \(settled["location"])")
        #expect(settled["location"].string?.contains("#") == false)
        #expect(settled["same_document"].bool == true, "the page was reloaded instead of handling hashchange")
        #expect((settled["hashchanges"].int ?? 0) >= 1)
        #expect(settled["token_stored"].bool == true)

        // Both memos went at once (no stale wait), each once.
        let seconds = try #require(seen["seconds_to_delivered"].double, "the memos never left the page")
        #expect(seconds < 5, "delivered \(seconds) s after the link was opened")
        let sends = seen["sends_after_pairing"].array
        #expect(sends.map { $0["status"].int } == [204, 204],
                "POST /send after pairing: \(seen["sends_after_pairing"])")
        #expect(Set(sends.compactMap { $0["key"].string }).count == 2)
        #expect(settled["outbox"].array.isEmpty && settled["pending"]["shown"].bool == false)
        try Self.expectDelivered(server, bodies: memos)
    }

    @Test("A used, an expired and an unknown pairing link each say so; a phone that could not pair keeps its memo")
    func linksThatCannotPairSaySo() throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock(milliseconds: Int64(Date().timeIntervalSince1970 * 1000))
        let server = try Self.phoneServer(directory, clock: clock)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let text = try BrowserTests.translations("en")

        let seen = try Self.drive("links", server: server) { step in
            switch step {
            case "pairing-token":
                return try registry.issuePairingToken().token
            case "expired-token":
                let token = try registry.issuePairingToken().token
                clock.advance(milliseconds: DeviceRegistry.pairingLifetime + 1)
                return token
            default:
                Issue.record("unexpected step \(step)")
                return "ok"
            }
        }
        BrowserTests.expectClean(seen, allowing: Self.refusals(["/pair": [401, 410]]))

        #expect(seen["first"]["state"]["code"].string == "paired", "the first phone: \(seen["first"]["state"])")
        #expect(seen["first"]["pair_requests"].array.map(\.int) == [201])
        // Opened again on the phone it paired, the link is spent, but that phone is still paired and says
        // so: it asked with its device token, and the server answered 200 (already paired) without
        // making it a second device.
        let again = seen["first_again"]
        let name = try #require(try registry.list().first?.name)
        #expect(again["pair_requests"].array.map(\.int) == [201, 200])
        #expect(try registry.list().count == 1)
        let paired = text["state_paired"]?.replacingOccurrences(of: "{name}", with: name)
        #expect(again["state"]["code"].string == "paired" && again["state"]["text"].string == paired,
                "a paired phone that opened its link again says: \(again["state"])")
        #expect(again["send_requests"].array.map(\.int) == [204],
                "the paired phone could not send: \(again["send_requests"])")

        let used = seen["used"]
        #expect(used["pair_requests"].array.map(\.int) == [410])
        #expect(used["state"]["code"].string == "pairing_link_used")
        #expect(used["state"]["text"].string == text["state_pairing_link_used"], "#state: \(used["state"])")
        #expect(used["url_holds_token"].bool == false && used["token_stored"].bool == false)
        let unsent = seen["used_after_send"]
        #expect(unsent["outbox"].array.compactMap { $0["body"].string } == [seen["unsent_memo"].string ?? ""],
                "jotter.outbox: \(unsent["outbox"])")
        #expect(unsent["send_requests"].array.isEmpty, "POST /send without a device token: \(unsent["send_requests"])")
        #expect(unsent["state"]["text"].string == text["state_pairing_link_used"],
                "#state after a send: \(unsent["state"])")

        let expired = seen["expired"]
        #expect(expired["pair_requests"].array.map(\.int) == [410])
        #expect(expired["state"]["code"].string == "pairing_link_expired")
        #expect(expired["state"]["text"].string == text["state_pairing_link_expired"], "#state: \(expired["state"])")

        let invalid = seen["invalid"]
        #expect(invalid["pair_requests"].array.map(\.int) == [401])
        #expect(invalid["state"]["code"].string == "pairing_link_invalid")
        #expect(invalid["state"]["text"].string == text["state_pairing_link_invalid"], "#state: \(invalid["state"])")

        #expect(try registry.list().count == 1, "one link, one device")
        try BrowserTests.expectDeliveredOnce(server, body: try #require(seen["still_paired_memo"].string))
    }

    @Test("A link opened in a new tab (as a camera app does) pairs the old tab too: its memo goes once")
    func linkInANewTabPairsTheOldTab() throws {
        let directory = TemporaryDirectory()
        let server = try Self.phoneServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)

        let seen = try Self.drive("new-tab", server: server) { _ in try registry.issuePairingToken().token }
        BrowserTests.expectClean(seen, allowing: Self.refusals(["/send": [401]]))
        let memo = try #require(seen["memo"].string)
        #expect(seen["old_not_paired"]["state"]["code"].string == "not_paired")
        #expect(seen["old_not_paired"]["outbox"].array.compactMap { $0["body"].string } == [memo])
        #expect(seen["new_paired"]["state"]["code"].string == "paired", "the new tab: \(seen["new_paired"]["state"])")
        #expect(seen["old_hidden"].string == "hidden", "the old tab was not behind the new one")
        #expect(seen["seconds_to_delivered"].double != nil, "the old tab's memo never left")
        let back = seen["old_back"]
        #expect(back["state"]["code"].string == "paired", "the old tab still says: \(back["state"])")
        #expect(back["outbox"].array.isEmpty && back["token_stored"].bool == true)
        // Either tab may have sent it (same Idempotency-Key): at most one 401 (before pairing), no error.
        let sends = seen["sends"].array.compactMap { $0["status"].int }
        #expect(sends.filter { $0 == 401 }.count <= 1 && sends.allSatisfy { [401, 204, 409].contains($0) },
                "POST /send: \(seen["sends"])")
        try BrowserTests.expectDeliveredOnce(server, body: memo)
    }

    @Test("A phone that cannot open a link (an app on its home screen) pairs by typing the code the computer shows")
    func aTypedCodePairsThePhone() throws {
        let directory = TemporaryDirectory()
        let server = try Self.phoneServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let text = try BrowserTests.translations("en")
        let seen = try Self.drive("code", server: server) { step in
            #expect(step == "pairing-code")
            return try registry.issuePairingToken().code
        }
        BrowserTests.expectClean(seen, allowing: Self.refusals(["/send": [401], "/pair": [401], "/history": [401]]))
        let before = seen["field_before"]
        #expect(before["shown"].bool == true, "no code field while not paired: \(before)")
        #expect(before["placeholder"].string == text["pairCode"])
        #expect(before["button"].string == text["pairBtn"])
        // A wrong code says so; the memo still waits, and the field stays for the right one.
        #expect(seen["wrong"]["state"]["code"].string == "code_invalid", "\(seen["wrong"])")
        #expect(seen["wrong"]["state"]["text"].string == text["state_code_invalid"], "\(seen["wrong"])")
        #expect(seen["wrong"]["field"]["shown"].bool == true)
        #expect(seen["wrong"]["send_requests"].array.isEmpty, "\(seen["wrong"]["send_requests"])")
        // The right one pairs, the memo goes once, and the field is gone.
        #expect(seen["pair_requests"].array.map(\.int) == [401, 201], "POST /pair: \(seen["pair_requests"])")
        #expect(seen["paired"]["state"]["code"].string == "paired", "\(seen["paired"])")
        #expect(seen["delivered_in"].double != nil, "the memo never left the page")
        #expect(seen["send_requests"].array.map(\.int) == [204], "POST /send: \(seen["send_requests"])")
        #expect(seen["field_after"]["shown"].bool == false)
        #expect(try registry.list().count == 1)
        try Self.expectDelivered(server, bodies: [try #require(seen["memo"].string)])
    }

    @Test("The whole link pasted into the code field pairs the phone (an app on the home screen opens no link)")
    func aPastedLinkPairsThePhone() throws {
        let directory = TemporaryDirectory()
        let server = try Self.phoneServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let seen = try Self.drive("paste", server: server) { step in
            #expect(step == "pairing-link")
            return "http://192.0.2.10:\(server.port)/#pair=" + (try registry.issuePairingToken().token)
        }
        BrowserTests.expectClean(seen, allowing: Self.refusals(["/send": [401], "/history": [401]]))
        #expect(seen["pair_requests"].array.map(\.int) == [201], "POST /pair: \(seen["pair_requests"])")
        #expect(seen["paired"]["state"]["code"].string == "paired", "\(seen["paired"])")
        #expect(seen["delivered_in"].double != nil, "the memo never left the page")
        #expect(seen["send_requests"].array.map(\.int) == [204], "POST /send: \(seen["send_requests"])")
        try Self.expectDelivered(server, bodies: [try #require(seen["memo"].string)])
    }

    @Test("Revoked: says so, keeps its memos without retrying; paired again in the same tab, sends each once")
    func revokedPhoneSaysSoThenPairsAgain() throws {
        let directory = TemporaryDirectory()
        let server = try Self.phoneServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let text = try BrowserTests.translations("en")

        let seen = try Self.drive("revoked", server: server) { step in
            switch step {
            case "pairing-token":
                return try registry.issuePairingToken().token
            case "revoke":
                for device in try registry.list() where device.revokedAt == nil {
                    #expect(try registry.revoke(id: device.id))
                }
                return "ok"
            default:
                Issue.record("unexpected step \(step)")
                return "ok"
            }
        }
        BrowserTests.expectClean(seen, allowing: Self.refusals(["/send": [401], "/pair": [401]]))
        let memos = seen["memos"].array.compactMap(\.string)
        #expect(memos.count == 2)
        #expect(seen["paired"]["state"]["code"].string == "paired", "never paired: \(seen["paired"]["state"])")

        let revoked = seen["revoked"], later = seen["revoked_later"]
        #expect(revoked["state"]["code"].string == "device_revoked")
        #expect(revoked["state"]["text"].string == text["state_device_revoked"], "#state: \(revoked["state"])")
        #expect(later["state"]["text"].string == text["state_device_revoked"], "the state went away: \(later["state"])")
        #expect(later["outbox"].array.compactMap { $0["body"].string } == memos, "jotter.outbox: \(later["outbox"])")
        // The first memo's 401 said it; the second memo waits without trying.
        #expect(seen["sends_while_revoked"].array.map(\.int) == [401],
                "POST /send while revoked: \(seen["sends_while_revoked"])")
        // A wrong code typed to pair again says so, and goes on saying so.
        #expect(seen["revoked_wrong"]["state"]["code"].string == "code_invalid", "\(seen["revoked_wrong"])")
        #expect(seen["revoked_wrong_later"]["state"]["code"].string == "code_invalid"
                && seen["revoked_wrong_later"]["state"]["text"].string == text["state_code_invalid"],
                "replaced: \(seen["revoked_wrong_later"]["state"])")

        let seconds = try #require(seen["seconds_to_delivered"].double, "the memo never left the page")
        #expect(seconds < 5, "delivered \(seconds) s after the new link was opened")
        #expect(seen["sends_after_pairing"].array.map(\.int) == [204, 204])
        #expect(seen["settled"]["outbox"].array.isEmpty)
        #expect(seen["settled"]["same_document"].bool == true)
        let devices = try registry.list()
        #expect(devices.count == 2 && devices.filter { $0.revokedAt == nil }.count == 1, "devices: \(devices)")
        try Self.expectDelivered(server, bodies: memos)
    }

    @Test("The computer's 'Pair a phone': a QR code that scans to the link shown, and a new link on demand",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/zbarimg"), "needs zbarimg (zbar-tools)"))
    func computerPageShowsAScannableLink() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanAddresses = ["192.0.2.10", "10.0.0.5"]  // as a machine on Wi-Fi and Ethernet has
        }
        defer { server.stop() }
        let text = try BrowserTests.translations("en")

        let seen = try Self.drive("computer", server: server)
        BrowserTests.expectClean(seen)
        let before = seen["before"]
        #expect(before["pair_open"]["shown"].bool == true,
                "no 'Pair a phone' on the computer's page: \(before["pair_open"])")
        #expect(before["pair_open"]["text"].string == text["pairPhone"])
        #expect(before["state"]["text"].string == "", "the computer's page says: \(before["state"])")
        #expect(seen["link"]["open"].bool == true, "the pairing dialog did not open")
        #expect(seen["link_requests"].array.map(\.int) == [201, 201], "POST /pair/link: \(seen["link_requests"])")

        // In a narrow window (or on a tablet running Jotter itself), History, 'Pair a phone', Settings and the language
        // list stay on screen in every language.
        let narrow = seen["narrow"].array
        #expect(narrow.count == 12, "languages measured: \(narrow.count)")
        for layout in narrow {
            let width = layout["screen_width"].double ?? 0
            let items = layout["foot_items"].array
            #expect(items.count == 4, "\(layout["lang"]): footer items \(layout["foot_items"])")
            let outside = items.filter {
                let left = $0["x"].double ?? -1
                return left < 0 || left + ($0["width"].double ?? 0) > width
            }
            #expect(outside.isEmpty && (layout["page_scroll_width"].double ?? .infinity) <= width,
                    "\(layout["lang"]): the footer leaves a \(Int(width)) px window: \(layout["foot_items"])")
        }

        let addresses = try #require(server.application.lanInfo).addresses
        guard !addresses.isEmpty else {
            // A machine without a LAN address: the page says it cannot make a link.
            #expect(seen["link"]["url"].string == text["pairError"])
            return
        }
        var tokens: [String] = []
        for shown in [seen["link"], seen["new_link"]] {
            // The first line is the link the QR code holds; one line per LAN address.
            let url = try #require(shown["url"].string?.split(separator: "\n").first.map(String.init),
                                   "no link: \(shown)")
            #expect(url.hasPrefix("http://") && url.contains(":\(server.port)/#pair="), "link: \(url)")
            #expect(shown["svg"].bool == true, "no QR code")
            let png = try #require(shown["qr_png"].string, "no screenshot of the QR code")
            #expect(try QRCodeTests.decode(png) == url, "the QR code is not the link shown")
            let valid = try #require(text["pairValid"])
            let minutes = ["10", "9"].map { valid.replacingOccurrences(of: "{n}", with: $0) }
            #expect(minutes.contains(shown["valid"].string ?? ""), "validity: \(shown["valid"])")
            tokens.append(String(try #require(url.components(separatedBy: "#pair=").last)))
        }
        #expect(tokens.count == 2 && tokens[0] != tokens[1], "'New link' gave the same link")
        // Each link's code, to type on a phone that cannot open a link: spent with it below.
        let codeLine = try #require(text["pairCodeIs"])
        let codes = try [seen["link"], seen["new_link"]].map { shown in
            let line = try #require(shown["code"].string, "no code: \(shown)")
            let code = line.replacingOccurrences(of: codeLine.replacingOccurrences(of: "{code}", with: ""), with: "")
            #expect(PairingCode.normalized(code) != nil, "the code line: \(line)")
            return code
        }
        // Both links work (any number may be live), each once, on a phone (not on this computer).
        for token in tokens {
            let paired = try PairingTests.pair(server, token, from: "192.0.2.77")
            #expect(paired.status == 201, "\(paired.text)")
        }
        for code in codes {
            #expect(try PairingTests.pair(server, code, from: "192.0.2.78").errorCode == "pairing_link_used")
        }
    }

    @Test("'Pair a phone' left open past its link's life renews the link on screen")
    func anOpenPairingDialogRenewsItsLink() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanAddresses = ["192.0.2.10"]
            $0.pairingLinkMilliseconds = 5_000
        }
        defer { server.stop() }
        let seen = try Self.drive("renewal", server: server)
        BrowserTests.expectClean(seen)
        let first = try #require(seen["first"].string), renewed = try #require(seen["renewed"].string)
        #expect(first.contains("#pair=") && renewed.contains("#pair=") && first != renewed, "\(first) → \(renewed)")
        #expect(seen["open"].bool == true)
        #expect(seen["link_requests"].array.map(\.int).prefix(2) == [201, 201])
        // The renewed link works on a phone.
        let token = String(try #require(renewed.components(separatedBy: "#pair=").last))
        let paired = try PairingTests.pair(server, token, from: "192.0.2.77")
        #expect(paired.status == 201, "\(paired.text)")
    }

    @Test("In local mode the page makes no pairing request, not even for a pairing link")
    func localModeMakesNoPairingRequest() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("local", server: server)
        BrowserTests.expectClean(seen)
        let pairing = seen["requests"].array.filter {
            ["/pairing", "/pair", "/pair/link"].contains(URLComponents(string: $0["url"].string ?? "")?.path ?? "")
        }
        #expect(pairing.isEmpty, "pairing requests in local mode: \(pairing)")
        #expect(seen["loaded"]["location"].string?.contains("pair=") == false, "the link stays in the address bar")
        #expect(seen["settled"]["pair_open"]["shown"].bool == false)
        #expect(seen["settled"]["state"]["text"].string == "")
        #expect((seen["history_items"].int ?? 0) >= 1)
        #expect(seen["seconds_to_delivered"].double != nil)
        try BrowserTests.expectDeliveredOnce(server, body: try #require(seen["memo"].string))
    }

    @Test("A draft (subject and memo) survives a reload; once sent, a reload brings back an empty page")
    func draftSurvivesReload() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        let seen = try Self.drive("draft", server: server)
        BrowserTests.expectClean(seen)
        let subject = try #require(seen["subject"].string), memo = try #require(seen["memo"].string)
        #expect(seen["typed"]["subject"].string == subject && seen["typed"]["body"].string == memo,
                "typing went elsewhere: \(seen["typed"])")
        #expect(seen["typed"]["draft"]["body"].string == memo)
        let reloaded = seen["reloaded"]
        #expect(reloaded["subject"].string == subject, "subject after a reload: \(reloaded["subject"])")
        #expect(reloaded["body"].string == memo, "memo after a reload: \(reloaded["body"])")
        #expect(seen["seconds_to_delivered"].double != nil, "the draft was not sent")
        #expect(seen["sent"]["draft"].isNull, "the draft outlived the send: \(seen["sent"]["draft"])")
        let again = seen["reloaded_after_send"]
        #expect(again["subject"].string == "" && again["body"].string == "", "came back after the send: \(again)")
        let message = try BrowserTests.expectDeliveredOnce(server, body: memo)
        #expect(message["subject"] as? String == subject)
    }

    // MARK: Checks

    /// Chromium logs each refused fetch ("the server responded with a status of 401"): allowed only
    /// with these statuses on these paths.
    static func refusals(_ allowed: [String: Set<Int>]) -> (Observed) -> Bool {
        { entry in
            guard entry["source"].string == "network", let text = entry["text"].string,
                  let path = URLComponents(string: entry["url"].string ?? "")?.path,
                  let statuses = allowed[path] else { return false }
            return statuses.contains { text.contains("status of \($0)") }
        }
    }

    /// The state line is on screen, whole, above the memo field and not over it; nothing overflows
    /// sideways (the phone's screen width: a mobile viewport widens to fit what overflows); in Arabic
    /// the bar is mirrored.
    static func expectReadableLayout(_ layout: Observed, rightToLeft: Bool,
                                     sourceLocation: SourceLocation = #_sourceLocation) {
        let width = layout["screen_width"].double ?? 0
        #expect(layout["viewport"]["width"].double == width, "the page is wider than the phone: \(layout)",
                sourceLocation: sourceLocation)
        for item in layout["foot_items"].array {
            let left = item["x"].double ?? -1, right = left + (item["width"].double ?? 0)
            #expect(left >= 0 && right <= width, "the footer leaves the screen: \(layout["foot_items"])",
                    sourceLocation: sourceLocation)
        }
        let state = layout["state"], body = layout["body"]
        let stateX = state["x"].double ?? -1, stateWidth = state["width"].double ?? 0
        let stateBottom = (state["y"].double ?? 0) + (state["height"].double ?? 0)
        #expect(stateWidth > 0 && (state["height"].double ?? 0) > 0, "#state is not shown: \(layout)",
                sourceLocation: sourceLocation)
        #expect(stateX >= 0 && stateX + stateWidth <= width, "#state leaves the screen: \(layout)",
                sourceLocation: sourceLocation)
        #expect((layout["state_scroll_width"].double ?? .infinity) <= stateWidth + 1,
                "#state text overflows: \(layout)", sourceLocation: sourceLocation)
        #expect(stateBottom <= (body["y"].double ?? 0), "#state overlaps the memo field: \(layout)",
                sourceLocation: sourceLocation)
        #expect((body["height"].double ?? 0) >= 200, "the memo field is squeezed: \(layout)",
                sourceLocation: sourceLocation)
        #expect((layout["page_scroll_width"].double ?? .infinity) <= width, "the page scrolls sideways: \(layout)",
                sourceLocation: sourceLocation)
        if rightToLeft {
            #expect((layout["send"]["x"].double ?? 0) < (layout["subject"]["x"].double ?? 0),
                    "not mirrored: \(layout)", sourceLocation: sourceLocation)
        }
    }

    /// Exactly these memos in the Maildir, each once.
    static func expectDelivered(_ server: TestServer, bodies: [String],
                                sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(server.waitUntil(timeout: 20) { server.deliveredFiles().count >= bodies.count },
                "\(server.deliveredFiles().count) of \(bodies.count) memos arrived", sourceLocation: sourceLocation)
        usleep(500_000)  // a second copy would be written as promptly as the first
        let delivered = try server.deliveredFiles().map { file -> String in
            var body = (try Python.parseMessage(atPath: file)["body"] as? String ?? "")
                .replacingOccurrences(of: "\r\n", with: "\n")
            if body.hasSuffix("\n") { body.removeLast() }
            return body
        }
        #expect(delivered.sorted() == bodies.sorted(), "delivered \(delivered.count) messages, not each memo once",
                sourceLocation: sourceLocation)
    }
}
