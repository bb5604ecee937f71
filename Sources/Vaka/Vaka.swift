import Foundation
import Synchronization
import VakaCrash
import VakaSymbolication

/// The Vaka SDK facade: crash capture and event reporting for Swift programs on Linux, delivered to a
/// server that speaks the Sentry envelope protocol (or written to `<storage>/outbox/` without a DSN).
///
/// Call ``start(_:)`` once, as early as possible in `main`. Every other call is thread-safe and does nothing
/// before `start` (or after ``close()``, or with `enabled: false`).
///
/// What `start` does, in order, on the caller's thread: checks the storage directory and `crashes/` (0700; on a
/// first run, when `crashes/` is missing, the `vaka.start` thread makes them first thing); installs the C
/// crash runtime under a fresh run id (a random UUID), so a fatal signal writes
/// `<storage>/crashes/<run-id>.crash`; turns logging on; registers an `atexit` hook that ends the session as
/// `exited` and flushes (like ``close()``; a run that exits before start's background part began writes its
/// session to `<storage>/sessions/` for a later launch to send instead, see docs/ingest.md). Then, on a background
/// thread (`vaka.start`): makes the client (the options bounded, the DSN parsed, contexts, delivery, the session;
/// made instead by the first call that needs it when that call comes first, ``ClientSlot``); starts the delivery
/// thread (with a DSN: `pending/` listed, pending files of earlier runs sent at once); makes this run's files
/// (`runs/<run-id>/` with its lock, the journal, the anon id, `scope.json`); turns each earlier run's crash report
/// into its fatal event with that run's scope and `crashed` session (the crash join, see docs/ingest.md), sends
/// `abnormal` for runs that were killed, then this run's first session update. A breadcrumb, log, scope change or
/// capture that comes before the run's files exist makes them first on its own thread (once), so what it
/// recorded survives a crash right after it; a crash before any of that is reported at the next launch with that
/// launch's release and environment.
/// ``flush(timeout:)`` and ``close(timeout:)`` wait for that thread first (or do its work when it has not
/// begun).
public enum Vaka {
    /// What ``start(_:)`` sets up and ``close(timeout:)`` takes down.
    private struct State {
        /// The started run's client, made on its first use (``ClientSlot``), or `nil`.
        var slot: ClientSlot?
        /// Whether the `atexit` hook is registered (once per process).
        var atexitRegistered = false
        /// The name given to the last ``screen(_:)`` call (the next one's `from`).
        var lastScreen: String?
    }
    private static let state = Mutex(State())

    /// The started client (made now when the `vaka.start` thread has not made it yet), or `nil`.
    static var current: Client? { state.withLock { $0.slot }?.client }

