import Foundation
import Testing
@testable import Jotter

/// The outbox key on disk: created once with mode 0600, read back unchanged, refused when others may
/// read it or when it is not 32 bytes, and overridden by a systemd credential.
@Suite struct KeyStoreTests {
    /// `stat` mode bits of `path` (permission bits only).
    private static func permissions(_ path: String) -> UInt32? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return UInt32(info.st_mode & 0o7777)
    }

    private static func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t) throws {
        #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        #expect(chmod(path, mode) == 0)
    }

    /// Seals with one key and opens with the other: proves two keys hold the same bytes without reading them.
    private static func sameKey(_ lhs: SymmetricKey, _ rhs: SymmetricKey) throws -> Bool {
        let sealed = try AESGCM.seal(Array("same key?".utf8), using: lhs, authenticating: Array("ad".utf8))
        guard let opened = try? AESGCM.open(sealed, using: rhs, authenticating: Array("ad".utf8)) else { return false }
        return opened == Array("same key?".utf8)
    }

    @Test func firstLoadCreatesAnOwnerOnly32ByteFile() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key")
        _ = try KeyStore.load(path: path)
        #expect(Self.permissions(path) == 0o600)
        let contents = try #require(FileManager.default.contents(atPath: path))
        #expect(contents.count == 32)
        #expect(Set(contents).count > 1, "32 random bytes, not a constant")
    }

    @Test func secondLoadReturnsTheSameKey() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key")
        let first = try KeyStore.load(path: path)
        let before = try #require(FileManager.default.contents(atPath: path))
        let second = try KeyStore.load(path: path)
        #expect(try Self.sameKey(first, second))
        #expect(try Self.sameKey(second, first))
        #expect(FileManager.default.contents(atPath: path) == before, "loading must not rewrite the key")
    }

    @Test func twoDataDirectoriesGetDifferentKeys() throws {
        let directory = TemporaryDirectory()
        let one = try KeyStore.load(path: directory.file("one"))
        let two = try KeyStore.load(path: directory.file("two"))
        #expect(try !Self.sameKey(one, two))
    }

    @Test(arguments: [0o644, 0o640, 0o604, 0o660, 0o620, 0o606, 0o666] as [mode_t])
    func keyAccessibleToGroupOrOthersIsRefused(mode: mode_t) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key")
        _ = try KeyStore.load(path: path)
        #expect(chmod(path, mode) == 0)
        #expect(throws: KeyStore.Failure.insecurePermissions(path: path, mode: UInt32(mode))) {
            try KeyStore.load(path: path)
        }
    }

    @Test(arguments: [0o600, 0o400, 0o700] as [mode_t])
    func ownerOnlyKeyIsAccepted(mode: mode_t) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key")
        let created = try KeyStore.load(path: path)
        #expect(chmod(path, mode) == 0)
        #expect(try Self.sameKey(created, KeyStore.load(path: path)))
    }

    @Test(arguments: [0o644, 0o640] as [mode_t])
    func insecureKeyMessageNamesThePathAndTheFix(mode: mode_t) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key")
        try Self.writeFile(path, Array(repeating: 7, count: 32), mode: mode)
        let error = try #require(throws: KeyStore.Failure.self) { try KeyStore.load(path: path) }
        let message = "\(error)"
        #expect(message.contains(path))
        #expect(message.contains("chmod 600"))
        #expect(!message.contains("\u{7}"), "the message never carries key bytes")
        #expect(Self.permissions(path) == UInt32(mode), "a refused key file is left as it was")
    }

    @Test(arguments: [0, 1, 16, 31, 33, 64, 100, 4096])
    func keyOfWrongLengthIsRefused(length: Int) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key")
        try Self.writeFile(path, Array(repeating: 0xAB, count: length), mode: 0o600)
        let error = try #require(throws: KeyStore.Failure.self) { try KeyStore.load(path: path) }
        guard case .wrongLength(let reportedPath, let reported) = error else {
            Issue.record("expected .wrongLength, got \(error)")
            return
        }
        #expect(reportedPath == path)
        #expect(reported == length, "the real size, however large")
        #expect("\(error)".contains(path))
        #expect(FileManager.default.contents(atPath: path)?.count == length, "never overwritten")
    }

    /// A key file cut short before anything was sealed with it (a first start killed while writing it):
    /// replaced by a whole new key, through a temporary file renamed into place, while the database holds
    /// nothing (none yet, or the zero-byte file a failed first start leaves).
    @Test(arguments: [0, 1, 31], [false, true])
    func aKeyCutShortBeforeAnyDataIsReplaced(length: Int, emptyDatabase: Bool) throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key"), database = directory.file("jotter.db")
        try Self.writeFile(path, Array(repeating: 0xAB, count: length), mode: 0o600)
        if emptyDatabase { #expect(FileManager.default.createFile(atPath: database, contents: Data())) }
        let key = try KeyStore.load(path: path, protecting: database, replacingCutShort: true)
        let contents = try #require(FileManager.default.contents(atPath: path))
        #expect(contents.count == 32 && Set(contents).count > 1, "32 random bytes")
        #expect(Self.permissions(path) == 0o600)
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"))
        #expect(try Self.sameKey(key, KeyStore.load(path: path, protecting: database, replacingCutShort: true)),
                "the new key is kept from then on")
    }

    /// Next to a database that holds data, a short key is refused and left as it is, whatever the caller
    /// allows: memos may be sealed with the key that belongs there. Without `replacingCutShort` (a relay
    /// whose data is in PostgreSQL) it is refused too, and a key too long is never replaced.
    @Test func aShortKeyNextToDataOrNotAllowedToBeReplacedIsRefusedAndKept() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("key"), database = directory.file("jotter.db")
        try Self.writeFile(path, Array(repeating: 0xAB, count: 16), mode: 0o600)
        #expect(throws: KeyStore.Failure.wrongLength(path: path, length: 16)) {
            try KeyStore.load(path: path, protecting: database)
        }
        try Self.writeFile(path, Array(repeating: 0xAB, count: 33), mode: 0o600)
        #expect(throws: KeyStore.Failure.wrongLength(path: path, length: 33)) {
            try KeyStore.load(path: path, protecting: database, replacingCutShort: true)
        }
        let data = try Database(path: database)
        try data.execute("CREATE TABLE memos (x BLOB); INSERT INTO memos VALUES (x'00')")
        data.close()
        for length in [0, 16] {
            try Self.writeFile(path, Array(repeating: 0xAB, count: length), mode: 0o600)
            #expect(throws: KeyStore.Failure.wrongLength(path: path, length: length)) {
                try KeyStore.load(path: path, protecting: database, replacingCutShort: true)
            }
            #expect(FileManager.default.contents(atPath: path) == Data(repeating: 0xAB, count: length), "never overwritten")
        }
    }

    @Test func credentialTakesPrecedenceOverTheDataDirectoryKey() throws {
        let directory = TemporaryDirectory()
        let keyPath = directory.file("key")
        let credentialPath = directory.file("jotter.key")
        let dataKey = try KeyStore.load(path: keyPath)
        let credentialBytes = try SecureRandom.bytes(count: 32)
        try Self.writeFile(credentialPath, credentialBytes, mode: 0o400)
        let expected = try SymmetricKey(bytes: credentialBytes)

        let loaded = try KeyStore.load(path: keyPath, credentialPath: credentialPath)
        #expect(try Self.sameKey(loaded, expected))
        #expect(try !Self.sameKey(loaded, dataKey))
    }

    @Test func credentialIsUsedWithoutCreatingAKeyFile() throws {
        let directory = TemporaryDirectory()
        let keyPath = directory.file("key")
        let credentialPath = directory.file("jotter.key")
        let credentialBytes = try SecureRandom.bytes(count: 32)
        try Self.writeFile(credentialPath, credentialBytes, mode: 0o400)
        let loaded = try KeyStore.load(path: keyPath, credentialPath: credentialPath)
        #expect(try Self.sameKey(loaded, SymmetricKey(bytes: credentialBytes)))
        #expect(!FileManager.default.fileExists(atPath: keyPath))
    }

    @Test func missingCredentialFallsBackToTheKeyFile() throws {
        let directory = TemporaryDirectory()
        let keyPath = directory.file("key")
        let first = try KeyStore.load(path: keyPath, credentialPath: directory.file("absent/jotter.key"))
        #expect(Self.permissions(keyPath) == 0o600)
        let second = try KeyStore.load(path: keyPath)
        #expect(try Self.sameKey(first, second))
    }

    @Test func credentialOfWrongLengthIsRefused() throws {
        let directory = TemporaryDirectory()
        let credentialPath = directory.file("jotter.key")
        try Self.writeFile(credentialPath, Array(repeating: 1, count: 16), mode: 0o400)
        #expect(throws: KeyStore.Failure.wrongLength(path: credentialPath, length: 16)) {
            try KeyStore.load(path: directory.file("key"), credentialPath: credentialPath)
        }
    }

    @Test func keyInAMissingDirectoryIsAnIOErrorNamingThePath() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("missing/key")
        let error = try #require(throws: KeyStore.Failure.self) { try KeyStore.load(path: path) }
        guard case .io(let reportedPath, _) = error else {
            Issue.record("expected .io, got \(error)")
            return
        }
        #expect(reportedPath == path)
    }
}
