import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The one step every event goes through before the size limits (``EventFactory/finalize(_:budget:log:)``):
/// events of this run on the mover thread (``JournalMover``: handled errors, messages, `track`, `screen`, and a
/// dead run's journalled events at the next launch), and crash events at the next launch on the `vaka.start`
/// thread (``Client/fatalEnvelope(report:previous:builder:eventID:journal:)``). In this order:
/// 0. the breadcrumbs cut to their last ``Vaka/Options/maxBreadcrumbs``;
/// 1. in-app marking: ``Vaka/Options/inAppInclude`` / ``Vaka/Options/inAppExclude`` on every frame of the
///    exceptions' and threads' stack traces (``isInApp(package:)``);
/// 2. `server_name` (``Vaka/Options/serverName``, else the host name with ``Vaka/Options/sendDefaultPii``) and
///    `dist` (``Vaka/Options/dist``), each only when the event has none;
/// 3. the PII rule (``Vaka/Options/sendDefaultPii``): without it the home directory becomes `~` in paths; with
///    it `user.ip_address` is `{{auto}}` when not set;
/// 4. ``Vaka/Options/beforeSend``: `nil` drops the event, counted in ``ClientReports`` (`before_send`, `error`);
///    the `event_id` of an event it returns is kept as it was, and a NaN or infinite `timestamp` it set (the
///    event's, a breadcrumb's) is the event's again;
/// 5. tags Relay would remove made keepable (``keepableTags(_:)``).
struct EventProcessor: Sendable {
    /// Where the event comes from (for the documentation of the hook's thread; both are processed alike).
    enum Kind: Sendable {
        /// Captured by this run or a dead run's journal (mover thread, or the crash join for a dead run).
        case captured
        /// A crash of an earlier run, at the next launch (`vaka.start` thread).
        case crash
    }

    /// ``Vaka/Options/inAppInclude``.
    var inAppInclude: [String] = []
    /// ``Vaka/Options/inAppExclude``.
    var inAppExclude: [String] = []
    /// ``Vaka/Options/sendDefaultPii``.
    var sendDefaultPii = false
    /// ``Vaka/Options/serverName``.
    var serverName: String?
    /// ``Vaka/Options/dist``.
    var dist: String?
    /// ``Vaka/Options/maxBreadcrumbs``: how many breadcrumbs the mover and the crash join give an event.
    var maxBreadcrumbs = EventBudget.maxBreadcrumbs
    /// ``Vaka/Options/beforeSend``.
    var beforeSend: (@Sendable (Event) -> Event?)?
    /// Where a dropped event is counted.
    var reports: ClientReports?
    /// The home directory to replace by `~` (``homeDirectory()``; `nil`: none).
    var home: String? = EventProcessor.homeDirectory()

    /// A processor that changes nothing (tests, and code without options).
    init() {}

    /// The processor of `options`, counting drops in `reports`.
    init(options: Vaka.Options, reports: ClientReports?) {
        inAppInclude = options.inAppInclude
        inAppExclude = options.inAppExclude
        sendDefaultPii = options.sendDefaultPii
        serverName = options.serverName
        dist = options.dist
        maxBreadcrumbs = min(max(options.maxBreadcrumbs, 0), EventBudget.maxBreadcrumbs)
        beforeSend = options.beforeSend
        self.reports = reports
    }

    /// The meta attribute marking a journalled event captured from inside ``beforeSend`` (``process(_:kind:runsBeforeSend:)``).
    static let capturedInBeforeSendKey = "captured_in_before_send"