    /// Starts Vaka (see the type's documentation). Calling it again while started does nothing.
    /// Never throws: problems are logged to stderr when `options.debug` is set (an invalid DSN is always
    /// reported on stderr, and gives outbox mode). A storage directory that cannot be created or written
    /// leaves crash reporting off while events and sessions are still sent from memory (see ``flush(timeout:)``
    /// and docs/ingest.md, "What can go wrong"). Every failure that leaves the crash handlers out prints one
    /// `[vaka] ...` line on stderr, with or without `debug`: `crashes/` cannot be created (on a first run printed
    /// by the `vaka.start` thread, which makes it, shortly after `start` returned), `vaka_crash_install`
    /// fails, delivery cannot start. A `release`, `environment` or tags that Sentry would refuse or that are too
    /// long are changed first (``Options/bounded(note:)``), with one `[vaka]` line each on stderr. The lines about
    /// the DSN, delivery and the options come from where the client is made (``ClientSlot``): the `vaka.start`
    /// thread, or the first call that needs the client before it.
    public static func start(_ options: Options) {
        guard options.enabled else { return }
        // The client is made outside the lock when no thread could be created (its failure takes the lock).
        let withoutThread = state.withLock { state -> ClientSlot? in
            guard state.slot == nil else { return nil }
            var log: (@Sendable (String) -> Void)? = nil
            if options.debug { log = { line in PrivateFiles.writeStandardError("[vaka] \(line)\n") } }
            // Paths, not URLs, from here to the exit: a `URL`'s first use in a process makes pages of Foundation
            // resident that a program using Vaka would otherwise not have (docs/cost.md).
            let storage = options.storageDirectory.map { $0.fileSystemPath } ?? defaultStoragePath(argv0: CommandLine.arguments.first)
            let runID = RandomID.uuid()
            let crashes = PrivateFiles.path(storage, "crashes")
            // A first run (`crashes/` missing) leaves making the directories (two mkdir(2), ~0.1 ms) to start's
            // background part: the handlers go in with the report directory unopened, and a crash before the
            // `vaka.start` thread made it makes it itself. An existing `crashes/` (its mode checked), or one that
            // cannot be looked at (EACCES, ENOTDIR...: the error to print), is dealt with here.
            var found = stat()
            let looked = stat(crashes, &found)
            var firstRun = looked != 0 && errno == ENOENT
            // `crashes/` there at 0700 needs no second look (the storage directory's mode is still checked).
            let crashesReady = looked == 0 && found.st_mode & S_IFMT == S_IFDIR && found.st_mode & 0o7777 == 0o700
            var storageUsable = firstRun || makeStorageDirectories(storage, crashes, crashesReady: crashesReady)
            var handlersPending = false
            if options.crashReporting && storageUsable {
                var rc = installCrashHandlers(reportDirectory: crashes, runID: runID, makeReportDirectory: firstRun)
                if rc != 0 && firstRun {
                    // Not installable with the directory missing (a report path too long to be created by
                    // path): the directories now, then the install that needs them.
                    firstRun = false
                    storageUsable = makeStorageDirectories(storage, crashes)
                    if storageUsable { rc = installCrashHandlers(reportDirectory: crashes, runID: runID, makeReportDirectory: false) }
                }
                if !storageUsable {
                    // The `cannot create` line is out: crash reporting is off.
                } else if rc != 0 {
                    // Always on stderr (not only with debug): a crash reporter that silently does not report.
                    PrivateFiles.writeStandardError("[vaka] crash handlers not installed: \(String(cString: strerror(rc))) (report directory \(crashes)); crash reporting is off\n")
                } else {
                    handlersPending = firstRun
                    log?("crash handlers installed; reports go to \(vaka_crash_report_path().map { String(cString: $0) } ?? crashes)")
                    if let why = vaka_crash_libelf_error() {
                        log?("libelf not loaded (\(String(cString: why))); the executable's own symbol table was not read, so a Swift fatal-error or abort message may be missing from crash reports")
                    }
                }
            }
            var makeStorage: (@Sendable () -> Void)? = nil
            if firstRun {
                let handlersPending = handlersPending
                makeStorage = {
                    guard makeStorageDirectories(storage, crashes) else {
                        if handlersPending { uninstallHandlers(ofRun: runID) }
                        return
                    }
                    guard handlersPending else { return }
                    let rc = vaka_crash_open_report_dir()
                    if rc != 0 {
                        PrivateFiles.writeStandardError("[vaka] crash handlers not installed: \(String(cString: strerror(rc))) (report directory \(crashes)); crash reporting is off\n")
                        uninstallHandlers(ofRun: runID)
                    }
                }
            }
            let startPID = getpid()
            let (debugLog, storageWork) = (log, makeStorage)
            let slot = ClientSlot(runID: runID) { slot in
                makeClient(options, storage: storage, runID: runID, log: debugLog, makeStorage: storageWork,
                           startPID: startPID, slot: slot)
            }
            state.slot = slot
            // Logs: the run's journal once start's background part made it (the mover sends them from there),
            // breadcrumbs, the options' sinks; the client made by the first log that comes before it is.
            LogRouter.activate(options: options, journal: { slot.client?.appendLog(timeNs: $0, level: $1, body: $2, attributes: $3) },
                               addBreadcrumb: { slot.client?.addBreadcrumb($0) })
            if !state.atexitRegistered {
                state.atexitRegistered = true
                atexit { Vaka.endAtExit() }
            }
            // A `fork()` makes the client first (Vaka's prepare step runs before the client's, registered first):
            // the child then shares it, and no thread holds the slot's lock at the copy.
            _ = Client.forkHookRegistered
            _ = forkHookRegistered
            // Last: its background thread (the client, then the crash join) does not compete with the work above.
            // It holds the slot weakly: a run closed before the thread ran leaves it nothing to do.
            return Client.startStartThread({ [weak slot] in slot?.client }) ? nil : slot
        }
        withoutThread?.client?.beginWithoutThread()
    }

