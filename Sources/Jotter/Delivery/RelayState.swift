/// How the relay is doing, as the worker sees it: what `/healthz`, `/history` and the page show.
public enum RelayState: Sendable, Equatable {
    /// Deliveries go through (or nothing has failed yet).
    case ok
    /// The relay cannot be reached (refused, no route, DNS) since `since` (epoch ms); probed meanwhile.
    case offline(since: Int64)
    /// The relay as configured refuses every memo alike (`kind`: auth, tls, configuration) since
    /// `since`: one failed login, not one per memo; memos wait `held` with that reason, and the
    /// relay is re-tested with one of them on a slow schedule, at once on a Retry or a new configuration.
    /// `hint` says what to change when Jotter could find out (the names a certificate is for).
    case refused(kind: String, since: Int64, hint: String? = nil)
    /// A Jotter relay takes memos but cannot mail them (its own mail provider refuses it) since `since`:
    /// it keeps them and keeps trying, and so does this composer. Only reported (`/healthz`, the page):
    /// the worker goes on as for `ok`.
    case held(since: Int64)

    /// `ok`, `offline`, `refused` or `held`.
    public var name: String {
        switch self {
        case .ok: return "ok"
        case .offline: return "offline"
        case .refused: return "refused"
        case .held: return "held"
        }
    }
}

extension DeliveryFailure {
    /// The failure is the relay's, not the memo's: every memo would fail the same way until the
    /// configuration or the account changes (a wrong password, a certificate that does not verify).
    var refusesTheRelay: Bool {
        isPermanent && [.auth, .tls, .configuration, .unverified].contains(kind)
    }

    /// The kinds `refusesTheRelay` holds memos for (their `last_error` while held).
    static let relayRefusalKinds: Set<String> = [
        Kind.auth.rawValue, Kind.tls.rawValue, Kind.configuration.rawValue, Kind.unverified.rawValue,
    ]
}
