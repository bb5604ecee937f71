import Foundation

/// Breadcrumbs as journal records (``Journal/Kind/breadcrumb``): one breadcrumb is one record, written by
/// ``Client/addBreadcrumb(_:)`` and read back by the mover (the breadcrumbs of a captured event) and the crash
/// join (the breadcrumbs of a crashed run's fatal event).
///
/// Mapping: `category` ↔ the record's category (`""` = none), `message` ↔ the body (empty = none), `level`
/// ↔ the record's level (Sentry's breadcrumb levels `debug`/`info`/`warning`/`error`/`fatal` ↔ the journal's
/// 5/9/13/17/21; 0 = none; any other name is stored as `info`), `type` ↔ the meta attribute `type` (absent =
/// `default`), `data` ↔ string attributes, `timestamp` ↔ the record's time (ns since the epoch: ``Journal/nanoseconds(_:)``).
extension Breadcrumb {
    /// The journal level of a Sentry breadcrumb level name (`nil`: 0, none).
    static func journalLevel(_ level: String?) -> UInt8 {
        switch level {
        case nil: return 0
        case "debug": return LogLevel.debug.rawValue
        case "warning": return LogLevel.warn.rawValue
        case "error": return LogLevel.error.rawValue
        case "fatal": return LogLevel.fatal.rawValue
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

    /// The journal attributes of this breadcrumb: `type` (meta) unless `default`, and `data` as strings.
    var journalAttributes: [Journal.Attribute] {
        var out: [Journal.Attribute] = []
        if type != "default" { out.append(Journal.Attribute(key: "type", value: .string(type), meta: true)) }
        for (key, value) in (data ?? [:]).sorted(by: { $0.key < $1.key }) {
            out.append(Journal.Attribute(key: key, value: .string(value)))
        }
        return out
    }

    /// The breadcrumb a journal record holds (see the extension's documentation for the mapping). A non-string
    /// `data` attribute (a log's typed attribute) is written as its text.
    init(record: Journal.Record) {
        var type = "default"
        var data: [String: String] = [:]
        for attribute in record.attributes {
            if attribute.meta {
                if attribute.key == "type", case .string(let t) = attribute.value { type = t }
                continue
            }
            switch attribute.value {
            case .string(let v): data[attribute.key] = v
            case .integer(let v): data[attribute.key] = String(v)
            case .double(let v): data[attribute.key] = String(v)
            case .boolean(let v): data[attribute.key] = String(v)
            }
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
