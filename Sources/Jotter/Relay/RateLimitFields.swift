/// The `RateLimit-Policy` and `RateLimit` response fields of the IETF httpapi draft
/// (draft-ietf-httpapi-ratelimit-headers, revisions 08 and later): Structured Field Lists whose items
/// are the policies' names as Strings, with `q` (quota) and `w` (window, seconds) for a policy and
/// `r` (remaining) and `t` (seconds until more quota) for its current state:
///
///     RateLimit-Policy: "device-minute";q=30;w=60, "device-day";q=200;w=86400
///     RateLimit: "device-minute";r=29;t=41, "device-day";r=180;t=3600
///
/// A layer that is not `advertised` (the relay-wide ceiling) is shown only when it refuses: its
/// remaining count would otherwise tell every client how busy the relay is.
enum RateLimitFields {
    /// Adds both fields for `states` to `response` (nothing when no layer is shown).
    static func add(_ states: [LimitState], to response: inout HTTPResponse) {
        let shown = states.filter { $0.charge.advertised || $0.refused }
        guard !shown.isEmpty else { return }
        response.headers.add(name: "RateLimit-Policy", value: shown.map { state in
            "\(name(state.charge.policy));q=\(state.charge.quota);w=\(state.charge.windowSeconds)"
        }.joined(separator: ", "))
        response.headers.add(name: "RateLimit", value: shown.map { state in
            "\(name(state.charge.policy));r=\(state.remaining);t=\(state.resetSeconds)"
        }.joined(separator: ", "))
    }

    /// A policy name as a Structured Field String (our names need no escaping; quotes and
    /// backslashes would be escaped, anything outside printable ASCII dropped).
    private static func name(_ policy: String) -> String {
        var out = "\""
        for scalar in policy.unicodeScalars where scalar.value >= 0x20 && scalar.value < 0x7F {
            if scalar == "\"" || scalar == "\\" { out += "\\" }
            out.unicodeScalars.append(scalar)
        }
        return out + "\""
    }
}
