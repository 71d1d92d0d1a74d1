/// What a transport reports after a successful delivery.
public struct DeliveryReceipt: Sendable, Equatable {
    /// True when the transport found the message already delivered by an earlier, interrupted attempt.
    public var alreadyDelivered: Bool

    /// Creates a receipt.
    public init(alreadyDelivered: Bool = false) {
        self.alreadyDelivered = alreadyDelivered
    }
}