    /// `event` after the steps in the type's documentation, or `nil` when ``beforeSend`` dropped it (counted).
    /// `runsBeforeSend` `false` (an event captured from inside the hook): the hook is not called, which would
    /// otherwise capture again for every event it sees, without end.
    func process(_ event: Event, kind: Kind, runsBeforeSend: Bool = true) -> Event? {
        var event = event
        if let crumbs = event.breadcrumbs, crumbs.values.count > maxBreadcrumbs {
            event.breadcrumbs = maxBreadcrumbs == 0 ? nil : ValueList(Array(crumbs.values.suffix(maxBreadcrumbs)))
        }
        if !inAppInclude.isEmpty || !inAppExclude.isEmpty { markInApp(&event) }
        if event.serverName == nil { event.serverName = serverName ?? (sendDefaultPii ? EventProcessor.hostName() : nil) }
        if event.dist == nil, let dist { event.dist = dist }
        if sendDefaultPii {
            EventProcessor.addAutomaticIPAddress(&event)
        } else if let home {
            EventProcessor.replaceHome(home, in: &event)
        }
        guard let beforeSend, runsBeforeSend else {
            EventProcessor.keepableTags(&event)
            return event
        }
        guard var kept = HookThread.running(.beforeSend, { beforeSend(event) }) else {
            reports?.record(.beforeSend, category: "error")
            return nil
        }
        kept.eventID = event.eventID  // the envelope header, deduplication and the crash ledger go by it
        // Times JSON cannot hold (which would make the event unencodable) are the event's own again.
        if !(kept.timestamp?.isFinite ?? true) { kept.timestamp = event.timestamp }
        if var crumbs = kept.breadcrumbs, crumbs.values.contains(where: { !$0.timestamp.isFinite }) {
            for i in crumbs.values.indices where !crumbs.values[i].timestamp.isFinite {
                crumbs.values[i].timestamp = kept.timestamp ?? Date().timeIntervalSince1970
            }
            kept.breadcrumbs = crumbs
        }
        EventProcessor.keepableTags(&kept)
        return kept
    }

    // MARK: - Tags

    /// Makes every tag one Relay keeps (it removes a tag whose key or value is empty or holds a line break, with
    /// an error): control characters and line breaks become spaces, then a tag with an empty key or value is left
    /// out. Tags within these rules are left as they are.
    static func keepableTags(_ event: inout Event) {
        func bad(_ c: Character) -> Bool {
            c.isNewline || c.unicodeScalars.contains { $0.properties.generalCategory == .control }
        }
        guard let tags = event.tags,
              tags.contains(where: { $0.key.isEmpty || $0.value.isEmpty || $0.key.contains(where: bad) || $0.value.contains(where: bad) })
        else { return }
        var out: [String: String] = [:]
        for (key, value) in tags {
            let k = String(key.map { bad($0) ? " " : $0 }), v = String(value.map { bad($0) ? " " : $0 })
            if !k.isEmpty && !v.isEmpty { out[k] = v }
        }
        event.tags = out.isEmpty ? nil : out
    }

    // MARK: - In-app

    /// `true`/`false` when ``inAppInclude`` / ``inAppExclude`` names the frame's image (`package`: its path),
    /// `nil` when neither does (the frame keeps its marking). An entry matches when it is a prefix of the
    /// image's path or of its file name; include wins.
    func isInApp(package: String?) -> Bool? {
        guard let package, !package.isEmpty else { return nil }
        let name = package.split(separator: "/").last.map(String.init) ?? package
        func matches(_ prefixes: [String]) -> Bool {
            prefixes.contains { !$0.isEmpty && (package.hasPrefix($0) || name.hasPrefix($0)) }
        }
        if matches(inAppInclude) { return true }
        if matches(inAppExclude) { return false }
        return nil
    }

    private func markInApp(_ event: inout Event) {
        func mark(_ trace: inout Stacktrace?) {
            guard var t = trace else { return }
            for i in t.frames.indices {
                if let inApp = isInApp(package: t.frames[i].package) { t.frames[i].inApp = inApp }
            }
            trace = t
        }
        if var exceptions = event.exception {
            for i in exceptions.values.indices { mark(&exceptions.values[i].stacktrace) }
            event.exception = exceptions
        }
        if var threads = event.threads {
            for i in threads.values.indices { mark(&threads.values[i].stacktrace) }
            event.threads = threads
        }
    }

    // MARK: - PII

    /// The user's home directory: `$HOME` when it is an absolute path, else the password database's; `nil`
    /// when neither is usable or it is `/` (nothing to hide, and every path would match).
    static func homeDirectory() -> String? {
        var home = Vaka.Options.environmentVariable("HOME").flatMap { $0.hasPrefix("/") ? $0 : nil }
        if home == nil, let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir { home = String(cString: dir) }
        guard let home else { return nil }
        let path = PrivateFiles.trimmingTrailingSlashes(home)
        return path == "/" || path.isEmpty ? nil : path
    }

