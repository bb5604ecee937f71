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
    /// Extra key/value strings, e.g. `{"from": "Cart", "to": "Checkout"}` for navigation (`data`).
    public var data: [String: String]?

    /// Creates a breadcrumb; every field is described on its property.
    public init(timestamp: Double, type: String = "default", category: String? = nil, message: String? = nil,
                level: String? = "info", data: [String: String]? = nil) {
        self.timestamp = timestamp
        self.type = type
        self.category = category
        self.message = message
        self.level = level
        self.data = data
    }
}
