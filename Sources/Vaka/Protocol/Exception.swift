/// One entry of `exception.values`: what went wrong, for a crash the fatal signal.
public struct Exception: Codable, Equatable, Sendable {
    /// The kind of error; for a crash the signal name, e.g. `"SIGSEGV"`.
    public var type: String?
    /// A human sentence describing the error, e.g. `"EXC_BAD_ACCESS / SIGSEGV (SEGV_MAPERR) at 0x0"`.
    public var value: String?
    /// The kernel thread id (`gettid()`) of the thread the error happened on (`thread_id`).
    public var threadID: Int64?
    /// How the error was caught.
    public var mechanism: Mechanism?
    /// The stack of the thread at the error, oldest frame first.
    public var stacktrace: Stacktrace?
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates an exception; every field is described on its property.
    public init(type: String? = nil, value: String? = nil, threadID: Int64? = nil,
                mechanism: Mechanism? = nil, stacktrace: Stacktrace? = nil) {
        self.type = type
        self.value = value
        self.threadID = threadID
        self.mechanism = mechanism
        self.stacktrace = stacktrace
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case type, value
        case threadID = "thread_id"
        case mechanism, stacktrace
    }

    /// Decodes an exception leniently: members no property models go to ``other``, and so does a field whose
    /// value does not have its type (a string `thread_id`, which the protocol allows), kept verbatim and
    /// written back as it was. Throws `DecodingError` only when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        var odd = try decoder.otherFields(besides: CodingKeys.self) ?? [:]
        type = c.decodeLeniently(String.self, forKey: .type, odd: &odd)
        value = c.decodeLeniently(String.self, forKey: .value, odd: &odd)
        threadID = c.decodeLeniently(Int64.self, forKey: .threadID, odd: &odd)
        mechanism = c.decodeLeniently(Mechanism.self, forKey: .mechanism, odd: &odd)
        stacktrace = c.decodeLeniently(Stacktrace.self, forKey: .stacktrace, odd: &odd)
        other = odd.isEmpty ? nil : odd
    }

    /// Encodes the fields and then ``other`` (a field read with an odd value and not set since as it was).
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(type, forKey: .type, orVerbatimFrom: other)
        try c.encode(value, forKey: .value, orVerbatimFrom: other)
        try c.encode(threadID, forKey: .threadID, orVerbatimFrom: other)
        try c.encode(mechanism, forKey: .mechanism, orVerbatimFrom: other)
        try c.encode(stacktrace, forKey: .stacktrace, orVerbatimFrom: other)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// `exception.values[].mechanism`: how an error was caught.
public struct Mechanism: Codable, Equatable, Sendable {
    /// The catching mechanism; `"signalhandler"` for crashes caught by Vaka's signal handlers.
    public var type: String
    /// `false` when the error ended the process.
    public var handled: Bool?
    /// Operating-system facts about the error (the signal).
    public var meta: MechanismMeta?
    /// Free-form data; for crashes `relevant_address` (the fault address as `"0x…"`).
    public var data: [String: JSONValue]?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a mechanism; every field is described on its property.
    public init(type: String, handled: Bool? = nil, meta: MechanismMeta? = nil, data: [String: JSONValue]? = nil) {
        self.type = type
        self.handled = handled
        self.meta = meta
        self.data = data
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case type
        case handled
        case meta
        case data
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type or a missing `type`.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        type = try c.decode(String.self, forKey: .type)
        handled = try c.decodeIfPresent(Bool.self, forKey: .handled)
        meta = try c.decodeIfPresent(MechanismMeta.self, forKey: .meta)
        data = try c.decodeIfPresent([String: JSONValue].self, forKey: .data)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(type, forKey: .type)
        try c.encodeIfPresent(handled, forKey: .handled)
        try c.encodeIfPresent(meta, forKey: .meta)
        try c.encodeIfPresent(data, forKey: .data)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// `mechanism.meta`: operating-system error details.
public struct MechanismMeta: Codable, Equatable, Sendable {
    /// The POSIX signal that was delivered.
    public var signal: SignalMeta?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates mechanism meta.
    public init(signal: SignalMeta? = nil) {
        self.signal = signal
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case signal
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        signal = try c.decodeIfPresent(SignalMeta.self, forKey: .signal)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(signal, forKey: .signal)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// `mechanism.meta.signal`: a POSIX signal as the handler saw it (from `siginfo_t`).
public struct SignalMeta: Codable, Equatable, Sendable {
    /// Signal number, e.g. `11`.
    public var number: Int32
    /// `si_code`, e.g. `1` (SEGV_MAPERR) or `-6` (SI_TKILL).
    public var code: Int32?
    /// Signal name, e.g. `"SIGSEGV"`.
    public var name: String?
    /// `si_code` name, e.g. `"SEGV_MAPERR"`; `"UNKNOWN"` when the handler did not know it.
    public var codeName: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates signal meta; every field is described on its property.
    public init(number: Int32, code: Int32? = nil, name: String? = nil, codeName: String? = nil) {
        self.number = number
        self.code = code
        self.name = name
        self.codeName = codeName
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case number
        case code
        case name
        case codeName = "code_name"
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type or a missing `number`.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        number = try c.decode(Int32.self, forKey: .number)
        code = try c.decodeIfPresent(Int32.self, forKey: .code)
        name = try c.decodeIfPresent(String.self, forKey: .name)
        codeName = try c.decodeIfPresent(String.self, forKey: .codeName)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(number, forKey: .number)
        try c.encodeIfPresent(code, forKey: .code)
        try c.encodeIfPresent(name, forKey: .name)
        try c.encodeIfPresent(codeName, forKey: .codeName)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}
