import Glibc

/// `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 section 10.2.3).
enum RetryAfter {
    /// The wait in milliseconds, or nil when the value is neither form. Dates in the past mean 0.
    static func milliseconds(_ value: String, now: Int64) -> Int64? {
        let trimmed = Substring(value).trimmingCharacters(in: " \t")
        if let seconds = Int64(trimmed), seconds >= 0 {
            return seconds > 10_000_000 ? 10_000_000_000 : seconds * 1000
        }
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
        let fields = trimmed.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard fields.count == 6, fields[5] == "GMT", let day = Int32(fields[1]),
              let month = months.firstIndex(of: String(fields[2])), let year = Int32(fields[3]) else { return nil }
        let clock = fields[4].split(separator: ":")
        guard clock.count == 3, let hour = Int32(clock[0]), let minute = Int32(clock[1]),
              let second = Int32(clock[2]) else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = Int32(month)
        parts.tm_mday = day
        parts.tm_hour = hour
        parts.tm_min = minute
        parts.tm_sec = second
        let at = Int64(timegm(&parts)) * 1000
        return max(0, at - now)
    }
}
