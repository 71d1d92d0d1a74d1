import Dispatch
import Synchronization

/// The relay's rules, between its HTTP routes and its store: devices and invites, verification codes
/// and their mail, limits, idempotency, and accepting messages into the relay's own sealed outbox.
///
/// It holds the keys; the store sees only keyed hashes and sealed blobs. It logs no content: never an
/// address, a code, a secret, a subject or a body.
public final class RelayService: Sendable {
    /// What a registration led to.
    public enum Registration: Sendable, Equatable {
        /// A new device and its secret (shown this once).
        case registered(deviceID: String, secret: String)
        /// Registration needs an invite and none (or no valid one) was given.
        case inviteInvalid
        /// Too many registrations from this address.
        case limited([LimitState])
        /// The proposed secret was a device's that is revoked: it is spent for good, a new one is needed.
        case secretRevoked
    }

    /// What a code request led to.
    public enum CodeRequest: Sendable, Equatable {
        /// A code is on its way (durably in the outbox); `limits`: the per-IP layers after spending.
        case sent(limits: [LimitState])
        /// Not now (cooldown, a cap, a per-IP limit).
        case limited(reason: String, retryAfterSeconds: Int64, limits: [LimitState])
    }

    /// A destination as a device sees it.
    public struct Destination: Sendable, Equatable {
        /// The address.
        public var address: String
        /// When a code for it was first asked for, epoch ms.
        public var createdAt: Int64
        /// When it was verified, epoch ms.
        public var verifiedAt: Int64?
    }

    /// What sending a message led to.
    public enum Sending: Sendable, Equatable {
        /// Durably in the outbox under `id` (`limits`: the layers after spending).
        case accepted(id: String, limits: [LimitState])
        /// The same `Idempotency-Key` and payload were accepted before, as `id`.
        case replayed(id: String)
        /// The key was used with another payload, for message `id` when it is stored.
        case conflict(id: String?)
        /// The key is held by a request still in progress, for `retryAfterSeconds` more at most.
        case inFlight(retryAfterSeconds: Int64)
        /// `to` is not verified for this device.
        case unverified
        /// A limit refused; nothing was spent.
        case limited([LimitState])
    }

    /// Storing failed (a full disk, an I/O error): nothing was accepted — or, with `outcomeUnknown`, the
    /// store went away after its COMMIT was sent, and the message may be stored.
    public struct StorageFailure: Error, Sendable {
        /// Whether the disk is full.
        public var diskFull: Bool
        /// Whether the message may have been stored after all (a lost COMMIT reply).
        public var outcomeUnknown = false
        /// When to send it again: once its key's lease has run out (for `outcomeUnknown`).
        public var retryAfterSeconds: Int64 = 30
        /// What may have been stored (for `outcomeUnknown`): what a retry can safely do depends on it.
        public var stored = Stored.keyedMessage

        public enum Stored: Sendable {
            /// A message with an `Idempotency-Key`: sent again with it, it is found, not stored twice.
            case keyedMessage
            /// A message without one: sent again, it may be sent twice.
            case message
            /// A code's mail: it may have been sent.
            case code
        }
    }

    private let store: any RelayStore
    private let outbox: any MessageOutbox
    private let keys: RelayKeys
    private let configuration: RelayConfiguration
    private let clock: any WallClock
    private let logger: Logger
    private let onRequeued = Mutex<(@Sendable () -> Void)?>(nil)
    /// Where requests are worked on: the store blocks, so never on an HTTP thread (nor on the outbox's
    /// writer queue, whose answers hop back here).
    let queue = DispatchQueue(label: "jotter.relay.requests", attributes: .concurrent)

    /// A service over `store`, accepting into `outbox` (whose data directory's keys it derives its own from).
    public init(store: any RelayStore, outbox: any MessageOutbox, configuration: RelayConfiguration,
                clock: any WallClock = SystemClock(), logger: Logger = Logger(label: "relay")) throws {
        self.store = store
        self.outbox = outbox
        self.keys = try RelayKeys(outbox: outbox)
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
    }

    // MARK: Devices

    /// A new invite (works once, for `inviteLifetimeMilliseconds`).
    public func issueInvite() throws -> (invite: String, expiresAt: Int64) {
        let invite = try RelayKeys.newSecret(prefix: "jri_")
        let now = clock.nowMilliseconds()
        let expiresAt = now + configuration.inviteLifetimeMilliseconds
        try store.createInvite(hash: keys.secretHash(invite, kind: "invite"), now: now, expiresAt: expiresAt)
        return (invite, expiresAt)
    }

