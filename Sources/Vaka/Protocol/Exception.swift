/// One entry of `exception.values`: what went wrong, for a crash the fatal signal.
public struct Exception: Codable, Equatable, Sendable, FieldCoded {
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

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<Exception>] = [
        .lenient("type", { $0.type }, { $0.type = $1 }),
        .lenient("value", { $0.value }, { $0.value = $1 }),
        .lenient("thread_id", { $0.threadID }, { $0.threadID = $1 }),
        .lenient("mechanism", { $0.mechanism }, { $0.mechanism = $1 }),
        .lenient("stacktrace", { $0.stacktrace }, { $0.stacktrace = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: Exception { Exception() }

    /// Decodes an exception leniently: members no property models go to ``other``, and so does a field whose
    /// value does not have its type (a string `thread_id`, which the protocol allows), kept verbatim and
    /// written back as it was. Throws `DecodingError` only when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other`` (a field read with an odd value and not set since as it was).
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// `exception.values[].mechanism`: how an error was caught.
public struct Mechanism: Codable, Equatable, Sendable, FieldCoded {
    /// The catching mechanism; `"signalhandler"` for crashes caught by Vaka's signal handlers.
    public var type: String
    /// `false` when the error ended the process.
    public var handled: Bool?
    /// Operating-system facts about the error (the signal).
    public var meta: MechanismMeta?
    /// Free-form data; for crashes `relevant_address` (the fault address as `"0x…"`).
    public var data: [String: JSONValue]?
    /// Where a chained exception came from in the one after it (`source`): `"NSUnderlyingErrorKey"` or
    /// `"underlyingError"` (``WrappingError``) for the causes of a captured error.
    public var source: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a mechanism; every field is described on its property.
    public init(type: String, handled: Bool? = nil, meta: MechanismMeta? = nil, data: [String: JSONValue]? = nil,
                source: String? = nil) {
        self.type = type
        self.handled = handled
        self.meta = meta
        self.data = data
        self.source = source
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<Mechanism>] = [
        .required("type", { $0.type }, { $0.type = $1 }),
        .strict("handled", { $0.handled }, { $0.handled = $1 }),
        .strict("meta", { $0.meta }, { $0.meta = $1 }),
        .strict("data", { $0.data }, { $0.data = $1 }),
        .strict("source", { $0.source }, { $0.source = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: Mechanism { Mechanism(type: "") }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type or a missing `type`.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// `mechanism.meta`: operating-system error details.
public struct MechanismMeta: Codable, Equatable, Sendable, FieldCoded {
    /// The POSIX signal that was delivered.
    public var signal: SignalMeta?
    /// The `NSError` domain and code of a captured error (`ns_error`).
    public var nsError: NSErrorMeta?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates mechanism meta.
    public init(signal: SignalMeta? = nil, nsError: NSErrorMeta? = nil) {
        self.signal = signal
        self.nsError = nsError
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<MechanismMeta>] = [
        .strict("signal", { $0.signal }, { $0.signal = $1 }),
        .strict("ns_error", { $0.nsError }, { $0.nsError = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: MechanismMeta { MechanismMeta() }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// `mechanism.meta.signal`: a POSIX signal as the handler saw it (from `siginfo_t`).
public struct SignalMeta: Codable, Equatable, Sendable, FieldCoded {
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

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<SignalMeta>] = [
        .required("number", { $0.number }, { $0.number = $1 }),
        .strict("code", { $0.code }, { $0.code = $1 }),
        .strict("name", { $0.name }, { $0.name = $1 }),
        .strict("code_name", { $0.codeName }, { $0.codeName = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: SignalMeta { SignalMeta(number: 0) }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type or a missing `number`.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// `mechanism.meta.ns_error`: the `NSError` identity of an error (an `NSError`, or a Swift error conforming to
/// `CustomNSError`).
public struct NSErrorMeta: Codable, Equatable, Sendable, FieldCoded {
    /// The error code within its domain (`code`).
    public var code: Int64
    /// The error domain, e.g. `"NSCocoaErrorDomain"` (`domain`).
    public var domain: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates `NSError` meta; every field is described on its property.
    public init(code: Int64, domain: String? = nil) {
        self.code = code
        self.domain = domain
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<NSErrorMeta>] = [
        .required("code", { $0.code }, { $0.code = $1 }),
        .strict("domain", { $0.domain }, { $0.domain = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: NSErrorMeta { NSErrorMeta(code: 0) }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type or a missing `code`.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}
