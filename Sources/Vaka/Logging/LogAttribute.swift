/// A typed attribute value of a log record or breadcrumb: one of the four types of Sentry log attributes
/// (`{"value": ..., "type": "string|integer|double|boolean"}`). Literals work:
/// `["user": "ana", "items": 3, "ratio": 0.5, "retry": true]`.
public enum LogAttribute: Sendable, Equatable, Hashable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral {
    /// `type: "string"`: UTF-8 text.
    case string(String)
    /// `type: "integer"`: a signed 64-bit integer.
    case integer(Int64)
    /// `type: "double"`: a 64-bit floating-point number.
    case double(Double)
    /// `type: "boolean"`.
    case boolean(Bool)

    /// A `.string` from a string literal.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An `.integer` from an integer literal.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// A `.double` from a floating-point literal.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A `.boolean` from `true` or `false`.
    public init(booleanLiteral value: Bool) { self = .boolean(value) }

    /// The Sentry type name: `string`, `integer`, `double` or `boolean`.
    public var typeName: String {
        switch self {
        case .string: return "string"
        case .integer: return "integer"
        case .double: return "double"
        case .boolean: return "boolean"
        }
    }
}
