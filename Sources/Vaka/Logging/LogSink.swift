import Foundation

/// One log record as the sinks get it: what a ``Vaka/Logger`` call recorded.
public struct LogRecord: Sendable, Equatable {
    /// When it was recorded: seconds since the Unix epoch, with a fraction (CLOCK_REALTIME).
    public var timestamp: Double
    /// Its level (at or above ``Vaka/Options/logLevel``).
    public var level: LogLevel
    /// The message text.
    public var body: String
    /// The attributes given with it (typed values; the SDK's own `sentry.*` attributes are not among them).
    public var attributes: [String: LogAttribute]

    /// Creates a record; every field is described on its property.
    public init(timestamp: Double, level: LogLevel, body: String, attributes: [String: LogAttribute] = [:]) {
        self.timestamp = timestamp
        self.level = level
        self.body = body
        self.attributes = attributes
    }
}

/// Somewhere log records go besides Sentry. Give sinks in ``Vaka/Options/logSinks``: every record at or above
/// ``Vaka/Options/logLevel`` is passed to each sink once, in the order given, on the thread that logged, after
/// it was written to the run's journal (the Sentry sink, which always runs first).
///
/// `write` runs on the logging thread, so it should be quick and must not call ``Vaka/logger`` itself (that
/// would recurse).
public protocol LogSink: Sendable {
    /// Takes one record.
    func write(_ record: LogRecord)
}

/// A sink writing one line per record to stderr (one `write(2)` each):
/// `2026-11-30T16:04:57.123Z info  body key=value ...` — the time in UTC with milliseconds (rounded down), the
/// level padded to five characters, the body, then the attributes sorted by key. A string value holding a
/// space, `=`, `"`, `\` or a control character, or that is empty, is written quoted with `"`, `\` and control
/// characters escaped (`\n`, `\t`, `\u{1b}`...); control characters in the body are escaped the same way, so a
/// record is always one line.
public struct ConsoleLogSink: LogSink {
    private let output: @Sendable (String) -> Void

    /// A sink writing to stderr.
    public init() { output = { PrivateFiles.writeStandardError($0) } }

    /// A sink handing each line (newline included) to `output` (tests).
    init(output: @escaping @Sendable (String) -> Void) { self.output = output }

    /// Writes the record's line.
    public func write(_ record: LogRecord) { output(ConsoleLogSink.line(record)) }

    /// The line for `record`, newline included.
    static func line(_ record: LogRecord) -> String {
        var line = Timestamps.rfc3339(Date(timeIntervalSince1970: record.timestamp))
        line += " "
        let level = record.level.description
        line += level + String(repeating: " ", count: max(0, 5 - level.count)) + " "
        line += escaped(record.body, quote: false)
        for key in record.attributes.keys.sorted() {
            line += " " + escaped(key, quote: false) + "=" + valueText(record.attributes[key]!)
        }
        return line + "\n"
    }

    /// `text` as this sink writes a body or an attribute key: on one line, control characters escaped (`\n`,
    /// `\r`, `\t`, others as `\u{1b}`), everything else (`"` and `\` included) as it is. `vaka journal show`
    /// writes journal records the same way.
    public static func escapedText(_ text: String) -> String { escaped(text, quote: false) }

    /// An attribute value as this sink writes it after `key=`: a string holding a space, `=`, `"`, `\` or a
    /// control character, or that is empty, in `"` with `"`, `\` and control characters escaped (`"a \"b\""`);
    /// another string as it is; an integer or double in Swift's `description` (`3`, `0.5`, `nan`); `true` or
    /// `false`. `vaka journal show` writes journal attributes the same way.
    public static func valueText(_ value: LogAttribute) -> String {
        switch value {
        case .string(let s): s.isEmpty || needsQuotes(s) ? "\"" + escaped(s, quote: true) + "\"" : s
        case .integer(let i): String(i)
        case .double(let d): d.description
        case .boolean(let b): b ? "true" : "false"
        }
    }

    private static func needsQuotes(_ s: String) -> Bool {
        s.utf8.contains { $0 <= 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
    }

    /// `s` with control characters escaped (and `"` and `\` when `quote`).
    private static func escaped(_ s: String, quote: Bool) -> String {
        guard s.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F || (quote && ($0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\"))) })
        else { return s }
        var out = ""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\"" where quote: out += "\\\""
            case "\\" where quote: out += "\\\\"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F { out += "\\u{\(String(scalar.value, radix: 16))}" } else { out.unicodeScalars.append(scalar) }
            }
        }
        return out
    }
}
