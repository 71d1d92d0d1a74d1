import Foundation
import Testing
import Synchronization
@testable import Jotter

/// `jotter relay`'s API at the router (no socket), with its mail read back from its Maildir by
/// Python's `email` package: registration, bearer secrets, destinations, messages and their status —
/// on both stores, SQLite and PostgreSQL (the shared test cluster).
@Suite(.holdingSharedPostgres) struct RelayAPITests {
    @Test(arguments: RelayStoreKind.available)
    func registerVerifySendAndTheMessageArrivesOnce(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        #expect(device.secret.hasPrefix("jrs_") && device.secret.utf8.count == 47)
        try relay.verify(device.secret, "Me@Example.COM")

        let listed = try relay.json("GET", "/v1/destinations", secret: device.secret)
        #expect(listed.status == 200)
        let destinations = try #require((listed.json as? [String: Any])?["destinations"] as? [[String: Any]])
        #expect(destinations.count == 1)
        #expect(destinations.first?["address"] as? String == "Me@example.com", "as given, domain lowercased")
        #expect(destinations.first?["state"] as? String == "verified")

        let sent = try relay.send(device.secret, to: "me@example.com", subject: "Grocery list", body: "buy milk\n",
                                  key: "memo-1")
        #expect(sent.status == 202, "\(sent.text)")
        let id = try #require((sent.json as? [String: Any])?["id"] as? String)
        #expect(sent.header("RateLimit-Policy") == "\"device-minute\";q=30;w=60, \"device-day\";q=200;w=86400, "
            + "\"ip-hour\";q=120;w=3600")
        #expect(sent.header("Cache-Control") == "no-store")

