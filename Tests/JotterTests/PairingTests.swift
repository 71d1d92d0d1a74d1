import Foundation
import Synchronization
import Testing
@testable import Jotter

/// The phone's journey at the HTTP level (issue 8): links on demand, states a page can show, guesses
/// counted but absence not, device names, `jotter pair` and `jotter devices rename`.
@Suite struct PairingTests {
    /// LAN mode over plain HTTP on loopback, with loopback not trusted, so loopback plays the phone.
    static func lanServer(_ directory: TemporaryDirectory, clock: any WallClock = SystemClock(),
                          https: Bool = false) throws -> TestServer {
        try TestServer(dataDirectory: directory.file("data"), clock: clock) {
            $0.lan = true
            $0.insecureHTTP = !https
            $0.lanTrustsLoopback = false
            $0.http.host = "127.0.0.1"
            $0.lanAddresses = ["192.0.2.10"]  // what links name: a LAN address, as a machine on Wi-Fi has
        }
    }

    static let iPhone = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 "
        + "(KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1"
    static let pixel = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
        + "Chrome/131.0.0.0 Mobile Safari/537.36"

    static func send(_ server: TestServer, token: String?) throws -> RawHTTP.Response {
        try server.route("POST", "/send", headers: [("Content-Type", "text/plain")]
            + (token.map { [("Authorization", "Bearer \($0)")] } ?? []), body: Array("from the phone".utf8))
    }

    /// `POST /pair` with `token` (and the page's `request` id, a device's `bearer` token), from `peer`.
    static func pair(_ server: TestServer, _ token: String, request: String? = nil, bearer: String? = nil,
                     userAgent: String = pixel, extra: [(String, String)] = [],
                     from peer: String = "127.0.0.1") throws -> RawHTTP.Response {
        let id = request.map { ",\"request_id\":\"\($0)\"" } ?? ""
        return try server.route("POST", "/pair", headers: [("Content-Type", "application/json"), ("User-Agent", userAgent)]
                                    + (bearer.map { [("Authorization", "Bearer \($0)")] } ?? []) + extra,
                                body: Array("{\"pairing_token\":\"\(token)\"\(id)}".utf8), from: peer)
    }

    /// A fresh link, as the computer's page asks for one.
    static func newLink(_ server: TestServer) throws -> [String: Any] {
        let response = try server.route("POST", "/pair/link", headers: [("Origin", "http://127.0.0.1:\(server.port)")])
        #expect(response.status == 201, "POST /pair/link: \(response.status) \(response.text)")
        return try #require(response.json as? [String: Any])
    }

    static func deviceToken(_ response: RawHTTP.Response) throws -> String {
        try #require((response.json as? [String: Any])?["device_token"] as? String, "pairing failed: \(response.text)")
    }

    static func state(_ server: TestServer, token: String?) throws -> [String: Any] {
        let response = try server.route("GET", "/pairing",
                                        headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
        #expect(response.status == 200)
        return try #require(response.json as? [String: Any])
    }

    @Test("An unpaired phone that keeps trying is never locked out, and pairs at any moment")
    func absenceIsNotAGuess() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        for _ in 0..<30 {
            let refused = try Self.send(server, token: nil)
            #expect(refused.status == 401 && refused.errorCode == "not_paired")
            #expect(refused.header("WWW-Authenticate") == "Bearer")
        }
        #expect(try server.route("GET", "/history").errorCode == "not_paired")
        let link = try Self.newLink(server)
        let token = try Self.deviceToken(try Self.pair(server, try #require(link["token"] as? String)))
        #expect(try Self.send(server, token: token).status == 204)
    }

    @Test("A revoked device is told so, and its requests are not counted as guesses")
    func revokedIsNotAGuess() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let token = try Self.deviceToken(try Self.pair(server, try registry.issuePairingToken().token))
        let id = try #require(try registry.list().first?.id)
        #expect(try registry.revoke(id: id))
        for _ in 0..<15 {
            let refused = try Self.send(server, token: token)
            #expect(refused.status == 401 && refused.errorCode == "device_revoked")
        }
        #expect(try Self.state(server, token: token)["state"] as? String == "revoked")
        // Pairing again with a new link works, and a wrong token is a guess with its own code.
        let again = try Self.deviceToken(try Self.pair(server, try registry.issuePairingToken().token))
        #expect(try Self.send(server, token: again).status == 204)
        #expect(try Self.send(server, token: "not-a-token").errorCode == "invalid_token")
        #expect(try Self.send(server, token: nil).errorCode == "not_paired")
    }

    @Test("Any number of links: a second phone pairs with a second link while the first stays paired")
    func secondPhoneSecondLink() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let first = try Self.newLink(server), second = try Self.newLink(server)
        let firstToken = try #require(first["token"] as? String), secondToken = try #require(second["token"] as? String)
        #expect(firstToken != secondToken)
        let phone1 = try Self.deviceToken(try Self.pair(server, firstToken, userAgent: Self.iPhone))
        let phone2 = try Self.deviceToken(try Self.pair(server, secondToken))
        #expect(try Self.send(server, token: phone1).status == 204)
        #expect(try Self.send(server, token: phone2).status == 204)
        let names = try #require(server.application.devices).list().map(\.name).sorted()
        #expect(names == ["Android — Pixel 8", "iPhone"])
        let reused = try Self.pair(server, firstToken)
        #expect(reused.status == 410 && reused.errorCode == "pairing_link_used")
        #expect(try Self.send(server, token: phone1).status == 204, "the first phone stays paired")
    }