    /// Makes the client of a ``start(_:)`` (``ClientSlot``: on the `vaka.start` thread, or on the first call
    /// that needs it; never under `state`'s lock): the options bounded (one `[vaka]` line for each change), the
    /// DSN parsed (an invalid one: one `[vaka]` line, outbox mode), the ``Client``, its start's background part
    /// made ready to be taken (``Client/prepareBegin(forkTarget:)``), made the target of `fork()`'s prepare step
    /// when its run is still the started one. When delivery cannot start: one `[vaka]` line, the run's crash handlers taken
    /// out, logging off, and `nil` (Vaka is off). In a `fork()`ed child of the starting process (one forked
    /// without `fork`'s prepare step, which makes the client first): `nil`.
    static func makeClient(_ options: Options, storage: String, runID: String, log: (@Sendable (String) -> Void)?,
                                   makeStorage: (@Sendable () -> Void)?, startPID: pid_t, slot: ClientSlot) -> Client? {
        guard getpid() == startPID else { return nil }
        // Release, environment and tags within Sentry's limits (always one line when one is changed: a
        // configuration mistake that would otherwise make every event too large or lose its release).
        let options = options.bounded { PrivateFiles.writeStandardError("[vaka] \($0)\n") }
        var dsn: DSN?
        do {
            dsn = try options.parsedDSN()
        } catch {
            // Always on stderr (not only with debug): a destination that can never work is refused here, once.
            let outbox = PrivateFiles.path(storage, "outbox")
            PrivateFiles.writeStandardError("[vaka] invalid DSN (\(error)): nothing will be sent; envelopes are written to \(outbox) instead\n")
        }
        do {
            let client = try Client(options: options, storagePath: storage, runID: runID, dsn: dsn, log: log,
                                    makeStorage: makeStorage)
            client.prepareBegin(forkTarget: false)
            // The target of `fork()`'s prepare step only while its run is the started one: a client made after its
            // run was closed (by its end, or by its thread late) must not take the place of a later start's.
            state.withLock { state in if state.slot === slot { client.becomeForkTarget() } }
            return client
        } catch {
            PrivateFiles.writeStandardError("[vaka] cannot start delivery (\(error)); Vaka is off, crash reporting too\n")
            uninstallHandlers(ofRun: runID)
            state.withLock { state in
                guard state.slot === slot else { return }
                state.slot = nil
                LogRouter.deactivate()
            }
            return nil
        }
    }

    /// Takes the crash handlers out when they are still those of the run `runID`: a close and a new start on
    /// another thread meanwhile installed another run's, which must keep them.
    private static func uninstallHandlers(ofRun runID: String) {
        let own = vaka_crash_report_path().map { String(cString: $0).hasSuffix("/\(runID).crash") } ?? false
        if own { _ = vaka_crash_uninstall() }
    }

    /// `pthread_atfork`'s prepare step of Vaka (registered once per process by the first ``start(_:)``): makes
    /// the started client when it is not yet, so that the child has it and no thread is making it at the copy.
    /// Nothing on top of the crash handler (a previous handler chained to that forks).
    private static let forkHookRegistered: Bool = pthread_atfork({
        guard vaka_crash_in_progress() == 0 else { return }
        _ = Vaka.current
    }, nil, nil) == 0

    /// Makes the storage directory and its `crashes/` (0700, ``PrivateFiles/makeDirectory(_:)``: each missing
    /// parent too; `crashes/` left as it is when `crashesReady`, i.e. the caller found it a directory at 0700).
    /// On failure writes the one `[vaka] cannot create <crashes> (...)` line on stderr (storage that cannot be
    /// written: no crash report could be written either; events still go out from memory).
    /// - Returns: whether both directories exist now.
    private static func makeStorageDirectories(_ storage: String, _ crashes: String, crashesReady: Bool = false) -> Bool {
        do {
            try PrivateFiles.makeDirectory(path: storage)
            if !crashesReady { try PrivateFiles.makeDirectory(path: crashes) }
            return true
        } catch {
            PrivateFiles.writeStandardError("[vaka] cannot create \(crashes) (\(error)); crash reporting is off, events are held in memory and sent\n")
            return false
        }
    }

    /// `vaka_crash_install` for `reportDirectory` under `runID`, its slow preparation deferred (the `vaka.start`
    /// thread runs `vaka_crash_finish_install`). With `makeReportDirectory`, a missing report directory is left
    /// for that thread to make (`vaka_crash_open_report_dir` then); a crash before that makes it itself.
    /// - Returns: 0, or the errno of `vaka_crash_install`.
    private static func installCrashHandlers(reportDirectory: String, runID: String, makeReportDirectory: Bool) -> Int32 {
        reportDirectory.withCString { dir in
            runID.withCString { id in
                var config = vaka_crash_config(report_dir: dir, run_id: id, signals: nil, signal_count: 0,
                                               alt_stack_size: 0, defer_preparation: 1,
                                               make_report_dir: makeReportDirectory ? 1 : 0)
                return vaka_crash_install(&config)
            }
        }
    }

