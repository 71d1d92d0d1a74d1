import Foundation
import Synchronization
import Testing
@testable import Jotter

/// A node's connections to PostgreSQL are bounded: under load, requests wait for a connection instead
/// of opening more (PostgreSQL's `max_connections` is shared by every node).
@Suite(.holdingSharedPostgres, .enabled(if: PostgresCluster.available, "needs PostgreSQL (apt-get install postgresql)"))
struct PostgresPoolTests {
    @Test func borrowersBeyondTheBoundWaitAndAllAreServed() throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let pool = try PostgresPool(url: database.url, maximumConnections: 3)
        let inside = Atomic<Int>(0), most = Atomic<Int>(0), served = Atomic<Int>(0)
        // A thread each (Dispatch on Linux runs only about as many blocked blocks at once as there
        // are cores, which would never reach the bound).
        let group = DispatchGroup()
        for _ in 0..<24 {
            group.enter()
            Thread {
                defer { group.leave() }
                let ok = (try? pool.with { connection -> Bool in
                    let now = inside.add(1, ordering: .relaxed).newValue
                    _ = most.max(now, ordering: .relaxed)
                    defer { inside.subtract(1, ordering: .relaxed) }
                    return try connection.execute("SELECT pg_sleep(0.05)").count == 1
                }) ?? false
                if ok { served.add(1, ordering: .relaxed) }
            }.start()
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        #expect(served.load(ordering: .relaxed) == 24)
        #expect(most.load(ordering: .relaxed) == 3, "as many as allowed at once, and no more")
        // And PostgreSQL saw no more than three of this pool's connections at once.
        let open = try pool.with { connection in
            try connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
                .first?.int64(0) ?? -1
        }
        #expect((1...3).contains(open), "\(open) connections")
    }

    /// The server closes the pool's idle connections (it restarted, or an administrator ended them): the
    /// next requests are served on new connections, none fails for the connections that were idle.
    @Test func idleConnectionsTheServerClosedAreReplacedUnnoticed() throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let pool = try PostgresPool(url: database.url, maximumConnections: 3)
        // Three idle connections: three borrowers at once.
        let group = DispatchGroup()
        for _ in 0..<3 {
            group.enter()
            Thread {
                defer { group.leave() }
                _ = try? pool.with { try $0.execute("SELECT pg_sleep(0.2)") }
            }.start()
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        let administrator = try PostgresConnection(url: database.url)
        let others = """
            SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
            """
        #expect(try administrator.execute(others).first?.int64(0) == 3)
        try administrator.execute("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()
            """)
        #expect(TestServer.waitUntil(timeout: 20) { (try? administrator.execute(others).first?.int64(0)) == 0 })
        for round in 0..<3 {
            #expect(throws: Never.self, "read \(round)") { try pool.with { try $0.execute("SELECT 1") } }
            #expect(throws: Never.self, "transaction \(round)") { try pool.transaction { try $0.execute("SELECT 1") } }
        }
    }

    @Test func aStoppedRelayHoldsNoConnection() throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let directory = TemporaryDirectory()
        let relay = try RelayServer(dataDirectory: directory.file("relay")) { $0.store = .postgres(url: database.url) }
        let device = try relay.register()
        try relay.verify(device.secret, "me@example.com")
        relay.stop()
        let probe = try PostgresConnection(url: database.url)
        let others = {
            (try? probe.execute("""
                SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                """).first?.int64(0)) ?? -1
        }
        #expect(TestServer.waitUntil(timeout: 20) { others() == 0 }, "\(others()) connections left open")
    }

    /// A database (or role) set to `bytea_output = escape` by its administrator: the relay still reads its
    /// sealed values and key hashes (it read none, and said the node's key was the wrong one).
    @Test func byteaIsReadWhateverTheDatabaseSaysItsOutputIs() async throws {
        let database = try SharedPostgres.database()
        defer { database.drop() }
        let administrator = try PostgresConnection(url: database.url)
        _ = try administrator.execute("ALTER DATABASE \"\(database.name)\" SET bytea_output = 'escape'")
        let connection = try PostgresConnection(url: database.url)
        #expect(try connection.execute("SELECT '\\x00ff41'::bytea").first?.bytes(0) == [0x00, 0xFF, 0x41])
        let directory = TemporaryDirectory()
        let key = try SymmetricKey.random()
        let outbox = try PostgresOutbox(url: database.url, key: key, keyPath: directory.file("jotter.key"),
                                        listening: false)
        let id = try await outbox.enqueue(MemoDraft(subject: "escaped", body: "read back")).id
        outbox.close()
        let again = try PostgresOutbox(url: database.url, key: key, keyPath: directory.file("jotter.key"),
                                       listening: false)
        defer { again.close() }
        let claimed = try again.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(claimed.map(\.id) == [id])
        #expect(claimed.first?.content?.body == "read back")
    }

    /// A server that stops answering must not hold a node for ever: unless the URL says otherwise, a
    /// connection gives up connecting after 10 s and on a peer that stopped acknowledging.
    @Test func connectionsGetTimeoutsUnlessTheURLSetsThem() throws {
        let plain = PostgresConnection.withDefaults("postgres://jotter@127.0.0.1:5432/relay")
        #expect(plain == "postgres://jotter@127.0.0.1:5432/relay?connect_timeout=10&keepalives=1&keepalives_idle=30"
                + "&keepalives_interval=10&keepalives_count=3&tcp_user_timeout=60000")
        let own = PostgresConnection.withDefaults("postgresql://db.example/relay?sslmode=require&connect_timeout=3")
        #expect(own.hasPrefix("postgresql://db.example/relay?sslmode=require&connect_timeout=3&keepalives=1&"))
        #expect(!own.contains("connect_timeout=10"))
        #expect(PostgresConnection.withDefaults("host=127.0.0.1 dbname=relay") == "host=127.0.0.1 dbname=relay")
        // libpq takes them: a real connection with every default added.
        let database = try SharedPostgres.database()
        defer { database.drop() }
        #expect(try PostgresConnection(url: database.url).execute("SELECT 1").first?.int64(0) == 1)
    }
}