    @Test("Two phones racing with one link: exactly one device")
    func oneLinkOneDevice() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let token = try #require(server.application.devices).issuePairingToken().token
        let statuses = Mutex<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let status = (try? Self.pair(server, token).status) ?? -1
            statuses.withLock { $0.append(status) }
        }
        let all = statuses.withLock { $0 }.sorted()
        #expect(all == [201] + Array(repeating: 410, count: 7), "\(all)")
        #expect(try #require(server.application.devices).list().count == 1)
    }

    @Test("A phone whose answer to POST /pair was lost asks again and gets its device, not 'already used'")
    func aLostAnswerIsAskedForAgain() throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let server = try Self.lanServer(directory, clock: clock)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let link = try registry.issuePairingToken().token
        let request = "5d0e6a1c-8f1e-4a5b-9c2d-3e4f5a6b7c8d"
        let lost = try Self.pair(server, link, request: request)
        #expect(lost.status == 201)
        let lostToken = try Self.deviceToken(lost)
        // The answer never arrived; the phone asks again, the same link, the same request id.
        let again = try Self.pair(server, link, request: request)
        #expect(again.status == 201, "\(again.text)")
        let token = try Self.deviceToken(again)
        #expect((again.json as? [String: Any])?["device_id"] as? String == (lost.json as? [String: Any])?["device_id"] as? String)
        #expect(token != lostToken)
        #expect(try Self.send(server, token: token).status == 204)
        #expect(try Self.send(server, token: lostToken).errorCode == "invalid_token", "the lost token stops working")
        #expect(try registry.list().count == 1)
        // Anyone else with the spent link is told it was used: without the id, or with another one.
        #expect(try Self.pair(server, link).errorCode == "pairing_link_used")
        #expect(try Self.pair(server, link, request: "another-request-id-0000").errorCode == "pairing_link_used")
        // Once the link's ten minutes are over, and for a device since revoked, the same id is no key.
        let later = try registry.issuePairingToken().token
        #expect(try Self.pair(server, later, request: request).status == 201)
        clock.advance(milliseconds: DeviceRegistry.pairingLifetime)
        #expect(try Self.pair(server, later, request: request).errorCode == "pairing_link_used")
        let revokedLink = try registry.issuePairingToken().token
        let revoked = try Self.deviceToken(try Self.pair(server, revokedLink, request: request))
        let revokedID = try #require(try registry.list().first { $0.revokedAt == nil && $0.createdAt == clock.nowMilliseconds() }?.id)
        #expect(try registry.revoke(id: revokedID))
        #expect(try Self.pair(server, revokedLink, request: request).errorCode == "pairing_link_used")
        #expect(try Self.send(server, token: revoked).errorCode == "device_revoked")
    }

    /// A request id the server cannot use (too short, too long, not a string) is refused, not ignored: ignored,
    /// the retry it was meant to make safe would find the link spent. The link stays unspent meanwhile.
    @Test(arguments: ["\"short\"", "\"\(String(repeating: "x", count: 129))\"", "12345678901234567", "true", "[]", "\"\""])
    func aRequestIdItCannotUseIsRefusedAndTheLinkStaysUnspent(requestID: String) throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let link = try registry.issuePairingToken().token
        let refused = try server.route("POST", "/pair", headers: [("Content-Type", "application/json")],
                                       body: Array("{\"pairing_token\":\"\(link)\",\"request_id\":\(requestID)}".utf8))
        #expect(refused.status == 400 && refused.errorCode == "invalid_request_id", "\(refused.text)")
        // null is no request id at all; the link was not spent by the refusal.
        let paired = try server.route("POST", "/pair", headers: [("Content-Type", "application/json")],
                                      body: Array("{\"pairing_token\":\"\(link)\",\"request_id\":null}".utf8))
        #expect(paired.status == 201, "\(paired.text)")
    }

    @Test("A paired phone that opens a link again stays the device it is, and leaves the link to another phone")
    func aPairedPhoneKeepsItsDevice() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let token = try Self.deviceToken(try Self.pair(server, try registry.issuePairingToken().token))
        let link = try registry.issuePairingToken().token
        let again = try Self.pair(server, link, request: "0123456789abcdef", bearer: token)
        #expect(again.status == 200)
        let answer = try #require(again.json as? [String: Any])
        #expect(answer["already_paired"] as? Bool == true && answer["device_token"] == nil)
        #expect(answer["device_id"] as? String == (try registry.list().first?.id))
        #expect(try Self.send(server, token: token).status == 204, "its token still works")
        // The link is still good for the phone it was made for; a revoked token pairs anew.
        let other = try Self.deviceToken(try Self.pair(server, link))
        #expect(try registry.list().count == 2)
        let otherID = try #require(try registry.list().first { $0.revokedAt == nil }?.id)
        #expect(try registry.revoke(id: otherID))
        let renewed = try Self.pair(server, try registry.issuePairingToken().token, request: "0123456789abcdef", bearer: other)
        #expect(renewed.status == 201)
        #expect(try Self.send(server, token: try Self.deviceToken(renewed)).status == 204)
    }

    @Test("The link opened on the computer itself is not spent: the computer needs no pairing, the phone still can")
    func theComputerDoesNotSpendThePhonesLink() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.http.host = "127.0.0.1"
        }
        defer { server.stop() }
        let registry = try #require(server.application.devices)
        let link = try registry.issuePairingToken().token
        let own = NetworkInterfaces.entries().first?.address
        for peer in ["127.0.0.1"] + (own.map { [$0] } ?? []) {
            let here = try Self.pair(server, link, from: peer)
            #expect(here.status == 409 && here.errorCode == "this_machine", "from \(peer): \(here.text)")
        }
        #expect(try registry.list().isEmpty)
        let phone = try Self.pair(server, link, from: own == "192.168.1.33" ? "192.168.1.34" : "192.168.1.33")
        #expect(phone.status == 201, "the phone pairs with the same link: \(phone.text)")
    }

    @Test("A browser on the computer that opened its LAN address is the computer everywhere: no pairing, and its memos go")
    func theComputersOwnLANAddressIsTheComputer() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.http.host = "127.0.0.1"
            $0.lanAddresses = ["192.0.2.10"]  // the address printed first, which a browser here may open
        }
        defer { server.stop() }
        let host = [("Host", "192.0.2.10:\(server.port)")]
        let state = try server.route("GET", "/pairing", headers: host, from: "192.0.2.10")
        #expect((state.json as? [String: Any])?["state"] as? String == "this_machine")
        #expect((state.json as? [String: Any])?["can_pair_others"] as? Bool == true)
        // Before: "this computer needs no pairing" on the page, and 401 not_paired for every memo it sent.
        let sent = try server.route("POST", "/send", headers: host + [("Content-Type", "text/plain")],
                                    body: Array("from this computer's browser".utf8), from: "192.0.2.10")
        #expect(sent.status == 204, "\(sent.status) \(sent.text)")
        #expect(try server.route("POST", "/pair/link", headers: host, from: "192.0.2.10").status == 201)
        let phone = try server.route("POST", "/send", headers: host + [("Content-Type", "text/plain")],
                                     body: Array("from a phone".utf8), from: "192.0.2.11")
        #expect(phone.status == 401 && phone.errorCode == "not_paired", "another machine still needs its token")
    }

    @Test("GET /pairing tells the page where it stands")
    func pairingState() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let unpaired = try Self.state(server, token: nil)
        #expect(unpaired["state"] as? String == "not_paired")
        #expect(unpaired["can_pair_others"] as? Bool == true, "a loopback page may offer pairing")
        #expect(unpaired["ca"] is NSNull, "plain HTTP has no CA to offer")
        let registry = try #require(server.application.devices)
        let hinted = try Self.pair(server, try registry.issuePairingToken().token,
                                   userAgent: "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 Chrome/131.0",
                                   extra: [("Sec-CH-UA-Model", "\"Pixel 9 Pro\""), ("Sec-CH-UA-Platform", "\"Android\"")])
        #expect((hinted.json as? [String: Any])?["name"] as? String == "Android — Pixel 9 Pro")
        let token = try Self.deviceToken(hinted)
        let paired = try Self.state(server, token: token)
        #expect(paired["state"] as? String == "paired")
        #expect((paired["device"] as? [String: Any])?["name"] as? String == "Android — Pixel 9 Pro")
        #expect(try Self.state(server, token: "forged")["state"] as? String == "invalid")
        #expect(!server.logs.captured.contains(token))
    }

    @Test("Pairing links are issued only to a page on this machine")
    func linksOnlyForThisMachine() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let application = server.application
        let route = PairRoute(devices: try #require(application.devices), policy: application.policy,
                              lan: try #require(application.lanState))
        let fromLAN = HTTPRequest(method: "POST", path: "/pair/link", headers: ["Host": "192.168.1.20:\(server.port)"],
                                  remoteAddress: "192.168.1.33")
        let refused = route.link(fromLAN)
        #expect(refused.status == 403)
        let throughPolicy = try server.route("POST", "/pair/link", from: "192.168.1.33")
        #expect(throughPolicy.status == 403 && throughPolicy.errorCode == "not_this_machine")
        let crossSite = try server.route("POST", "/pair/link", headers: [("Origin", "http://evil.example")])
        #expect(crossSite.status == 403 && crossSite.errorCode == "cross_origin")
        let link = try Self.newLink(server)
        let urls = try #require(link["urls"] as? [String])
        let token = try #require(link["token"] as? String)
        #expect(urls.allSatisfy { $0.hasPrefix("http://") && $0.hasSuffix("/#pair=" + token) })
        if let url = link["url"] as? String {
            #expect(url == urls.first)
            #expect((link["qr_svg"] as? String)?.hasPrefix("<svg") == true)
        } else {
            #expect(urls.isEmpty, "url is null only without a LAN address")
        }
        #expect((link["expires_at"] as? String)?.hasSuffix("Z") == true)
        #expect(!server.logs.captured.contains(token))
    }

    @Test("A link's code, typed as a person might, pairs once, and spends the link with it")
    func aLinksCodePairsOnceAsTyped() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let link = try Self.newLink(server)
        let code = try #require(link["code"] as? String)
        #expect(code.range(of: #"^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$"#, options: .regularExpression) != nil, "\(code)")
        // Lower case, a space for the dash, O for a zero and l for a one: all read as meant.
        let typed = " " + code.lowercased().replacingOccurrences(of: "-", with: " ")
            .replacingOccurrences(of: "0", with: "o").replacingOccurrences(of: "1", with: "l") + " "
        let token = try Self.deviceToken(try Self.pair(server, typed, userAgent: Self.iPhone))
        #expect(try Self.send(server, token: token).status == 204)
        #expect(try server.application.devices?.list().map(\.name) == ["iPhone"])

        // Spent: the code again, and the link it came with, are "used"; nobody gets a second device.
        let again = try Self.pair(server, code)
        #expect(again.status == 410 && again.errorCode == "pairing_link_used", "\(again.text)")
        let viaLink = try Self.pair(server, try #require(link["token"] as? String))
        #expect(viaLink.status == 410 && viaLink.errorCode == "pairing_link_used", "\(viaLink.text)")
        #expect(try server.application.devices?.list().count == 1)
        #expect(!server.logs.captured.contains(code) && !server.logs.captured.contains(String(code.prefix(4))))

        // The link's token spends its code too.
        let second = try Self.newLink(server)
        #expect(try Self.pair(server, try #require(second["token"] as? String)).status == 201)
        let secondCode = try #require(second["code"] as? String)
        #expect(try Self.pair(server, secondCode).errorCode == "pairing_link_used")
    }

    @Test("A wrong code is a guess (counted toward the lockout); an expired one says so")
    func wrongAndExpiredCodes() throws {
        let clock = ManualClock(milliseconds: 1_800_000_000_000)
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory, clock: clock)
        defer { server.stop() }
        let expiring = try #require(try Self.newLink(server)["code"] as? String)
        clock.advance(milliseconds: DeviceRegistry.pairingLifetime + 1)
        let expired = try Self.pair(server, expiring)
        #expect(expired.status == 410 && expired.errorCode == "pairing_link_expired", "\(expired.text)")

        let live = try #require(try Self.newLink(server)["code"] as? String)
        var statuses: [Int] = []
        for guess in 0..<11 {
            let wrong = try Self.pair(server, String(format: "ZZZZ-ZZ%02d", guess))
            statuses.append(wrong.status)
            if wrong.status == 401 {
                #expect(wrong.errorCode == "pairing_link_invalid")
                #expect(wrong.errorMessage?.hasPrefix("This pairing code is not valid here") == true, "\(wrong.text)")
            }
        }
        #expect(statuses.prefix(10).allSatisfy { $0 == 401 } && statuses.last == 429, "\(statuses)")
        // Locked out, the right code waits too: a guesser cannot go on by switching to codes.
        #expect(try Self.pair(server, live).status == 429)
    }

    @Test(arguments: [
        ("K7Q2-M9XD", "K7Q2M9XD"), ("k7q2 m9xd", "K7Q2M9XD"), ("K7Q2M9XD", "K7Q2M9XD"), ("0OoI-1lL0", "00011110"),
        ("K7Q2-M9X", nil), ("K7Q2-M9XDE", nil), ("K7Q2-M9XU", nil), ("", nil), ("K7Q2_M9XD", nil),
        ("q3N1W0bC5hK9yZ2aX7mP4tR8sV6uE1fG3jD5kL0nB2c", nil),
    ] as [(String, String?)])
    func aCodeIsReadAsMeantAndNothingElseIsACode(typed: String, code: String?) {
        #expect(PairingCode.normalized(typed) == code)
    }

    @Test func codesAreEightCharactersOfTheAlphabetAndVary() throws {
        var seen = Set<String>()
        for _ in 0..<200 {
            let code = try PairingCode.random()
            #expect(code.utf8.count == 8 && code.utf8.allSatisfy(PairingCode.alphabet.contains))
            #expect(PairingCode.normalized(PairingCode.formatted(code)) == code)
            seen.insert(code)
        }
        #expect(seen.count == 200)
        #expect(Set(seen.flatMap { Array($0.utf8) }).count > 20, "some characters of the alphabet never come")
    }

    @Test("Outside LAN mode the pairing routes are 404")
    func notLANMode() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        for (method, path) in [("GET", "/pairing"), ("POST", "/pair/link"), ("GET", "/jotter-ca.crt")] {
            let response = try server.route(method, path)
            #expect(response.status == 404 && response.errorCode == "not_lan_mode", "\(method) \(path)")
        }
        #expect(try server.route("GET", "/").header("Accept-CH") == nil)
    }

    @Test("In LAN mode the page asks for client hints (the device name's model)")
    func pageAsksForClientHints() throws {
        let directory = TemporaryDirectory()
        let server = try Self.lanServer(directory)
        defer { server.stop() }
        let page = try server.route("GET", "/")
        #expect(page.status == 200)
        #expect(page.header("Accept-CH")?.contains("Sec-CH-UA-Model") == true)
    }

    @Test("Without JavaScript, a send from ?lang=de comes back to the German page")
    func noScriptSendKeepsLanguage() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let form = [("Content-Type", "application/x-www-form-urlencoded"), ("Sec-Fetch-Mode", "navigate"),
                    ("Sec-Fetch-Site", "same-origin"), ("Origin", "http://127.0.0.1:\(server.port)")]
        let sent = try server.route("POST", "/?lang=de", headers: form, body: Array("subject=&body=Milch".utf8))
        #expect(sent.status == 303)
        #expect(sent.header("Location") == "/?lang=de")
        let empty = try server.route("POST", "/?lang=de", headers: form, body: Array("subject=&body=".utf8))
        #expect(empty.status == 303 && empty.header("Location") == "/?lang=de")
        let hostile = try server.route("POST", "/?lang=de%0d%0aSet-Cookie:x", headers: form,
                                       body: Array("body=x".utf8))
        #expect(hostile.header("Location") == "/")
    }
}

