/// Integers as ASCII text for the start and exit paths (session records, file names, the client-report owner,
/// the default storage directory's hash). The standard library's `String(_:)`/`String(_:radix:)` and string
/// interpolation of an integer give the same text, but their code is pages of `libswiftCore` that a program
/// using Vaka would otherwise not have resident (three 64 KiB fault-around windows, docs/cost.md); these are
/// a few dozen bytes of loop here.
enum NumberText {
    /// `value` in decimal: `-` for a negative one, no leading zeros (`"0"` for zero); what `String(value)` gives.
    static func decimal(_ value: Int64) -> String {
        var digits: [UInt8] = []
        digits.reserveCapacity(20)
        // The magnitude as unsigned: `Int64.min` has none as a positive `Int64`.
        var rest = value < 0 ? UInt64(bitPattern: 0 &- value) : UInt64(value)
        repeat {
            digits.append(UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        if value < 0 { digits.append(UInt8(ascii: "-")) }
        digits.reverse()
        return String(decoding: digits, as: UTF8.self)
    }

    /// `value` in decimal (``decimal(_:)-(Int64)``).
    static func decimal(_ value: Int) -> String { decimal(Int64(value)) }

    /// `bytes` as lower-case hex, two digits a byte (what `DebugID.hexString` gives), by index: that generic
    /// function called with raw bytes iterates them through the standard library's unspecialized iterator.
    static func hex(bytes: UnsafeRawBufferPointer) -> String {
        let alphabet: StaticString = "0123456789abcdef"
        var digits: [UInt8] = []
        digits.reserveCapacity(bytes.count * 2)
        for i in 0..<bytes.count {
            digits.append(alphabet.utf8Start[Int(bytes[i] >> 4)])
            digits.append(alphabet.utf8Start[Int(bytes[i] & 0xf)])
        }
        return String(decoding: digits, as: UTF8.self)
    }

    /// `value` as `width` lower-case hex digits, zero-padded on the left (the low `width` digits when it has
    /// more): `hex(0xbeef, width: 8)` is `"0000beef"`.
    static func hex(_ value: UInt64, width: Int) -> String {
        let alphabet: StaticString = "0123456789abcdef"
        var digits = [UInt8](repeating: UInt8(ascii: "0"), count: max(0, width))
        var rest = value
        var i = digits.count - 1
        while i >= 0 {
            digits[i] = alphabet.utf8Start[Int(rest & 0xf)]
            rest >>= 4
            i -= 1
        }
        return String(decoding: digits, as: UTF8.self)
    }
}
