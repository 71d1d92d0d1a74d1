import Dispatch
import Synchronization

/// Connections to one PostgreSQL database, lent one at a time to one user each; a connection the
/// server dropped is replaced on the next use.
///
/// `@unchecked Sendable`: the idle connections are only touched while holding `lock`, and a lent
/// connection belongs to its borrower alone.
final class PostgresPool: @unchecked Sendable {
    private let url: String
    private let lock = Mutex(())
    private var idle: [PostgresConnection] = []
    /// One unit per connection that may be open: a borrower beyond them waits for one to come back,
    /// so a node under load never holds more than `maximumConnections` (PostgreSQL's own limit is
    /// shared by every node).
    private let permits: DispatchSemaphore

    /// Connections one pool opens at most, unless told otherwise.
    static let defaultMaximumConnections = 8

    /// A pool for `url`; connects once now, so a wrong URL or an unreachable server stops the start.
    init(url: String, maximumConnections: Int = PostgresPool.defaultMaximumConnections) throws {
        self.url = url
        permits = DispatchSemaphore(value: max(maximumConnections, 1))
        let first = try PostgresConnection(url: url)
        idle.append(first)
    }

    /// Lends a connection to `body`, waiting for one when all are lent.
    func with<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        permits.wait()
        defer { permits.signal() }
        // An idle connection the server has closed meanwhile (it restarted, say) is dropped here, not
        // found out by the request that borrows it.
        var reused: PostgresConnection? = lock.withLock { _ in idle.popLast() }
        while let candidate = reused, !candidate.isStillOpen {
            reused = lock.withLock { _ in idle.popLast() }
        }
        let connection = try reused ?? PostgresConnection(url: url)
        defer {
            if connection.isUsable { lock.withLock { _ in idle.append(connection) } }
        }
        return try body(connection)
    }

    /// Closes the idle connections (a connection still lent is closed when its borrower gives it back
    /// and the pool is gone). Call when the pool's owner stops.
    func close() {
        let closing = lock.withLock { _ in
            defer { idle.removeAll() }
            return idle
        }
        _ = closing  // released here: each connection's deinit calls PQfinish
    }

    /// One transaction on a lent connection (see `PostgresConnection.transaction`). An idle connection
    /// the server closed meanwhile (it restarted, or ended idle sessions) is found at `BEGIN`, before
    /// anything of the transaction was sent: the transaction then runs on a new connection, once for each
    /// idle connection there was, instead of failing a request after the database is back.
    @discardableResult
    func transaction<T>(serializable: Bool = true, _ body: (PostgresConnection) throws -> T) throws -> T {
        var stale = lock.withLock { _ in idle.count }
        while true {
            do {
                return try with { try $0.transaction(serializable: serializable, body) }
            } catch let failure as PostgresConnection.Failure where failure.lostBeforeBegin && stale > 0 {
                stale -= 1
            }
        }
    }

    /// Brings the tables named `name` up to `migrations` (step `n`, 1-based, is `migrations[n - 1]`;
    /// statements separated by `;`), one node at a time: a second node starting at once waits on the
    /// advisory lock, then finds the tables made. A schema newer than this Jotter stops the start.
    func migrate(_ name: String, _ migrations: [String]) throws {
        try transaction(serializable: false) { connection in
            try connection.execute("SELECT pg_advisory_xact_lock(7374)")
            try connection.execute("CREATE TABLE IF NOT EXISTS jotter_schema (name TEXT PRIMARY KEY, version BIGINT NOT NULL)")
            let current = try connection.execute("SELECT version FROM jotter_schema WHERE name = $1", [.text(name)])
                .first?.int64(0) ?? 0
            guard current <= Int64(migrations.count) else {
                throw PostgresConnection.Failure(sqlState: nil, kind: "schema \(name) \(current) is newer than this Jotter")
            }
            for (index, sql) in migrations.enumerated() where Int64(index + 1) > current {
                for statement in sql.split(separator: ";") where !statement.allSatisfy(\.isWhitespace) {
                    try connection.execute(String(statement))
                }
                try connection.execute("""
                    INSERT INTO jotter_schema (name, version) VALUES ($1, $2)
                    ON CONFLICT (name) DO UPDATE SET version = excluded.version
                    """, [.text(name), .integer(Int64(index + 1))])
            }
        }
    }
}
