import Foundation
import Testing
@testable import Jotter

/// A composer (`serve --relay jotter+http://127.0.0.1:PORT`) against a real `jotter relay` on
/// loopback, end to end: it registers itself once, memos wait `held`/`unverified` until the page's
/// Settings verify an address with the code the relay mailed there, then go out once each. The relay
/// runs on both stores, SQLite and PostgreSQL.
@Suite(.serialized, .holdingSharedPostgres)
struct ComposerRelayTests {
    static let address = "ana@example.com"

    /// A relay on a store of the given kind and a composer pointed at it.
    struct Pair {
        let relayDirectory = TemporaryDirectory()
        let composerDirectory = TemporaryDirectory()
        let store: RelayTestStore
        let relay: RelayServer
        var composer: TestServer

        /// With `steered`, the relay's mail goes through this transport in front of its own Maildir, so
        /// verification codes arrive and a test can hold or refuse what comes after.
        let mail: ControlledTransport?

        init(_ kind: RelayStoreKind, steered: Bool = false,
             configureRelay: (inout RelayConfiguration) -> Void = { _ in }) throws {
            let mail = steered ? RelayServer.steeredMail(relayDirectory.path, maximumWait: 60) : nil
            self.mail = mail
            store = try RelayTestStore(kind)
            do {
                relay = try RelayServer(dataDirectory: relayDirectory.path, store: store, transport: mail,
                                        configure: configureRelay)
            } catch {
                store.release()
                throw error
            }
            do {
                composer = try Self.composer(composerDirectory.path, relayPort: relay.port)
            } catch {
                relay.stop()
                store.release()
                throw error
            }
        }

        static func composer(_ directory: String, relayPort: Int, query: String = "") throws -> TestServer {
            try TestServer(dataDirectory: directory, relay: "jotter+http://127.0.0.1:\(relayPort)\(query)") { configuration in
                configuration.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 1000)
                configuration.delivery.offlineProbeMilliseconds = 200
            }
        }

        func stop() {
            composer.stop()
            relay.stop()
            store.release()
        }

        /// How many devices the relay has registered (read from its store: the API has no such count).
        func devices() throws -> Int64 {
            try store.deviceCount(on: relay)
        }

        /// A JSON request to the composer, as the page makes it (same origin).
        func page(_ method: String, _ path: String, _ object: [String: Any]? = nil) throws -> RawHTTP.Response {
            var headers = [("Sec-Fetch-Site", "same-origin")]
            var body: [UInt8] = []
            if let object {
                headers.append(("Content-Type", "application/json"))
                body = Array(try JSONSerialization.data(withJSONObject: object))
            }
            return try composer.route(method, path, headers: headers, body: body)
        }

        func post(_ text: String) throws -> String {
            let response = try composer.route("POST", "/send", headers: [("Content-Type", "text/plain")], body: Array(text.utf8))
            #expect(response.status == 204, "\(response.status) \(response.text)")
            return try #require(response.header("X-Message-Id"))
        }

        func entry(_ id: String) throws -> [String: Any] {
            try #require(try composer.route("GET", "/history/\(id)").json as? [String: Any])
        }