@Suite struct PairCommandTests {
    @Test("jotter pair fails, and says why, when the server has no address a phone could reach")
    func pairWithoutALANAddressFails() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data")) {
            $0.lan = true
            $0.insecureHTTP = true
            $0.lanAddresses = []
        }
        defer { server.stop() }
        let live = try server.outbox.database.read { try $0.statement("SELECT count(*) FROM pairing_tokens").firstRow { $0.int64(0) } }
        let printed = try LiveServerTests.JotterBinary.run(["pair", "--data-dir", directory.file("data")])
        #expect(printed.status != 0)
        #expect(printed.standardError.contains("no LAN address"), "\(printed.standardError)")
        // No link was made that no one would see: it, and its code, would have stayed live for ten minutes.
        #expect(try server.outbox.database.read { try $0.statement("SELECT count(*) FROM pairing_tokens").firstRow { $0.int64(0) } } == live)
    }

    @Test("jotter pair prints a fresh link that the running server accepts; without a server it says so")
    func pairAgainstARunningServer() throws {
        let directory = TemporaryDirectory()
        let server = try PairingTests.lanServer(directory)
        let data = directory.file("data")
        let printed = try LiveServerTests.JotterBinary.run(["pair", "--data-dir", data])
        #expect(printed.status == 0, "\(printed.standardError)")
        let output = printed.standardOutput
        let range = try #require(output.range(of: #"#pair=[A-Za-z0-9_-]+"#, options: .regularExpression),
                                 "no link in: \(output)")
        let token = String(output[range].dropFirst(6))
        #expect(token != server.application.lanInfo?.pairingToken, "a fresh token, not the one printed at start")
        #expect(output.contains(":\(server.port)/#pair="))
        let paired = try PairingTests.pair(server, token)
        #expect(paired.status == 201, "the running server accepts a link from jotter pair: \(paired.text)")
        // The same link as a code to type: printed, and spent with the link.
        let codeRange = try #require(output.range(of: #"type the code [0-9A-Z]{4}-[0-9A-Z]{4}"#, options: .regularExpression),
                                     "no code in: \(output)")
        let code = String(output[codeRange].suffix(9))
        #expect(try PairingTests.pair(server, code).errorCode == "pairing_link_used")
        let second = try LiveServerTests.JotterBinary.run(["pair", "--data-dir", data])
        #expect(second.status == 0 && second.standardOutput != output, "each run prints a new link")

        // Rename the device from the command line while the server runs.
        if let id = try server.application.devices?.list().first?.id {
            let renamed = try LiveServerTests.JotterBinary.run(["devices", "--data-dir", data, "rename",
                                                                String(id.prefix(8)), "Ana's", "phone"])
            #expect(renamed.status == 0, "\(renamed.standardError)")
            #expect(try server.application.devices?.device(id: id)?.name == "Ana's phone")
            let listed = try LiveServerTests.JotterBinary.run(["devices", "--data-dir", data])
            #expect(listed.standardOutput.contains("Ana's phone"))
        }
        server.stop()

        let stopped = try LiveServerTests.JotterBinary.run(["pair", "--data-dir", data])
        #expect(stopped.status == 1)
        #expect(stopped.standardError.contains("no Jotter server in LAN mode is running"))
        // A server without --lan on the same directory: 'start one with --lan' would be refused as in use.
        let plain = try TestServer(dataDirectory: data)
        let notLAN = try LiveServerTests.JotterBinary.run(["pair", "--data-dir", data])
        plain.stop()
        #expect(notLAN.status == 1)
        #expect(notLAN.standardError.contains("is not in LAN mode: stop it and start it again with 'jotter serve --lan'"),
                "\(notLAN.standardError)")
        let nowhere = try LiveServerTests.JotterBinary.run(["devices", "--data-dir", directory.file("typo")])
        #expect(nowhere.status == 1)
        #expect(!FileManager.default.fileExists(atPath: directory.file("typo")), "nothing created for a typo")
    }
}

