import Foundation
import Testing
@testable import Jotter

/// Debian's Firefox ESR (package firefox-esr).
private let firefoxInstalled = FileManager.default.isExecutableFile(atPath: "/usr/bin/firefox-esr")

/// Debian's WebKitWebDriver (webkit2gtk-driver, which brings MiniBrowser) and a private X server for
/// it (xvfb, xauth).
private let webkitInstalled = ["/usr/bin/WebKitWebDriver", "/usr/bin/xvfb-run", "/usr/bin/xauth"]
    .allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }

/// The page in the engines besides Chromium (issue 8, "Every engine"): Firefox ESR over Marionette
/// (`Tests/Browser/firefox_smoke.py`) and WebKitGTK through WebKitWebDriver under xvfb-run
/// (`Tests/Browser/webkit_smoke.py`), each against a whole Jotter started in-process on 127.0.0.1.
/// One scenario: a cold browser loads the page, keys are typed at once, the memo is finished and sent
/// with Ctrl+Enter, and it must arrive once. The drivers observe; these tests decide, as in
/// `BrowserTests`.
///
/// Serialized: two browsers at once would only slow each other down, and two `xvfb-run -a` started
/// together can pick the same display.
@Suite(.serialized)
struct EngineSmokeTests {
    static let firefox = Repository.root + "/Tests/Browser/firefox_smoke.py"
    static let webkit = Repository.root + "/Tests/Browser/webkit_smoke.py"

    @Test("Firefox ESR: focused at load, typing lands at once, Ctrl+Enter empties and refocuses, arrives once",
          .enabled(if: firefoxInstalled, "needs /usr/bin/firefox-esr (apt-get install firefox-esr)"))
    func firefoxESR() throws {
        try Self.smoke(driver: Self.firefox)
    }

    @Test("WebKitGTK: focused at load, typing lands at once, Ctrl+Enter empties and refocuses, arrives once",
          .enabled(if: webkitInstalled,
                   "needs WebKitWebDriver and xvfb-run (apt-get install webkit2gtk-driver xvfb xauth)"))
    func webKitGTK() throws {
        try Self.smoke(driver: Self.webkit)
    }

    /// The whole scenario against a fresh server, and every check on what the driver saw.
    static func smoke(driver: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }

        // A cold browser on a loaded machine: start, profile and first paint can take tens of seconds.
        let seen = try BrowserTests.drive(driver: driver, scenario: "smoke", server: server, timeout: 150) { step in
            Issue.record("unexpected step \(step)", sourceLocation: sourceLocation)
            return "ok"
        }
        // Ran to the end; no request but to the server (in the page, or by the browser itself through
        // the sinkhole proxy); no console error or exception.
        BrowserTests.expectClean(seen, sourceLocation: sourceLocation)
        let memo = try #require(seen["memo"].string, sourceLocation: sourceLocation)
        let early = try #require(seen["early_text"].string, sourceLocation: sourceLocation)

        // Loaded, and the textarea has the focus at the first command after the load event.
        let atLoad = seen["at_load"]
        #expect(atLoad["ready_state"].string == "complete" && atLoad["has_textarea"].bool == true,
                "the page did not load: \(atLoad)", sourceLocation: sourceLocation)
        #expect(atLoad["active"].string == "body", "the textarea has no focus right after load: \(atLoad)",
                sourceLocation: sourceLocation)
        // Keys typed at once are in the textarea, not lost. (Both engines answer the first command after
        // the first frame, so this cannot see WebKit's load-to-first-frame gap: see firefox_smoke.py.)
        #expect(seen["early"]["body"].string == early && seen["early"]["active"].string == "body",
                "keys typed right after load went elsewhere: \(seen["early"])", sourceLocation: sourceLocation)
        #expect(seen["typed"]["body"].string == memo, "typing did not reach the textarea: \(seen["typed"])",
                sourceLocation: sourceLocation)

        // Ctrl+Enter: empty and focused in the same task as the keydown, and still so afterwards.
        let send = seen["after_keydown"]["probe"]["sends"][0]
        #expect(send["valueBefore"].string == memo, "no Ctrl+Enter seen with the memo: \(send)",
                sourceLocation: sourceLocation)
        #expect(send["sameTask"]["empty"].bool == true && send["sameTask"]["focused"].bool == true,
                "not emptied and refocused in the same task: \(send)", sourceLocation: sourceLocation)
        let settled = seen["settled"]
        #expect(settled["body"].string == "" && settled["active"].string == "body",
                "after the send: \(settled["body"]), focus on \(settled["active"])", sourceLocation: sourceLocation)
        #expect(settled["outbox"].array.isEmpty, "the page still holds: \(settled["outbox"])",
                sourceLocation: sourceLocation)

        // One POST /send, with an Idempotency-Key, answered 204; one message in the Maildir.
        let posts = seen["send_requests"].array
        #expect(posts.count == 1, "POSTs to /send: \(seen["send_requests"])", sourceLocation: sourceLocation)
        #expect(posts.first?["method"].string == "POST" && posts.first?["status"].int == 204,
                "the send: \(seen["send_requests"])", sourceLocation: sourceLocation)
        #expect(posts.first?["idempotency_key"].string?.isEmpty == false, "no Idempotency-Key",
                sourceLocation: sourceLocation)
        try BrowserTests.expectDeliveredOnce(server, body: memo, sourceLocation: sourceLocation)
    }
}
