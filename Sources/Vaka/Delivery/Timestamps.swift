import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Date formatting and parsing for the wire: RFC 3339 (envelope `sent_at`) and HTTP dates (`Retry-After`).
/// Implemented on `gmtime_r`/`timegm`, so it is thread-safe and independent of the process locale.
enum Timestamps {
    /// Earliest instant ``rfc3339(_:)`` writes as itself: 0001-01-01T00:00:00Z, seconds since the epoch.
    static let earliestFormattable: TimeInterval = -62_135_596_800
    /// Latest instant ``rfc3339(_:)`` writes as itself: 9999-12-31T23:59:59.999Z, seconds since the epoch.
    static let latestFormattable: TimeInterval = 253_402_300_799.999

    /// Formats `date` as RFC 3339 UTC with milliseconds, e.g. `2024-05-01T12:34:56.789Z`.
    /// Dates outside years 1...9999 (e.g. from a damaged file) are clamped to that range; NaN gives the epoch.
    static func rfc3339(_ date: Date) -> String {
        var t = date.timeIntervalSince1970
        if t.isNaN { t = 0 }
        t = min(max(t, earliestFormattable), latestFormattable)
        let ms = Int64((t * 1000).rounded(.down))
        var secs = time_t(ms >= 0 ? ms / 1000 : (ms - 999) / 1000)
        let frac = Int(ms - Int64(secs) * 1000)
        var tm = tm()
        gmtime_r(&secs, &tm)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                      Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1, Int(tm.tm_mday),
                      Int(tm.tm_hour), Int(tm.tm_min), Int(tm.tm_sec), frac)
    }

    /// Parses RFC 3339 `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `nil` when malformed.
    static func parseRFC3339(_ string: String) -> Date? {
        let s = Array(string.utf8)
        func num(_ at: Int, _ len: Int) -> Int? {
            guard at + len <= s.count else { return nil }
            var v = 0
            for i in at..<(at + len) {
                guard s[i] >= 48, s[i] <= 57 else { return nil }
                v = v * 10 + Int(s[i] - 48)
            }
            return v
        }
        guard s.count >= 20, let y = num(0, 4), s[4] == UInt8(ascii: "-"), let mo = num(5, 2),
              s[7] == UInt8(ascii: "-"), let d = num(8, 2), s[10] == UInt8(ascii: "T") || s[10] == UInt8(ascii: "t"),
              let h = num(11, 2), s[13] == UInt8(ascii: ":"), let mi = num(14, 2), s[16] == UInt8(ascii: ":"),
              let sec = num(17, 2) else { return nil }
        var i = 19
        var fraction = 0.0
        if i < s.count, s[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 0.1
            let start = i
            while i < s.count, s[i] >= 48, s[i] <= 57 { fraction += Double(s[i] - 48) * scale; scale /= 10; i += 1 }
            if i == start { return nil }
        }
        var offset = 0
        guard i < s.count else { return nil }
        if s[i] == UInt8(ascii: "Z") || s[i] == UInt8(ascii: "z") {
            i += 1
        } else if s[i] == UInt8(ascii: "+") || s[i] == UInt8(ascii: "-") {
            guard let oh = num(i + 1, 2), i + 3 < s.count, s[i + 3] == UInt8(ascii: ":"), let om = num(i + 4, 2) else { return nil }
            offset = (oh * 3600 + om * 60) * (s[i] == UInt8(ascii: "+") ? 1 : -1)
            i += 6
        } else { return nil }
        guard i == s.count else { return nil }
        guard let base = epoch(year: y, month: mo, day: d, hour: h, minute: mi, second: sec) else { return nil }
        return Date(timeIntervalSince1970: Double(base - offset) + fraction)
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
