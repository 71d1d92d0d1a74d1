import Testing
@testable import Jotter

/// `/healthz`, the stuck-memo warning, the held/failed sweeps and the minutely subject purge read through
/// partial indexes instead of scanning the whole history (at 200 000 memos `/healthz` took 56 ms and the
/// purge stalled the writer for about as long). These check that each gives what a plain scan of the
/// table gives, on a history in every status, and that none of them scans the table.
@Suite struct HistoryIndexTests {
    /// Memos in every status, accepted one second apart (each with a subject: its first line).
    private struct History {
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let key: SymmetricKey
        let outbox: Outbox
        private(set) var ids: [String] = []

        init(memos: Int = 84) async throws {
            key = try SymmetricKey.random()
            outbox = try Outbox(path: directory.file("jotter.db"), key: key, clock: clock)
            for index in 0..<memos {
                ids.append(try await outbox.enqueue(MemoDraft(body: "memo \(index)\nand more")).id)
                clock.advance(milliseconds: 1_000)
            }
            let start = clock.nowMilliseconds() - Int64(memos) * 1_000
            for (index, id) in ids.enumerated() {
                let at = start + Int64(index) * 1_000 + 500
                let lifecycle = switch DeliveryStatus.allCases[index % DeliveryStatus.allCases.count] {
                case .queued: DeliveryLifecycle(status: .queued, nextAttemptAt: at)
                case .sending: DeliveryLifecycle(status: .sending, attempts: 1, leaseUntil: at + 60_000)
                case .retrying: DeliveryLifecycle(status: .retrying, attempts: 2, backoffStep: 1, nextAttemptAt: at,
                                                  lastError: "timeout")
                case .sent: DeliveryLifecycle(status: .sent, attempts: 1, deliveredAt: at)
                case .failed: DeliveryLifecycle(status: .failed, attempts: 1, lastError: "auth")
                case .held: DeliveryLifecycle(status: .held, lastError: "key")
                case .cancelled: DeliveryLifecycle(status: .cancelled)
                }
                try outbox.transition(id: id) { $0 = lifecycle }
            }
        }

        /// Runs `sql` on a connection of its own, as the code before the indexes did.
        func scan<T>(_ sql: String, _ values: [DatabaseValue] = [], _ map: (Row) throws -> T) throws -> [T] {
            let database = try Database(path: directory.file("jotter.db"), readOnly: true)
            defer { database.close() }
            return try database.statement(sql).rows(values, map)
        }

        /// What `EXPLAIN QUERY PLAN` says of `sql`, one line per step.
        func plan(_ sql: String) throws -> [String] {
            try outbox.database.read { database in
                try database.statement("EXPLAIN QUERY PLAN " + sql).rows([]) { $0.text(3) ?? "" }
            }
        }

        /// The opcodes of the program SQLite compiles `sql` into.
        func program(_ sql: String) throws -> [String] {
            try outbox.database.read { database in
                try database.statement("EXPLAIN " + sql).rows([]) { $0.text(1) ?? "" }
            }
        }
    }

    /// Each partial index's condition is tested on every row an INSERT or UPDATE writes. A condition SQLite
    /// codes as a temporary b-tree (an IN list of three or more values) is built and dropped for every row:
    /// schema 8's index of stopped memos made each accept 20% dearer (173k → 207k instructions).
    @Test func acceptingAndMovingAMemoBuildNoTemporaryTable() async throws {
        let history = try await History(memos: 7)
        defer { history.outbox.close() }
        for (name, sql) in [("insert", MessageStore.insertQuery), ("status change", MessageStore.persistQuery),
                            ("subject erased", MessageStore.eraseSubjectQuery)] {
            let program = try history.program(sql)
            #expect(program.contains("IdxInsert"), "\(name): \(program)")
            #expect(!program.contains("OpenEphemeral"), "\(name) builds a temporary b-tree: \(program)")
        }
        // The indexes hold what the queries ask for: the condition they were created with is StatusIndex's.
        let created = try history.scan("SELECT name, sql FROM sqlite_master WHERE type = 'index'") {
            ($0.text(0) ?? "", $0.text(1) ?? "")
        }
        for index in StatusIndex.allCases {
            let condition = index.condition.hasPrefix("(") ? String(index.condition.dropFirst().dropLast())
                : index.condition
            #expect(created.contains { $0.1.hasSuffix("WHERE " + condition) }, "\(index): \(created)")
        }
    }

