/// A stack trace (`stacktrace`): frames ordered OLDEST FIRST, so the crashing frame is the last one,
/// plus the thread's registers at the time of the error.
public struct Stacktrace: Codable, Equatable, Sendable, FieldCoded {
    /// Frames, oldest (outermost caller) first, crash site last.
    public var frames: [Frame]
    /// General registers by name (`rip`, `rsp`, … on x86_64; `pc`, `sp`, `x0`… on aarch64) as `"0x…"`.
    public var registers: [String: HexAddress]?
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a stack trace.
    public init(frames: [Frame], registers: [String: HexAddress]? = nil) {
        self.frames = frames
        self.registers = registers
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<Stacktrace>] = [
        // No `frames` is none; `frames` of another shape is written back as it was while there are none.
        Field(name: "frames",
              decode: { stacktrace, c, odd in
                  stacktrace.frames = c.decodeLeniently([Frame].self, forKey: OtherFieldKey("frames"), odd: &odd) ?? []
              },
              encode: { stacktrace, c, other, _ in
                  if stacktrace.frames.isEmpty, let raw = other?["frames"] {
                      try c.encode(raw, forKey: OtherFieldKey("frames"))
                  } else {
                      try c.encode(stacktrace.frames, forKey: OtherFieldKey("frames"))
                  }
              }),
        .lenient("registers", { $0.registers }, { $0.registers = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: Stacktrace { Stacktrace(frames: []) }

    /// Decodes a stack trace (no `frames` is none); members no property models go to ``other``, and so do
    /// `frames` or `registers` of another shape (kept verbatim, written back as they were). Throws
    /// `DecodingError` only when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the frames, the registers and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// One stack frame of a native stack trace.
public struct Frame: Codable, Equatable, Sendable, FieldCoded {
    /// The instruction address: the faulting PC for the crash site, the return address for callers
    /// (`instruction_addr`).
    public var instructionAddr: HexAddress
    /// `false` for a frame read from an event made elsewhere without a usable `instruction_addr` (see
    /// ``init(from:)``); such a frame is never symbolicated. `true` for every frame Vaka builds.
    public var hasInstructionAddr = true
    /// How the frame was found: `"context"` (signal context), `"cfi"` (DWARF CFI unwinding),
    /// `"fp"` (frame-pointer walk). Written only by the ``Event/Encoding/report`` encoding (not part of the
    /// Sentry event schema, so left out on the wire).
    public var trust: String?
    /// Path of the image (executable or shared library) the address lies in.
    public var package: String?
    /// Load address of that image's first byte (`image_addr`).
    public var imageAddr: HexAddress?
    /// The function, demangled (`demo.crashHere([Swift.Int]) -> Swift.Int`); C names as they are.
    public var function: String?
    /// The raw symbol name from the ELF symbol table, mangled for Swift (`$s4demo9crashHereySiSaySiGF`).
    public var symbol: String?
    /// Address of the first instruction of that symbol, in the crashed process (`symbol_addr`).
    public var symbolAddr: HexAddress?
    /// `true` for the application's own code: the main executable and images in its directory (`in_app`).
    public var inApp: Bool?
    /// Source file of the frame from DWARF, absolute when the compile unit names its directory
    /// (`filename`); `nil` without debug information.
    public var filename: String?
    /// Line number in ``filename``, 1-based (`lineno`).
    public var lineno: Int?
    /// Column in ``filename``, 1-based (`colno`).
    public var colno: Int?
    /// The source file's absolute path, when ``filename`` is relative (`abs_path`); Vaka writes none.
    public var absPath: String?
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a frame; every field is described on its property.
    public init(instructionAddr: HexAddress, trust: String? = nil, package: String? = nil,
                imageAddr: HexAddress? = nil, function: String? = nil, symbol: String? = nil,
                symbolAddr: HexAddress? = nil, inApp: Bool? = nil, filename: String? = nil, lineno: Int? = nil,
                colno: Int? = nil) {
        self.instructionAddr = instructionAddr
        self.trust = trust
        self.package = package
        self.imageAddr = imageAddr
        self.function = function
        self.symbol = symbol
        self.symbolAddr = symbolAddr
        self.inApp = inApp
        self.filename = filename
        self.lineno = lineno
        self.colno = colno
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<Frame>] = [
        // Without a usable one the frame reads with `hasInstructionAddr` false and is written back without one.
        Field(name: "instruction_addr",
              decode: { frame, c, odd in
                  let address = c.decodeLeniently(HexAddress.self, forKey: OtherFieldKey("instruction_addr"), odd: &odd)
                  frame.instructionAddr = address ?? HexAddress(0)
                  frame.hasInstructionAddr = address != nil
              },
              encode: { frame, c, other, _ in
                  try c.encode(frame.hasInstructionAddr ? frame.instructionAddr : nil, forKey: OtherFieldKey("instruction_addr"),
                               orVerbatimFrom: other)
              }),
        .lenient("trust", { $0.trust }, { $0.trust = $1 }, reportOnly: true),
        .lenient("package", { $0.package }, { $0.package = $1 }),
        .lenient("image_addr", { $0.imageAddr }, { $0.imageAddr = $1 }),
        .lenient("function", { $0.function }, { $0.function = $1 }),
        .lenient("symbol", { $0.symbol }, { $0.symbol = $1 }),
        .lenient("symbol_addr", { $0.symbolAddr }, { $0.symbolAddr = $1 }),
        .lenient("in_app", { $0.inApp }, { $0.inApp = $1 }),
        .lenient("filename", { $0.filename }, { $0.filename = $1 }),
        .lenient("lineno", { $0.lineno }, { $0.lineno = $1 }),
        .lenient("colno", { $0.colno }, { $0.colno = $1 }),
        .lenient("abs_path", { $0.absPath }, { $0.absPath = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: Frame { Frame(instructionAddr: HexAddress(0)) }

    /// Decodes a frame leniently: members no property models go to ``other``, and so does a field whose value
    /// does not have its type (a string `lineno`), kept verbatim and written back as it was. A frame without an
    /// `instruction_addr` (an interpreter's frame in an event from another SDK) or with one that is not an
    /// address reads with ``instructionAddr`` 0 and ``hasInstructionAddr`` `false`: it is written back without
    /// one (or with the value it had) and never symbolicated. Throws `DecodingError` only when the value is not
    /// a JSON object.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Forgets the odd values ``init(from:)`` kept for the fields symbolication writes (`function`, `symbol`,
    /// `symbol_addr`, `filename`, `lineno`, `colno`, `abs_path`), so that a frame resolved again is written with
    /// what it resolved to, not with the value it was read with.
    mutating func forgetOddSymbolFields() {
        for name in ["function", "symbol", "symbol_addr", "filename", "lineno", "colno", "abs_path"] {
            other?[name] = nil
        }
        if other?.isEmpty == true { other = nil }
    }

    /// Encodes the frame; `trust` only in the ``Event/Encoding/report`` encoding (not on the wire). A field
    /// read with an odd value and not set since is written back as it was (see ``init(from:)``).
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}
