import CSQLite
import Foundation
import Synchronization
import Testing
@testable import Jotter

/// A `jotter.db` with pages SQLite cannot read (a failing disk, a file changed under the server): the
/// server still starts and takes memos, but says so — `/healthz` degraded with `storage.state: damaged`,
/// one log line saying what to do and naming no memo — because memos in such a page may never go.
@Suite struct DamagedPagesTests {
    /// A stopped data directory whose outbox holds `count` delivered memos, each with `marker` in its text.
    static func dataDirectory(memos count: Int, marker: String) throws -> (TemporaryDirectory, String) {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let server = try TestServer(dataDirectory: data)
        for index in 0..<count {
            let text = "\(marker) number \(index): " + String(repeating: "filler to spread the rows over pages ", count: 8)
            #expect(try server.route("POST", "/", headers: [("Content-Type", "text/plain")], body: Array(text.utf8)).status == 204)
        }
        #expect(try server.finishDeliveries(timeout: 60))
        server.stop()
        return (directory, data)
    }

    /// Overwrites one leaf page of the `messages` table (found with SQLite's `dbstat`) with bytes that
    /// are no b-tree page. The server is stopped, so the page is in the file, not the WAL.
    static func damageAMessagesPage(in data: String) throws {
        try damage(in: data) { database in
            let pages = try database.statement(
                "SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf' ORDER BY pageno"
            ).rows { $0.int64(0) }
            #expect(pages.count >= 3, "rows over several pages: \(pages)")
            return try #require(pages.dropFirst().first)
        }
    }

    /// Overwrites the one page of the index of failed and held memos, which `/healthz` reads to count them
    /// (and an accept does not write: new memos still go).
    static func damageTheStoppedIndex(in data: String) throws {
        try damage(in: data, index: "messages_stopped")
    }

    /// Overwrites the one page of `index` (small: one page).
    static func damage(in data: String, index: String) throws {
        try damage(in: data) { database in
            let pages = try database.statement("SELECT pageno FROM dbstat WHERE name = ?").rows([.text(index)]) { $0.int64(0) }
            #expect(pages.count == 1, "\(pages)")
            return try #require(pages.first)
        }
    }

    /// Overwrites the page `choose` picks, with the server stopped.
    private static func damage(in data: String, page choose: (Database) throws -> Int64) throws {
        let path = data + "/jotter.db"
        let (page, size) = try {
            let database = try Database(path: path)
            defer { database.close() }
            try database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            let size = try #require(Int64(try database.pragma("page_size") ?? ""))
            return (try choose(database), size)
        }()
        let file = try #require(FileHandle(forUpdatingAtPath: path))
        defer { try? file.close() }
        try file.seek(toOffset: UInt64((page - 1) * size))
        try file.write(contentsOf: Data(repeating: 0xA5, count: Int(size)))
        try file.synchronize()
    }

    private static func health(_ server: TestServer) throws -> [String: Any] {
        try #require(try server.route("GET", "/healthz").json as? [String: Any])
    }