    /// The host name (`gethostname`), `nil` when it cannot be read or is empty.
    static func hostName() -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return nil }
        let name = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? nil : name
    }

    /// `path` with a leading `home` (the whole path, or followed by `/`) replaced by `~`.
    static func tilde(_ path: String?, home: String) -> String? {
        guard let path, path.hasPrefix(home) else { return path }
        if path.utf8.count == home.utf8.count { return "~" }
        let rest = path.dropFirst(home.count)
        return rest.hasPrefix("/") ? "~" + rest : path
    }

    /// Replaces the home directory by `~` in the paths listed at ``Vaka/Options/sendDefaultPii``.
    static func replaceHome(_ home: String, in event: inout Event) {
        func frames(_ trace: inout Stacktrace?) {
            guard var t = trace else { return }
            for i in t.frames.indices {
                t.frames[i].filename = tilde(t.frames[i].filename, home: home)
                t.frames[i].absPath = tilde(t.frames[i].absPath, home: home)
                t.frames[i].package = tilde(t.frames[i].package, home: home)
            }
            trace = t
        }
        if var exceptions = event.exception {
            for i in exceptions.values.indices {
                frames(&exceptions.values[i].stacktrace)
                if let value = exceptions.values[i].value, value.contains(home + "/") {
                    exceptions.values[i].value = value.replacingOccurrences(of: home + "/", with: "~/")
                }
            }
            event.exception = exceptions
        }
        if var threads = event.threads {
            for i in threads.values.indices { frames(&threads.values[i].stacktrace) }
            event.threads = threads
        }
        if var meta = event.debugMeta {
            for i in meta.images.indices {
                meta.images[i].codeFile = tilde(meta.images[i].codeFile, home: home)
                if case .string(let file)? = meta.images[i].other?["debug_file"], let cut = tilde(file, home: home) {
                    meta.images[i].other?["debug_file"] = .string(cut)
                }
            }
            event.debugMeta = meta
        }
        if let app = event.contexts?.app?.appIdentifier { event.contexts?.app?.appIdentifier = tilde(app, home: home) }
    }

    /// Sets `user.ip_address` to `{{auto}}` (the server fills in the address the envelope came from) when the
    /// event has no IP address; a user is created for it when the event has none.
    static func addAutomaticIPAddress(_ event: inout Event) {
        // Through the user's JSON, so that the field is found however the user type models it.
        let user = event.user ?? User()
        guard let data = try? JSONEncoder().encode(user),
              var object = try? JSONDecoder().decode([String: JSONValue].self, from: data) else { return }
        if object["ip_address"] != nil && object["ip_address"] != .null { return }
        object["ip_address"] = .string("{{auto}}")
        guard let changed = try? JSONEncoder().encode(object), let withIP = try? JSONDecoder().decode(User.self, from: changed) else { return }
        event.user = withIP
    }
}

/// Which of the options' hooks (``Vaka/Options/beforeSend``, ``Vaka/Options/beforeBreadcrumb``) the calling
/// thread is running: a thread-specific value (`pthread_getspecific`), so that a hook that calls back into Vaka
/// neither waits for the thread that runs it nor calls itself without end. ``Vaka/flush(timeout:)`` and
/// ``Vaka/close(timeout:)`` from `beforeSend` do not wait for the journal mover or the start thread (which may be
/// the hook's own, holding the mover's pass); a breadcrumb added from `beforeBreadcrumb` is kept without
/// passing through it again.
enum HookThread {
    /// A set of hooks.
    struct Hooks: OptionSet, Sendable {
        let rawValue: Int
        /// ``Vaka/Options/beforeSend``.
        static let beforeSend = Hooks(rawValue: 1)
        /// ``Vaka/Options/beforeBreadcrumb``.
        static let beforeBreadcrumb = Hooks(rawValue: 2)
    }

    /// The thread-specific key holding the calling thread's ``Hooks`` (its raw value as the pointer's bits);
    /// `nil` when the process has used up its keys (`PTHREAD_KEYS_MAX`): then no hook is known to run.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        return pthread_key_create(&key, nil) == 0 ? key : nil
    }()

    /// The hooks the calling thread is running (nested calls add up).
    static var current: Hooks {
        guard let key else { return [] }
        return Hooks(rawValue: Int(bitPattern: pthread_getspecific(key)))
    }

    /// Runs `body` (the call of `hook`) with `hook` added to the calling thread's ``current``.
    static func running<T>(_ hook: Hooks, _ body: () -> T) -> T {
        guard let key else { return body() }
        let outer = current
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: outer.union(hook).rawValue))
        defer { pthread_setspecific(key, UnsafeRawPointer(bitPattern: outer.rawValue)) }
        return body()
    }
}
