import Foundation
import Testing
@testable import Jotter

/// Start-up on a damaged data directory: refuse with a message that says what to restore, and create
/// nothing that would be in the way of the restore.
@Suite struct DamagedDataDirectoryTests {
    /// A data directory that existed with the umask's 0755 is made private (0700), as one Jotter creates.
    @Test func anExistingDataDirectoryIsMadePrivate() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("data")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o755])
        let data = try DataDirectory(path: path)
        defer { data.unlock() }
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o700)
    }

    /// A data directory with one accepted memo, stopped.
    private static func dataDirectoryWithAMemo() throws -> (TemporaryDirectory, String) {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        let server = try TestServer(dataDirectory: data)
        #expect(try server.request("POST", "/", headers: [("Content-Type", "text/plain")],
                                   body: Array("kept".utf8)).status == 204)
        server.stop()
        return (directory, data)
    }

    private static func exists(_ path: String) -> Bool {
        FileManager.default.fileExists(atPath: path)
    }

    /// A database file this user may not write (restored from a backup as 0400, or owned by another
    /// user) stops the start naming the file, its mode and its owner, before SQLite makes a `-wal` and
    /// `-shm` of the same mode that would block the next start too. Run as `nobody` when the tests run
    /// as root (root writes any file).
    @Test func aDatabaseThisUserCannotWriteIsNamedWithItsMode() throws {
        let (directory, data) = try Self.dataDirectoryWithAMemo()
        var prefix: [String] = []
        if geteuid() == 0 {
            // nobody needs to reach the data directory and own what is in it.
            #expect(chmod(directory.path, 0o755) == 0)
            for path in [data, data + "/key", data + "/jotter.db", data + "/.outbox"] + ((try? FileManager.default
                .contentsOfDirectory(atPath: data))?.map { data + "/" + $0 } ?? []) {
                _ = chown(path, 65534, 65534)
            }
            prefix = ["--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        }
        for name in ["jotter.db-wal", "jotter.db-shm"] { unlink(data + "/" + name) }
        #expect(chmod(data + "/jotter.db", 0o400) == 0)
        let started = try LiveServerTests.JotterBinary.run(
            prefix + [LiveServerTests.JotterBinary.path, "serve", "--port", "0", "--data-dir", data],
            executable: prefix.isEmpty ? LiveServerTests.JotterBinary.path : "/usr/bin/setpriv", timeout: 60)
        #expect(started.status != 0)
        #expect(started.standardError.contains(data + "/jotter.db cannot be written by this user")
                && started.standardError.contains("mode 400"), "\(started.standardError)")
        #expect(!Self.exists(data + "/jotter.db-wal") && !Self.exists(data + "/jotter.db-shm"),
                "nothing made that would block the next start")
    }

    @Test func aMissingKeyNextToADatabaseIsRefusedAndNoNewKeyIsWritten() throws {
        let (directory, data) = try Self.dataDirectoryWithAMemo()
        _ = directory
        #expect(rename(data + "/key", data + "/key.backup") == 0)
        let error = try #require(throws: KeyStore.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect(error == .missing(path: data + "/key", databasePath: data + "/jotter.db"))
        #expect("\(error)".contains("restore the key"))
        #expect(!Self.exists(data + "/key"), "no stray key to remove before the restore")
        // Restored as the message says, the memo is there.
        #expect(rename(data + "/key.backup", data + "/key") == 0)
        let server = try TestServer(dataDirectory: data)
        defer { server.stop() }
        #expect(try server.outbox.history.acceptedCount() == 1)
    }

    /// A zero-byte `jotter.db` where an outbox was made (the marker says so) was truncated: refused, not
    /// started as an empty outbox.
    @Test func aZeroByteDatabaseIsRefusedNotStartedAsAnEmptyOutbox() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: data + "/jotter.db", contents: Data()))
        #expect(FileManager.default.createFile(atPath: data + "/outbox-created", contents: Data()))
        let error = try #require(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect("\(error)".contains("0 bytes") && "\(error)".contains("restore it from your backup")
                && "\(error)".contains(data + "/outbox-created"), "\(error)")
        #expect(!Self.exists(data + "/key"), "nothing created")
        #expect((try? FileManager.default.attributesOfItem(atPath: data + "/jotter.db")[.size] as? Int) == 0)
    }

    /// A first start cut short (a full disk, a kill) after SQLite created `jotter.db` and before it wrote
    /// its first page leaves it empty, and no marker: it never held anything, and the next start makes it
    /// the outbox. Before, every start refused it ("restore it from your backup").
    @Test func aZeroByteDatabaseLeftByAFirstStartCutShortBecomesTheOutbox() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        _ = try KeyStore.load(path: data + "/key")  // the first start makes the key before the database
        try Database(path: data + "/jotter.db").close()  // SQLite creates the file before its first page
        #expect((try? FileManager.default.attributesOfItem(atPath: data + "/jotter.db")[.size] as? Int) == 0)
        #expect(!Self.exists(data + "/outbox-created"))
        let devices = try #require(throws: CommandLineOptions.UsageError.self) {
            _ = try DevicesCommand.run(dataDirectory: data, action: .list)
        }
        #expect("\(devices)".contains("no Jotter data"), "\(devices)")
        let server = try TestServer(dataDirectory: data)
        #expect(try server.request("POST", "/", headers: [("Content-Type", "text/plain")],
                                   body: Array("the first memo".utf8)).status == 204)
        server.stop()
        #expect(Self.exists(data + "/outbox-created"))
        let again = try TestServer(dataDirectory: data)
        defer { again.stop() }
        #expect(try again.outbox.history.acceptedCount() == 1)
    }

    /// `jotter devices` (and `pair`, which shares its opening) on a truncated or replaced database refuses
    /// as the server does. Before, it made a new, empty outbox there, and the server then started on it
    /// instead of saying "restore it from your backup".
    @Test func devicesOnADamagedDatabaseRefusesAndLeavesItForTheRestore() throws {
        let (directory, data) = try Self.dataDirectoryWithAMemo()
        _ = directory
        #expect(truncate(data + "/jotter.db", 0) == 0)
        for name in ["jotter.db-wal", "jotter.db-shm"] { unlink(data + "/" + name) }
        #expect(throws: DataDirectory.Failure.self) { _ = try DevicesCommand.run(dataDirectory: data, action: .list) }
        #expect((try? FileManager.default.attributesOfItem(atPath: data + "/jotter.db")[.size] as? Int) == 0)
        let error = try #require(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect("\(error)".contains("0 bytes"), "the server still says what to restore")
        // A database file holding no outbox at all (another file put in its place), the marker gone too.
        unlink(data + "/jotter.db")
        unlink(data + "/outbox-created")
        let other = try Database(path: data + "/jotter.db")
        try other.run("CREATE TABLE notes (x TEXT)")
        other.close()
        #expect(throws: CommandLineOptions.UsageError.self) { _ = try DevicesCommand.run(dataDirectory: data, action: .list) }
        #expect(DataDirectory.schemaVersion(databasePath: data + "/jotter.db") == 0, "not migrated into an outbox")
    }

    @Test func aDatabaseThatWentMissingIsRefusedWhereOneWasBefore() throws {
        let (directory, data) = try Self.dataDirectoryWithAMemo()
        _ = directory
        for suffix in ["", "-wal", "-shm"] { unlink(data + "/jotter.db" + suffix) }
        let error = try #require(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect("\(error)".contains("restore"))
        #expect(!Self.exists(data + "/jotter.db"), "no empty outbox created in its place")
        // Starting afresh on purpose: delete the marker the message names.
        #expect(unlink(data + "/outbox-created") == 0)
        let server = try TestServer(dataDirectory: data)
        server.stop()
    }

    /// Another, valid database in the outbox's place (an empty one made by hand, a file from elsewhere):
    /// refused, not migrated into an empty outbox that says nothing of the memos gone.
    @Test func aDatabaseReplacedByAnEmptyOneIsRefused() throws {
        let (directory, data) = try Self.dataDirectoryWithAMemo()
        _ = directory
        for suffix in ["", "-wal", "-shm"] { unlink(data + "/jotter.db" + suffix) }
        let empty = try Database(path: data + "/jotter.db")
        try empty.execute("CREATE TABLE unrelated (x)")
        _ = empty
        let error = try #require(throws: DataDirectory.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect("\(error)".contains("holds no outbox") && "\(error)".contains("Restore"), "\(error)")
        let again = try Database(path: data + "/jotter.db")
        #expect(try again.pragma("user_version") == "0", "not migrated")
        #expect(unlink(data + "/outbox-created") == 0)
        let server = try TestServer(dataDirectory: data)
        server.stop()
    }

    /// A data directory this user cannot look into (EACCES for a user; here a loop of symbolic links, which
    /// root meets too) is said as it is, not as "no Jotter data here".
    @Test func aDirectoryThatCannotBeLookedIntoIsNotCalledEmpty() throws {
        let directory = TemporaryDirectory()
        let loop = directory.file("loop")
        #expect(symlink(loop, loop) == 0)
        let devices = try #require(throws: DataDirectory.Failure.self) { _ = try DevicesCommand.run(dataDirectory: loop, action: .list) }
        #expect("\(devices)".contains(String(cString: strerror(ELOOP))), "\(devices)")
        let rekey = try #require(throws: DataDirectory.Failure.self) { _ = try Rekey.run(dataDirectory: loop) }
        #expect("\(rekey)".contains(String(cString: strerror(ELOOP))), "\(rekey)")
    }

    /// A `jotter.db` cut short (a copy that stopped, a disk that failed): the start says it is damaged and
    /// what to do, not SQLite's "malformed" and the statement that met it.
    @Test func aTruncatedDatabaseIsSaidToBeDamaged() throws {
        let (directory, data) = try DamagedPagesTests.dataDirectory(memos: 60, marker: "truncated")
        _ = directory
        let path = data + "/jotter.db"
        let database = try Database(path: path)
        try database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        database.close()
        #expect(truncate(path, 6000) == 0)
        let error = try #require(throws: Outbox.OpenError.self) { _ = try TestServer(dataDirectory: data) }
        #expect("\(error)".contains("restore jotter.db from your backup") && "\(error)".contains(path), "\(error)")
    }

    @Test func rekeyOnAMistypedPathCreatesNothing() throws {
        let directory = TemporaryDirectory()
        let typo = directory.file("no-such-data")
        let error = try #require(throws: DataDirectory.Failure.self) { _ = try Rekey.run(dataDirectory: typo) }
        #expect("\(error)".contains(typo))
        #expect(!Self.exists(typo))
        // A directory that exists but holds no outbox: refused, no key written either.
        try FileManager.default.createDirectory(atPath: typo, withIntermediateDirectories: true)
        #expect(chmod(typo, 0o755) == 0)
        #expect(throws: Rekey.Failure.noDatabase(path: typo + "/jotter.db")) { _ = try Rekey.run(dataDirectory: typo) }
        #expect(!Self.exists(typo + "/key") && !Self.exists(typo + "/key.new"))
        #expect(!Self.exists(typo + "/lock"), "not touched: no lock file")
        #expect((try FileManager.default.attributesOfItem(atPath: typo)[.posixPermissions] as? Int) == 0o755,
                "not touched: its mode as it was")
    }

    /// A rekey run with another directory's key fails before it writes `key.new`: left behind, that file
    /// stopped serve ("a rekey was interrupted") once the right key was back.
    @Test func aRekeyWithTheWrongKeyLeavesNothingBehind() throws {
        let (directory, data) = try Self.dataDirectoryWithAMemo()
        let (otherDirectory, other) = try Self.dataDirectoryWithAMemo()
        _ = (directory, otherDirectory)
        #expect(rename(data + "/key", data + "/key.right") == 0)
        try FileManager.default.copyItem(atPath: other + "/key", toPath: data + "/key")
        #expect(throws: Outbox.OpenError.self) { _ = try Rekey.run(dataDirectory: data) }
        #expect(!Self.exists(data + "/key.new"))
        #expect(unlink(data + "/key") == 0 && rename(data + "/key.right", data + "/key") == 0)
        let server = try TestServer(dataDirectory: data)
        #expect(try server.outbox.history.acceptedCount() == 1)
        server.stop()
        #expect(try Rekey.run(dataDirectory: data).resealed >= 1, "and the right key rekeys")
    }

    @Test func aKeyThatIsADirectoryIsNamedAsSuch() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data + "/key", withIntermediateDirectories: true)
        let error = try #require(throws: KeyStore.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect(error == .notAFile(path: data + "/key"))
        #expect("\(error)".contains("not a regular file"))
    }

    @Test func aKeyOfTheWrongSizeSaysItsRealSize() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        let fd = open(data + "/key", O_WRONLY | O_CREAT | O_EXCL, 0o600)
        #expect(fd >= 0)
        _ = Array(repeating: UInt8(1), count: 1000).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let error = try #require(throws: KeyStore.Failure.self) { _ = try TestServer(dataDirectory: data) }
        #expect(error == .wrongLength(path: data + "/key", length: 1000))
    }

    /// A first start cut off while it wrote the key (a kill, a power loss before the key's fsync) leaves
    /// a short `key` and no outbox: the next start replaces it and serves. Before, every start refused it
    /// ("restore the key file"), though nothing was ever sealed with it. Next to an outbox, a key cut
    /// short is refused and left for the restore.
    @Test func aKeyCutShortByAFirstStartIsReplacedButNeverNextToMemos() throws {
        let directory = TemporaryDirectory()
        let data = directory.file("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: data + "/key", contents: Data(),
                                               attributes: [.posixPermissions: 0o600]))
        let server = try TestServer(dataDirectory: data)
        #expect(try server.request("POST", "/", headers: [("Content-Type", "text/plain")],
                                   body: Array("after the key was made again".utf8)).status == 204)
        server.stop()
        #expect(FileManager.default.contents(atPath: data + "/key")?.count == 32)

        let (withMemo, memoData) = try Self.dataDirectoryWithAMemo()
        _ = withMemo
        #expect(truncate(memoData + "/key", 0) == 0)
        let error = try #require(throws: KeyStore.Failure.self) { _ = try TestServer(dataDirectory: memoData) }
        #expect(error == .wrongLength(path: memoData + "/key", length: 0))
        #expect(FileManager.default.contents(atPath: memoData + "/key")?.count == 0, "left for the restore")
    }

    @Test func aMaildirThatCannotBeCreatedStopsTheStart() throws {
        let directory = TemporaryDirectory()
        #expect(FileManager.default.createFile(atPath: directory.file("a-file"), contents: Data("x".utf8)))
        let error = try #require(throws: Application.StartFailure.self) {
            _ = try TestServer(dataDirectory: directory.file("data"), relay: "maildir:" + directory.file("a-file/Maildir"))
        }
        #expect("\(error)".contains("--relay"))
        // The failed start left the data directory unlocked: a good relay starts.
        let server = try TestServer(dataDirectory: directory.file("data"))
        server.stop()
    }
}
