import Foundation

/// A Sentry envelope: the unit Vaka stores, POSTs and writes to the outbox.
///
/// Wire format (Sentry "Envelopes"), byte for byte as ``serialized()`` writes it:
/// ```
/// {"event_id":"<32 hex>","sdk":{"name":"vaka.swift","version":"0.1.0"},"sent_at":"<RFC 3339>"}\n
/// {"content_type":"application/json","length":<payload bytes>,"type":"event"}\n
/// <payload bytes>\n
/// ...one header line + payload + \n per item
/// ```
/// Header keys are written sorted, without spaces and without escaping `/`; absent optional fields are
/// omitted. Every item header carries `length`, the payload size in bytes, so payloads may contain newlines.
public struct Envelope: Equatable, Sendable {
    /// The envelope header (first line).
    public struct Header: Equatable, Sendable {
        /// `event_id`: the id (32 lower-case hex digits, a UUID without dashes) of the event item, when the
        /// envelope carries one; Sentry uses it for deduplication.
        public var eventID: String?
        /// `sent_at`: when the envelope was sent, RFC 3339 with milliseconds (set by the uploader just before
        /// each POST; stored envelopes may carry the time they were queued).
        public var sentAt: Date?
        /// `dsn`: optional; Vaka leaves it out (the key is in the `X-Sentry-Auth` header instead).
        public var dsn: String?
        /// `sdk`: name and version of the SDK that made the envelope (only those two members are written and
        /// read: an SDK's packages and integrations belong to its events).
        public var sdk: SDKInfo?

        /// Creates a header; all fields optional.
        public init(eventID: String? = nil, sentAt: Date? = nil, dsn: String? = nil, sdk: SDKInfo? = .vaka) {
            self.eventID = eventID
            self.sentAt = sentAt
            self.dsn = dsn
            self.sdk = sdk
        }
    }

    /// The header line.
    public var header: Header
    /// The items, in wire order.
    public var items: [EnvelopeItem]

    /// Creates an envelope from a header and items.
    public init(header: Header = Header(), items: [EnvelopeItem]) {
        self.header = header
        self.items = items
    }

    /// An envelope holding one event (JSON object bytes) under `eventID` (32 hex), plus optional further
    /// items (e.g. the session update that belongs with a crash event).
    public static func event(id eventID: String, payload: Data, sentAt: Date? = nil,
                             extraItems: [EnvelopeItem] = []) -> Envelope {
        Envelope(header: Header(eventID: eventID, sentAt: sentAt), items: [.event(payload)] + extraItems)
    }

    /// The envelope's bytes in Sentry's wire format (see the type's documentation).
    public func serialized() -> Data {
        var out = Data()
        out.append(Envelope.encodeJSON(HeaderJSON(header)))
        out.append(0x0A)
        for item in items {
            out.append(Envelope.encodeJSON(ItemHeaderJSON(item)))
            out.append(0x0A)
            out.append(item.payload)
            out.append(0x0A)
        }
        return out
    }

    /// Parses an envelope in Sentry's wire format. Item headers with `length` are read by length; items
    /// without it extend to the next newline. Unknown header keys are ignored.
    /// - Throws: ``EnvelopeError`` when the header or an item header is not a JSON object of the expected
    ///   shape, or a payload is shorter than its `length`.
    public init(data: Data) throws {
        let bytes = [UInt8](data)
        guard !bytes.isEmpty else { throw EnvelopeError.empty }
        var pos = 0
        func line() -> ArraySlice<UInt8> {
            let start = pos
            while pos < bytes.count, bytes[pos] != 0x0A { pos += 1 }
            let l = bytes[start..<pos]
            if pos < bytes.count { pos += 1 }
            return l
        }
        let headerLine = line()
        let header: HeaderJSON
        do {
            header = try JSONDecoder().decode(HeaderJSON.self, from: Data(headerLine))
        } catch {
            throw EnvelopeError.invalidHeader(String(describing: error))
        }
        var sentAt: Date? = nil
        if let s = header.sent_at {
            guard let d = Timestamps.parseRFC3339(s) else { throw EnvelopeError.invalidHeader("sent_at '\(s)' is not RFC 3339") }
            sentAt = d
        }
        self.header = Header(eventID: header.event_id, sentAt: sentAt, dsn: header.dsn, sdk: header.sdk.map { SDKInfo(name: $0.name, version: $0.version) })
        self.items = []
        while pos < bytes.count {
            let itemLine = line()
            if itemLine.isEmpty { continue }  // tolerate blank lines between/after items
            let ih: ItemHeaderJSON
            do {
                ih = try JSONDecoder().decode(ItemHeaderJSON.self, from: Data(itemLine))
            } catch {
                throw EnvelopeError.invalidItemHeader(index: items.count, String(describing: error))
            }
            let payload: Data
            if let length = ih.length {
                guard length >= 0, bytes.count - pos >= length else {
                    throw EnvelopeError.truncatedPayload(index: items.count, expected: max(length, 0),
                                                         available: bytes.count - pos)
                }
                payload = Data(bytes[pos..<(pos + length)])
                pos += length
                if pos < bytes.count, bytes[pos] == 0x0A { pos += 1 }
            } else {
                payload = Data(line())
            }
            var item = EnvelopeItem(type: EnvelopeItem.ItemType(rawValue: ih.type), payload: payload,
                                    contentType: ih.content_type, itemCount: ih.item_count)
            item.filename = ih.filename
            item.attachmentType = ih.attachment_type
            items.append(item)
        }
    }

