import Foundation

/// One location as `addr2line -f -i -a` (binutils) or `eu-addr2line -f -i -a` (elfutils) prints it: function,
/// file, line; `nil` where the tool prints `??`, `?` or line 0.
public struct Addr2lineLocation: Equatable, CustomStringConvertible {
    public var symbol: String?
    public var file: String?
    public var line: Int?

    public init(symbol: String?, file: String?, line: Int?) {
        self.symbol = symbol
        self.file = file
        self.line = line
    }

    public var description: String { "\(symbol ?? "??") \(file ?? "??"):\(line.map(String.init) ?? "?")" }
}

/// Parses the standard output of `addr2line -f -i -a` or `eu-addr2line -f -i -a`: per address (the `0x…` lines
/// `-a` prints), its locations innermost first. eu-addr2line's "inner inlined at FILE:LINE in outer" first name
/// is cut to the inner function; a ` (discriminator N)` suffix and a `:COLUMN` after the line are dropped.
public func parseAddr2line(_ output: Data) -> [UInt64: [Addr2lineLocation]] {
    var answers: [UInt64: [Addr2lineLocation]] = [:]
    var current: UInt64?
    var pendingName: String?
    for line in String(decoding: output, as: UTF8.self).split(separator: "\n") {
        let text = String(line)
        if text.hasPrefix("0x"), pendingName == nil, let address = UInt64(text.dropFirst(2), radix: 16) {
            current = address
            answers[address] = []
            continue
        }
        guard let address = current else { continue }
        if pendingName == nil {
            pendingName = text.components(separatedBy: " inlined at ").first.map { $0.components(separatedBy: " inlined from ").first! }
            continue
        }
        var location = text
        if let range = location.range(of: " (discriminator") { location = String(location[..<range.lowerBound]) }
        var parts = location.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        // FILE:LINE or FILE:LINE:COLUMN.
        if parts.count >= 3, Int(parts[parts.count - 1]) != nil, Int(parts[parts.count - 2]) != nil { parts.removeLast() }
        let lineNumber = parts.count >= 2 ? Int(parts.removeLast()) : nil
        let file = parts.joined(separator: ":")
        answers[address, default: []].append(Addr2lineLocation(symbol: pendingName == "??" ? nil : pendingName,
                                                               file: file == "??" || file.isEmpty ? nil : file,
                                                               line: lineNumber == 0 ? nil : lineNumber))
        pendingName = nil
    }
    return answers
}
