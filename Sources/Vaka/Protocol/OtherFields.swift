import Foundation

/// A coding key of any name: the members of a JSON object a protocol type reads and writes through its
/// ``Field`` list, and those it keeps in `other`.
struct OtherFieldKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }

    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
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

/// One field a protocol type models: its JSON name and how it is read into, and written from, a value of
/// `Root`. A type lists its fields once, in ``FieldCoded/fields``; one generic decoder and encoder go over the
/// list, so a field is named, read and written by one entry, and the members of the JSON object whose names
/// are not in the list are ``FieldCoded/other``.
struct Field<Root>: Sendable {
    /// The member name on the wire, e.g. `"debug_meta"`.
    let name: String
    /// Reads the field from the object's members into the value; a value kept verbatim (of another shape than
    /// the field's type) goes into the third argument, the members written back by name. Throws
    /// `DecodingError` where the field is strict (a required field missing, a value of the wrong type).
    let decode: @Sendable (inout Root, KeyedDecodingContainer<OtherFieldKey>, inout [String: JSONValue]) throws -> Void
    /// Writes the field from the value (or from the value's `other` where that keeps the field's odd value),
    /// in the given ``Event/Encoding``.
    let encode: @Sendable (Root, inout KeyedEncodingContainer<OtherFieldKey>, [String: JSONValue]?, Event.Encoding) throws -> Void
}

extension Field {
    /// An optional field read strictly: absent or `null` is `nil`, a value of another type throws; written when
    /// not `nil`.
    static func strict<T: Codable & Sendable>(_ name: String, _ get: @escaping @Sendable (Root) -> T?,
                                              _ set: @escaping @Sendable (inout Root, T?) -> Void) -> Field {
        let key = OtherFieldKey(name)
        return Field(name: name,
                     decode: { root, c, _ in try set(&root, c.decodeIfPresent(T.self, forKey: key)) },
                     encode: { root, c, _, _ in try c.encodeIfPresent(get(root), forKey: key) })
    }

    /// A required field: absent, `null` or of another type throws; always written.
    static func required<T: Codable & Sendable>(_ name: String, _ get: @escaping @Sendable (Root) -> T,
                                                _ set: @escaping @Sendable (inout Root, T) -> Void) -> Field {
        let key = OtherFieldKey(name)
        return Field(name: name,
                     decode: { root, c, _ in try set(&root, c.decode(T.self, forKey: key)) },
                     encode: { root, c, _, _ in try c.encode(get(root), forKey: key) })
    }

    /// A field that keeps the decoding base's value when absent or `null` (e.g. no `images` is none); of
    /// another type throws; always written.
    static func strictOrBase<T: Codable & Sendable>(_ name: String, _ get: @escaping @Sendable (Root) -> T,
                                                    _ set: @escaping @Sendable (inout Root, T) -> Void) -> Field {
        let key = OtherFieldKey(name)
        return Field(name: name,
                     decode: { root, c, _ in
                         if let value = try c.decodeIfPresent(T.self, forKey: key) { set(&root, value) }
                     },
                     encode: { root, c, _, _ in try c.encode(get(root), forKey: key) })
    }

    /// An optional field read leniently (see ``KeyedDecodingContainer/decodeLeniently(_:forKey:odd:)``): a value
    /// of another type is kept verbatim and written back in the field's place while the property is `nil`.
    /// `reportOnly` fields are written only in the ``Event/Encoding/report`` encoding.
    static func lenient<T: Codable & Sendable>(_ name: String, _ get: @escaping @Sendable (Root) -> T?,
                                               _ set: @escaping @Sendable (inout Root, T?) -> Void, reportOnly: Bool = false) -> Field {
        let key = OtherFieldKey(name)
        return Field(name: name,
                     decode: { root, c, odd in set(&root, c.decodeLeniently(T.self, forKey: key, odd: &odd)) },
                     encode: { root, c, other, encoding in
                         if reportOnly, encoding != .report { return }
                         try c.encode(get(root), forKey: key, orVerbatimFrom: other)
                     })
    }

    /// An optional field read leniently whose verbatim value, when `other` holds one, is written in preference
    /// to the property (the event's top-level fields).
    static func verbatimFirst<T: Codable & Sendable>(_ name: String, _ get: @escaping @Sendable (Root) -> T?,
                                                     _ set: @escaping @Sendable (inout Root, T?) -> Void) -> Field {
        let key = OtherFieldKey(name)
        return Field(name: name,
                     decode: { root, c, odd in set(&root, c.decodeLeniently(T.self, forKey: key, odd: &odd)) },
                     encode: { root, c, other, _ in
                         if let raw = other?[name] { try c.encode(raw, forKey: key) } else { try c.encodeIfPresent(get(root), forKey: key) }
                     })
    }

    /// A field with a default (the decoding base's value, kept when the member is absent or odd), read
    /// leniently and written as ``verbatimFirst(_:_:)``; a value `omit` holds for is left out.
    static func verbatimFirst<T: Codable & Sendable>(_ name: String, _ get: @escaping @Sendable (Root) -> T,
                                                     _ set: @escaping @Sendable (inout Root, T) -> Void,
                                                     omit: (@Sendable (T) -> Bool)? = nil) -> Field {
        let key = OtherFieldKey(name)
        return Field(name: name,
                     decode: { root, c, odd in
                         if let value = c.decodeLeniently(T.self, forKey: key, odd: &odd) { set(&root, value) }
                     },
                     encode: { root, c, other, _ in
                         let value = get(root)
                         if let raw = other?[name] {
                             try c.encode(raw, forKey: key)
                         } else if omit?(value) != true {
                             try c.encode(value, forKey: key)
                         }
                     })
    }
}

/// A protocol type coded from its table of ``Field``s, keeping the members it does not model in ``other``.
protocol FieldCoded {
    /// The modeled fields, in the order they are written.
    static var fields: [Field<Self>] { get }
    /// The value decoding starts from: the value of every field absent from the JSON (required fields hold a
    /// placeholder their decoding replaces or throws for).
    static var decodingBase: Self { get }
    /// The members of the JSON object no field models, and the odd values of fields read leniently.
    var other: [String: JSONValue]? { get set }
}

extension FieldCoded {
    /// Decodes the value from its fields; the members no field names go to ``other``. Throws `DecodingError`
    /// when the value is not a JSON object or a strict field does not decode.
    init(decodingFields decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: OtherFieldKey.self)
        let fields = Self.fields
        let known = Set(fields.map { $0.name })
        var other: [String: JSONValue] = [:]
        for key in c.allKeys where !known.contains(key.stringValue) {
            other[key.stringValue] = try c.decode(JSONValue.self, forKey: key)
        }
        var value = Self.decodingBase
        for field in fields { try field.decode(&value, c, &other) }
        value.other = other.isEmpty ? nil : other
        self = value
    }

    /// Encodes the fields, then the members of ``other`` no field names.
    func encodeFields(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: OtherFieldKey.self)
        let encoding = Event.Encoding.of(encoder.userInfo)
        let fields = Self.fields
        for field in fields { try field.encode(self, &c, other, encoding) }
        guard let other, !other.isEmpty else { return }
        let known = Set(fields.map { $0.name })
        for (name, value) in other where !known.contains(name) {
            try c.encode(value, forKey: OtherFieldKey(name))
        }
    }
}
