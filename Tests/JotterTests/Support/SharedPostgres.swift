import Foundation
import Synchronization
import Testing
@testable import Jotter

/// One throwaway PostgreSQL cluster (`PostgresCluster`) shared by the tests running at the same time,
/// each test in a database of its own. Starting a cluster costs 2–4 s on two cores, too much per test;
/// so it is reference-counted: the first test that asks for a database starts it, the last one to drop
/// its database (or the last `hold` to end) stops it. No server outlives the tests that used it.
enum SharedPostgres {
    private struct State {
        var cluster: PostgresCluster?
        /// Databases not yet dropped, plus holds.
        var users = 0
        /// Names are unique within this process (a cluster lives in no other).
        var nextDatabase = 0
        /// Clusters started so far (a test of the sharing itself can read it).
        var starts = 0
    }

    private static let state = Mutex(State())

    /// A database of its own on the shared cluster, for one test. Call `drop()` when done, after
    /// stopping every relay that uses it; until then the cluster keeps running.
    final class Database: Sendable {
        /// `jotter_test_N`.
        let name: String
        /// `postgres://jotter@127.0.0.1:PORT/jotter_test_N`.
        let url: String
        fileprivate let administration: String
        private let dropped = Atomic<Bool>(false)

        fileprivate init(name: String, cluster: PostgresCluster) {
            self.name = name
            administration = cluster.url
            url = "postgres://jotter@127.0.0.1:\(cluster.port)/\(name)"
        }

        /// Every row of every table in this database, as PostgreSQL spells a row in text (`bytea` as
        /// `\x` and hex digits): what someone with a dump of it would read.
        func dump() throws -> [String] {
            let connection = try PostgresConnection(url: url)
            let tables = try connection.execute("""
                SELECT quote_ident(table_name) FROM information_schema.tables
                WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name
                """).all.compactMap { $0.text(0) }
            return try tables.flatMap { table in
                try connection.execute("SELECT CAST(t AS TEXT) FROM \(table) t").all.compactMap { $0.text(0) }
            }
        }

        /// Drops the database (closing any connection a stopped relay still holds) and lets go of the
        /// cluster. Only the first call does anything.
        func drop() {
            guard !dropped.exchange(true, ordering: .acquiringAndReleasing) else { return }
            defer { SharedPostgres.release() }
            do {
                let connection = try PostgresConnection(url: administration)
                try connection.execute("DROP DATABASE \(name) WITH (FORCE)")
            } catch {
                Issue.record("DROP DATABASE \(name): \(error)")
            }
        }
    }

    /// A fresh, empty database on the shared cluster, started if no test is using it.
    static func database() throws -> Database {
        let (cluster, number) = try acquire()
        let database = Database(name: "jotter_test_\(number)", cluster: cluster)
        do {
            // A short-lived connection to the cluster's `postgres` database; the name is ours, not input.
            let connection = try PostgresConnection(url: database.administration)
            try connection.execute("CREATE DATABASE \(database.name)")
        } catch {
            release()
            throw error
        }
        return database
    }

    /// Keeps a cluster, once one is started, running until `body` returns, without starting one: a
    /// suite that holds it does not see it stopped and started again between its tests.
    static func holding<T>(_ body: () async throws -> T) async rethrows -> T {
        state.withLock { $0.users += 1 }
        defer { release() }
        return try await body()
    }

    /// How many clusters this process has started so far.
    static var starts: Int { state.withLock { $0.starts } }

    /// Counts one more user of the cluster, starting it if none is running, and numbers a database.
    /// The start happens under the lock: a second test asking meanwhile waits for this cluster rather
    /// than starting another.
    private static func acquire() throws -> (PostgresCluster, Int) {
        try state.withLock { state in
            let cluster = try state.cluster ?? PostgresCluster()
            if state.cluster == nil {
                state.cluster = cluster
                state.starts += 1
            }
            state.users += 1
            state.nextDatabase += 1
            return (cluster, state.nextDatabase)
        }
    }

    /// Counts one user fewer; the last one stops the cluster (under the lock, so a test that asks for
    /// a database meanwhile gets a new cluster, not this one going down).
    private static func release() {
        state.withLock { state in
            state.users -= 1
            precondition(state.users >= 0, "SharedPostgres released more often than acquired")
            if state.users == 0, let cluster = state.cluster {
                cluster.stop()
                state.cluster = nil
            }
        }
    }
}

/// `@Suite(.holdingSharedPostgres)`: the suite holds the shared cluster (`SharedPostgres.holding`)
/// while its tests run, so the cluster one of them starts is not stopped and started again each time
/// no PostgreSQL test happens to be running — every gap costs 2–4 s. It starts nothing itself.
struct HoldingSharedPostgres: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite ? self : nil
    }

    func provideScope(for test: Test, testCase: Test.Case?,
                      performing function: @Sendable () async throws -> Void) async throws {
        try await SharedPostgres.holding(function)
    }
}

extension Trait where Self == HoldingSharedPostgres {
    /// Holds the shared PostgreSQL cluster, once started, for the whole suite.
    static var holdingSharedPostgres: Self { Self() }
}
