import Foundation
import Synchronization
import Testing
@testable import Jotter

/// One outbox database in its own directory, with a key and a clock that moves only when told.
private struct OutboxFixture {
    let directory = TemporaryDirectory()
    let key: SymmetricKey
    let clock = ManualClock()

    init() throws {
        key = try SymmetricKey.random()
    }

    var path: String { directory.file("jotter.db") }

    func open(key: SymmetricKey? = nil) throws -> Outbox {
        try Outbox(path: path, key: key ?? self.key, clock: clock)
    }
}

/// Direct access to the `messages` table, as an attacker with the file (or a disk fault) would have it.
private enum StoredRows {
    static func blob(_ column: String, id: String, path: String) throws -> [UInt8]? {
        let database = try Database(path: path)
        defer { database.close() }
        return try database.statement("SELECT \(column) FROM messages WHERE id = ?").firstRow([.text(id)]) {
            $0.blob(0)
        } ?? nil
    }

    static func setBlob(_ column: String, id: String, to value: [UInt8]?, path: String) throws {
        let database = try Database(path: path)
        defer { database.close() }
        try database.execute("PRAGMA busy_timeout = 5000")
        try database.run("UPDATE messages SET \(column) = ? WHERE id = ?",
                         [value.map { .blob($0) } ?? .null, .text(id)])
        #expect(database.changes == 1)
    }

    static func count(path: String) throws -> Int {
        let database = try Database(path: path, readOnly: true)
        defer { database.close() }
        return Int(try database.statement("SELECT COUNT(*) FROM messages").firstRow { $0.int64(0) } ?? 0)
    }

    static func exists(id: String, path: String) -> Bool {
        guard let database = try? Database(path: path, readOnly: true) else { return false }
        defer { database.close() }
        try? database.execute("PRAGMA busy_timeout = 5000")
        let count = try? database.statement("SELECT COUNT(*) FROM messages WHERE id = ?").firstRow([.text(id)]) {
            $0.int64(0)
        }
        return count == 1
    }
}

/// A counter closures can share.
private final class Counter: Sendable {
    private let value = Mutex(0)
    func increment() { value.withLock { $0 += 1 } }
    var count: Int { value.withLock { $0 } }
}

/// Small checks on what a user (or an attacker with the disk) can see, shared by the outbox and live tests.
enum Evidence {
    /// True for the id form Jotter issues: a lowercase UUID.
    static func isLowercaseUUID(_ text: String) -> Bool {
        text.utf8.count == 36 && UUID(uuidString: text) != nil && text == text.lowercased()
    }

    /// True when `needle` occurs anywhere in `haystack`.
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        let first = needle[0]
        var index = 0
        while index <= haystack.count - needle.count {
            if haystack[index] == first && haystack[index..<(index + needle.count)].elementsEqual(needle) {
                return true
            }
            index += 1
        }
        return false
    }

    /// The raw bytes of a file, or none if it does not exist.
    static func fileBytes(_ path: String) -> [UInt8] {
        FileManager.default.contents(atPath: path).map { Array($0) } ?? []
    }
}

/// A WAL file read as plain bytes (no lock, no checkpoint): the page number of each frame of its current
/// generation, in order.
enum WALFile {
    static func pageNumbers(_ path: String) -> [Int64] {
        let bytes = Evidence.fileBytes(path)
        func integer(_ offset: Int) -> Int {
            bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) }
        }
        guard bytes.count >= 32 else { return [] }
        let pageSize = integer(8), salts = bytes[16..<24]
        var pages: [Int64] = []
        var offset = 32
        while offset + 24 + pageSize <= bytes.count && bytes[(offset + 8)..<(offset + 16)].elementsEqual(salts) {
            pages.append(Int64(integer(offset)))
            offset += 24 + pageSize
        }
        return pages
    }
}

@Suite struct OutboxTests {
    // MARK: Durability and confidentiality

    /// The database and its WAL and shared-memory files are the owner's alone, whatever the umask (this
    /// test process's is 022, as a login shell's), and a database an older Jotter left 0644 is tightened.
    @Test func theDatabaseFilesAreTheOwnersAlone() async throws {
        func mode(_ path: String) -> mode_t? {
            var info = stat()
            return stat(path, &info) == 0 ? info.st_mode & 0o777 : nil
        }
        let fixture = try OutboxFixture()
        do {
            let outbox = try fixture.open()
            _ = try await outbox.enqueue(MemoDraft(body: "metadata is private too"))
            for file in [fixture.path, fixture.path + "-wal", fixture.path + "-shm"] {
                #expect(mode(file) == 0o600, "\(file)")
            }
            outbox.close()
        }
        #expect(chmod(fixture.path, 0o644) == 0)
        let outbox = try fixture.open()
        defer { outbox.close() }
        #expect(mode(fixture.path) == 0o600)
        #expect(try outbox.history.counts()[.queued] == 1)
    }