@Suite struct DeviceNameTests {
    @Test(arguments: [
        (PairingTests.iPhone, nil, nil, "iPhone"),
        ("Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Version/17.0 Safari/604.1", nil, nil,
         "iPad"),
        (PairingTests.pixel, nil, nil, "Android — Pixel 8"),
        ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 Chrome/131.0 Mobile Safari/537.36", "\"SM-S918B\"",
         "\"Android\"", "Android — SM-S918B"),
        ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 Chrome/131.0 Mobile Safari/537.36", nil, nil,
         "Android"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 Version/18.0 Safari/605.1.15", nil,
         nil, "Mac — Safari"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36 Edg/131.0", nil,
         nil, "Windows — Edge"),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", nil, nil, "Linux — Firefox"),
        ("curl/7.88.1", nil, nil, "Browser"),
    ] as [(String, String?, String?, String)])
    func names(agent: String, model: String?, platform: String?, expected: String) {
        #expect(DeviceName.from(userAgent: agent, model: model, platform: platform) == expected)
    }

    /// An iPad's Safari says it is a Mac; the page says it has a touch screen (no Mac has one), and it is
    /// named "iPad" — through `POST /pair` as the page sends it.
    @Test func anIPadThatSaysItIsAMacIsAnIPad() throws {
        let desktop = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 Version/18.0 Safari/605.1.15"
        #expect(DeviceName.from(userAgent: desktop, model: nil, platform: nil, touch: true) == "iPad")
        #expect(DeviceName.from(userAgent: desktop, model: nil, platform: nil, touch: false) == "Mac — Safari")
        #expect(DeviceName.from(userAgent: PairingTests.pixel, model: nil, platform: nil, touch: true) == "Android — Pixel 8")

        let directory = TemporaryDirectory()
        let server = try PairingTests.lanServer(directory)
        defer { server.stop() }
        for (touch, expected) in [(true, "iPad"), (false, "Mac — Safari")] {
            let token = try #require(try PairingTests.newLink(server)["token"] as? String)
            let paired = try server.route("POST", "/pair", headers: [("Content-Type", "application/json"), ("User-Agent", desktop)],
                                          body: Array("{\"pairing_token\":\"\(token)\",\"touch\":\(touch)}".utf8))
            #expect(paired.status == 201, "\(paired.text)")
            #expect((paired.json as? [String: Any])?["name"] as? String == expected, "\(paired.text)")
        }
    }
}