    /// Records a screen view: a custom event `screen_view` (`logentry.formatted` "screen_view", `extra.screen`,
    /// tag `screen`) and a navigation breadcrumb (`data.from` the previous screen, `data.to` this one).
    public static func screen(_ name: String) {
        guard let client = current else { return }
        let previous = state.withLock { state -> String? in
            let p = state.lastScreen
            state.lastScreen = name
            return p
        }
        var data: [String: JSONValue] = ["to": .string(name)]
        data["from"] = previous.map(JSONValue.string)
        client.addBreadcrumb(Breadcrumb(timestamp: Date().timeIntervalSince1970, type: "navigation",
                                        category: "navigation", message: name, data: data))
        client.capture(message: "screen_view", level: .info, extra: ["screen": .string(name)],
                       tags: ["vaka.event": "screen_view", "screen": name])
    }

    /// Records a custom event `name` with `properties` (`logentry.formatted` the name, level `info`, `extra` the
    /// properties, tag `vaka.event` the name).
    public static func track(_ name: String, _ properties: [String: String] = [:]) {
        guard let client = current else { return }
        client.capture(message: name, level: .info, extra: properties.mapValues(JSONValue.string),
                       tags: ["vaka.event": name])
    }

    /// Captures a handled error: level `error`; `exception.values` with the error last and, before it, the
    /// errors it wraps (``WrappingError/underlyingError``, an `NSError`'s `NSUnderlyingErrorKey`; at most 10 in
    /// all, innermost first, as Sentry orders chained exceptions). Each has `type` the error's Swift type with
    /// its enum case (`MyApp.CheckoutError.cardDeclined`; an `NSError`'s domain), `value` its description
    /// (`String(describing:)`; an `NSError`'s `localizedDescription`), `mechanism {type: "swift.error",
    /// handled: true}` with `meta.ns_error {code, domain}` for an `NSError` or `CustomNSError`, and `source` on
    /// a wrapped one. The captured error carries the calling thread's frames (oldest first, the caller of
    /// `capture` last), symbolicated like crash frames, with `debug_meta.images`. Counts one error in the session.
    /// - Parameters:
    ///   - fingerprint: the event's `fingerprint` (how the server groups it), e.g. `["checkout", "declined"]`.
    ///   - scope: called at once on the calling thread with an empty ``Scope`` to set tags, user, contexts,
    ///     extra, fingerprint, level and attachments of this event only (``Scope`` says how it is laid over the
    ///     global scope); nothing set there reaches later events.
    /// Not kept by ``Options/sampleRate``: no event is recorded (counted in a client report) and `scope` is not
    /// called, but the error still counts in the session (`errors`), as in Sentry's SDKs.
    @inline(never)
    public static func capture(_ error: Error, fingerprint: [String]? = nil, scope: ((inout Scope) -> Void)? = nil) {
        guard let client = current else { return }
        guard client.sampled() else { return client.countSampledOutError() }
        let stack = client.stacks.capture(skip: 1)  // skip capture(_:) itself
        client.capture(error: error, stack: stack, scope: callScope(fingerprint: fingerprint, scope))
    }

    /// Captures a message (`logentry.formatted`) at `level` (default `info`), with the global scope's attachments;
    /// `fingerprint` and `scope` as for ``capture(_:fingerprint:scope:)``. With ``Options/attachStacktrace`` also
    /// the calling thread's stack (`threads`, `debug_meta.images`). Not kept by ``Options/sampleRate``: nothing is
    /// recorded (counted in a client report) and `scope` is not called.
    @inline(never)
    public static func capture(message: String, level: Event.Level = .info, fingerprint: [String]? = nil,
                               scope: ((inout Scope) -> Void)? = nil) {
        guard let client = current, client.sampled() else { return }
        let stack = client.options.attachStacktrace ? client.stacks.capture(skip: 1) : nil  // skip this function
        client.capture(message: message, level: level, scope: callScope(fingerprint: fingerprint, scope), attachments: true,
                       stack: stack)
    }

    /// The per-call scope of a capture: `fingerprint` first, then what `fill` sets (a fingerprint set there
    /// replaces the argument); `nil` when there is neither.
    private static func callScope(fingerprint: [String]?, _ fill: ((inout Scope) -> Void)?) -> Scope? {
        guard fingerprint != nil || fill != nil else { return nil }
        var scope = Scope()
        scope.fingerprint = fingerprint
        fill?(&scope)
        return scope
    }

