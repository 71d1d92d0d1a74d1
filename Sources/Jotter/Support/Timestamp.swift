/// Formats epoch milliseconds in UTC for JSON and logs (ISO 8601) and mail headers (RFC 5322), as bytes
/// into the caller's buffer or as a string. The calendar is integer arithmetic (no `gmtime_r`, which takes
/// glibc's time-zone lock): a log line, a history entry and a mail header each format one or two.
public enum Timestamp {
    /// `2026-12-01T09:30:05.123Z`.
    public static func iso8601(milliseconds: Int64) -> String {
        var bytes: [UInt8] = []
        appendISO8601(milliseconds: milliseconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `iso8601(milliseconds:)`'s bytes, appended to `out`.
    static func appendISO8601(milliseconds: Int64, to out: inout [UInt8]) {
        let parts = brokenDown(milliseconds: milliseconds)
        appendDate(parts, to: &out)
        out.append(UInt8(ascii: "T"))
        appendTime(parts, to: &out)
        out.append(UInt8(ascii: "."))
        appendDigits(Int((milliseconds % 1000 + 1000) % 1000), count: 3, to: &out)
        out.append(UInt8(ascii: "Z"))
    }

    /// `Tue, 01 Dec 2026 09:30:05 +0000` (RFC 5322 section 3.3), always in UTC so retries render identically.
    public static func rfc5322(milliseconds: Int64) -> String {
        var bytes: [UInt8] = []
        appendRFC5322(milliseconds: milliseconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `rfc5322(milliseconds:)`'s bytes, appended to `out`.
    static func appendRFC5322(milliseconds: Int64, to out: inout [UInt8]) {
        let parts = brokenDown(milliseconds: milliseconds)
        appendName(3 * parts.weekday, of: "SunMonTueWedThuFriSat", to: &out)
        out.append(", ")
        appendDigits(parts.day, count: 2, to: &out)
        out.append(0x20)
        appendName(3 * (parts.month - 1), of: "JanFebMarAprMayJunJulAugSepOctNovDec", to: &out)
        out.append(0x20)
        if (1000...9999).contains(parts.year) {
            appendDigits(parts.year, count: 4, to: &out)
        } else {
            out.append(utf8: String(parts.year))
        }
        out.append(0x20)
        appendTime(parts, to: &out)
        out.append(" +0000")
    }

    /// The UTC calendar date, `YYYY-MM-DD`.
    public static func day(milliseconds: Int64) -> String {
        var bytes: [UInt8] = []
        appendDate(brokenDown(milliseconds: milliseconds), to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A UTC calendar date and time of day.
    struct Parts {
        var year, month, day, hour, minute, second, weekday: Int
    }

    /// The proleptic Gregorian calendar in UTC (Howard Hinnant's `civil_from_days`).
    static func brokenDown(milliseconds: Int64) -> Parts {
        // Floor division, so a moment before 1970 falls in the second (and day) that contains it.
        let seconds = Int(milliseconds >= 0 ? milliseconds / 1000 : -((-(milliseconds + 1)) / 1000) - 1)
        let days = seconds >= 0 ? seconds / 86_400 : -((-(seconds + 1)) / 86_400) - 1
        let secondOfDay = seconds - days * 86_400
        let shifted = days + 719_468  // days since 0000-03-01
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        return Parts(year: yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month: month,
                     day: dayOfYear - (153 * monthFromMarch + 2) / 5 + 1,
                     hour: secondOfDay / 3_600, minute: secondOfDay / 60 % 60, second: secondOfDay % 60,
                     weekday: ((days + 4) % 7 + 7) % 7)  // 1970-01-01 was a Thursday
    }

    /// The three letters at `offset` in `names`.
    private static func appendName(_ offset: Int, of names: StaticString, to out: inout [UInt8]) {
        names.withUTF8Buffer { out.append(contentsOf: UnsafeBufferPointer(rebasing: $0[offset..<(offset + 3)])) }
    }

    /// `YYYY-MM-DD`; a year outside 0000–9999 as its decimal, zero-padded to four characters.
    private static func appendDate(_ parts: Parts, to out: inout [UInt8]) {
        if (0...9999).contains(parts.year) {
            appendDigits(parts.year, count: 4, to: &out)
        } else {
            let text = String(parts.year)
            out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: max(0, 4 - text.utf8.count)))
            out.append(utf8: text)
        }
        out.append(UInt8(ascii: "-"))
        appendDigits(parts.month, count: 2, to: &out)
        out.append(UInt8(ascii: "-"))
        appendDigits(parts.day, count: 2, to: &out)
    }

    /// `HH:MM:SS`.
    private static func appendTime(_ parts: Parts, to out: inout [UInt8]) {
        appendDigits(parts.hour, count: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(parts.minute, count: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(parts.second, count: 2, to: &out)
    }

    /// The last `count` decimal digits of `value` (not negative), zero-padded.
    private static func appendDigits(_ value: Int, count: Int, to out: inout [UInt8]) {
        var divisor = 1
        for _ in 1..<count { divisor *= 10 }
        while divisor > 0 {
            out.append(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: value / divisor % 10))
            divisor /= 10
        }
    }
}