    /// Opening the database again in this process leaves the locks of the connections already open
    /// where they were. A POSIX lock belongs to the process, and closing any descriptor of the file drops
    /// them all: then another process could truncate the WAL under a reader's snapshot.
    @Test func anotherConnectionLeavesTheOpenOnesTheirLocks() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        _ = try await outbox.enqueue(MemoDraft(body: "still in the WAL"))
        let checkpoint = """
            import sqlite3, sys
            print(sqlite3.connect(sys.argv[1], timeout=0).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
            """
        let busy = try outbox.database.read { database -> String in  // one read transaction, one snapshot
            #expect(try database.statement("SELECT COUNT(*) FROM messages").firstRow { $0.int64(0) } == 1)
            try Database(path: fixture.path).close()
            return try Python.run(checkpoint, arguments: [fixture.path])
        }
        #expect(busy == "1\n", "the reader's snapshot still holds the WAL")
        #expect(try Python.run(checkpoint, arguments: [fixture.path]) == "0\n", "and lets it go when done")
    }

    @Test func acceptedMemoIsThereAfterReopening() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        let outcome = try await outbox.enqueue(MemoDraft(subject: "Groceries", body: "buy milk\nand eggs"))
        guard case .accepted(let id) = outcome else {
            Issue.record("expected .accepted, got \(outcome)")
            return
        }
        #expect(Evidence.isLowercaseUUID(id))
        outbox.close()

        let reopened = try fixture.open()
        defer { reopened.close() }
        let history = try reopened.history.latest(limit: 10)
        #expect(history.map(\.id) == [id])
        let record = try #require(history.first)
        #expect(record.status == .queued)
        #expect(record.attempts == 0)
        #expect(record.subject == "Groceries")
        #expect(record.createdAt == fixture.clock.nowMilliseconds())
        #expect(try reopened.history.record(id: id) == record)
        let claimed = try reopened.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(claimed.map(\.id) == [id])
        #expect(claimed.first?.content == MemoContent(subject: "Groceries", body: "buy milk\nand eggs"))
    }

    @Test func memoWithoutSubjectGetsItsFirstLine() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(body: "\n  call the plumber  \nabout the sink")).id
        #expect(try outbox.history.record(id: id)?.subject == "call the plumber")
    }

    @Test func databaseFilesNeverHoldTheMemoInPlaintext() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        let bodyCanary = "platypus-body-\(UUID().uuidString)"
        let subjectCanary = "axolotl-subject-\(UUID().uuidString)"
        for index in 0..<5 {
            _ = try await outbox.enqueue(MemoDraft(subject: "\(subjectCanary) \(index)",
                                                   body: "\(bodyCanary) \(index)\nsecond line \(bodyCanary)"))
        }
        // Still queued (there is no worker): the sealed rows are all there is.
        #expect(try outbox.history.counts()[.queued] == 5)
        let database = Evidence.fileBytes(fixture.path)
        let wal = Evidence.fileBytes(fixture.path + "-wal")
        #expect(!database.isEmpty || !wal.isEmpty)
        for canary in [bodyCanary, subjectCanary] {
            #expect(!Evidence.contains(database, Array(canary.utf8)), "jotter.db holds \(canary)")
            #expect(!Evidence.contains(wal, Array(canary.utf8)), "jotter.db-wal holds \(canary)")
        }
        outbox.close()  // checkpoints the WAL into the main file
        let checkpointed = Evidence.fileBytes(fixture.path)
        for canary in [bodyCanary, subjectCanary] {
            #expect(!Evidence.contains(checkpointed, Array(canary.utf8)), "jotter.db holds \(canary) after close")
        }
    }

    @Test func anotherKeyCannotOpenTheRows() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        let id = try await outbox.enqueue(MemoDraft(subject: "secret", body: "very secret")).id
        outbox.close()

        // Another key either cannot open the outbox at all, or opens it and can read none of its rows.
        if let stranger = try? fixture.open(key: SymmetricKey.random()) {
            #expect(try stranger.history.record(id: id)?.subject == nil)
            let claimed = try stranger.claimDue(limit: 10, leaseMilliseconds: 60_000)
            #expect(claimed.map(\.id) == [id])
            #expect(claimed.first?.content == nil)
            stranger.close()
            return
        }
        let owner = try fixture.open()
        defer { owner.close() }
        #expect(try owner.history.record(id: id)?.subject == "secret", "a refused stranger changed nothing")
        #expect(try owner.claimDue(limit: 10, leaseMilliseconds: 60_000).first?.content
                == MemoContent(subject: "secret", body: "very secret"))
    }

    // MARK: Tampering

    /// Offsets into `nonce ‖ ciphertext ‖ tag`: first and last nonce byte, first ciphertext byte, a middle
    /// byte, last tag byte.
    static let flipPositions: [Int] = [0, 11, 12, 20, -1]

    @Test(arguments: flipPositions)
    func flippedBitInSealedPayloadFailsToOpen(position: Int) async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let good = try await outbox.enqueue(MemoDraft(subject: "fine", body: "untouched")).id
        let bad = try await outbox.enqueue(MemoDraft(subject: "tampered", body: "this row gets a flipped bit")).id
        var sealed = try #require(try StoredRows.blob("sealed_payload", id: bad, path: fixture.path))
        let index = position < 0 ? sealed.count + position : position
        sealed[index] ^= 0x01
        try StoredRows.setBlob("sealed_payload", id: bad, to: sealed, path: fixture.path)

        let claimed = try outbox.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(Set(claimed.map(\.id)) == [good, bad])
        #expect(claimed.first { $0.id == good }?.content == MemoContent(subject: "fine", body: "untouched"))
        #expect(claimed.first { $0.id == bad }.map { $0.content == nil } == true)
    }

    @Test(arguments: flipPositions)
    func flippedBitInSealedSubjectHidesOnlyThatSubject(position: Int) async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let good = try await outbox.enqueue(MemoDraft(subject: "fine", body: "untouched")).id
        let bad = try await outbox.enqueue(MemoDraft(subject: "tampered", body: "subject gets a flipped bit")).id
        var sealed = try #require(try StoredRows.blob("sealed_subject", id: bad, path: fixture.path))
        let index = position < 0 ? sealed.count + position : position
        sealed[index] ^= 0x80
        try StoredRows.setBlob("sealed_subject", id: bad, to: sealed, path: fixture.path)

        #expect(try outbox.history.record(id: good)?.subject == "fine")
        let record = try #require(try outbox.history.record(id: bad))
        #expect(record.subject == nil)
        #expect(record.status == .queued, "the memo itself is still there")
    }

    @Test func truncatedSealedPayloadFailsToOpen() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(body: "cut short")).id
        let sealed = try #require(try StoredRows.blob("sealed_payload", id: id, path: fixture.path))
        try StoredRows.setBlob("sealed_payload", id: id, to: Array(sealed.prefix(10)), path: fixture.path)
        let claimed = try outbox.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(claimed.map(\.id) == [id])
        #expect(claimed.first.map { $0.content == nil } == true)
    }

    @Test func sealedPayloadMovedToAnotherIdFailsToOpen() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let first = try await outbox.enqueue(MemoDraft(subject: "A", body: "memo A")).id
        let second = try await outbox.enqueue(MemoDraft(subject: "B", body: "memo B")).id
        let payload = try #require(try StoredRows.blob("sealed_payload", id: first, path: fixture.path))
        let subject = try #require(try StoredRows.blob("sealed_subject", id: first, path: fixture.path))
        try StoredRows.setBlob("sealed_payload", id: second, to: payload, path: fixture.path)
        try StoredRows.setBlob("sealed_subject", id: second, to: subject, path: fixture.path)

        #expect(try outbox.history.record(id: first)?.subject == "A")
        #expect(try outbox.history.record(id: second)?.subject == nil, "A's subject must not show up as B's")
        let claimed = try outbox.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(claimed.first { $0.id == first }?.content == MemoContent(subject: "A", body: "memo A"))
        let moved = try #require(claimed.first { $0.id == second })
        #expect(moved.content == nil, "A's body must not be delivered as B")
    }

    @Test func sealedPayloadMovedIntoTheSubjectColumnFailsToOpen() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let draft = MemoDraft(subject: "short", body: "the body must never be shown as a subject")
        let id = try await outbox.enqueue(draft).id
        let payload = try #require(try StoredRows.blob("sealed_payload", id: id, path: fixture.path))
        try StoredRows.setBlob("sealed_subject", id: id, to: payload, path: fixture.path)
        #expect(try outbox.history.record(id: id)?.subject == nil)
    }

    @Test func everySealedFieldHasANonceOfItsOwn() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        var nonces = Set<[UInt8]>()
        var ids = Set<String>()
        for index in 0..<50 {
            let id = try await outbox.enqueue(MemoDraft(subject: "same subject", body: "memo \(index % 2)")).id
            ids.insert(id)
            for column in ["sealed_payload", "sealed_subject"] {
                let sealed = try #require(try StoredRows.blob(column, id: id, path: fixture.path))
                nonces.insert(Array(sealed.prefix(12)))
            }
            #expect(Array(id)[14] == "7", "version 7: \(id)")
        }
        // The ids' random bits and both nonces come from one draw: no two of the 100 nonces, nor two ids
        // (all made in the same millisecond), are alike.
        #expect(ids.count == 50)
        #expect(nonces.count == 100)
        #expect(try outbox.history.latest(limit: 50).allSatisfy { $0.subject == "same subject" })
    }

    @Test func onlyAMemoWithAKeyStoresAPayloadHash() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        // Without a key nothing can replay the memo, so no hash of its content is kept at all.
        let plain = try await outbox.enqueue(MemoDraft(body: "no key")).id
        let keyed = try await outbox.enqueue(MemoDraft(body: "with key", idempotencyKey: "hash-me")).id
        #expect(try StoredRows.blob("payload_hash", id: plain, path: fixture.path) == [])
        #expect(try StoredRows.blob("idempotency_hash", id: plain, path: fixture.path) == nil)
        #expect(try StoredRows.blob("payload_hash", id: keyed, path: fixture.path)?.count == 32)
        #expect(try StoredRows.blob("idempotency_hash", id: keyed, path: fixture.path)?.count == 32)
        // Another keyless memo with the same text is a memo of its own.
        let again = try await outbox.enqueue(MemoDraft(body: "no key"))
        #expect(again == .accepted(id: again.id) && again.id != plain)
    }

    // MARK: Idempotency

    @Test func sameKeyAndPayloadIsReplayedWithoutANewRow() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let draft = MemoDraft(subject: "once", body: "only once", idempotencyKey: "client-id-1")
        let first = try await outbox.enqueue(draft)
        let second = try await outbox.enqueue(draft)
        guard case .accepted(let id) = first else {
            Issue.record("expected .accepted, got \(first)")
            return
        }
        #expect(second == .replayed(id: id))
        #expect(try outbox.history.latest(limit: 10).map(\.id) == [id])
        #expect(try StoredRows.count(path: fixture.path) == 1)
    }

    @Test func replayIsRecognisedAfterReopening() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        let draft = MemoDraft(body: "survives a restart", idempotencyKey: "restart-key")
        let id = try await outbox.enqueue(draft).id
        outbox.close()
        let reopened = try fixture.open()
        defer { reopened.close() }
        #expect(try await reopened.enqueue(draft) == .replayed(id: id))
        #expect(try StoredRows.count(path: fixture.path) == 1)
    }

    static let conflictingDrafts: [MemoDraft] = [
        MemoDraft(subject: "first", body: "a different body", idempotencyKey: "k"),
        MemoDraft(subject: "another subject", body: "the body", idempotencyKey: "k"),
        MemoDraft(subject: nil, body: "the body", idempotencyKey: "k"),
        MemoDraft(subject: "", body: "the body", idempotencyKey: "k"),
        MemoDraft(subject: "first", body: "the body ", idempotencyKey: "k"),
    ]

    @Test(arguments: conflictingDrafts)
    func sameKeyWithDifferentPayloadIsAConflict(conflicting: MemoDraft) async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(subject: "first", body: "the body", idempotencyKey: "k")).id
        await #expect(throws: Outbox.EnqueueError.idempotencyConflict) {
            try await outbox.enqueue(conflicting)
        }
        #expect(try outbox.history.latest(limit: 10).map(\.id) == [id], "nothing new stored")
        let claimed = try outbox.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(claimed.first?.content == MemoContent(subject: "first", body: "the body"), "the original is untouched")
    }

    @Test func differentKeysWithTheSamePayloadAreTwoMemos() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let first = try await outbox.enqueue(MemoDraft(body: "same words", idempotencyKey: "one"))
        let second = try await outbox.enqueue(MemoDraft(body: "same words", idempotencyKey: "two"))
        let third = try await outbox.enqueue(MemoDraft(body: "same words"))
        #expect(Set([first.id, second.id, third.id]).count == 3)
        #expect(try StoredRows.count(path: fixture.path) == 3)
    }

    @Test func concurrentEnqueuesWithOneKeyStoreOneRow() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let draft = MemoDraft(subject: "race", body: "twenty taps on send", idempotencyKey: "double-tap")
        let outcomes = try await withThrowingTaskGroup(of: Outbox.EnqueueOutcome.self) { group in
            for _ in 0..<20 {
                group.addTask { try await outbox.enqueue(draft) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(outcomes.count == 20)
        #expect(Set(outcomes.map(\.id)).count == 1, "every caller gets the same id")
        #expect(outcomes.filter { if case .accepted = $0 { true } else { false } }.count == 1)
        #expect(try StoredRows.count(path: fixture.path) == 1)
    }

    // MARK: Group commit

    @Test func twoHundredConcurrentEnqueuesAreAllStoredInFewerTransactions() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let batches = Counter()
        outbox.setOnAccepted { batches.increment() }  // once per committed batch that stored something
        let ids = try await withThrowingTaskGroup(of: Outbox.EnqueueOutcome.self) { group in
            for index in 0..<200 {
                group.addTask { try await outbox.enqueue(MemoDraft(body: "memo number \(index)")) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(ids.count == 200)
        #expect(ids.allSatisfy { if case .accepted = $0 { true } else { false } })
        #expect(Set(ids.map(\.id)).count == 200)
        #expect(Set(try outbox.history.latest(limit: 500).map(\.id)) == Set(ids.map(\.id)))
        #expect(try outbox.history.counts()[.queued] == 200)
        #expect(try StoredRows.count(path: fixture.path) == 200)
        #expect(batches.count >= 1)
        #expect(batches.count < 100, "group commit: \(batches.count) transactions for 200 memos")
    }

    @Test func everyAnswerComesAfterItsRowIsCommitted() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let path = fixture.path
        // Each completion looks through an independent connection: the row must already be committed.
        let visible = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<50 {
                group.addTask {
                    await withCheckedContinuation { continuation in
                        outbox.enqueue(MemoDraft(body: "durable \(index)")) { result in
                            guard case .success(let outcome) = result else {
                                continuation.resume(returning: false)
                                return
                            }
                            continuation.resume(returning: StoredRows.exists(id: outcome.id, path: path))
                        }
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(visible.count == 50)
        #expect(visible.allSatisfy { $0 })
    }

    // MARK: Time-ordered ids

    /// A memo's id begins with the millisecond it was accepted (a version 7 UUID), so ids sort in the order
    /// memos came, whichever random bits follow.
    @Test func idsCarryTheirAcceptTimeAndSortInTheOrderMemosCame() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let start = fixture.clock.nowMilliseconds()
        var ids: [String] = []
        for _ in 0..<50 {
            ids.append(try await outbox.enqueue(MemoDraft(body: "memo")).id)
            fixture.clock.advance(milliseconds: 1)
        }
        #expect(ids == ids.sorted())
        #expect(Set(ids).count == ids.count)
        for (offset, id) in ids.enumerated() {
            #expect(Evidence.isLowercaseUUID(id))
            #expect(Int64(id.replacingOccurrences(of: "-", with: "").prefix(12), radix: 16) == start + Int64(offset))
            #expect(Array(id)[14] == "7", "version 7: \(id)")
            #expect("89ab".contains(Array(id)[19]), "RFC 9562 variant: \(id)")
        }
    }

    /// An accept rewrites the end of the id index, not any of its pages: 200 memos accepted one at a time
    /// on top of 3,000 write a handful of the index's pages to the WAL. (Random ids put each entry on any
    /// of its leaves, and every checkpoint then copied most of them back into the database.)
    @Test func acceptsWriteOnlyTheEndOfTheIdIndex() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<3_000 {
                group.addTask { _ = try await outbox.enqueue(MemoDraft(body: "earlier memo \(index)")) }
                if index % 100 == 99 { fixture.clock.advance(milliseconds: 1) }
            }
            try await group.waitForAll()
        }
        let side = try Database(path: fixture.path)
        defer { side.close() }
        try side.execute("PRAGMA busy_timeout = 5000")
        try side.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        #expect(WALFile.pageNumbers(fixture.path + "-wal").isEmpty)

        for index in 0..<200 {
            fixture.clock.advance(milliseconds: 1)
            _ = try await outbox.enqueue(MemoDraft(body: "later memo \(index)"))
        }
        let written = Set(WALFile.pageNumbers(fixture.path + "-wal"))
        let indexPages = Set(try side.statement("""
            SELECT pageno FROM dbstat WHERE name =
                (SELECT name FROM pragma_index_list('messages') WHERE origin = 'u')
            """).rows { $0.int64(0) })
        #expect(indexPages.count >= 30, "the index is big enough for random ids to spread: \(indexPages.count) pages")
        let touched = written.intersection(indexPages)
        #expect(!touched.isEmpty)
        #expect(touched.count <= 8, "\(touched.count) of the id index's \(indexPages.count) pages rewritten")
    }

    // MARK: Leases

    @Test func twoConcurrentClaimersNeverGetTheSameMemo() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        var enqueued: Set<String> = []
        for index in 0..<60 {
            enqueued.insert(try await outbox.enqueue(MemoDraft(body: "claim me \(index)")).id)
        }
        // A second connection on the same file, as a second process would have.
        let other = try fixture.open()
        defer { other.close() }
        let claimers = [outbox, other, outbox, other]
        let claims = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: claimers.count) { index in
            while true {
                guard let batch = try? claimers[index].claimDue(limit: 3, leaseMilliseconds: 60_000), !batch.isEmpty
                else { return }
                claims.withLock { $0 += batch.map(\.id) }
            }
        }
        let claimed = claims.withLock { $0 }
        #expect(claimed.count == 60, "each memo claimed exactly once")
        #expect(Set(claimed) == enqueued)
        #expect(try outbox.history.counts()[.sending] == 60)
    }

    @Test func expiredLeaseIsClaimableAgain() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(body: "the sender crashed")).id
        let first = try outbox.claimDue(limit: 10, leaseMilliseconds: 1_000)
        #expect(first.map(\.id) == [id])
        #expect(first.first?.attempt == 1)
        #expect(try outbox.claimDue(limit: 10, leaseMilliseconds: 1_000).isEmpty, "leased: not claimable")
        fixture.clock.advance(milliseconds: 999)
        #expect(try outbox.claimDue(limit: 10, leaseMilliseconds: 1_000).isEmpty, "lease not yet expired")
        #expect(try outbox.nextDueAt() == fixture.clock.nowMilliseconds() + 1)
        fixture.clock.advance(milliseconds: 1)
        let second = try outbox.claimDue(limit: 10, leaseMilliseconds: 1_000)
        #expect(second.map(\.id) == [id])
        #expect(second.first?.attempt == 2)
        #expect(second.first?.content == MemoContent(subject: "the sender crashed", body: "the sender crashed"))
    }

    @Test func recoverInterruptedRequeuesSendingMemos() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        var ids: Set<String> = []
        for index in 0..<3 {
            ids.insert(try await outbox.enqueue(MemoDraft(body: "in flight \(index)")).id)
        }
        let untouched = try await outbox.enqueue(MemoDraft(body: "delivered already")).id
        let claimed = try outbox.claimDue(limit: 4, leaseMilliseconds: 3_600_000)
        #expect(claimed.count == 4)
        try outbox.markSent(id: untouched)
        outbox.close()  // the process dies mid-send

        let restarted = try fixture.open()
        defer { restarted.close() }
        #expect(try restarted.history.counts()[.sending] == 3)
        #expect(try restarted.recoverInterrupted() == 3)
        let history = try restarted.history.latest(limit: 10)
        #expect(history.filter { ids.contains($0.id) }.allSatisfy { $0.status == .queued })
        #expect(history.first { $0.id == untouched }?.status == .sent)
        let again = try restarted.claimDue(limit: 10, leaseMilliseconds: 60_000)
        #expect(Set(again.map(\.id)) == ids, "re-queued at once, not after the hour-long lease")
        #expect(again.allSatisfy { $0.attempt == 2 && $0.content != nil })
        #expect(try restarted.recoverInterrupted() == 3, "now they are sending again")
    }

    @Test func markSentErasesTheBodyAndKeepsTheSubject() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(subject: "kept a while", body: "erased after delivery")).id
        _ = try outbox.claimDue(limit: 1, leaseMilliseconds: 60_000)
        fixture.clock.advance(milliseconds: 250)
        try outbox.markSent(id: id)
        let record = try #require(try outbox.history.record(id: id))
        #expect(record.status == .sent)
        #expect(record.deliveredAt == fixture.clock.nowMilliseconds())
        #expect(record.subject == "kept a while")
        #expect(record.nextAttemptAt == nil)
        #expect(try StoredRows.blob("sealed_payload", id: id, path: fixture.path) == nil)
        #expect(try outbox.claimDue(limit: 10, leaseMilliseconds: 60_000).isEmpty, "never sent twice")
        try outbox.purgeSubjects(deliveredBefore: fixture.clock.nowMilliseconds() + 1)
        #expect(try outbox.history.record(id: id)?.subject == nil)
        #expect(try outbox.history.record(id: id)?.status == .sent, "history keeps the metadata")
    }

    @Test func retryingMemoWaitsForItsTime() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(body: "try again later")).id
        _ = try outbox.claimDue(limit: 1, leaseMilliseconds: 60_000)
        let due = fixture.clock.nowMilliseconds() + 5_000
        try outbox.transition(id: id) { lifecycle throws(DeliveryLifecycle.Refusal) in
            try lifecycle.attemptFailed(DeliveryFailure(.timeout, permanent: false, retryAfterMilliseconds: 5_000),
                                        now: due - 5_000, policy: RetryPolicy(jitter: 0), random: 0)
        }
        let record = try #require(try outbox.history.record(id: id))
        #expect(record.status == .retrying)
        #expect(record.lastError == "timeout")
        #expect(record.nextAttemptAt == due)
        #expect(try outbox.nextDueAt() == due)
        fixture.clock.advance(milliseconds: 4_999)
        #expect(try outbox.claimDue(limit: 1, leaseMilliseconds: 60_000).isEmpty)
        fixture.clock.advance(milliseconds: 1)
        let claimed = try outbox.claimDue(limit: 1, leaseMilliseconds: 60_000)
        #expect(claimed.map(\.id) == [id])
        #expect(claimed.first?.attempt == 2)
    }

    @Test(arguments: [DeliveryStatus.failed, .held])
    func failedAndHeldMemosAreKeptAndNotClaimed(status: DeliveryStatus) async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        let id = try await outbox.enqueue(MemoDraft(body: "kept, never dropped")).id
        _ = try outbox.claimDue(limit: 1, leaseMilliseconds: 1_000)
        try outbox.transition(id: id) { lifecycle throws(DeliveryLifecycle.Refusal) in
            if status == .held {
                try lifecycle.hold(reason: "rejected")
            } else {
                try lifecycle.attemptFailed(DeliveryFailure(.rejected, permanent: true), now: 0, policy: RetryPolicy(),
                                            random: 0)
            }
        }
        fixture.clock.advance(milliseconds: 86_400_000)
        #expect(try outbox.claimDue(limit: 10, leaseMilliseconds: 1_000).isEmpty)
        #expect(try outbox.recoverInterrupted() == 0)
        #expect(try outbox.history.record(id: id)?.status == status)
        #expect(try StoredRows.blob("sealed_payload", id: id, path: fixture.path) != nil, "the body is kept")
        #expect(try outbox.history.counts()[status] == 1)
        #expect(try outbox.nextDueAt() == nil)
    }

    @Test func historyIsNewestFirstAndPages() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.open()
        defer { outbox.close() }
        var ids: [String] = []
        for index in 0..<5 {
            ids.append(try await outbox.enqueue(MemoDraft(body: "memo \(index)")).id)
        }
        #expect(try outbox.history.latest(limit: 10).map(\.id) == ids.reversed())
        #expect(try outbox.history.latest(limit: 2).map(\.id) == [ids[4], ids[3]])
        #expect(try outbox.history.latest(limit: 2, before: ids[3]).map(\.id) == [ids[2], ids[1]])
        #expect(try outbox.history.latest(limit: 2, before: ids[1]).map(\.id) == [ids[0]])
        #expect(try outbox.history.latest(limit: 2, before: ids[0]).isEmpty)
    }
}

