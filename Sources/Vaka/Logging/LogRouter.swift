import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where ``Vaka/Logger`` calls go: the started client's journal (the Sentry sink, always first), its
/// breadcrumbs and the extra sinks of the options. Off (every level below the threshold) until
/// ``activate(options:journal:addBreadcrumb:)`` and after ``deactivate()``.
enum LogRouter {
    /// Appends one log record to the run's journal: time (ns since the epoch), level, body, attributes
    /// (sorted by key).
    typealias JournalAppend = @Sendable (_ timeNs: UInt64, _ level: LogLevel, _ body: String,
                                         _ attributes: [(key: String, value: LogAttribute)]) -> Void

    /// What an active router sends to; immutable, replaced whole by activate/deactivate.
    final class Active: Sendable {
        let journal: JournalAppend?
        let breadcrumbLevel: LogLevel?
        let addBreadcrumb: @Sendable (Breadcrumb) -> Void
        let sinks: [any LogSink]
        init(journal: JournalAppend?, breadcrumbLevel: LogLevel?, addBreadcrumb: @escaping @Sendable (Breadcrumb) -> Void,
             sinks: [any LogSink]) {
            self.journal = journal
            self.breadcrumbLevel = breadcrumbLevel
            self.addBreadcrumb = addBreadcrumb
            self.sinks = sinks
        }
    }

    /// The lowest recorded level's raw value; `UInt8.max` (above every level) while off. Read with one
    /// relaxed load on every log call.
    private static let threshold = Atomic<UInt8>(UInt8.max)
    private static let active = Mutex<Active?>(nil)

    /// `true` when a log at `level` is recorded now (one relaxed atomic load and a compare).
    @inline(__always)
    static func isRecorded(_ level: LogLevel) -> Bool {
        level.rawValue >= threshold.load(ordering: .relaxed)
    }

    /// Routes logs at or above `options.logLevel` to `journal` (nil: none, e.g. no run directory), to
    /// `addBreadcrumb` from `options.logBreadcrumbLevel` on, and to `options.logSinks`. The client calls it
    /// once started; a second call replaces the first.
    static func activate(options: Vaka.Options, journal: JournalAppend?,
                         addBreadcrumb: @escaping @Sendable (Breadcrumb) -> Void) {
        let routes = Active(journal: journal, breadcrumbLevel: options.logBreadcrumbLevel,
                            addBreadcrumb: addBreadcrumb, sinks: options.logSinks)
        active.withLock { $0 = routes }
        threshold.store(options.logLevel.rawValue, ordering: .relaxed)
    }

    /// Turns logging off (the client calls it before it closes its journal). A log call racing with it may
    /// still be delivered to the routes it had loaded.
    static func deactivate() {
        threshold.store(UInt8.max, ordering: .relaxed)
        active.withLock { $0 = nil }
    }

    /// Records one log (the level was checked by the caller): journal, breadcrumb, sinks, in that order.
    @inline(never)
    static func record(_ level: LogLevel, _ body: String, _ attributes: [String: LogAttribute]) {
        guard let routes = active.withLock({ $0 }) else { return }
        let timeNs = realtimeNs()
        let sorted: [(key: String, value: LogAttribute)] = attributes.isEmpty ? [] : attributes.sorted { $0.key < $1.key }
        routes.journal?(timeNs, level, body, sorted)
        let timestamp = Journal.seconds(timeNs)
        if let min = routes.breadcrumbLevel, level >= min {
            var data: [String: JSONValue]? = nil
            if !sorted.isEmpty {
                data = [:]
                for (key, value) in sorted { data![key] = JSONValue(value) }
            }
            routes.addBreadcrumb(Breadcrumb(timestamp: timestamp, category: "log", message: body,
                                            level: level.breadcrumbLevel, data: data))
        }
        if !routes.sinks.isEmpty {
            let record = LogRecord(timestamp: timestamp, level: level, body: body, attributes: attributes)
            for sink in routes.sinks { sink.write(record) }
        }
    }

    /// Now, nanoseconds since the epoch (CLOCK_REALTIME).
    static func realtimeNs() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(max(0, ts.tv_sec)) &* 1_000_000_000 &+ UInt64(max(0, ts.tv_nsec))
    }
}

extension LogLevel {
    /// The Sentry breadcrumb level of a log at this level: `trace` and `debug` → `debug`, `info` → `info`,
    /// `warn` → `warning`, `error` → `error`, `fatal` → `fatal`.
    var breadcrumbLevel: String {
        switch self {
        case .trace, .debug: return "debug"
        case .info: return "info"
        case .warn: return "warning"
        case .error: return "error"
        case .fatal: return "fatal"
        }
    }
}

extension LogAttribute {
    /// The value as a breadcrumb `data` string: the text, the decimal integer, the shortest round-trip double
    /// (`0.5`, `nan`), `true`/`false`.
    var breadcrumbString: String {
        switch self {
        case .string(let s): return s
        case .integer(let i): return String(i)
        case .double(let d): return d.description
        case .boolean(let b): return b ? "true" : "false"
        }
    }
}
