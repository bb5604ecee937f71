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

    /// Decodes a stack trace (no `frames` is none); members no property models go to ``other``. Throws
    /// `DecodingError` for a frame or register of the wrong shape.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        frames = try c.decodeIfPresent([Frame].self, forKey: .frames) ?? []
        registers = try c.decodeIfPresent([String: HexAddress].self, forKey: .registers)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the frames, the registers and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(frames, forKey: .frames)
        try c.encodeIfPresent(registers, forKey: .registers)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// One stack frame of a native stack trace.
public struct Frame: Codable, Equatable, Sendable {
    /// The instruction address: the faulting PC for the crash site, the return address for callers
    /// (`instruction_addr`).
    public var instructionAddr: HexAddress
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

    /// Decodes a frame; members no property models go to ``other``. Throws `DecodingError` for a missing or
    /// malformed `instruction_addr` or a field of the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        instructionAddr = try c.decode(HexAddress.self, forKey: .instructionAddr)
        trust = try c.decodeIfPresent(String.self, forKey: .trust)
        package = try c.decodeIfPresent(String.self, forKey: .package)
        imageAddr = try c.decodeIfPresent(HexAddress.self, forKey: .imageAddr)
        function = try c.decodeIfPresent(String.self, forKey: .function)
        symbol = try c.decodeIfPresent(String.self, forKey: .symbol)
        symbolAddr = try c.decodeIfPresent(HexAddress.self, forKey: .symbolAddr)
        inApp = try c.decodeIfPresent(Bool.self, forKey: .inApp)
        filename = try c.decodeIfPresent(String.self, forKey: .filename)
        lineno = try c.decodeIfPresent(Int.self, forKey: .lineno)
        colno = try c.decodeIfPresent(Int.self, forKey: .colno)
        absPath = try c.decodeIfPresent(String.self, forKey: .absPath)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the frame; `trust` only in the ``Event/Encoding/report`` encoding (not on the wire).
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(instructionAddr, forKey: .instructionAddr)
        if Event.Encoding.of(encoder.userInfo) == .report { try c.encodeIfPresent(trust, forKey: .trust) }
        try c.encodeIfPresent(package, forKey: .package)
        try c.encodeIfPresent(imageAddr, forKey: .imageAddr)
        try c.encodeIfPresent(function, forKey: .function)
        try c.encodeIfPresent(symbol, forKey: .symbol)
        try c.encodeIfPresent(symbolAddr, forKey: .symbolAddr)
        try c.encodeIfPresent(inApp, forKey: .inApp)
        try c.encodeIfPresent(filename, forKey: .filename)
        try c.encodeIfPresent(lineno, forKey: .lineno)
        try c.encodeIfPresent(colno, forKey: .colno)
        try c.encodeIfPresent(absPath, forKey: .absPath)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}
