import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Date formatting and parsing for the wire: RFC 3339 (envelope `sent_at`, session and event times), written
/// with integer arithmetic on the proleptic Gregorian calendar (no Foundation formatter: a date format style
/// loads ICU's calendar and time-zone data, megabytes of resident memory for a process that only starts and
/// exits) and read with Foundation's ISO 8601 format style; HTTP dates (`Retry-After`) on `timegm`.
/// Thread-safe and independent of the process locale and time zone.
enum Timestamps {
    /// Earliest instant ``rfc3339(_:)`` writes as itself: 0001-01-01T00:00:00Z (proleptic Gregorian), seconds
    /// since the epoch.
    static let earliestFormattable: TimeInterval = -62_135_596_800
    /// Latest instant ``rfc3339(_:)`` writes as itself: 9999-12-31T23:59:59.999Z, seconds since the epoch.
    static let latestFormattable: TimeInterval = 253_402_300_799.999

    /// The reader of ``parseRFC3339(_:)``: `2024-05-01T12:34:56.789Z`. A `Sendable` value, made at its first use
    /// (only reading envelopes back needs it).
    private static let format = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// Formats `date` as RFC 3339 UTC with milliseconds, e.g. `2024-05-01T12:34:56.789Z`; the milliseconds are
    /// those of `date` rounded down. Dates outside years 1...9999 (e.g. from a damaged file) are clamped to
    /// that range; NaN gives the epoch.
    static func rfc3339(_ date: Date) -> String {
        var t = date.timeIntervalSince1970
        if t.isNaN { t = 0 }
        t = min(max(t, earliestFormattable), latestFormattable)
        // Milliseconds rounded down, except that a time within a few units in the last place below a whole
        // millisecond is that millisecond: times read back from files are whole milliseconds stored in a
        // `Double` (1.760 is 1.7599999...), and a `Date` holds seconds since 2001 (so 1970-based seconds come back
        // with the rounding of that sum); each must keep its own millisecond.
        let scaled = t * 1000
        var whole = scaled.rounded(.down)
        let nearest = scaled.rounded()
        let tolerance = 4 * 1000 * (abs(t) + 978_307_200).ulp
        if nearest > scaled && nearest - scaled <= tolerance { whole = nearest }
        let ms = Int64(whole)
        let (secondsTotal, milli) = (ms >= 0 ? ms / 1000 : (ms - 999) / 1000, ((ms % 1000) + 1000) % 1000)
        let days = secondsTotal >= 0 ? secondsTotal / 86_400 : (secondsTotal - 86_399) / 86_400
        let secondOfDay = secondsTotal - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        var out = [UInt8]()
        out.reserveCapacity(24)
        func digits(_ value: Int64, _ count: Int) {
            var divisor: Int64 = 1
            for _ in 1..<count { divisor *= 10 }
            var v = value
            while divisor > 0 {
                out.append(UInt8(48 + (v / divisor) % 10))
                v %= divisor
                divisor /= 10
            }
        }
        digits(year, 4); out.append(45); digits(month, 2); out.append(45); digits(day, 2); out.append(84)
        digits(secondOfDay / 3600, 2); out.append(58); digits(secondOfDay / 60 % 60, 2); out.append(58)
        digits(secondOfDay % 60, 2); out.append(46); digits(milli, 3); out.append(90)
        return String(decoding: out, as: UTF8.self)
    }

    /// Year, month (1...12) and day (1...31) of the proleptic Gregorian date `days` days after 1970-01-01
    /// (Howard Hinnant's `civil_from_days`).
    private static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Parses RFC 3339 `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (`T` and `Z` in either case); `nil` when
    /// malformed, when anything follows the time zone, or when the year is not four digits.
    static func parseRFC3339(_ string: String) -> Date? {
        let s = string.uppercased()
        let bytes = Array(s.utf8.prefix(5))
        guard bytes.count == 5, bytes[0..<4].allSatisfy({ (48...57).contains($0) }), bytes[4] == UInt8(ascii: "-"),
              let (end, date) = try? format.consuming(s, startingAt: s.startIndex, in: s.startIndex..<s.endIndex),
              end == s.endIndex else { return nil }
        return date
    }

    /// Parses an HTTP date (RFC 9110): IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete
    /// RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT` and asctime `Sun Nov  6 08:49:37 1994` forms; `nil` otherwise.
    static func parseHTTPDate(_ string: String) -> Date? {
        guard string.utf8.count <= 64 else { return nil }  // IMF-fixdate is 29 bytes
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        let tokens = string.replacingOccurrences(of: ",", with: " ").replacingOccurrences(of: "-", with: " ")
            .split(separator: " ").map { $0.lowercased() }
        func time(_ t: String) -> (Int, Int, Int)? {
            let p = t.split(separator: ":").compactMap { Int($0) }
            return p.count == 3 ? (p[0], p[1], p[2]) : nil
        }
        // IMF-fixdate / RFC 850: weekday day month year time GMT
        if tokens.count == 6, tokens[5] == "gmt", let day = Int(tokens[1]),
           let m = months.firstIndex(of: String(tokens[2].prefix(3))), var year = Int(tokens[3]),
           let (h, mi, s) = time(tokens[4]) {
            if tokens[3].count == 2 { year += year < 70 ? 2000 : 1900 }
            return epoch(year: year, month: m + 1, day: day, hour: h, minute: mi, second: s)
                .map { Date(timeIntervalSince1970: Double($0)) }
        }
        // asctime: weekday month day time year
        if tokens.count == 5, let m = months.firstIndex(of: String(tokens[1].prefix(3))), let day = Int(tokens[2]),
           let (h, mi, s) = time(tokens[3]), let year = Int(tokens[4]) {
            return epoch(year: year, month: m + 1, day: day, hour: h, minute: mi, second: s)
                .map { Date(timeIntervalSince1970: Double($0)) }
        }
        return nil
    }

    /// Seconds since the epoch for a UTC calendar time, or `nil` when a field is out of range (years outside
    /// 0...9999 included: they would not fit `struct tm`'s `Int32` fields, and no server means them).
    private static func epoch(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Int? {
        guard (0...9999).contains(year), (1...12).contains(month), (1...31).contains(day), (0...23).contains(hour),
              (0...59).contains(minute), (0...60).contains(second) else { return nil }
        var t = tm()
        t.tm_year = Int32(year - 1900)
        t.tm_mon = Int32(month - 1)
        t.tm_mday = Int32(day)
        t.tm_hour = Int32(hour)
        t.tm_min = Int32(minute)
        t.tm_sec = Int32(second)
        return Int(timegm(&t))
    }
}