    /// Registers a device for `client` (an IP address), with `invite` when registration needs one.
    /// With `secret` (the client's own, `RelayKeys.isDeviceSecret`), registering is safe to repeat: a
    /// device that already has that secret is answered again as registered — no invite spent twice, no
    /// limit charged — so a client whose first answer was lost gets its device, not "invite already used".
    public func register(invite: String?, client: String, secret proposed: String? = nil) throws -> Registration {
        let now = clock.nowMilliseconds()
        if let proposed {
            let hash = keys.secretHash(proposed, kind: "device")
            if let existing = try store.device(secretHash: hash) { return .registered(deviceID: existing, secret: proposed) }
            // Before anything is charged: the same answer however often it is asked (it was a 503, forever).
            if try store.isRevoked(secretHash: hash) { return .secretRevoked }
        }
        let inviteHash: [UInt8]?
        switch configuration.registration {
        case .open:
            inviteHash = nil
        case .invite:
            guard let invite, (1...128).contains(invite.utf8.count) else { return .inviteInvalid }
            inviteHash = keys.secretHash(invite, kind: "invite")
        }
        let charges = configuration.limits.registrationsPerIPHour.map {
            [LimitCharge(policy: "ip-registrations-hour", partition: ipPartition(client), quota: $0,
                         windowSeconds: 3600)]
        } ?? []
        if !charges.isEmpty, case .refused(let states) = try store.spend(charges, now: now) {
            return .limited(states)
        }
        let id = try SecureRandom.uuid()
        let secret = try proposed ?? RelayKeys.newSecret(prefix: "jrs_")
        guard try store.registerDevice(id: id, secretHash: keys.secretHash(secret, kind: "device"),
                                             inviteHash: inviteHash, now: now) else {
            // No device came of it: a mistyped invite must not use up what a network may register in an
            // hour (wrong invites are limited on their own, as wrong secrets are).
            if !charges.isEmpty { try store.refund(charges, spentAt: now) }
            return .inviteInvalid
        }
        logger.info("device registered", metadata: ["device.id": id])
        return .registered(deviceID: id, secret: secret)
    }

    /// The device a bearer secret belongs to, if any.
    public func authenticate(secret: String) throws -> String? {
        guard secret.hasPrefix("jrs_"), secret.utf8.count <= 128 else { return nil }
        return try store.device(secretHash: keys.secretHash(secret, kind: "device"))
    }

    // MARK: Destinations

    /// Asks for a code for `address` (already validated) in `language`, mailed from the fixed template;
    /// `completion` runs once the mail is durably in the outbox (or with why not). Known and unknown
    /// addresses take exactly the same path.
    public func requestCode(deviceID: String, address: DestinationAddress, language: String?, client: String,
                            completion: @escaping @Sendable (Result<CodeRequest, any Error>) -> Void) {
        let issued: (code: String, limits: [LimitState])
        do {
            let now = clock.nowMilliseconds()
            let code = try VerificationCode.generate()
            let addressKey = self.addressKey(address)
            var charges = configuration.limits.codeRequestsPerIPHour.map {
                [LimitCharge(policy: "ip-codes-hour", partition: ipPartition(client), quota: $0, windowSeconds: 3600)]
            } ?? []
            if let perDomain = configuration.limits.codeRequestsPerDomainDay {
                let domain = String(address.normalized.split(separator: "@").last ?? "")
                charges.append(LimitCharge(policy: "domain-codes-day", partition: keys.hash("domain", [domain]),
                                           quota: perDomain, windowSeconds: 86_400))
            }
            // A code mail spends the mail provider's quota as a message does: the relay-wide ceiling counts both.
            if let ceiling = relayDayCharge { charges.append(ceiling) }
            let issue = CodeIssue(deviceID: deviceID, addressKey: addressKey,
                                  mailboxKey: keys.hash("mailbox", [address.mailbox]),
                                  sealedAddress: try keys.seal(address: address.address, deviceID: deviceID),
                                  codeHash: codeHash(code, deviceID: deviceID, addressKey: addressKey), now: now,
                                  policy: configuration.codes, charges: charges)
            switch try store.issueCode(issue) {
            case .limited(let reason, let seconds, let limits):
                logger.info("code request refused", metadata: ["device.id": deviceID, "reason": reason])
                return completion(.success(.limited(reason: reason, retryAfterSeconds: seconds, limits: limits)))
            case .issued(let limits):
                issued = (code, limits)
            }
        } catch {
            return completion(.failure(error))
        }
        let mail = VerificationMail.render(code: issued.code, language: VerificationMail.language(for: language))
        let logger = logger
        enqueue(MemoDraft(subject: mail.subject, body: mail.body, recipient: address.address)) { result in
            completion(result.map { id in
                logger.info("code mailed", metadata: ["device.id": deviceID, "message.id": id])
                return .sent(limits: issued.limits)
            }.mapError { error in
                guard var failure = error as? StorageFailure, failure.outcomeUnknown else { return error }
                failure.stored = .code
                return failure
            })
        }
    }

