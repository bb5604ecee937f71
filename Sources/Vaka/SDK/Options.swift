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
        /// Made acceptable to Relay at ``Vaka/start(_:)`` (``boundedRelease(_:)``: control characters, `/` and
        /// `\` become `_`, cut to 200 UTF-8 bytes), with one `[vaka]` line on stderr when changed.
        public var release: String?
        /// The environment (`environment`, `attrs.environment`). Default `"production"`. Made acceptable to
        /// Relay at ``Vaka/start(_:)`` (``boundedEnvironment(_:)``: control characters, `/` and `\` become `_`,
        /// cut to 64 UTF-8 bytes), with one `[vaka]` line on stderr when changed.
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
        /// Tags put on every event (`tags`); ``Vaka/setTag(_:_:)`` adds more. Default empty. Keys and values are
        /// cut to 200 Unicode scalars at ``Vaka/start(_:)`` (Sentry's tag limits; one `[vaka]` line on stderr
        /// when any is); at most 200 tags are kept, the first by key order (one line when more are given;
        /// ``Vaka/setTag(_:_:)`` beyond 200 removes the tag set longest ago); an event with more tags than its
        /// byte budget holds loses the last ones (``EventBudget``).
        public var tags: [String: String]
        /// Where Vaka keeps its files (`crashes/`, `runs/`, `pending/`, `outbox/`, `symcache/`, `anon_id`). `nil` selects
        /// ``Vaka/defaultStorageDirectory()``: `$XDG_STATE_HOME/vaka/<program name>-<8 hex digits>` (when
        /// `XDG_STATE_HOME` is an absolute path), else `~/.local/state/vaka/<program name>-<8 hex digits>`, the
        /// hex digits a hash of the program's absolute path as started, symbolic links not resolved
        /// (``Vaka/programDirectoryName(argv0:)``), so two programs with the same name in different
        /// directories never share one, and a program started as `/srv/app/current/bin/server` keeps its
        /// directory when a deploy switches `current` to another release. Directories are created with mode 0700, files 0600.
        public var storageDirectory: URL?
        /// The lowest level ``Vaka/logger`` records and sends; calls below it cost one atomic load and a compare
        /// (body and attributes are not evaluated). Default `.info`.
        public var logLevel: LogLevel = .info
        /// Logs at or above this level (and at or above ``logLevel``) also become breadcrumbs: category `log`,
        /// `message` the body, `level` the breadcrumb level (`trace`/`debug` → `debug`, `warn` → `warning`),
        /// `data` the attributes as strings. `nil`: no log becomes a breadcrumb. Default `.info`.
        public var logBreadcrumbLevel: LogLevel? = .info
        /// Further places each recorded log goes (e.g. ``ConsoleLogSink`` for stderr), after the run's journal
        /// (from which logs are sent to Sentry); each sink gets each record once, in this order. Default empty.
        public var logSinks: [any LogSink] = []
        /// Bytes of this run's journal, `<storage>/runs/<run-id>/journal` (see docs/ingest.md, *The journal*):
        /// the memory-mapped file that holds the newest breadcrumbs and the events and logs not yet moved to
        /// `pending/` or `outbox/`, so that they survive the process dying in any way. Default 256 KiB; raised
        /// to 16 KiB and lowered to 64 MiB, rounded to pages. Of it, 3/8 hold breadcrumbs (the newest that fit:
        /// about 1,000 short ones with the default), 3/8 events, 2/8 logs. Not an init parameter: set the property.
        public var journalSize: Int = Journal.defaultSize

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

extension Vaka.Options {
    /// Most UTF-8 bytes of a release (Relay drops a longer `release` from the event, and Sentry refuses the
    /// session of one).
    public static let maxReleaseBytes = 200
    /// Most UTF-8 bytes of an environment (Relay drops a longer `environment`).
    public static let maxEnvironmentBytes = 64
    /// Most Unicode scalars of a user id (``Vaka/identify(_:)``) and of a tag key or value: Sentry's tag value
    /// limit (the user id is also indexed as the `user` tag).
    public static let maxTagChars = 200

