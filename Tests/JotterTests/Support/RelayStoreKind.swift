import Testing
@testable import Jotter

/// The relay's two stores, for suites that run every test on both:
/// `@Test(arguments: RelayStoreKind.available) func x(store kind: RelayStoreKind)`.
enum RelayStoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// SQLite in the relay's data directory (the default).
    case sqlite
    /// A database of its own on the shared PostgreSQL cluster (`SharedPostgres`).
    case postgres

    /// The stores this machine can run: both, or SQLite alone where PostgreSQL is not installed — then
    /// `SharedPostgresTests` and `RelayOnPostgresTests` show as skipped with the reason. A PostgreSQL
    /// case is left out rather than cancelled because Swift Testing (6.3) reports a cancelled test
    /// *case* as passed, which would claim a run that never happened.
    static let available: [RelayStoreKind] = PostgresCluster.available ? allCases : [.sqlite]

    var testDescription: String { rawValue }
}

/// A relay's store for one test. SQLite needs nothing set up; PostgreSQL gets a fresh database, kept
/// across restarts of the relay (the same URL) until `release()` — call it after stopping the relay:
///
///     let store = try RelayTestStore(kind)
///     defer { store.release() }
///     let relay = try RelayServer(dataDirectory: …, store: store)
///     defer { relay.stop() }
final class RelayTestStore: Sendable {
    let kind: RelayStoreKind
    /// The PostgreSQL database, for `.postgres`.
    let database: SharedPostgres.Database?

    /// A store of `kind`. Without PostgreSQL installed, asking for `.postgres` is an error (the
    /// PostgreSQL cases are not among a test's arguments then: see `RelayStoreKind.available`).
    init(_ kind: RelayStoreKind) throws {
        self.kind = kind
        switch kind {
        case .sqlite:
            database = nil
        case .postgres:
            // The PostgreSQL cases are left out of the arguments without it (`RelayStoreKind.available`).
            guard PostgresCluster.available else {
                throw FixtureProcess.Failure(description: "needs PostgreSQL (apt-get install postgresql)")
            }
            database = try SharedPostgres.database()
        }
    }

    /// What `RelayConfiguration.store` says for it.
    var location: RelayConfiguration.StoreLocation {
        database.map { .postgres(url: $0.url) } ?? .sqlite
    }

    /// The command line's words for it: `--store URL` for PostgreSQL, none for SQLite (the default).
    var arguments: [String] {
        database.map { ["--store", $0.url] } ?? []
    }

    /// A second handle on the relay's state, as another request (or another node) would hold it:
    /// for SQLite the relay's own database file, for PostgreSQL a new connection pool.
    /// (SQLite's goes through the relay's outbox database: that is where that store lives.)
    func secondHandle(on relay: RelayServer) throws -> any RelayStore {
        if let database { return try PostgresRelayStore(url: database.url) }
        return try SQLiteRelayStore(database: relay.outbox.database)
    }

    /// How many devices `relay` has registered, read from its store's `relay_devices` table (the API
    /// has no such count).
    func deviceCount(on relay: RelayServer) throws -> Int64 {
        if let database {
            let connection = try PostgresConnection(url: database.url)
            return try connection.execute("SELECT count(*) FROM relay_devices").first?.int64(0) ?? 0
        }
        return try relay.outbox.database.read { database in
            try database.statement("SELECT count(*) FROM relay_devices").firstRow { $0.int64(0) } ?? 0
        }
    }

    /// How many of `relay`'s messages still hold any text (a sealed body or subject), read from the table.
    func messagesHoldingText(on relay: RelayServer) throws -> Int64 {
        let sql = "SELECT count(*) FROM %@ WHERE sealed_payload IS NOT NULL OR sealed_subject IS NOT NULL"
        if let database {
            let connection = try PostgresConnection(url: database.url)
            return try connection.execute(sql.replacingOccurrences(of: "%@", with: "jotter_messages")).first?.int64(0) ?? 0
        }
        return try relay.outbox.database.read { database in
            try database.statement(sql.replacingOccurrences(of: "%@", with: "messages")).firstRow { $0.int64(0) } ?? 0
        }
    }

    /// How many verified addresses `relay` keeps, for all devices (read from `relay_destinations`).
    func verifiedDestinationCount(on relay: RelayServer) throws -> Int64 {
        let sql = "SELECT count(*) FROM relay_destinations WHERE verified_at IS NOT NULL"
        if let database {
            let connection = try PostgresConnection(url: database.url)
            return try connection.execute(sql).first?.int64(0) ?? 0
        }
        return try relay.outbox.database.read { database in
            try database.statement(sql).firstRow { $0.int64(0) } ?? 0
        }
    }

    /// Drops the PostgreSQL database, if any. Only the first call does anything.
    func release() {
        database?.drop()
    }

    /// A relay on this store in `directory` on manual time; if it does not start, the store is
    /// released (the caller's `defer` would not run: its fixture was never made).
    func relay(in directory: TemporaryDirectory, scheduler: ManualScheduler,
               configure: (inout RelayConfiguration) -> Void) throws -> RelayServer {
        do {
            return try RelayServer(dataDirectory: directory.file("relay"), store: self, clock: scheduler.clock,
                                   scheduler: scheduler, configure: configure)
        } catch {
            release()
            throw error
        }
    }
}
