import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A small JSON object writer for the SDK's own fixed-shape records written at start and exit (`scope.json`,
/// session updates): the bytes `JSONEncoder` with `.sortedKeys` and `.withoutEscapingSlashes` writes for the same
/// values, without `Codable`'s run-time generic machinery (its first use in a process looks up protocol
/// conformances across every loaded library, which costs a short-lived program more than the write itself).
/// Keys must be added in sorted order; `nil` values are left out, as the synthesized `Codable` conformances do.
struct JSONWriter {
    private(set) var bytes: [UInt8] = [UInt8(ascii: "{")]
    private var first = true

    /// The finished object.
    var data: Data {
        var out = bytes
        out.append(UInt8(ascii: "}"))
        return Data(out)
    }

    private mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        JSONWriter.appendString(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// `"name":"value"` (escaped as `JSONEncoder` does: `"`, `\` and control characters; `/` and non-ASCII as is).
    mutating func add(_ name: String, _ value: String?) {
        guard let value else { return }
        key(name)
        JSONWriter.appendString(value, to: &bytes)
    }

    /// `"name":123`.
    mutating func add(_ name: String, _ value: Int64?) {
        guard let value else { return }
        key(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// `"name":true` or `false`.
    mutating func add(_ name: String, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// `"name":1.5` (Swift's shortest round-trip form; a whole number without `.0`, as `JSONEncoder` writes it);
    /// a value that is not finite is left out (JSON has no such number).
    mutating func add(_ name: String, _ value: Double?) {
        guard let value, value.isFinite else { return }
        key(name)
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        bytes.append(contentsOf: text.utf8)
    }

    /// `"name":{...}` from another writer.
    mutating func add(_ name: String, object: JSONWriter?) {
        guard let object else { return }
        key(name)
        bytes.append(contentsOf: object.bytes)
        bytes.append(UInt8(ascii: "}"))
    }

    /// `"name":{"k":"v",...}` with the keys sorted.
    mutating func add(_ name: String, strings: [String: String]) {
        var object = JSONWriter()
        for k in strings.keys.sorted() { object.add(k, strings[k]) }
        add(name, object: object)
    }

    /// The bytes a JSON string escapes, as a C string for `strcspn(3)` (the terminating NUL is one of them).
    private static let escaped: [CChar] = (1..<0x20).map { CChar($0) } + [CChar(UInt8(ascii: "\"")), CChar(UInt8(ascii: "\\")), 0]

    /// Appends `text` as a JSON string literal. Runs without escapes are found with `strcspn(3)` and copied whole.
    static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var text = text
        let length = text.utf8.count
        text.withUTF8 { utf8 in
            guard let base = utf8.baseAddress else { return }
            // A NUL-terminated copy (the string may hold NUL bytes itself: `length` says where it ends).
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: length + 1)
            defer { buffer.deallocate() }
            UnsafeMutableRawPointer(buffer).copyMemory(from: base, byteCount: length)
            buffer[length] = 0
            var offset = 0
            escaped.withUnsafeBufferPointer { specials in
                while offset < length {
                    let run = strcspn(buffer + offset, specials.baseAddress!)
                    if run > 0 {
                        out.append(contentsOf: UnsafeRawBufferPointer(start: base + offset, count: min(run, length - offset)))
                        offset += run
                    }
                    guard offset < length else { break }
                    appendEscape(base[offset], to: &out)
                    offset += 1
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends the escape `JSONEncoder` writes for `byte` (a quote, a backslash or a control character).
    private static func appendEscape(_ byte: UInt8, to out: inout [UInt8]) {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0x08: out.append(UInt8(ascii: "b"))
        case 0x0C: out.append(UInt8(ascii: "f"))
        default:
            out.append(contentsOf: Array("u00".utf8))
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0x0F)])
        }
    }
}