@Suite struct ListeningLineTests {
    @Test func lanModeNamesTheAddressAPhoneOpens() {
        var lan = LANInfo(addresses: ["192.168.1.20"], scheme: "https", fingerprint: nil, pairingToken: "t")
        lan.port = 7373
        #expect(LANBanner.listeningLines(host: "0.0.0.0", port: 7373, lan: lan)
            == ["Listening on https://192.168.1.20:7373", "On this computer: https://127.0.0.1:7373"])
        #expect(LANBanner.listeningLines(host: "127.0.0.1", port: 7373, lan: lan) == ["Listening on https://127.0.0.1:7373"])
        lan.addresses = []
        #expect(LANBanner.listeningLines(host: "0.0.0.0", port: 7373, lan: lan) == ["Listening on https://127.0.0.1:7373"])
        #expect(LANBanner.listeningLines(host: "::1", port: 80, lan: nil) == ["Listening on http://[::1]:80"])
    }

    /// Under systemd the output is the journal, which keeps it: the live link and its code are not written
    /// there (they were, on every restart), only where to get them.
    @Test func aBannerForTheJournalHoldsNoLinkOrCode() throws {
        var lan = LANInfo(addresses: ["192.168.1.20"], scheme: "https", fingerprint: "AB:CD",
                          pairingToken: "live-token-0123456789", pairingCode: "K7Q2-M9XD")
        lan.port = 7373
        let terminal = LANBanner.text(lan, host: "0.0.0.0")
        #expect(terminal.contains("#pair=live-token-0123456789") && terminal.contains("K7Q2-M9XD"))
        let journal = LANBanner.text(lan, host: "0.0.0.0", showsPairing: false)
        #expect(!journal.contains("live-token") && !journal.contains("K7Q2-M9XD") && !journal.contains("#pair="), "\(journal)")
        #expect(journal.contains("'jotter pair' prints a link and a code") && journal.contains("AB:CD"))

        // The journal is told apart by JOURNAL_STREAM naming the very stream (device and inode) of stdout.
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        var info = stat()
        #expect(fstat(ends[1], &info) == 0)
        let stream = "\(info.st_dev):\(info.st_ino)"
        #expect(ProcessEnvironment.writesToJournal(descriptor: ends[1], environment: ["JOURNAL_STREAM": stream]))
        #expect(!ProcessEnvironment.writesToJournal(descriptor: ends[1], environment: [:]))
        #expect(!ProcessEnvironment.writesToJournal(descriptor: ends[1], environment: ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino + 1)"]),
                "another stream: output redirected away from the journal")
        for garbage in ["", ":", "12", "a:b", "1:2:3"] {
            #expect(!ProcessEnvironment.writesToJournal(descriptor: ends[1], environment: ["JOURNAL_STREAM": garbage]))
        }
    }

    /// The start line for the journal names no person: the SMTP user and the recipient are left out.
    @Test(arguments: [
        ("smtps://ana%40example.com:pw@smtp.example.com?from=ana@example.com", "smtps://smtp.example.com:465"),
        ("sendmail:?to=ana@example.com", "sendmail:/usr/sbin/sendmail"),
        ("resend://re_key?to=ana@example.com&from=j@example.com", "resend:// (api.resend.com)"),
        ("maildir:/var/mail/jotter", "maildir:/var/mail/jotter"),
    ])
    func aDestinationForTheJournalNamesNoPerson(relay: String, expected: String) throws {
        let destination = try RelayURL(relay).destination
        #expect(RelayURL.withoutPeople(destination) == expected, "\(destination)")
        #expect(!RelayURL.withoutPeople(destination).contains("ana"))
    }

    /// Without `--lan` a non-loopback `--host` still answers only this machine (HostAndOriginTests), and says so.
    @Test func withoutLANModeAnOpenInterfaceSaysWhoIsAnswered() {
        #expect(LANBanner.listeningLines(host: "0.0.0.0", port: 7373, lan: nil)
            == ["Listening on http://0.0.0.0:7373",
                "Only this computer is answered: other devices need --lan (a paired device token)."])
    }
}