/// AES-256-GCM as the outbox uses it: any changed bit, other associated data or another key fails.
@Suite struct AESGCMTests {
    private static let associatedData = Array("jotter/payload/v1/0d5e6f1a-2b3c-4d5e-8f90-a1b2c3d4e5f6".utf8)

    @Test func sealedBoxOpensWithTheSameKeyAndAssociatedData() throws {
        let key = try SymmetricKey.random()
        let plaintext = Array("buy milk ✓".utf8)
        let box = try AESGCM.seal(plaintext, using: key, authenticating: Self.associatedData)
        #expect(box.combined.count == 12 + plaintext.count + 16)
        #expect(!Evidence.contains(box.combined, plaintext))
        #expect(try AESGCM.open(box, using: key, authenticating: Self.associatedData) == plaintext)
    }

    @Test func emptyPlaintextRoundTrips() throws {
        let key = try SymmetricKey.random()
        let box = try AESGCM.seal([], using: key, authenticating: Self.associatedData)
        #expect(try AESGCM.open(box, using: key, authenticating: Self.associatedData) == [])
    }

    @Test func sealingTwiceUsesFreshNonces() throws {
        let key = try SymmetricKey.random()
        let first = try AESGCM.seal(Array("same".utf8), using: key)
        let second = try AESGCM.seal(Array("same".utf8), using: key)
        #expect(first.combined.prefix(12) != second.combined.prefix(12))
        #expect(first.combined != second.combined)
    }

