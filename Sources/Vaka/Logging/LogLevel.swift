/// The severity of a log record (`level` of a Sentry log), lowest first. The raw value is the OpenTelemetry
/// severity number Sentry logs carry as `sentry.severity_number` (trace 1, debug 5, info 9, warn 13, error 17,
/// fatal 21); it is also the level stored in the journal.
public enum LogLevel: UInt8, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// `trace`: the finest detail.
    case trace = 1
    /// `debug`.
    case debug = 5
    /// `info`: the default minimum level (``Vaka/Options/logLevel``).
    case info = 9
    /// `warn`.
    case warn = 13
    /// `error`.
    case error = 17
    /// `fatal`.
    case fatal = 21

    /// The Sentry name: `trace`, `debug`, `info`, `warn`, `error` or `fatal`.
    public var description: String {
        switch self {
        case .trace: return "trace"
        case .debug: return "debug"
        case .info: return "info"
        case .warn: return "warn"
        case .error: return "error"
        case .fatal: return "fatal"
        }
    }

    /// Orders by severity (`trace` < ... < `fatal`).
    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}