        /// Waits for memo `id` to fail with `reason`, and checks it is kept whole (its sealed body), for Retry.
        func expectFailedKeptWhole(_ id: String, reason: String) throws {
            #expect(try composer.waitUntil(timeout: 30) { try entry(id)["status"] as? String == "failed" },
                    "\((try? entry(id)) ?? [:])")
            #expect(try entry(id)["last_error"] as? String == reason)
            let kept = try composer.outbox.database.read { database in
                try database.statement("SELECT sealed_payload IS NOT NULL FROM messages WHERE id = ?").firstRow([.text(id)]) { $0.int64(0) }
            }
            #expect(kept == 1, "the memo is kept whole, for Retry")
        }

        /// Asks for a code through the composer, reads it from the relay's mail, confirms it.
        func verify(_ address: String = ComposerRelayTests.address) throws {
            let known = try relay.mailFiles(to: address)
            let asked = try page("POST", "/destination", ["address": address, "language": "de"])
            #expect(asked.status == 202, "\(asked.status) \(asked.text)")
            // Pending (or, while another address is verified, still "verified" with this one pending).
            #expect((asked.json as? [String: Any])?["pending"] as? String == address)
            let code = try relay.newCode(to: address, known: known)
            let confirmed = try page("POST", "/destination/confirm", ["code": code])
            #expect(confirmed.status == 200, "\(confirmed.status) \(confirmed.text)")
            #expect((confirmed.json as? [String: Any])?["state"] as? String == "verified")
        }

        /// The memos the relay delivered to `address` (not its code mails), by body.
        func delivered(to address: String = ComposerRelayTests.address) throws -> [String] {
            try relay.mails(to: address).compactMap { $0.message["body"] as? String }
                .map { $0.replacingOccurrences(of: "\r\n", with: "\n") }
                .filter { RelayServer.code(in: $0) == nil || $0.hasPrefix("memo") }
        }
    }

    @Test(arguments: RelayStoreKind.available)
    func memosWaitUnverifiedThenGoOutOnceEachWhenTheAddressIsVerified(store kind: RelayStoreKind) throws {
        let pair = try Pair(kind)
        defer { pair.stop() }
        #expect(pair.composer.application.destination.hasPrefix("jotter+http://127.0.0.1:\(pair.relay.port)"))

        let state = try pair.page("GET", "/destination")
        #expect(state.status == 200)
        #expect((state.json as? [String: Any])?["state"] as? String == "none")

        // Accepted at once, held as unverified: nothing can go anywhere yet.
        let first = try pair.post("memo one"), second = try pair.post("memo two")
        #expect(try pair.composer.waitUntil(timeout: 20) {
            try [first, second].allSatisfy { try pair.entry($0)["status"] as? String == "held" }
        }, "held: \((try? pair.entry(second)) ?? [:])")
        let held = try pair.entry(second)
        #expect(held["last_error"] as? String == "unverified")
        #expect(held["waiting_for"] as? String == "destination_unverified")
        #expect(DeliveryKit.relay(pair.composer, reason: "unverified") != nil,
                "/healthz never said the relay waits for an address")

        try pair.verify()
        #expect(try pair.composer.waitUntil(timeout: 20) {
            try [first, second].allSatisfy { try pair.entry($0)["status"] as? String == "sent" }
        }, "sent: \((try? pair.entry(second)) ?? [:])")
        #expect(TestServer.waitUntil(timeout: 20) { (try? pair.delivered().count) == 2 })
        #expect(try pair.delivered().sorted().map { $0.trimmingCharacters(in: .newlines) } == ["memo one", "memo two"])

        // The code mail was in the page's language; the composer registered exactly one device.
        let codeMail = try pair.relay.mails(to: Self.address).first { RelayServer.code(in: $0.message["body"] as? String ?? "") != nil }
        #expect((codeMail?.message["subject"] as? String)?.isEmpty == false)
        let devices = try pair.devices()
        #expect(devices == 1)

        // GET /destination says where memos go now; later memos go straight out.
        #expect((try pair.page("GET", "/destination").json as? [String: Any])?["address"] as? String == Self.address)
        let third = try pair.post("memo three")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(third)["status"] as? String == "sent" })
        let delivered = try pair.entry(third)
        #expect(delivered["last_error"] is NSNull, "it waited for something: \(delivered)")
    }

    /// `sent` is the relay's delivery, not its `202`: while the relay holds a memo (its mail provider
    /// slow), the composer says the relay has it (`retrying`, `relay_pending`, shown as on its way),
    /// and once the relay delivers it, `sent` — with one mail, from one relay message.
    @Test(arguments: RelayStoreKind.available)
    func aMemoIsSentWhenTheRelayDeliveredItNotWhenItTookIt(store kind: RelayStoreKind) throws {
        let pair = try Pair(kind, steered: true)
        defer { pair.stop() }
        let mail = try #require(pair.mail)
        try pair.verify()
        mail.block()
        let id = try pair.post("memo held up at the relay")
        #expect(mail.waitUntilBlocked(timeout: 30), "the relay never tried to mail it")
        // Between two questions it is retrying; while one is asked, sending.
        #expect(try pair.composer.waitUntil(timeout: 30) {
            let entry = try pair.entry(id)
            return entry["last_error"] as? String == "relay_pending"
                && ["retrying", "sending"].contains(entry["status"] as? String ?? "")
        }, "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.delivered().isEmpty)

        mail.release()
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.delivered().map { $0.trimmingCharacters(in: .newlines) } == ["memo held up at the relay"])
        let attempts = mail.messages.filter { $0.body.contains("memo held up") }
        #expect(attempts.count == 1, "the relay mailed it \(attempts.count) times")
        #expect(try pair.entry(id)["last_error"] is NSNull)
    }

    /// A mail provider's permanent refusal at the relay reaches the composer: the memo is `failed` there
    /// too, with the relay's reason, never `sent`. Its Retry is passed on to the relay, which tries the
    /// same message again (one relay message, two attempts), not a second copy.
    @Test(arguments: RelayStoreKind.available)
    func aMemoTheRelayGivesUpOnFailsHereAndItsRetryGoesToTheRelay(store kind: RelayStoreKind) throws {
        let pair = try Pair(kind, steered: true)
        defer { pair.stop() }
        let mail = try #require(pair.mail)
        try pair.verify()
        mail.fail(with: DeliveryFailure(.rejected, permanent: true))
        let id = try pair.post("memo the provider refuses")
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "failed" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.entry(id)["last_error"] as? String == "rejected")
        #expect(try pair.delivered().isEmpty)

        mail.release()
        let retried = try pair.page("POST", "/history/\(id)/retry")
        #expect(retried.status == 202 || retried.status == 200, "\(retried.status) \(retried.text)")
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.delivered().map { $0.trimmingCharacters(in: .newlines) } == ["memo the provider refuses"])
        let attempts = mail.messages.filter { $0.body.contains("memo the provider refuses") }
        #expect(attempts.count == 2)
        #expect(Set(attempts.map(\.id)).count == 1, "the relay was sent the memo a second time")
    }

    /// The composer's device revoked while the relay holds its memo: the composer registers anew, and the
    /// relay answers the new device nothing about the old one's message. That is no news of delivery: the
    /// memo fails as `relay_reregistered`, kept whole for its sender's Retry, never `sent` with its body
    /// erased (it was, and a relay that then failed the message lost it for good). The relay still
    /// delivers what it holds, once.
    @Test func aMessageHandedOverByARevokedDeviceIsNotTakenForDelivered() throws {
        let pair = try Pair(.sqlite, steered: true)
        defer { pair.stop() }
        let (mail, id) = try Self.heldAtTheRelay(pair, "memo the relay forgets the sender of")
        let devices = try Self.relayDevices(pair)
        #expect(devices.count == 1)
        for device in devices { try pair.relay.application.service.revoke(deviceID: device) }
        try pair.expectFailedKeptWhole(id, reason: "relay_reregistered")
        // No code was mailed to the new device: nothing is pending (the page asked for a code that never
        // came), and the address verified before is offered again.
        let destination = try #require(try pair.page("GET", "/destination").json as? [String: Any])
        #expect(destination["state"] as? String == "none" && destination["pending"] is NSNull, "\(destination)")
        #expect(destination["previous"] as? String == ComposerRelayTests.address, "\(destination)")
        // Where memos go is kept sealed, as the relay keeps it: no setting holds the address in the clear.
        let plain = try pair.composer.outbox.database.read { database in
            try database.statement("SELECT count(*) FROM settings WHERE instr(value, ?) > 0")
                .firstRow([.blob(Array(ComposerRelayTests.address.utf8))]) { $0.int64(0) }
        }
        #expect(plain == 0)
        mail.release()
        #expect(try pair.relay.finishDeliveries())
        #expect(mail.messages.filter { $0.body.contains("memo the relay forgets") }.count == 1)
        #expect(try pair.entry(id)["status"] as? String == "failed", "still not taken for delivered")
    }

    /// A verified pair's memo `text`, taken by the relay and held there (its mail blocked): the mail, and the memo's id.
    static func heldAtTheRelay(_ pair: Pair, _ text: String) throws -> (mail: ControlledTransport, id: String) {
        let mail = try #require(pair.mail)
        try pair.verify()
        mail.block()
        let id = try pair.post(text)
        #expect(mail.waitUntilBlocked(timeout: 30))
        #expect(try pair.composer.waitUntil(timeout: 30) {
            try pair.entry(id)["last_error"] as? String == "relay_pending"
        })
        return (mail, id)
    }

    /// The relay's devices, by id (read from its store).
    static func relayDevices(_ pair: Pair) throws -> [String] {
        try pair.relay.outbox.database.read { database in
            try database.statement("SELECT id FROM relay_devices").rows([]) { $0.text(0) ?? "" }
        }
    }

    /// The relay lost the verified address (forgotten there) while a code for another address is on its
    /// way: the memo waits `unverified`, and the other address stays pending — the code in that inbox is
    /// still the one to type. Typing it sends the memo there.
    @Test func aLostVerificationKeepsTheCodeMailedForAnotherAddress() throws {
        let pair = try Pair(.sqlite)
        defer { pair.stop() }
        try pair.verify()
        let next = "bo@example.com"
        let known = try pair.relay.mailFiles(to: next)
        let asked = try pair.page("POST", "/destination", ["address": next, "language": "en"])
        #expect(asked.status == 202, "\(asked.status) \(asked.text)")
        let devices = try Self.relayDevices(pair)
        #expect(devices.count == 1)
        let verified = try #require(DestinationAddress(ComposerRelayTests.address))
        for device in devices { #expect(try pair.relay.application.service.removeDestination(deviceID: device, address: verified)) }

        let id = try pair.post("memo after the relay lost the address")
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["last_error"] as? String == "unverified" },
                "\((try? pair.entry(id)) ?? [:])")
        let destination = try #require(try pair.page("GET", "/destination").json as? [String: Any])
        #expect(destination["state"] as? String == "pending" && destination["pending"] as? String == next, "\(destination)")
        let confirmed = try pair.page("POST", "/destination/confirm", ["code": try pair.relay.newCode(to: next, known: known)])
        #expect(confirmed.status == 200, "\(confirmed.status) \(confirmed.text)")
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(TestServer.waitUntil(timeout: 20) { (try? pair.delivered(to: next).count) == 1 })
    }

    /// A registration whose answer was lost proposes the same secret again; if that device was revoked
    /// meanwhile, the relay answers `409 secret_revoked`. The composer proposes a new secret: the memo
    /// waits for the new device's verification (`unverified`), it does not fail.
    @Test func aRevokedProposedSecretIsReplacedNotFailed() throws {
        // The relay's minute between two codes for one address would refuse the second verification.
        var pair = try Pair(.sqlite) { $0.codes.cooldownMilliseconds = 0 }
        defer { pair.stop() }
        try pair.verify()
        let first = try pair.post("memo from the first device")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(first)["status"] as? String == "sent" })
        // What a lost registration answer leaves: the secret kept only as the one proposed.
        let settings = pair.composer.outbox.settings
        let stored = try #require(try pair.composer.outbox.database.read { database in
            try database.statement("SELECT name FROM settings WHERE name LIKE 'sealed.jotter_relay[%].secret'")
                .firstRow { $0.text(0) } ?? nil
        })
        let secretName = String(stored.dropFirst(SettingsStore.sealedPrefix.count))
        let proposedName = String(secretName.dropLast("secret".count)) + "proposed_secret"
        let secret = try #require(try settings.readSealed(secretName))
        try settings.writeSealed(proposedName, value: secret)
        try settings.writeSealed(secretName, value: nil)
        pair.composer.stop()
        for device in try Self.relayDevices(pair) { try pair.relay.application.service.revoke(deviceID: device) }
        pair.composer = try Pair.composer(pair.composerDirectory.path, relayPort: pair.relay.port)

        let second = try pair.post("memo after the revocation")
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(second)["last_error"] as? String == "unverified" },
                "\((try? pair.entry(second)) ?? [:])")
        #expect(try pair.entry(second)["status"] as? String == "held")
        #expect(try pair.devices() == 2, "registered once more, with a new secret")
        try pair.verify()
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(second)["status"] as? String == "sent" },
                "\((try? pair.entry(second)) ?? [:])")
    }

    /// The same, when the handover was recorded late: another delivery met the relay's `401` and registered
    /// anew between this memo's `202` (as the old device) and its record, so the re-registration's marking
    /// missed it. The handover names the device that made it, and the new device's `404` for it is still no
    /// news of delivery: the memo fails kept whole, never `sent` with its body erased.
    @Test func aHandoverRecordedAfterTheReRegistrationIsStillTheOldDevices() throws {
        var pair = try Pair(.sqlite, steered: true)
        defer { pair.stop() }
        let (mail, id) = try Self.heldAtTheRelay(pair, "memo handed over just before a re-registration")
        pair.composer.stop()
        let devices = try Self.relayDevices(pair)
        #expect(devices.count == 1)
        for device in devices { try pair.relay.application.service.revoke(deviceID: device) }
        // What the race leaves behind: the old secret forgotten by the other delivery, and this memo's
        // handover unmarked (written after the marking).
        let database = try DatabaseQueue(path: pair.composerDirectory.file("jotter.db"))
        try database.write { database in
            try database.run("DELETE FROM settings WHERE name LIKE 'sealed.jotter_relay[%].secret'")
            try database.run("UPDATE relay_handovers SET orphaned = 0")
            #expect(database.changes == 1)
        }
        database.close()
        pair.composer = try Pair.composer(pair.composerDirectory.path, relayPort: pair.relay.port)
        try pair.expectFailedKeptWhole(id, reason: "relay_reregistered")
        #expect(try pair.devices() == 2, "registered anew")
        mail.release()
        #expect(try pair.relay.finishDeliveries())
        #expect(mail.messages.filter { $0.body.contains("memo handed over just before") }.count == 1)
    }

    /// A relay that cannot mail anyone (its own credentials refused, so it holds everything) keeps the
    /// memo: the composer says so (`relay_held`), asks again, and has it `sent` once the relay mails it.
    @Test func aMemoHeldAtTheRelayIsShownSoAndSentWhenTheRelayMailsIt() throws {
        let pair = try Pair(.sqlite, steered: true) { $0.delivery.refusedRetestMilliseconds = 300 }
        defer { pair.stop() }
        let mail = try #require(pair.mail)
        try pair.verify()
        mail.fail(with: DeliveryFailure(.auth, permanent: true))
        let id = try pair.post("memo while the relay's password is wrong")
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["last_error"] as? String == "relay_held" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.delivered().isEmpty)
        // /healthz (and the page's line from it) says so: not "ok" while the relay cannot mail.
        func health() throws -> [String: Any] { try #require(try pair.composer.route("GET", "/healthz").json as? [String: Any]) }
        let held = try health()
        #expect(held["status"] as? String == "degraded", "\(held)")
        let relayState = held["relay"] as? [String: Any]
        #expect(relayState?["state"] as? String == "held" && relayState?["reason"] as? String == "relay_held", "\(held)")
        #expect(relayState?["since"] is String)
        // The relay's operator fixes its mail settings: the relay's next test mails it.
        mail.release()
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.delivered().map { $0.trimmingCharacters(in: .newlines) } == ["memo while the relay's password is wrong"])
        let healed = try health()
        #expect(healed["status"] as? String == "ok" && (healed["relay"] as? [String: Any])?["state"] as? String == "ok",
                "\(healed)")
    }

    /// The relay held the memo (it could not mail), then gave up on it (its provider refused the message
    /// itself): the composer's `/healthz` no longer says the relay holds memos and keeps trying — it said
    /// so until some other memo was delivered, however long that took.
    @Test func theHeldStateEndsWhenTheRelaySaysAnythingElse() throws {
        let pair = try Pair(.sqlite, steered: true) { $0.delivery.refusedRetestMilliseconds = 300 }
        defer { pair.stop() }
        let mail = try #require(pair.mail)
        try pair.verify()
        mail.fail(with: DeliveryFailure(.auth, permanent: true))
        let id = try pair.post("memo the relay holds, then gives up on")
        func relayState() throws -> String? {
            ((try pair.composer.route("GET", "/healthz").json as? [String: Any])?["relay"] as? [String: Any])?["state"] as? String
        }
        #expect(try pair.composer.waitUntil(timeout: 30) { try relayState() == "held" })
        mail.fail(with: DeliveryFailure(.rejected, permanent: true))
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "failed" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.composer.waitUntil(timeout: 10) { try relayState() == "ok" }, "\((try? relayState()) ?? nil)")
    }

    /// The composer of `pair` made again to reach the relay through `login_wall.py` (its flag files `wall`,
    /// `drop`, `busy` and `gone` in the relay's directory), and one memo `text` posted that the relay holds
    /// (its mail refuses the login), `/healthz` saying so. The proxy is the caller's to stop.
    static func memoHeldBehindProxy(_ pair: inout Pair, _ text: String) throws -> (proxy: FixtureProcess, id: String) {
        let mail = try #require(pair.mail)
        let flags = ["wall", "drop", "busy", "gone"].map { pair.relayDirectory.file($0) }
        let proxy = try FixtureProcess(script: "login_wall.py", arguments: [String(pair.relay.port)] + flags,
                                       errorPath: pair.relayDirectory.file("proxy.stderr"))
        do {
            pair.composer.stop()
            pair.composer = try Pair.composer(pair.composerDirectory.file("proxied"), relayPort: proxy.port)
            try pair.verify()
            mail.fail(with: DeliveryFailure(.auth, permanent: true))
            let id = try pair.post(text)
            let held = try pair.composer.waitUntil(timeout: 30) { [pair] in try relayState(pair) == "held" }
            #expect(held, "the relay holds the memo")
            return (proxy, id)
        } catch {
            proxy.stop()
            throw error
        }
    }

    /// The relay's state as the composer's `/healthz` says it.
    static func relayState(_ pair: Pair) throws -> String? {
        ((try pair.composer.route("GET", "/healthz").json as? [String: Any])?["relay"] as? [String: Any])?["state"] as? String
    }

    /// While the relay holds the memo, answers that say nothing of it — a relay busy for a while (503) —
    /// leave `/healthz` saying "held": it does not flap to "ok" between two questions.
    @Test func theHeldStateStaysThroughAnswersThatSayNothing() throws {
        var pair = try Pair(.sqlite, steered: true) { $0.delivery.refusedRetestMilliseconds = 300 }
        defer { pair.stop() }
        let mail = try #require(pair.mail)
        let busy = pair.relayDirectory.file("busy")
        let (proxy, id) = try Self.memoHeldBehindProxy(&pair, "memo the relay holds while it is busy")
        defer { proxy.stop() }
        func relayState() throws -> String? { try Self.relayState(pair) }
        let before = try pair.entry(id)["attempts"] as? Int ?? 0
        #expect(FileManager.default.createFile(atPath: busy, contents: Data()))
        var seen = Set<String>()
        #expect(try pair.composer.waitUntil(timeout: 30) {
            seen.insert(try relayState() ?? "none")
            return (try pair.entry(id)["attempts"] as? Int ?? 0) >= before + 2
        }, "\((try? pair.entry(id)) ?? [:])")
        #expect(seen == ["held"], "\(seen)")
        try FileManager.default.removeItem(atPath: busy)
        mail.release()
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.composer.waitUntil(timeout: 10) { try relayState() == "ok" })
    }

    /// A `404` that is not the relay's own (a proxy whose backend is away answers `404 page not found`) says
    /// nothing of the memo: it was taken for "the relay forgot it, so it was delivered", and a memo the relay
    /// still held was marked sent and erased here.
    @Test func aProxysNotFoundIsNotTakenForDelivered() throws {
        var pair = try Pair(.sqlite, steered: true) { $0.delivery.refusedRetestMilliseconds = 300 }
        defer { pair.stop() }
        let mail = try #require(pair.mail)
        let gone = pair.relayDirectory.file("gone")
        let (proxy, id) = try Self.memoHeldBehindProxy(&pair, "memo the relay holds while its proxy says 404")
        defer { proxy.stop() }
        let before = try pair.entry(id)["attempts"] as? Int ?? 0
        #expect(FileManager.default.createFile(atPath: gone, contents: Data()))
        #expect(try pair.composer.waitUntil(timeout: 60) { (try pair.entry(id)["attempts"] as? Int ?? 0) >= before + 2 },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.entry(id)["status"] as? String != "sent", "\((try? pair.entry(id)) ?? [:])")
        try FileManager.default.removeItem(atPath: gone)
        mail.release()
        #expect(try pair.composer.waitUntil(timeout: 60) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
    }

    /// A memo the relay it was handed to still holds is that relay's to deliver: pointing the composer
    /// at another relay meanwhile must not post it there too. Once a memo is `sent`, its handover is
    /// forgotten.
    @Test func aMemoHandedToTheOldRelayIsNotPostedToTheNewOne() throws {
        var pair = try Pair(.sqlite, steered: true)
        defer { pair.stop() }
        let mail = try #require(pair.mail)
        try pair.verify()
        let first = try pair.post("memo delivered at once")
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(first)["status"] as? String == "sent" })
        mail.block()
        let id = try pair.post("memo the old relay holds")
        #expect(mail.waitUntilBlocked(timeout: 30), "the old relay never tried to mail it")
        // Asked about and waiting for the next question (not in the middle of one) when the composer stops.
        #expect(try pair.composer.waitUntil(timeout: 30) {
            let entry = try pair.entry(id)
            return entry["last_error"] as? String == "relay_pending" && entry["status"] as? String == "retrying"
        }, "\((try? pair.entry(id)) ?? [:])")
        let handovers = { (composer: TestServer) throws -> [String] in
            try composer.application.outbox.database.read { database in
                try database.statement("SELECT memo_id FROM relay_handovers ORDER BY memo_id").rows([]) { $0.text(0) ?? "" }
            }
        }
        #expect(try handovers(pair.composer) == [id], "the sent memo's handover is still kept")

        let otherDirectory = TemporaryDirectory()
        let other = try RelayServer(dataDirectory: otherDirectory.path)
        defer { other.stop() }
        let before = try pair.entry(id)
        pair.composer.stop()
        pair.composer = try Pair.composer(pair.composerDirectory.path, relayPort: other.port)
        #expect(try pair.composer.waitUntil(timeout: 30) { try pair.entry(id)["status"] as? String == "sent" },
                "before: \(before) after: \((try? pair.entry(id)) ?? [:]) \(pair.composer.logs.captured.suffix(3000))")
        #expect(try other.mails(to: Self.address).isEmpty)
        let registered = try other.outbox.database.read { database in
            try database.statement("SELECT COUNT(*) FROM relay_devices").firstRow { $0.int64(0) } ?? -1
        }
        #expect(registered == 0, "the new relay was asked to take the memo")

        mail.release()
        #expect(try pair.relay.finishDeliveries())
        #expect(try pair.delivered().map { $0.trimmingCharacters(in: .newlines) }.sorted()
                == ["memo delivered at once", "memo the old relay holds"])
    }

    @Test(arguments: RelayStoreKind.available)
    func anAddressReplacedByAnotherIsForgottenByTheRelay(store kind: RelayStoreKind) throws {
        // The new address is the old inbox with a tag: the relay's minute between two codes for one
        // inbox would refuse its code.
        let pair = try Pair(kind) { $0.codes.cooldownMilliseconds = 0 }
        defer { pair.stop() }
        try pair.verify()
        #expect(try pair.store.verifiedDestinationCount(on: pair.relay) == 1)
        // A new address (with a `+`) replaces the first; the relay then keeps only the new one.
        let other = "ana+notes@example.com"
        try pair.verify(other)
        #expect((try pair.page("GET", "/destination").json as? [String: Any])?["address"] as? String == other)
        #expect(try pair.store.verifiedDestinationCount(on: pair.relay) == 1, "the first address is still kept")
        let id = try pair.post("memo after the change")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(id)["status"] as? String == "sent" })
        #expect(TestServer.waitUntil(timeout: 20) { (try? pair.delivered(to: other).count) == 1 })
        #expect(try pair.delivered().isEmpty, "a memo went to the replaced address")
    }

    /// The same address verified again in other letters' case is the same address to the relay: the
    /// composer must not then tell the relay to forget "the old one", which is the one just verified.
    @Test(arguments: RelayStoreKind.available)
    func theSameAddressInOtherCaseStaysVerified(store kind: RelayStoreKind) throws {
        // The relay's minute between two codes for one address would refuse the second code.
        let pair = try Pair(kind) { $0.codes.cooldownMilliseconds = 0 }
        defer { pair.stop() }
        try pair.verify()
        let recased = "Ana@example.com"
        try pair.verify(recased)
        #expect(try pair.store.verifiedDestinationCount(on: pair.relay) == 1, "the relay forgot the verified address")
        let id = try pair.post("memo after the same address again")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
        #expect(JotterRelayAccount.identity("Ana@Example.COM") == JotterRelayAccount.identity("ana@example.com"))
        #expect(JotterRelayAccount.identity("ana+x@example.com") != JotterRelayAccount.identity("ana@example.com"))
    }

    @Test(arguments: RelayStoreKind.available)
    func theDeviceSecretIsSealedAndTheStandingSurvivesARestart(store kind: RelayStoreKind) throws {
        var pair = try Pair(kind)
        defer { pair.stop() }
        try pair.verify()
        let id = try pair.post("memo before restart")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(id)["status"] as? String == "sent" })
        pair.composer.stop()

        // Nowhere in the composer's files in clear: the secret is sealed under the outbox key.
        let files = try FileManager.default.subpathsOfDirectory(atPath: pair.composerDirectory.path)
        for file in files {
            let data = (try? Data(contentsOf: URL(fileURLWithPath: pair.composerDirectory.path + "/" + file))) ?? Data()
            #expect(data.range(of: Data("jrs_".utf8)) == nil, "a relay secret in clear in \(file)")
        }

        pair.composer = try Pair.composer(pair.composerDirectory.path, relayPort: pair.relay.port)
        #expect((try pair.page("GET", "/destination").json as? [String: Any])?["state"] as? String == "verified")
        let after = try pair.post("memo after restart")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(after)["status"] as? String == "sent" })
        let devices = try pair.devices()
        #expect(devices == 1, "registered again after a restart")
        #expect(TestServer.waitUntil(timeout: 20) { (try? pair.delivered().count) == 2 })
    }

    @Test(arguments: RelayStoreKind.available)
    func theRelaysRefusalsReachThePageByCodeWithFixedText(store kind: RelayStoreKind) throws {
        let pair = try Pair(kind)
        defer { pair.stop() }
        let notAnAddress = try pair.page("POST", "/destination", ["address": "not an address"])
        #expect(notAnAddress.status == 400 && notAnAddress.errorCode == "invalid_address")
        let noPending = try pair.page("POST", "/destination/confirm", ["code": "123456"])
        #expect(noPending.status == 409 && noPending.errorCode == "no_pending_address")
        let unknownField = try pair.page("POST", "/destination", ["address": Self.address, "to": "x"])
        #expect(unknownField.status == 400 && unknownField.errorCode == "unknown_field")
        let longLanguage = try pair.page("POST", "/destination", ["address": Self.address,
                                                                  "language": String(repeating: "x", count: 36)])
        #expect(longLanguage.status == 400 && longLanguage.errorCode == "invalid_field")
        let longCode = try pair.page("POST", "/destination/confirm", ["code": String(repeating: "1", count: 33)])
        #expect(longCode.status == 400 && longCode.errorCode == "invalid_field")
        let notJSON = try pair.composer.route("POST", "/destination", headers: [("Sec-Fetch-Site", "same-origin"),
                                                                                 ("Content-Type", "text/plain")],
                                              body: Array(Self.address.utf8))
        #expect(notJSON.status == 415)

        let known = try pair.relay.mailFiles(to: Self.address)
        #expect(try pair.page("POST", "/destination", ["address": Self.address]).status == 202)
        let code = try pair.relay.newCode(to: Self.address, known: known)
        let wrong = String(code.reversed()) == code ? "000000" : String(code.reversed())
        let refused = try pair.page("POST", "/destination/confirm", ["code": wrong == code ? "000001" : wrong])
        #expect(refused.status == 400 && refused.errorCode == "invalid_code", "\(refused.text)")
        let malformed = try pair.page("POST", "/destination/confirm", ["code": "12"])
        #expect(malformed.status == 400 && malformed.errorCode == "malformed_code", "\(malformed.text)")
        // A second code at once: the relay's cooldown, with its Retry-After.
        let again = try pair.page("POST", "/destination", ["address": Self.address])
        #expect(again.status == 429 && again.errorCode == "code_cooldown", "\(again.text)")
        #expect(Int(again.header("Retry-After") ?? "") ?? 0 > 0)
        #expect((try pair.page("GET", "/destination").json as? [String: Any])?["state"] as? String == "pending")

        // Another site cannot read or set the address.
        let crossSite = try pair.composer.route("GET", "/destination", headers: [("Sec-Fetch-Site", "cross-site")])
        #expect(crossSite.status == 403)
        let crossPost = try pair.composer.route("POST", "/destination", headers: [
            ("Origin", "https://evil.example"), ("Content-Type", "application/json"),
        ], body: Array(#"{"address":"eve@example.com"}"#.utf8))
        #expect(crossPost.status == 403)
    }

    @Test(arguments: RelayStoreKind.available)
    func theRelaysRateLimitFeedsTheRetryRules(store kind: RelayStoreKind) throws {
        let pair = try Pair(kind) { $0.limits.devicePerMinute = 1 }
        defer { pair.stop() }
        try pair.verify()
        let first = try pair.post("memo within the limit")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(first)["status"] as? String == "sent" })
        let second = try pair.post("memo beyond the limit")
        #expect(try pair.composer.waitUntil(timeout: 20) { try pair.entry(second)["status"] as? String == "retrying" })
        let entry = try pair.entry(second)
        #expect(entry["last_error"] as? String == "rate_limited")
        // Not the 50 ms backoff of this composer's policy: the relay's Retry-After (the minute's end).
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let next = try #require((entry["next_attempt_at"] as? String).flatMap(formatter.date(from:)))
        #expect(next.timeIntervalSinceNow > 0.9, "\(entry)")
    }

    /// The longest memo a composer takes, with a subject longer than a mail header line, reaches the
    /// relay and the inbox whole: the request's JSON (each `<`, `&`, `>` escaped as six bytes) is far
    /// over 256 KiB, and the subject is cut to 998 bytes with its whole text atop the body. Before,
    /// the relay refused both and the memo ended `rejected`.
    @Test func theLongestMemoWithALongSubjectArrivesWhole() throws {
        let pair = try Pair(.sqlite)
        defer { pair.stop() }
        try pair.verify()
        let subject = String(repeating: "Ü", count: 700)
        let body = String(repeating: "<&>", count: 85_000)
        let sent = try pair.page("POST", "/send", ["subject": subject, "body": body])
        #expect(sent.status == 204, "\(sent.status) \(sent.text)")
        let id = try #require(sent.header("X-Message-Id"))
        #expect(try pair.composer.waitUntil(timeout: 30) {
            try ["sent", "rejected"].contains(pair.entry(id)["status"] as? String)
        }, "\((try? pair.entry(id)) ?? [:])")
        #expect(try pair.entry(id)["status"] as? String == "sent", "\((try? pair.entry(id)) ?? [:])")
        #expect(TestServer.waitUntil(timeout: 20) {
            (try? pair.relay.mails(to: Self.address).contains { ($0.message["subject"] as? String)?.hasPrefix("Ü") == true }) == true
        })
        let mail = try #require(try pair.relay.mails(to: Self.address)
            .first { ($0.message["subject"] as? String)?.hasPrefix("Ü") == true })
        #expect(mail.message["subject"] as? String == String(repeating: "Ü", count: 497) + "…")
        #expect(RelayServer.sameBody(mail.message["body"], subject + "\n\n" + body), "the body arrived cut or changed")
    }

    @Test func aSubjectIsFittedToOneHeaderLineAtACharacter() {
        let limit = RelayConfiguration.maxSubjectBytes
        // Short enough: as it is; an empty body is the subject (the relay needs a body).
        #expect(JotterRelayTransport.fitted(subject: "buy milk", body: "") == ("buy milk", "buy milk"))
        #expect(JotterRelayTransport.fitted(subject: "buy milk", body: "2 litres") == ("buy milk", "2 litres"))
        let exact = String(repeating: "a", count: limit)
        #expect(JotterRelayTransport.fitted(subject: exact, body: "b") == (exact, "b"))
        // One byte more: cut, ending in an ellipsis, the whole subject first in the body.
        let over = exact + "z"
        let fitted = JotterRelayTransport.fitted(subject: over, body: "b")
        #expect(fitted.subject == String(repeating: "a", count: limit - 3) + "…")
        #expect(fitted.subject.utf8.count == limit)
        #expect(fitted.body == over + "\n\nb")
        #expect(JotterRelayTransport.fitted(subject: over, body: "").body == over)
        // Never inside a character: a family emoji (25 bytes of UTF-8) is kept whole or left out.
        let family = "👨‍👩‍👧‍👦"
        let families = String(repeating: family, count: 60)
        let cut = JotterRelayTransport.fitted(subject: families, body: "b").subject
        #expect(cut == String(repeating: family, count: (limit - 3) / 25) + "…")
    }

    @Test func withoutAJotterRelayThereIsNoDestinationToSet() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.path)
        defer { server.stop() }
        let response = try server.route("GET", "/destination")
        #expect(response.status == 404 && response.errorCode == "not_jotter_relay")
    }

    @Test(arguments: ["jotter+http://example.com", "jotter+https://", "jotter+https://u:p@relay.example.com"])
    func relayURLsThatAreRefused(url: String) {
        #expect(throws: RelayURL.Failure.self) { try RelayURL(url) }
    }

    @Test func aJotterRelayURLParses() throws {
        let relay = try RelayURL("jotter+https://relay.example.com:8443?invite=abc")
        #expect(relay.jotterRelay?.client.baseURL == "https://relay.example.com:8443")
        #expect(relay.transport.repeatsHarmlessly)
        #expect(relay.destination.hasPrefix("jotter+https://relay.example.com:8443"))
    }

    /// The relay took a memo (its 202 lost on the way back), then the page's Settings moved memos to
    /// another address: the retry's `Idempotency-Key` is the memo's, its `to` another, so the relay
    /// answers 409 and names the message it took. The composer follows that message — the memo went to
    /// the address verified when it was sent — instead of failing a delivered memo (and, once the relay
    /// forgot the key a day later, posting it again to the new address).
    @Test func aMemoTakenBeforeTheAddressChangedIsFollowedNotFailed() throws {
        let fixture = try AccountFixture()
        defer { fixture.stop() }
        let relay = fixture.relay, account = fixture.account
        try Self.verify("ana@example.com", account: account, at: relay)
        let memo = MailMessage(id: "018bcfe5-6800-7000-8000-00000000a1b2", date: 1_764_581_405_000,
                               from: MailAddress(address: "jotter@localhost"), to: MailAddress(address: "me@localhost"),
                               subject: "taken before the move", body: "taken before the move")
        // The first POST, whose answer was lost: the relay has it for ana.
        var first = JSONWriter()
        first.object { $0.field("to", "ana@example.com"); $0.field("subject", memo.subject); $0.field("body", memo.body) }
        #expect(try account.call("/v1/messages", json: first.bytes, idempotencyKey: memo.id).status == 202)
        try Self.verify("bob@example.com", account: account, at: relay)

        let transport = JotterRelayTransport(account: account)
        _ = try transport.send(memo)  // before: DeliveryFailure(.conflict, permanent: true), the memo failed
        #expect(try relay.finishDeliveries(timeout: 60))
        let toAna = try relay.mails(to: "ana@example.com").filter { ($0.message["body"] as? String ?? "").contains("taken before the move") }
        let toBob = try relay.mails(to: "bob@example.com").filter { ($0.message["body"] as? String ?? "").contains("taken before the move") }
        #expect(toAna.count == 1 && toBob.isEmpty, "once, to the address it was sent to: \(toAna.count) / \(toBob.count)")
    }

    /// A memo that waited here for the relay (down, or its address not yet verified) reaches the inbox
    /// dated when it was written, not when the relay took it: the composer says `written_at`.
    @Test func aMemoThatWaitedIsDatedWhenItWasWritten() throws {
        let fixture = try AccountFixture()
        defer { fixture.stop() }
        let relay = fixture.relay, account = fixture.account
        try Self.verify("ana@example.com", account: account, at: relay)
        let written = Int64(Date().timeIntervalSince1970 * 1000) - 3 * 3_600_000  // three hours in the outbox
        let memo = MailMessage(id: "018bcfe5-6800-7000-8000-00000000d4e1", date: written,
                               from: MailAddress(address: "jotter@localhost"), to: MailAddress(address: "me@localhost"),
                               subject: "written on the train", body: "written on the train")
        _ = try JotterRelayTransport(account: account).send(memo)
        #expect(try relay.finishDeliveries(timeout: 60))
        let mail = try #require(try relay.mails(to: "ana@example.com")
            .first { ($0.message["body"] as? String ?? "").contains("written on the train") })
        #expect(mail.message["date"] as? String == Timestamp.rfc5322(milliseconds: written))
    }

    /// Verifies `address` for `account` at `relay` directly (no composer page): asks for a code, reads it
    /// from the relay's mail, confirms it.
    static func verify(_ address: String, account: JotterRelayAccount, at relay: RelayServer) throws {
        let known = try relay.mailFiles(to: address)
        #expect(try account.requestCode(address: address, language: "en").status == 202)
        #expect(try account.confirm(code: try relay.newCode(to: address, known: known))?.status == 200)
    }

    /// Runs `body` with a fresh relay fixture, a composer's account at it through `older_relay.py` (refusing
    /// the request members `names`) and the path of the proxy's log; stops all of it afterwards.
    static func withAccountBehindOlderRelay(refusing names: String,
                                            _ body: (AccountFixture, JotterRelayAccount, String) throws -> Void) throws {
        let fixture = try AccountFixture()
        defer { fixture.stop() }
        let log = fixture.relayDirectory.file("older_relay.stderr")
        let (proxy, outbox, account) = try accountBehindOlderRelay(fixture, refusing: names, log: log)
        defer {
            outbox.close()
            proxy.stop()
        }
        try body(fixture, account, log)
    }

    /// A composer's account at `fixture`'s relay through `older_relay.py` (refusing the request members
    /// `names`, its log at `log`), on an outbox of its own: the proxy and the outbox, for the caller to stop.
    private static func accountBehindOlderRelay(_ fixture: AccountFixture, refusing names: String, log: String) throws
        -> (proxy: FixtureProcess, outbox: Outbox, account: JotterRelayAccount) {
        let proxy = try FixtureProcess(script: "older_relay.py", arguments: [String(fixture.relay.port), names], errorPath: log)
        let outbox: Outbox
        do {
            outbox = try Outbox(path: fixture.composerDirectory.file("behind-proxy.db"), key: try SymmetricKey.random(),
                                clock: ManualClock())
        } catch {
            proxy.stop()
            throw error
        }
        let account = JotterRelayAccount(
            client: JotterRelayClient(baseURL: "http://127.0.0.1:\(proxy.port)", host: "127.0.0.1", port: proxy.port,
                                      caFile: nil, timeoutSeconds: 10),
            invite: nil)
        account.attach(outbox.settings)
        return (proxy, outbox, account)
    }

    /// A new address replaces the verified one, and the relay forgets the old one — without either address
    /// in a URL, where the access log of a proxy in front of the relay would keep it.
    @Test func noAddressGoesIntoAURL() throws {
        try Self.withAccountBehindOlderRelay(refusing: "none") { fixture, account, requests in
            for address in ["ana@example.com", "bo@example.com"] {
                try Self.verify(address, account: account, at: fixture.relay)
            }
            let listed = try account.call("/v1/destinations")
            guard case .array(let entries)? = listed.json?["destinations"] else {
                Issue.record("no list: \(listed.status)")
                return
            }
            let addresses = entries.compactMap { $0["address"]?.string }
            #expect(addresses == ["bo@example.com"], "the relay still keeps the replaced address: \(addresses)")
            let lines = ((try? String(contentsOfFile: requests, encoding: .utf8)) ?? "").split(separator: "\n")
                .filter { $0.hasPrefix("request ") }
            #expect(lines.contains { $0.hasPrefix("request POST /v1/destinations/forget ") }, "\(lines)")
            #expect(!lines.contains { $0.contains("example.com") || $0.contains("%40") || $0.contains("@") }, "\(lines)")
        }
    }

    /// A relay from before `written_at` and client-proposed secrets (it refuses both as unknown members):
    /// the composer registers and sends all the same, without them, and the memo arrives once.
    @Test func aRelayFromBeforeTheNewerMembersStillTakesTheMemo() throws {
        try Self.withAccountBehindOlderRelay(refusing: "written_at,secret") { fixture, account, errors in
            let relay = fixture.relay
            try Self.verify("ana@example.com", account: account, at: relay)
            let memo = MailMessage(id: "018bcfe5-6800-7000-8000-00000000d4e2", date: 1_764_581_405_000,
                                   from: MailAddress(address: "jotter@localhost"), to: MailAddress(address: "me@localhost"),
                                   subject: "to an older relay", body: "to an older relay")
            _ = try JotterRelayTransport(account: account).send(memo)
            #expect(try relay.finishDeliveries(timeout: 60))
            #expect(try relay.mails(to: "ana@example.com")
                .filter { ($0.message["body"] as? String ?? "").contains("to an older relay") }.count == 1)
            let refused = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            #expect(refused.contains("refused secret") && refused.contains("refused written_at"), "\(refused)")
            #expect(try fixture.store.deviceCount(on: relay) == 1)
        }
    }

    /// A relay whose registration limit refuses this network (a household behind one address, past
    /// 10 composers an hour) is not "unreachable": the page hears `429 rate_limited` and when to ask again.
    @Test func aRelaysLimitIsSaidAsALimitNotAsUnreachable() throws {
        let pair = try Pair(.sqlite) { $0.limits.registrationsPerIPHour = 1 }
        defer { pair.stop() }
        _ = try pair.relay.register()  // another composer on this network took the hour's one registration
        let asked = try pair.page("POST", "/destination", ["address": ComposerRelayTests.address, "language": "en"])
        #expect(asked.status == 429, "\(asked.status) \(asked.text)")
        #expect((asked.json as? [String: Any]).flatMap { $0["error"] as? [String: Any] }?["code"] as? String == "rate_limited")
        // When the hour's window frees a registration: the relay's windows end on the hour (UTC), so in an
        // hour's last minute this is under 60 s (the check said "over 60", and failed then).
        let retry = Int(asked.header("Retry-After") ?? "") ?? 0
        let toTheHour = 3600 - Int(Date().timeIntervalSince1970) % 3600
        #expect(abs(retry - toTheHour) <= 5 || abs(retry + 3600 - toTheHour) <= 5,
                "Retry-After \(retry) s, the hour ends in \(toTheHour) s")
    }

    /// A composer allowed large requests (`--max-body 1048576`) in front of a relay that takes 256 KiB of
    /// text: the memo over that is refused at once with 413 (the writer still has it), not accepted with
    /// 204 and then failed as "rejected" by the relay, which no Retry could mend.
    @Test func aMemoOverTheRelaysLimitIsRefusedWhenSent() throws {
        let relayDirectory = TemporaryDirectory(), composerDirectory = TemporaryDirectory()
        let store = try RelayTestStore(.sqlite)
        defer { store.release() }
        let relay = try RelayServer(dataDirectory: relayDirectory.path, store: store)
        defer { relay.stop() }
        let composer = try TestServer(dataDirectory: composerDirectory.path, maxBodyBytes: 1_048_576,
                                      relay: "jotter+http://127.0.0.1:\(relay.port)")
        defer { composer.stop() }
        let refused = try composer.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                         body: Array(String(repeating: "x", count: 300_000).utf8))
        #expect(refused.status == 413 && refused.errorCode == "too_large", "\(refused.status) \(refused.text)")
        #expect(refused.text.contains("Jotter relay"))
        let fits = try composer.route("POST", "/send", headers: [("Content-Type", "text/plain")],
                                      body: Array(String(repeating: "y", count: 200_000).utf8))
        #expect(fits.status == 204)
        #expect(try composer.outbox.history.acceptedCount() == 1)
    }

    /// A 401 that is not the relay's (a proxy's login wall in front of it, maintenance) leaves the device
    /// and its verified address as they are: the memo waits, and goes once the wall is gone. Before, one
    /// such 401 threw the device away, registered another, and sent the user to verify again.
    @Test func aLoginWallInFrontOfTheRelayForgetsNothing() throws {
        var pair = try Pair(.sqlite)
        defer { pair.stop() }
        let relay = pair.relay, composerDirectory = TemporaryDirectory()
        let wall = pair.relayDirectory.file("wall")
        let proxy = try FixtureProcess(script: "login_wall.py", arguments: [String(relay.port), wall],
                                       errorPath: pair.relayDirectory.file("wall.stderr"))
        defer { proxy.stop() }
        pair.composer.stop()  // the pair's own, straight to the relay: this one goes through the proxy
        pair.composer = try TestServer(dataDirectory: composerDirectory.path, relay: "jotter+http://127.0.0.1:\(proxy.port)") {
            $0.delivery.retryPolicy = RetryPolicy(baseMilliseconds: 50, capMilliseconds: 1000)
            $0.delivery.offlineProbeMilliseconds = 200
            $0.delivery.refusedRetestMilliseconds = 300
        }
        let composer = pair.composer
        func page(_ method: String, _ path: String, _ object: [String: Any]? = nil) throws -> RawHTTP.Response {
            try composer.route(method, path, headers: [("Sec-Fetch-Site", "same-origin"), ("Content-Type", "application/json")],
                               body: object.map { Array(try JSONSerialization.data(withJSONObject: $0)) } ?? [])
        }
        let known = try relay.mailFiles(to: Self.address)
        #expect(try page("POST", "/destination", ["address": Self.address, "language": "en"]).status == 202)
        #expect(try page("POST", "/destination/confirm", ["code": try relay.newCode(to: Self.address, known: known)]).status == 200)
        #expect(try pair.devices() == 1)

        #expect(FileManager.default.createFile(atPath: wall, contents: Data()))
        let id = try pair.post("memo behind a login wall")
        #expect(try composer.waitUntil(timeout: 30) { (try pair.entry(id)["attempts"] as? Int ?? 0) >= 1 })
        try FileManager.default.removeItem(atPath: wall)
        #expect(try composer.waitUntil(timeout: 60) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
        let destination = try #require(try page("GET", "/destination").json as? [String: Any])
        #expect(destination["address"] as? String == Self.address, "still verified: \(destination)")
        #expect(try pair.devices() == 1, "no second registration")
        #expect(try relay.finishDeliveries(timeout: 60))
        #expect(try relay.mails(to: Self.address).filter { ($0.message["body"] as? String ?? "").contains("behind a login wall") }.count == 1)
    }

    /// The answer to the composer's registration is lost (its one invite spent by it): the next try
    /// proposes the same secret and gets the same device. Before, the relay's secret was lost with the
    /// answer, the invite was "used", and every memo waited for a new invite from the operator.
    @Test func aLostRegistrationAnswerCostsNeitherTheInviteNorTheDevice() throws {
        var pair = try Pair(.sqlite) { $0.registration = .invite }
        defer { pair.stop() }
        let relay = pair.relay, composerDirectory = TemporaryDirectory()
        let drop = pair.relayDirectory.file("drop")
        let proxy = try FixtureProcess(script: "login_wall.py", arguments: [String(relay.port), pair.relayDirectory.file("wall"), drop],
                                       errorPath: pair.relayDirectory.file("proxy.stderr"))
        defer { proxy.stop() }
        let invite = try relay.application.service.issueInvite().invite
        pair.composer.stop()
        pair.composer = try Pair.composer(composerDirectory.path, relayPort: proxy.port, query: "?invite=\(invite)")
        #expect(FileManager.default.createFile(atPath: drop, contents: Data()))
        let lost = try pair.page("POST", "/destination", ["address": Self.address, "language": "en"])
        #expect(lost.status == 502, "no answer came: \(lost.status) \(lost.text)")
        #expect(try pair.devices() == 1, "the relay registered it all the same")
        try FileManager.default.removeItem(atPath: drop)
        try pair.verify()  // registers again with the same secret: the same device
        #expect(try pair.devices() == 1, "no second device")
        let id = try pair.post("memo after a lost registration")
        #expect(try pair.composer.waitUntil(timeout: 60) { try pair.entry(id)["status"] as? String == "sent" },
                "\((try? pair.entry(id)) ?? [:])")
    }

    /// A relay on SQLite and a composer's account of it, without a composer server: the account's calls
    /// as the transport and the page's routes make them.
    struct AccountFixture {
        let relayDirectory = TemporaryDirectory(), composerDirectory = TemporaryDirectory()
        let store: RelayTestStore
        let relay: RelayServer
        let outbox: Outbox
        let account: JotterRelayAccount

        init() throws {
            store = try RelayTestStore(.sqlite)
            relay = try RelayServer(dataDirectory: relayDirectory.path, store: store)
            outbox = try Outbox(path: composerDirectory.file("jotter.db"), key: try SymmetricKey.random(), clock: ManualClock())
            account = JotterRelayAccount(
                client: JotterRelayClient(baseURL: "http://127.0.0.1:\(relay.port)", host: "127.0.0.1", port: relay.port,
                                          caFile: nil, timeoutSeconds: 10),
                invite: nil)
            account.attach(outbox.settings)
        }

        func stop() {
            outbox.close()
            relay.stop()
            store.release()
        }
    }

    /// Two deliveries running when the relay forgets this composer both meet `401` with the same
    /// secret. The first to get there registers again; the other must not throw that new secret away
    /// (which would register a third time and leave the second device orphaned on the relay).
    @Test func twoRefusalsOfOneSecretRegisterOnceMore() throws {
        let fixture = try AccountFixture()
        defer { fixture.stop() }
        let relay = fixture.relay, account = fixture.account, store = fixture.store

        let first = try account.secret()
        #expect(try relay.json("DELETE", "/v1/devices/me", secret: first).status == 204)
        #expect(try account.call("/v1/destinations").status == 200, "the first refusal registers again")
        let second = try account.secret()
        #expect(second != first)
        try account.forget(secret: first)  // the other delivery's refusal, arriving late
        #expect(try account.secret() == second)
        #expect(try account.call("/v1/destinations").status == 200)
        #expect(try store.deviceCount(on: relay) == 2, "the revoked device and its one successor")
    }
}
