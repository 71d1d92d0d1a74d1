import Foundation
import Glibc
import Synchronization
import Testing
@testable import Jotter

/// No room left on the disk: the memo that does not fit is refused with `503 storage_unavailable` and a
/// `Retry-After`, every memo answered `204` before it stays (and is delivered once), the server keeps
/// running, and it accepts again as soon as there is room. No log line holds the refused memo's text.
@Suite struct FullDiskTests {
    static func post(_ text: String, port: Int) throws -> RawHTTP.Response {
        try RawHTTP.request(port: port, method: "POST", path: "/send", headers: [("Content-Type", "text/plain")],
                            body: Array(text.utf8))
    }

    static func expectRefused(_ response: RawHTTP.Response, diskFull: Bool,
                              sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(response.status == 503, sourceLocation: sourceLocation)
        #expect(response.header("Retry-After") == "30", sourceLocation: sourceLocation)
        #expect(response.header("X-Message-Id") == nil, sourceLocation: sourceLocation)
        let error = try JSONValue.parse(response.body)["error"]
        #expect(error?["code"]?.string == "storage_unavailable", sourceLocation: sourceLocation)
        let message = error?["message"]?.string ?? ""
        #expect(message.contains("not stored"), sourceLocation: sourceLocation)
        #expect(message.contains("disk is full") == diskFull, "\(message)", sourceLocation: sourceLocation)
    }

    /// Lets the database grow no further than it is: SQLite's limit on its pages (`max_page_count`, a
    /// setting of the writer's connection) stands in for a disk without room. Returns the limit it replaced.
    static func fill(_ database: DatabaseQueue) throws -> String {
        try database.write(durable: false) { database in
            let limit = try database.pragma("max_page_count") ?? ""
            let pages = try database.pragma("page_count") ?? "0"
            try database.execute("PRAGMA max_page_count = \(pages)")
            return limit
        }
    }

    /// Room again: the limit back where `fill` found it.
    static func makeRoom(in database: DatabaseQueue, limit: String) throws {
        try #require(!limit.isEmpty)
        try database.write(durable: false) { try $0.execute("PRAGMA max_page_count = \(limit)") }
    }

