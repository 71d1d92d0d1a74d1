import Foundation
import Testing
@testable import Jotter

/// Input that could be read two ways is refused, and Jotter's own JSON reader reads RFC 8259 strictly.
@Suite struct JSONValueTests {
    private static func parse(_ text: String) throws(JSONValue.ParseError) -> JSONValue {
        try JSONValue.parse(Array(text.utf8))
    }

    @Test func readsWhatRFC8259Allows() throws {
        let value = try Self.parse(#" {"body": "buy milk\n", "n": -12.5e+3, "ok": true, "x": null, "a": [1, {"b": []}]} "#)
        #expect(value["body"]?.string == "buy milk\n")
        #expect(value["n"] == .number("-12.5e+3"))
        #expect(value["ok"] == .bool(true) && value["x"] == .null)
        #expect(value.keys == ["body", "n", "ok", "x", "a"])
        #expect(try Self.parse(#""\u00e9\ud83d\ude00\/\"\\""#).string == "é😀/\"\\")
        #expect(try Self.parse("0").integer == 0 && Self.parse("-7").integer == -7)
        #expect(try Self.parse("5.0").integer == nil, "5.0 is not written as a whole number")
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "01", "1.", ".5", "-", "1e", "+1",
        "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\x41\"", "\"a\u{01}b\"", "\"open", "tru", "nul",
        "{} {}", "[1] x", "\"\\u12\"",
    ])
    func refusesWhatItDoesNot(text: String) {
        #expect(throws: JSONValue.ParseError.self) { try Self.parse(text) }
    }

    @Test func refusesInvalidUTF8InStrings() {
        #expect(throws: JSONValue.ParseError.self) { try JSONValue.parse([0x22, 0xC3, 0x28, 0x22]) }
    }

    @Test func aKeyGivenTwiceIsRefusedAtAnyDepth() {
        #expect(throws: JSONValue.ParseError.duplicateKey("body")) { try Self.parse(#"{"body":"a","body":"b"}"#) }
        #expect(throws: JSONValue.ParseError.duplicateKey("k")) { try Self.parse(#"[{"x":{"k":1,"k":1}}]"#) }
    }

    @Test func deepNestingIsRefusedNotRecursedWithoutEnd() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONValue.ParseError.tooDeep) { try Self.parse(deep) }
        let fine = String(repeating: "[", count: 10) + String(repeating: "]", count: 10)
        #expect(throws: Never.self) { try Self.parse(fine) }
    }
}

@Suite struct RepeatedFieldTests {
    @Test(arguments: [
        ("application/json", #"{"body":"one","body":"two"}"#, "body"),
        ("application/json", #"{"subject":"a","subject":"b","body":"x"}"#, "subject"),
        ("application/x-www-form-urlencoded", "body=one&body=two", "body"),
        ("application/x-www-form-urlencoded", "subject=a&body=x&subject=b", "subject"),
        ("multipart/form-data; boundary=XX",
         "--XX\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\none\r\n"
            + "--XX\r\nContent-Disposition: form-data; name=\"body\"\r\n\r\ntwo\r\n--XX--\r\n", "body"),
    ])
    func aMemoFieldGivenTwiceIsRefused(type: String, body: String, field: String) {
        #expect(throws: MemoDecodingError.repeatedField(field)) {
            try MemoDecoder.decode(contentType: type, body: Array(body.utf8))
        }
    }

    @Test(arguments: ["text/plain", "application/json", "application/x-www-form-urlencoded"])
    func aLeadingByteOrderMarkIsNotPartOfTheMemo(type: String) throws {
        let text = "\u{FEFF}buy milk"
        let body = type == "application/json" ? "{\"body\":\"\(text)\",\"subject\":\"\u{FEFF}shop\"}" : text
        let memo = try MemoDecoder.decode(contentType: type, body: Array(body.utf8))
        #expect(memo.body == "buy milk")
        if type == "application/json" { #expect(memo.subject == "shop") }
        // Inside the text it stays: only the leading mark is a mark.
        #expect(try MemoDecoder.decode(contentType: "text/plain", body: Array("a\u{FEFF}b".utf8)).body == "a\u{FEFF}b")
    }

    @Test func theServerRefusesRepeatedFieldsAndStoresNothing() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let refused = try server.route("POST", "/send", headers: [("Content-Type", "application/json")],
                                       body: Array(#"{"body":"one","body":"two"}"#.utf8))
        #expect(refused.status == 400)
        #expect(refused.errorCode == "repeated_field")
        #expect(!refused.text.contains("one") && !refused.text.contains("two"), "the answer never quotes the memo")
        #expect(try server.outbox.history.acceptedCount() == 0)
    }

    /// Two Content-Type fields for one body: refused, on the composer and on the relay, whichever order.
    @Test func twoContentTypesAreRefused() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        for types in [["text/plain", "application/json"], ["application/json", "text/plain"]] {
            let refused = try server.route("POST", "/send", headers: types.map { ("Content-Type", $0) },
                                           body: Array(#"{"body":"x"}"#.utf8))
            #expect(refused.status == 400 && refused.errorCode == "bad_request", "\(types)")
        }
        #expect(try server.outbox.history.acceptedCount() == 0)
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        let device = try relay.register()
        let twice = try relay.route("POST", "/v1/destinations", headers: [
            ("Authorization", "Bearer \(device.secret)"), ("Content-Type", "application/json"), ("Content-Type", "text/plain"),
        ], body: Array(#"{"address":"me@example.com"}"#.utf8))
        #expect(twice.status == 400 && twice.errorCode == "bad_request", "\(twice.text)")
    }
}

@Suite struct CaseAndTypeTests {
    @Test func anUpperCaseIdNamesTheSameMemo() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let sent = try server.route("POST", "/send", headers: [("Content-Type", "text/plain")], body: Array("hi".utf8))
        #expect(sent.status == 204)
        let id = try #require(try server.outbox.history.latest(limit: 1).first?.id)
        let upper = try server.route("GET", "/history/" + id.uppercased())
        #expect(upper.status == 200)
        #expect((upper.json as? [String: Any])?["id"] as? String == id)
        #expect(try server.route("GET", "/history?before=" + id.uppercased()).status == 200)
    }

    @Test(arguments: [
        (#"{"event":"rated","stars":null}"#, 400, "invalid_stars"),
        (#"{"event":"rated","stars":4.0}"#, 400, "invalid_stars"),
        (#"{"event":"rated","stars":"4"}"#, 400, "invalid_stars"),
        (#"{"event":"rated"}"#, 400, "invalid_stars"),
        (#"{"event":"shown","stars":null}"#, 400, "invalid_stars"),
        (#"{"event":"rated","stars":6}"#, 400, "invalid_stars"),
        (#"{"event":"rated","event":"shown"}"#, 400, "invalid_event"),
        (#"{"event":"rated","stars":5}"#, 204, ""),
    ])
    func ratingStarsAreAWholeNumberFromOneToFive(body: String, status: Int, code: String) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let response = try server.route("POST", "/rating", headers: [("Content-Type", "application/json")],
                                        body: Array(body.utf8))
        #expect(response.status == status)
        if !code.isEmpty { #expect(response.errorCode == code) }
    }

    @Test(arguments: ["text/plain", "application/x-www-form-urlencoded", ""])
    func ratingIsJSONOnly(type: String) throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let headers = type.isEmpty ? [] : [("Content-Type", type)]
        let response = try server.route("POST", "/rating", headers: headers, body: Array(#"{"event":"shown"}"#.utf8))
        #expect(response.status == 415)
        #expect(response.errorCode == "unsupported_media_type")
    }
}
