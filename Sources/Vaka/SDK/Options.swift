import Foundation

extension Vaka {
    /// Settings for ``Vaka/start(_:)``. Every parameter has a default; see each property.
    ///
    /// Where to send: ``dsn`` (`https://KEY@host/PROJECT`), or the same facts as ``init(key:endpoint:release:environment:crashReporting:sessionTracking:sessionTimeout:flushInterval:maxBatchSize:debug:enabled:tags:storageDirectory:)``
    /// (`endpoint` = `https://host/api/PROJECT`). With neither, envelopes are written to
    /// `<storageDirectory>/outbox/` instead of being sent (read them with `vaka outbox list|show`).
    public struct Options: Sendable {
        /// The Sentry DSN, `{scheme}://{public_key}[:{secret}]@{host}[:{port}][/{path_prefix}]/{project_id}`
        /// (`host` a name, IPv4 or `[IPv6]` address; scheme http/https in any case); `nil` = outbox mode.
        /// A DSN that does not parse (also an empty one) is reported on stderr (always, not only with ``debug``)
        /// and gives outbox mode: nothing is sent.
        public var dsn: String?
        /// The project's public key, when given with ``endpoint`` instead of a ``dsn``.
        public var key: String?
        /// `{scheme}://{host}[:{port}]/api/{project_id}`, used with ``key``.
        public var endpoint: String?
        /// The release every event and session carries (`release`, `attrs.release`). `nil` selects
        /// ``Vaka/defaultRelease()``: `$VAKA_RELEASE` when set, else `<executable name>@0.0.0+<first 12 hex
        /// digits of the executable's GNU build ID>` (e.g. `myapp@0.0.0+68220ae2c65d`), else `<executable name>@0.0.0`.
        public var release: String?
        /// The environment (`environment`, `attrs.environment`). Default `"production"`.
        public var environment: String
        /// Install the crash handlers and send last run's crash at the next start. Default `true`.
        public var crashReporting: Bool
        /// Track a release-health session per process run (`ok` → `exited` / `crashed` / `abnormal`). Default `true`.
        public var sessionTracking: Bool
        /// Seconds of inactivity after which a session would end on platforms with a background state.
        /// Accepted for API parity; on Linux a session lasts from ``Vaka/start(_:)`` to process exit, so it is
        /// not used. Default 30.
        public var sessionTimeout: TimeInterval
        /// Seconds between automatic sends of queued envelopes. Default 10.
        public var flushInterval: TimeInterval
        /// Envelopes per batch file, and the batch size that triggers a send at once. Default 50.
        public var maxBatchSize: Int
        /// Log what the SDK does to stderr (`[vaka] ...` lines). The key is never printed. Default `false`.
        public var debug: Bool
        /// `false` makes every call a no-op (nothing installed, written or sent). Default `true`.
        public var enabled: Bool
        /// Tags put on every event (`tags`); ``Vaka/setTag(_:_:)`` adds more. Default empty.
        public var tags: [String: String]
        /// Where Vaka keeps its files (`crashes/`, `runs/`, `pending/`, `outbox/`, `anon_id`). `nil` selects
        /// `$XDG_STATE_HOME/vaka/<executable name>` (when `XDG_STATE_HOME` is an absolute path), else
        /// `~/.local/state/vaka/<executable name>`. Directories are created with mode 0700, files 0600.
        public var storageDirectory: URL?

        /// Options with a DSN (or none: outbox mode). Parameters are described on the properties.
        public init(dsn: String? = nil, release: String? = nil, environment: String = "production",
                    crashReporting: Bool = true, sessionTracking: Bool = true, sessionTimeout: TimeInterval = 30,
                    flushInterval: TimeInterval = 10, maxBatchSize: Int = 50, debug: Bool = false,
                    enabled: Bool = true, tags: [String: String] = [:], storageDirectory: URL? = nil) {
            self.dsn = dsn
            self.release = release
            self.environment = environment
            self.crashReporting = crashReporting
            self.sessionTracking = sessionTracking
            self.sessionTimeout = sessionTimeout
            self.flushInterval = flushInterval
            self.maxBatchSize = maxBatchSize
            self.debug = debug
            self.enabled = enabled
            self.tags = tags
            self.storageDirectory = storageDirectory
        }

        /// Options with a public key and an endpoint (`https://host/api/PROJECT`) instead of a DSN.
        /// Other parameters are described on the properties.
        public init(key: String, endpoint: String, release: String? = nil, environment: String = "production",
                    crashReporting: Bool = true, sessionTracking: Bool = true, sessionTimeout: TimeInterval = 30,
                    flushInterval: TimeInterval = 10, maxBatchSize: Int = 50, debug: Bool = false,
                    enabled: Bool = true, tags: [String: String] = [:], storageDirectory: URL? = nil) {
            self.init(dsn: nil, release: release, environment: environment, crashReporting: crashReporting,
                      sessionTracking: sessionTracking, sessionTimeout: sessionTimeout, flushInterval: flushInterval,
                      maxBatchSize: maxBatchSize, debug: debug, enabled: enabled, tags: tags,
                      storageDirectory: storageDirectory)
            self.key = key
            self.endpoint = endpoint
        }

        /// The parsed destination: `nil` (outbox mode) when neither a DSN nor a key or endpoint is given.
        /// Throws ``DSNError`` when the DSN or key/endpoint is malformed — also an empty DSN, and a key without an
        /// endpoint or the reverse (destinations that can never work; `Vaka.start` refuses them with a line).
        func parsedDSN() throws -> DSN? {
            if let dsn { return try DSN(dsn) }
            if key != nil || endpoint != nil { return try DSN(key: key ?? "", endpoint: endpoint ?? "") }
            return nil
        }
    }
}
