import Foundation
import Testing
@testable import Jotter

/// Verification codes on manual time: every way a code fails (wrong, expired, reused, burnt after 5
/// wrong tries, another address's, another device's), the resend cooldown, the per-address hourly and
/// daily caps, the per-IP limit, and the same answer whether or not an address is known. On both
/// stores, SQLite and PostgreSQL.
@Suite(.holdingSharedPostgres) struct RelayCodeTests {
    /// A relay on manual time and on a store of the given kind; its codes are read from its Maildir.
    final class Fixture: Sendable {
        let directory = TemporaryDirectory()
        let scheduler = ManualScheduler()
        let store: RelayTestStore
        let relay: RelayServer

        init(_ kind: RelayStoreKind, configure: (inout RelayConfiguration) -> Void = { _ in }) throws {
            let store = try RelayTestStore(kind)
            self.store = store
            relay = try store.relay(in: directory, scheduler: scheduler, configure: configure)
        }

        func advance(seconds: Double) {
            scheduler.clock.advance(milliseconds: Int64(seconds * 1000))
        }

        /// Asks for a code (expecting it to be sent) and reads it from the mail.
        func code(_ secret: String, _ address: String, from client: String = "127.0.0.1") throws -> String {
            let known = try relay.mailFiles(to: address)
            let response = try relay.requestCode(secret, address, from: client)
            try #require(response.status == 202, "code request: \(response.status) \(response.text)")
            return try relay.newCode(to: address, known: known)
        }

        func stop() {
            relay.stop()
            store.release()
        }
    }

    /// A code that is surely not `code`.
    static func other(than code: String) -> String {
        code == "000000" ? "000001" : "000000"
    }

    @Test(arguments: RelayStoreKind.available)
    func aWrongCodeCostsOneOfFiveTriesAndTheRightOneStillWorks(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        let code = try fixture.code(device.secret, "me@example.com")
        for _ in 1...4 {
            let wrong = try fixture.relay.confirm(device.secret, "me@example.com", Self.other(than: code))
            #expect(wrong.status == 400 && wrong.errorCode == "invalid_code")
        }
        let right = try fixture.relay.confirm(device.secret, "me@example.com", code)
        #expect(right.status == 200, "the fifth try, right, verifies: \(right.text)")
        #expect((right.json as? [String: Any])?["state"] as? String == "verified")
    }