    /// `release` as Relay accepts it: ASCII control characters (newline, tab, ...), `/` and `\` (which Relay
    /// refuses in a release) replaced by `_`, then cut to ``maxReleaseBytes`` UTF-8 bytes at a Unicode scalar
    /// boundary. Relay also refuses the exact values `.`, `..`, ` ` (one space), `latest` and the empty string;
    /// those are left as they are (the server then stores the event without a release).
    public static func boundedRelease(_ release: String) -> String {
        bounded(release, maxBytes: maxReleaseBytes)
    }

    /// `environment` as Relay accepts it: ASCII control characters, `/` and `\` replaced by `_`, then cut to
    /// ``maxEnvironmentBytes`` UTF-8 bytes at a Unicode scalar boundary. (`None`, which Relay also refuses, is
    /// left as it is.)
    public static func boundedEnvironment(_ environment: String) -> String {
        bounded(environment, maxBytes: maxEnvironmentBytes)
    }

    /// `s` with ASCII control characters, `/` and `\` replaced by `_`, cut to `maxBytes` UTF-8 bytes at a Unicode
    /// scalar boundary. Returns `s` itself (no copy) when nothing needs to change.
    static func bounded(_ s: String, maxBytes: Int) -> String {
        let clean = !s.utf8.contains { $0 < 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }
        if clean && s.utf8.count <= maxBytes { return s }
        var out = String.UnicodeScalarView()
        var bytes = 0
        for scalar in s.unicodeScalars {
            let v = scalar.value
            let replaced: Unicode.Scalar = (v < 0x20 || v == 0x7F || scalar == "/" || scalar == "\\") ? "_" : scalar
            let size = UTF8.width(replaced)
            if bytes + size > maxBytes { break }
            out.append(replaced)
            bytes += size
        }
        return String(out)
    }

    /// `s` cut to `maxChars` Unicode scalars (no mark added), or `s` itself when not longer.
    static func cut(_ s: String, maxChars: Int) -> String {
        if s.utf8.count <= maxChars { return s }  // at least one byte per scalar
        let scalars = s.unicodeScalars
        guard scalars.count > maxChars else { return s }
        return String(String.UnicodeScalarView(scalars.prefix(maxChars)))
    }

    /// These options with ``release``, ``environment`` and ``tags`` made acceptable to Sentry (see each
    /// property), and at most ``RunScope/maxTags`` tags (the first by key order). `note` gets one line per field that was changed (``Vaka/start(_:)`` prints it on stderr):
    /// a value set by mistake (a whole file read into `release`) would otherwise make every event too large or
    /// be dropped by the server.
    func bounded(note: (String) -> Void) -> Vaka.Options {
        var o = self
        if let release, case let b = Self.boundedRelease(release), b != release {
            o.release = b
            note("release of \(release.utf8.count) bytes changed to \(b.utf8.count) bytes (Relay refuses a release over \(Self.maxReleaseBytes) bytes or with control characters, / or \\)")
        }
        let env = Self.boundedEnvironment(environment)
        if env != environment {
            o.environment = env
            note("environment of \(environment.utf8.count) bytes changed to \(env.utf8.count) bytes (Relay refuses an environment over \(Self.maxEnvironmentBytes) bytes or with control characters, / or \\)")
        }
        if tags.contains(where: { $0.key.utf8.count > Self.maxTagChars || $0.value.utf8.count > Self.maxTagChars }) {
            var cutTags: [String: String] = [:]
            var changed = 0
            for (key, value) in tags {
                let k = Self.cut(key, maxChars: Self.maxTagChars), v = Self.cut(value, maxChars: Self.maxTagChars)
                if k != key || v != value { changed += 1 }
                cutTags[k] = v
            }
            if changed > 0 {
                o.tags = cutTags
                note("\(changed) tag(s) cut to \(Self.maxTagChars) characters per key and value (Sentry's tag limits)")
            }
        }
        if o.tags.count > RunScope.maxTags {
            let count = o.tags.count
            o.tags = RunScope.bounded(tags: o.tags).tags
            note("\(count - o.tags.count) of \(count) tags left out: a run keeps at most \(RunScope.maxTags) tags (the first by key order)")
        }
        return o
    }
}
