/// Derivation of Sentry `debug_id`s and `code_id`s for ELF images.
///
/// Sentry identifies an ELF image by its `debug_id`: the first 16 bytes of the GNU build ID read as a
/// little-endian GUID, i.e. the first 4, 2 and 2 bytes are reversed, then written as
/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in lower-case. A build ID shorter than 16 bytes is padded with zero
/// bytes. Example: build ID `68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434` → `e20a2268-5dc6-c165-b6aa-a12fa6765a6e`.
public enum DebugID {
    /// The `debug_id` for a GNU build ID given as hex (either case, even number of digits, at least one byte).
    /// - Returns: the GUID string, or `nil` when `buildID` is empty or not hex.
    public static func fromBuildID(_ buildID: String) -> String? {
        guard let bytes = hexBytes(buildID), !bytes.isEmpty else { return nil }
        return guid(fromFirst16: bytes)
    }

    /// The `debug_id` of an ELF image without a build ID, as Sentry and Breakpad derive it: the first page
    /// (up to 4096 bytes) of its `.text` section XOR-ed together in 16-byte chunks, then read as a GUID like
    /// ``fromBuildID(_:)``.
    /// - Returns: the GUID string, or `nil` when `text` is empty.
    public static func fromTextSection<Bytes: Collection>(_ text: Bytes) -> String? where Bytes.Element == UInt8 {
        guard !text.isEmpty else { return nil }
        var hash = [UInt8](repeating: 0, count: 16)
        for (index, byte) in text.prefix(4096).enumerated() {
            hash[index % 16] ^= byte
        }
        return guid(fromFirst16: hash)
    }

    /// Parses hex digits (either case) into bytes; `nil` for an odd count or a non-hex character.
    public static func hexBytes(_ hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    /// Lower-case hex of `bytes`, two digits a byte, no separators (the `code_id` form of a build ID).
    public static func hexString<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xf)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func guid(fromFirst16 input: [UInt8]) -> String {
        var bytes = Array(input.prefix(16))
        while bytes.count < 16 { bytes.append(0) }
        bytes[0..<4].reverse()
        bytes[4..<6].reverse()
        bytes[6..<8].reverse()
        let hex = hexString(bytes)
        let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4),
                     hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
        return parts.joined(separator: "-")
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