    /// Checks `code` for `address`.
    public func confirm(deviceID: String, address: DestinationAddress, code: String) throws -> ConfirmOutcome {
        let addressKey = self.addressKey(address)
        let outcome = try store.confirmCode(
            deviceID: deviceID, addressKey: addressKey,
            presentedHash: codeHash(code, deviceID: deviceID, addressKey: addressKey),
            now: clock.nowMilliseconds(), maximumAttempts: configuration.codes.maximumAttempts)
        if outcome == .verified { logger.info("destination verified", metadata: ["device.id": deviceID]) }
        return outcome
    }

    /// The device's destinations, oldest first.
    public func destinations(deviceID: String) throws -> [Destination] {
        try store.destinations(deviceID: deviceID).compactMap { stored in
            keys.open(address: stored.sealedAddress, deviceID: deviceID).map {
                Destination(address: $0, createdAt: stored.createdAt, verifiedAt: stored.verifiedAt)
            }
        }
    }

    /// Forgets one of the device's addresses; false if it had none.
    public func removeDestination(deviceID: String, address: DestinationAddress) throws -> Bool {
        let removed = try store.removeDestination(deviceID: deviceID, addressKey: addressKey(address))
        if removed { logger.info("destination removed", metadata: ["device.id": deviceID]) }
        return removed
    }

    /// Revokes the device (its own request: a lost or retired composer).
    public func revoke(deviceID: String) throws {
        try store.revokeDevice(id: deviceID, now: clock.nowMilliseconds())
        logger.info("device revoked", metadata: ["device.id": deviceID])
    }

    // MARK: Messages

    /// Accepts a message for `to` (validated) once the device has verified it, within the limits,
    /// durably in the outbox; honours `idempotencyKey` (validated) as the mail APIs do. `writtenAt` is
    /// when its composer took it (the mail's `Date`, if not later than now). `completion` runs once the
    /// message is on disk (or with why not), on the relay's queue.
    public func send(deviceID: String, to: DestinationAddress, subject: String?, body: String, writtenAt: Int64? = nil,
                     idempotencyKey: String?, client: String,
                     completion: @escaping @Sendable (Result<Sending, any Error>) -> Void) {
        let now = clock.nowMilliseconds()
        let leaseUntil = now + configuration.idempotencyLeaseMilliseconds
        let idempotency = idempotencyKey.map {
            idempotencyHashes(deviceID: deviceID, key: $0, to: to, subject: subject, body: body, writtenAt: writtenAt)
        }
        let admission = MessageAdmission(
            deviceID: deviceID, addressKey: addressKey(to), idempotency: idempotency,
            charges: messageCharges(deviceID: deviceID, client: client), now: now,
            leaseUntil: leaseUntil,
            expiresAt: now + configuration.idempotencyRetentionMilliseconds)
        let reservedAt: Int64?, limits: [LimitState]
        do {
            switch try store.admitMessage(admission) {
            case .replayed(let id): return completion(.success(.replayed(id: id)))
            case .conflict(let id): return completion(.success(.conflict(id: id)))
            case .inFlight(let seconds): return completion(.success(.inFlight(retryAfterSeconds: seconds)))
            case .unverified: return completion(.success(.unverified))
            case .limited(let states):
                logger.info("message refused by a limit", metadata: [
                    "device.id": deviceID,
                    "limits": states.filter(\.refused).map(\.charge.policy).joined(separator: ","),
                ])
                return completion(.success(.limited(states)))
            case .admitted(let at, let states):
                reservedAt = at
                limits = states
            }
        } catch {
            return completion(.failure(error))
        }
        // The outbox's own key for this reservation: a message stored before a crash is found again
        // when the reservation is taken over, instead of being stored (and sent) twice.
        let outboxKey = idempotency.flatMap { hashes in reservedAt.map { Self.outboxKey(hashes, reservedAt: $0) } }
        let draft = MemoDraft(subject: subject, body: body, idempotencyKey: outboxKey, recipient: to.address,
                              writtenAt: writtenAt)
        enqueue(draft) { [store, clock, logger] result in
            switch result {
            case .success(let id):
                do {
                    try store.completeMessage(deviceID: deviceID, keyHash: idempotency?.keyHash, messageID: id,
                                              now: clock.nowMilliseconds())
                } catch {
                    // The message is stored (and will be sent), but not yet recorded as this device's: a
                    // 202 now would leave its status a 404 for good, which its composer takes for
                    // "delivered and forgotten", erasing its own copy even if the relay fails it. So it
                    // is "may be stored": its key stays reserved until the lease runs out, and the retry
                    // then takes it over, finds this message in the outbox and records it.
                    logger.error("recording an accepted message failed", metadata: [
                        "message.id": id, "error.kind": DeliveryWorker.kind(of: error),
                    ])
                    var failure = StorageFailure(diskFull: false, outcomeUnknown: true)
                    failure.retryAfterSeconds = (leaseUntil - now + 999) / 1000 + 1
                    failure.stored = idempotency == nil ? .message : .keyedMessage
                    return completion(.failure(failure))
                }
                logger.info("message accepted", metadata: ["device.id": deviceID, "message.id": id])
                completion(.success(.accepted(id: id, limits: limits)))
            case .failure(let error):
                // A message that may be stored keeps its key reserved: the client's retry waits for the
                // lease, takes the reservation over (same outbox key) and finds the message if it is
                // there. Given up now, the retry would store it, and send it, a second time.
                guard var failure = error as? StorageFailure, failure.outcomeUnknown else {
                    if let idempotency { try? store.abandonMessage(keyHash: idempotency.keyHash) }
                    return completion(.failure(error))
                }
                logger.error("the store went away while storing a message; it may be stored", metadata: [
                    "device.id": deviceID, "error.kind": "commit_unknown",
                ])
                failure.retryAfterSeconds = (leaseUntil - now + 999) / 1000 + 1
                failure.stored = idempotency == nil ? .message : .keyedMessage
                completion(.failure(failure))
            }
        }
    }

