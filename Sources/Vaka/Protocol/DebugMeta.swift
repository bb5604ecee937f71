/// `debug_meta`: the images a server needs to symbolicate the event's native frames.
public struct DebugMeta: Codable, Equatable, Sendable {
    /// The images, in the order the crash report listed them.
    public var images: [DebugImage]
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates debug meta.
    public init(images: [DebugImage]) {
        self.images = images
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case images
    }

    /// Decodes debug meta (no `images` is none); members no property models go to ``other``. Throws
    /// `DecodingError` for an image of the wrong shape.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        images = try c.decodeIfPresent([DebugImage].self, forKey: .images) ?? []
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the images and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(images, forKey: .images)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// One loaded image of `debug_meta.images` (an ELF executable or shared library).
public struct DebugImage: Codable, Equatable, Sendable {
    /// Image kind; `"elf"` on Linux.
    public var type: String
    /// Path of the image file as loaded (`code_file`).
    public var codeFile: String?
    /// Load address of the image's first byte in the crashed process (`image_addr`).
    public var imageAddr: HexAddress
    /// Span of the image's `PT_LOAD` segments in memory, in bytes (`image_size`).
    public var imageSize: UInt64?
    /// The whole GNU build ID in lower-case hex (`code_id`); `nil` when the image has none.
    public var codeID: String?
    /// The image's debug identifier: the first 16 bytes of the build ID as a little-endian GUID,
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (`debug_id`).
    public var debugID: String?
    /// CPU architecture, e.g. `"x86_64"`.
    public var arch: String?
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a debug image; every field is described on its property.
    public init(type: String = "elf", codeFile: String? = nil, imageAddr: HexAddress, imageSize: UInt64? = nil,
                codeID: String? = nil, debugID: String? = nil, arch: String? = nil) {
        self.type = type
        self.codeFile = codeFile
        self.imageAddr = imageAddr
        self.imageSize = imageSize
        self.codeID = codeID
        self.debugID = debugID
        self.arch = arch
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case type
        case codeFile = "code_file"
        case imageAddr = "image_addr"
        case imageSize = "image_size"
        case codeID = "code_id"
        case debugID = "debug_id"
        case arch
    }

    /// Decodes a debug image (`image_size` a number or a `"0x…"` string) leniently: members no property models
    /// go to ``other``, and so does an optional field whose value does not have its type, kept verbatim and
    /// written back as it was. Throws `DecodingError` for a missing `type` or `image_addr` (an image that
    /// cannot be placed) or when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        var odd = try decoder.otherFields(besides: CodingKeys.self) ?? [:]
        type = try c.decode(String.self, forKey: .type)
        codeFile = c.decodeLeniently(String.self, forKey: .codeFile, odd: &odd)
        imageAddr = try c.decode(HexAddress.self, forKey: .imageAddr)
        // A number, or (as some SDKs write it) a "0x…" string.
        imageSize = (try? c.decodeIfPresent(UInt64.self, forKey: .imageSize))
            ?? c.decodeLeniently(HexAddress.self, forKey: .imageSize, odd: &odd)?.value
        codeID = c.decodeLeniently(String.self, forKey: .codeID, odd: &odd)
        debugID = c.decodeLeniently(String.self, forKey: .debugID, odd: &odd)
        arch = c.decodeLeniently(String.self, forKey: .arch, odd: &odd)
        other = odd.isEmpty ? nil : odd
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(type, forKey: .type)
        try c.encode(codeFile, forKey: .codeFile, orVerbatimFrom: other)
        try c.encode(imageAddr, forKey: .imageAddr)
        try c.encode(imageSize, forKey: .imageSize, orVerbatimFrom: other)
        try c.encode(codeID, forKey: .codeID, orVerbatimFrom: other)
        try c.encode(debugID, forKey: .debugID, orVerbatimFrom: other)
        try c.encode(arch, forKey: .arch, orVerbatimFrom: other)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}
