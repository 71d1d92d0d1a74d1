/// The partial indexes that hold the memos not delivered, and how a query reaches them. Delivered memos
/// are most of the history and are in none of them, so a read of what waits, sends or stopped costs what
/// those memos are, not what the history is. SQLite uses a partial index only when the query repeats the
/// index's condition word for word; `from(_:)` writes that condition, and `condition` is the one the
/// migrations create the indexes with.
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

    /// The index's condition, as its migration wrote it.
    var condition: String { Self.condition(statuses) }

    /// `FROM messages INDEXED BY … WHERE …` for the memos of this index in `statuses` (all of them when
    /// nil), ready for more `AND` terms.
    func from(_ statuses: [DeliveryStatus]? = nil) -> String {
        guard let statuses, statuses != self.statuses else {
            return "FROM messages INDEXED BY \(name) WHERE \(condition)"
        }
        return "FROM messages INDEXED BY \(name) WHERE \(condition) AND \(Self.condition(statuses))"
    }

    /// `status = 'a'`, `status IN ('a', 'b')`, or for three or more `(status = 'a' OR status = 'b' OR …)`.
    /// SQLite codes an IN list of three or more as a temporary b-tree built for each evaluation, and an
    /// index's condition is evaluated for every row inserted or changed; in parentheses, the OR form is
    /// still the one term SQLite matches against the index's condition.
    private static func condition(_ statuses: [DeliveryStatus]) -> String {
        let values = statuses.map { "'\($0.rawValue)'" }
        switch values.count {
        case 1: return "status = \(values[0])"
        case 2: return "status IN (\(values[0]), \(values[1]))"
        default: return "(" + values.map { "status = \($0)" }.joined(separator: " OR ") + ")"
        }
    }
}