    /// Message `id`'s delivery record, if this device sent it.
    public func status(deviceID: String, id: String) throws -> MessageRecord? {
        guard try store.messageOwner(id: id) == deviceID else { return nil }
        return try outbox.record(id: id)
    }

    /// What asking to retry a message led to.
    public enum RetryOutcome: Sendable {
        /// The message's record afterwards (`queued` if it was put back).
        case record(MessageRecord)
        /// A retry is another send: refused by the device's (or the client's) message limits.
        case limited([LimitState])
    }

    /// Puts message `id` back in the queue if the relay gave up on it (`failed`): its sender pressed
    /// Retry. That costs what sending it did (the message limits), so retries cannot make the relay mail
    /// without end. Any other status is left alone. Nil if this device sent no such message.
    ///
    /// Asking twice at once (on one node or two) costs what asking once does: the put-back decides in the
    /// database which request made it, and the others give their charge back.
    public func retry(deviceID: String, id: String, client: String) throws -> RetryOutcome? {
        guard try store.messageOwner(id: id) == deviceID, let record = try outbox.record(id: id) else { return nil }
        guard record.status == .failed else { return .record(record) }
        let now = clock.nowMilliseconds()
        let charges = messageCharges(deviceID: deviceID, client: client)
        if case .refused(let states) = try store.spend(charges, now: now) {
            return .limited(states)
        }
        do {
            let requeued = try outbox.transition(id: id, durable: true) { lifecycle throws(DeliveryLifecycle.Refusal) in
                try lifecycle.retryFailed(now: now)
            }
            if requeued != nil {
                logger.info("message requeued at its sender's request", metadata: ["device.id": deviceID, "message.id": id])
                onRequeued.withLock { $0 }?()
            }
        } catch is DeliveryLifecycle.Refusal {
            // No longer failed: another request retried it first, and paid for it.
            try store.refund(charges, spentAt: now)
        }
        return try outbox.record(id: id).map(RetryOutcome.record)
    }

    /// Runs after `retry` put a message back in the queue (the delivery worker's wake-up).
    public func setOnRequeued(_ handler: (@Sendable () -> Void)?) {
        onRequeued.withLock { $0 = handler }
    }

