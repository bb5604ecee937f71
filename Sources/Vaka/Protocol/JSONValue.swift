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

    /// Encodes the plain JSON value; what JSON (or a JSON decoder) cannot take is written as text instead, so
    /// that a document holding the value always encodes and decodes: a NaN or infinity as `"nan"`, `"inf"`,
    /// `"-inf"`, and an array or object nested deeper than ``maxDepth`` levels in the document as `"..."`.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value) where !value.isFinite: try container.encode(value.description)
        case .double(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .null: try container.encodeNil()
        case .array where encoder.codingPath.count >= JSONValue.maxDepth, .object where encoder.codingPath.count >= JSONValue.maxDepth:
            try container.encode("...")
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Deepest array or object nesting written, counted from the root of the encoded document (an event's
    /// `extra` values start at level 2): 64. JSONEncoder and JSONDecoder refuse documents nested more than 512
    /// levels, Relay trims free-form data far earlier, and a refused event would lose every field.
    public static let maxDepth = 64

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

/// Literals work where a ``JSONValue`` is expected: `["plan": "pro", "items": 3, "ratio": 0.5, "retry": true,
/// "tags": ["a", "b"], "card": ["brand": "visa"]]` (a variable needs its case: `.string(s)`, `.int(Int64(n))`).
extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral {
    /// A ``string(_:)`` from a string literal.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An ``int(_:)`` from an integer literal.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// A ``double(_:)`` from a floating-point literal.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A ``bool(_:)`` from `true` or `false`.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// An ``array(_:)`` from an array literal.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// An ``object(_:)`` from a dictionary literal (a repeated key: the last value wins).
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var object: [String: JSONValue] = [:]
        for (key, value) in elements { object[key] = value }
        self = .object(object)
    }
}

extension JSONValue {
    /// The value of a typed log attribute: `string` → ``string(_:)``, `integer` → ``int(_:)``, `double` →
    /// ``double(_:)`` (a NaN or infinity, which JSON cannot hold, as its text: ``string(_:)`` `"nan"`, `"inf"`),
    /// `boolean` → ``bool(_:)``.
    public init(_ attribute: LogAttribute) {
        switch attribute {
        case .string(let v): self = .string(v)
        case .integer(let v): self = .int(v)
        case .double(let v): self = v.isFinite ? .double(v) : .string(v.description)
        case .boolean(let v): self = .bool(v)
        }
    }

    /// This value as a typed log attribute when it is a string, whole number, number or flag; `nil` for
    /// `null`, arrays and objects.
    var logAttribute: LogAttribute? {
        switch self {
        case .string(let v): return .string(v)
        case .int(let v): return .integer(v)
        case .double(let v): return .double(v)
        case .bool(let v): return .boolean(v)
        case .null, .array, .object: return nil
        }
    }

    /// The value's compact JSON text (sorted keys, slashes unescaped).
    var jsonText: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Never fails (``encode(to:)`` writes what JSON cannot hold as text); `null` only as a last resort.
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
    }
}

extension JSONValue {
    /// This value with every NaN or infinity (which JSON cannot hold) replaced by its text (`"nan"`, `"inf"`),
    /// so that an event carrying it always encodes.
    var finite: JSONValue {
        switch self {
        case .double(let v) where !v.isFinite: return .string(v.description)
        case .array(let items): return .array(items.map(\.finite))
        case .object(let object): return .object(object.mapValues(\.finite))
        default: return self
        }
    }
}