    /// This envelope with `items` replaced, keeping the header; `event_id` is kept only when an event item
    /// remains (used to split envelopes for 413 and per-category rate limits).
    func with(items newItems: [EnvelopeItem]) -> Envelope {
        var h = header
        if !newItems.contains(where: { $0.type == .event }) { h.eventID = nil }
        return Envelope(header: h, items: newItems)
    }

    // MARK: - JSON shapes

    // The header lines' JSON shapes code their members by name through ``OtherFieldKey`` instead of a
    // synthesized `CodingKeys` enum each: the Swift runtime looks up the conformance of every coding-key type the
    // first time a process encodes with it (a scan of every loaded library's conformance records, about a
    // tenth of a millisecond each), and every run's exit path writes an envelope. `EnvelopeTests` checks that
    // each member is written and read back.

    private struct HeaderJSON: Codable {
        var event_id: String?
        var sent_at: String?
        var dsn: String?
        var sdk: NameAndVersion?
        init(_ h: Header) {
            event_id = h.eventID
            sent_at = h.sentAt.map(Timestamps.rfc3339)
            dsn = h.dsn
            sdk = h.sdk.map { NameAndVersion(name: $0.name, version: $0.version) }
        }
        init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: OtherFieldKey.self)
            event_id = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("event_id"))
            sent_at = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("sent_at"))
            dsn = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("dsn"))
            sdk = try c.decodeIfPresent(NameAndVersion.self, forKey: OtherFieldKey("sdk"))
        }
        func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: OtherFieldKey.self)
            try c.encodeIfPresent(event_id, forKey: OtherFieldKey("event_id"))
            try c.encodeIfPresent(sent_at, forKey: OtherFieldKey("sent_at"))
            try c.encodeIfPresent(dsn, forKey: OtherFieldKey("dsn"))
            try c.encodeIfPresent(sdk, forKey: OtherFieldKey("sdk"))
        }
    }

    /// The header's `sdk`: name and version only (``SDKInfo``'s own coding keeps every member of an event's
    /// `sdk`, through key paths whose first use costs every run's exit path more than the whole envelope).
    private struct NameAndVersion: Codable {
        var name: String
        var version: String
        init(name: String, version: String) {
            self.name = name
            self.version = version
        }
        init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: OtherFieldKey.self)
            name = try c.decode(String.self, forKey: OtherFieldKey("name"))
            version = try c.decode(String.self, forKey: OtherFieldKey("version"))
        }
        func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: OtherFieldKey.self)
            try c.encode(name, forKey: OtherFieldKey("name"))
            try c.encode(version, forKey: OtherFieldKey("version"))
        }
    }

    private struct ItemHeaderJSON: Codable {
        var type: String
        var length: Int?
        var content_type: String?
        var item_count: Int?
        var filename: String?
        var attachment_type: String?
        init(_ i: EnvelopeItem) {
            type = i.type.rawValue
            length = i.payload.count
            content_type = i.contentType
            item_count = i.itemCount
            filename = i.filename
            attachment_type = i.attachmentType
        }
        init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: OtherFieldKey.self)
            type = try c.decode(String.self, forKey: OtherFieldKey("type"))
            length = try c.decodeIfPresent(Int.self, forKey: OtherFieldKey("length"))
            content_type = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("content_type"))
            item_count = try c.decodeIfPresent(Int.self, forKey: OtherFieldKey("item_count"))
            filename = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("filename"))
            attachment_type = try c.decodeIfPresent(String.self, forKey: OtherFieldKey("attachment_type"))
        }
        func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: OtherFieldKey.self)
            try c.encode(type, forKey: OtherFieldKey("type"))
            try c.encodeIfPresent(length, forKey: OtherFieldKey("length"))
            try c.encodeIfPresent(content_type, forKey: OtherFieldKey("content_type"))
            try c.encodeIfPresent(item_count, forKey: OtherFieldKey("item_count"))
            try c.encodeIfPresent(filename, forKey: OtherFieldKey("filename"))
            try c.encodeIfPresent(attachment_type, forKey: OtherFieldKey("attachment_type"))
        }
    }

    private static func encodeJSON<T: Encodable>(_ value: T) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Only strings, integers and nested structs of them: encoding cannot fail.
        return (try? encoder.encode(value)) ?? Data("{}".utf8)
    }
}

