/// `debug_meta`: the images a server needs to symbolicate the event's native frames.
public struct DebugMeta: Codable, Equatable, Sendable {
    /// The images, in the order the crash report listed them.
    public var images: [DebugImage]

    /// Creates debug meta.
    public init(images: [DebugImage]) {
        self.images = images
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
    private enum CodingKeys: String, CodingKey {
        case type
        case codeFile = "code_file"
        case imageAddr = "image_addr"
        case imageSize = "image_size"
        case codeID = "code_id"
        case debugID = "debug_id"
        case arch
    }
}
