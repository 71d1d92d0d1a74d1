/// The relay's state behind one small seam: devices and invites, destinations and their codes, limit
/// counters, idempotency records and which device sent which message. Each method is one decision
/// taken atomically by the store (one transaction), so a store shared by several nodes (PostgreSQL)
/// decides a limit or a key the same way one SQLite node does.
///
/// The store sees only opaque bytes: keyed hashes and sealed blobs made by `RelayService`, which holds
/// the keys. It never sees a secret, a code or an address in the clear.
///
/// Methods block until the store has decided (a transaction on disk, or a round trip to a database
/// server); the relay calls them from its own request queue, never from an HTTP thread.
public protocol RelayStore: Sendable {
    /// Records an invite (its keyed hash) that works once until `expiresAt`.
    func createInvite(hash: [UInt8], now: Int64, expiresAt: Int64) throws

    /// Stores a new device. With `inviteHash`, only if that invite is unused and unexpired (and it is
    /// spent in the same step); returns false then, storing nothing.
    func registerDevice(id: String, secretHash: [UInt8], inviteHash: [UInt8]?, now: Int64) throws -> Bool

    /// The active device whose secret hashes to `secretHash` (compared in constant time), if any.
    func device(secretHash: [UInt8]) throws -> String?

    /// True when a device had this secret (its keyed hash) and was revoked: the secret is spent for good.
    func isRevoked(secretHash: [UInt8]) throws -> Bool

    /// Checks every limit that applies to a code request (per-IP charges, the address's cooldown and
    /// hourly and daily caps) and, only if all allow it, spends them and stores the code, replacing
    /// the device's earlier code for that address, and the destination as pending (unless verified).
    func issueCode(_ issue: CodeIssue) throws -> CodeIssueOutcome

    /// Checks a presented code (its keyed hash) against the device's live code for the address.
    func confirmCode(deviceID: String, addressKey: [UInt8], presentedHash: [UInt8], now: Int64,
                     maximumAttempts: Int) throws -> ConfirmOutcome

    /// The device's destinations, oldest first.
    func destinations(deviceID: String) throws -> [StoredDestination]

    /// Forgets one of the device's addresses (verified or not) and its code; false if it had none.
    /// Messages already accepted for it are still delivered.
    func removeDestination(deviceID: String, addressKey: [UInt8]) throws -> Bool

    /// Revokes the device: its secret no longer authenticates, and its addresses and codes are
    /// forgotten. Messages it sent before are still delivered.
    func revokeDevice(id: String, now: Int64) throws

    /// Checks every limit in `charges` and spends them all, or none if any is exhausted.
    func spend(_ charges: [LimitCharge], now: Int64) throws -> LimitVerdict

    /// Gives back what `spend(charges, now:)` took, when what it was spent on did not happen (a retry
    /// that another request, on this node or another, had already made).
    func refund(_ charges: [LimitCharge], spentAt now: Int64) throws

    /// Decides whether a message may be stored: its `Idempotency-Key` first (a replay, a conflict, or
    /// a key in flight), then whether `to` is verified for the device, then the limits (all checked,
    /// then all spent); on admission the key is reserved (in flight) until `complete` or `abandon`.
    func admitMessage(_ admission: MessageAdmission) throws -> AdmissionOutcome

    /// The message is durable in the outbox: the key (if any) now answers with `messageID`, and the
    /// message is the device's.
    func completeMessage(deviceID: String, keyHash: [UInt8]?, messageID: String, now: Int64) throws

    /// The message could not be stored: the key's reservation is dropped (the limits stay spent).
    func abandonMessage(keyHash: [UInt8]) throws

    /// The device that sent message `id`, if it was sent through this relay.
    func messageOwner(id: String) throws -> String?

    /// After a restart of a single node: keys that were in flight in a process that is gone are free.
    func recoverInterrupted() throws

    /// Forgets what no rule needs any more: expired keys, old counters and code records, used or
    /// expired invites, and which device sent the messages accepted before `messagesBefore`; devices
    /// revoked before `messagesBefore`; addresses still unverified since before `devicesBefore` with
    /// no live code; and devices registered before `devicesBefore` that are left with no address and
    /// no live code (a composer that was never verified, or spam: it registers again if it returns).
    func purge(now: Int64, messagesBefore: Int64, devicesBefore: Int64) throws