/// One envelope item: a header (`type`, `length`, `content_type`, `item_count`, and for an attachment
/// `filename` and `attachment_type`) and a payload.
public struct EnvelopeItem: Equatable, Sendable {
    /// An item type (`type` header). Open set: unknown types read from disk or the wire are kept as-is.
    public struct ItemType: RawRepresentable, Hashable, Sendable {
        /// The `type` header string.
        public var rawValue: String
        /// Creates an item type from its header string.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// `event`: a Sentry event (JSON object). Rate-limit category `error`.
        public static let event = ItemType(rawValue: "event")
        /// `session`: a session update (JSON object). Rate-limit category `session`.
        public static let session = ItemType(rawValue: "session")
        /// `log`: a batch of Sentry logs (`{"version":2,"items":[...]}`), with `item_count`. Rate-limit category `log_item`.
        public static let log = ItemType(rawValue: "log")
        /// `attachment`: a file sent with the event of its envelope, with `filename` and `attachment_type`.
        /// Rate-limit category `attachment`.
        public static let attachment = ItemType(rawValue: "attachment")
    }

    /// `type` header.
    public var type: ItemType
    /// The payload bytes; its size is written as the `length` header (bytes).
    public var payload: Data
    /// `content_type` header, e.g. `application/json`; `nil` omits it.
    public var contentType: String?
    /// `item_count` header: number of records in a `log` item; `nil` omits it.
    public var itemCount: Int?
    /// `filename` header of an `attachment` item; `nil` omits it.
    public var filename: String?
    /// `attachment_type` header of an `attachment` item (`event.attachment`); `nil` omits it.
    public var attachmentType: String?

    /// Creates an item.
    public init(type: ItemType, payload: Data, contentType: String? = "application/json", itemCount: Int? = nil) {
        self.type = type
        self.payload = payload
        self.contentType = contentType
        self.itemCount = itemCount
    }

    /// An `event` item with a JSON event payload.
    public static func event(_ json: Data) -> EnvelopeItem {
        EnvelopeItem(type: .event, payload: json, contentType: "application/json")
    }

    /// A `session` item with a JSON session-update payload.
    public static func session(_ json: Data) -> EnvelopeItem {
        EnvelopeItem(type: .session, payload: json, contentType: "application/json")
    }

    /// An `attachment` item: `data` as the payload, `filename`, `content_type` `contentType`, `attachment_type`
    /// `event.attachment` (a plain file sent with the event; what Sentry assumes when the header is absent).
    public static func attachment(_ data: Data, filename: String, contentType: String) -> EnvelopeItem {
        var item = EnvelopeItem(type: .attachment, payload: data, contentType: contentType)
        item.filename = filename
        item.attachmentType = "event.attachment"
        return item
    }

    /// A `log` item: `json` is `{"version":2,"items":[...]}` holding `count` Sentry logs (``LogBatcher``
    /// writes it); content type `application/vnd.sentry.items.log+json`.
    public static func logs(_ json: Data, count: Int) -> EnvelopeItem {
        EnvelopeItem(type: .log, payload: json, contentType: "application/vnd.sentry.items.log+json", itemCount: count)
    }
}

/// Why bytes could not be parsed as an envelope.
public enum EnvelopeError: Error, Equatable, CustomStringConvertible {
    /// No bytes at all.
    case empty
    /// The first line is not a JSON object with the envelope header fields (the decoder's reason attached).
    case invalidHeader(String)
    /// Item number `index` (0-based) has a header line that is not a JSON object with a string `type`.
    case invalidItemHeader(index: Int, String)
    /// Item number `index` declares `expected` payload bytes but only `available` remain.
    case truncatedPayload(index: Int, expected: Int, available: Int)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .empty: return "envelope is empty"
        case .invalidHeader(let why): return "invalid envelope header: \(why)"
        case .invalidItemHeader(let i, let why): return "invalid header of item \(i): \(why)"
        case .truncatedPayload(let i, let e, let a): return "item \(i) declares \(e) bytes but only \(a) remain"
        }
    }
}
