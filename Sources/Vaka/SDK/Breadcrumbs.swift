import Foundation

/// Breadcrumbs as journal records (``Journal/Kind/breadcrumb``): one breadcrumb is one record, written by
/// ``Client/addBreadcrumb(_:)`` and read back by the mover (the breadcrumbs of a captured event) and the crash
/// join (the breadcrumbs of a crashed run's fatal event).
///
/// Mapping: `category` ↔ the record's category (`""` = none), `message` ↔ the body (empty = none), `level`
/// ↔ the record's level (Sentry's breadcrumb levels `debug`/`info`/`warning`/`error`/`fatal` ↔ the journal's
/// 5/9/13/17/21; 0 = none; any other name is stored as `info`), `type` ↔ the meta attribute `type` (absent =
/// `default`), `data` ↔ typed attributes (a string, whole number, number or flag ↔ a `string`, `integer`,
/// `double` or `boolean` attribute of the same key; `null`, an array or an object ↔ the meta attribute
/// `json:KEY` holding the value's JSON text), `timestamp` ↔ the record's time (ns since the epoch:
/// ``Journal/nanoseconds(_:)``). ``Vaka/addBreadcrumb(category:message:)`` writes no attributes at all.
extension Breadcrumb {
    /// The journal level of a Sentry breadcrumb level name (`nil`: 0, none), in any case, with the other names
    /// Relay and logging libraries use (`trace`, `warn`, `critical`, `log`); any other name is `info`.
    static func journalLevel(_ level: String?) -> UInt8 {
        guard let level else { return 0 }
        switch level.lowercased() {
        case "debug", "trace": return LogLevel.debug.rawValue
        case "warning", "warn": return LogLevel.warn.rawValue
        case "error": return LogLevel.error.rawValue
        case "fatal", "critical": return LogLevel.fatal.rawValue
        default: return LogLevel.info.rawValue
        }
    }

    /// The Sentry breadcrumb level name of a journal level (0: `nil`; trace counts as `debug`).
    static func levelName(_ level: UInt8) -> String? {
        switch level {
        case 0: return nil
        case ...LogLevel.debug.rawValue: return "debug"
        case ...LogLevel.info.rawValue: return "info"
        case ...LogLevel.warn.rawValue: return "warning"
        case ...LogLevel.error.rawValue: return "error"
        default: return "fatal"
        }
    }

    /// The prefix of the meta attribute holding a `data` value that is `null`, an array or an object as JSON text.
    static let jsonAttributePrefix = "json:"

    /// The journal attributes of this breadcrumb: `type` (meta) unless `default`, and `data` (see the
    /// extension's documentation), in key order.
    var journalAttributes: [Journal.Attribute] {
        var out: [Journal.Attribute] = []
        if type != "default" { out.append(Journal.Attribute(key: "type", value: .string(type), meta: true)) }
        for (key, value) in (data ?? [:]).sorted(by: { $0.key < $1.key }) {
            if let typed = value.logAttribute {
                out.append(Journal.Attribute(key: key, value: typed))
            } else {
                out.append(Journal.Attribute(key: Breadcrumb.jsonAttributePrefix + key, value: .string(value.jsonText), meta: true))
            }
        }
        return out
    }

    /// The breadcrumb a journal record holds (see the extension's documentation for the mapping). A `json:KEY`
    /// attribute whose text does not parse (a damaged record) is kept as that text.
    init(record: Journal.Record) {
        var type = "default"
        var data: [String: JSONValue] = [:]
        for attribute in record.attributes {
            if attribute.meta {
                guard case .string(let text) = attribute.value else { continue }
                if attribute.key == "type" {
                    type = text
                } else if attribute.key.hasPrefix(Breadcrumb.jsonAttributePrefix) {
                    let key = String(attribute.key.dropFirst(Breadcrumb.jsonAttributePrefix.count))
                    data[key] = (try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))) ?? .string(text)
                }
                continue
            }
            data[attribute.key] = JSONValue(attribute.value)
        }
        self.init(timestamp: Journal.seconds(record.timeNs), type: type, category: record.category.isEmpty ? nil : record.category,
                  message: record.body.isEmpty ? nil : record.text, level: Breadcrumb.levelName(record.level),
                  data: data.isEmpty ? nil : data)
    }

    /// The last `limit` (default ``EventBudget/maxBreadcrumbs``, 100) breadcrumb records of `records` (in seq
    /// order; records of other kinds are skipped) whose seq is below `seq` (`nil`: all), as breadcrumbs, oldest
    /// first.
    static func last(_ records: [Journal.Record], before seq: UInt64?, limit: Int = EventBudget.maxBreadcrumbs) -> [Breadcrumb] {
        var end = records.endIndex
        if let seq {
            // Records are in seq order: the first at or after `seq` ends the range (binary search).
            var lo = records.startIndex, hi = records.endIndex
            while lo < hi {
                let mid = (lo + hi) / 2
                if records[mid].seq < seq { lo = mid + 1 } else { hi = mid }
            }
            end = lo
        }
        var out: [Breadcrumb] = []
        var i = end
        while i > records.startIndex && out.count < limit {
            i -= 1
            if records[i].kind == .breadcrumb { out.append(Breadcrumb(record: records[i])) }
        }
        return out.reversed()
    }
}

extension Journal {
    /// Appends `crumb` as one breadcrumb record (mapping: ``Breadcrumb``'s journal extension), as it is (the
    /// client cuts it to the per-field limits first). Returns the record's seq, or `nil` when the append failed.
    @discardableResult
    func append(_ crumb: Breadcrumb) -> UInt64? {
        append(.breadcrumb, level: Breadcrumb.journalLevel(crumb.level), timeNs: Journal.nanoseconds(crumb.timestamp),
               category: crumb.category ?? "", body: crumb.message ?? "", attributes: crumb.journalAttributes)
    }
}

/// The breadcrumbs of a run without a journal (its run directory or journal file could not be created): the
/// last ``capacity`` (100) in memory only, as before the journal existed. Not thread-safe: the client calls it
/// under its lock.
struct MemoryBreadcrumbs {
    /// Most breadcrumbs kept: ``EventBudget/maxBreadcrumbs`` (100).
    let capacity = EventBudget.maxBreadcrumbs
    private var ring: [Breadcrumb] = []

    /// Adds one, dropping the oldest beyond ``capacity``.
    mutating func add(_ crumb: Breadcrumb) {
        ring.append(crumb)
        if ring.count > capacity { ring.removeFirst(ring.count - capacity) }
    }

    /// The breadcrumbs held, oldest first.
    var snapshot: [Breadcrumb] { ring }
}
