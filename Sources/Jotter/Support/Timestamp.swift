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

    /// Epoch milliseconds of an RFC 3339 date-time (`2026-12-01T09:30:05.123Z`, `…T10:30:05+01:00`;
    /// `T` and `Z` in either case, any number of fraction digits, of which milliseconds are kept), or nil
    /// if `text` is not one or names no real moment (February 30th, hour 24). A leap second is read as
    /// the second before it.
    public static func milliseconds(rfc3339 text: String) -> Int64? {
        let bytes = Array(text.utf8)
        func number(_ range: Range<Int>) -> Int? {
            guard range.upperBound <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        func byte(_ index: Int, is expected: UInt8...) -> Bool { index < bytes.count && expected.contains(bytes[index]) }
        guard let year = number(0..<4), byte(4, is: UInt8(ascii: "-")), let month = number(5..<7),
              byte(7, is: UInt8(ascii: "-")), let day = number(8..<10), byte(10, is: UInt8(ascii: "T"), UInt8(ascii: "t")),
              let hour = number(11..<13), byte(13, is: UInt8(ascii: ":")), let minute = number(14..<16),
              byte(16, is: UInt8(ascii: ":")), let second = number(17..<19),
              (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
              hour < 24, minute < 60, second <= 60 else { return nil }
        var index = 19
        var millisecond = 0
        if byte(index, is: UInt8(ascii: ".")) {
            index += 1
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                if index - digitsStart < 3 { millisecond = millisecond * 10 + Int(bytes[index] - UInt8(ascii: "0")) }
                index += 1
            }
            guard index > digitsStart else { return nil }
            for _ in min(index - digitsStart, 3)..<3 { millisecond *= 10 }
        }
        var offsetMinutes = 0
        if byte(index, is: UInt8(ascii: "Z"), UInt8(ascii: "z")) {
            index += 1
        } else if byte(index, is: UInt8(ascii: "+"), UInt8(ascii: "-")) {
            guard let hours = number((index + 1)..<(index + 3)), byte(index + 3, is: UInt8(ascii: ":")),
                  let minutes = number((index + 4)..<(index + 6)), hours < 24, minutes < 60 else { return nil }
            offsetMinutes = (hours * 60 + minutes) * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
            index += 6
        } else {
            return nil
        }
        guard index == bytes.count else { return nil }
        let seconds = days(year: year, month: month, day: day) * 86_400 + hour * 3_600 + (minute - offsetMinutes) * 60
            + min(second, 59)
        return Int64(seconds) * 1000 + Int64(millisecond)
    }

    /// Days since 1970-01-01 of a date in the proleptic Gregorian calendar (Howard Hinnant's
    /// `days_from_civil`, the inverse of `brokenDown`'s).
    static func days(year: Int, month: Int, day: Int) -> Int {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// How many days `month` of `year` has.
    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
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