    @Test func aNonceOfAnyOtherLengthIsRefused() throws {
        let key = try SymmetricKey.random()
        for count in [0, 11, 13, 16] {
            #expect(throws: CryptoError.sealFailed) {
                try AESGCMKey(key).seal(Array("memo".utf8), nonce: [UInt8](repeating: 7, count: count),
                                        authenticating: Self.associatedData)
            }
        }
        let nonce = try SecureRandom.bytes(count: 12)
        let box = try AESGCMKey(key).seal(Array("memo".utf8), nonce: nonce, authenticating: Self.associatedData)
        #expect(Array(box.combined.prefix(12)) == nonce)
        #expect(try AESGCM.open(box, using: key, authenticating: Self.associatedData) == Array("memo".utf8))
    }

    @Test func everyFlippedBitFailsAuthentication() throws {
        let key = try SymmetricKey.random()
        let box = try AESGCM.seal(Array("memo".utf8), using: key, authenticating: Self.associatedData)
        var failures = 0
        for bit in 0..<(box.combined.count * 8) {
            var bytes = box.combined
            bytes[bit / 8] ^= UInt8(1 << (bit % 8))
            let tampered = try AESGCM.SealedBox(combined: bytes)
            #expect(throws: CryptoError.authenticationFailure) {
                try AESGCM.open(tampered, using: key, authenticating: Self.associatedData)
            }
            failures += 1
        }
        #expect(failures == box.combined.count * 8)
    }

    @Test func otherAssociatedDataFailsAuthentication() throws {
        let key = try SymmetricKey.random()
        let box = try AESGCM.seal(Array("memo A".utf8), using: key, authenticating: Array("a".utf8))
        for other in [Array("b".utf8), []] {
            #expect(throws: CryptoError.authenticationFailure) {
                try AESGCM.open(box, using: key, authenticating: other)
            }
        }
    }

    /// The outbox's sealer binds each field to its memo and column: moved, it does not open.
    @Test func aSealedFieldOpensOnlyAsItselfOfItsOwnMemo() throws {
        let sealer = try Sealer(dataKey: SymmetricKey.random())
        let sealed = try sealer.seal(Array("memo A".utf8), .payload, id: "id-a")
        #expect(sealer.open(sealed, .payload, id: "id-a") == Array("memo A".utf8))
        #expect(sealer.open(sealed, .payload, id: "id-b") == nil)
        #expect(sealer.open(sealed, .subject, id: "id-a") == nil)
        #expect(try Sealer(dataKey: SymmetricKey.random()).open(sealed, .payload, id: "id-a") == nil)
    }

    @Test func anotherKeyFailsAuthentication() throws {
        let box = try AESGCM.seal(Array("memo".utf8), using: SymmetricKey.random())
        #expect(throws: CryptoError.authenticationFailure) {
            try AESGCM.open(box, using: SymmetricKey.random())
        }
    }

    @Test func truncatedBoxesAreRefused() throws {
        let key = try SymmetricKey.random()
        let box = try AESGCM.seal(Array("memo".utf8), using: key)
        for length in [0, 1, 12, 27] {
            #expect(throws: CryptoError.malformedSealedBox) {
                try AESGCM.SealedBox(combined: Array(box.combined.prefix(length)))
            }
        }
        for length in [28, box.combined.count - 1] {
            let short = try AESGCM.SealedBox(combined: Array(box.combined.prefix(length)))
            #expect(throws: CryptoError.authenticationFailure) { try AESGCM.open(short, using: key) }
        }
    }

    @Test func keysMustBe32Bytes() {
        for count in [0, 16, 31, 33] {
            #expect(throws: CryptoError.invalidKeyLength) {
                try SymmetricKey(bytes: [UInt8](repeating: 1, count: count))
            }
        }
    }
}