    @Test func everyStatusIsCountedAsAScanCountsIt() async throws {
        let history = try await History()
        defer { history.outbox.close() }
        var expected = Dictionary(uniqueKeysWithValues: DeliveryStatus.allCases.map { ($0, 0) })
        let scanned = try history.scan("SELECT status, COUNT(*) FROM messages GROUP BY status") {
            ($0.text(0) ?? "", Int($0.int64(1)))
        }
        for (status, count) in scanned {
            expected[try #require(DeliveryStatus(rawValue: status))] = count
        }
        #expect(expected.values.allSatisfy { $0 == 12 }, "the history holds every status: \(expected)")
        #expect(try history.outbox.history.counts() == expected)

        // And after the memos move on: the failed are requeued, the waiting claimed.
        #expect(try history.outbox.requeueFailed() == 12)
        _ = try history.outbox.claimDue(limit: 5, leaseMilliseconds: 60_000)
        let moved = try history.outbox.history.counts()
        #expect(moved[.failed] == 0)
        #expect(moved[.sending] == 17)
        #expect(moved.values.reduce(0, +) == history.ids.count)
        #expect(moved[.sent] == 12)
    }

    @Test func stuckMemosAreTheOnesAScanFinds() async throws {
        let history = try await History()
        defer { history.outbox.close() }
        let oldScan = """
            SELECT id, created_at FROM messages
            WHERE status IN ('queued', 'sending', 'retrying', 'failed', 'held') AND created_at < ? ORDER BY seq
            """
        let first = try history.scan("SELECT MIN(created_at) FROM messages") { $0.int64(0) }.first ?? 0
        for cutoff in [first, first + 1, first + 30_500, first + 61_000, history.clock.nowMilliseconds()] {
            let expected = try history.scan(oldScan, [.integer(cutoff)]) { ($0.text(0) ?? "", $0.int64(1)) }
            let summary = try history.outbox.history.stuckSummary(acceptedBefore: cutoff)
            #expect(summary.count == expected.count, "cutoff +\(cutoff - first) ms")
            #expect(summary.oldest == expected.map(\.1).min())
            let stuck = try history.outbox.history.stuck(acceptedBefore: cutoff, limit: 1_000)
            #expect(stuck.map(\.id) == expected.map(\.0), "oldest first, cutoff +\(cutoff - first) ms")
            let firstFew = try history.outbox.history.stuck(acceptedBefore: cutoff, limit: 7)
            #expect(firstFew.map(\.id) == Array(expected.map(\.0).prefix(7)))
        }
        #expect(try history.outbox.history.stuckSummary(acceptedBefore: history.clock.nowMilliseconds()).count == 60)
    }

    @Test func eachStatusListsTheMemosAScanLists() async throws {
        let history = try await History()
        defer { history.outbox.close() }
        for status in DeliveryStatus.allCases {
            let expected = try history.scan("SELECT id FROM messages WHERE status = ? ORDER BY seq",
                                            [.text(status.rawValue)]) { $0.text(0) ?? "" }
            let listed = try history.outbox.database.read { try history.outbox.store.ids(in: status, database: $0) }
            #expect(listed == expected, "\(status)")
            #expect(listed.count == 12)
        }
        #expect(try history.outbox.heldReason(among: ["key"]) == "key")
        #expect(try history.outbox.releaseHeld(reasons: ["key"], limit: 5) == 5)
        #expect(try history.outbox.history.counts()[.held] == 7)
    }

    @Test func purgeErasesExactlyTheSubjectsAScanWould() async throws {
        let history = try await History()
        defer { history.outbox.close() }
        let kept = "SELECT id FROM messages WHERE sealed_subject IS NOT NULL ORDER BY seq"
        let before = try history.scan(kept) { $0.text(0) ?? "" }
        #expect(before.count == 84)
        let delivered = try history.scan("SELECT delivered_at FROM messages WHERE status = 'sent' ORDER BY seq") {
            $0.int64(0)
        }
        let cutoff = delivered[delivered.count / 2]
        let erased = try history.scan("""
            SELECT id FROM messages WHERE status = 'sent' AND delivered_at < ? AND sealed_subject IS NOT NULL
            """, [.integer(cutoff)]) { $0.text(0) ?? "" }
        #expect(erased.count == 6, "half the sent memos were delivered before the cutoff")
        try history.outbox.purgeSubjects(deliveredBefore: cutoff)
        #expect(try history.scan(kept) { $0.text(0) ?? "" } == before.filter { !erased.contains($0) })
        try history.outbox.purgeSubjects(deliveredBefore: history.clock.nowMilliseconds())
        let left = try history.scan("""
            SELECT COUNT(*) FROM messages WHERE status = 'sent' AND sealed_subject IS NOT NULL
            """) { $0.int64(0) }
        #expect(left == [0])
        #expect(try history.scan(kept) { $0.text(0) ?? "" }.count == 72, "only delivered memos lose their subject")
    }

    @Test func noReadScansTheHistory() async throws {
        let history = try await History()
        defer { history.outbox.close() }
        var queries = [
            ("stuck", HistoryReader.stuckQuery), ("stuck summary", HistoryReader.stuckSummaryQuery),
            ("purge", MessageStore.purgeQuery),
        ]
        queries += DeliveryStatus.allCases.filter { $0 != .sent }.map { ("ids \($0)", MessageStore.idsQuery($0)) }
        // A scan of a partial index reads only the memos it holds; any other scan reads the whole history.
        let partial = ["messages_waiting", "messages_in_flight", "messages_stopped", "messages_subject_kept"]
        func wholeHistory(_ plan: [String]) -> [String] {
            plan.filter { line in
                line.hasPrefix("SCAN messages") && !partial.contains { line.hasSuffix("INDEX " + $0) }
            }
        }
        for (name, sql) in queries {
            let plan = try history.plan(sql)
            #expect(!plan.isEmpty)
            #expect(wholeHistory(plan).isEmpty, "\(name): \(plan)")
        }
        // Counting: every status short of delivery through its index; the total from the narrowest index.
        let plan = try history.plan(HistoryReader.countsQuery)
        #expect(wholeHistory(plan) == ["SCAN messages USING COVERING INDEX sqlite_autoindex_messages_1"], "\(plan)")
        for index in ["messages_waiting", "messages_in_flight", "messages_stopped"] {
            #expect(plan.contains { $0.contains(index) }, "\(index): \(plan)")
        }
    }

    @Test func aVersion8DatabaseGetsTheStoppedIndexWithoutATemporaryTable() async throws {
        let history = try await History(memos: 14)
        let path = history.directory.file("jotter.db")
        let counts = try history.outbox.history.counts()
        history.outbox.close()
        do {  // the index as version 8 created it
            let database = try Database(path: path)
            try database.execute("""
                DROP INDEX messages_stopped;
                CREATE INDEX messages_stopped ON messages(status, created_at)
                    WHERE status IN ('failed', 'held', 'cancelled');
                DROP TABLE relay_handovers; DROP INDEX pairing_tokens_code; ALTER TABLE pairing_tokens DROP COLUMN code_hash;
                ALTER TABLE pairing_tokens DROP COLUMN request_hash; ALTER TABLE pairing_tokens DROP COLUMN device_id;
                PRAGMA user_version = 8;
                """)
            database.close()
        }
        let stopped = "SELECT sql FROM sqlite_master WHERE name = 'messages_stopped'"
        #expect(try history.scan(stopped) { $0.text(0) ?? "" }.first?.contains("IN ('failed'") == true)
        let reopened = try Outbox(path: path, key: history.key, clock: history.clock)
        defer { reopened.close() }
        #expect(try history.scan(stopped) { $0.text(0) ?? "" }.first?.hasSuffix(
            "WHERE status = 'failed' OR status = 'held' OR status = 'cancelled'") == true)
        #expect(try reopened.history.counts() == counts)
        let insert = try history.scan("EXPLAIN " + MessageStore.insertQuery) { $0.text(1) ?? "" }
        #expect(!insert.contains("OpenEphemeral"), "\(insert)")
        #expect(try history.scan("PRAGMA user_version") { $0.int64(0) } == [Int64(Migrations.all.count)])
    }

    @Test func aVersion7DatabaseGainsTheIndexesAndKeepsItsCounts() async throws {
        let history = try await History(memos: 14)
        let path = history.directory.file("jotter.db")
        let counts = try history.outbox.history.counts()
        history.outbox.close()
        do {
            let database = try Database(path: path)
            try database.execute("""
                DROP TABLE relay_handovers; DROP INDEX pairing_tokens_code; ALTER TABLE pairing_tokens DROP COLUMN code_hash;
                ALTER TABLE pairing_tokens DROP COLUMN request_hash; ALTER TABLE pairing_tokens DROP COLUMN device_id;
                DROP INDEX messages_stopped; DROP INDEX messages_subject_kept; PRAGMA user_version = 7;
                """)
            database.close()
        }
        let indexes = "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'messages_%' ORDER BY name"
        #expect(try history.scan(indexes) { $0.text(0) ?? "" } == ["messages_idempotency", "messages_in_flight",
                                                                    "messages_waiting"])
        let reopened = try Outbox(path: path, key: history.key, clock: history.clock)
        defer { reopened.close() }
        #expect(try history.scan(indexes) { $0.text(0) ?? "" } == ["messages_idempotency", "messages_in_flight",
                                                                    "messages_stopped", "messages_subject_kept",
                                                                    "messages_waiting"])
        #expect(try reopened.history.counts() == counts)
        #expect(try history.scan("PRAGMA user_version") { $0.int64(0) } == [Int64(Migrations.all.count)])
    }
}
