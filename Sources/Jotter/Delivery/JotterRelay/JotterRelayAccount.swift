import Synchronization

/// The composer's standing at a Jotter relay: its device secret (registered once, kept sealed in the
/// outbox's settings) and the address memos go to, proven by a code the relay mails there.
///
/// Everything is stored under the relay's base URL, so pointing `--relay` at another relay starts
/// afresh (a new registration, a new verification) and coming back finds the old standing again.
final class JotterRelayAccount: Sendable {
    /// Where memos go: the verified address, and one waiting for its code; and the address that was
    /// verified until the relay forgot it (this device revoked, its verification lost), to ask again for.
    struct Destination: Sendable, Equatable {
        var address: String?
        var pending: String?
        var previous: String? = nil

        /// `verified`, `pending` or `none`, as `GET /destination` says it.
        var state: String { address != nil ? "verified" : pending != nil ? "pending" : "none" }
    }

    let client: JotterRelayClient
    private let invite: String?
    private let settings = Mutex<SettingsStore?>(nil)
    /// Held while registering, so two deliveries never register twice.
    private let registration = Mutex<String?>(nil)

    init(client: JotterRelayClient, invite: String?) {
        self.client = client
        self.invite = invite
    }

    /// Gives the account its storage (the outbox opens after the relay URL is parsed).
    func attach(_ store: SettingsStore) {
        settings.withLock { $0 = store }
    }

    private func name(_ field: String) -> String { "jotter_relay[\(client.baseURL)].\(field)" }

    /// Runs `body` with the settings store; a store that is missing or fails is an `io` failure (retried).
    private func stored<T>(_ body: (SettingsStore) throws -> T) throws(DeliveryFailure) -> T {
        guard let store = settings.withLock({ $0 }) else { throw DeliveryFailure(.io, permanent: false) }
        do {
            return try body(store)
        } catch {
            throw DeliveryFailure(.io, permanent: false)
        }
    }

    /// The destination as stored.
    func destination() throws(DeliveryFailure) -> Destination {
        try stored { store in
            // Sealed since the probe found them in the clear (0600 files, but the design seals addresses);
            // an older plain copy is read once, and sealed at the next save.
            func field(_ key: String) throws -> String? { try store.readSealed(name(key)) ?? store.read(name(key)) }
            return Destination(address: try field("address"), pending: try field("pending"), previous: try field("previous"))
        }
    }

    private func save(_ destination: Destination) throws(DeliveryFailure) {
        try stored { store in
            for (key, value) in [("address", destination.address), ("pending", destination.pending),
                                 ("previous", destination.previous)] {
                try store.writeSealed(name(key), value: value)
                try store.write(name(key), value: nil)  // a plain copy from before
            }
        }
    }

    /// The device secret, registering with the relay first when there is none.
    func secret() throws(DeliveryFailure) -> String {
        try registration.withLock { (cached: inout String?) throws(DeliveryFailure) -> String in
            if let cached { return cached }
            if let stored = try stored({ try $0.readSealed(name("secret")) }) {
                cached = stored
                return stored
            }
            // The secret is this composer's own, kept (sealed) before it is proposed: a registration whose
            // answer is lost is asked again with the same one, and the relay answers with the device it
            // made — where a relay-made secret was lost with the answer, and the invite with it.
            let proposed: String
            if let kept = try stored({ try $0.readSealed(name("proposed_secret")) }) {
                proposed = kept
            } else {
                do { proposed = try RelayKeys.newSecret(prefix: "jrs_") } catch { throw DeliveryFailure(.io, permanent: false) }
                try stored { try $0.writeSealed(name("proposed_secret"), value: proposed) }
            }
            var json = JSONWriter()
            json.object { json in
                if let invite { json.field("invite", invite) }
                json.field("secret", proposed)
            }
            var answer = try client.call("/v1/devices", json: json.bytes)
            if answer.status == 400, answer.errorCode == "unknown_field" {
                // A relay from before proposed secrets: it makes one.
                var plain = JSONWriter()
                plain.object { json in if let invite { json.field("invite", invite) } }
                answer = try client.call("/v1/devices", json: plain.bytes)
            }
            guard answer.status == 201, let secret = answer.json?["secret"]?.string else {
                // An invite needed or refused is the configuration's to fix (?invite=), not a memo's; the
                // next try proposes a new secret. (Kept for answers worth retrying: 429, 5xx.)
                if (400..<500).contains(answer.status) && answer.status != 429 {
                    try stored { try $0.writeSealed(name("proposed_secret"), value: nil) }
                }
                if answer.status == 403 { throw DeliveryFailure(.configuration, permanent: true) }
                // The secret proposed was a revoked device's (forgotten above): the next try proposes a new one.
                if answer.status == 409, answer.errorCode == "secret_revoked" { throw DeliveryFailure(.conflict, permanent: false) }
                throw JotterRelayClient.failure(answer)
            }
            try stored { store in
                try store.writeSealed(name("secret"), value: secret)
                try store.writeSealed(name("proposed_secret"), value: nil)
            }
            cached = secret
            return secret
        }
    }

