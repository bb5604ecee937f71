import Foundation

/// A JSON value of any shape, for the free-form maps of the Sentry protocol (`extra`, `mechanism.data`).
///
/// Encodes as the plain JSON value (`"text"`, `42`, `1.5`, `true`, `null`, `[...]`, `{...}`), and decodes
/// from any JSON value. Whole numbers decode as ``int(_:)`` when they fit in `Int64`, otherwise as ``double(_:)``.
public enum JSONValue: Codable, Equatable, Sendable {
    /// A JSON string.
    case string(String)
    /// A whole JSON number (counts, ids, nanoseconds).
    case int(Int64)
    /// A JSON number with a fraction or outside the `Int64` range.
    case double(Double)
    /// `true` or `false`.
    case bool(Bool)
    /// `null`.
    case null
    /// A JSON array.
    case array([JSONValue])
    /// A JSON object.
    case object([String: JSONValue])

    /// Decodes any JSON value. Throws `DecodingError.dataCorrupted` only if the decoder holds no JSON value.
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(value)
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    /// Encodes the plain JSON value.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .null: try container.encodeNil()
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The string, when this is ``string(_:)``; otherwise `nil`.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The number, when this is ``int(_:)``; otherwise `nil`.
    public var intValue: Int64? {
        if case .int(let value) = self { return value }
        return nil
    }

    /// The flag, when this is ``bool(_:)``; otherwise `nil`.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }
}