    /// A database that cannot grow (`fill`): the insert that needs a page more fails with `SQLITE_FULL`, as
    /// it does on a disk without room.
    @Test func aFullDatabaseRefusesTheMemoThatDoesNotFitAndLosesNothing() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        var accepted: [String] = []
        for index in 0..<3 {
            let response = try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                              body: Array("memo \(index) before the disk filled".utf8))
            #expect(response.status == 204)
            accepted.append(try #require(response.header("X-Message-Id")))
        }
        #expect(try JSONValue.parse(try server.request("GET", "/healthz").body)["storage"]?["state"]?.string == "ok")
        let limit = try Self.fill(server.outbox.database)
        // 20 KB: overflow pages the database has no room for.
        let canary = "walrus-on-a-full-disk-"
        let large = canary + String(repeating: "x", count: 20_000)
        try Self.expectRefused(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                                  body: Array(large.utf8)), diskFull: true)
        try Self.expectRefused(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                                  body: Array(large.utf8)), diskFull: true)
        #expect(Set(try server.outbox.history.latest(limit: 50).map(\.id)) == Set(accepted))
        // A monitor learns it: /healthz is degraded, and says why and since when — also after the worker
        // recorded its deliveries, small updates that fit where a memo does not.
        #expect(try TestServer.waitUntil(timeout: 60) { try server.outbox.history.counts()[.sent] == accepted.count })
        let failing = try JSONValue.parse(try server.request("GET", "/healthz").body)
        #expect(failing["status"]?.string == "degraded")
        #expect(failing["storage"]?["state"]?.string == "failing")
        #expect(failing["storage"]?["reason"]?.string == "disk_full")
        #expect(failing["storage"]?["since"]?.string?.hasPrefix("20") == true)

        try Self.makeRoom(in: server.outbox.database, limit: limit)
        let again = try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                       body: Array(large.utf8))
        #expect(again.status == 204)
        accepted.append(try #require(again.header("X-Message-Id")))
        let healthy = try JSONValue.parse(try server.request("GET", "/healthz").body)
        #expect(healthy["storage"]?["state"]?.string == "ok", "a memo stored again: the trouble is over")
        #expect(healthy["storage"]?["reason"] == .null)

        #expect(try server.finishDeliveries(timeout: 60), "every accepted memo is delivered")
        let files = server.deliveredFiles()
        #expect(files.count == accepted.count)
        for id in accepted {
            #expect(files.filter { $0.contains(".\(id).") }.count == 1, "delivered once: \(id)")
        }
        #expect(server.logs.captured.contains("outbox commit failed"))
        #expect(!server.logs.captured.contains(canary))
    }

    /// The outbox takes no writes while no memo comes (here another process holds its write lock past the
    /// writer's 5 s wait; a disk that filled after the last memo does the same): the memos waiting cannot be
    /// claimed. `/healthz` says so — it said `ok` while nothing went out — and once writes work again the
    /// memo goes, once, and `/healthz` is `ok`.
    @Test func claimsTheDatabaseRefusesMakeHealthzSaySoUntilTheyWorkAgain() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        func health() throws -> JSONValue { try JSONValue.parse(try server.request("GET", "/healthz").body) }
        // Due in two seconds (its undo window), by when the lock is held.
        let response = try server.request("POST", "/send", headers: [("Content-Type", "text/plain"),
                                                                      ("Undo-Seconds", "2")],
                                          body: Array("waits for the outbox to take writes".utf8))
        #expect(response.status == 204)
        let id = try #require(response.header("X-Message-Id"))
        let other = try Database(path: server.outbox.database.path)
        defer { other.close() }
        try other.execute("BEGIN IMMEDIATE")
        #expect(try health()["storage"]?["state"]?.string == "ok", "nothing has failed yet")
        #expect(try TestServer.waitUntil(timeout: 90) { try health()["storage"]?["state"]?.string == "failing" })
        let failing = try health()
        #expect(failing["status"]?.string == "degraded")
        #expect(failing["storage"]?["reason"]?.string == "locked")
        #expect(failing["storage"]?["since"]?.string?.hasPrefix("20") == true)
        #expect(try server.outbox.history.record(id: id)?.status == .queued)
        #expect(server.logs.captured.contains("claim failed"))

        try other.execute("COMMIT")
        #expect(try TestServer.waitUntil(timeout: 120) { try server.outbox.history.record(id: id)?.status == .sent })
        #expect(try TestServer.waitUntil(timeout: 60) { try health()["storage"]?["state"]?.string == "ok" })
        #expect(try health()["status"]?.string == "ok")
        #expect(server.deliveredFiles().filter { $0.contains(".\(id).") }.count == 1, "delivered once")
    }

    /// `jotter relay` on SQLite, likewise: the message that does not fit is refused with the relay's
    /// `503`, nothing of it is kept, and the messages accepted before and after are each delivered once.
    @Test func aFullRelayRefusesTheMessageThatDoesNotFitAndLosesNothing() throws {
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay"))
        defer { relay.stop() }
        let address = "me@example.com"
        let (_, secret) = try relay.register()
        try relay.verify(secret, address)
        #expect(try relay.send(secret, to: address, body: "sent before the disk filled").status == 202)
        let limit = try Self.fill(relay.outbox.database)
        let canary = "okapi-on-a-full-relay-"
        let large = canary + String(repeating: "y", count: 20_000)
        let refused = try relay.send(secret, to: address, body: large)
        #expect(refused.status == 503)
        #expect(refused.header("Retry-After") == "30")
        let error = (refused.json as? [String: Any])?["error"] as? [String: Any]
        #expect(error?["code"] as? String == "storage_unavailable")
        #expect(error?["message"] as? String == "The relay's disk is full; nothing was stored.")

        try Self.makeRoom(in: relay.outbox.database, limit: limit)
        #expect(try relay.send(secret, to: address, body: large).status == 202)
        #expect(try relay.finishDeliveries(timeout: 60))
        let bodies = try relay.mails(to: address).map { $0.message["body"] as? String ?? "" }
        #expect(bodies.filter { $0.contains("sent before the disk filled") }.count == 1)
        #expect(bodies.filter { $0.contains(canary) }.count == 1,
                "the refused copy is not delivered, the later one is, once")
        #expect(relay.logs.captured.contains("outbox commit failed"))
        #expect(!relay.logs.captured.contains(canary))
    }

    /// A note that reaches a file-size limit in the middle of an entry (a full disk or a quota does the same):
    /// the write takes the entry's first bytes, its heading and marker among them, and fails. Those bytes are
    /// taken back; once there is room, the retry writes the whole entry, once. Before, the retry found the
    /// marker, reported the memo delivered and erased it, and the note kept its first 170 characters.
    @Test func aNoteFilledInTheMiddleOfAnEntryGetsTheWholeEntryOnceThereIsRoom() throws {
        let directory = TemporaryDirectory()
        let vault = directory.file("vault")
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        // The limit is 4,096 blocks of 512 bytes (room for the database's WAL); the note is filled to 200
        // bytes below it.
        let line = String(repeating: "x", count: 99) + "\n"
        let filler = String(repeating: line, count: (4096 * 512 - 200) / line.utf8.count)
        let note = vault + "/inbox.md"
        try filler.write(toFile: note, atomically: false, encoding: .utf8)
        let server = try ServeProcess(directory: directory, arguments: ["--relay", "markdown:\(vault)?file=inbox.md"],
                                      ulimit: "-S -f 4096")
        defer { _ = server.stop() }
        let body = "THE START " + String(repeating: "of a long thought ", count: 80) + "THE END"
        let response = try Self.post(body, port: server.port)
        #expect(response.status == 204)
        let id = try #require(response.header("X-Message-Id"))
        func status() throws -> String? {
            let record = try RawHTTP.request(port: server.port, method: "GET", path: "/history/\(id)")
            return (record.json as? [String: Any])?["status"] as? String
        }
        let failed = try TestServer.waitUntil(timeout: 60) { try status() == "retrying" }
        let seen = try status() ?? "none"
        #expect(failed, "\(seen): \(server.standardError.split(separator: "\n").filter { !$0.contains("info http") })")
        let cut = try String(contentsOfFile: note, encoding: .utf8)
        #expect(cut == filler, "nothing of the failed entry is left: \(cut.utf8.count - filler.utf8.count) bytes more")

        let lifted = try Command.run("/usr/bin/prlimit", ["--pid", "\(server.process.processIdentifier)",
                                                         "--fsize=unlimited"])
        #expect(lifted.status == 0, "\(lifted.errors)")
        #expect(try TestServer.waitUntil(timeout: 120) { try status() == "sent" })
        let whole = try String(contentsOfFile: note, encoding: .utf8)
        #expect(whole.hasPrefix(filler))
        #expect(whole.components(separatedBy: "<!-- jotter:\(id) -->").count == 2, "one entry")
        #expect(whole.trimmingCharacters(in: .newlines).hasSuffix("THE END"), "the whole memo: \(whole.suffix(80))")
        #expect(whole.contains(body))
    }

    /// A file-size limit (`ulimit -f`) stops the WAL from growing, so the commit's write fails at its sync
    /// (the frames gathered by `CoalescingVFS`). The server ignores SIGXFSZ, whose default would end it:
    /// each memo that does not fit is refused, the server runs on, and once the limit is lifted it
    /// accepts again. After a `kill -9`, the database holds exactly the memos answered `204`.
    @Test func aFileSizeLimitRefusesMemosWithoutStoppingTheServer() throws {
        let directory = TemporaryDirectory()
        // 400 blocks of 512 bytes (dash's unit for -f): 200 KiB, which the WAL reaches after a few memos.
        let server = try ServeProcess(directory: directory, arguments: ["--relay", CoalescingVFSTests.relayDown],
                                      ulimit: "-S -f 400")
        let canary = "narwhal-past-the-limit"
        var accepted: [String] = []
        var refused = 0
        for index in 0..<200 where refused < 5 {
            let response = try Self.post("memo \(index) \(canary)", port: server.port)
            if response.status == 204 {
                #expect(refused == 0, "the limit still stands: nothing fits after the first refusal")
                accepted.append(try #require(response.header("X-Message-Id")))
            } else {
                try Self.expectRefused(response, diskFull: false)
                refused += 1
            }
        }
        #expect(!accepted.isEmpty && refused == 5, "\(accepted.count) accepted, \(refused) refused")
        #expect(server.process.isRunning, "SIGXFSZ ended the server")
        let status = try String(contentsOfFile: "/proc/\(server.process.processIdentifier)/status", encoding: .utf8)
        let ignored = status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }
            .flatMap { UInt64($0.dropFirst("SigIgn:".count).trimmingCharacters(in: .whitespaces), radix: 16) } ?? 0
        #expect(ignored & (1 << (UInt64(SIGXFSZ) - 1)) != 0, "SIGXFSZ is ignored")

        let lifted = try Command.run("/usr/bin/prlimit", ["--pid", "\(server.process.processIdentifier)",
                                                         "--fsize=unlimited"])
        #expect(lifted.status == 0, "\(lifted.errors)")
        for index in 0..<3 {
            let response = try Self.post("memo \(index) after the limit", port: server.port)
            #expect(response.status == 204)
            accepted.append(try #require(response.header("X-Message-Id")))
        }
        // The log is written behind the requests: wait for the refusals' line before the kill.
        #expect(TestServer.waitUntil(timeout: 60) { server.standardError.contains("outbox commit failed") })
        #expect(!server.standardError.contains(canary))
        kill(server.process.processIdentifier, SIGKILL)
        server.process.waitUntilExit()

        let database = try Database(path: server.data + "/jotter.db", readOnly: true)
        defer { database.close() }
        let stored = try database.statement("SELECT id FROM messages").rows([]) { $0.text(0) ?? "" }
        #expect(stored.count == accepted.count)
        #expect(Set(stored) == Set(accepted))
        #expect(try database.pragma("integrity_check") == "ok")
    }

    // MARK: A disk that fails an fsync

    /// The disk took a commit's WAL frames, then failed their fsync: SQLite calls the COMMIT failed, yet
    /// the frames are whole in the file, and a restart after a crash recovers the memo. So the memo is
    /// "may be stored", never "not stored" (whoever is told that sends it anew, and it arrives twice);
    /// sent again with its Idempotency-Key, it is stored once.
    @Test func aCommitWhoseFsyncFailedMayBeStoredAndARestartWouldFindIt() async throws {
        let directory = TemporaryDirectory()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: try SymmetricKey.random(), clock: ManualClock())
        defer { outbox.close() }
        let first = try await outbox.enqueue(MemoDraft(body: "stored before the disk failed"))
        outbox.database.failWALSyncs(1)
        let draft = MemoDraft(body: "written while the disk failed its fsync", idempotencyKey: "fsync-fails-once")
        do {
            let outcome = try await outbox.enqueue(draft)
            Issue.record("stored although its sync failed: \(outcome)")
        } catch {
            guard case .outcomeUnknown = error else {
                Issue.record("said \(error), as if it could not be on disk")
                return
            }
        }
        // A crash now: what the restart would find, from a copy of the files as they are (without the
        // shared-memory index, so SQLite recovers the WAL as it does after a crash).
        let copy = directory.file("after-a-crash")
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        for suffix in ["", "-wal"] {
            try FileManager.default.copyItem(atPath: outbox.database.path + suffix,
                                             toPath: copy + "/jotter.db" + suffix)
        }
        let recovered = try Database(path: copy + "/jotter.db")
        defer { recovered.close() }
        #expect(try recovered.statement("SELECT count(*) FROM messages").firstRow { $0.int64(0) } == 2,
                "the memo whose commit failed is whole on the disk")
        // No crash: sent again with its key, it is stored, once.
        let again = try await outbox.enqueue(draft)
        #expect(again.id != first.id)
        let again2 = try await outbox.enqueue(draft)
        #expect(again2.id == again.id, "a replay")
        #expect(try outbox.history.latest(limit: 10).map(\.id).sorted() == [first.id, again.id].sorted())
    }

    /// Over HTTP: `503 storage_outcome_unknown` with a `Retry-After`, and the same memo sent again with its
    /// key is `204` and stored once.
    @Test func aFailedFsyncIsAnsweredAsMaybeStoredOverHTTP() throws {
        let directory = TemporaryDirectory()
        let server = try TestServer(dataDirectory: directory.file("data"))
        defer { server.stop() }
        let headers = [("Content-Type", "text/plain"), ("Idempotency-Key", "fsync-fails-over-http")]
        let body = Array("a memo the disk may have kept".utf8)
        #expect(try server.request("POST", "/send", headers: [("Content-Type", "text/plain")],
                                   body: Array("before".utf8)).status == 204)
        server.outbox.database.failWALSyncs(1)
        let failed = try server.request("POST", "/send", headers: headers, body: body)
        #expect(failed.status == 503)
        #expect(failed.header("Retry-After") == "30")
        #expect(failed.header("X-Message-Id") == nil)
        let error = try JSONValue.parse(failed.body)["error"]
        #expect(error?["code"]?.string == "storage_outcome_unknown")
        let message = error?["message"]?.string ?? ""
        #expect(message.contains("may be stored") && !message.contains("not stored"), "\(message)")
        let again = try server.request("POST", "/send", headers: headers, body: body)
        #expect(again.status == 204)
        let id = try #require(again.header("X-Message-Id"))
        #expect(try server.request("POST", "/send", headers: headers, body: body).header("X-Message-Id") == id)
        #expect(try server.outbox.history.latest(limit: 10).count == 2)
        #expect(server.logs.captured.contains("outbox commit failed"))
    }

    /// On a nearly full disk one large memo does not take the memos committed with it down: a batch the
    /// disk refuses is stored member by member, and only the memo that does not fit is refused.
    @Test func aMemoThatDoesNotFitIsRefusedAloneNotWithItsBatch() throws {
        let directory = TemporaryDirectory()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: try SymmetricKey.random(), clock: ManualClock())
        defer { outbox.close() }
        let stored = DispatchSemaphore(value: 0)
        outbox.enqueue(MemoDraft(body: "already there")) { _ in stored.signal() }
        stored.wait()
        _ = try Self.fill(outbox.database)
        // The writer busy, so that the five gather into one batch.
        let writerFree = DispatchSemaphore(value: 0)
        outbox.database.async { writerFree.wait() }
        let bodies = ["small one", String(repeating: "large ", count: 4_000), "small two", "small three", "small four"]
        let outcomes = Mutex<[String: Result<Outbox.EnqueueOutcome, Outbox.EnqueueError>]>([:])
        let answered = DispatchGroup()
        for body in bodies {
            answered.enter()
            outbox.enqueue(MemoDraft(body: body), callerMayBlock: false) { result in
                outcomes.withLock { $0[body] = result }
                answered.leave()
            }
        }
        writerFree.signal()
        answered.wait()
        let results = outcomes.withLock { $0 }
        for body in bodies where body.hasPrefix("small") {
            #expect((try? results[body]?.get()) != nil, "\(body): \(String(describing: results[body]))")
        }
        guard case .failure(.storage(_, diskFull: true)) = results[bodies[1]] else {
            Issue.record("the large memo: \(String(describing: results[bodies[1]]))")
            return
        }
        #expect(try outbox.history.latest(limit: 10).count == 5)
    }
}