    /// The relay no longer knows this device (its secret was revoked, or its store was reset): forget
    /// `secret`, the one the relay refused, and the verification, so the next step registers again and
    /// asks for a new code. A secret that is no longer the stored one was already forgotten by a call
    /// that met the same `401`, and perhaps replaced: the replacement stands (forgetting it too would
    /// register a third time and orphan the second device).
    func forget(secret refused: String) throws(DeliveryFailure) {
        try registration.withLock { (cached: inout String?) throws(DeliveryFailure) in
            var current = cached
            if current == nil { current = try stored { try $0.readSealed(name("secret")) } }
            guard current == refused else { return }
            cached = nil
            try stored { store in
                // What the old device handed over, the new one cannot ask about: the relay's 404 for it would
                // read as "delivered", and the memo's body was erased on that word. First: should the rest
                // fail, the old secret stays and this runs again at the next refusal.
                try RelayHandovers(database: store.database).orphanAll(relay: client.baseURL)
                try store.writeSealed(name("secret"), value: nil)
                try store.writeSealed(name("proposed_secret"), value: nil)  // the next registration proposes anew
            }
            try lose(try destination())
        }
    }

    /// The relay no longer has this device's verification: no address is verified, and none is pending
    /// (no code was mailed: "type the code" was a dead end), and the one that was is kept, to offer again.
    private func lose(_ lost: Destination) throws(DeliveryFailure) {
        var destination = lost
        destination.previous = lost.address ?? lost.pending ?? lost.previous
        destination.address = nil
        destination.pending = nil
        try save(destination)
    }

    /// Calls the relay as this device; the relay's own `401 invalid_credentials` (this device is unknown
    /// to it: revoked, or its database restored from before) re-registers once and tries again. Any other
    /// `401` (a proxy's login page, maintenance in front of the relay) is not the relay's word on this
    /// device: it is returned as it is, and the device and its verified address are kept — thrown away,
    /// the user had to verify again (a code of 5 a day), and the relay registered a device more.
    func call(_ path: String, method: String? = nil, json body: [UInt8]? = nil,
              idempotencyKey: String? = nil) throws(DeliveryFailure) -> JotterRelayClient.Answer {
        let used = try secret()
        var answer = try client.call(path, method: method, secret: used, json: body, idempotencyKey: idempotencyKey)
        answer.device = Self.fingerprint(used)
        guard answer.status == 401, answer.errorCode == "invalid_credentials" else { return answer }
        try forget(secret: used)
        let renewed = try secret()
        answer = try client.call(path, method: method, secret: renewed, json: body, idempotencyKey: idempotencyKey)
        answer.device = Self.fingerprint(renewed)
        return answer
    }

