import Foundation

/// A Sentry event: the subset of the event payload Vaka produces and reads back.
///
/// Field names follow the Sentry protocol (snake_case on the wire, e.g. `event_id`). Optional fields
/// that are `nil` are left out of the JSON. Encode with ``jsonData(pretty:)`` or any `JSONEncoder`.
public struct Event: Codable, Equatable, Sendable {
    /// The event's severity (`level` on the wire).
    public enum Level: String, Codable, Sendable {
        /// The process died (crashes).
        case fatal
        /// An error the program survived.
        case error
        /// A warning.
        case warning
        /// Information.
        case info
        /// Debugging detail.
        case debug
    }

    /// Unique id of the event: 32 lower-case hex digits without dashes (`event_id`).
    public var eventID: String
    /// When the event happened, in seconds since the Unix epoch with a fraction (`timestamp`).
    public var timestamp: Double?
    /// The platform that produced the event; `"native"` for crashes symbolicated from ELF images.
    public var platform: String
    /// Severity; ``Level/fatal`` for crashes.
    public var level: Level
    /// The SDK that produced the event.
    public var sdk: SDKInfo?
    /// Device and OS facts (`contexts`).
    public var contexts: Contexts?
    /// The exceptions (`exception.values`); for a crash one entry describing the signal.
    public var exception: ValueList<Exception>?
    /// The threads (`threads.values`); for a crash the crashed thread.
    public var threads: ValueList<SentryThread>?
    /// The loaded images that frames point into (`debug_meta`).
    public var debugMeta: DebugMeta?
    /// Free-form additional data (`extra`).
    public var extra: [String: JSONValue]?
    /// Indexed key/value strings (`tags`).
    public var tags: [String: String]?

    /// Creates an event; every field is described on its property.
    public init(eventID: String, timestamp: Double? = nil, platform: String = "native", level: Level,
                sdk: SDKInfo? = nil, contexts: Contexts? = nil, exception: ValueList<Exception>? = nil,
                threads: ValueList<SentryThread>? = nil, debugMeta: DebugMeta? = nil,
                extra: [String: JSONValue]? = nil, tags: [String: String]? = nil) {
        self.eventID = eventID
        self.timestamp = timestamp
        self.platform = platform
        self.level = level
        self.sdk = sdk
        self.contexts = contexts
        self.exception = exception
        self.threads = threads
        self.debugMeta = debugMeta
        self.extra = extra
        self.tags = tags
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey {
        case eventID = "event_id"
        case timestamp, platform, level, sdk, contexts, exception, threads
        case debugMeta = "debug_meta"
        case extra, tags
    }

    /// The event as UTF-8 JSON with sorted keys and unescaped slashes; `pretty` adds indentation and
    /// newlines. Throws `EncodingError.invalidValue` only for a non-finite ``timestamp``.
    public func jsonData(pretty: Bool = false) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
                                          : [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }
}

/// A `{"values": [...]}` wrapper, the shape of the `exception` and `threads` interfaces.
public struct ValueList<Element: Codable & Equatable & Sendable>: Codable, Equatable, Sendable {
    /// The entries.
    public var values: [Element]

    /// Wraps `values`.
    public init(_ values: [Element]) {
        self.values = values
    }
}

/// The SDK that produced an event (`sdk`): name and version, e.g. `vaka.swift` / `0.1.0`.
public struct SDKInfo: Codable, Equatable, Sendable {
    /// SDK name, e.g. `"vaka.swift"`.
    public var name: String
    /// SDK version, semver, e.g. `"0.1.0"`.
    public var version: String

    /// Creates SDK info.
    public init(name: String, version: String) {
        self.name = name
        self.version = version
    }

    /// This SDK, as named in events, envelope headers and `sentry_client`: `vaka.swift` `0.1.0`.
    public static let vaka = SDKInfo(name: "vaka.swift", version: "0.1.0")
}

/// The `contexts` of an event: the subset Vaka fills.
public struct Contexts: Codable, Equatable, Sendable {
    /// The device context (`contexts.device`).
    public var device: DeviceContext?
    /// The operating system context (`contexts.os`).
    public var os: OSContext?

    /// Creates contexts.
    public init(device: DeviceContext? = nil, os: OSContext? = nil) {
        self.device = device
        self.os = os
    }
}

/// `contexts.device`: the machine.
public struct DeviceContext: Codable, Equatable, Sendable {
    /// CPU architecture as Sentry names it for Linux: `"x86_64"` or `"aarch64"`.
    public var arch: String?

    /// Creates a device context.
    public init(arch: String? = nil) {
        self.arch = arch
    }
}

/// `contexts.os`: the operating system.
public struct OSContext: Codable, Equatable, Sendable {
    /// OS name, e.g. `"Linux"`.
    public var name: String?
    /// OS version or kernel release, e.g. `"6.1.0-18-amd64"`.
    public var version: String?

    /// Creates an OS context.
    public init(name: String? = nil, version: String? = nil) {
        self.name = name
        self.version = version
    }
}
