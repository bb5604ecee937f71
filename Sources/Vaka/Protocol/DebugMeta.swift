/// `debug_meta`: the images a server needs to symbolicate the event's native frames.
public struct DebugMeta: Codable, Equatable, Sendable, FieldCoded {
    /// The images, in the order the crash report listed them.
    public var images: [DebugImage]
    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates debug meta.
    public init(images: [DebugImage]) {
        self.images = images
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<DebugMeta>] = [
        .strictOrBase("images", { $0.images }, { $0.images = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: DebugMeta { DebugMeta(images: []) }

    /// Decodes debug meta (no `images` is none); members no property models go to ``other``. Throws
    /// `DecodingError` for an image of the wrong shape.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the images and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// One loaded image of `debug_meta.images` (an ELF executable or shared library).
public struct DebugImage: Codable, Equatable, Sendable, FieldCoded {
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

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<DebugImage>] = [
        .required("type", { $0.type }, { $0.type = $1 }),
        .lenient("code_file", { $0.codeFile }, { $0.codeFile = $1 }),
        .required("image_addr", { $0.imageAddr }, { $0.imageAddr = $1 }),
        // A number, or (as some SDKs write it) a "0x…" string.
        Field(name: "image_size",
              decode: { image, c, odd in
                  let key = OtherFieldKey("image_size")
                  image.imageSize = (try? c.decodeIfPresent(UInt64.self, forKey: key))
                      ?? c.decodeLeniently(HexAddress.self, forKey: key, odd: &odd)?.value
              },
              encode: { image, c, other, _ in
                  try c.encode(image.imageSize, forKey: OtherFieldKey("image_size"), orVerbatimFrom: other)
              }),
        .lenient("code_id", { $0.codeID }, { $0.codeID = $1 }),
        .lenient("debug_id", { $0.debugID }, { $0.debugID = $1 }),
        .lenient("arch", { $0.arch }, { $0.arch = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: DebugImage { DebugImage(type: "", imageAddr: HexAddress(0)) }

    /// Decodes a debug image (`image_size` a number or a `"0x…"` string) leniently: members no property models
    /// go to ``other``, and so does an optional field whose value does not have its type, kept verbatim and
    /// written back as it was. Throws `DecodingError` for a missing `type` or `image_addr` (an image that
    /// cannot be placed) or when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}