    /// ``capture(message:level:)`` with a caller-chosen `event_id` (32 lower-case hex digits): capturing
    /// twice with one id gives one stored event. For tests (the kill test) and tools.
    @_spi(Testing)
    public static func capture(message: String, level: Event.Level = .info, eventID: String) {
        current?.capture(message: message, level: level, eventID: eventID)
    }

    /// Adds a breadcrumb (type `default`, level `info`, time now) to later events and to this run's crash: one
    /// record in the run's journal (no lock, no allocation, no system call for a category and message of at
    /// most 8192 bytes each; longer ones are cut to 8192 characters first; a breadcrumb that comes before
    /// start's background part made the journal makes it first, once). Events carry the last 100 added
    /// before them; the journal keeps the newest that fit in its breadcrumb ring (3/8 of
    /// ``Options/journalSize``), which survive the process dying in any way.
    public static func addBreadcrumb(category: String, message: String) {
        current?.addBreadcrumb(category: category, message: message)
    }

    /// Adds `crumb` (its `level`, `type`, `data` of any JSON shape, `timestamp`) to later events and to this
    /// run's crash: one record in the run's journal, as ``addBreadcrumb(category:message:)`` (the mapping of
    /// the fields: docs/journal.md). `message` and `category` are cut to 8192 Unicode scalars and each string in
    /// `data` to 1024 first; a NaN or infinity in `data` is recorded as its text.
    ///
    /// ```swift
    /// Vaka.addBreadcrumb(Breadcrumb(type: "query", category: "db", message: "SELECT orders", level: "warning",
    ///                               data: ["rows": 3, "ms": 41.5, "tables": ["orders"]]))
    /// ```
    public static func addBreadcrumb(_ crumb: Breadcrumb) {
        guard let client = current else { return }
        var crumb = crumb
        crumb.data = crumb.data?.mapValues(\.finite)
        client.addBreadcrumb(crumb)
    }

    /// Sets the user id (`user.id`) of later events and of this run's crash; `nil` removes it. Opt-in: Vaka
    /// sends no user id unless given one. Cut to its first 200 Unicode scalars (``Options/maxTagChars``). The
    /// short form of ``setUser(_:)``: `identify(id)` is `setUser(User(id: id))` (other user fields are removed).
    public static func identify(_ userID: String?) {
        current?.identify(userID.map { Options.cut($0, maxChars: Options.maxTagChars) })
    }

    /// Sets the user (`user`: `id`, `email`, `username`, `ip_address`) of later events and of this run's crash;
    /// `nil` (or a user with no field set) removes it. Opt-in: Vaka sends no user unless given one. Each field is
    /// cut to its first 200 Unicode scalars; members of ``User/other`` are not kept (a per-call ``Scope``'s user
    /// sends them).
    public static func setUser(_ user: User?) {
        current?.setUser(user)
    }

    /// Sets context `name` (`contexts.NAME`, e.g. `setContext("order", ["id": 1042, "plan": "pro"])`) of later
    /// events and of this run's crash; `nil` removes it. A context named `os`, `device` or `app` is laid over
    /// the one Vaka fills (its members replace Vaka's of the same name; a member of the wrong type for a field
    /// Vaka models, such as a number as `os.name`, leaves that context as Vaka fills it). Contexts and extra together take at
    /// most 64 KiB (encoded JSON); a call that would pass that is left out (a debug line).
    public static func setContext(_ name: String, _ value: [String: JSONValue]?) {
        current?.setContext(name, value)
    }

    /// Sets extra `key` (`extra.KEY`, any JSON value: `setExtra("cart_size", 3)`) of later events and of this
    /// run's crash; `nil` removes it. Bounded with the contexts (``setContext(_:_:)``).
    public static func setExtra(_ key: String, _ value: JSONValue?) {
        current?.setExtra(key, value)
    }

    /// Attaches the file at `path` to later handled errors and messages and to this run's crash (sent at the
    /// next launch): it is read when each event is sent, not now (see ``Attachment`` for the limits).
    /// `filename` defaults to the path's last component, `contentType` to the type of its extension. A relative
    /// path is made absolute now. At most 8 attachments are registered at a time (a further one is left out,
    /// with a debug line).
    public static func addAttachment(path: String, filename: String? = nil, contentType: String? = nil) {
        current?.addAttachment(Attachment(path: path, filename: filename, contentType: contentType))
    }