    /// Lets go of what the store holds open (PostgreSQL connections); the SQLite store's database is
    /// the outbox's, closed with it.
    func close()
}

extension RelayStore {
    public func close() {}
}

/// One rate-limit layer applied to one request.
public struct LimitCharge: Sendable, Equatable {
    /// The policy's name, as the `RateLimit-Policy` header shows it (`device-minute`).
    public var policy: String
    /// Whose quota: a device id's bytes, a keyed hash of an IP address, or empty for the whole relay.
    public var partition: [UInt8]
    /// How many in one window.
    public var quota: Int
    /// The window, in seconds; windows are fixed, aligned to the epoch (a day is a UTC day).
    public var windowSeconds: Int64
    /// Whether clients are told about this layer before it refuses them (not the relay-wide
    /// ceiling, whose remaining count would expose the relay's volume).
    public var advertised: Bool = true

    /// A charge of one against `policy` for `partition`.
    public init(policy: String, partition: [UInt8], quota: Int, windowSeconds: Int64, advertised: Bool = true) {
        self.policy = policy
        self.partition = partition
        self.quota = quota
        self.windowSeconds = windowSeconds
        self.advertised = advertised
    }

    /// The start of the window holding `now` (epoch ms).
    public func windowStart(now: Int64) -> Int64 {
        let width = windowSeconds * 1000
        return now - ((now % width) + width) % width
    }

    /// Whole seconds from `now` until the window holding it ends (at least 1).
    public func resetSeconds(now: Int64) -> Int64 {
        let end = windowStart(now: now) + windowSeconds * 1000
        return max(1, (end - now + 999) / 1000)
    }
}

/// One layer after a check: how much is left, and whether it refused.
public struct LimitState: Sendable, Equatable {
    /// The layer.
    public var charge: LimitCharge
    /// What is left in the current window (after spending, when spent).
    public var remaining: Int
    /// Seconds until the window ends.
    public var resetSeconds: Int64
    /// This layer had nothing left.
    public var refused: Bool
}

/// What checking a set of limits decided.
public enum LimitVerdict: Sendable, Equatable {
    /// Every layer allowed it; all were spent.
    case allowed([LimitState])
    /// At least one layer refused; nothing was spent.
    case refused([LimitState])
}

/// A request for a verification code, as the store sees it.
public struct CodeIssue: Sendable {
    /// The requesting device.
    public var deviceID: String
    /// The keyed hash of the normalised address.
    public var addressKey: [UInt8]
    /// The keyed hash of the mailbox it reaches (`DestinationAddress.mailbox`): the per-address caps
    /// count codes by it.
    public var mailboxKey: [UInt8]
    /// The address as it will be listed, sealed.
    public var sealedAddress: [UInt8]
    /// The keyed hash of the code (bound to device and address).
    public var codeHash: [UInt8]
    /// Now, epoch ms.
    public var now: Int64
    /// Lifetime, cooldown and caps.
    public var policy: CodePolicy
    /// Further layers (per-IP code requests).
    public var charges: [LimitCharge]

    /// A code request.
    public init(deviceID: String, addressKey: [UInt8], mailboxKey: [UInt8], sealedAddress: [UInt8],
                codeHash: [UInt8], now: Int64, policy: CodePolicy, charges: [LimitCharge]) {
        self.deviceID = deviceID
        self.addressKey = addressKey
        self.mailboxKey = mailboxKey
        self.sealedAddress = sealedAddress
        self.codeHash = codeHash
        self.now = now
        self.policy = policy
        self.charges = charges
    }
}

/// What a code request led to.
public enum CodeIssueOutcome: Sendable, Equatable {
    /// The code is stored; mail it.
    case issued([LimitState])
    /// Not now: `reason` is `cooldown`, `address_hourly`, `address_daily` or a limit's policy name.
    case limited(reason: String, retryAfterSeconds: Int64, limits: [LimitState])
}

/// What presenting a code led to.
public enum ConfirmOutcome: Sendable, Equatable {
    /// The address is verified for the device; the code is spent.
    case verified
    /// Not the code; `attemptsLeft` more tries (0: it is burnt now).
    case wrong(attemptsLeft: Int)
    /// The code ran out (10 minutes).
    case expired
    /// The code was used, or burnt by wrong attempts.
    case spent
    /// This device asked for no code for this address.
    case noCode
}

