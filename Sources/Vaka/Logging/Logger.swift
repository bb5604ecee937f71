import Foundation

extension Vaka {
    /// The logger: ``Vaka/logger``. Each call records one log at its level when that level is at or above
    /// ``Options/logLevel`` (default `info`) and Vaka is started; otherwise it does nothing and evaluates
    /// neither the body nor the attributes (one relaxed atomic load and a compare).
    ///
    /// A recorded log is appended to the run's journal (so it survives the process dying right after the
    /// call) and sent to Sentry as a log (`log` envelope items, batched, through the persistent queue; see
    /// docs/ingest.md); at or above ``Options/logBreadcrumbLevel`` (default `info`) it also becomes a
    /// breadcrumb (category `log`, `message` the body, `data` the attributes as strings); then each of
    /// ``Options/logSinks`` gets it. `fatal` is only a level: it does not end the process.
    ///
    /// ```swift
    /// Vaka.logger.info("checkout done", attributes: ["user": "ana", "items": 3, "ratio": 0.5, "retry": true])
    /// ```
    /// Thread-safe. A ``LogSink`` must not log itself (that would recurse).
    public struct Logger: Sendable {
        /// The logger (``Vaka/logger``).
        init() {}

        /// Records `body` at level `trace` (see the type's documentation).
        public func trace(_ body: @autoclosure () -> String,
                          attributes: @autoclosure () -> [String: LogAttribute] = [:]) {
            if LogRouter.isRecorded(.trace) { LogRouter.record(.trace, body(), attributes()) }
        }

        /// Records `body` at level `debug` (see the type's documentation).
        public func debug(_ body: @autoclosure () -> String,
                          attributes: @autoclosure () -> [String: LogAttribute] = [:]) {
            if LogRouter.isRecorded(.debug) { LogRouter.record(.debug, body(), attributes()) }
        }

        /// Records `body` at level `info` (see the type's documentation).
        public func info(_ body: @autoclosure () -> String,
                         attributes: @autoclosure () -> [String: LogAttribute] = [:]) {
            if LogRouter.isRecorded(.info) { LogRouter.record(.info, body(), attributes()) }
        }

        /// Records `body` at level `warn` (see the type's documentation).
        public func warn(_ body: @autoclosure () -> String,
                         attributes: @autoclosure () -> [String: LogAttribute] = [:]) {
            if LogRouter.isRecorded(.warn) { LogRouter.record(.warn, body(), attributes()) }
        }

        /// Records `body` at level `error` (see the type's documentation).
        public func error(_ body: @autoclosure () -> String,
                          attributes: @autoclosure () -> [String: LogAttribute] = [:]) {
            if LogRouter.isRecorded(.error) { LogRouter.record(.error, body(), attributes()) }
        }

        /// Records `body` at level `fatal` (see the type's documentation); the process goes on.
        public func fatal(_ body: @autoclosure () -> String,
                          attributes: @autoclosure () -> [String: LogAttribute] = [:]) {
            if LogRouter.isRecorded(.fatal) { LogRouter.record(.fatal, body(), attributes()) }
        }

        /// Records `body` at `level` (see the type's documentation).
        public func log(_ level: LogLevel, _ body: @autoclosure () -> String,
                        attributes: @autoclosure () -> [String: LogAttribute] = [:]) {
            if LogRouter.isRecorded(level) { LogRouter.record(level, body(), attributes()) }
        }
    }

    /// The logger: `Vaka.logger.info("...", attributes: [...])` (see ``Logger``).
    public static var logger: Logger { Logger() }
}