    /// Attaches `data` (at most 1 MiB) named `filename` to later handled errors and messages. Kept in memory:
    /// not sent with this run's crash (a file attachment is).
    public static func addAttachment(data: Data, filename: String, contentType: String? = nil) {
        current?.addAttachment(Attachment(data: data, filename: filename, contentType: contentType))
    }

    /// Removes every attachment added with `addAttachment` (from later events and from this run's crash).
    public static func clearAttachments() {
        current?.clearAttachments()
    }

    /// Sets a tag on later events and on this run's crash; `nil` removes it. Key and value are cut to their
    /// first 200 Unicode scalars (Sentry's tag limits, ``Options/maxTagChars``). A run keeps at most 200 tags:
    /// a new key beyond that removes the tag set longest ago (a debug line), so the newest tags win.
    public static func setTag(_ key: String, _ value: String?) {
        current?.setTag(Options.cut(key, maxChars: Options.maxTagChars),
                        value.map { Options.cut($0, maxChars: Options.maxTagChars) })
    }

    /// Sends everything queued, waiting at most `timeout` seconds (default 10; clamped to 0...86,400, NaN
    /// counts as 0).
    /// - Returns: `true` when nothing is left to send and nothing was lost since the previous flush; `false`
    ///   when something is still queued (server unreachable, backing off or rate limited beyond the timeout,
    ///   401), or when an envelope was neither written to storage nor sent since the previous flush (storage
    ///   full, read-only or over `RLIMIT_FSIZE`, and more than 4 MiB held in memory; or an outbox file that
    ///   could not be written). Always `true` before ``start(_:)``. From inside ``Options/beforeSend`` it sends
    ///   what is queued without moving what the journal holds (the hook's thread may be the one doing that).
    @discardableResult
    public static func flush(timeout: TimeInterval = 10) -> Bool {
        current?.flush(timeout: timeout) ?? true
    }

    /// Ends this run: session `exited`, flush (at most `timeout` seconds, default ``Options/shutdownTimeout``,
    /// 2; what is left stays in `pending/` for the next launch), delivery stopped, crash handlers restored to
    /// those before ``start(_:)``. Later calls are no-ops until the next ``start(_:)``. Also run automatically
    /// at process exit, with ``Options/shutdownTimeout`` (there, a run whose start's background part has not
    /// begun writes its session to `<storage>/sessions/` for a later launch to send, see docs/ingest.md). From inside ``Options/beforeSend`` it returns at once
    /// and the end runs on a thread of its own (`vaka.close`), once the hook has returned; an exit meanwhile
    /// waits for it.
    public static func close(timeout: TimeInterval? = nil) {
        end(timeout: timeout ?? current?.options.shutdownTimeout ?? 2, uninstall: true)
    }

    /// The exit hook: ``close(timeout:)`` with ``Options/shutdownTimeout``, leaving the handlers installed.
    private static func endAtExit() {
        // An end that `close()` from inside `beforeSend` left to the `vaka.close` thread completes first (its
        // `exited` update is written), unless this exit comes from inside the hook, which that end waits for.
        if !HookThread.current.contains(.beforeSend) { detachedEnd.wait() }
        end(timeout: current?.options.shutdownTimeout ?? 2, uninstall: false, atExit: true)
    }

    /// Closed while an end runs on the `vaka.close` thread (``close(timeout:)`` from inside ``Options/beforeSend``).
    private static let detachedEnd = Gate()

    /// The client the exit hook ended, kept: the process is going away, and tearing its objects down (delivery,
    /// contexts, closures) would only cost the exit time.
    private static let endedAtExit = Mutex<Client?>(nil)

    private static func end(timeout: TimeInterval, uninstall: Bool, atExit: Bool = false) {
        let slot = state.withLock { state -> ClientSlot? in
            let ending = state.slot
            state.slot = nil
            // Under the lock, as `start` activates it: a start racing with this close keeps its logging.
            if ending != nil { LogRouter.deactivate() }
            return ending
        }
        // Made now when start's background part had not made it: its session is ended (or recorded) all the same.
        guard let ending = slot?.client else { return }
        @Sendable func finish() {
            ending.end(timeout: timeout, atExit: atExit)
            if atExit { endedAtExit.withLock { $0 = ending } }
            // Under the lock, and only when no `start` ran meanwhile: a start during the flush above installed (or
            // retargeted) the handlers for its own run, which must keep them.
            if uninstall { state.withLock { state in if state.slot == nil { _ = vaka_crash_uninstall() } } }
        }
        // From inside `beforeSend` the end waits for the hook's own thread (the start thread, or the mover's
        // pass): it runs on a thread of its own (`vaka.close`) and completes once the hook has returned.
        guard HookThread.current.contains(.beforeSend) else { return finish() }
        detachedEnd.close()
        let thread = OwnThread(name: "vaka.close") {
            finish()
            detachedEnd.open()
        }
        // No thread left: the end is not done (the hook's own thread cannot wait for itself), and the exit does
        // not wait for it; the run's session is reported `abnormal` by the next launch.
        if !thread.start() { detachedEnd.open() }
    }