    @Test func aDamagedPageIsReportedByHealthzAndOnceInTheLogWhileNewMemosStillGo() throws {
        let marker = "damaged-page-canary"
        let (directory, data) = try Self.dataDirectory(memos: 120, marker: marker)
        _ = directory
        try Self.damageAMessagesPage(in: data)

        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        // The check at start finds it, without any request reaching the page.
        #expect(server.waitUntil(timeout: 60) {
            ((try? Self.health(server))?["storage"] as? [String: Any])?["state"] as? String == "damaged"
        }, "\(server.logs.captured.suffix(2000))")
        let health = try Self.health(server)
        #expect(health["status"] as? String == "degraded")
        let storage = try #require(health["storage"] as? [String: Any])
        #expect(storage["reason"] as? String == "damaged")
        #expect(storage["since"] is String)

        // New memos are still taken and delivered: refusing them would lose what a person writes now.
        let sent = try server.route("POST", "/", headers: [("Content-Type", "text/plain")], body: Array("after the damage".utf8))
        #expect(sent.status == 204)
        #expect(server.waitUntil(timeout: 30) {
            server.deliveredFiles().contains { (try? String(contentsOfFile: $0, encoding: .utf8))?.contains("after the damage") == true }
        })
        // A read that meets the page fails as the disk's trouble, and the state stays what it was.
        #expect(try server.route("GET", "/history?limit=1000").status == 503)
        #expect((try Self.health(server)["storage"] as? [String: Any])?["state"] as? String == "damaged")

        // One line says what to do; no line names a memo.
        server.logs.flush()
        let log = server.logs.captured
        #expect(log.components(separatedBy: "the outbox database is damaged").count - 1 == 1, "\(log.suffix(3000))")
        #expect(log.contains("restore jotter.db from a backup"))
        #expect(!log.contains(marker) && !log.contains("after the damage"))
    }

    /// The check has a timer of its own: a server that starts with its relay refused (its memos held since
    /// the last run, so the worker only waits for the slow retest) still reads its pages at start.
    @Test func theCheckRunsWhileTheRelayIsRefused() throws {
        let (directory, data) = try Self.dataDirectory(memos: 120, marker: "refused-relay-canary")
        _ = directory
        let refusing = ControlledTransport(.fail(DeliveryFailure(.auth, permanent: true)))
        let first = try TestServer(dataDirectory: data, transport: refusing)
        #expect(try first.route("POST", "/", headers: [("Content-Type", "text/plain")], body: Array("held".utf8)).status == 204)
        #expect(first.waitUntil(timeout: 30) { (try? first.outbox.history.counts())?[.held] == 1 })
        first.stop()
        try Self.damageAMessagesPage(in: data)

        let server = try TestServer(dataDirectory: data, transport: refusing)
        defer { server.stop() }
        #expect(((try Self.health(server))["relay"] as? [String: Any])?["state"] as? String == "refused")
        #expect(server.waitUntil(timeout: 60) {
            ((try? Self.health(server))?["storage"] as? [String: Any])?["state"] as? String == "damaged"
        }, "\(server.logs.captured.suffix(2000))")
        #expect(refusing.messages.count == 1, "the relay is not tried again at start")
    }

    /// Damage where `/healthz` itself reads: it still answers (503, `storage_unavailable`) with what it
    /// knows without reading — the storage damaged, the relay's state — not only "cannot read".
    @Test func healthzThatCannotReadStillSaysWhy() throws {
        let (directory, data) = try Self.dataDirectory(memos: 40, marker: "index-canary")
        _ = directory
        try Self.damageTheStoppedIndex(in: data)
        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        #expect(server.waitUntil(timeout: 60) { server.outbox.damage != nil })
        let response = try server.route("GET", "/healthz")
        #expect(response.status == 503)
        #expect(response.errorCode == "storage_unavailable")
        let health = try #require(response.json as? [String: Any])
        #expect(health["status"] as? String == "degraded")
        let storage = try #require(health["storage"] as? [String: Any])
        #expect(storage["state"] as? String == "damaged")
        #expect(storage["since"] is String)
        #expect((health["relay"] as? [String: Any])?["state"] as? String == "ok")
        // Memos are still taken and go.
        #expect(try server.route("POST", "/", headers: [("Content-Type", "text/plain")], body: Array("still taken".utf8)).status == 204)
        #expect(server.waitUntil(timeout: 30) {
            server.deliveredFiles().contains { (try? String(contentsOfFile: $0, encoding: .utf8))?.contains("still taken") == true }
        })
    }

    /// Damage under what every claim reads (the memos being sent, by lease): the start fails, as a server
    /// that cannot claim would answer 204 for memos it could never deliver (the phones keep them).
    @Test func damageUnderTheClaimsStopsTheStart() throws {
        let (directory, data) = try Self.dataDirectory(memos: 10, marker: "in-flight")
        _ = directory
        try Self.damage(in: data, index: "messages_in_flight")
        #expect(throws: DatabaseError.self) { _ = try TestServer(dataDirectory: data) }
    }

    /// A check under way stops when the outbox closes (a large file on a failing disk can take minutes):
    /// SQLite's interrupt, from another thread, ends the statement a connection is running.
    @Test func aLongReadIsInterruptedFromAnotherThread() throws {
        let directory = TemporaryDirectory()
        let database = try Database(path: directory.file("long.db"))
        let interrupter = database.interrupter
        let done = Mutex(false)
        DispatchQueue.global().async {
            // Over and over: an interrupt while no statement runs yet is nothing.
            while !done.withLock({ $0 }) {
                interrupter.interrupt()
                usleep(20_000)
            }
        }
        defer {
            done.withLock { $0 = true }
            database.close()
        }
        // Hours of counting, unless interrupted.
        let error = #expect(throws: DatabaseError.self) {
            try database.statement("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000000000) "
                                   + "SELECT count(*) FROM c").rows { $0.int64(0) }
        }
        #expect(error?.code == SQLITE_INTERRUPT)
        let watch = IntegrityWatch(path: directory.file("long.db"), vfs: nil, clock: SystemClock(),
                                   logger: Logger(label: "test", sink: .memory()))
        watch.startChecking()
        watch.stopChecking()
        #expect(watch.damage == nil, "an interrupted check is no damage")
    }

    /// A read that meets a damaged page before the check has run is taken at its word, and other failures
    /// (a full disk, a lock held too long) say nothing of the pages.
    @Test func failedReadsReportDamageOnlyWhenTheyMetIt() throws {
        let directory = TemporaryDirectory()
        let watch = IntegrityWatch(path: directory.file("none.db"), vfs: nil, clock: SystemClock(),
                                   logger: Logger(label: "test", sink: .memory()))
        watch.note(DatabaseError(code: SQLITE_FULL, message: "database or disk is full"))
        watch.note(DatabaseError(code: SQLITE_BUSY, message: "database is locked"))
        watch.note(CocoaError(.fileReadCorruptFile))
        // Writes that fail (a quota, a sync, a lock) say nothing of the pages: they pass with the next commit.
        for code in [SQLITE_IOERR, SQLITE_IOERR | (3 << 8), SQLITE_IOERR | (4 << 8), SQLITE_IOERR | (15 << 8)] {
            watch.note(DatabaseError(code: code, message: "disk I/O error"))
        }
        #expect(watch.damage == nil)
        watch.note(DatabaseError(code: SQLITE_CORRUPT, message: "database disk image is malformed"))
        #expect(watch.damage?.reason == "damaged")
        let first = watch.damage
        watch.note(DatabaseError(code: SQLITE_IOERR | (1 << 8), message: "disk I/O error"))
        #expect(watch.damage == first, "the first damage seen stays, with its time")
        let reading = IntegrityWatch(path: directory.file("none.db"), vfs: nil, clock: SystemClock(),
                                     logger: Logger(label: "test", sink: .memory()))
        reading.note(DatabaseError(code: SQLITE_IOERR | (2 << 8), message: "disk I/O error"))
        #expect(reading.damage?.reason == "io_error", "a page the disk could not read")
    }

    /// A healthy outbox is read through and found well; so is one with memos still waiting.
    @Test func aHealthyDatabaseIsFoundWell() throws {
        let (directory, data) = try Self.dataDirectory(memos: 30, marker: "healthy")
        _ = directory
        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        server.outbox.checkIntegrity()
        #expect(server.outbox.damage == nil)
        let health = try Self.health(server)
        #expect((health["storage"] as? [String: Any])?["state"] as? String == "ok")
        #expect(health["status"] as? String == "ok")
    }
}

