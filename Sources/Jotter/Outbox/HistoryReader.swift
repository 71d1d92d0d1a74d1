/// The history read model: what `/history`, `/healthz` and the CLI show of the outbox. Reads only, on
/// the reader connection, never waiting for the writer.
public struct HistoryReader: Sendable {
    let database: DatabaseQueue
    let sealer: Sealer

    private static let columns = """
        id, created_at, status, attempts, next_attempt_at, delivered_at, last_error, sealed_subject
        """

    private func record(_ row: Row) -> MessageRecord {
        let id = row.text(0) ?? ""
        let subject = row.blob(7).flatMap { sealer.open($0, .subject, id: id) }.map { String(decoding: $0, as: UTF8.self) }
        return MessageRecord(id: id, createdAt: row.int64(1),
                             status: DeliveryStatus(rawValue: row.text(2) ?? "") ?? .held,
                             attempts: Int(row.int64(3)), nextAttemptAt: row.optionalInt64(4),
                             deliveredAt: row.optionalInt64(5), lastError: row.text(6), subject: subject)
    }

    /// Newest first, at most `limit`, older than the memo `before` (an id) when given.
    public func latest(limit: Int, before: String? = nil) throws -> [MessageRecord] {
        try database.read { database in
            if let before {
                return try database.statement("""
                    SELECT \(Self.columns) FROM messages
                    WHERE seq < (SELECT seq FROM messages WHERE id = ?) ORDER BY seq DESC LIMIT ?
                    """).rows([.text(before), .integer(Int64(limit))], record)
            }
            return try database.statement("SELECT \(Self.columns) FROM messages ORDER BY seq DESC LIMIT ?")
                .rows([.integer(Int64(limit))], record)
        }
    }

    /// One memo's record.
    public func record(id: String) throws -> MessageRecord? {
        try database.read { database in
            try database.statement("SELECT \(Self.columns) FROM messages WHERE id = ?").firstRow([.text(id)], record)
        }
    }

    /// How many memos are in each status. One statement, so one snapshot; the statuses short of delivery
    /// are counted through their indexes, and `sent` is what the whole table holds besides.
    public func counts() throws -> [DeliveryStatus: Int] {
        try database.read { database in
            var counts = Dictionary(uniqueKeysWithValues: DeliveryStatus.allCases.map { ($0, 0) })
            var total = 0
            let rows = try database.statement(Self.countsQuery).rows([]) { ($0.text(0), Int($0.int64(1))) }
            for (status, count) in rows {
                if let status {
                    counts[DeliveryStatus(rawValue: status) ?? .held, default: 0] += count
                } else {
                    total = count
                }
            }
            counts[.sent] = max(0, total - counts.values.reduce(0, +))
            return counts
        }
    }

    /// Counts per status of each index, then (status NULL) of the whole table: the one scan left, of the
    /// narrowest index (the ids), a few milliseconds at 200 000 memos, and exact though the relay deletes rows.
    static let countsQuery = (StatusIndex.allCases.map { "SELECT status, COUNT(*) \($0.from()) GROUP BY status" }
        + ["SELECT NULL, COUNT(*) FROM messages"]).joined(separator: "\nUNION ALL\n")

    /// The memos not delivered (and not given up on by a person): `seq` and `created_at` of those
    /// accepted before `?1`, through the indexes.
    private static let stuckRows = [
        "SELECT seq, created_at \(StatusIndex.waiting.from()) AND created_at < ?1",
        "SELECT seq, created_at \(StatusIndex.inFlight.from()) AND created_at < ?1",
        "SELECT seq, created_at \(StatusIndex.stopped.from([.failed, .held])) AND created_at < ?1",
    ].joined(separator: " UNION ALL ")

    /// Memos accepted before `cutoff` (epoch ms) and still not delivered, oldest first, at most `limit`.
    public func stuck(acceptedBefore cutoff: Int64, limit: Int) throws -> [MessageRecord] {
        try database.read { database in
            try database.statement(Self.stuckQuery).rows([.integer(cutoff), .integer(Int64(limit))], record)
        }
    }

    static let stuckQuery = """
        SELECT \(columns) FROM messages WHERE seq IN (SELECT seq FROM (\(stuckRows))) ORDER BY seq LIMIT ?2
        """

    /// How many memos accepted before `cutoff` are still not delivered, and when the oldest came.
    public func stuckSummary(acceptedBefore cutoff: Int64) throws -> (count: Int, oldest: Int64?) {
        try database.read { database in
            try database.statement(Self.stuckSummaryQuery).firstRow([.integer(cutoff)]) {
                (Int($0.int64(0)), $0.optionalInt64(1))
            } ?? (0, nil)
        }
    }

    static let stuckSummaryQuery = "SELECT COUNT(*), MIN(created_at) FROM (\(stuckRows))"

    /// How many memos were ever accepted (rows are never deleted, so the highest sequence number).
    public func acceptedCount() throws -> Int64 {
        try database.read { database in
            try database.statement("SELECT COALESCE(MAX(seq), 0) FROM messages").firstRow { $0.int64(0) } ?? 0
        }
    }
}
