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
}