/// A destination as stored.
public struct StoredDestination: Sendable, Equatable {
    /// The keyed hash of the normalised address.
    public var addressKey: [UInt8]
    /// The address, sealed.
    public var sealedAddress: [UInt8]
    /// When a code was first asked for, epoch ms.
    public var createdAt: Int64
    /// When it was verified, epoch ms.
    public var verifiedAt: Int64?
}

/// A message asking to be stored, as the store sees it.
public struct MessageAdmission: Sendable {
    /// The sending device.
    public var deviceID: String
    /// The keyed hash of the normalised `to`.
    public var addressKey: [UInt8]
    /// The `Idempotency-Key`'s hashes, if a key was sent.
    public var idempotency: IdempotencyHashes?
    /// The limits to check and spend.
    public var charges: [LimitCharge]
    /// Now, epoch ms.
    public var now: Int64
    /// Until when a new reservation holds the key while the message is stored.
    public var leaseUntil: Int64
    /// Until when the key is remembered.
    public var expiresAt: Int64

    /// A message asking to be stored.
    public init(deviceID: String, addressKey: [UInt8], idempotency: IdempotencyHashes?,
                charges: [LimitCharge], now: Int64, leaseUntil: Int64, expiresAt: Int64) {
        self.deviceID = deviceID
        self.addressKey = addressKey
        self.idempotency = idempotency
        self.charges = charges
        self.now = now
        self.leaseUntil = leaseUntil
        self.expiresAt = expiresAt
    }
}

/// An `Idempotency-Key` as the store sees it: keyed hashes of the key (bound to the device) and of
/// the payload it was sent with.
public struct IdempotencyHashes: Sendable, Equatable {
    /// The key's keyed hash.
    public var keyHash: [UInt8]
    /// The payload's keyed hash.
    public var payloadHash: [UInt8]

    /// Both hashes.
    public init(keyHash: [UInt8], payloadHash: [UInt8]) {
        self.keyHash = keyHash
        self.payloadHash = payloadHash
    }
}

/// What the store decided about a message.
public enum AdmissionOutcome: Sendable, Equatable {
    /// Store it. `reservedAt` names the key's reservation (the same one again when an abandoned
    /// reservation is taken over), so the outbox recognises a message stored before a crash.
    case admitted(reservedAt: Int64?, limits: [LimitState])
    /// The same key and payload were answered before: this is the answer.
    case replayed(messageID: String)
    /// The key was used with another payload (by the same device: keys are per device), for the
    /// message `messageID` when that one is stored.
    case conflict(messageID: String?)
    /// The key is held by a request still storing its message, for `retryAfterSeconds` more at most.
    case inFlight(retryAfterSeconds: Int64)
    /// `to` is not verified for this device.
    case unverified
    /// A limit refused (nothing was spent).
    case limited([LimitState])
}

/// An `Idempotency-Key`'s stored record, and what a new request with the same key gets from it —
/// decided here once, for every store.
struct IdempotencyRecord {
    var payloadHash: [UInt8]
    var createdAt: Int64
    var expiresAt: Int64
    var leaseUntil: Int64?
    var messageID: String?

    /// What the record means for a request with `payloadHash` at `now`.
    enum Decision: Equatable {
        /// The answer, as it stands (a replay, a conflict, a key in flight).
        case answer(AdmissionOutcome)
        /// The reservation's holder is gone (a crash): the request takes it over and stores the
        /// message as reserved at `reservedAt`. It was admitted then (its limits spent, its address
        /// verified): the retry completes that request, as a message accepted before its address was
        /// removed is still delivered. The outbox finds the message if the holder stored it.
        case takeOver(reservedAt: Int64)
        /// The key is forgotten: delete the record and decide as for a new key.
        case expired
    }

    func decide(payloadHash presented: [UInt8], now: Int64) -> Decision {
        guard expiresAt > now else { return .expired }
        guard HMAC.constantTimeEquals(payloadHash, presented) else { return .answer(.conflict(messageID: messageID)) }
        if let messageID { return .answer(.replayed(messageID: messageID)) }
        if let leaseUntil, leaseUntil > now { return .answer(.inFlight(retryAfterSeconds: (leaseUntil - now + 999) / 1000)) }
        return .takeOver(reservedAt: createdAt)
    }
}
