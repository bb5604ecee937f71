import Foundation
import Synchronization
import VakaCrash
import VakaSymbolication

/// The started SDK: one per ``Vaka/start(_:)``. Holds the scope of the current run (persisted in its
/// ``RunDirectory``), the breadcrumbs, the session and the ``Delivery``. Thread-safe: the scope, the
/// breadcrumbs and the run directory (not thread-safe themselves) live in one `Mutex` (``State``), and scope
/// changes and event building run under it; unwinding and delivery happen outside it.
final class Client: Sendable {
    /// The options given to start.
    let options: Vaka.Options
    /// The storage directory (created, 0700).
    let storage: URL
    /// This run's id (UUID string).
    let runID: String
    /// Delivery (queue + uploader, or outbox).
    let delivery: Delivery
    /// Machine/app contexts and event JSON helpers.
    let factory: EventFactory
    /// Handled-error stack traces.
    let stacks: StackCapture
    /// The crash reports whose events are queued, deleted once the server accepts them (see CrashJoin.swift).
    let crashLedger: CrashLedger

    /// What the lock guards: everything the capture and scope calls change.
    private struct State {
        var scope: RunScope
        /// `<storage>/runs/<run-id>/` (nil when it cannot be created): where `scope` is persisted.
        let runDirectory: RunDirectory?
        let breadcrumbs: BreadcrumbStore
        /// Set by ``Client/end(timeout:)``: later calls do nothing.
        var ended = false
        /// The tag keys of `scope.tags`, oldest set first (the first to go when a new one is over the cap).
        var tagOrder: [String]
    }
    private let state: Mutex<State>
    private let logSink: (@Sendable (String) -> Void)?

    /// Starts everything except the crash handlers (``Vaka/start(_:)`` installs those first).
    /// - Throws: when the storage directory or `pending/` cannot be created.
    init(options: Vaka.Options, storage: URL, runID: String, dsn: DSN?, log: (@Sendable (String) -> Void)?) throws {
        self.options = options
        self.storage = storage
        self.runID = runID
        self.logSink = log
        let now = Date()
        let release = options.release ?? Vaka.defaultRelease()
        factory = EventFactory(release: release, startTime: now)
        stacks = StackCapture(arch: factory.arch)
        let ledger = CrashLedger(log: log)
        crashLedger = ledger
        delivery = try Delivery(configuration: Delivery.Configuration(
            storageDirectory: storage, dsn: dsn, flushInterval: options.flushInterval,
            maxBatchSize: options.maxBatchSize, log: log,
            onEventSettled: { id, outcome in ledger.settled(id, outcome) }))
        var session: SessionState?
        if options.sessionTracking { session = SessionState(did: Client.anonID(storage: storage, log: log), started: now) }
        let tags = RunScope.bounded(tags: options.tags)
        if tags.dropped > 0 { log?("\(tags.dropped) of \(options.tags.count) tags left out: a run keeps at most \(RunScope.maxTags) tags") }
        let scope = RunScope(runID: runID, release: Vaka.Options.boundedRelease(release),
                             environment: Vaka.Options.boundedEnvironment(options.environment), tags: tags.tags,
                             userID: nil, session: session)
        var dir: RunDirectory?
        do { dir = try RunDirectory(storage: storage, runID: runID) } catch { log?("cannot create the run directory: \(error)") }
        state = Mutex(State(scope: scope, runDirectory: dir, breadcrumbs: BreadcrumbStore(runDirectory: dir?.url),
                            tagOrder: tags.tags.keys.sorted()))
    }

    private func log(_ message: @autoclosure () -> String) { logSink?(message()) }

    /// Writes one debug line (when `debug` is on).
    func logLine(_ message: String) { logSink?(message) }

    /// The release of this run.
    var currentRelease: String { state.withLock { $0.scope.release } }