    @Test(arguments: RelayStoreKind.available)
    func fiveWrongTriesBurnTheCode(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        let code = try fixture.code(device.secret, "me@example.com")
        for _ in 1...5 {
            #expect(try fixture.relay.confirm(device.secret, "me@example.com", Self.other(than: code)).errorCode
                == "invalid_code")
        }
        let burnt = try fixture.relay.confirm(device.secret, "me@example.com", code)
        #expect(burnt.status == 400 && burnt.errorCode == "code_spent")
        #expect(try fixture.relay.send(device.secret, to: "me@example.com").status == 403)
        // A new code (after the cooldown) works.
        fixture.advance(seconds: 60)
        let fresh = try fixture.code(device.secret, "me@example.com")
        #expect(try fixture.relay.confirm(device.secret, "me@example.com", fresh).status == 200)
    }

    @Test(arguments: RelayStoreKind.available)
    func aCodeExpiresAfterTenMinutes(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        let first = try fixture.code(device.secret, "late@example.com")
        fixture.advance(seconds: 600)
        let expired = try fixture.relay.confirm(device.secret, "late@example.com", first)
        #expect(expired.status == 400 && expired.errorCode == "code_expired")
        // One millisecond before the ten minutes, it works.
        let second = try fixture.code(device.secret, "late@example.com")
        fixture.scheduler.clock.advance(milliseconds: 600_000 - 1)
        #expect(try fixture.relay.confirm(device.secret, "late@example.com", second).status == 200)
    }

    @Test(arguments: RelayStoreKind.available)
    func aCodeWorksOnce(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        let code = try fixture.code(device.secret, "me@example.com")
        #expect(try fixture.relay.confirm(device.secret, "me@example.com", code).status == 200)
        // Presented again (the first answer lost on the way): verified, as then; nothing more.
        #expect(try fixture.relay.confirm(device.secret, "me@example.com", code).status == 200)
        let wrong = String(code.reversed()) == code ? "000000" : String(code.reversed())
        let again = try fixture.relay.confirm(device.secret, "me@example.com", wrong)
        #expect(again.status == 400 && again.errorCode == "code_spent", "any other code: spent")
        // Once the address is removed, its code verifies nothing.
        #expect(try fixture.relay.json("DELETE", "/v1/destinations/me@example.com", secret: device.secret).status == 204)
        #expect(try fixture.relay.confirm(device.secret, "me@example.com", code).status != 200)
    }

    @Test(arguments: RelayStoreKind.available)
    func anotherAddressesCodeOrAnotherDevicesCodeDoesNotVerify(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register(), other = try fixture.relay.register()
        let forA = try fixture.code(device.secret, "a@example.com")
        let forB = try fixture.code(device.secret, "b@example.com")
        if forA != forB {
            let swapped = try fixture.relay.confirm(device.secret, "b@example.com", forA)
            #expect(swapped.status == 400 && swapped.errorCode == "invalid_code")
        }
        let stolen = try fixture.relay.confirm(other.secret, "a@example.com", forA)
        #expect(stolen.status == 400 && stolen.errorCode == "no_code", "a code is the requesting device's alone")
        #expect(try fixture.relay.confirm(device.secret, "a@example.com", forA).status == 200)
        #expect(try fixture.relay.confirm(device.secret, "b@example.com", forB).status == 200)
        #expect(try fixture.relay.send(other.secret, to: "a@example.com").status == 403)
        let never = try fixture.relay.confirm(device.secret, "c@example.com", "123456")
        #expect(never.status == 400 && never.errorCode == "no_code")
    }

    @Test(arguments: RelayStoreKind.available)
    func aNewCodeWaitsOneMinuteAndReplacesTheOldOne(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        let first = try fixture.code(device.secret, "me@example.com")
        fixture.advance(seconds: 59.999)
        let early = try fixture.relay.requestCode(device.secret, "me@example.com")
        #expect(early.status == 429 && early.errorCode == "code_cooldown")
        #expect(early.header("Retry-After") == "1")
        #expect(try fixture.relay.mails(to: "me@example.com").count == 1, "a refused request mails nothing")
        fixture.scheduler.clock.advance(milliseconds: 1)
        let second = try fixture.code(device.secret, "me@example.com")
        if first != second {
            #expect(try fixture.relay.confirm(device.secret, "me@example.com", first).errorCode == "invalid_code",
                    "the newer code replaces the older")
        }
        #expect(try fixture.relay.confirm(device.secret, "me@example.com", second).status == 200)
    }

    @Test(arguments: RelayStoreKind.available)
    func theCooldownHoldsForEveryDeviceAskingForThatAddress(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let one = try fixture.relay.register(), two = try fixture.relay.register()
        _ = try fixture.code(one.secret, "shared@example.com")
        let other = try fixture.relay.requestCode(two.secret, "SHARED@example.com")
        #expect(other.status == 429 && other.errorCode == "code_cooldown", "no one mail-bombs an address")
        #expect(other.header("Retry-After") == "60")
    }

    /// `victim+1@`, `victim+2@`, … and, at Gmail, `v.i.c.t.i.m@` reach one inbox: the cooldown and
    /// caps count them as one, so a flood of codes cannot be spread over made-up variants. Each variant
    /// is still its own address to verify.
    @Test(arguments: RelayStoreKind.available)
    func variantsOfOneInboxShareItsCooldownAndCaps(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        _ = try fixture.code(device.secret, "victim@example.com")
        for variant in ["victim+1@example.com", "Victim+news+2@Example.com"] {
            let tagged = try fixture.relay.requestCode(device.secret, variant)
            #expect(tagged.status == 429 && tagged.errorCode == "code_cooldown", "\(variant): \(tagged.text)")
        }
        _ = try fixture.code(device.secret, "v.i.c.t.i.m@gmail.com")
        for variant in ["victim@gmail.com", "VICTIM+x@googlemail.com", "vic.tim@googlemail.com"] {
            #expect(try fixture.relay.requestCode(device.secret, variant).errorCode == "code_cooldown", "\(variant)")
        }
        // Others are others: another local part, another domain, dots outside Gmail, a leading +.
        for other in ["victim2@example.com", "victim@example.org", "vic.tim@example.com", "+victim@example.com"] {
            #expect(try fixture.relay.requestCode(device.secret, other).status == 202, "\(other)")
        }
        // Spread over a minute each, the tags still meet the hourly cap of the one inbox.
        var code = ""
        for tag in 1...2 {
            fixture.advance(seconds: 60)
            code = try fixture.code(device.secret, "victim+\(tag)@example.com")
        }
        fixture.advance(seconds: 60)
        let fourth = try fixture.relay.requestCode(device.secret, "victim+3@example.com")
        #expect(fourth.status == 429 && fourth.errorCode == "code_hourly_cap", "\(fourth.text)")
        // A code for a tagged address verifies that address, not the inbox's other names.
        #expect(try fixture.relay.confirm(device.secret, "victim+2@example.com", code).status == 200)
        #expect(try fixture.relay.send(device.secret, to: "victim+2@example.com").status == 202)
        #expect(try fixture.relay.send(device.secret, to: "victim@example.com").status == 403)
    }

    @Test func theMailboxOfAnAddressDropsTagsAndGmailDots() {
        func mailbox(_ text: String) -> String? { DestinationAddress(text)?.mailbox }
        #expect(mailbox("Ana+Notes@Example.COM") == "ana@example.com")
        #expect(mailbox("ana+a+b@example.com") == "ana@example.com")
        #expect(mailbox("+ana@example.com") == "+ana@example.com")
        #expect(mailbox("a.n.a@example.com") == "a.n.a@example.com")
        #expect(mailbox("A.n.a+x@GoogleMail.com") == "ana@gmail.com")
        #expect(mailbox("...@gmail.com") == nil, "not an address at all")
    }

    @Test(arguments: RelayStoreKind.available)
    func atMostThreeCodesPerAddressInAnHour(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        for _ in 1...3 {
            _ = try fixture.code(device.secret, "me@example.com")
            fixture.advance(seconds: 60)
        }
        // 180 s after the first: the fourth waits until the first is an hour old.
        let fourth = try fixture.relay.requestCode(device.secret, "me@example.com")
        #expect(fourth.status == 429 && fourth.errorCode == "code_hourly_cap")
        #expect(fourth.header("Retry-After") == "3420")
        fixture.advance(seconds: 3419.999)
        #expect(try fixture.relay.requestCode(device.secret, "me@example.com").errorCode == "code_hourly_cap")
        fixture.scheduler.clock.advance(milliseconds: 1)
        _ = try fixture.code(device.secret, "me@example.com")
        #expect(try fixture.relay.mails(to: "me@example.com").count == 4)
    }

    @Test(arguments: RelayStoreKind.available)
    func atMostFiveCodesPerAddressInADay(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind)
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        // Three in the first hour, two more in the second.
        for wait in [60.0, 60, 3500, 60, 3600] {
            _ = try fixture.code(device.secret, "me@example.com")
            fixture.advance(seconds: wait)
        }
        // Now 7280 s after the first: the sixth waits until the first is a day old.
        let sixth = try fixture.relay.requestCode(device.secret, "me@example.com")
        #expect(sixth.status == 429 && sixth.errorCode == "code_daily_cap", "\(sixth.text)")
        #expect(sixth.header("Retry-After") == String(86_400 - 7280))
        fixture.advance(seconds: Double(86_400 - 7280))
        _ = try fixture.code(device.secret, "me@example.com")
        #expect(try fixture.relay.mails(to: "me@example.com").count == 6)
    }

    @Test(arguments: RelayStoreKind.available)
    func codeRequestsAreLimitedPerIPAddressAndARefusalSpendsNothing(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) {
            $0.limits.codeRequestsPerIPHour = 3
            $0.limits.codeRequestsPerDomainDay = nil  // this test reads the IP policy's fields alone
        }
        defer { fixture.stop() }
        let device = try fixture.relay.register()
        // Refused by the cooldown: the IP's quota is not spent.
        _ = try fixture.code(device.secret, "a@example.com", from: "203.0.113.7")
        #expect(try fixture.relay.requestCode(device.secret, "a@example.com", from: "203.0.113.7").errorCode
            == "code_cooldown")
        let second = try fixture.relay.requestCode(device.secret, "b@example.com", from: "203.0.113.7")
        #expect(second.status == 202)
        #expect(second.header("RateLimit-Policy") == "\"ip-codes-hour\";q=3;w=3600")
        #expect(second.header("RateLimit")?.hasPrefix("\"ip-codes-hour\";r=1;t=") == true)
        #expect(try fixture.relay.requestCode(device.secret, "c@example.com", from: "203.0.113.7").status == 202)
        let fourth = try fixture.relay.requestCode(device.secret, "d@example.com", from: "203.0.113.7")
        #expect(fourth.status == 429 && fourth.errorCode == "rate_limited")
        #expect(fourth.header("RateLimit")?.hasPrefix("\"ip-codes-hour\";r=0;t=") == true)
        // Refused by the IP limit: the address's cooldown and caps are not spent either.
        #expect(try fixture.relay.requestCode(device.secret, "d@example.com", from: "198.51.100.1").status == 202)
        #expect(TestServer.waitUntil { ((try? fixture.relay.mails(to: "d@example.com").count) ?? 0) == 1 })
    }

    /// Code mails to one domain are capped per day, whoever asks from wherever: a catch-all domain has
    /// any number of inboxes, each with caps of its own, and strangers on many addresses could flood it.
    @Test(arguments: RelayStoreKind.available)
    func codeMailsToOneDomainAreCappedPerDay(store kind: RelayStoreKind) throws {
        let fixture = try Fixture(kind) {
            $0.limits.codeRequestsPerDomainDay = 3
            $0.limits.codeRequestsPerIPHour = nil
        }
        defer { fixture.stop() }
        let one = try fixture.relay.register(), two = try fixture.relay.register()
        for (index, device) in [one, one, two].enumerated() {
            let asked = try fixture.relay.requestCode(device.secret, "inbox\(index)@Catchall.example", from: "203.0.113.\(index + 1)")
            #expect(asked.status == 202, "\(index): \(asked.text)")
        }
        let fourth = try fixture.relay.requestCode(two.secret, "other@catchall.example", from: "198.51.100.9")
        // Said as the domain's cap, not as "too many from this network" (the asker's network sent none).
        #expect(fourth.status == 429 && fourth.errorCode == "code_domain_daily_cap", "\(fourth.status) \(fourth.text)")
        #expect(fourth.header("RateLimit-Policy")?.contains("\"domain-codes-day\";q=3;w=86400") == true,
                "\(fourth.header("RateLimit-Policy") ?? "")")
        #expect(try fixture.relay.requestCode(two.secret, "someone@elsewhere.example", from: "198.51.100.9").status == 202,
                "another domain has its own day")
    }

    @Test(arguments: RelayStoreKind.available)
    func theAnswerIsTheSameWhetherOrNotAnAddressIsKnown(store kind: RelayStoreKind) throws {
        // (The domain's day counts both requests, one after the other: its fields differ by that one.)
        let fixture = try Fixture(kind) { $0.limits.codeRequestsPerDomainDay = nil }
        defer { fixture.stop() }
        let owner = try fixture.relay.register(), asker = try fixture.relay.register()
        let code = try fixture.code(owner.secret, "known@example.com")
        #expect(try fixture.relay.confirm(owner.secret, "known@example.com", code).status == 200)
        fixture.advance(seconds: 60)
        let known = try fixture.relay.requestCode(asker.secret, "known@example.com", from: "192.0.2.1")
        let unknown = try fixture.relay.requestCode(asker.secret, "unknown@example.com", from: "192.0.2.2")
        #expect(known.status == 202 && unknown.status == 202)
        #expect(known.body == unknown.body)
        #expect(known.headers.map(\.name) == unknown.headers.map(\.name))
        #expect(known.header("RateLimit") == unknown.header("RateLimit"))
        // Both did the same work: one code mail each.
        #expect(TestServer.waitUntil { ((try? fixture.relay.mails(to: "unknown@example.com").count) ?? 0) == 1 })
        #expect(TestServer.waitUntil { ((try? fixture.relay.mails(to: "known@example.com").count) ?? 0) == 2 })
        // Confirming with a wrong code answers alike too.
        let wrongKnown = try fixture.relay.confirm(asker.secret, "known@example.com", "000000")
        let wrongUnknown = try fixture.relay.confirm(asker.secret, "unknown@example.com", "000000")
        #expect(wrongKnown.status == 400 && wrongKnown.body == wrongUnknown.body)
    }

    @Test func codesAreUniformSixDigitNumbers() throws {
        var seen = Set<String>()
        var firstDigits = [Int](repeating: 0, count: 10)
        for _ in 0..<2000 {
            let code = try VerificationCode.generate()
            #expect(VerificationCode.isWellFormed(code))
            seen.insert(code)
            firstDigits[Int(String(code.prefix(1))) ?? 0] += 1
        }
        #expect(seen.count > 1990, "codes repeat far too often")
        #expect(firstDigits.allSatisfy { $0 > 120 }, "leading digits are skewed: \(firstDigits)")
    }
}
