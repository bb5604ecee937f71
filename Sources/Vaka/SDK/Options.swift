import Foundation

extension Vaka {
    /// Settings for ``Vaka/start(_:)``. Every parameter has a default; see each property.
    ///
    /// Where to send: ``dsn`` (`https://KEY@host/PROJECT`), or the same facts as ``init(key:endpoint:release:environment:crashReporting:sessionTracking:sessionTimeout:flushInterval:maxBatchSize:debug:enabled:tags:storageDirectory:)``
    /// (`endpoint` = `https://host/api/PROJECT`). With neither, envelopes are written to
    /// `<storageDirectory>/outbox/` instead of being sent (read them with `vaka outbox list|show`).
    public struct Options: Sendable {
        /// The Sentry DSN, `{scheme}://{public_key}[:{secret}]@{host}[:{port}][/{path_prefix}]/{project_id}`
        /// (`host` a name, IPv4 or `[IPv6]` address; scheme http/https in any case). `nil` (and no ``key`` or
        /// ``endpoint``): `$SENTRY_DSN` when set and not empty, else outbox mode.
        /// A DSN that does not parse (also an empty one) is reported on stderr (always, not only with ``debug``)
        /// and gives outbox mode: nothing is sent. So is a `$SENTRY_DSN` that does not parse (one
        /// `[vaka] invalid SENTRY_DSN (...)` line).
        public var dsn: String?
        /// The project's public key, when given with ``endpoint`` instead of a ``dsn``.
        public var key: String?
        /// `{scheme}://{host}[:{port}]/api/{project_id}`, used with ``key``.
        public var endpoint: String?
        /// The release every event and session carries (`release`, `attrs.release`). `nil` selects
        /// `$VAKA_RELEASE` when set, else `$SENTRY_RELEASE` when set, else ``Vaka/defaultRelease()``
        /// (`<executable name>@0.0.0+<first 12 hex digits of the executable's GNU build ID>`, e.g.
        /// `myapp@0.0.0+68220ae2c65d`, else `<executable name>@0.0.0`).
        /// Made acceptable to Relay at ``Vaka/start(_:)`` (``boundedRelease(_:)``: control characters, `/` and
        /// `\` become `_`, cut to 200 UTF-8 bytes), with one `[vaka]` line on stderr when changed.
        public var release: String?
        /// The environment (`environment`, `attrs.environment`). Default: `$SENTRY_ENVIRONMENT` when set and
        /// not empty, else `"production"`; a value given in code (``init(dsn:release:environment:crashReporting:sessionTracking:sessionTimeout:flushInterval:maxBatchSize:debug:enabled:tags:storageDirectory:)``
        /// or this property) wins. Made acceptable to Relay at ``Vaka/start(_:)`` (``boundedEnvironment(_:)``:
        /// control characters, `/` and `\` become `_`, cut to 64 UTF-8 bytes), with one `[vaka]` line on stderr
        /// when changed.
        public var environment: String { didSet { environmentGiven = true } }
        /// Whether ``environment`` was given in code (then `$SENTRY_ENVIRONMENT` is not read).
        var environmentGiven = false
        /// Install the crash handlers and send last run's crash at the next start. Default `true`.
        public var crashReporting: Bool
        /// Track a release-health session per process run (`ok` → `exited` / `crashed` / `abnormal`). Default `true`.
        public var sessionTracking: Bool
        /// Seconds of inactivity after which a session would end on platforms with a background state.
        /// Accepted for API parity; on Linux a session lasts from ``Vaka/start(_:)`` to process exit, so it is
        /// not used. Default 30.
        public var sessionTimeout: TimeInterval
        /// Seconds between automatic sends of queued envelopes, 0.1...86,400. Default 10. NaN counts as 10; a
        /// value outside the range is clamped, with one `[vaka]` line on stderr.
        public var flushInterval: TimeInterval
        /// Envelopes per batch file, and the batch size that triggers a send at once, 1...1,000. Default 50. A
        /// value outside the range is clamped, with one `[vaka]` line on stderr.
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
        /// Where Vaka keeps its files (`crashes/`, `runs/`, `sessions/`, `pending/`, `outbox/`, `symcache/`, `anon_id`,
        /// `client_reports.json` and `client_reports.lock` once something was dropped). `nil` selects
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
        /// to 16 KiB and lowered to 64 MiB (with one `[vaka]` line on stderr), rounded to pages. Of it, 3/8 hold breadcrumbs (the newest that fit:
        /// about 1,000 short ones with the default), 3/8 events, 2/8 logs. Not an init parameter: set the property.
        public var journalSize: Int = Journal.defaultSize

