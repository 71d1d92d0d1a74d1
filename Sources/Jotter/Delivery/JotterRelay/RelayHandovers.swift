/// The memos Jotter relays took (their `202`), in the outbox's database: for each, the relay (its base
/// URL) and the relay's id for it, and whether the relay's giving up on it was reported here.
///
/// A handover is never deleted when the relay says it delivered the memo: only once the memo is `sent`
/// in the same database (`purgeFinished`). Were it deleted first, a power loss that undid the memo's
/// `sent` (written without an fsync of its own) would leave a memo with no handover, posted again.
struct RelayHandovers: Sendable {
    /// One memo's handover.
    struct Handover: Sendable, Equatable {
        /// The relay's base URL.
        var relay: String
        /// The relay's id for the memo.
        var messageID: String
        /// The relay gave up on it and this was reported (the memo is `failed` here): its next attempt
        /// is its sender's Retry, passed on to the relay.
        var failureReported = false
        /// Made by a device this composer had before it registered again: the relay answers the new one
        /// nothing about it.
        var orphaned = false
        /// The device that made it (`JotterRelayAccount.fingerprint` of its secret); nil for handovers
        /// recorded before this was kept.
        var device: [UInt8]? = nil

        /// Made by a device other than `current`, the one the relay just answered as: that device is
        /// told nothing about it.
        func orphaned(answeredBy current: [UInt8]?) -> Bool {
            orphaned || (device != nil && current != nil && device != current)
        }
    }

    let database: DatabaseQueue

    /// Memo `memo`'s handover, if a relay took it.
    func find(memo: String) throws -> Handover? {
        try database.read { database in
            try database.statement(
                "SELECT relay, relay_message_id, failure_reported, orphaned, device FROM relay_handovers WHERE memo_id = ?"
            ).firstRow([.text(memo)]) { row in
                Handover(relay: row.text(0) ?? "", messageID: row.text(1) ?? "", failureReported: row.int64(2) != 0,
                         orphaned: row.int64(3) != 0, device: row.blob(4))
            } ?? nil
        }
    }

    /// Records memo `memo`'s handover, and forgets those of memos sent since.
    func record(_ handover: Handover, memo: String) throws {
        try database.write { database in
            try database.run("""
                INSERT OR REPLACE INTO relay_handovers (memo_id, relay, relay_message_id, failure_reported, orphaned, device)
                VALUES (?, ?, ?, ?, ?, ?)
                """, [.text(memo), .text(handover.relay), .text(handover.messageID),
                      .integer(handover.failureReported ? 1 : 0), .integer(handover.orphaned ? 1 : 0),
                      handover.device.map { .blob($0) } ?? .null])
            try Self.purgeFinished(database)
        }
    }

    /// Marks every handover to `relay` as made by a device the relay no longer knows.
    func orphanAll(relay: String) throws {
        try database.write { database in
            try database.run("UPDATE relay_handovers SET orphaned = 1 WHERE relay = ?", [.text(relay)])
        }
    }

    /// Forgets memo `memo`'s handover (the relay no longer has the message: it is to be posted anew).
    func forget(memo: String) throws {
        try database.write { database in
            try database.run("DELETE FROM relay_handovers WHERE memo_id = ?", [.text(memo)])
        }
    }

    /// Forgets the handovers of memos that are `sent` (or gone).
    private static func purgeFinished(_ database: Database) throws {
        try database.run("""
            DELETE FROM relay_handovers WHERE NOT EXISTS (
                SELECT 1 FROM messages WHERE messages.id = relay_handovers.memo_id AND status != 'sent')
            """)
    }
}
