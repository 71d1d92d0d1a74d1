import Testing
@testable import Jotter

/// `Timestamp`'s calendar is its own integer arithmetic, so it is read back by Python's `datetime` and
/// `email.utils`, a second and independent calendar: every day for 400 years and random moments, each at
/// a different time of day, in the three forms Jotter writes (JSON and logs, mail `Date:`, the day).
@Suite struct TimestampTests {
    @Test(arguments: [
        (Int64(0), "1970-01-01T00:00:00.000Z", "Thu, 01 Jan 1970 00:00:00 +0000"),
        (-1, "1969-12-31T23:59:59.999Z", "Wed, 31 Dec 1969 23:59:59 +0000"),
        (-1_001, "1969-12-31T23:59:58.999Z", "Wed, 31 Dec 1969 23:59:58 +0000"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z", "Tue, 29 Feb 2000 00:00:00 +0000"),
        (4_107_542_400_000, "2100-03-01T00:00:00.000Z", "Mon, 01 Mar 2100 00:00:00 +0000"),
        (-2_203_891_200_001, "1900-02-28T23:59:59.999Z", "Wed, 28 Feb 1900 23:59:59 +0000"),
        (1_796_117_405_123, "2026-12-01T09:30:05.123Z", "Tue, 01 Dec 2026 09:30:05 +0000"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z", "Fri, 31 Dec 9999 23:59:59 +0000"),
    ])
    func knownMoments(milliseconds: Int64, iso: String, mail: String) {
        #expect(Timestamp.iso8601(milliseconds: milliseconds) == iso)
        #expect(Timestamp.rfc5322(milliseconds: milliseconds) == mail)
        #expect(Timestamp.day(milliseconds: milliseconds) == String(iso.prefix(10)))
        var line: [UInt8] = []
        Timestamp.appendISO8601(milliseconds: milliseconds, to: &line)
        #expect(line == Array(iso.utf8))
    }

    @Test func everyDayFor400YearsAndRandomMomentsAsPythonReadsThem() throws {
        var moments: [Int64] = []
        for day in Int64(-62_091)...Int64(84_006) {  // 1800-01-01 to 2200-01-01: 1800, 1900 and 2100 are not leap years, 2000 is
            moments.append(day * 86_400_000 + (day & 0xFFFF) * 1_317_011 % 86_400_000)
        }
        var random = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            moments.append(Int64.random(in: -30_610_224_000_000...253_402_300_799_999, using: &random))  // 1000–9999
        }
        let script = """
            import datetime, email.utils, sys
            utc = datetime.timezone.utc
            out = []
            for line in sys.stdin:
                moment = datetime.datetime(1970, 1, 1, tzinfo=utc) + datetime.timedelta(milliseconds=int(line))
                out.append(moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z') + '|'
                           + email.utils.format_datetime(moment))
            sys.stdout.write('\\n'.join(out) + '\\n')
            """
        let input = moments.map(String.init).joined(separator: "\n") + "\n"
        let expected = try Python.run(script, input: Array(input.utf8)).split(separator: "\n")
        try #require(expected.count == moments.count)
        var mismatches: [String] = []
        for (moment, line) in zip(moments, expected) {
            let ours = Timestamp.iso8601(milliseconds: moment) + "|" + Timestamp.rfc5322(milliseconds: moment)
            if ours != line { mismatches.append("\(moment): \(ours) against \(line)") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) differ, first: \(mismatches.prefix(3))")
    }

    /// Every moment written round-trips through the reader, and the reader agrees with Python's
    /// `datetime.fromisoformat` on times with offsets and fractions of every length.
    @Test func rfc3339ReadsWhatIsWrittenAndWhatPythonReads() throws {
        var random = SystemRandomNumberGenerator()
        var texts: [String] = []
        for _ in 0..<5_000 {
            let moment = Int64.random(in: -30_610_224_000_000...253_402_300_799_999, using: &random)
            #expect(Timestamp.milliseconds(rfc3339: Timestamp.iso8601(milliseconds: moment)) == moment)
            let offset = Int.random(in: -(23 * 60 + 59)...(23 * 60 + 59), using: &random)
            let digits = Int.random(in: 0...6, using: &random)
            // A local time with its offset, written by hand so the reader is checked against Python's.
            let parts = Timestamp.brokenDown(milliseconds: moment + Int64(offset) * 60_000)
            guard (1...9999).contains(parts.year) else { continue }
            func padded(_ value: Int, _ width: Int) -> String {
                String(repeating: "0", count: max(0, width - String(value).count)) + String(value)
            }
            let fraction = digits == 0 ? "" : "." + String(padded(Int((moment % 1000 + 1000) % 1000), 3)
                + String(repeating: "7", count: max(0, digits - 3))).prefix(digits)
            let sign = offset < 0 ? "-" : "+"
            texts.append("\(padded(parts.year, 4))-\(padded(parts.month, 2))-\(padded(parts.day, 2))T"
                         + "\(padded(parts.hour, 2)):\(padded(parts.minute, 2)):\(padded(parts.second, 2))\(fraction)"
                         + "\(sign)\(padded(abs(offset) / 60, 2)):\(padded(abs(offset) % 60, 2))")
        }
        let script = """
            import datetime, re, sys
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            out = []
            for line in sys.stdin:
                # Python reads at most 6 fraction digits; milliseconds are what matter
                text = re.sub(r'\\.([0-9]+)', lambda m: '.' + (m.group(1) + '00')[:3], line.strip())
                moment = datetime.datetime.fromisoformat(text)
                out.append(str((moment - epoch) // datetime.timedelta(milliseconds=1)))
            sys.stdout.write('\\n'.join(out) + '\\n')
            """
        let expected = try Python.run(script, input: Array((texts.joined(separator: "\n") + "\n").utf8))
            .split(separator: "\n")
        try #require(expected.count == texts.count)
        var mismatches: [String] = []
        for (text, line) in zip(texts, expected) where Timestamp.milliseconds(rfc3339: text).map(String.init) != String(line) {
            mismatches.append("\(text): \(String(describing: Timestamp.milliseconds(rfc3339: text))) against \(line)")
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) differ, first: \(mismatches.prefix(3))")
        #expect(Timestamp.milliseconds(rfc3339: "2026-12-01t09:30:05z") == 1_796_117_405_000)
        #expect(Timestamp.milliseconds(rfc3339: "2016-12-31T23:59:60Z") == 1_483_228_799_000)
    }

    @Test(arguments: [
        "", "2026-12-01", "2026-12-01T09:30Z", "2026-12-01 09:30:05Z", "2026-12-01T09:30:05",
        "2026-12-01T09:30:05.Z", "2026-12-01T09:30:05+0100", "2026-12-01T09:30:05+01", "2026-02-30T00:00:00Z",
        "2025-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-12-00T00:00:00Z",
        "2026-12-01T24:00:00Z", "2026-12-01T09:60:00Z", "2026-12-01T09:30:61Z", "2026-12-01T09:30:05+24:00",
        "2026-12-01T09:30:05Z ", " 2026-12-01T09:30:05Z", "+2026-12-01T09:30:05Z", "2026-12-01T09:30:05ZZ",
        "２026-12-01T09:30:05Z", "2026-1-01T09:30:05Z", "1796117405123",
    ])
    func rfc3339RefusesWhatIsNotAMoment(text: String) {
        #expect(Timestamp.milliseconds(rfc3339: text) == nil)
    }
}