    /// What tells this composer's devices apart without keeping their secrets twice: 16 bytes of a hash of
    /// the secret (256 random bits, so the hash reveals nothing of it).
    static func fingerprint(_ secret: String) -> [UInt8] {
        Array(SHA256.hash(Array("jotter relay device\u{0}\(secret)".utf8)).prefix(16))
    }

    /// Asks the relay to mail a code to `address` (in `language`); on `202` it is the pending address.
    func requestCode(address: String, language: String) throws(DeliveryFailure) -> JotterRelayClient.Answer {
        var json = JSONWriter()
        json.object { json in
            json.field("address", address)
            json.field("language", language)
        }
        let answer = try call("/v1/destinations", json: json.bytes)
        if answer.status == 202 {
            var destination = try destination()
            destination.pending = address
            try save(destination)
        }
        return answer
    }

    /// Presents `code` for the pending address; on `200` that address is where memos go from now on.
    func confirm(code: String) throws(DeliveryFailure) -> JotterRelayClient.Answer? {
        var destination = try destination()
        guard let pending = destination.pending else { return nil }
        var json = JSONWriter()
        json.object { json in
            json.field("address", pending)
            json.field("code", code)
        }
        let answer = try call("/v1/destinations/confirm", json: json.bytes)
        if answer.status == 200 {
            let previous = destination.address
            destination.address = pending
            destination.pending = nil
            destination.previous = nil
            try save(destination)
            // The address memos went to until now is of no more use: the relay forgets it too (best
            // effort: this answer stands either way, and the relay sends only where it is asked to).
            // Not when only its case changed: the relay knows both spellings as one address, the one
            // just verified. The address goes in the body, never in a URL a proxy's log keeps; a relay
            // from before that route keeps the old address (no fallback to its `DELETE` by path).
            if let previous, Self.identity(previous) != Self.identity(pending) {
                var forget = JSONWriter()
                forget.object { $0.field("address", previous) }
                _ = try? call("/v1/destinations/forget", json: forget.bytes)
            }
        }
        return answer
    }

    /// What the relay tells addresses apart by (`DestinationAddress.normalized`: case does not count).
    static func identity(_ address: String) -> String {
        DestinationAddress(address)?.normalized ?? address.lowercased()
    }

    /// Memo `memo`'s handover, if a relay took it (this one, or another this composer used before).
    func handover(of memo: String) throws(DeliveryFailure) -> RelayHandovers.Handover? {
        try stored { try RelayHandovers(database: $0.database).find(memo: memo) }
    }

    /// Records that this relay took memo `memo` as message `messageID` from `device` (and whether its
    /// giving up on it was reported here).
    func recordHandover(of memo: String, messageID: String, device: [UInt8]?, failureReported: Bool = false,
                        orphaned: Bool = false) throws(DeliveryFailure) {
        let handover = RelayHandovers.Handover(relay: client.baseURL, messageID: messageID, failureReported: failureReported,
                                               orphaned: orphaned, device: device)
        try stored { try RelayHandovers(database: $0.database).record(handover, memo: memo) }
    }

    /// Forgets memo `memo`'s handover: the relay no longer has the message, and the memo goes anew.
    func forgetHandover(of memo: String) throws(DeliveryFailure) {
        try stored { try RelayHandovers(database: $0.database).forget(memo: memo) }
    }

    /// A relay message id as it goes into a path: 1–64 of `0-9 a-z -` (the relay's ids are UUIDs).
    static func isMessageID<S: StringProtocol>(_ id: S) -> Bool {
        (1...64).contains(id.utf8.count) && id.utf8.allSatisfy { byte in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || byte == UInt8(ascii: "-")
        }
    }

    /// The relay says `address` is not verified for this device (any more): ask for a code again.
    func lostVerification(of address: String) throws(DeliveryFailure) {
        var destination = try destination()
        guard destination.address == address else { return }
        // This device is known still: a code mailed for another address stays good to type.
        destination.previous = address
        destination.address = nil
        try save(destination)
    }
}