    /// The id of the current run (a UUID string, also the crash report's file name), or `nil` before start.
    public static var runID: String? { current?.runID }

    /// The storage directory in use, or `nil` before start: ``Options/storageDirectory`` as given to ``start(_:)``
    /// (the same `URL`), else ``defaultStorageDirectory()``.
    public static var storageDirectory: URL? { current.map { $0.options.storageDirectory ?? $0.storage } }

    /// Whether this run sends to a server: `true` when started with a valid DSN, given in code (``Options/dsn``,
    /// ``Options/key`` and ``Options/endpoint``) or read from `$SENTRY_DSN`; `false` in outbox mode (envelopes
    /// go to `<storage>/outbox/`), before start and after ``close(timeout:)``.
    public static var hasDSN: Bool { current?.hasDSN ?? false }

    /// Covers the calling thread for crash reports: unblocks the synchronous crash signals (SIGSEGV, SIGBUS,
    /// SIGILL, SIGFPE, SIGTRAP, SIGSYS) in its signal mask — a thread may have inherited them blocked, and a
    /// blocked fault kills the process without a report — and gives it its own alternate signal stack (64 KiB
    /// plus a guard page, released when the thread exits) so a stack overflow on it is still reported. Only a
    /// thread that existed before ``start(_:)`` and blocks every signal or waits in `sigwait` (`start` does not ask
    /// it: a signal thread would take the request as a signal of its own) needs this: the thread calling `start` is
    /// covered, every thread created after it (the crash runtime interposes `pthread_create`), and the other
    /// threads that existed before it (`start` asks each with a signal; see docs/crash-handling.md). Before
    /// `start` (or with crash handling off) there is nothing to unblock.
    /// - Returns: `true` on success or when the thread already has an alternate stack (left as it is);
    ///   `false` when `mmap` or `sigaltstack` failed (the signals are unblocked even then).
    @discardableResult
    public static func attachCurrentThread() -> Bool {
        vaka_crash_thread_attach() == 0
    }