@Suite struct OutboxShutdownTests {
    /// A delivery that finishes after shutdown (the worker gave up waiting for it) must get an error,
    /// not touch a closed SQLite handle.
    @Test func writesAfterCloseFailCleanly() async throws {
        let directory = TemporaryDirectory()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: try SymmetricKey.random())
        let id = try await outbox.enqueue(MemoDraft(body: "late")).id
        let claimed = try outbox.claimDue(limit: 1, leaseMilliseconds: 60_000)
        #expect(claimed.map(\.id) == [id])
        outbox.close()
        #expect(throws: DatabaseError.self) { try outbox.markSent(id: id) }
        #expect(throws: DatabaseError.self) { _ = try outbox.history.latest(limit: 10) }
    }
}

@Suite struct OutboxWakeUpTests {
    /// The worker's wake-up after each commit costs the same on the thousandth memo as on the first:
    /// the handler is called through a constant stack (it used to gain two reabstraction thunks per
    /// commit — a profile found half of the server's CPU in them, and enough memos would overflow the stack).
    @Test func theAcceptedHandlerDoesNotGrowWithUse() async throws {
        let directory = TemporaryDirectory()
        let outbox = try Outbox(path: directory.file("jotter.db"), key: try SymmetricKey.random())
        defer { outbox.close() }
        let depths = Mutex<[Int]>([])
        outbox.setOnAccepted { depths.withLock { $0.append(Thread.callStackSymbols.count) } }
        for index in 0..<200 {
            _ = try await outbox.enqueue(MemoDraft(body: "memo \(index)"))   // each its own commit
        }
        let seen = depths.withLock { $0 }
        #expect(seen.count >= 100, "commits seen: \(seen.count)")
        #expect((seen.max() ?? 0) - (seen.min() ?? 0) < 10, "the call stack grew: \(seen.prefix(3)) … \(seen.suffix(3))")
    }
}

