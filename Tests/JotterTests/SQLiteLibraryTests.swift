import CSQLite
import Testing
@testable import Jotter

/// SQLite's process-wide settings (`SQLiteLibrary`), made before the first connection opens.
@Suite struct SQLiteLibraryTests {
    /// With memory statistics on (SQLite's default), every allocation and free SQLite makes takes one
    /// process-wide mutex to count it, from every thread that uses a connection. Jotter turns them off, so
    /// after a database has been opened and written SQLite has counted nothing.
    @Test func sqliteCountsNoMemory() throws {
        let directory = TemporaryDirectory()
        let queue = try DatabaseQueue(path: directory.file("jotter.db"))
        defer { queue.close() }
        try queue.write { database in
            try database.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body BLOB)")
            for index in 0..<100 {
                let body = [UInt8](repeating: UInt8(index), count: 2_000)
                try database.run("INSERT INTO notes (body) VALUES (?)", [.blob(body)])
            }
        }
        let rows = try queue.read { try $0.statement("SELECT count(*) FROM notes").firstRow([]) { $0.int64(0) } }
        #expect(rows == 100)
        // Counted, these would be hundreds of kilobytes: two connections, their page caches, 100 rows.
        #expect(sqlite3_memory_used() == 0)
        #expect(sqlite3_memory_highwater(0) == 0)
    }
}
