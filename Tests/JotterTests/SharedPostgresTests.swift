import Testing
@testable import Jotter

/// The tests' shared PostgreSQL cluster: each test gets a database of its own on one running cluster,
/// and a dropped database is gone.
@Suite(.enabled(if: PostgresCluster.available, "needs PostgreSQL (apt-get install postgresql)"))
struct SharedPostgresTests {
    @Test func eachTestHasADatabaseOfItsOwnOnOneCluster() throws {
        let mine = try SharedPostgres.database()
        defer { mine.drop() }
        let starts = SharedPostgres.starts
        let theirs = try SharedPostgres.database()
        defer { theirs.drop() }
        #expect(SharedPostgres.starts == starts, "the running cluster is shared, not started again")
        #expect(mine.name != theirs.name)
        #expect(mine.url.split(separator: "/")[1] == theirs.url.split(separator: "/")[1],
                "one server: the same host and port")

        try PostgresConnection(url: mine.url).execute("CREATE TABLE notes (text TEXT)")
        try PostgresConnection(url: mine.url).execute("INSERT INTO notes VALUES ('mine')")
        #expect(try mine.dump() == ["(mine)"])
        #expect(try theirs.dump().isEmpty, "another test's database is empty")

        theirs.drop()
        #expect(throws: PostgresConnection.Failure.self, "a dropped database is gone") {
            try PostgresConnection(url: theirs.url)
        }
        #expect(try mine.dump() == ["(mine)"], "and the cluster still runs for the other")
    }
}
