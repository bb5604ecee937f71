import Foundation

/// A Sentry event: every event Vaka sends (fatal from a crash report, handled error, message, screen view,
/// custom event) is one value of this type, and the JSON of each is this type encoded.
///
/// Field names follow the Sentry protocol (snake_case on the wire, e.g. `event_id`). Optional fields
/// that are `nil` are left out of the JSON. Encode with ``jsonData(pretty:encoding:)`` or any `JSONEncoder`
/// (with ``Encoding/userInfoKey`` in its `userInfo` to choose the ``Encoding``). A new Sentry field is a new
/// property here and one entry, its wire name and how it is read, in `fields` (the same for the types below);
/// `EventModelCompletenessTests` fails until both are there.
public struct Event: Codable, Equatable, Sendable, FieldCoded {
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

    /// Which fields the JSON of an event carries; a `JSONEncoder` without the option writes ``report``.
    public enum Encoding: Sendable {
        /// Everything, also the frame field `trust` (how a frame was found): the output of `vaka report convert`.
        case report
        /// What the Sentry event schema accepts, as sent to a server: without the frame field `trust` (servers
        /// validating strictly against the schema, such as Bugsink with `VALIDATE_ON_DIGEST: strict`, drop an
        /// event with unknown frame fields).
        case wire

        /// The `JSONEncoder.userInfo` key whose value (an ``Encoding``) chooses the encoding.
        public static let userInfoKey = CodingUserInfoKey(rawValue: "vaka.event.encoding")!

