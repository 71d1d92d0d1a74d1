import Foundation
import Testing
@testable import Jotter

/// A whole relay over HTTP with its devices, codes, limits and idempotency keys in PostgreSQL (a
/// throwaway cluster): the journey, a limit that survives a restart, a replayed key — and a composer
/// delivering through it. The relay's outbox is in PostgreSQL too (`PostgresOutbox`).
@Suite(.holdingSharedPostgres, .enabled(if: PostgresCluster.available, "needs PostgreSQL (apt-get install postgresql)"))
struct RelayOnPostgresTests {
    @Test func theJourneyLimitsAndKeysLiveInPostgreSQL() throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let directory = TemporaryDirectory()
        let configure: (inout RelayConfiguration) -> Void = {
            $0.store = .postgres(url: database.url)
            $0.limits.devicePerMinute = nil
            $0.limits.devicePerDay = 2
        }
        var secret = ""
        do {
            let relay = try RelayServer(dataDirectory: directory.path, configure: configure)
            defer { relay.stop() }
            secret = try relay.register().secret
            try relay.verify(secret, "me@example.com")

            let first = try relay.send(secret, to: "me@example.com", body: "memo one", key: "key-1")
            #expect(first.status == 202, "\(first.text)")
            let id = try #require((first.json as? [String: Any])?["id"] as? String)
            let replay = try relay.send(secret, to: "me@example.com", body: "memo one", key: "key-1")
            #expect(replay.status == 202 && (replay.json as? [String: Any])?["id"] as? String == id)
            #expect(replay.header("Idempotent-Replayed") == "true")
            #expect(try relay.send(secret, to: "me@example.com", body: "another", key: "key-1").status == 409)
            #expect(try relay.send(secret, to: "stranger@example.com", body: "x").status == 403, "unverified address")
            #expect(TestServer.waitUntil(timeout: 20) { ((try? relay.mails(to: "me@example.com")) ?? []).count == 2 },
                    "the code mail and the memo")
            // The day's limit is spent in PostgreSQL: a restarted relay still counts it.
            #expect(try relay.send(secret, to: "me@example.com", body: "memo two").status == 202)
        }
        let relay = try RelayServer(dataDirectory: directory.path, configure: configure)
        defer { relay.stop() }
        let beyond = try relay.send(secret, to: "me@example.com", body: "memo three")
        #expect(beyond.status == 429 && Int(beyond.header("Retry-After") ?? "") != nil, "\(beyond.text)")
        #expect(try relay.send(secret, to: "me@example.com", body: "memo one", key: "key-1").header("Idempotent-Replayed")
                == "true", "a key survives the restart")
    }

    @Test func aComposerDeliversThroughARelayOnPostgreSQL() throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay")) { $0.store = .postgres(url: database.url) }
        defer { relay.stop() }
        let composer = try TestServer(dataDirectory: directory.file("composer"), relay: "jotter+http://127.0.0.1:\(relay.port)")
        defer { composer.stop() }
        let json = [("Content-Type", "application/json")]
        let known = try relay.mailFiles(to: "me@example.com")
        #expect(try composer.route("POST", "/destination", headers: json, body: Array(#"{"address":"me@example.com"}"#.utf8)).status == 202)
        let code = try relay.newCode(to: "me@example.com", known: known)
        #expect(try composer.route("POST", "/destination/confirm", headers: json,
                                   body: Array("{\"code\":\"\(code)\"}".utf8)).status == 200)
        let sent = try composer.route("POST", "/send", headers: [("Content-Type", "text/plain")], body: Array("through PostgreSQL".utf8))
        let id = try #require(sent.header("X-Message-Id"))
        #expect(composer.waitUntil(timeout: 20) {
            ((try? composer.route("GET", "/history/\(id)").json as? [String: Any])?["status"] as? String) == "sent"
        })
        #expect(TestServer.waitUntil(timeout: 20) {
            ((try? relay.mails(to: "me@example.com")) ?? []).contains { RelayServer.sameBody($0.message["body"], "through PostgreSQL") }
        })
    }
}
