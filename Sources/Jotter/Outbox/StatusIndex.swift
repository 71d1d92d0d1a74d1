/// The partial indexes that hold the memos not delivered, and how a query reaches them. Delivered memos
/// are most of the history and are in none of them, so a read of what waits, sends or stopped costs what
/// those memos are, not what the history is. SQLite uses a partial index only when the query repeats the
/// index's condition word for word; `from(_:)` writes that condition.
enum StatusIndex: CaseIterable {
    /// Queued or retrying, by when the next attempt is due.
    case waiting
    /// Sending, by when the lease runs out.
    case inFlight
    /// Failed, held or cancelled, by status and acceptance time.
    case stopped

    /// The statuses this index holds.
    var statuses: [DeliveryStatus] {
        switch self {
        case .waiting: [.queued, .retrying]
        case .inFlight: [.sending]
        case .stopped: [.failed, .held, .cancelled]
        }
    }

    private var name: String {
        switch self {
        case .waiting: "messages_waiting"
        case .inFlight: "messages_in_flight"
        case .stopped: "messages_stopped"
        }
    }

    /// The index holding memos in `status`; nil for `sent`, which has none.
    static func holding(_ status: DeliveryStatus) -> StatusIndex? {
        allCases.first { $0.statuses.contains(status) }
    }

    /// `FROM messages INDEXED BY … WHERE …` for the memos of this index in `statuses` (all of them when
    /// nil), ready for more `AND` terms.
    func from(_ statuses: [DeliveryStatus]? = nil) -> String {
        let condition = Self.condition(self.statuses)
        guard let statuses, statuses != self.statuses else {
            return "FROM messages INDEXED BY \(name) WHERE \(condition)"
        }
        return "FROM messages INDEXED BY \(name) WHERE \(condition) AND \(Self.condition(statuses))"
    }

    private static func condition(_ statuses: [DeliveryStatus]) -> String {
        if statuses.count == 1, let status = statuses.first { return "status = '\(status.rawValue)'" }
        return "status IN (" + statuses.map { "'\($0.rawValue)'" }.joined(separator: ", ") + ")"
    }
}
