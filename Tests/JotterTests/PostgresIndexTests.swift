import Testing
@testable import Jotter

/// The relay's shared outbox runs the stuck-memo check and the subject purge every minute on every node;
/// on PostgreSQL both read through partial indexes (a sequential scan of 200,000 memos took 20 ms and
/// 15 ms). They find what the old scans found, and PostgreSQL has an index path for each.
@Suite(.enabled(if: PostgresCluster.available, "needs PostgreSQL (apt-get install postgresql)"),
       .holdingSharedPostgres)
struct PostgresIndexTests {
    @Test func stuckAndPurgeFindWhatAScanFindsThroughIndexes() async throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let outbox = try PostgresOutbox(url: database.url, key: try SymmetricKey.random(),
                                        keyPath: directory.file("jotter.key"), listening: false, clock: clock)
        defer { outbox.close() }
        var ids: [String] = []
        for index in 0..<42 {
            ids.append(try await outbox.enqueue(MemoDraft(body: "memo \(index)")).id)
            clock.advance(milliseconds: 1_000)
        }
        let start = clock.nowMilliseconds() - 42_000
        for (index, id) in ids.enumerated() {
            let at = start + Int64(index) * 1_000 + 500
            let lifecycle = switch DeliveryStatus.allCases[index % DeliveryStatus.allCases.count] {
            case .queued: DeliveryLifecycle(status: .queued, nextAttemptAt: at)
            case .sending: DeliveryLifecycle(status: .sending, attempts: 1, leaseUntil: at + 60_000)
            case .retrying: DeliveryLifecycle(status: .retrying, attempts: 2, nextAttemptAt: at, lastError: "timeout")
            case .sent: DeliveryLifecycle(status: .sent, attempts: 1, deliveredAt: at)
            case .failed: DeliveryLifecycle(status: .failed, attempts: 1, lastError: "auth")
            case .held: DeliveryLifecycle(status: .held, lastError: "key")
            case .cancelled: DeliveryLifecycle(status: .cancelled)
            }
            try outbox.transition(id: id, durable: true) { $0 = lifecycle }
        }

        let connection = try PostgresConnection(url: database.url)
        let oldStuck = """
            SELECT id FROM jotter_messages
            WHERE status IN ('queued', 'sending', 'retrying', 'failed', 'held') AND created_at < $1 ORDER BY seq
            """
        for cutoff in [start, start + 1, start + 20_500, clock.nowMilliseconds()] {
            let expected = try connection.execute(oldStuck, [.integer(cutoff)]).all.compactMap { $0.text(0) }
            #expect(try outbox.stuck(acceptedBefore: cutoff, limit: 100).map(\.id) == expected)
            #expect(try outbox.stuck(acceptedBefore: cutoff, limit: 4).map(\.id) == Array(expected.prefix(4)))
        }
        #expect(try outbox.stuck(acceptedBefore: clock.nowMilliseconds(), limit: 100).count == 30)

        let kept = "SELECT id FROM jotter_messages WHERE sealed_subject IS NOT NULL ORDER BY seq"
        let before = try connection.execute(kept).all.compactMap { $0.text(0) }
        let delivered = try connection.execute("""
            SELECT id, delivered_at FROM jotter_messages WHERE status = 'sent' ORDER BY seq
            """).all.map { ($0.text(0) ?? "", $0.int64(1)) }
        #expect(delivered.count == 6)
        try outbox.purgeSubjects(deliveredBefore: delivered[3].1)
        let erased = Set(delivered.prefix(3).map(\.0))
        #expect(try connection.execute(kept).all.compactMap { $0.text(0) } == before.filter { !erased.contains($0) })

        // An index path for each, whatever the planner would pick for a table this small.
        _ = try connection.execute("SET enable_seqscan = off")
        for (name, sql) in [("stuck", PostgresOutbox.stuckQuery), ("purge", PostgresOutbox.purgeQuery)] {
            let parameters: [PostgresConnection.Value] = name == "stuck" ? [.integer(start), .integer(10)]
                                                                          : [.integer(start)]
            let plan = try connection.execute("EXPLAIN " + sql, parameters).all.compactMap { $0.text(0) }
            #expect(!plan.isEmpty)
            #expect(!plan.contains { $0.contains("Seq Scan on jotter_messages") }, "\(name): \(plan)")
        }
    }
}