    /// Crash join and leftover sessions of earlier runs, then this run's first session update.
    func begin() {
        joinPreviousRuns()
        let items: [EnvelopeItem] = state.withLock { state in
            persistScope(state)
            guard let update = sessionUpdate(.ok, &state) else { return [] }
            persistScope(state)
            return [.session(update.jsonData())]
        }
        if !items.isEmpty { submit(Envelope(items: items)) }
        delivery.wake()
    }

    // MARK: - Scope

    /// Adds a breadcrumb (persisted for the crash join), cut to the per-field limits first
    /// (``EventBudget/limited(_:)``) so that neither memory nor `breadcrumbs.jsonl` holds more than an event can.
    func addBreadcrumb(_ crumb: Breadcrumb) {
        let crumb = EventBudget.limited(crumb)
        state.withLock { state in
            guard !state.ended else { return }
            state.breadcrumbs.add(crumb)
        }
    }

    /// Sets (or with `nil` removes) a tag on all later events and on this run's crash. Key and value are cut to
    /// 200 characters (``EventBudget/maxTagChars``) first, as the server would. The run keeps at most
    /// ``RunScope/maxTags`` tags: a new key beyond that removes the tag set longest ago (debug line), so the
    /// newest tags win. `scope.json` is rewritten only when the tags change, and stays under
    /// ``RunScope/maxEncodedBytes`` (so each call costs at most one bounded write).
    func setTag(_ key: String, _ value: String?) {
        let key = EventBudget.truncated(key, EventBudget.maxTagChars) ?? key
        let value = value.map { EventBudget.truncated($0, EventBudget.maxTagChars) ?? $0 }
        state.withLock { state in
            guard !state.ended, state.scope.tags[key] != value else { return }
            if let i = state.tagOrder.firstIndex(of: key) { state.tagOrder.remove(at: i) }
            if value != nil {
                if state.tagOrder.count >= RunScope.maxTags {
                    let oldest = state.tagOrder.removeFirst()
                    state.scope.tags[oldest] = nil
                    log("tag \(oldest.prefix(64).debugDescription) removed: a run keeps at most \(RunScope.maxTags) tags, the newest")
                }
                state.tagOrder.append(key)
            }
            state.scope.tags[key] = value
            persistScope(state)
        }
    }

    /// Sets or clears `user.id` (cut to ``Vaka/Options/maxTagChars`` scalars).
    func identify(_ userID: String?) {
        let userID = userID.map { Vaka.Options.cut($0, maxChars: Vaka.Options.maxTagChars) }
        state.withLock { state in
            guard !state.ended, state.scope.userID != userID else { return }
            state.scope.userID = userID
            persistScope(state)
        }
    }

    /// The session update for `status` now (nil without session tracking), recorded in `state.scope`.
    /// Called inside `state.withLock`.
    private func sessionUpdate(_ status: SessionUpdate.Status, _ state: inout State) -> SessionUpdate? {
        guard var session = state.scope.session else { return nil }
        let update = session.update(status, now: Date(), release: state.scope.release, environment: state.scope.environment)
        state.scope.session = session
        return update
    }

    /// Rewrites `scope.json` from `state.scope`. Called inside `state.withLock`.
    private func persistScope(_ state: State) {
        guard let runDirectory = state.runDirectory else { return }
        do { try runDirectory.write(state.scope) } catch { log("cannot write the run scope: \(error)") }
    }

    // MARK: - Events