@Suite struct DeviceSightingTests {
    /// A device's name cannot turn a `jotter devices` line, or the page's list, around: bidirectional
    /// overrides, embeddings and isolates are dropped, when pairing and when renaming; marks stay.
    @Test func aDeviceNameCannotReverseItsLine() throws {
        let directory = TemporaryDirectory()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: ManualClock())
        defer { outbox.close() }
        let registry = try DeviceRegistry(outbox: outbox, clock: ManualClock())
        let link = try registry.issuePairingToken().token
        guard case .paired(let device, _) = try registry.pair(pairingToken: link,
                                                              deviceName: "Ana\u{202E}enohP\u{202C} \u{2067}x\u{2069}") else {
            Issue.record("not paired")
            return
        }
        #expect(device.name == "AnaenohP x")
        #expect(try registry.rename(id: device.id, to: "\u{202D}Kitchen\u{200F} tablet") == "Kitchen\u{200F} tablet")
    }

    struct NotPaired: Error {}

    /// `jotter devices` says what it cannot do as it is: a name with nothing visible is refused as such
    /// (it said "no single device matches" a device that exists), and a device revoked before is
    /// "already revoked", not "no device".
    @Test func devicesSaysWhyItCannot() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try TestServer(dataDirectory: data).stop()
        let id = try DevicesCommand.withRegistry(dataDirectory: data, credentialsDirectory: nil) { registry -> String in
            let link = try registry.issuePairingToken().token
            guard case .paired(let device, _) = try registry.pair(pairingToken: link, deviceName: "Phone") else {
                throw NotPaired()
            }
            return device.id
        }
        #expect {
            _ = try DevicesCommand.run(dataDirectory: data, action: .rename(id, " \u{200B} "))
        } throws: { "\($0)".contains("something visible") }
        #expect(try DevicesCommand.run(dataDirectory: data, action: .rename(String(id.prefix(8)), "Kitchen")) == "Renamed to Kitchen.")
        // Which device a prefix named is said: the name and the id's first eight characters.
        #expect(try DevicesCommand.run(dataDirectory: data, action: .revoke(String(id.prefix(4))))
                == "Revoked Kitchen (\(id.prefix(8))). That device must pair again.")
        #expect(try DevicesCommand.run(dataDirectory: data, action: .revoke(String(id.prefix(8)))).hasPrefix("Already revoked ("))
        #expect(throws: CommandLineOptions.UsageError.self) { _ = try DevicesCommand.run(dataDirectory: data, action: .revoke("")) }

        // A prefix two devices share says so (it said "no single device matches", as if there were none).
        try DevicesCommand.withRegistry(dataDirectory: data, credentialsDirectory: nil) { registry in
            for _ in 0..<2 { _ = try registry.pair(pairingToken: try registry.issuePairingToken().token, deviceName: "Tablet") }
        }
        let database = try Database(path: data + "/jotter.db")
        try database.execute("UPDATE devices SET id = 'abcd' || substr(id, 5) WHERE name = 'Tablet'")
        database.close()
        for action in [DevicesCommand.Action.revoke("abcd"), .rename("abcd", "Kitchen"), .forget("abcd")] {
            #expect {
                _ = try DevicesCommand.run(dataDirectory: data, action: action)
            } throws: { "\($0)".contains("2 devices have ids starting 'abcd': give more of the id") }
        }
    }

    /// Arguments that are not UTF-8 (a Latin-1 memo typed into `jotter send`) are refused as the same bytes
    /// from a file or stdin are, not delivered with each bad byte made U+FFFD.
    @Test func anArgumentThatIsNotUTF8IsRefused() throws {
        let sent = try LiveServerTests.JotterBinary.run(
            ["-c", #"exec "$0" send --url http://127.0.0.1:9 "$(printf 'caf\351 latin-1')""#, LiveServerTests.JotterBinary.path],
            executable: "/bin/sh")
        #expect(sent.status == 64, "\(sent.status) \(sent.standardError)")
        #expect(sent.standardError.contains("argument 4 is not UTF-8 text"), "\(sent.standardError)")
    }

    /// Revoked devices (a phone that paired again at a new address left its old one) can be forgotten:
    /// gone from the list, one by id or all at once; a paired one must be revoked first. Its phone is then
    /// "not paired" (it was "unpaired"), and the link's lost-answer retry gets no token for a device gone.
    @Test func revokedDevicesCanBeForgotten() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try TestServer(dataDirectory: data).stop()
        let phones = try DevicesCommand.withRegistry(dataDirectory: data, credentialsDirectory: nil) { registry in
            try ["Old phone", "Older phone", "Phone"].map { name -> (id: String, token: String, link: String) in
                let link = try registry.issuePairingToken().token
                guard case .paired(let device, let token) = try registry.pair(pairingToken: link, deviceName: name,
                                                                                request: "request-\(name.count)-abcdefgh") else {
                    throw NotPaired()
                }
                return (device.id, token, link)
            }
        }
        let (old, older, kept) = (phones[0], phones[1], phones[2])
        #expect {
            _ = try DevicesCommand.run(dataDirectory: data, action: .forget(String(kept.id.prefix(8))))
        } throws: { "\($0)".contains("is still paired: revoke it first") }
        for phone in [old, older] { _ = try DevicesCommand.run(dataDirectory: data, action: .revoke(phone.id)) }
        #expect(try DevicesCommand.run(dataDirectory: data, action: .forget(String(old.id.prefix(8))))
                == "Forgot Old phone (\(old.id.prefix(8))).")
        #expect(try DevicesCommand.run(dataDirectory: data, action: .forget(nil)) == "Forgot Older phone (\(older.id.prefix(8))).")
        #expect(try DevicesCommand.run(dataDirectory: data, action: .forget(nil)) == "No revoked devices.")
        #expect(throws: CommandLineOptions.UsageError.self) {
            _ = try DevicesCommand.run(dataDirectory: data, action: .forget(String(old.id.prefix(8))))
        }
        let listed = try DevicesCommand.run(dataDirectory: data, action: .list)
        #expect(listed.contains("Phone") && !listed.contains("Old phone") && !listed.contains("Older phone"), "\(listed)")
        try DevicesCommand.withRegistry(dataDirectory: data, credentialsDirectory: nil) { registry in
            if case .unknown = registry.check(deviceToken: old.token) {} else { Issue.record("the forgotten phone is still known") }
            if case .valid = registry.check(deviceToken: kept.token) {} else { Issue.record("the paired phone lost its pairing") }
            let retried = try registry.pair(pairingToken: old.link, deviceName: "Old phone", request: "request-9-abcdefgh")
            if case .used = retried {} else { Issue.record("the link of a forgotten device: \(retried)") }
        }
        // From the command line, as a person types it.
        let all = try LiveServerTests.JotterBinary.run(["devices", "--data-dir", data, "forget", "--all-revoked"])
        #expect(all.status == 0 && all.standardOutput.contains("No revoked devices."), "\(all.standardError)")
        let active = try LiveServerTests.JotterBinary.run(["devices", "--data-dir", data, "forget", String(kept.id.prefix(8))])
        #expect(active.status != 0 && active.standardError.contains("revoke it first"), "\(active.standardError)")
    }

    /// A phone paired with `registry`: its device, its token, and what `last_seen_at` the database holds.
    static func pairedPhone(_ registry: DeviceRegistry, _ outbox: Outbox) throws
        -> (device: DeviceRegistry.Device, token: String, stored: () throws -> Int64?) {
        let link = try registry.issuePairingToken().token
        guard case .paired(let device, let token) = try registry.pair(pairingToken: link, deviceName: "Phone") else {
            throw NotPaired()
        }
        let stored = { () throws -> Int64? in
            try outbox.database.read { database in
                try database.statement("SELECT last_seen_at FROM devices WHERE id = ?")
                    .firstRow([.text(device.id)]) { $0.optionalInt64(0) } ?? nil
            }
        }
        return (device, token, stored)
    }

    /// A phone used once and then left alone: its sighting is written a minute later by a timer, not
    /// only when a later request comes (`jotter devices`, another process, showed its pairing time).
    @Test func aLoneSightingIsWrittenAMinuteLater() throws {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: scheduler.clock)
        defer { outbox.close() }
        let registry = try DeviceRegistry(outbox: outbox, clock: scheduler.clock, scheduler: scheduler)
        let (device, token, stored) = try Self.pairedPhone(registry, outbox)
        let paired = try #require(try stored())
        scheduler.advance(milliseconds: 10 * 60_000)
        #expect(registry.verify(deviceToken: token) == device.id)
        let seen = scheduler.clock.nowMilliseconds()
        #expect(try stored() == paired, "nothing is written per request")
        scheduler.advance(milliseconds: DeviceRegistry.lastSeenResolution)  // no request comes: the timer writes it
        #expect(TestServer.waitUntil(timeout: 20) { (try? stored()) == seen },
                "stored \(String(describing: try? stored())), expected \(seen)")
    }

    /// A paired device's requests are noted in memory and written together once the first is a minute
    /// old: a minute of time passing, even when the wall clock is set back meanwhile (on the wall clock
    /// the sightings waited for the clock to catch up).
    @Test func sightingsAreWrittenAMinuteLaterThoughTheClockWasSetBack() throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: SymmetricKey.random(), clock: clock)
        defer { outbox.close() }
        let registry = try DeviceRegistry(outbox: outbox, clock: clock)
        let (device, token, stored) = try Self.pairedPhone(registry, outbox)
        let paired = try #require(try stored())
        clock.advance(milliseconds: 10 * 60_000)
        #expect(registry.verify(deviceToken: token) == device.id)
        #expect(try stored() == paired, "nothing is written per request")
        clock.set(byMilliseconds: -5 * 60_000)
        clock.advance(milliseconds: DeviceRegistry.lastSeenResolution)
        #expect(registry.verify(deviceToken: token) == device.id)
        let latest = clock.nowMilliseconds()
        #expect(TestServer.waitUntil(timeout: 20) { (try? stored()) == latest },
                "stored \(String(describing: try? stored())), expected \(latest)")
    }
}