        /// The share of events from ``Vaka/capture(_:)`` and ``Vaka/capture(message:level:)`` that are kept,
        /// 0...1: each such event is kept with this probability, decided on the calling thread before anything
        /// is recorded; one not kept is counted in a client report (reason `sample_rate`, category `error`), and a
        /// handled error not kept still counts in the session's `errors` (as in Sentry's SDKs).
        /// Crash events are **always** kept, and so are ``Vaka/track(_:_:)`` and ``Vaka/screen(_:)`` events,
        /// sessions and logs. Default 1 (all). NaN counts as 1; a value outside 0...1 is clamped, with one
        /// `[vaka]` line on stderr.
        public var sampleRate: Double = 1
        /// Most breadcrumbs an event carries (its last ones), 0...100; also the memory ring used without a
        /// journal. Default 100. A value outside 0...100 is clamped, with one `[vaka]` line on stderr.
        public var maxBreadcrumbs: Int = 100
        /// Called with every event just before it is queued: return it (changed or not) to send it, `nil` to
        /// drop it (counted in a client report: reason `before_send`, category `error`). Runs for handled
        /// errors, messages, ``Vaka/track(_:_:)`` and ``Vaka/screen(_:)`` events **on the mover thread**
        /// (`vaka.journal`), not on the thread that captured them (events still in the journal when
        /// ``Vaka/flush(timeout:)`` or ``Vaka/close(timeout:)`` is called are moved, and the hook called, on
        /// that caller's thread; without a journal, on the capturing thread), and for a crash **at the next launch**, on
        /// the `vaka.start` thread (the crashed run's event, with that run's scope), or on the thread calling
        /// ``Vaka/flush(timeout:)``/``Vaka/close(timeout:)`` (or exiting) when that call comes before the
        /// `vaka.start` thread has begun (it then does start's background part itself). It sees the event complete:
        /// contexts, breadcrumbs, the in-app marking, and the ``sendDefaultPii`` rule applied; the size
        /// limits are applied after it; its `event_id` cannot be changed (it is kept). A crash it drops is not sent again (its report is deleted); the
        /// crashed session's update is still sent. It cannot throw; a hook that traps crashes the app, as in
        /// any SDK. It may call back into Vaka: ``Vaka/flush(timeout:)`` from it sends what is queued without
        /// moving the journal, ``Vaka/close(timeout:)`` ends the run on a thread of its own (`vaka.close`) once
        /// the hook has returned, and an event it captures is sent without passing through it (else each event
        /// would capture one more, without end). Default `nil`.
        public var beforeSend: (@Sendable (Event) -> Event?)? = nil
        /// Called with every breadcrumb on the thread that adds it, before it is recorded: return it (changed or
        /// not) to keep it, `nil` to drop it. Breadcrumbs made by ``Vaka/screen(_:)`` and by logs
        /// (``logBreadcrumbLevel``) pass through it too. Without it, ``Vaka/addBreadcrumb(category:message:)``
        /// stays one lock-free journal append; with it, each breadcrumb is built as a ``Breadcrumb`` value
        /// first. A breadcrumb added from inside the hook (directly, or by a log it writes) is kept as given,
        /// not passed to the hook again. Default `nil`.
        public var beforeBreadcrumb: (@Sendable (Breadcrumb) -> Breadcrumb?)? = nil
        /// Frames whose image is one of these are marked `in_app: true`: each entry is a prefix of the image's
        /// file name (`libMyKit`) or of its path (`/opt/myapp/`). Wins over ``inAppExclude``. Applied to every
        /// frame of every event, crash events included (exceptions and threads). Default empty: Vaka's own
        /// rule (the executable and libraries beside it, not the Swift runtime or system libraries).
        public var inAppInclude: [String] = []
        /// Frames whose image is one of these (file name or path prefixes, as ``inAppInclude``) are marked
        /// `in_app: false`, unless ``inAppInclude`` names them too. Default empty.
        public var inAppExclude: [String] = []
        /// Send personally identifiable data that Vaka gathers itself. `false` (default): no host name
        /// (`server_name`, unless ``serverName`` is given), no user IP address (none is added; one the app sets
        /// itself is sent), and the user's home directory (`$HOME`, else the password database's) replaced by
        /// `~` in paths: frames' `filename`, `abs_path` and `package`, images' `code_file` and `debug_file`,
        /// `contexts.app.app_identifier`, and exception values (a crash message may quote a path). Messages,
        /// breadcrumbs, tags and extra are the app's own text and are left alone. `true`: `server_name` is the
        /// host name (`gethostname`), `user.ip_address` is `{{auto}}` when the app set none (the server takes
        /// the address the envelope came from), paths are left as they are.
        public var sendDefaultPii: Bool = false
        /// `server_name` of every event (Sentry shows it as the tag `server_name`). Default `nil`: none, or the
        /// host name with ``sendDefaultPii``. Cut to 200 characters (``EventBudget``).
        public var serverName: String? = nil
        /// `dist` of every event: the build of the ``release`` (e.g. a build number). Default `nil`. Cut to 64
        /// characters (``EventBudget``; Relay drops a longer one).
        public var dist: String? = nil
        /// Add the calling thread's stack to ``Vaka/capture(message:level:)`` events, as `threads.values[0]`
        /// (`{"name": <thread name, when it has one>, "current": true, "crashed": false, "stacktrace": {frames}}`, frames oldest
        /// first, the caller of `capture` last, symbolicated like a handled error's) with `debug_meta.images`.
        /// Costs a stack walk per message. Default `false`.
        public var attachStacktrace: Bool = false
        /// Seconds ``Vaka/close(timeout:)`` (without a timeout) and the exit hook wait for queued envelopes to be
        /// sent before giving up (what is left stays in `pending/` for the next launch). Default 2. Clamped to
        /// 0...86,400 (NaN: 0).
        public var shutdownTimeout: TimeInterval = 2
        /// Count what Vaka drops (sampling, ``beforeSend``, caps, envelopes the server refuses for good) and send
        /// it as Sentry client reports (`client_report` items in the next envelope; docs/ingest.md). Default `true`.
        public var sendClientReports: Bool = true

