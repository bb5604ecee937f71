import Foundation

/// One breadcrumb (`breadcrumbs.values[]` of a Sentry event): something that happened before an event.
public struct Breadcrumb: Codable, Equatable, Sendable {
    /// When it happened, seconds since the Unix epoch with a fraction (`timestamp`).
    public var timestamp: Double
    /// Sentry breadcrumb type: `"default"`, or `"navigation"` for ``Vaka/screen(_:)`` (`type`).
    public var type: String
    /// Dotted category, e.g. `"cart"`, `"navigation"` (`category`).
    public var category: String?
    /// Human-readable text (`message`).
    public var message: String?
    /// Severity, `"info"` by default (`level`).
    public var level: String?
    /// Key/value data of any JSON shape, e.g. `{"from": "Cart", "to": "Checkout"}` for navigation, `{"rows": 3,
    /// "cached": false}` (`data`). Literals work: `data: ["rows": 3, "table": "orders"]`.
    public var data: [String: JSONValue]?

    /// Creates a breadcrumb; every field is described on its property. `timestamp` defaults to now; `level`
    /// is one of Sentry's breadcrumb levels `debug`, `info`, `warning`, `error`, `fatal` (in any case; `trace`,
    /// `warn`, `critical` are taken as `debug`, `warning`, `fatal`; any other name is recorded as `info` in the
    /// journal); `type` one of Sentry's breadcrumb types (`default`, `navigation`,
    /// `http`, `query`, `user`, `debug`, `error`, ...).
    public init(timestamp: Double = Date().timeIntervalSince1970, type: String = "default", category: String? = nil,
                message: String? = nil, level: String? = "info", data: [String: JSONValue]? = nil) {
        self.timestamp = timestamp
        self.type = type
        self.category = category
        self.message = message
        self.level = level
        self.data = data
    }
}
