/// `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 section 10.2.3).
enum RetryAfter {
    /// The longest wait taken from either form (`RetryPolicy` caps it further).
    static let longestMilliseconds: Int64 = 10_000_000_000

    /// The wait in milliseconds, or nil when the value is neither form (or names no real moment between
    /// the years 1900 and 9999). Dates in the past mean 0. Whatever a server sends, nothing overflows: a
    /// date in the year 300,000,000 ended the process (`timegm` in milliseconds past Int64).
    static func milliseconds(_ value: String, now: Int64) -> Int64? {
        let trimmed = Substring(value).trimmingCharacters(in: " \t")
        if let seconds = Int64(trimmed), seconds >= 0 {
            return seconds > longestMilliseconds / 1000 ? longestMilliseconds : seconds * 1000
        }
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
        let fields = trimmed.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard fields.count == 6, fields[5] == "GMT", let day = Int(fields[1]), (1...31).contains(day),
              let month = months.firstIndex(of: String(fields[2])), let year = Int(fields[3]),
              (1900...9999).contains(year) else { return nil }
        let clock = fields[4].split(separator: ":")
        guard clock.count == 3, let hour = Int(clock[0]), (0...23).contains(hour), let minute = Int(clock[1]),
              (0...59).contains(minute), let second = Int(clock[2]), (0...60).contains(second) else { return nil }
        let days = Timestamp.days(year: year, month: month + 1, day: day)
        let at = Int64(days * 86_400 + hour * 3_600 + minute * 60 + min(second, 59)) * 1000
        let (wait, overflow) = at.subtractingReportingOverflow(now)
        if overflow { return now > at ? 0 : longestMilliseconds }
        return min(max(0, wait), longestMilliseconds)
    }
}
