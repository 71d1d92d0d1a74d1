import Foundation
import Synchronization
import Testing
@testable import Jotter

/// Several relay nodes on one PostgreSQL database (a throwaway cluster), as behind a load balancer:
/// one device, one limit, one `Idempotency-Key`, one outbox, whichever node a request reaches — and a
/// node killed mid-delivery leaves its message to the other once the lease runs out, delivered once.
@Suite(.holdingSharedPostgres, .enabled(if: PostgresCluster.available, "needs PostgreSQL (apt-get install postgresql)"))
struct RelayNodesTests {
    /// Copies node `from`'s key into `to` (a new node's data directory), as an operator would.
    static func shareKey(from: String, to: String) throws {
        try FileManager.default.createDirectory(atPath: to, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: from + "/key", toPath: to + "/key")
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: to + "/key")
    }

    /// The message id of a `202`, if it is one.
    static func id(_ response: RawHTTP.Response) -> String? {
        response.status == 202 ? (response.json as? [String: Any])?["id"] as? String : nil
    }

    /// A node whose mail account is refused puts the message back in the shared queue for the others
    /// (it holds nothing itself), and says so in its log; the device asking about it hears `held`, as a
    /// one-node relay says it, so its composer shows "the relay cannot mail", not "on its way".
    @Test func aMessageARefusedNodePutsBackIsShownHeld() throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let directory = TemporaryDirectory()
        let mail = RelayServer.steeredMail(directory.file("node"))
        let node = try RelayServer(dataDirectory: directory.file("node"), transport: mail) {
            $0.store = .postgres(url: database.url)
            $0.delivery.refusedRetestMilliseconds = 300
        }
        defer { node.stop() }
        let device = try node.register()
        try node.verify(device.secret, "me@example.com")
        mail.fail(with: DeliveryFailure(.auth, permanent: true))
        let id = try node.sendID(device.secret, to: "me@example.com", body: "while the account is refused")
        #expect(TestServer.waitUntil(timeout: 30) { node.status(device.secret, of: id) == "held" },
                "\(node.status(device.secret, of: id) ?? "-")")
        let log = node.logs.captured
        #expect(log.contains("memos go back to the shared queue") && !log.contains("memos held until"), "\(log)")
        mail.release()
        #expect(TestServer.waitUntil(timeout: 120) { node.status(device.secret, of: id) == "sent" })
    }

    @Test func twoNodesShareDevicesCodesOneLimitOneKeyAndOneOutbox() throws {
        let database = try SharedPostgres.database()  // its own, on the shared cluster
        defer { database.drop() }
        let directory = TemporaryDirectory()
        let first = directory.file("node-1"), second = directory.file("node-2")
        // Both nodes deliver into the first node's Maildir, so one reader sees every mail.
        let configure: (inout RelayConfiguration) -> Void = {
            $0.store = .postgres(url: database.url)
            $0.mail = "maildir:" + first + "/Maildir"
            $0.limits.devicePerMinute = 30
            $0.limits.devicePerDay = nil
            $0.limits.ipPerHour = nil
        }
        let one = try RelayServer(dataDirectory: first, configure: configure)
        defer { one.stop() }
        // A node with a key of its own does not open the shared data, and says what to do.
        do {
            let stranger = try RelayServer(dataDirectory: directory.file("stranger"), configure: configure)
            stranger.stop()
            Issue.record("a node with another key started")
        } catch let error as Outbox.OpenError {
            #expect("\(error)".contains("same key file"), "\(error)")
        }
        try Self.shareKey(from: first, to: second)
        let two = try RelayServer(dataDirectory: second, configure: configure)
        defer { two.stop() }

        // Registered on one node, a code asked for on the other, confirmed on the first.
        let device = try one.register()
        let known = try one.mailFiles(to: "me@example.com")
        #expect(try two.request("POST", "/v1/destinations", secret: device.secret, ["address": "me@example.com"]).status == 202)
        let code = try one.newCode(to: "me@example.com", known: known)
        #expect(try one.request("POST", "/v1/destinations/confirm", secret: device.secret,
                                ["address": "me@example.com", "code": code]).status == 200)
        #expect(try two.request("GET", "/v1/destinations", secret: device.secret).text.contains("verified"))

        // 60 posts at once, alternating nodes, against a limit of 30 a minute: exactly 30 pass.
        let answers = Mutex<[RawHTTP.Response]>([])
        DispatchQueue.concurrentPerform(iterations: 60) { index in
            let node = index % 2 == 0 ? one : two
            let response = (try? node.request("POST", "/v1/messages", secret: device.secret,
                                              ["to": "me@example.com", "subject": "s", "body": "memo \(index)"]))
            if let response { answers.withLock { $0.append(response) } }
        }
        let all = answers.withLock { $0 }
        #expect(all.count == 60)
        let accepted = all.compactMap(Self.id)
        #expect(accepted.count == 30, "statuses: \(all.map(\.status))")
        #expect(all.filter { $0.status == 429 }.count == 30)

        // One key sent to both nodes at once, five times over (a second device: the first spent its minute).
        let other = try two.register()
        try one.verify(other.secret, "other@example.com")
        var keyed: [String] = []
        for round in 0..<5 {
            let replies = Mutex<[RawHTTP.Response]>([])
            DispatchQueue.concurrentPerform(iterations: 2) { index in
                let node = index == 0 ? one : two
                let response = try? node.request("POST", "/v1/messages", secret: other.secret,
                                                 ["to": "other@example.com", "body": "keyed \(round)"],
                                                 headers: [("Idempotency-Key", "round-\(round)")])
                if let response { replies.withLock { $0.append(response) } }
            }
            let both = replies.withLock { $0 }
            let ids = Set(both.compactMap(Self.id))
            #expect(ids.count == 1, "one message for one key: \(both.map { "\($0.status) \($0.text)" })")
            #expect(both.allSatisfy { $0.status == 202 || ($0.status == 409 && $0.errorCode == "idempotency_in_flight") },
                    "\(both.map { "\($0.status) \($0.text)" })")
            keyed += ids
        }

        // Every accepted message is delivered exactly once, whichever node took it.
        let ids = accepted + keyed
        #expect(TestServer.waitUntil(timeout: 60) {
            ids.allSatisfy { (try? two.messages.record(id: $0))??.status == .sent }
        }, "every message sent")
        let delivered = try one.mails(to: "me@example.com").filter { RelayServer.code(in: $0.message["body"] as? String ?? "") == nil }
            + one.mails(to: "other@example.com").filter { ($0.message["body"] as? String ?? "").hasPrefix("keyed") }
        let messageIDs = delivered.compactMap { $0.message["message_id"] as? String }
        #expect(delivered.count == ids.count, "\(delivered.count) mails for \(ids.count) messages")
        #expect(messageIDs.count == delivered.count && Set(messageIDs).count == messageIDs.count, "no message twice")
        #expect(ids.allSatisfy { id in messageIDs.contains { $0.contains(id) } }, "each message by its own id")
    }

    @Test func aNodeKilledMidDeliveryLeavesItsMessageToTheOtherAfterTheLease() throws {
        let database = try SharedPostgres.database()  // its own, on the shared cluster
        defer { database.drop() }
        let directory = TemporaryDirectory()
        // The code mail goes through; the next request (the message, from the first node) hangs.
        let api = try ScriptedRelay(script: [.accept, .hang(seconds: 90)], directory: directory.file("api"))
        defer { api.stop() }
        let arguments = ["--store", database.url, "--lease-seconds", "5", "--log-level", "info",
                         "--mail", "resend://re_test_key?from=relay@example.com&base=\(api.baseURL)&timeout=60"]
        let first = directory.file("node-1"), second = directory.file("node-2")
        let one = try RelayProcess(dataDirectory: first, arguments: arguments)
        defer { one.stop() }
        let registered = try one.request("POST", "/v1/devices")
        let secret = try #require((registered.json as? [String: Any])?["secret"] as? String)
        #expect(try one.request("POST", "/v1/destinations", secret: secret, ["address": "me@example.com"]).status == 202)
        #expect(TestServer.waitUntil(timeout: 30) { api.emails.count == 1 })
        let code = try #require(RelayServer.code(in: api.emails.first?.json?["text"] as? String ?? ""))
        #expect(try one.request("POST", "/v1/destinations/confirm", secret: secret,
                                ["address": "me@example.com", "code": code]).status == 200)

        let sent = try one.request("POST", "/v1/messages", secret: secret, ["to": "me@example.com", "body": "once"])
        let id = try #require(Self.id(sent), "\(sent.status) \(sent.text)")
        #expect(TestServer.waitUntil(timeout: 30) { api.requests.contains { $0.idempotencyKey == id } },
                "the first node is delivering it")
        try Self.shareKey(from: first, to: second)
        let two = try RelayProcess(dataDirectory: second, arguments: arguments)
        defer { two.stop() }
        one.kill()

        // The second node takes the message over once the dead node's lease has run out.
        #expect(TestServer.waitUntil(timeout: 90) { api.emails.contains { $0.key == id } },
                "delivered by the second node: \(two.standardError)")
        #expect(TestServer.waitUntil(timeout: 30) {
            ((try? two.request("GET", "/v1/messages/\(id)", secret: secret))?.json as? [String: Any])?["status"]
                as? String == "sent"
        })
        #expect(api.emails.filter { $0.key == id }.count == 1, "exactly once")
        let attempts = api.requests.filter { $0.idempotencyKey == id }
        #expect(attempts.count == 2, "the dead node's attempt and the second node's, under one key")
        two.stop()
        #expect(two.standardError.contains("delivered") && two.standardError.contains(id),
                "the second node logged its delivery by id: \(two.standardError)")
    }

    @Test func aSlowSendOutlivingItsLeaseIsNotTakenOverWhileItsNodeLives() throws {
        let database = try SharedPostgres.database()  // its own, on the shared cluster
        defer { database.drop() }
        let directory = TemporaryDirectory()
        // The code mail goes through; the message takes 8 s, past a lease of 2 s, renewed every ~0.7 s.
        let api = try ScriptedRelay(script: [.accept, .acceptSlowly(milliseconds: 8000)], directory: directory.file("api"))
        defer { api.stop() }
        let configure: (inout RelayConfiguration) -> Void = {
            $0.store = .postgres(url: database.url)
            $0.mail = "resend://re_test_key?from=relay@example.com&base=\(api.baseURL)&timeout=30"
            $0.delivery.leaseMilliseconds = 2000
        }
        let first = directory.file("node-1"), second = directory.file("node-2")
        let one = try RelayServer(dataDirectory: first, configure: configure)
        defer { one.stop() }
        try Self.shareKey(from: first, to: second)
        let two = try RelayServer(dataDirectory: second, configure: configure)
        defer { two.stop() }
        let device = try one.register()
        #expect(try one.requestCode(device.secret, "me@example.com").status == 202)
        #expect(TestServer.waitUntil(timeout: 30) { api.emails.count == 1 })
        let code = try #require(RelayServer.code(in: api.emails.first?.json?["text"] as? String ?? ""))
        #expect(try one.confirm(device.secret, "me@example.com", code).status == 200)

        let id = try #require(Self.id(try one.send(device.secret, to: "me@example.com", body: "slow")))
        #expect(TestServer.waitUntil(timeout: 60) { (try? two.messages.record(id: id))??.status == .sent })
        #expect(api.requests.filter { $0.idempotencyKey == id }.count == 1,
                "one attempt: \(api.requests.filter { $0.idempotencyKey == id }.map(\.action))")
        #expect(!(one.logs.captured + two.logs.captured).contains("lease lost"))
    }
}
