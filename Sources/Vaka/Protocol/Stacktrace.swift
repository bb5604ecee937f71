/// A stack trace (`stacktrace`): frames ordered OLDEST FIRST, so the crashing frame is the last one,
/// plus the thread's registers at the time of the error.
public struct Stacktrace: Codable, Equatable, Sendable {
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

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case frames, registers
    }

    /// Decodes a stack trace (no `frames` is none); members no property models go to ``other``, and so do
    /// `frames` or `registers` of another shape (kept verbatim, written back as they were). Throws
    /// `DecodingError` only when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        var odd = try decoder.otherFields(besides: CodingKeys.self) ?? [:]
        frames = c.decodeLeniently([Frame].self, forKey: .frames, odd: &odd) ?? []
        registers = c.decodeLeniently([String: HexAddress].self, forKey: .registers, odd: &odd)
        other = odd.isEmpty ? nil : odd
    }

    /// Encodes the frames, the registers and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        if frames.isEmpty, let raw = other?[CodingKeys.frames.stringValue] {
            try c.encode(raw, forKey: .frames)
        } else {
            try c.encode(frames, forKey: .frames)
        }
        try c.encode(registers, forKey: .registers, orVerbatimFrom: other)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// One stack frame of a native stack trace.
public struct Frame: Codable, Equatable, Sendable {
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

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case instructionAddr = "instruction_addr"
        case trust, package
        case imageAddr = "image_addr"
        case function, symbol
        case symbolAddr = "symbol_addr"
        case inApp = "in_app"
        case filename, lineno, colno
        case absPath = "abs_path"
    }

    /// Decodes a frame leniently: members no property models go to ``other``, and so does a field whose value
    /// does not have its type (a string `lineno`), kept verbatim and written back as it was. A frame without an
    /// `instruction_addr` (an interpreter's frame in an event from another SDK) or with one that is not an
    /// address reads with ``instructionAddr`` 0 and ``hasInstructionAddr`` `false`: it is written back without
    /// one (or with the value it had) and never symbolicated. Throws `DecodingError` only when the value is not
    /// a JSON object.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        var odd = try decoder.otherFields(besides: CodingKeys.self) ?? [:]
        let address = c.decodeLeniently(HexAddress.self, forKey: .instructionAddr, odd: &odd)
        instructionAddr = address ?? HexAddress(0)
        hasInstructionAddr = address != nil
        trust = c.decodeLeniently(String.self, forKey: .trust, odd: &odd)
        package = c.decodeLeniently(String.self, forKey: .package, odd: &odd)
        imageAddr = c.decodeLeniently(HexAddress.self, forKey: .imageAddr, odd: &odd)
        function = c.decodeLeniently(String.self, forKey: .function, odd: &odd)
        symbol = c.decodeLeniently(String.self, forKey: .symbol, odd: &odd)
        symbolAddr = c.decodeLeniently(HexAddress.self, forKey: .symbolAddr, odd: &odd)
        inApp = c.decodeLeniently(Bool.self, forKey: .inApp, odd: &odd)
        filename = c.decodeLeniently(String.self, forKey: .filename, odd: &odd)
        lineno = c.decodeLeniently(Int.self, forKey: .lineno, odd: &odd)
        colno = c.decodeLeniently(Int.self, forKey: .colno, odd: &odd)
        absPath = c.decodeLeniently(String.self, forKey: .absPath, odd: &odd)
        other = odd.isEmpty ? nil : odd
    }

    /// Forgets the odd values ``init(from:)`` kept for the fields symbolication writes (`function`, `symbol`,
    /// `symbol_addr`, `filename`, `lineno`, `colno`, `abs_path`), so that a frame resolved again is written with
    /// what it resolved to, not with the value it was read with.
    mutating func forgetOddSymbolFields() {
        for key in [CodingKeys.function, .symbol, .symbolAddr, .filename, .lineno, .colno, .absPath] {
            other?[key.stringValue] = nil
        }
        if other?.isEmpty == true { other = nil }
    }

    /// Encodes the frame; `trust` only in the ``Event/Encoding/report`` encoding (not on the wire). A field
    /// read with an odd value and not set since is written back as it was (see ``init(from:)``).
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(hasInstructionAddr ? instructionAddr : nil, forKey: .instructionAddr, orVerbatimFrom: other)
        if Event.Encoding.of(encoder.userInfo) == .report { try c.encode(trust, forKey: .trust, orVerbatimFrom: other) }
        try c.encode(package, forKey: .package, orVerbatimFrom: other)
        try c.encode(imageAddr, forKey: .imageAddr, orVerbatimFrom: other)
        try c.encode(function, forKey: .function, orVerbatimFrom: other)
        try c.encode(symbol, forKey: .symbol, orVerbatimFrom: other)
        try c.encode(symbolAddr, forKey: .symbolAddr, orVerbatimFrom: other)
        try c.encode(inApp, forKey: .inApp, orVerbatimFrom: other)
        try c.encode(filename, forKey: .filename, orVerbatimFrom: other)
        try c.encode(lineno, forKey: .lineno, orVerbatimFrom: other)
        try c.encode(colno, forKey: .colno, orVerbatimFrom: other)
        try c.encode(absPath, forKey: .absPath, orVerbatimFrom: other)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}