        /// The encoding asked for in `userInfo` (``report`` when none).
        static func of(_ userInfo: [CodingUserInfoKey: Any]) -> Encoding {
            userInfo[userInfoKey] as? Encoding ?? .report
        }
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
    /// The release of the program, e.g. `"shop@1.2.3"` (`release`).
    public var release: String?
    /// The deployment environment, e.g. `"production"` (`environment`).
    public var environment: String?
    /// The message of a message event (`logentry`).
    public var logentry: LogEntry?
    /// The user the event happened to (`user`).
    public var user: User?
    /// Indexed key/value strings (`tags`).
    public var tags: [String: String]?
    /// Free-form additional data (`extra`).
    public var extra: [String: JSONValue]?
    /// What happened before the event, oldest first (`breadcrumbs.values`).
    public var breadcrumbs: ValueList<Breadcrumb>?
    /// Device, OS and app facts (`contexts`).
    public var contexts: Contexts?
    /// The exceptions (`exception.values`); for a crash one entry describing the signal.
    public var exception: ValueList<Exception>?
    /// The threads (`threads.values`); for a crash the crashed thread.
    public var threads: ValueList<SentryThread>?
    /// The loaded images that frames point into (`debug_meta`).
    public var debugMeta: DebugMeta?
    /// The distribution of the release, e.g. a build number (`dist`).
    public var dist: String?
    /// The host the event came from (`server_name`).
    public var serverName: String?
    /// The kind of event, e.g. `"error"` or `"default"` (`type`).
    public var type: String?
    /// How the server groups this event into issues (`fingerprint`): strings such as `["checkout",
    /// "card-declined"]`; `"{{ default }}"` stands for the server's own grouping. `nil`: the server's grouping.
    public var fingerprint: [String]?
    /// The members of the event's JSON object that no property models (an event from elsewhere given to
    /// `vaka symbolicate`), kept so that they are encoded back unchanged; also a modeled field whose value
    /// does not have the field's type (a hand-edited or damaged stored event), kept as it was instead of
    /// losing the event, and written back in its field's place. `nil` for the events Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates an event; every field is described on its property.
    public init(eventID: String, timestamp: Double? = nil, platform: String = "native", level: Level,
                sdk: SDKInfo? = nil, contexts: Contexts? = nil, exception: ValueList<Exception>? = nil,
                threads: ValueList<SentryThread>? = nil, debugMeta: DebugMeta? = nil,
                extra: [String: JSONValue]? = nil, tags: [String: String]? = nil, release: String? = nil,
                environment: String? = nil, logentry: LogEntry? = nil, user: User? = nil,
                breadcrumbs: ValueList<Breadcrumb>? = nil) {
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
        self.release = release
        self.environment = environment
        self.logentry = logentry
        self.user = user
        self.breadcrumbs = breadcrumbs
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<Event>] = [
        .verbatimFirst("event_id", { $0.eventID }, { $0.eventID = $1 }, omit: { $0.isEmpty }),
        .verbatimFirst("timestamp", { $0.timestamp }, { $0.timestamp = $1 }),
        .verbatimFirst("platform", { $0.platform }, { $0.platform = $1 }),
        .verbatimFirst("level", { $0.level }, { $0.level = $1 }),
        .verbatimFirst("sdk", { $0.sdk }, { $0.sdk = $1 }),
        .verbatimFirst("release", { $0.release }, { $0.release = $1 }),
        .verbatimFirst("environment", { $0.environment }, { $0.environment = $1 }),
        .verbatimFirst("logentry", { $0.logentry }, { $0.logentry = $1 }),
        .verbatimFirst("user", { $0.user }, { $0.user = $1 }),
        .verbatimFirst("tags", { $0.tags }, { $0.tags = $1 }),
        .verbatimFirst("extra", { $0.extra }, { $0.extra = $1 }),
        .verbatimFirst("breadcrumbs", { $0.breadcrumbs }, { $0.breadcrumbs = $1 }),
        .verbatimFirst("contexts", { $0.contexts }, { $0.contexts = $1 }),
        .verbatimFirst("exception", { $0.exception }, { $0.exception = $1 }),
        .verbatimFirst("threads", { $0.threads }, { $0.threads = $1 }),
        .verbatimFirst("debug_meta", { $0.debugMeta }, { $0.debugMeta = $1 }),
        .verbatimFirst("dist", { $0.dist }, { $0.dist = $1 }),
        .verbatimFirst("server_name", { $0.serverName }, { $0.serverName = $1 }),
        .verbatimFirst("type", { $0.type }, { $0.type = $1 }),
        .verbatimFirst("fingerprint", { $0.fingerprint }, { $0.fingerprint = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: Event { Event(eventID: "", platform: "other", level: .error) }

    /// Decodes an event leniently, as Sentry ingests one, so that a stored event is never lost for one odd
    /// field: a missing `level` is ``Level/error`` and a missing `platform` `"other"` (Sentry's defaults); a
    /// missing `event_id` is empty (and left out again when encoded); a field whose value does not have its
    /// type (a `level` Vaka does not know, a `timestamp` that is not a number) is kept verbatim in ``other``
    /// and written back as it was (the size budget bounds it like any string); members no property models go
    /// to ``other``. Throws `DecodingError` only when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the event: each field from its property, or from ``other`` when that holds the field's odd
    /// value; then the members of ``other`` no property models.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }

    /// The event as UTF-8 JSON with sorted keys and unescaped slashes, in `encoding` (default ``Encoding/report``,
    /// with frame `trust`); `pretty` adds indentation and newlines. Throws `EncodingError.invalidValue` only for
    /// a non-finite ``timestamp`` (a breadcrumb's, the event's; ``JSONValue``s write theirs as text).
    public func jsonData(pretty: Bool = false, encoding: Encoding = .report) throws -> Data {
        try Event.encoder(pretty: pretty, encoding: encoding).encode(self)
    }

    /// A `JSONEncoder` writing events as ``jsonData(pretty:encoding:)`` does.
    static func encoder(pretty: Bool = false, encoding: Encoding) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.sortedKeys, .withoutEscapingSlashes, .prettyPrinted]
                                          : [.sortedKeys, .withoutEscapingSlashes]
        encoder.userInfo[Encoding.userInfoKey] = encoding
        return encoder
    }
}

/// `logentry`: the Sentry message interface, `{"formatted": text}` (the top-level key `message` is an alias
/// some servers, such as Bugsink with strict validation, reject).
public struct LogEntry: Codable, Equatable, Sendable, FieldCoded {
    /// The message as shown (`formatted`).
    public var formatted: String

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// A log entry with the text `formatted`.
    public init(formatted: String) {
        self.formatted = formatted
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<LogEntry>] = [
        .required("formatted", { $0.formatted }, { $0.formatted = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: LogEntry { LogEntry(formatted: "") }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type or a missing `formatted`.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// `user`: who the event happened to. Vaka sends only what the program gives it (``Vaka/setUser(_:)``,
/// ``Vaka/identify(_:)``, a per-call ``Scope``); every field is optional and cut to 200 Unicode scalars.
public struct User: Codable, Equatable, Sendable, FieldCoded {
    /// The user's id in the program (`id`).
    public var id: String?
    /// The user's e-mail address (`email`).
    public var email: String?
    /// The user's name for display (`username`).
    public var username: String?
    /// The user's IP address, e.g. `"203.0.113.7"` or `"{{auto}}"` for the address the server saw the
    /// request come from (`ip_address`).
    public var ipAddress: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// A user; every field is described on its property.
    public init(id: String? = nil, email: String? = nil, username: String? = nil, ipAddress: String? = nil) {
        self.id = id
        self.email = email
        self.username = username
        self.ipAddress = ipAddress
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<User>] = [
        .strict("id", { $0.id }, { $0.id = $1 }),
        .strict("email", { $0.email }, { $0.email = $1 }),
        .strict("username", { $0.username }, { $0.username = $1 }),
        .strict("ip_address", { $0.ipAddress }, { $0.ipAddress = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: User { User() }

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

/// A `{"values": [...]}` wrapper, the shape of the `exception` and `threads` interfaces: `Codable` and
/// `Equatable` when its elements are. (Those are conformances of the wrapper, not requirements on `Element`:
/// the Swift runtime checks a generic type's requirements each time it makes the type's metadata from its
/// mangled name, and the first check of each element type and protocol scans every loaded library's
/// conformance records; the first event encoded in a process made nine such scans.)
public struct ValueList<Element: Sendable>: Sendable {
    /// The entries.
    public var values: [Element]

    /// Wraps `values`.
    public init(_ values: [Element]) {
        self.values = values
    }
}

extension ValueList: Codable where Element: Codable {}
extension ValueList: Equatable where Element: Equatable {}

/// The SDK that produced an event (`sdk`): name and version, e.g. `vaka.swift` / `0.1.0`.
public struct SDKInfo: Codable, Equatable, Sendable, FieldCoded {
    /// SDK name, e.g. `"vaka.swift"`.
    public var name: String
    /// SDK version, semver, e.g. `"0.1.0"`.
    public var version: String
    /// The packages the SDK is made of (`packages`); Vaka sends none.
    public var packages: [SDKPackage]?
    /// The names of the SDK's integrations (`integrations`); Vaka sends none.
    public var integrations: [String]?
    /// Members of the JSON object no property models, kept as they were (see ``Event/other``).
    public var other: [String: JSONValue]?

    /// Creates SDK info.
    public init(name: String, version: String, packages: [SDKPackage]? = nil, integrations: [String]? = nil) {
        self.name = name
        self.version = version
        self.packages = packages
        self.integrations = integrations
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<SDKInfo>] = [
        .required("name", { $0.name }, { $0.name = $1 }),
        .required("version", { $0.version }, { $0.version = $1 }),
        .strict("packages", { $0.packages }, { $0.packages = $1 }),
        .strict("integrations", { $0.integrations }, { $0.integrations = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: SDKInfo { SDKInfo(name: "", version: "") }

    /// Decodes SDK info; members no property models go to ``other``. Throws `DecodingError` for a missing
    /// `name` or `version` or a field of the wrong type.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }

    /// This SDK, as named in events, envelope headers and `sentry_client`: `vaka.swift` `0.1.0`.
    public static let vaka = SDKInfo(name: "vaka.swift", version: "0.1.0")
}

/// One entry of `sdk.packages`: a package an SDK is made of, e.g. `cargo:sentry` / `0.31.0`.
public struct SDKPackage: Codable, Equatable, Sendable {
    /// The package name, prefixed by its registry (`name`).
    public var name: String?
    /// The package version (`version`).
    public var version: String?

    /// A package `name` at `version`.
    public init(name: String? = nil, version: String? = nil) {
        self.name = name
        self.version = version
    }
}

/// The `contexts` of an event: the subset Vaka fills.
public struct Contexts: Codable, Equatable, Sendable, FieldCoded {
    /// The device context (`contexts.device`).
    public var device: DeviceContext?
    /// The operating system context (`contexts.os`).
    public var os: OSContext?
    /// The application context (`contexts.app`).
    public var app: AppContext?
    /// The other contexts by name (`runtime`, `trace`, ... of an event from elsewhere), kept as they were.
    public var other: [String: JSONValue]?

    /// Creates contexts.
    public init(device: DeviceContext? = nil, os: OSContext? = nil, app: AppContext? = nil) {
        self.device = device
        self.os = os
        self.app = app
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<Contexts>] = [
        .strict("device", { $0.device }, { $0.device = $1 }),
        .strict("os", { $0.os }, { $0.os = $1 }),
        .strict("app", { $0.app }, { $0.app = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: Contexts { Contexts() }

    /// Decodes contexts; the contexts no property models go to ``other``. Throws `DecodingError` for a
    /// modeled context of the wrong shape.
    public init(from decoder: Decoder) throws {
        try self.init(decodingFields: decoder)
    }

    /// Encodes the modeled contexts and then ``other``.
    public func encode(to encoder: Encoder) throws {
        try encodeFields(to: encoder)
    }
}

/// `contexts.device`: the machine.
public struct DeviceContext: Codable, Equatable, Sendable, FieldCoded {
    /// CPU architecture as Sentry names it for Linux: `"x86_64"` or `"aarch64"`.
    public var arch: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a device context.
    public init(arch: String? = nil) {
        self.arch = arch
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<DeviceContext>] = [
        .strict("arch", { $0.arch }, { $0.arch = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: DeviceContext { DeviceContext() }

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

/// `contexts.os`: the operating system.
public struct OSContext: Codable, Equatable, Sendable, FieldCoded {
    /// OS name, e.g. `"Linux"`.
    public var name: String?
    /// OS version or kernel release, e.g. `"6.1.0-18-amd64"` (`uname -r`).
    public var version: String?
    /// The kernel release, `uname -r` (`kernel_version`).
    public var kernelVersion: String?
    /// The kernel build, `uname -v` (`build`).
    public var build: String?
    /// `ID` of `/etc/os-release`, e.g. `"debian"` (`distribution_name`).
    public var distributionName: String?
    /// `VERSION_ID` of `/etc/os-release`, e.g. `"12"` (`distribution_version`).
    public var distributionVersion: String?
    /// `PRETTY_NAME` of `/etc/os-release` (`distribution_pretty_name`).
    public var distributionPrettyName: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates an OS context; every field is described on its property.
    public init(name: String? = nil, version: String? = nil, kernelVersion: String? = nil, build: String? = nil,
                distributionName: String? = nil, distributionVersion: String? = nil,
                distributionPrettyName: String? = nil) {
        self.name = name
        self.version = version
        self.kernelVersion = kernelVersion
        self.build = build
        self.distributionName = distributionName
        self.distributionVersion = distributionVersion
        self.distributionPrettyName = distributionPrettyName
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<OSContext>] = [
        .strict("name", { $0.name }, { $0.name = $1 }),
        .strict("version", { $0.version }, { $0.version = $1 }),
        .strict("kernel_version", { $0.kernelVersion }, { $0.kernelVersion = $1 }),
        .strict("build", { $0.build }, { $0.build = $1 }),
        .strict("distribution_name", { $0.distributionName }, { $0.distributionName = $1 }),
        .strict("distribution_version", { $0.distributionVersion }, { $0.distributionVersion = $1 }),
        .strict("distribution_pretty_name", { $0.distributionPrettyName }, { $0.distributionPrettyName = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: OSContext { OSContext() }

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

/// `contexts.app`: the running program.
public struct AppContext: Codable, Equatable, Sendable, FieldCoded {
    /// The executable's file name (`app_name`).
    public var appName: String?
    /// The release (`app_version`).
    public var appVersion: String?
    /// When the run started, RFC 3339 (`app_start_time`).
    public var appStartTime: String?
    /// The executable's path (`app_identifier`).
    public var appIdentifier: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates an app context; every field is described on its property.
    public init(appName: String? = nil, appVersion: String? = nil, appStartTime: String? = nil,
                appIdentifier: String? = nil) {
        self.appName = appName
        self.appVersion = appVersion
        self.appStartTime = appStartTime
        self.appIdentifier = appIdentifier
    }

    /// The fields, by wire name, in the order they are written.
    static let fields: [Field<AppContext>] = [
        .strict("app_name", { $0.appName }, { $0.appName = $1 }),
        .strict("app_version", { $0.appVersion }, { $0.appVersion = $1 }),
        .strict("app_start_time", { $0.appStartTime }, { $0.appStartTime = $1 }),
        .strict("app_identifier", { $0.appIdentifier }, { $0.appIdentifier = $1 }),
    ]

    /// The value decoding starts from (see ``FieldCoded/decodingBase``).
    static var decodingBase: AppContext { AppContext() }

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