@Suite struct OutboxMigrationTests {
    /// A database from before migration 7 (AUTOINCREMENT, a unique index holding every NULL key) comes
    /// through with its memos, their order, and their idempotency keys still recognised.
    @Test func aVersion6DatabaseKeepsItsMemosAndKeys() async throws {
        let directory = TemporaryDirectory()
        let path = directory.file("jotter.db")
        let key = try SymmetricKey.random()
        // Memos written by the current code, then the table taken back to its version 6 shape.
        var ids: [String] = []
        do {
            let outbox = try Outbox(path: path, key: key)
            ids.append(try await outbox.enqueue(MemoDraft(body: "first", idempotencyKey: "key-1")).id)
            ids.append(try await outbox.enqueue(MemoDraft(body: "second")).id)
            outbox.close()
        }
        do {
            let database = try Database(path: path)
            try database.execute("""
                CREATE TABLE old (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
                    created_at INTEGER NOT NULL, sealed_payload BLOB, sealed_subject BLOB, status TEXT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER, lease_until INTEGER,
                    delivered_at INTEGER, last_error TEXT, idempotency_hash BLOB UNIQUE, payload_hash BLOB NOT NULL,
                    backoff_step INTEGER NOT NULL DEFAULT 0, key_id BLOB);
                INSERT INTO old SELECT * FROM messages;
                DROP TABLE messages; ALTER TABLE old RENAME TO messages;
                CREATE INDEX messages_waiting ON messages(next_attempt_at, seq) WHERE status IN ('queued', 'retrying');
                CREATE INDEX messages_in_flight ON messages(lease_until) WHERE status = 'sending';
                DROP TABLE relay_handovers; DROP INDEX pairing_tokens_code; ALTER TABLE pairing_tokens DROP COLUMN code_hash;
                ALTER TABLE pairing_tokens DROP COLUMN request_hash; ALTER TABLE pairing_tokens DROP COLUMN device_id;
                PRAGMA user_version = 6;
                """)
            database.close()
        }
        let outbox = try Outbox(path: path, key: key)
        defer { outbox.close() }
        #expect(try outbox.history.latest(limit: 10).map(\.id) == ids.reversed())
        #expect(try await outbox.enqueue(MemoDraft(body: "first", idempotencyKey: "key-1")) == .replayed(id: ids[0]))
        let third = try await outbox.enqueue(MemoDraft(body: "third")).id
        #expect(try outbox.history.latest(limit: 1).first?.id == third, "a new memo sorts after the old ones")
        let sql = try outbox.database.read { database in
            try database.statement("SELECT sql FROM sqlite_master WHERE name = 'messages'").firstRow { $0.text(0) } ?? nil
        }
        #expect(sql?.contains("AUTOINCREMENT") == false)
    }
}

