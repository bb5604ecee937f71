import Foundation

/// What every log of one run carries besides its own fields: the run's release, environment and trace id.
/// Written into each log as `trace_id` and the attributes `sentry.release` and `sentry.environment`.
struct LogScope: Sendable, Equatable {
    /// `sentry.release`.
    var release: String
    /// `sentry.environment`.
    var environment: String
    /// `trace_id`: 32 lower-case hex digits, one per run (``traceID(runID:)``).
    var traceID: String

    /// The trace id of the run `runID`: the run id (a UUID) as 32 lower-case hex digits, its dashes removed.
    /// Derived rather than stored, so the logs a later launch recovers from a run's journal carry the same
    /// trace id as those the run sent itself. A run id that is not a UUID gives the 32 hex digits of two
    /// 64-bit FNV-1a hashes of its UTF-8 bytes (still one value per run id).
    static func traceID(runID: String) -> String {
        if let uuid = UUID(uuidString: runID) {
            return String(uuid.uuidString.lowercased().unicodeScalars.filter { $0 != "-" })
        }
        var a: UInt64 = 0xcbf2_9ce4_8422_2325, b: UInt64 = 0x8422_2325_cbf2_9ce4
        for byte in runID.utf8 {
            a = (a ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
            b = (b ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        return hex16(a) + hex16(b)
    }

    private static func hex16(_ v: UInt64) -> String {
        let s = String(v, radix: 16)
        return String(repeating: "0", count: 16 - s.count) + s
    }
}

extension LogScope {
    /// The log scope of the run whose scope is `run`: its release, environment and ``traceID(runID:)``.
    init(run: RunScope) {
        self.init(release: run.release, environment: run.environment, traceID: LogScope.traceID(runID: run.runID))
    }
}

/// Collects log records into Sentry `log` envelope items (the Sentry logs protocol): the journal mover adds
/// each log record it reads, and takes the item when a batch is due.
///
/// A batch is due when it holds ``maxCount`` logs (default 100) or ``maxBytes`` bytes of encoded logs
/// (default 1 MiB; the item may exceed it by the last log added) — ``add(timeNs:level:body:attributes:scope:)``
/// returns `true` then — or when its oldest log was added ``maxAge`` seconds ago or more (default 5 s,
/// ``isDue(now:)``). The caller also takes what is held at flush and close.
///
/// The item (``takeItem()``): header `{"type":"log","item_count":N,"content_type":
/// "application/vnd.sentry.items.log+json"}`, payload `{"version":2,"items":[log,...]}`; each log
/// `{"timestamp":<epoch seconds, float>,"trace_id":"<32 hex>","level":"info","body":"...","attributes":{...}}`
/// with typed attributes `{"key":{"value":...,"type":"string|integer|double|boolean"}}`: the record's own,
/// then `sentry.sdk.name`, `sentry.sdk.version`, `sentry.environment`, `sentry.release`,
/// `sentry.severity_number` and `sentry.severity_text` (these win over a record attribute of the same key), as
/// sentry_sdk 2.75 writes them. A double that is NaN or infinite (JSON has no such numbers) is sent as a
/// string attribute (`"nan"`, `"inf"`, `"-inf"`).
///
/// A value type without locks: one owner (the mover) mutates it.
struct LogBatcher {
    /// Logs that make a batch due.
    let maxCount: Int
    /// Encoded bytes (the logs' JSON) that make a batch due.
    let maxBytes: Int
    /// Seconds after which the oldest held log makes a batch due.
    let maxAge: TimeInterval

    private var encoded: [UInt8] = []  // the held logs' JSON objects, comma-separated
    private var count = 0
    private var oldestAdded: Date?

    /// A batcher with the given thresholds (each at least 1; `maxAge` at least 0).
    init(maxCount: Int = 100, maxBytes: Int = 1 << 20, maxAge: TimeInterval = 5) {
        self.maxCount = max(1, maxCount)
        self.maxBytes = max(1, maxBytes)
        self.maxAge = maxAge.isNaN ? 0 : max(0, maxAge)
    }

    /// `true` when no log is held.
    var isEmpty: Bool { count == 0 }

    /// Logs held.
    var heldCount: Int { count }

    /// Encoded bytes held (the payload is this plus 24 bytes of `{"version":2,"items":[` `]}`).
    var heldBytes: Int { encoded.count }

    /// Adds one log. `level` is a journal level (OpenTelemetry severity number; an unknown one is sent as the
    /// nearest lower ``LogLevel``, below trace as trace); `timeNs` is nanoseconds since the epoch.
    /// - Returns: `true` when a batch is due now (``maxCount`` logs or ``maxBytes`` bytes held).
    mutating func add(timeNs: UInt64, level: UInt8, body: String, attributes: [(key: String, value: LogAttribute)],
                      scope: LogScope) -> Bool {
        if count == 0 { oldestAdded = Date() } else { encoded.append(UInt8(ascii: ",")) }
        LogJSON.appendLog(to: &encoded, timeNs: timeNs, level: LogLevel.nearest(level), body: body,
                          attributes: attributes, scope: scope)
        count += 1
        return count >= maxCount || encoded.count >= maxBytes
    }

    /// `true` when a log is held that was added `maxAge` seconds before `now` or earlier.
    func isDue(now: Date) -> Bool {
        guard let oldestAdded else { return false }
        return now.timeIntervalSince(oldestAdded) >= maxAge
    }

    /// The `log` item of everything held (`nil` when nothing is), which is then forgotten.
    mutating func takeItem() -> EnvelopeItem? {
        guard count > 0 else { return nil }
        var payload = Data()
        payload.reserveCapacity(encoded.count + 24)
        payload.append(contentsOf: #"{"version":2,"items":["#.utf8)
        payload.append(contentsOf: encoded)
        payload.append(contentsOf: "]}".utf8)
        let item = EnvelopeItem.logs(payload, count: count)
        encoded.removeAll(keepingCapacity: true)
        count = 0
        oldestAdded = nil
        return item
    }
}

extension LogLevel {
    /// The level of journal level `raw`: the highest ``LogLevel`` whose raw value is at most `raw` (`trace`
    /// below 1).
    static func nearest(_ raw: UInt8) -> LogLevel {
        var found = LogLevel.trace
        for level in LogLevel.allCases where level.rawValue <= raw { found = level }
        return found
    }
}

/// JSON writing for logs: strings escaped as RFC 8259 requires (`"`, `\` and control characters; `/` and
/// non-ASCII written as they are), numbers in their shortest round-trip form.
enum LogJSON {
    /// Appends one log object (see ``LogBatcher``).
    static func appendLog(to out: inout [UInt8], timeNs: UInt64, level: LogLevel, body: String,
                          attributes: [(key: String, value: LogAttribute)], scope: LogScope) {
        out.append(contentsOf: #"{"timestamp":"#.utf8)
        out.append(contentsOf: timestamp(timeNs).utf8)
        out.append(contentsOf: #","trace_id":"#.utf8)
        appendString(scope.traceID, to: &out)
        out.append(contentsOf: #","level":"#.utf8)
        appendString(level.description, to: &out)
        out.append(contentsOf: #","body":"#.utf8)
        appendString(body, to: &out)
        out.append(contentsOf: #","attributes":{"#.utf8)
        var first = true
        func attribute(_ key: String, _ value: LogAttribute) {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            appendString(key, to: &out)
            out.append(contentsOf: #":{"value":"#.utf8)
            var type = value.typeName
            switch value {
            case .string(let s): appendString(s, to: &out)
            case .integer(let i): out.append(contentsOf: String(i).utf8)
            case .boolean(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
            case .double(let d):
                if d.isFinite {
                    out.append(contentsOf: d.description.utf8)
                } else {
                    appendString(d.isNaN ? "nan" : (d < 0 ? "-inf" : "inf"), to: &out)
                    type = "string"
                }
            }
            out.append(contentsOf: #","type":"#.utf8)
            appendString(type, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        for (key, value) in attributes where !sdkKeys.contains(key) { attribute(key, value) }
        attribute("sentry.sdk.name", .string(SDKInfo.vaka.name))
        attribute("sentry.sdk.version", .string(SDKInfo.vaka.version))
        attribute("sentry.environment", .string(scope.environment))
        attribute("sentry.release", .string(scope.release))
        attribute("sentry.severity_number", .integer(Int64(level.rawValue)))
        attribute("sentry.severity_text", .string(level.description))
        out.append(contentsOf: "}}".utf8)
    }

    /// The attribute keys the SDK writes itself.
    static let sdkKeys: Set<String> = ["sentry.sdk.name", "sentry.sdk.version", "sentry.environment",
                                       "sentry.release", "sentry.severity_number", "sentry.severity_text"]

    /// Seconds since the epoch with the nanoseconds as a fraction, e.g. `1714566896.789` (shortest `Double`
    /// form; a whole second is written `1714566896.0`).
    static func timestamp(_ timeNs: UInt64) -> String {
        Journal.seconds(timeNs).description
    }

    /// Appends `s` as a JSON string literal.
    static func appendString(_ s: String, to out: inout [UInt8]) {
        var s = s
        s.withUTF8 { bytes in
            out.append(UInt8(ascii: "\""))
            // Most strings need no escape: one bulk copy.
            if !bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
                out.append(contentsOf: bytes)
                out.append(UInt8(ascii: "\""))
                return
            }
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "\""): out.append(contentsOf: [0x5C, 0x22])
                case UInt8(ascii: "\\"): out.append(contentsOf: [0x5C, 0x5C])
                case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
                case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
                case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
                case 0..<0x20:
                    out.append(contentsOf: #"\u00"#.utf8)
                    out.append(hexDigits[Int(byte >> 4)])
                    out.append(hexDigits[Int(byte & 0xF)])
                default: out.append(byte)
                }
            }
            out.append(UInt8(ascii: "\""))
        }
    }

    /// Lower-case hex digits for `\u00XX`.
    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
}
