/// One entry of `threads.values`: a thread of the process. (Named `SentryThread` so that it does not
/// shadow Foundation's `Thread`.)
public struct SentryThread: Codable, Equatable, Sendable, FieldCoded {
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
    /// What state the thread was in, in words, when it could not be unwound from its own registers (Sentry's
    /// thread `state`), e.g. `sleeping in system call 0; blocks the thread signal: PC from /proc, frames from a
    /// stack scan`; `nil` for a thread unwound normally.
    public var state: String?
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a thread; every field is described on its property.
    public init(id: Int64? = nil, name: String? = nil, crashed: Bool? = nil, current: Bool? = nil,
                stacktrace: Stacktrace? = nil, state: String? = nil) {
        self.id = id
        self.name = name
        self.crashed = crashed
        self.current = current
        self.stacktrace = stacktrace
        self.state = state
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<SentryThread>] = [
        .lenient("id", { $0.id }, { $0.id = $1 }),
        .lenient("name", { $0.name }, { $0.name = $1 }),
        .lenient("crashed", { $0.crashed }, { $0.crashed = $1 }),
        .lenient("current", { $0.current }, { $0.current = $1 }),
        .lenient("stacktrace", { $0.stacktrace }, { $0.stacktrace = $1 }),
        .lenient("state", { $0.state }, { $0.state = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: SentryThread { SentryThread() }

    /// Decodes a thread leniently: members no property models go to ``other``, and so does a field whose value
    /// does not have its type (a string `id`, which the protocol allows), kept verbatim and written back as it
    /// was. Throws `DecodingError` only when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other`` (a field read with an odd value and not set since as it was).
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}
