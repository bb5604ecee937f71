import Foundation

/// A coding key of any name: the members of a JSON object that a protocol type does not model.
struct OtherFieldKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }

    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension Decoder {
    /// The members of the JSON object being decoded whose names are not among `Known`'s keys (the fields
    /// the type models), each as a ``JSONValue``; `nil` when there are none. Throws `DecodingError` when the
    /// value is not a JSON object.
    func otherFields<Known: CodingKey & CaseIterable>(besides _: Known.Type) throws -> [String: JSONValue]? {
        let container = try container(keyedBy: OtherFieldKey.self)
        let known = Set(Known.allCases.map(\.stringValue))
        var other: [String: JSONValue] = [:]
        for key in container.allKeys where !known.contains(key.stringValue) {
            other[key.stringValue] = try container.decode(JSONValue.self, forKey: key)
        }
        return other.isEmpty ? nil : other
    }
}

extension Encoder {
    /// Writes the members of `other` into the JSON object being encoded, except those named like one of
    /// `Known`'s keys (a field the type models is written from its property, never from `other`).
    func encodeOtherFields<Known: CodingKey & CaseIterable>(_ other: [String: JSONValue]?, besides _: Known.Type) throws {
        guard let other, !other.isEmpty else { return }
        let known = Set(Known.allCases.map(\.stringValue))
        var container = container(keyedBy: OtherFieldKey.self)
        for (name, value) in other where !known.contains(name) {
            try container.encode(value, forKey: OtherFieldKey(name))
        }
    }
}