        /// Options with a DSN (or none: outbox mode). Parameters are described on the properties.
        public init(dsn: String? = nil, release: String? = nil, environment: String? = nil,
                    crashReporting: Bool = true, sessionTracking: Bool = true, sessionTimeout: TimeInterval = 30,
                    flushInterval: TimeInterval = 10, maxBatchSize: Int = 50, debug: Bool = false,
                    enabled: Bool = true, tags: [String: String] = [:], storageDirectory: URL? = nil) {
            self.dsn = dsn
            self.release = release
            self.environment = environment ?? Options.defaultEnvironment
            environmentGiven = environment != nil
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
        public init(key: String, endpoint: String, release: String? = nil, environment: String? = nil,
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
    /// The environment when neither the code nor `$SENTRY_ENVIRONMENT` gives one: `production`.
    public static let defaultEnvironment = "production"

    /// These options completed from the environment variables Sentry's SDKs read, each only when the code did
    /// not give the value: ``dsn`` from `SENTRY_DSN` (when no DSN, key or endpoint is given), ``release`` from
    /// `SENTRY_RELEASE` (when `VAKA_RELEASE` is not set either), ``environment`` from `SENTRY_ENVIRONMENT`, each
    /// without leading and trailing whitespace and line ends. An empty (or blank) variable counts as not set. A value that cannot be used gives one line to `note` and is left
    /// out or changed: a `SENTRY_DSN` that does not parse is ignored (outbox mode: nothing is sent), a
    /// release or environment Relay would refuse is bounded (``boundedRelease(_:)``, ``boundedEnvironment(_:)``);
    /// so is `VAKA_RELEASE`, which ``Vaka/defaultRelease()`` takes.
    /// `variable` reads one variable (`getenv` in the SDK).
    func fromEnvironment(_ variable: (String) -> String?, note: (String) -> Void) -> Vaka.Options {
        var o = self
        func value(_ name: String) -> String? {
            // Without surrounding blanks and line ends (a value read from a file, a CRLF `.env`), as Sentry's SDKs.
            guard let v = variable(name)?.trimmingCharacters(in: .whitespacesAndNewlines), !v.isEmpty else { return nil }
            return v
        }
        if dsn == nil, key == nil, endpoint == nil, let env = value("SENTRY_DSN") {
            do {
                _ = try DSN(env)
                o.dsn = env
            } catch {
                note("invalid SENTRY_DSN (\(error)): ignored; nothing will be sent, envelopes are written to the outbox")
            }
        }
        if release == nil, let env = value("VAKA_RELEASE") {
            // Taken by ``Vaka/defaultRelease()``, bounded the same way: said here, as for `SENTRY_RELEASE`.
            let b = Self.boundedRelease(env)
            if b != env { note("VAKA_RELEASE \(Self.quoted(env)) changed to \(Self.quoted(b)) (Relay refuses a release over \(Self.maxReleaseBytes) bytes or with control characters, / or \\)") }
        }
        if release == nil, value("VAKA_RELEASE") == nil, let env = value("SENTRY_RELEASE") {
            let b = Self.boundedRelease(env)
            if b != env { note("SENTRY_RELEASE \(Self.quoted(env)) changed to \(Self.quoted(b)) (Relay refuses a release over \(Self.maxReleaseBytes) bytes or with control characters, / or \\)") }
            o.release = b
        }
        if !environmentGiven, let env = value("SENTRY_ENVIRONMENT") {
            let b = Self.boundedEnvironment(env)
            if b != env { note("SENTRY_ENVIRONMENT \(Self.quoted(env)) changed to \(Self.quoted(b)) (Relay refuses an environment over \(Self.maxEnvironmentBytes) bytes or with control characters, / or \\)") }
            o.environment = b
        }
        return o
    }

    /// Reads one environment variable with `getenv(3)` (not the whole environment copied into a dictionary).
    static func environmentVariable(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

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

    /// Most Unicode scalars of a value quoted in a `[vaka]` line (``quoted(_:)``).
    static let maxQuotedChars = 40

    /// `s` for a `[vaka]` line: in double quotes with control characters, quotes and backslashes escaped as in
    /// Swift source (`"a/b\nc"`); one over ``maxQuotedChars`` scalars is cut there, marked `…`, and followed by
    /// its whole size in UTF-8 bytes (`"aaaa…" (300 bytes)`).
    static func quoted(_ s: String) -> String {
        let scalars = s.unicodeScalars
        guard scalars.count > maxQuotedChars else { return s.debugDescription }
        let head = String(String.UnicodeScalarView(scalars.prefix(maxQuotedChars))).debugDescription
        return "\(head.dropLast())…\" (\(s.utf8.count) bytes)"
    }

    /// `s` cut to `maxChars` Unicode scalars (no mark added), or `s` itself when not longer.
    static func cut(_ s: String, maxChars: Int) -> String {
        if s.utf8.count <= maxChars { return s }  // at least one byte per scalar
        let scalars = s.unicodeScalars
        guard scalars.count > maxChars else { return s }
        return String(String.UnicodeScalarView(scalars.prefix(maxChars)))
    }

    /// `value` within `range`: the nearer bound when outside, with one note (`name value is outside lo...hi<unit>;
    /// using v`).
    static func clamped(_ value: Int, to range: ClosedRange<Int>, _ name: String, unit: String = "",
                        note: (String) -> Void) -> Int {
        guard !range.contains(value) else { return value }
        let kept = min(max(value, range.lowerBound), range.upperBound)
        note("\(name) \(value) is outside \(range.lowerBound)...\(range.upperBound)\(unit); using \(kept)")
        return kept
    }

    /// Seconds ``flushInterval`` may be: 0.1 ... 86,400 (NaN counts as 10).
    static let flushIntervalRange: ClosedRange<Double> = 0.1...Bounded.maxDelay
    /// Envelopes ``maxBatchSize`` may be: 1 ... 1,000.
    static let maxBatchSizeRange: ClosedRange<Int> = 1...1_000
    /// Bytes ``journalSize`` may be: 16 KiB ... 64 MiB (the journal rounds it up to whole pages).
    static let journalSizeRange: ClosedRange<Int> = (16 * 1024)...(64 * 1024 * 1024)  // VAKA_JOURNAL_MIN/MAX_SIZE

    /// These options as ``Vaka/start(_:)`` uses them: first completed from `SENTRY_DSN`, `SENTRY_RELEASE` and
    /// `SENTRY_ENVIRONMENT` (``fromEnvironment(_:note:)``; `variable` reads one, `getenv` by default), then
    /// with ``release``, ``environment`` and ``tags`` made acceptable to Sentry (see each property), at most
    /// ``RunScope/maxTags`` tags (the first by key order), and ``sampleRate``, ``maxBreadcrumbs``,
    /// ``shutdownTimeout``, ``flushInterval``, ``maxBatchSize`` and ``journalSize`` within their ranges. `note` gets one line per field that was changed or refused
    /// (``Vaka/start(_:)`` prints it on stderr): a value set by mistake (a whole file read into `release`)
    /// would otherwise make every event too large or be dropped by the server.
    func bounded(variable: (String) -> String? = Vaka.Options.environmentVariable, note: (String) -> Void) -> Vaka.Options {
        var o = self.fromEnvironment(variable, note: note)
        let release = o.release, environment = o.environment, tags = o.tags
        if sampleRate.isNaN {
            o.sampleRate = 1
            note("sampleRate NaN: using 1 (every event kept)")
        } else if !(0...1).contains(sampleRate) {
            o.sampleRate = min(max(sampleRate, 0), 1)
            note("sampleRate \(sampleRate) is outside 0...1; using \(o.sampleRate)")
        }
        o.maxBreadcrumbs = Self.clamped(maxBreadcrumbs, to: 0...EventBudget.maxBreadcrumbs, "maxBreadcrumbs", note: note)
        if shutdownTimeout.isNaN || !(0...Bounded.maxDelay).contains(shutdownTimeout) {
            o.shutdownTimeout = Bounded.timeout(shutdownTimeout)
            note("shutdownTimeout \(shutdownTimeout) is outside 0...\(Bounded.maxDelay) s; using \(o.shutdownTimeout)")
        }
        if flushInterval.isNaN || !(Self.flushIntervalRange).contains(flushInterval) {
            o.flushInterval = flushInterval.isNaN ? 10 : min(max(flushInterval, Self.flushIntervalRange.lowerBound),
                                                               Self.flushIntervalRange.upperBound)
            note("flushInterval \(flushInterval) is outside \(Self.flushIntervalRange.lowerBound)...\(Self.flushIntervalRange.upperBound) s; using \(o.flushInterval)")
        }
        o.maxBatchSize = Self.clamped(maxBatchSize, to: Self.maxBatchSizeRange, "maxBatchSize", note: note)
        o.journalSize = Self.clamped(journalSize, to: Self.journalSizeRange, "journalSize", unit: " bytes", note: note)
        if let release, case let b = Self.boundedRelease(release), b != release {
            o.release = b
            note("release \(Self.quoted(release)) changed to \(Self.quoted(b)) (Relay refuses a release over \(Self.maxReleaseBytes) bytes or with control characters, / or \\)")
        }
        let env = Self.boundedEnvironment(environment)
        if env != environment {
            o.environment = env
            note("environment \(Self.quoted(environment)) changed to \(Self.quoted(env)) (Relay refuses an environment over \(Self.maxEnvironmentBytes) bytes or with control characters, / or \\)")
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
