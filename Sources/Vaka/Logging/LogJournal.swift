import Foundation

extension LogBatcher {
    /// Adds the log record `record` read from a journal (kind `log`): its time, level, body (UTF-8, repaired
    /// when damaged) and its attributes except the SDK's meta attributes.
    /// - Returns: `true` when a batch is due now (``maxCount`` logs or ``maxBytes`` bytes held).
    mutating func add(_ record: Journal.Record, scope: LogScope) -> Bool {
        add(timeNs: record.timeNs, level: record.level, body: record.text,
            attributes: record.attributes.filter { !$0.meta }.map { (key: $0.key, value: $0.value) }, scope: scope)
    }
}

extension LogRouter {
    /// The journal route: appends each log as a journal record of kind `log` (level the severity number,
    /// no category, the attributes as they are), then tells `mover` (``JournalMover/logAppended()``: it wakes
    /// when the log ring fills up). A failed append (the spill refused) loses the record for Sentry; the
    /// breadcrumb and the sinks still get it.
    static func journalSink(_ journal: Journal, mover: JournalMover? = nil) -> JournalAppend {
        { timeNs, level, body, attributes in
            appendLog(to: journal, mover: mover, timeNs: timeNs, level: level, body: body, attributes: attributes)
        }
    }

    /// One call of ``journalSink(_:mover:)``'s route.
    static func appendLog(to journal: Journal, mover: JournalMover?, timeNs: UInt64, level: LogLevel, body: String,
                          attributes: [(key: String, value: LogAttribute)]) {
        if journal.append(.log, level: level.rawValue, timeNs: timeNs, body: body,
                          attributes: attributes.map { Journal.Attribute(key: $0.key, value: $0.value) }) != nil {
            mover?.logAppended()
        } else {
            mover?.logNotRecorded()
        }
    }
}