    /// The layers a message is checked against, in the order they are shown.
    func messageCharges(deviceID: String, client: String) -> [LimitCharge] {
        let limits = configuration.limits
        let device = Array(deviceID.utf8)
        var charges: [LimitCharge] = []
        if let quota = limits.devicePerMinute {
            charges.append(LimitCharge(policy: "device-minute", partition: device, quota: quota, windowSeconds: 60))
        }
        if let quota = limits.devicePerDay {
            charges.append(LimitCharge(policy: "device-day", partition: device, quota: quota, windowSeconds: 86_400))
        }
        if let quota = limits.ipPerHour {
            charges.append(LimitCharge(policy: "ip-hour", partition: ipPartition(client), quota: quota,
                                       windowSeconds: 3600))
        }
        if let ceiling = relayDayCharge { charges.append(ceiling) }
        return charges
    }

    /// The relay-wide daily ceiling (`--limit-global-day`), if set: every mail the provider sends, messages
    /// and code mails alike, counts against it. Its volume is nobody's business: not advertised.
    private var relayDayCharge: LimitCharge? {
        configuration.limits.globalPerDay.map {
            LimitCharge(policy: "relay-day", partition: [], quota: $0, windowSeconds: 86_400, advertised: false)
        }
    }

    // MARK: Housekeeping

    /// Frees keys held by a process that is gone (at start).
    public func recoverInterrupted() throws {
        try store.recoverInterrupted()
    }

    /// Forgets what no rule needs any more: expired keys, counters and codes; messages delivered, or
    /// failed (accepted), longer ago than their retention, and then the record of which device sent
    /// each — a record outlives its message, never the reverse; devices revoked as long ago; and devices
    /// left without any address for `unverifiedDeviceRetentionMilliseconds` after registering.
    public func purge() throws {
        let now = clock.nowMilliseconds()
        let cutoff = now - max(configuration.messageRetentionMilliseconds, configuration.idempotencyRetentionMilliseconds)
        try outbox.forgetFinished(before: cutoff, failedToo: true)
        try store.purge(now: now, messagesBefore: cutoff,
                        devicesBefore: now - configuration.unverifiedDeviceRetentionMilliseconds)
    }

    // MARK: Helpers

    /// Stores `draft` in the outbox; `completion` runs on the relay's queue (the outbox answers on
    /// its writer queue, where the store cannot be called) with the message id once it is on disk.
    private func enqueue(_ draft: MemoDraft, completion: @escaping @Sendable (Result<String, any Error>) -> Void) {
        outbox.enqueue(draft) { [queue] result in
            queue.async {
                switch result {
                case .success(let outcome): completion(.success(outcome.id))
                case .failure(.storage(_, let diskFull)): completion(.failure(StorageFailure(diskFull: diskFull)))
                case .failure(.outcomeUnknown):
                    completion(.failure(StorageFailure(diskFull: false, outcomeUnknown: true)))
                // The relay's outbox keys never repeat with another payload: a conflict here is a fault.
                case .failure(.idempotencyConflict): completion(.failure(StorageFailure(diskFull: false)))
                }
            }
        }
    }

    /// The keyed hashes of an `Idempotency-Key` (bound to the device) and of the payload sent with it.
    func idempotencyHashes(deviceID: String, key: String, to: DestinationAddress, subject: String?,
                           body: String, writtenAt: Int64? = nil) -> IdempotencyHashes {
        // A written time is hashed only when given, so a key stored before the field existed still
        // matches its retry.
        let written = writtenAt.map { ["written_at", String($0)] } ?? []
        return IdempotencyHashes(keyHash: keys.hash("idempotency-key", [deviceID, key]),
                                 payloadHash: keys.hash("payload", [to.address, subject.map { "1" + $0 } ?? "0", body]
                                                            + written))
    }

    /// The outbox's `Idempotency-Key` for a reservation made at `reservedAt`.
    static func outboxKey(_ hashes: IdempotencyHashes, reservedAt: Int64) -> String {
        "relay/" + RelayKeys.hex(hashes.keyHash) + "/" + String(reservedAt)
    }

    /// The keyed hash that identifies an address (normalised) for verification and caps.
    func addressKey(_ address: DestinationAddress) -> [UInt8] {
        keys.hash("address", [address.normalized])
    }

    private func codeHash(_ code: String, deviceID: String, addressKey: [UInt8]) -> [UInt8] {
        keys.hash("code", [deviceID, RelayKeys.hex(addressKey), code])
    }

    /// A keyed hash of the client as the connection limits count clients (this machine is one, an
    /// IPv6 address counts by its /64): limits need to tell clients apart, not know them.
    private func ipPartition(_ client: String) -> [UInt8] {
        keys.hash("ip", [ConnectionRegistry.client(address: client)])
    }
}
