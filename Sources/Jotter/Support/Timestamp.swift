import Glibc

/// Formats epoch milliseconds for JSON (ISO 8601) and mail headers (RFC 5322).
public enum Timestamp {
    /// `2026-12-01T09:30:05.123Z`.
    public static func iso8601(milliseconds: Int64) -> String {
        let parts = brokenDown(milliseconds: milliseconds)
        let ms = Int((milliseconds % 1000 + 1000) % 1000)
        return "\(pad(parts.year, 4))-\(pad(parts.month, 2))-\(pad(parts.day, 2))T"
            + "\(pad(parts.hour, 2)):\(pad(parts.minute, 2)):\(pad(parts.second, 2)).\(pad(ms, 3))Z"
    }

    /// `Tue, 01 Dec 2026 09:30:05 +0000` (RFC 5322 section 3.3), always in UTC so retries render identically.
    public static func rfc5322(milliseconds: Int64) -> String {
        let parts = brokenDown(milliseconds: milliseconds)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        return "\(days[parts.weekday]), \(pad(parts.day, 2)) \(months[parts.month - 1]) \(parts.year) "
            + "\(pad(parts.hour, 2)):\(pad(parts.minute, 2)):\(pad(parts.second, 2)) +0000"
    }

    /// The UTC calendar date, `YYYY-MM-DD`.
    public static func day(milliseconds: Int64) -> String {
        let parts = brokenDown(milliseconds: milliseconds)
        return "\(pad(parts.year, 4))-\(pad(parts.month, 2))-\(pad(parts.day, 2))"
    }

    /// A UTC calendar date and time of day.
    struct Parts {
        var year, month, day, hour, minute, second, weekday: Int
    }

    static func brokenDown(milliseconds: Int64) -> Parts {
        var seconds = time_t(milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000)
        var value = tm()
        gmtime_r(&seconds, &value)
        return Parts(year: Int(value.tm_year) + 1900, month: Int(value.tm_mon) + 1, day: Int(value.tm_mday),
                     hour: Int(value.tm_hour), minute: Int(value.tm_min), second: Int(value.tm_sec),
                     weekday: Int(value.tm_wday))
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }
}
