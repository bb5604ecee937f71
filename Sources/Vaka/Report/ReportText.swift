// The text forms of the report format (docs/report-format.md, *Shape*), for the reader.

/// Escaped text values, `0x` hex numbers, space-separated words, and the printable form of raw bytes for error
/// messages.
enum ReportText {
    /// Undoes the format's escaping: `\\`, `\n`, `\t`, `\xHH`; other backslashes are kept as they are.
    /// Invalid UTF-8 becomes U+FFFD.
    static func unescape<Bytes: Collection>(_ value: Bytes) -> String where Bytes.Element == UInt8 {
        let input = Array(value)
        var out: [UInt8] = []
        out.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == 0x5C, index + 1 < input.count {
                let next = input[index + 1]
                switch next {
                case 0x5C: out.append(0x5C); index += 2; continue
                case UInt8(ascii: "n"): out.append(0x0A); index += 2; continue
                case UInt8(ascii: "t"): out.append(0x09); index += 2; continue
                case UInt8(ascii: "x"):
                    if index + 3 < input.count, isHexDigit(input[index + 2]), isHexDigit(input[index + 3]),
                       let decoded = UInt8(String(decoding: input[(index + 2)...(index + 3)], as: UTF8.self), radix: 16) {
                        out.append(decoded)
                        index += 4
                        continue
                    }
                default: break
                }
            }
            out.append(byte)
            index += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Printable form of raw bytes for error messages: ASCII as is, anything else as `\xHH`.
    static func escapeForDisplay<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var text = ""
        for byte in bytes {
            if byte >= 0x20 && byte < 0x7F && byte != 0x5C {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
            }
        }
        return text
    }

    /// `text` split at single spaces into at most `max` words; the last word keeps the rest of the text, spaces
    /// included, and empty words are kept (`"1  x"` is `["1", "", "x"]` for `max` 3).
    static func words(_ text: String, max: Int) -> [String] {
        text.split(separator: " ", maxSplits: max - 1, omittingEmptySubsequences: false).map(String.init)
    }

    /// `true` for an ASCII letter or digit.
    static func isAlnum(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
    }

    /// `true` for an ASCII hex digit, either case.
    static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66)
    }

    /// The value of `0x`-prefixed hex with 1 to 16 digits (either case), or `nil` for anything else.
    static func hex(_ text: String) -> UInt64? {
        guard text.hasPrefix("0x") else { return nil }
        return bareHex(text.dropFirst(2))
    }

    /// The value of 1 to 16 hex digits (either case) without a `0x` prefix (a `thread_frames` frame), or `nil`.
    static func bareHex(_ digits: Substring) -> UInt64? {
        guard (1...16).contains(digits.utf8.count), digits.utf8.allSatisfy({ isHexDigit($0) }) else { return nil }
        return UInt64(digits, radix: 16)
    }
}