    /// The default release: `$VAKA_RELEASE` when set and non-empty; else `<executable name>@0.0.0+<first 12 hex
    /// digits of the executable's GNU build ID>` (the build ID note in the executable's loaded program headers, as
    /// the crash runtime's image list reads it: no file is opened), so each build is its own release; else
    /// `<executable name>@0.0.0`. Always passed through ``Options/boundedRelease(_:)``
    /// (at most 200 UTF-8 bytes, Relay's limit for a release; no control characters, `/` or `\`).
    public static func defaultRelease() -> String {
        // getenv(3): one variable, not the whole environment copied into a dictionary (this runs in `start`).
        if let env = getenv("VAKA_RELEASE").map({ String(cString: $0) }), !env.isEmpty { return Options.boundedRelease(env) }
        // The main program's image alone (its path as the crash runtime read it at install). The struct is
        // zeroed with memset and read through raw pointers: its fixed arrays import as tuples of thousands of
        // elements, which Swift would initialise and copy element by element (100 KB of code).
        let size = MemoryLayout<vaka_crash_image>.size
        let image = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: MemoryLayout<vaka_crash_image>.alignment)
        defer { image.deallocate() }
        memset(image, 0, size)
        let typed = image.bindMemory(to: vaka_crash_image.self, capacity: 1)
        var path = ""
        var buildID = ""
        if vaka_crash_copy_main_image(typed) > 0,
           let pathOffset = MemoryLayout<vaka_crash_image>.offset(of: \.path),
           let pathLengthOffset = MemoryLayout<vaka_crash_image>.offset(of: \.path_len),
           let idOffset = MemoryLayout<vaka_crash_image>.offset(of: \.build_id),
           let idLengthOffset = MemoryLayout<vaka_crash_image>.offset(of: \.build_id_len) {
            let pathLength = min(image.load(fromByteOffset: pathLengthOffset, as: Int.self), size - pathOffset)
            path = String(decoding: UnsafeRawBufferPointer(start: image + pathOffset, count: pathLength), as: UTF8.self)
            let idLength = min(image.load(fromByteOffset: idLengthOffset, as: Int.self), 6)
            buildID = NumberText.hex(bytes: UnsafeRawBufferPointer(start: image + idOffset, count: max(idLength, 0)))
        }
        if path.isEmpty { path = EventFactory.executablePath() }
        let name = PrivateFiles.lastComponent(path)
        if !buildID.isEmpty { return Options.boundedRelease("\(name)@0.0.0+\(buildID)") }
        return Options.boundedRelease("\(name)@0.0.0")
    }

    /// The default storage directory: `$XDG_STATE_HOME/vaka/<program>` when `XDG_STATE_HOME` is an
    /// absolute path, else `$HOME/.local/state/vaka/<program>` (`$HOME` when it is an absolute path, else the
    /// user's home directory from the password database). `<program>` is ``programDirectoryName(argv0:)``
    /// of `CommandLine.arguments[0]`, e.g. `server-3f2a9c1e`: one directory per program, never the shared
    /// `vaka/` directory or a parent of it.
    public static func defaultStorageDirectory() -> URL {
        defaultStorageDirectory(argv0: CommandLine.arguments.first)
    }

    /// ``defaultStorageDirectory()`` for a program started with `argv0` (tests: `CommandLine.arguments` is
    /// read-only in the Swift 6 language mode).
    static func defaultStorageDirectory(argv0: String?) -> URL {
        URL(fileURLWithPath: defaultStoragePath(argv0: argv0), isDirectory: true)
    }

    /// ``defaultStorageDirectory(argv0:)``'s file-system path (no trailing `/`), made without a `URL`: what
    /// ``start(_:)`` uses.
    static func defaultStoragePath(argv0: String?) -> String {
        // In C (vaka_crash_default_storage_path): it runs on the caller of `start` before the crash handlers go in, where
        // the same steps in Swift cost ~75 µs of the standard library's first use (docs/cost.md). Foundation's home
        // directory only when neither `XDG_STATE_HOME` nor `HOME` is an absolute path.
        let made = withOptionalCString(argv0) { argv0 in
            vaka_crash_default_storage_path(argv0, nil) ?? NSHomeDirectory().withCString { vaka_crash_default_storage_path(argv0, $0) }
        }
        guard let made else { return PrivateFiles.path(NSHomeDirectory(), ".local/state/vaka/program") }  // no memory
        defer { free(made) }
        return String(cString: made)
    }

    /// The name of a program's default storage directory: `<name>-<hash>`.
    /// - `<hash>`: 8 lower-case hex digits, the 32-bit FNV-1a hash of the bytes (UTF-8) of the program's
    ///   absolute path as it was started (stable across runs, Swift versions and machines), **without**
    ///   resolving symbolic links, so that a program deployed behind a switched link (`/srv/app/current ->
    ///   releases/42`, Capistrano, Nix profiles) keeps one directory across releases. That path is:
    ///   `argv0` when it contains a `/`, made absolute against the working directory (`$PWD` when it names the
    ///   working directory, as the shell keeps it, else `getcwd(3)`) and lexically normalised (`.`, `..` and
    ///   repeated `/` removed); else (a bare name) the first `PATH` entry holding an executable file of that
    ///   name, as the shell searches it; else (not found, empty or missing `argv0`) the target of
    ///   `/proc/self/exe`. So `/srv/billing/server` and `/srv/search/server` get different directories, one
    ///   program started as `./server` or as `/srv/billing/server` gets the same one, and a symbolic link to a
    ///   program is a program of its own (its own directory).
    /// - `<name>`: the last path component of `argv0`, else of that absolute path, else `program`; ASCII
    ///   control characters and `\` replaced by `_`, at most 64 UTF-8 bytes. Never empty, `.` or `..`.
    /// `/` and the `PATH` separator `:` are matched as bytes, as the kernel and the shell do; `argv0` ends at a NUL.
    public static func programDirectoryName(argv0: String?) -> String {
        // In C (vaka_crash_program_directory_name), for `start`'s sake (``defaultStoragePath(argv0:)``); `PATH` and `PWD`
        // read with getenv(3).
        guard let name = withOptionalCString(argv0, { vaka_crash_program_directory_name($0) }) else { return "program" }
        defer { free(name) }
        return String(cString: name)
    }

    /// `body` given `string` as a C string, or `nil`.
    private static func withOptionalCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
        guard let string else { return body(nil) }
        return string.withCString { body($0) }
    }
}
