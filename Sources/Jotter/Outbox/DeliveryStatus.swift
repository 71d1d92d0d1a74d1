/// Where a memo is in its delivery lifecycle, as stored and as `/history` reports it.
public enum DeliveryStatus: String, Sendable, CaseIterable, Codable {
    /// Accepted and waiting for its first attempt.
    case queued
    /// An attempt is in flight (a worker holds its lease).
    case sending
    /// An attempt failed transiently; the next is scheduled.
    case retrying
    /// Delivered.
    case sent
    /// Refused permanently (authentication, rejection); kept, and retried on request or a configuration change.
    case failed
    /// Kept aside and not attempted (for example a row that cannot be opened with the current key).
    case held
    /// Taken back inside its undo window, before any attempt: never delivered, its text erased.
    case cancelled
}
