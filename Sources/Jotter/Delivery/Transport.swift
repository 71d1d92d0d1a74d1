/// Delivers one message somewhere: a Maildir, an SMTP server, an HTTP mail API, …
///
/// `send` blocks until the outcome is known and throws a `DeliveryFailure` (by kind, never with the
/// server's text). It must be idempotent by `message.id` wherever the destination allows it.
public protocol Transport: Sendable {
    /// Delivers `message`.
    func send(_ message: MailMessage) throws(DeliveryFailure) -> DeliveryReceipt

    /// Makes the destination ready before the first delivery (creates a local folder), so that a path
    /// that cannot work is reported once, at start. Never called while parsing a relay URL. `send`
    /// must work without it.
    func prepare() throws(DeliveryFailure)

    /// A cheap check that the destination answers at all (a TCP connect), used while it is unreachable
    /// instead of walking the backoff ladder. Local destinations are always reachable.
    func probe() -> Bool

    /// True when delivering the same message twice leaves one copy (the destination dedupes on
    /// `message.id`). Then a delivery's outcome need not be fsynced on its own: if power loss undoes
    /// it, the repeat is harmless. SMTP and sendmail have no such key (DESIGN, "Power loss").
    var repeatsHarmlessly: Bool { get }

    /// How many messages one `send(batch:)` may take; 1 when delivering together shares nothing.
    var batchLimit: Int { get }

    /// How many bytes of memos one batch may hold in memory (the first memo is taken whatever its size).
    var batchByteLimit: Int { get }

    /// Delivers several messages at once, sharing what the destination lets them share (a Maildir:
    /// the folder's fsync). One outcome per message, in order; each is final on its own, as `send`'s.
    func send(batch messages: [MailMessage]) -> [Result<DeliveryReceipt, DeliveryFailure>]
}

extension Transport {
    public func prepare() throws(DeliveryFailure) {}
    public func probe() -> Bool { true }
    public var repeatsHarmlessly: Bool { false }
    public var batchLimit: Int { 1 }
    public var batchByteLimit: Int { .max }

    /// One by one.
    public func send(batch messages: [MailMessage]) -> [Result<DeliveryReceipt, DeliveryFailure>] {
        messages.map { message in Result { () throws(DeliveryFailure) in try send(message) } }
    }
}