@Suite struct UUIDTests {
    /// Draws of any size come whole from the kernel (a large one may take several calls) and look random:
    /// every byte value turns up, about equally often, and no two draws are alike.
    @Test(arguments: [0, 1, 40, 4_096, 1 << 20])
    func randomBytesComeWholeAndLookRandom(count: Int) throws {
        let first = try SecureRandom.bytes(count: count), second = try SecureRandom.bytes(count: count)
        #expect(first.count == count && second.count == count)
        guard count >= 40 else { return }
        #expect(first != second)
        guard count >= 1 << 20 else { return }
        var counts = [Int](repeating: 0, count: 256)
        for byte in first { counts[Int(byte)] += 1 }
        // 4,096 expected per value, give or take 64 (one standard deviation): 600 is more than nine.
        #expect(counts.allSatisfy { abs($0 - 4_096) < 600 }, "\(counts.min() ?? 0)...\(counts.max() ?? 0)")
    }

    /// RFC 9562's own example (appendix A.6), then the ordering and the layout for other times.
    @Test func timeOrderedUUIDsFollowRFC9562() throws {
        let random: [UInt8] = [0x0C, 0xC3, 0x18, 0xC4, 0xDC, 0x0C, 0x0C, 0x07, 0x39, 0x8F]
        #expect(SecureRandom.uuidV7(milliseconds: 0x017F_22E2_79B0, random: random[...])
                == "017f22e2-79b0-7cc3-98c4-dc0c0c07398f")
        var previous = ""
        for milliseconds: Int64 in [0, 1, 255, 1_700_000_000_000, 1_800_000_000_000, 0xFFFF_FFFF_FFFF] {
            let text = SecureRandom.uuidV7(milliseconds: milliseconds, random: try SecureRandom.bytes(count: 10)[...])
            let parsed = try #require(UUID(uuidString: text), "not a UUID: \(text)")
            #expect(parsed.uuidString.lowercased() == text)
            #expect(Int64(text.replacingOccurrences(of: "-", with: "").prefix(12), radix: 16) == milliseconds)
            #expect(Array(text)[14] == "7" && "89ab".contains(Array(text)[19]), "\(text)")
            #expect(text > previous)
            previous = text
        }
    }

    @Test func randomUUIDsAreVersion4AndDistinct() throws {
        var seen = Set<String>()
        for _ in 0..<1000 {
            let text = try SecureRandom.uuid()
            #expect(text.count == 36 && text == text.lowercased())
            let parsed = try #require(UUID(uuidString: text), "not a UUID: \(text)")
            #expect(parsed.uuidString.lowercased() == text)
            #expect(Array(text)[14] == "4", "version 4: \(text)")
            #expect("89ab".contains(Array(text)[19]), "RFC 4122 variant: \(text)")
            seen.insert(text)
        }
        #expect(seen.count == 1000)
    }
}