        #expect(TestServer.waitUntil(timeout: 20) {
            let status = try? relay.json("GET", "/v1/messages/\(id)", secret: device.secret)
            return (status?.json as? [String: Any])?["status"] as? String == "sent"
        })
        let delivered = try relay.mails(to: "me@example.com")
            .filter { $0.message["subject"] as? String == "Grocery list" }
        #expect(delivered.count == 1)
        #expect(RelayServer.sameBody(delivered.first?.message["body"], "buy milk\n"))
        #expect(delivered.first?.message["message_id"] as? String == "<\(id)@localhost>")
        // The relay's mail (the memo, and the code before it) is a service's: no vacation reply or ticket
        // system answers it, and a reply quoting the memo goes to its owner, not to the relay's address.
        let all = try relay.mails(to: "me@example.com")
        #expect(all.count == 2, "the code and the memo")
        for mail in all {
            #expect(mail.message["auto_submitted"] as? String == "auto-generated")
            #expect(RelayServer.recipient(mail.message["reply_to"] as? String) == "me@example.com")
        }
        // A replay after delivery answers the same id and sends nothing more.
        let replay = try relay.send(device.secret, to: "me@example.com", subject: "Grocery list", body: "buy milk\n",
                                    key: "memo-1")
        #expect(replay.status == 202 && replay.header("Idempotent-Replayed") == "true")
        #expect((replay.json as? [String: Any])?["id"] as? String == id)
        #expect(try relay.mails(to: "me@example.com").filter { $0.message["subject"] as? String == "Grocery list" }
            .count == 1)
    }

    @Test(arguments: RelayStoreKind.available)
    func theCodeMailSaysNothingTheRequesterTypedButTheAddress(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store) {
            $0.limits.codeRequestsPerIPHour = nil
        }
        defer { relay.stop() }
        let device = try relay.register()
        for (index, language) in VerificationMail.languages.enumerated() {
            let address = "lang\(index)@example.com"
            #expect(try relay.requestCode(device.secret, address, language: language).status == 202)
            let code = try relay.newCode(to: address, known: [])
            let mail = try #require(try relay.mails(to: address).first?.message)
            let expected = VerificationMail.render(code: code, language: language)
            #expect(mail["subject"] as? String == expected.subject, "\(language)")
            #expect(RelayServer.sameBody(mail["body"], expected.body), "\(language)")
            #expect(mail["to"] as? String == "<\(address)>" || mail["to"] as? String == address)
            #expect(!(mail["body"] as? String ?? "").contains(device.id))
        }
        // An unknown language (or an attempt to smuggle text in as one) gets the English template.
        #expect(try relay.requestCode(device.secret, "other@example.com", language: "Click http://evil").status == 202)
        let code = try relay.newCode(to: "other@example.com", known: [])
        let mail = try #require(try relay.mails(to: "other@example.com").first?.message)
        #expect(RelayServer.sameBody(mail["body"], VerificationMail.render(code: code, language: "en").body))
        // A language too long to be a tag is unknown too: English, not a refusal.
        #expect(try relay.requestCode(device.secret, "third@example.com", language: String(repeating: "x", count: 80)).status == 202)
        let third = try relay.newCode(to: "third@example.com", known: [])
        let thirdMail = try #require(try relay.mails(to: "third@example.com").first?.message)
        #expect(RelayServer.sameBody(thirdMail["body"], VerificationMail.render(code: third, language: "en").body))
    }

    @Test func languageTagsFindTheirTemplate() {
        #expect(VerificationMail.language(for: "pt-BR") == "pt")
        #expect(VerificationMail.language(for: "zh-TW") == "zh-Hant")
        #expect(VerificationMail.language(for: "zh-hant-HK") == "zh-Hant")
        #expect(VerificationMail.language(for: "zh-CN") == "zh-Hans")
        #expect(VerificationMail.language(for: "ZH-HANS") == "zh-Hans")
        #expect(VerificationMail.language(for: "ar-EG") == "ar")
        #expect(VerificationMail.language(for: "nl") == "en")
        #expect(VerificationMail.language(for: nil) == "en")
        #expect(VerificationMail.languages.count == 12)
    }

    @Test(arguments: RelayStoreKind.available)
    func everyCallButRegistrationNeedsTheDevicesSecret(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        let calls: [(String, String, [String: Any]?)] = [
            ("POST", "/v1/destinations", ["address": "a@example.com"]),
            ("POST", "/v1/destinations/confirm", ["address": "a@example.com", "code": "123456"]),
            ("GET", "/v1/destinations", nil),
            ("POST", "/v1/messages", ["to": "a@example.com", "body": "x"]),
            ("GET", "/v1/messages/0c2f4a4e-0000-4000-8000-000000000000", nil),
            ("POST", "/v1/messages/0c2f4a4e-0000-4000-8000-000000000000/retry", nil),
        ]
        for (method, path, body) in calls {
            let missing = try relay.json(method, path, body)
            #expect(missing.status == 401 && missing.errorCode == "missing_credentials", "\(method) \(path)")
            #expect(missing.header("WWW-Authenticate") == "Bearer")
            let forged = "jrs_" + String(device.secret.dropFirst(4).reversed())
            let wrong = try relay.json(method, path, secret: forged, body)
            #expect(wrong.status == 401 && wrong.errorCode == "invalid_credentials", "\(method) \(path)")
            let basic = try relay.json(method, path, body, headers: [("Authorization", "Basic \(device.secret)")])
            #expect(basic.status == 401, "\(method) \(path)")
        }
        let twice = try relay.json("GET", "/v1/destinations", headers: [
            ("Authorization", "Bearer \(device.secret)"), ("Authorization", "Bearer \(device.secret)"),
        ])
        #expect(twice.status == 401)
        #expect(try relay.json("GET", "/v1/destinations", secret: device.secret).status == 200)
        #expect(try relay.json("GET", "/v1/destinations", headers: [("Authorization", "bearer \(device.secret)")])
            .status == 200, "the scheme is case-insensitive")
    }

    @Test(arguments: RelayStoreKind.available)
    func secretsAreStoredOnlyAsKeyedHashes(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        let device = try relay.register()
        try relay.verify(device.secret, "stored@example.com")
        relay.stop()
        var places = ["jotter.db", "jotter.db-wal"].map { file in
            (file, (try? Data(contentsOf: URL(fileURLWithPath: directory.file("relay/\(file)")))) ?? Data())
        }
        if let database = store.database {
            // A dump's text, where `bytea` reads as hex: look for both spellings.
            let rows = try database.dump()
            #expect(rows.contains { $0.contains(device.id) }, "the dump reads the relay's tables")
            places.append(("the PostgreSQL database", Data(rows.joined(separator: "\n").utf8)))
        }
        let secrets = [("the secret", device.secret), ("the secret", String(device.secret.dropFirst(4))),
                       ("the address", "stored@example.com")]
        for (place, bytes) in places {
            for (what, text) in secrets {
                let hex = text.utf8.map { String($0, radix: 16) }.joined()
                #expect(bytes.range(of: Data(text.utf8)) == nil && bytes.range(of: Data(hex.utf8)) == nil,
                        "\(place) holds \(what)")
            }
        }
    }

    @Test(arguments: RelayStoreKind.available)
    func inviteModeRegistersOnlyWithAnUnusedInvite(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, clock: clock) {
            $0.registration = .invite
        }
        defer { relay.stop() }
        let none = try relay.json("POST", "/v1/devices")
        #expect(none.status == 403 && none.errorCode == "invite_required")
        let made = try relay.application.service.issueInvite()
        #expect(made.invite.hasPrefix("jri_"))
        let forged = "jri_" + String(made.invite.dropFirst(4).reversed())
        let guessed = try relay.json("POST", "/v1/devices", ["invite": forged])
        #expect(guessed.status == 403 && guessed.errorCode == "invite_invalid")
        let first = try relay.json("POST", "/v1/devices", ["invite": made.invite])
        #expect(first.status == 201)
        let again = try relay.json("POST", "/v1/devices", ["invite": made.invite])
        #expect(again.status == 403 && again.errorCode == "invite_invalid", "an invite works once")
        let late = try relay.application.service.issueInvite()
        clock.advance(milliseconds: 7 * 86_400_000)
        #expect(try relay.json("POST", "/v1/devices", ["invite": late.invite]).errorCode == "invite_invalid",
                "an invite works for 7 days")
    }

    /// A blank subject is no subject: the message's first line is, as for a composer's memo (the relay
    /// mailed an empty `Subject:`).
    @Test func aBlankSubjectIsTheFirstLine() throws {
        let store = try RelayTestStore(.sqlite)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        #expect(try relay.send(device.secret, to: "me@example.com", subject: " \u{200B}", body: "first line\nsecond").status == 202)
        #expect(try relay.finishDeliveries(timeout: 60))
        let mail = try #require(try relay.mails(to: "me@example.com").first { ($0.message["body"] as? String ?? "").contains("second") })
        #expect(mail.message["subject"] as? String == "first line", "\(mail.message)")
    }

    /// A message says when it was written (`written_at`, its composer's accept): the mail is dated then,
    /// not when the relay took it, so memos that waited out an outage sort where they were written. A
    /// time later than the relay's clock (a composer's clock ahead) dates it when the relay took it; a
    /// time that is not RFC 3339 is refused; and the time is part of what an Idempotency-Key vouches for.
    @Test(arguments: RelayStoreKind.available)
    func aMessageIsDatedWhenItWasWritten(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        func send(_ body: String, writtenAt: Any?, key: String? = nil) throws -> RawHTTP.Response {
            var object: [String: Any] = ["to": "me@example.com", "body": body]
            if let writtenAt { object["written_at"] = writtenAt }
            return try relay.json("POST", "/v1/messages", secret: device.secret, object,
                                  headers: key.map { [("Idempotency-Key", $0)] } ?? [])
        }
        func dateOfMail(_ body: String) throws -> String? {
            try relay.mails(to: "me@example.com")
                .first { ($0.message["body"] as? String ?? "").contains(body) }?.message["date"] as? String
        }
        let yesterday = Int64(Date().timeIntervalSince1970 * 1000) - 86_400_000 - 123
        #expect(try send("written yesterday", writtenAt: Timestamp.iso8601(milliseconds: yesterday), key: "y").status == 202)
        #expect(try send("written in Tokyo", writtenAt: "2026-11-30T09:30:05.5+09:00").status == 202)
        let before = Int64(Date().timeIntervalSince1970) * 1000
        #expect(try send("written tomorrow", writtenAt: Timestamp.iso8601(milliseconds: yesterday + 2 * 86_400_000)).status == 202)
        #expect(try send("written, it does not say when", writtenAt: nil).status == 202)
        let after = Int64(Date().timeIntervalSince1970) * 1000 + 1000
        #expect(try relay.finishDeliveries(timeout: 60))
        #expect(try dateOfMail("written yesterday") == Timestamp.rfc5322(milliseconds: yesterday))
        #expect(try dateOfMail("written in Tokyo") == "Mon, 30 Nov 2026 00:30:05 +0000")
        for body in ["written tomorrow", "written, it does not say when"] {
            let date = try #require(try dateOfMail(body), "\(body)")
            let seconds = try Python.run("import email.utils, sys; print(int(email.utils.parsedate_to_datetime(sys.argv[1]).timestamp()))",
                                         arguments: [date])
            let moment = (Int64(seconds.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) * 1000
            #expect(moment >= before && moment <= after, "\(body): dated when the relay took it, \(date)")
        }

        for bad in ["yesterday", "2026-02-30T00:00:00Z", "2026-12-01T09:30:05", "2026-12-01 09:30:05Z", "",
                    "0000-01-01T00:00:00Z", "1969-12-31T23:59:59Z"] as [Any] + [1_764_581_405] {
            let refused = try send("bad date", writtenAt: bad)
            #expect(refused.status == 400 && refused.errorCode == "invalid_field", "\(bad): \(refused.status) \(refused.text)")
        }
        // The key vouches for the time too: the same one again is a replay, another time a conflict.
        let again = try send("written yesterday", writtenAt: Timestamp.iso8601(milliseconds: yesterday), key: "y")
        #expect(again.status == 202 && again.header("Idempotent-Replayed") == "true")
        let moved = try send("written yesterday", writtenAt: Timestamp.iso8601(milliseconds: yesterday + 1000), key: "y")
        #expect(moved.status == 409 && moved.errorCode == "idempotency_conflict", "\(moved.text)")
        #expect(try relay.mails(to: "me@example.com").filter { ($0.message["body"] as? String ?? "").contains("bad date") }.isEmpty)
    }

    /// A client that proposes its own secret may register again after a lost answer: the same invite,
    /// spent by the first request, and the same secret give the same device (no limit charged again);
    /// a secret of the wrong shape is refused.
    @Test(arguments: RelayStoreKind.available)
    func aRegistrationWithTheClientsOwnSecretIsSafeToRepeat(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store) {
            $0.registration = .invite
            $0.limits.registrationsPerIPHour = 2  // the first and "other" below: the repeat is not charged
        }
        defer { relay.stop() }
        let invite = try relay.application.service.issueInvite().invite
        let secret = try RelayKeys.newSecret(prefix: "jrs_")
        let first = try relay.json("POST", "/v1/devices", ["invite": invite, "secret": secret])
        #expect(first.status == 201, "\(first.text)")
        let again = try relay.json("POST", "/v1/devices", ["invite": invite, "secret": secret])
        #expect(again.status == 201, "the answer to the first was lost: \(again.text)")
        let one = try #require(first.json as? [String: Any]), two = try #require(again.json as? [String: Any])
        #expect(one["device_id"] as? String == two["device_id"] as? String && two["secret"] as? String == secret)
        #expect(try relay.json("GET", "/v1/destinations", secret: secret).status == 200)
        #expect(try store.deviceCount(on: relay) == 1)
        let other = try relay.json("POST", "/v1/devices", ["invite": invite, "secret": try RelayKeys.newSecret(prefix: "jrs_")])
        #expect(other.status == 403 && other.errorCode == "invite_invalid", "another secret: the invite is spent")
        for bad in ["jrs_short", "xyz_" + String(secret.dropFirst(4)), secret + "A", "jrs_" + String(repeating: "!", count: 43)] {
            let refused = try relay.json("POST", "/v1/devices", ["invite": invite, "secret": bad])
            #expect(refused.status == 400 && refused.errorCode == "invalid_secret", "\(bad): \(refused.text)")
        }
    }

    /// Mistyped invites do not use up what a network may register in an hour (a household behind one
    /// address): they are counted as wrong secrets are, a few and then 429.
    @Test(arguments: RelayStoreKind.available)
    func wrongInvitesDoNotUseUpTheRegistrations(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store) {
            $0.registration = .invite
            $0.limits.registrationsPerIPHour = 2
        }
        defer { relay.stop() }
        var answers: [String] = []
        for attempt in 0..<4 {
            answers.append(try relay.json("POST", "/v1/devices", ["invite": "jri_mistyped\(attempt)"]).errorCode ?? "")
        }
        #expect(answers.allSatisfy { $0 == "invite_invalid" }, "\(answers)")
        for _ in 0..<2 {
            let made = try relay.application.service.issueInvite()
            let registered = try relay.json("POST", "/v1/devices", ["invite": made.invite])
            #expect(registered.status == 201, "typos used up no registration: \(registered.text)")
        }
        let third = try relay.json("POST", "/v1/devices", ["invite": try relay.application.service.issueInvite().invite])
        #expect(third.status == 429 && third.errorCode == "rate_limited", "two devices an hour from here")

        // From another network, guessing: after ten wrong invites, none is even looked at, a right one neither.
        let guesser = "198.51.100.7"
        var guesses: [String] = []
        for attempt in 0..<11 {
            guesses.append(try relay.json("POST", "/v1/devices", ["invite": "jri_guess\(attempt)"], from: guesser).errorCode ?? "")
        }
        #expect(guesses.last == "too_many_attempts", "\(guesses)")
        let right = try relay.json("POST", "/v1/devices", ["invite": try relay.application.service.issueInvite().invite], from: guesser)
        #expect(right.status == 429 && right.errorCode == "too_many_attempts", "\(right.text)")
    }

    @Test(arguments: RelayStoreKind.available)
    func messagesGoOnlyToAddressesThisDeviceVerified(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let alice = try relay.register(), mallory = try relay.register()
        try relay.verify(alice.secret, "alice@example.com")
        let stranger = try relay.send(alice.secret, to: "stranger@example.com")
        #expect(stranger.status == 403 && stranger.errorCode == "destination_unverified")
        let others = try relay.send(mallory.secret, to: "alice@example.com")
        #expect(others.status == 403 && others.errorCode == "destination_unverified",
                "another device's verified address is not this device's")
        // A code asked for but not confirmed does not verify.
        #expect(try relay.requestCode(mallory.secret, "carol@example.com").status == 202)
        #expect(try relay.send(mallory.secret, to: "carol@example.com").status == 403)
        #expect(try relay.send(alice.secret, to: "ALICE@example.com").status == 202, "addresses compare without case")
        // Refusals spent nothing: Mallory's minute still has all 30.
        try relay.verify(mallory.secret, "mallory@example.com")
        let first = try relay.send(mallory.secret, to: "mallory@example.com")
        #expect(first.header("RateLimit")?.hasPrefix("\"device-minute\";r=29;") == true,
                "\(first.header("RateLimit") ?? "-")")
    }

    @Test(arguments: RelayStoreKind.available)
    func aMessagesStatusIsItsDevicesAlone(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let alice = try relay.register(), bob = try relay.register()
        try relay.verify(alice.secret, "alice@example.com")
        let id = try relay.sendID(alice.secret, to: "alice@example.com")
        let mine = try relay.json("GET", "/v1/messages/\(id)", secret: alice.secret)
        #expect(mine.status == 200)
        let object = try #require(mine.json as? [String: Any])
        #expect(Set(object.keys) == ["id", "status", "created_at", "attempts", "next_attempt_at", "delivered_at",
                                     "last_error"])
        #expect(try relay.json("GET", "/v1/messages/\(id)", secret: bob.secret).status == 404)
        #expect(try relay.json("GET", "/v1/messages/\(id.uppercased())", secret: alice.secret).status == 200)
        #expect(try relay.json("GET", "/v1/messages/nope", secret: alice.secret).status == 404)
        // A code mail is the relay's, not a device's message (its Message-ID is `<id@localhost>`).
        let codeMail = try #require(try relay.mails(to: "alice@example.com").compactMap {
            ($0.message["message_id"] as? String)?.dropFirst().split(separator: "@").first.map(String.init)
        }.first { $0 != id })
        #expect(try relay.json("GET", "/v1/messages/\(codeMail)", secret: alice.secret).status == 404)
    }

    /// A message the relay gave up on (its mail provider refused it) goes back in the queue when its
    /// device asks (`POST /v1/messages/{id}/retry`, a composer's Retry passed on) and is delivered,
    /// once. Asking about a message on its way or delivered changes nothing; another device's message,
    /// or none, is `404`.
    @Test(arguments: RelayStoreKind.available)
    func aFailedMessageIsRetriedAtItsDevicesRequestOnly(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let mail = RelayServer.steeredMail(directory.file("relay"))
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, transport: mail)
        defer { relay.stop() }
        let alice = try relay.register(), bob = try relay.register()
        try relay.verify(alice.secret, "alice@example.com")
        mail.fail(with: DeliveryFailure(.rejected, permanent: true))
        let id = try relay.sendID(alice.secret, to: "alice@example.com", body: "refused once")
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: id) == "failed" })
        let failed = try relay.json("GET", "/v1/messages/\(id)", secret: alice.secret).json as? [String: Any]
        #expect(failed?["last_error"] as? String == "rejected")

        #expect(try relay.json("POST", "/v1/messages/\(id)/retry", secret: bob.secret).status == 404)
        #expect(try relay.json("POST", "/v1/messages/0c2f4a4e-0000-4000-8000-000000000000/retry",
                               secret: alice.secret).status == 404)
        #expect(relay.status(alice.secret, of: id) == "failed", "another device's request moved it")

        mail.release()
        let retried = try relay.json("POST", "/v1/messages/\(id.uppercased())/retry", secret: alice.secret)
        #expect(retried.status == 200, "\(retried.text)")
        let record = try #require(retried.json as? [String: Any])
        #expect(record["id"] as? String == id)
        #expect(["queued", "sending", "sent"].contains(record["status"] as? String ?? ""), "\(record)")
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: id) == "sent" })
        let again = try relay.json("POST", "/v1/messages/\(id)/retry", secret: alice.secret)
        #expect(again.status == 200 && (again.json as? [String: Any])?["status"] as? String == "sent")
        #expect(try relay.finishDeliveries())
        let delivered = try relay.mails(to: "alice@example.com").filter {
            RelayServer.sameBody($0.message["body"], "refused once")
        }
        #expect(delivered.count == 1)
        #expect(mail.messages.filter { $0.id == id }.count == 2, "one refused attempt, one delivered")
    }

    /// A new mail configuration releases what the relay's own refusal held, but not a message the mail
    /// provider refused: its composer was told, and only its Retry sends it again (re-sent here too, it
    /// could go out twice, once from another relay the composer has moved to).
    @Test func aMailConfigurationChangeReleasesTheHeldButNotTheRefused() throws {
        let directory = TemporaryDirectory()
        let mail = RelayServer.steeredMail(directory.file("relay"))
        var relay = try RelayServer(dataDirectory: directory.file("relay"), transport: mail)
        defer { relay.stop() }  // whichever is running when the test ends
        let alice = try relay.register()
        try relay.verify(alice.secret, "alice@example.com")
        mail.fail(with: DeliveryFailure(.rejected, permanent: true))
        let refused = try relay.sendID(alice.secret, to: "alice@example.com", body: "refused")
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: refused) == "failed" })
        mail.fail(with: DeliveryFailure(.auth, permanent: true))
        let held = try relay.sendID(alice.secret, to: "alice@example.com", body: "held")
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: held) == "held" })
        relay.stop()

        mail.release()
        relay = try RelayServer(dataDirectory: directory.file("relay"), transport: mail) {
            $0.mail = "maildir:" + directory.file("new-maildir")
        }
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: held) == "sent" })
        #expect(try relay.finishDeliveries())
        #expect(relay.status(alice.secret, of: refused) == "failed")
        #expect(mail.messages.filter { $0.id == refused }.count == 1, "the refused message was sent again")
    }

    /// Asking for the same retry many times at once (a composer's Retry pressed on two devices, a page's
    /// request sent again) puts the message back once and costs what one retry costs.
    @Test(arguments: RelayStoreKind.available)
    func simultaneousRetriesAreChargedOnce(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let mail = RelayServer.steeredMail(directory.file("relay"))
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store, transport: mail) {
            $0.limits.devicePerMinute = nil
            $0.limits.devicePerDay = 30
        }
        defer {
            mail.release()
            relay.stop()
        }
        let alice = try relay.register()
        try relay.verify(alice.secret, "alice@example.com")
        mail.fail(with: DeliveryFailure(.rejected, permanent: true))
        let id = try relay.sendID(alice.secret, to: "alice@example.com", body: "refused once")  // 1 of 30
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: id) == "failed" })
        mail.block()  // the retried message then waits on its way: no second failure to retry again
        // Twenty threads, each started and waiting, then let go at once.
        let statuses = Mutex<[Int]>([])
        let ready = DispatchSemaphore(value: 0), go = DispatchSemaphore(value: 0), done = DispatchGroup()
        for _ in 0..<20 {
            done.enter()
            Thread.detachNewThread {
                ready.signal()
                go.wait()
                // Over the socket, as composers ask: libmicrohttpd's threads answer them side by side.
                let status = (try? RawHTTP.request(port: relay.port, method: "POST", path: "/v1/messages/\(id)/retry",
                                                   headers: [("Authorization", "Bearer \(alice.secret)")]).status) ?? 0
                statuses.withLock { $0.append(status) }
                done.leave()
            }
        }
        for _ in 0..<20 { ready.wait() }
        for _ in 0..<20 { go.signal() }
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(statuses.withLock { $0 }.allSatisfy { $0 == 200 }, "\(statuses.withLock { $0 })")
        #expect(mail.waitUntilBlocked(timeout: 30))
        // One send, one retry: 28 left before this send, 27 after it.
        let next = try relay.send(alice.secret, to: "alice@example.com", body: "the next")
        #expect(next.header("RateLimit")?.hasPrefix("\"device-day\";r=27;") == true, "\(next.header("RateLimit") ?? "-")")
    }

    /// A retry is another send: it costs what sending did, so a device cannot make the relay mail a
    /// refusing provider without end.
    @Test func aRetryIsChargedAsASend() throws {
        let directory = TemporaryDirectory()
        let mail = RelayServer.steeredMail(directory.file("relay"))
        let relay = try RelayServer(dataDirectory: directory.file("relay"), transport: mail) {
            $0.limits.devicePerMinute = nil
            $0.limits.devicePerDay = 2
        }
        defer { relay.stop() }
        let alice = try relay.register()
        try relay.verify(alice.secret, "alice@example.com")
        mail.fail(with: DeliveryFailure(.rejected, permanent: true))
        let id = try relay.sendID(alice.secret, to: "alice@example.com", body: "refused")
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: id) == "failed" })
        let first = try relay.json("POST", "/v1/messages/\(id)/retry", secret: alice.secret)
        #expect(first.status == 200, "\(first.text)")
        #expect(TestServer.waitUntil(timeout: 30) { relay.status(alice.secret, of: id) == "failed" })
        let second = try relay.json("POST", "/v1/messages/\(id)/retry", secret: alice.secret)
        #expect(second.status == 429 && second.errorCode == "rate_limited", "\(second.status) \(second.text)")
        #expect(second.header("Retry-After") != nil)
        #expect(relay.status(alice.secret, of: id) == "failed")
        #expect(mail.messages.filter { $0.id == id }.count == 2)
    }

    @Test(arguments: RelayStoreKind.available)
    func badBodiesGetClearErrors(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        func post(_ path: String, _ body: String, type: String = "application/json",
                  headers: [(String, String)] = []) throws -> RawHTTP.Response {
            try relay.route("POST", path,
                            headers: [("Authorization", "Bearer \(device.secret)"), ("Content-Type", type)] + headers,
                            body: Array(body.utf8))
        }
        let cases: [(String, String, String, Int, String)] = [
            ("/v1/messages", "{\"to\":\"me@example.com\",\"body\":\"x\"}", "text/plain", 415, "unsupported_media_type"),
            ("/v1/messages", "{\"to\":\"me@example.com\",", "application/json", 400, "invalid_json"),
            ("/v1/messages", "[1]", "application/json", 400, "invalid_json"),
            ("/v1/messages", "{\"to\":\"me@example.com\",\"body\":\"x\",\"body\":\"y\"}", "application/json", 400,
             "repeated_field"),
            ("/v1/messages", "{\"to\":\"me@example.com\",\"body\":\"x\",\"cc\":\"a@b.c\"}", "application/json", 400,
             "unknown_field"),
            ("/v1/messages", "{\"to\":\"me@example.com\"}", "application/json", 400, "missing_field"),
            ("/v1/messages", "{\"to\":\"me@example.com\",\"body\":\"\"}", "application/json", 400, "empty"),
            ("/v1/messages", "{\"to\":\"me@example.com\",\"body\":\" \\t\\n\\u00a0\\u200b\"}", "application/json", 400, "empty"),
            ("/v1/messages", "{\"to\":\"me@example.com\",\"body\":5}", "application/json", 400, "invalid_field"),
            ("/v1/messages", "{\"to\":\"me@example.com\\r\\nBcc: x@y.z\",\"body\":\"x\"}", "application/json", 400,
             "invalid_address"),
            ("/v1/messages", "{\"to\":\"Me <me@example.com>\",\"body\":\"x\"}", "application/json", 400,
             "invalid_address"),
            ("/v1/destinations", "{\"address\":\"no-at-sign\"}", "application/json", 400, "invalid_address"),
            ("/v1/destinations", "{\"address\":\"me@localhost\"}", "application/json", 400, "invalid_address"),
            ("/v1/destinations/confirm", "{\"address\":\"me@example.com\",\"code\":\"12345\"}", "application/json",
             400, "malformed_code"),
            ("/v1/destinations/confirm", "{\"address\":\"me@example.com\",\"code\":\"12345a\"}", "application/json",
             400, "malformed_code"),
            // Whatever is not six digits is a malformed code, a number or a long string too; an address too
            // long to be one is no address; an all-numeric top-level label is no domain (RFC 3696).
            ("/v1/destinations/confirm", "{\"address\":\"me@example.com\",\"code\":123456}", "application/json",
             400, "malformed_code"),
            ("/v1/destinations/confirm", "{\"address\":\"me@example.com\",\"code\":\"\(String(repeating: "1", count: 40))\"}",
             "application/json", 400, "malformed_code"),
            ("/v1/destinations", "{\"address\":\"\(String(repeating: "a", count: 64))@\(String(repeating: "b", count: 300)).com\"}",
             "application/json", 400, "invalid_address"),
            ("/v1/destinations/confirm", "{\"address\":\"\(String(repeating: "a", count: 400))@example.com\",\"code\":\"123456\"}",
             "application/json", 400, "invalid_address"),
            ("/v1/destinations", "{\"address\":\"me@127.0.0.1\"}", "application/json", 400, "invalid_address"),
            ("/v1/destinations", "{\"address\":\"me@1.2\"}", "application/json", 400, "invalid_address"),
            // A slash could never be forgotten again (an encoded slash is refused in every path).
            ("/v1/destinations", "{\"address\":\"a/b@example.com\"}", "application/json", 400, "invalid_address"),
        ]
        for (path, body, type, status, code) in cases {
            let response = try post(path, body, type: type)
            #expect(response.status == status && response.errorCode == code, "\(body): \(response.text)")
            #expect(!response.text.contains("me@"), "an error never echoes the request")
        }
        for key in ["", String(repeating: "k", count: 257), "with space"] {
            let response = try post("/v1/messages", "{\"to\":\"me@example.com\",\"body\":\"x\"}",
                                    headers: [("Idempotency-Key", key)])
            #expect(response.status == 400 && response.errorCode == "invalid_idempotency_key")
        }
        let twoKeys = try post("/v1/messages", "{\"to\":\"me@example.com\",\"body\":\"x\"}",
                               headers: [("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
        #expect(twoKeys.errorCode == "invalid_idempotency_key")
        #expect(try relay.json("DELETE", "/v1/messages", secret: device.secret).status == 405)
        #expect(try relay.json("GET", "/v2/messages", secret: device.secret).status == 404)
    }

    /// A message body is limited in bytes of UTF-8 once decoded (256 KiB, what a composer takes as
    /// one memo), not in bytes of request: the JSON of the largest body, escaped at worst (`\u0026`,
    /// six bytes for each `&`), still goes through the socket and arrives whole.
    /// Wrong device secrets are counted per client: after ten, `429` with `Retry-After`. The right secret
    /// still works from the same address, and another client is not held back.
    @Test func wrongSecretsAreLimitedPerClient() throws {
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        let device = try relay.register()
        let statuses = try (0..<12).map { index in
            try relay.json("GET", "/v1/destinations", secret: "jrs_" + String(repeating: "x", count: 40) + "\(index)",
                           from: "198.51.100.7").status
        }
        #expect(statuses.prefix(10).allSatisfy { $0 == 401 } && statuses.suffix(2).allSatisfy { $0 == 429 }, "\(statuses)")
        let limited = try relay.json("GET", "/v1/destinations", secret: "jrs_wrong", from: "198.51.100.7")
        #expect(limited.status == 429 && limited.header("Retry-After") != nil)
        #expect(try relay.json("GET", "/v1/destinations", secret: device.secret, from: "198.51.100.7").status == 200)
        #expect(try relay.json("GET", "/v1/destinations", secret: "jrs_wrong", from: "198.51.100.8").status == 401)
    }

    @Test func aBodyIsLimitedInDecodedBytesNotInRequestBytes() throws {
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        let largest = RelayConfiguration.maxMessageBodyBytes

        func escaped(_ count: Int) -> [UInt8] {
            Array("{\"to\":\"me@example.com\",\"subject\":\"amps\",\"body\":\"".utf8)
                + Array(repeating: Array("\\u0026".utf8), count: count).flatMap { $0 } + Array("\"}".utf8)
        }
        let headers = [("Authorization", "Bearer \(device.secret)"), ("Content-Type", "application/json")]
        let whole = escaped(largest)
        #expect(whole.count > 6 * largest, "the request is six times the body")
        let accepted = try RawHTTP.request(port: relay.port, method: "POST", path: "/v1/messages", headers: headers,
                                           body: whole)
        #expect(accepted.status == 202, "\(accepted.status) \(accepted.text)")
        #expect(TestServer.waitUntil(timeout: 30) {
            (try? relay.mails(to: "me@example.com").contains { $0.message["subject"] as? String == "amps" }) == true
        })
        let mail = try #require(try relay.mails(to: "me@example.com").first { $0.message["subject"] as? String == "amps" })
        #expect(RelayServer.sameBody(mail.message["body"], String(repeating: "&", count: largest)),
                "the body arrived cut or changed")

        // One byte more is refused for what it is, however it is spelled.
        let over = try RawHTTP.request(port: relay.port, method: "POST", path: "/v1/messages", headers: headers,
                                       body: escaped(largest + 1))
        #expect(over.status == 413 && over.errorCode == "too_large", "\(over.status) \(over.text)")
        let plain = try relay.send(device.secret, to: "me@example.com", body: String(repeating: "é", count: largest / 2 + 1))
        #expect(plain.status == 413 && plain.errorCode == "too_large", "\(plain.status) \(plain.text)")
        // A request past the server's limit (2 MiB) is refused on its head.
        let huge = try RawHTTP.request(port: relay.port, method: "POST", path: "/v1/messages",
                                       headers: headers + [("Content-Length", "\(2 * 1024 * 1024 + 1)")])
        #expect(huge.status == 413, "\(huge.status) \(huge.text)")

        // A subject is one header line: 998 bytes, counted in UTF-8 (332 euro signs and two letters).
        let longest = String(repeating: "€", count: 332) + "ab"
        #expect(longest.utf8.count == RelayConfiguration.maxSubjectBytes)
        #expect(try relay.send(device.secret, to: "me@example.com", subject: longest, body: "x").status == 202)
        let tooLong = try relay.send(device.secret, to: "me@example.com", subject: longest + "c", body: "x")
        #expect(tooLong.status == 400 && tooLong.errorCode == "invalid_field", "\(tooLong.status) \(tooLong.text)")
    }

    @Test func everyOperationInOpenAPIRelayIsARoute() throws {
        let operations = try Python.run("""
            import sys, yaml
            spec = yaml.safe_load(open(sys.argv[1]))
            for path, item in spec['paths'].items():
                for method in item:
                    print(method.upper(), path)
            """, arguments: [Repository.root + "/openapi-relay.yaml"])
            .split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(operations.count == 10)
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        for operation in operations {
            let path = operation[1].replacingOccurrences(of: "{id}", with: UUID().uuidString.lowercased())
                .replacingOccurrences(of: "{address}", with: "me@example.com")
            let response = try relay.route(operation[0], path)
            #expect(response.status != 404 && response.status != 405, "\(operation) is not a route")
        }
    }

    @Test(arguments: RelayStoreKind.available)
    func pathsAreNormalisedOnceBeforeRouting(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let device = try relay.register()
        #expect(try relay.json("GET", "//v1/./destinations/", secret: device.secret).status == 200)
        let dotted = try relay.json("GET", "/v1/../v1/destinations", secret: device.secret)
        #expect(dotted.status == 400 && dotted.errorCode == "bad_path")
        #expect(dotted.header("Cache-Control") == "no-store")
        #expect(try relay.json("GET", "/v1/messages/a%2Fb", secret: device.secret).errorCode == "bad_path")
    }

    @Test(arguments: RelayStoreKind.available)
    func aWebPageCannotUseTheRelay(store kind: RelayStoreKind) throws {
        let store = try RelayTestStore(kind)
        defer { store.release() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"), store: store)
        defer { relay.stop() }
        let fromPage = try relay.json("POST", "/v1/devices", headers: [("Origin", "https://evil.example")])
        #expect(fromPage.status == 403 && fromPage.errorCode == "browser_request")
        #expect(fromPage.header("Access-Control-Allow-Origin") == nil)
        let fetched = try relay.json("POST", "/v1/devices", headers: [("Sec-Fetch-Site", "cross-site")])
        #expect(fetched.status == 403)
        #expect(try relay.json("POST", "/v1/devices", headers: [("Sec-Fetch-Site", "none")]).status == 201)
    }
}
