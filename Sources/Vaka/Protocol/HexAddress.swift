/// A memory address or register value as the Sentry protocol writes it: a `0x`-prefixed lower-case
/// hex string (`"0x7f3b1a229d90"`, formatted like C's `"0x%llx"`).
///
/// Decodes from such a string (upper-case digits accepted), a decimal string or a JSON number.
public struct HexAddress: Codable, Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The address as an unsigned 64-bit integer.
    public var value: UInt64

    /// Wraps an address.
    public init(_ value: UInt64) {
        self.value = value
    }

    /// Parses `"0x…"` hex (1 to 16 digits, either case). Returns `nil` for anything else.
    public init?(hex: String) {
        guard hex.hasPrefix("0x") || hex.hasPrefix("0X") else { return nil }
        let digits = hex.dropFirst(2)
        guard (1...16).contains(digits.count), let value = UInt64(digits, radix: 16) else { return nil }
        self.value = value
    }

    /// The protocol form: `"0x"` and lower-case hex digits without leading zeros (`"0x0"` for zero).
    public var description: String {
        "0x" + String(value, radix: 16, uppercase: false)
    }

    /// Decodes from a `"0x…"` string, a string of decimal digits (as some SDKs write addresses) or a
    /// non-negative JSON number. Throws `DecodingError.dataCorrupted` for any other string.
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(UInt64.self) {
            value = number
            return
        }
        let text = try container.decode(String.self)
        if !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let number = UInt64(text) {
            value = number
            return
        }
        guard let parsed = HexAddress(hex: text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a 0x-hex address: \(text)")
        }
        value = parsed.value
    }

    /// Encodes ``description``.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    /// Orders by ``value``.
    public static func < (lhs: HexAddress, rhs: HexAddress) -> Bool {
        lhs.value < rhs.value
    }
}