    /// Captures a handled error with the given stack trace; counts it in the session (the session update
    /// travels in the same envelope).
    func capture(error: Error, stack: (stacktrace: Stacktrace?, images: [DebugImage])) {
        let type = String(reflecting: Swift.type(of: error))
        let description = String(describing: error)
        let exception = Exception(type: type, value: description, mechanism: Mechanism(type: "swift.error", handled: true),
                                  stacktrace: stack.stacktrace)
        let id = EventFactory.newEventID()
        // The event and the session update are taken under the lock; encoding and fitting the event to the
        // budget (up to 900 KiB of JSON) happen after it, so other threads' scope calls do not wait for them.
        let taken: (event: Event, session: EnvelopeItem?)? = state.withLock { state in
            guard !state.ended else { return nil }
            var event = factory.base(eventID: id, level: .error, date: Date(), scope: state.scope,
                                     breadcrumbs: state.breadcrumbs.snapshot())
            event.exception = ValueList([exception])
            if !stack.images.isEmpty { event.debugMeta = DebugMeta(images: stack.images) }
            var session: EnvelopeItem?
            if state.scope.session != nil {
                state.scope.session!.errors += 1
                if let update = sessionUpdate(.ok, &state) {
                    session = .session(update.jsonData())
                }
                persistScope(state)
            }
            return (event, session)
        }
        guard let taken else { return }
        var items: [EnvelopeItem] = [.event(EventFactory.finalize(taken.event, log: logSink))]
        if let session = taken.session { items.append(session) }
        submit(Envelope(header: .init(eventID: id), items: items))
        log("captured error \(type) as \(id)")
    }

    /// Captures a message event at `level` (`eventID` given only by tests that need a known id).
    func capture(message: String, level: Event.Level, eventID: String? = nil, extra: [String: JSONValue] = [:],
                 tags: [String: String] = [:]) {
        let id = eventID ?? EventFactory.newEventID()
        let base: Event? = state.withLock { state in
            guard !state.ended else { return nil }
            return factory.base(eventID: id, level: level, date: Date(), scope: state.scope,
                                breadcrumbs: state.breadcrumbs.snapshot())
        }
        guard var event = base else { return }
        event.logentry = LogEntry(formatted: message)
        if !extra.isEmpty { event.extra = extra }
        if !tags.isEmpty { event.tags = (event.tags ?? [:]).merging(tags) { _, new in new } }
        submit(Envelope(header: .init(eventID: id), items: [.event(EventFactory.finalize(event, log: logSink))]))
        log("captured \(level.rawValue) message as \(id)")
    }

    /// Hands an envelope to delivery, durably (written to disk before returning).
    private func submit(_ envelope: Envelope) {
        do { try delivery.submit(envelope, durable: true) } catch { log("could not persist an envelope: \(error)") }
    }

    // MARK: - End

    /// Sends everything queued, waiting up to `timeout` seconds. `true` when nothing is left.
    func flush(timeout: TimeInterval) -> Bool { delivery.flush(timeout: timeout) }

    /// Ends the session (`exited`), flushes (up to `timeout` s), keeps what was not sent for the next launch,
    /// and removes this run's directory. Idempotent.
    func end(timeout: TimeInterval) {
        let items: [EnvelopeItem]? = state.withLock { state in
            if state.ended { return nil }
            state.ended = true
            guard let update = sessionUpdate(.exited, &state) else { return [] }
            persistScope(state)
            return [.session(update.jsonData())]
        }
        guard let items else { return }
        if !items.isEmpty { submit(Envelope(items: items)) }
        delivery.close(timeout: timeout)
        log(delivery.summary)
        // `ended` is set: no other call uses the run directory any more.
        state.withLock { $0.runDirectory?.remove() }
    }

    // MARK: - Storage

    /// The anon id (`did`): a random UUID kept in `<storage>/anon_id` (mode 0600), created on first use.
    /// At most 4 KiB of the file is read; a bigger or unreadable one is replaced by a new id.
    static func anonID(storage: URL, log: ((String) -> Void)?) -> String? {
        let url = storage.appendingPathComponent("anon_id")
        if case .data(let data) = PrivateFiles.readCapped(url.path, maxBytes: 4096) {
            let text = String(decoding: data, as: UTF8.self)
            let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if UUID(uuidString: id) != nil { return id.lowercased() }
        }
        let id = UUID().uuidString.lowercased()
        do { try PrivateFiles.writeAtomically(Data(id.utf8), to: url, sync: false) } catch { log?("cannot write anon_id: \(error)") }
        return id
    }
}
