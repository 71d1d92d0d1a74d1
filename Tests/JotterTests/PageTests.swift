import Foundation
import Testing
@testable import Jotter

@Suite struct LanguageNegotiationTests {
    let localization = Localization(strings: Dictionary(uniqueKeysWithValues: Localization.supported.map { ($0, [:]) }))

    @Test(arguments: [
        ("ja,en;q=0.8", "ja"), ("en-US,en;q=0.9", "en"), ("zh-TW", "zh-Hant"), ("zh-HK,zh;q=0.9", "zh-Hant"),
        ("zh-Hant-TW", "zh-Hant"), ("zh-CN", "zh-Hans"), ("zh", "zh-Hans"), ("zh-Hans-SG", "zh-Hans"),
        ("zh-Hans-HK", "zh-Hans"), ("zh-Hans-TW", "zh-Hans"), ("zh-Hant-CN", "zh-Hant"),
        ("pt-BR,pt;q=0.9", "pt"), ("fr-CA", "fr"), ("de;q=0.2, ar;q=0.9", "ar"), ("nl, it;q=0.5", "it"),
        ("*", "en"), ("nl", "en"), ("", "en"), ("ko;q=0, es", "es"), ("KO", "ko"), ("ru_RU", "ru"),
    ])
    func acceptLanguage(header: String, expected: String) {
        #expect(localization.negotiate(query: nil, acceptLanguage: header) == expected)
    }

    @Test func queryWinsWhenItNamesAShippedLanguage() {
        #expect(localization.negotiate(query: "ar", acceptLanguage: "ja") == "ar")
        #expect(localization.negotiate(query: "zh-tw", acceptLanguage: "ja") == "zh-Hant")
        #expect(localization.negotiate(query: "xx", acceptLanguage: "ja") == "ja", "unknown ?lang falls back")
    }

    @Test(arguments: [("gzip", true), ("gzip, deflate, br", true), ("br;q=1.0, gzip;q=0.8", true), ("*", true),
                      ("gzip;q=0", false), ("identity", false), ("", false), ("GZIP", true), ("deflate", false),
                      (" \tgzip \t", true), ("deflate,\tGzip ; q=0.5", true), ("gzip ; q=0.0", false),
                      ("gzip;Q=0", false), ("gzip;q=0.000, *", false), ("*;q=0", false), ("x-gzip", false),
                      ("gzipped", false), ("gzi", false), ("gzip;q=", true), ("gzip;level=1", true), (",,gzip", true),
                      ("gzip\u{0}", false), ("ğzip", false)])
    func gzipNegotiation(header: String, expected: Bool) {
        #expect(PageRoute.acceptsGzip(header) == expected)
    }
}

@Suite struct PageServingTests {
    @Test func everyLanguageRendersCompletelyWithItsDirection() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        for tag in Localization.supported {
            let page = try server.route("GET", "/?lang=\(tag)")
            #expect(page.status == 200)
            #expect(page.header("Content-Language") == tag)
            let html = page.text
            #expect(html.contains("<html lang=\"\(tag)\" dir=\"\(tag == "ar" ? "rtl" : "ltr")\">"), "\(tag)")
            #expect(!html.contains("{{"), "\(tag): every placeholder filled")
            #expect(html.contains("autofocus"))
            let strings = try server.route("GET", "/i18n/\(tag).json")
            #expect(strings.status == 200)
            #expect((strings.json as? [String: String])?["send"] != nil, "\(tag)")
        }
        #expect(try server.route("GET", "/i18n/xx.json").status == 404)
    }

    /// Whatever `/history` can say went wrong with a memo, the page says it in words, in every language.
    @Test func everyFailureKindHasItsWordsInEveryLanguage() throws {
        for tag in Localization.supported {
            let data = try Data(contentsOf: URL(fileURLWithPath: Repository.publicDirectory + "/i18n/\(tag).json"))
            let strings = try #require(try JSONSerialization.jsonObject(with: data) as? [String: String])
            for kind in DeliveryFailure.Kind.allCases {
                #expect(strings["error_" + kind.rawValue]?.isEmpty == false, "\(tag): error_\(kind.rawValue)")
            }
        }
    }

    @Test func gzipIsTheSamePageInAThirdOfTheBytes() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let plain = try server.route("GET", "/?lang=ru")
        let zipped = try server.route("GET", "/?lang=ru", headers: [("Accept-Encoding", "gzip, br")])
        #expect(zipped.header("Content-Encoding") == "gzip")
        #expect(plain.header("Content-Encoding") == nil)
        #expect(zipped.header("Vary")?.contains("Accept-Encoding") == true)
        // The page, headers and TLS framing within TCP's first congestion window: 10 segments of 1,460
        // bytes = 14,600. 12 KiB (12,288) + ~600 bytes of headers + a TLS record's ~30 bytes = ~12,920,
        // 1.7 KB to spare. (It was 8 KiB before pairing, the CA how-to and the relay line came, 9 before
        // Settings with the Jotter relay's address and code, 10 before the outbox kept one key per memo,
        // drafts one per tab, and the page said why sends fail.)
        #expect(zipped.body.count < 12 * 1024, "the shell is one small request: \(zipped.body.count) bytes")
        let unzipped = try Python.run("import gzip, sys; sys.stdout.buffer.write(gzip.decompress(sys.stdin.buffer.read()))",
                                      input: zipped.body)
        #expect(Array(unzipped.utf8) == plain.body)
        #expect(zipped.header("Content-Security-Policy") == plain.header("Content-Security-Policy"))
        let refused = try server.route("GET", "/", headers: [("Accept-Encoding", "gzip;q=0")])
        #expect(refused.header("Content-Encoding") == nil)
    }
}

/// WebKit applies `autofocus` only with its first frame, and keys typed before it are lost; the
/// engines' smoke tests cannot see that gap (their first command comes after the frame). So: the
/// page's first inline script must focus the textarea before it does anything else.
@Suite struct FocusFirstTests {
    @Test func theFirstStatementsOfTheScriptFocusTheTextarea() throws {
        let page = try String(contentsOfFile: Repository.publicDirectory + "/src/index.html", encoding: .utf8)
        let scripts = PageRoute.elementContents(tag: "script", in: page)
        #expect(scripts.count == 1, "one inline script")
        let script = try #require(scripts.first)
        // Up to the focus call: only the strict-mode line, comments and the lookup of the textarea.
        let focus = try #require(script.range(of: "ta.focus();"), "the script focuses the textarea")
        let before = script[..<focus.lowerBound].split(separator: "\n")
            .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
        #expect(!before.contains("localStorage") && !before.contains("fetch(") && !before.contains("addEventListener"),
                "nothing before the focus call touches storage, the network or events")
        #expect(before.contains("getElementById('body')"))
        // And the built page keeps it first (the minifier must not move it after other work).
        let built = try String(contentsOfFile: Repository.publicDirectory + "/index.html", encoding: .utf8)
        let builtScript = try #require(PageRoute.elementContents(tag: "script", in: built).first)
        let focusAt = try #require(builtScript.range(of: ".focus()"))
        #expect(!builtScript[..<focusAt.lowerBound].contains("localStorage"))
    }
}