/// Which of the machine's addresses a pairing link (and its QR code) names: the one a phone on the
/// same network can reach.
@Suite struct LinkAddressTests {
    typealias Entry = NetworkInterfaces.Entry

    @Test func aPhoneReachableAddressComesFirst() {
        let entries = [
            Entry(interface: "docker0", address: "172.17.0.1", running: true),
            Entry(interface: "tailscale0", address: "100.101.102.103", running: true),
            Entry(interface: "enp0s31f6", address: "192.168.1.30", running: false),  // cable unplugged
            Entry(interface: "virbr0", address: "192.168.122.1", running: true),
            Entry(interface: "wlp2s0", address: "192.168.1.20", running: true),
            Entry(interface: "br-5c1e", address: "172.18.0.1", running: true),
            Entry(interface: "wlp2s0", address: "192.168.1.20", running: true),
        ]
        #expect(NetworkInterfaces.ranked(entries, host: "0.0.0.0")
                == ["192.168.1.20", "100.101.102.103", "172.17.0.1", "192.168.122.1", "172.18.0.1", "192.168.1.30"])
        #expect(NetworkInterfaces.ranked(entries, host: "::") .first == "192.168.1.20")
    }

    /// `--lan --host ADDRESS` listens on that address only: the link names it and nothing else; a
    /// loopback host (behind a proxy) has no address a phone could use.
    @Test func aListeningAddressIsTheOnlyOne() {
        let entries = [Entry(interface: "wlp2s0", address: "192.168.1.20", running: true),
                       Entry(interface: "enp0s25", address: "10.0.0.5", running: true)]
        #expect(NetworkInterfaces.ranked(entries, host: "10.0.0.5") == ["10.0.0.5"])
        #expect(NetworkInterfaces.ranked(entries, host: "127.0.0.1").isEmpty)
        #expect(NetworkInterfaces.ranked(entries, host: "localhost").isEmpty)
        #expect(NetworkInterfaces.ranked(entries, host: "::1").isEmpty)
        #expect(NetworkInterfaces.ranked(entries, host: "::") == ["192.168.1.20", "10.0.0.5"])
        #expect(NetworkInterfaces.ranked(entries, host: "0.0.0.0") == ["192.168.1.20", "10.0.0.5"])
    }

    @Test func privateRanges() {
        #expect(NetworkInterfaces.isPrivate("10.1.2.3") && NetworkInterfaces.isPrivate("172.31.0.1")
                && NetworkInterfaces.isPrivate("192.168.0.1"))
        #expect(!NetworkInterfaces.isPrivate("172.32.0.1") && !NetworkInterfaces.isPrivate("100.64.0.1")
                && !NetworkInterfaces.isPrivate("192.0.2.2") && !NetworkInterfaces.isPrivate("x"))
    }
}
