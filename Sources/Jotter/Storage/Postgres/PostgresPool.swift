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

    /// A pool for `url`; connects once now, so a wrong URL or an unreachable server stops the start.
    init(url: String) throws {
        self.url = url
        let first = try PostgresConnection(url: url)
        idle.append(first)
    }

    /// Lends a connection to `body`.
    func with<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let reused: PostgresConnection? = lock.withLock { _ in idle.popLast() }
        let connection = try reused ?? PostgresConnection(url: url)
        defer {
            if connection.isUsable { lock.withLock { _ in idle.append(connection) } }
        }
        return try body(connection)
    }

    /// One transaction on a lent connection (see `PostgresConnection.transaction`).
    @discardableResult
    func transaction<T>(serializable: Bool = true, _ body: (PostgresConnection) throws -> T) throws -> T {
        try with { try $0.transaction(serializable: serializable, body) }
    }
}
