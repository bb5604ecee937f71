import Foundation

/// A Sentry event: every event Vaka sends (fatal from a crash report, handled error, message, screen view,
/// custom event) is one value of this type, and the JSON of each is this type encoded.
///
/// Field names follow the Sentry protocol (snake_case on the wire, e.g. `event_id`). Optional fields
/// that are `nil` are left out of the JSON. Encode with ``jsonData(pretty:encoding:)`` or any `JSONEncoder`
/// (with ``Encoding/userInfoKey`` in its `userInfo` to choose the ``Encoding``). A new Sentry field is a new
/// property here: its wire name goes in `CodingKeys`.
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

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case eventID = "event_id"
        case timestamp, platform, level, sdk, release, environment, logentry, user, tags, extra, breadcrumbs
        case contexts, exception, threads
        case debugMeta = "debug_meta"
        case dist
        case serverName = "server_name"
        case type
    }

    /// Decodes an event leniently, as Sentry ingests one, so that a stored event is never lost for one odd
    /// field: a missing `level` is ``Level/error`` and a missing `platform` `"other"` (Sentry's defaults); a
    /// missing `event_id` is empty (and left out again when encoded); a field whose value does not have its
    /// type (a `level` Vaka does not know, a `timestamp` that is not a number) is kept verbatim in ``other``
    /// and written back as it was (the size budget bounds it like any string); members no property models go
    /// to ``other``. Throws `DecodingError` only when the value is not a JSON object.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        var other = try decoder.otherFields(besides: CodingKeys.self) ?? [:]
        func field<T: Decodable>(_ key: CodingKeys, as _: T.Type = T.self) -> T? {
            guard c.contains(key) else { return nil }
            if let value = try? c.decodeIfPresent(T.self, forKey: key) { return value }
            other[key.stringValue] = try? c.decode(JSONValue.self, forKey: key)
            return nil
        }
        eventID = field(.eventID) ?? ""
        timestamp = field(.timestamp)
        platform = field(.platform) ?? "other"
        level = field(.level) ?? .error
        sdk = field(.sdk)
        release = field(.release)
        environment = field(.environment)
        logentry = field(.logentry)
        user = field(.user)
        tags = field(.tags)
        extra = field(.extra)
        breadcrumbs = field(.breadcrumbs)
        contexts = field(.contexts)
        exception = field(.exception)
        threads = field(.threads)
        debugMeta = field(.debugMeta)
        dist = field(.dist)
        serverName = field(.serverName)
        type = field(.type)
        self.other = other.isEmpty ? nil : other
    }

    /// Encodes the event: each field from its property, or from ``other`` when that holds the field's odd
    /// value; then the members of ``other`` no property models.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        func put<T: Encodable>(_ value: T?, _ key: CodingKeys) throws {
            if let raw = other?[key.stringValue] {
                try c.encode(raw, forKey: key)
            } else {
                try c.encodeIfPresent(value, forKey: key)
            }
        }
        try put(eventID.isEmpty ? nil : eventID, .eventID)  // an event read without one stays without
        try put(timestamp, .timestamp)
        try put(platform, .platform)
        try put(level, .level)
        try put(sdk, .sdk)
        try put(release, .release)
        try put(environment, .environment)
        try put(logentry, .logentry)
        try put(user, .user)
        try put(tags, .tags)
        try put(extra, .extra)
        try put(breadcrumbs, .breadcrumbs)
        try put(contexts, .contexts)
        try put(exception, .exception)
        try put(threads, .threads)
        try put(debugMeta, .debugMeta)
        try put(dist, .dist)
        try put(serverName, .serverName)
        try put(type, .type)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }

    /// The event as UTF-8 JSON with sorted keys and unescaped slashes, in `encoding` (default ``Encoding/report``,
    /// with frame `trust`); `pretty` adds indentation and newlines. Throws `EncodingError.invalidValue` only for
    /// a non-finite number (``timestamp``, an `extra` value).
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
public struct LogEntry: Codable, Equatable, Sendable {
    /// The message as shown (`formatted`).
    public var formatted: String

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// A log entry with the text `formatted`.
    public init(formatted: String) {
        self.formatted = formatted
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case formatted
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type or a missing `formatted`.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        formatted = try c.decode(String.self, forKey: .formatted)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(formatted, forKey: .formatted)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// `user`: who the event happened to; Vaka sends only the id given to ``Vaka/identify(_:)``.
public struct User: Codable, Equatable, Sendable {
    /// The user's id in the program (`id`).
    public var id: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// A user with the id `id`.
    public init(id: String? = nil) {
        self.id = id
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case id
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decodeIfPresent(String.self, forKey: .id)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(id, forKey: .id)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
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

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case name, version, packages, integrations
    }

    /// Decodes SDK info; members no property models go to ``other``. Throws `DecodingError` for a missing
    /// `name` or `version` or a field of the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        version = try c.decode(String.self, forKey: .version)
        packages = try c.decodeIfPresent([SDKPackage].self, forKey: .packages)
        integrations = try c.decodeIfPresent([String].self, forKey: .integrations)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(version, forKey: .version)
        try c.encodeIfPresent(packages, forKey: .packages)
        try c.encodeIfPresent(integrations, forKey: .integrations)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
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
public struct Contexts: Codable, Equatable, Sendable {
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

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case device, os, app
    }

    /// Decodes contexts; the contexts no property models go to ``other``. Throws `DecodingError` for a
    /// modeled context of the wrong shape.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        device = try c.decodeIfPresent(DeviceContext.self, forKey: .device)
        os = try c.decodeIfPresent(OSContext.self, forKey: .os)
        app = try c.decodeIfPresent(AppContext.self, forKey: .app)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the modeled contexts and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(device, forKey: .device)
        try c.encodeIfPresent(os, forKey: .os)
        try c.encodeIfPresent(app, forKey: .app)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// `contexts.device`: the machine.
public struct DeviceContext: Codable, Equatable, Sendable {
    /// CPU architecture as Sentry names it for Linux: `"x86_64"` or `"aarch64"`.
    public var arch: String?

    /// Members of the JSON object no property models (an event from elsewhere), kept as they were and encoded
    /// back (see ``Event/other``); `nil` for the values Vaka builds.
    public var other: [String: JSONValue]?

    /// Creates a device context.
    public init(arch: String? = nil) {
        self.arch = arch
    }

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case arch
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        arch = try c.decodeIfPresent(String.self, forKey: .arch)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(arch, forKey: .arch)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// `contexts.os`: the operating system.
public struct OSContext: Codable, Equatable, Sendable {
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

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case name
        case version
        case kernelVersion = "kernel_version"
        case build
        case distributionName = "distribution_name"
        case distributionVersion = "distribution_version"
        case distributionPrettyName = "distribution_pretty_name"
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decodeIfPresent(String.self, forKey: .name)
        version = try c.decodeIfPresent(String.self, forKey: .version)
        kernelVersion = try c.decodeIfPresent(String.self, forKey: .kernelVersion)
        build = try c.decodeIfPresent(String.self, forKey: .build)
        distributionName = try c.decodeIfPresent(String.self, forKey: .distributionName)
        distributionVersion = try c.decodeIfPresent(String.self, forKey: .distributionVersion)
        distributionPrettyName = try c.decodeIfPresent(String.self, forKey: .distributionPrettyName)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(name, forKey: .name)
        try c.encodeIfPresent(version, forKey: .version)
        try c.encodeIfPresent(kernelVersion, forKey: .kernelVersion)
        try c.encodeIfPresent(build, forKey: .build)
        try c.encodeIfPresent(distributionName, forKey: .distributionName)
        try c.encodeIfPresent(distributionVersion, forKey: .distributionVersion)
        try c.encodeIfPresent(distributionPrettyName, forKey: .distributionPrettyName)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}

/// `contexts.app`: the running program.
public struct AppContext: Codable, Equatable, Sendable {
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

    /// Wire names of the fields.
    private enum CodingKeys: String, CodingKey, CaseIterable {
        case appName = "app_name"
        case appVersion = "app_version"
        case appStartTime = "app_start_time"
        case appIdentifier = "app_identifier"
    }

    /// Decodes the value; members no property models go to ``other``. Throws `DecodingError` for a field of
    /// the wrong type.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        appName = try c.decodeIfPresent(String.self, forKey: .appName)
        appVersion = try c.decodeIfPresent(String.self, forKey: .appVersion)
        appStartTime = try c.decodeIfPresent(String.self, forKey: .appStartTime)
        appIdentifier = try c.decodeIfPresent(String.self, forKey: .appIdentifier)
        other = try decoder.otherFields(besides: CodingKeys.self)
    }

    /// Encodes the fields and then ``other``.
    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(appName, forKey: .appName)
        try c.encodeIfPresent(appVersion, forKey: .appVersion)
        try c.encodeIfPresent(appStartTime, forKey: .appStartTime)
        try c.encodeIfPresent(appIdentifier, forKey: .appIdentifier)
        try encoder.encodeOtherFields(other, besides: CodingKeys.self)
    }
}
