/// One entry of `threads.values`: a thread of the process. (Named `SentryThread` so that it does not
/// shadow Foundation's `Thread`.)
public struct SentryThread: Codable, Equatable, Sendable {
    /// Kernel thread id (`gettid()`).
    public var id: Int64?
    /// Thread name (`prctl(PR_GET_NAME)`, at most 15 bytes on Linux).
    public var name: String?
    /// `true` for the thread that crashed.
    public var crashed: Bool?
    /// `true` for the thread that was running when the event was captured.
    public var current: Bool?
    /// The thread's stack, oldest frame first.
    public var stacktrace: Stacktrace?
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a thread; every field is described on its property.
    public init(id: Int64? = nil, name: String? = nil, crashed: Bool? = nil, current: Bool? = nil,
                stacktrace: Stacktrace? = nil) {
        self.id = id
        self.name = name
        self.crashed = crashed
        self.current = current
        self.stacktrace = stacktrace
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case id, name, crashed, current, stacktrace
    }

    /// Decodes a thread; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decodeIfPresent(Int64.self, forKey: .id)
        name = try c.decodeIfPresent(String.self, forKey: .name)
        crashed = try c.decodeIfPresent(Bool.self, forKey: .crashed)
        current = try c.decodeIfPresent(Bool.self, forKey: .current)
        stacktrace = try c.decodeIfPresent(Stacktrace.self, forKey: .stacktrace)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(id, forKey: .id)
        try c.encodeIfPresent(name, forKey: .name)
        try c.encodeIfPresent(crashed, forKey: .crashed)
        try c.encodeIfPresent(current, forKey: .current)
        try c.encodeIfPresent(stacktrace, forKey: .stacktrace)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}
