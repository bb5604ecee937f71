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

extension KeyedDecodingContainer {
    /// The value at `key` as `T`; `nil` when the key is absent or `null`. A value of another shape (a string
    /// `lineno`, a string thread `id`, as other SDKs write them) is not an error: it is put verbatim in
    /// `odd[key]`, to be written back as it was by
    /// ``KeyedEncodingContainer/encode(_:forKey:orVerbatimFrom:)``, and `nil` is returned. So one odd field
    /// does not make the value around it unreadable (and, for an event from elsewhere, unsymbolicated).
    func decodeLeniently<T: Decodable>(_: T.Type, forKey key: Key, odd: inout [String: JSONValue]) -> T? {
        guard contains(key) else { return nil }
        if let value = try? decodeIfPresent(T.self, forKey: key) { return value }
        odd[key.stringValue] = (try? decode(JSONValue.self, forKey: key)) ?? .null
        return nil
    }
}

extension KeyedEncodingContainer {
    /// Writes `value` at `key`; when `value` is `nil`, the value `other` holds under the key's name (an odd
    /// value ``KeyedDecodingContainer/decodeLeniently(_:forKey:odd:)`` kept), if any.
    mutating func encode<T: Encodable>(_ value: T?, forKey key: Key, orVerbatimFrom other: [String: JSONValue]?) throws {
        if let value {
            try encode(value, forKey: key)
        } else if let raw = other?[key.stringValue] {
            try encode(raw, forKey: key)
        }
    }
}
