#if canImport(Glibc)
import Glibc
#endif

/// Random identifiers (run id, session id, anon id, event ids, temporary file names) from the system's random
/// generator (`getrandom(2)` through `SystemRandomNumberGenerator`: no file is opened, unlike Foundation's
/// `UUID()`, which reads `/dev/urandom` for each id).
enum RandomID {
    /// A random (version 4, RFC 9562) UUID: 36 characters, upper-case hex with dashes like
    /// `UUID().uuidString`, e.g. `0F8D4E2A-3B1C-4D5E-9F60-718293A4B5C6`; `lowercase` gives lower-case hex.
    static func uuid(lowercase: Bool = false) -> String {
        hex(version4(), dashes: true, lowercase: lowercase)
    }

    /// A random version 4 UUID as 32 lower-case hex digits without dashes (Sentry's `event_id` form).
    static func hex32() -> String {
        hex(version4(), dashes: false, lowercase: true)
    }

    /// 8 random lower-case hex digits (32 bits; not a UUID): a short tag, e.g. `3f09a1c2`.
    static func hex8() -> String {
        var generator = SystemRandomNumberGenerator()
        let word = UInt32(truncatingIfNeeded: generator.next())
        return hex((0..<4).map { UInt8(truncatingIfNeeded: word >> (8 * UInt32($0))) }, dashes: false, lowercase: true)
    }

    /// Whether `text` is a UUID in the 8-4-4-4-12 hex form (either case).
    static func isUUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (i, b) in bytes.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                if b != UInt8(ascii: "-") { return false }
            } else if !((48...57).contains(b) || (65...70).contains(b) || (97...102).contains(b)) {
                return false
            }
        }
        return true
    }

    /// 16 random bytes with the version (4) and variant (RFC 9562) bits of a random UUID set.
    private static func version4() -> [UInt8] {
        var bytes = random16()
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return bytes
    }

    private static func random16() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: 16)
        for half in 0..<2 {
            let word = generator.next()
            for i in 0..<8 { bytes[half * 8 + i] = UInt8(truncatingIfNeeded: word >> (8 * UInt64(i))) }
        }
        return bytes
    }

    private static func hex(_ bytes: [UInt8], dashes: Bool, lowercase: Bool) -> String {
        let digits = Array((lowercase ? "0123456789abcdef" : "0123456789ABCDEF").utf8)
        var out = [UInt8]()
        out.reserveCapacity(36)
        for (i, b) in bytes.enumerated() {
            if dashes && (i == 4 || i == 6 || i == 8 || i == 10) { out.append(UInt8(ascii: "-")) }
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
