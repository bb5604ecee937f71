import Foundation
import Synchronization
import VakaCrash
import VakaSymbolication

/// The started SDK: one per ``Vaka/start(_:)``. Holds the scope of the current run (persisted in its
/// ``RunDirectory``), the run's ``Journal`` (breadcrumbs, and events until the ``JournalMover`` hands them to
/// delivery), the session and the ``Delivery``. Thread-safe: the scope and the run directory (not thread-safe
/// themselves) live in one `Mutex` (``State``), and scope changes and event building run under it; the journal
/// is lock-free; unwinding, encoding and delivery happen outside the lock.
///
/// The run's files are made by ``setUp(through:)``, the first step of start's background part (the `vaka.start`
/// thread), not by `init`: the run directory and its lock and the journal (registered with the crash handler,
/// then published with its mover: ``SetUpStage/journal``), then the anon id and `scope.json`
/// (``SetUpStage/scope``). A call that comes before the stage it needs runs it itself (or waits for the thread
/// doing it), once: a breadcrumb or a log the journal, a scope change or a capture both. So whatever a call
/// recorded survives the process dying once it returned, as it does later in the run, and only a program that
/// calls none of them at once leaves all of it to the background.
///
/// Without a journal (no run directory, or the journal file could not be created) breadcrumbs are kept in
/// memory (``MemoryBreadcrumbs``, the last 100) and each event is written to delivery durably before the call
/// returns.
final class Client: Sendable {
    /// The options given to start.
    let options: Vaka.Options
    /// The storage directory's file-system path (created, 0700; absolute, no trailing `/`). The start and exit
    /// paths make their files' paths from it as strings (``PrivateFiles/path(_:_:)``), not URLs.
    let storagePath: String
    /// The storage directory as a file URL (made at each use: ``storagePath`` is what the SDK's own file work uses).
    var storage: URL { URL(fileURLWithPath: storagePath, isDirectory: true) }
    /// Whether envelopes go to a server: a valid DSN (given in code or from `$SENTRY_DSN`); `false` in outbox mode.
    let hasDSN: Bool
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
    /// The mover of this run's journal, set once by ``setUp(through:)`` (with the journal: `mover.journal`).
    /// Read without a lock by the breadcrumb fast path.
    private let published = AtomicLazyReference<JournalMover>()
    /// This run's journal, `<storage>/runs/<run-id>/journal`: `nil` until ``setUp(through:)`` made it, and for
    /// good when it could not (memory only, see the type's documentation).
    var journal: Journal? { published.load()?.journal }
    /// Moves the journal's events (and logs) to delivery; `nil` without a journal.
    var mover: JournalMover? { published.load() }
    /// `published`'s journal as the bits of an unretained reference, 0 until it is published: what the breadcrumb
    /// fast path reads (one acquiring load, no reference counting, which `published.load()` costs: about 80 ns a
    /// breadcrumb). `published` keeps the journal alive as long as the client.
    private let journalBits = Atomic<UInt>(0)

    /// The steps of ``setUp(through:)``, in order (raw value: how far it went).
    enum SetUpStage: Int {
        /// Nothing made yet.
        case none = 0
        /// The run directory, its lock and the journal (published with its mover).
        case journal = 1
        /// The anon id (the session's `did`) and `scope.json`.
        case scope = 2
    }
    /// Held while a stage of ``setUp(through:)`` runs; the stage reached.
    private let setUpLock = Mutex<Int>(SetUpStage.none.rawValue)
    /// The stage reached, read without a lock by every call that needs one.
    private let setUpReached = Atomic<Int>(SetUpStage.none.rawValue)
    /// The in-app, PII and `beforeSend` step of every event (``EventProcessor``).
    let processor: EventProcessor
    /// Set by ``end(timeout:)`` (also in `State`): read without the lock by the breadcrumb fast path.
    private let endedFlag = Atomic<Bool>(false)
    /// Captures in progress (counted before their `ended` check, until their event is recorded): ``end(timeout:)``
    /// waits for them before its last drain, so that an event accepted while the run ends is not appended to a
    /// journal that was already drained (and then removed with the run directory).
    private let capturesInFlight = Atomic<Int>(0)
    /// Closed by ``begin()``, opened again when the background part of start is done (``finishStart(onStartThread:)``); open
    /// for a client that was never begun.
    private let startGate = Gate()
    /// Set when ``end(timeout:)`` begins: the background part of start then leaves out this run's first session
    /// update, and the end's `exited` update is the first (`init: true`): a run that exits while its start is
    /// still in the background sends one session update instead of two.
    private let ending = Atomic<Bool>(false)
    /// Whether the background part of start (``finishStart(onStartThread:)``) was taken by a thread: `true` until
    /// ``begin()`` (nothing to take), then taken by the `vaka.start` thread, or by the first ``waitForStart()``
    /// that comes before it, which then runs it itself instead of waiting for a thread the scheduler has not yet
    /// run (a short-lived program on a busy machine).
    private let startTaken = Atomic<Bool>(true)
    /// The process that created the client. A `fork()`ed child (another pid) shares the run directory and the
    /// journal's mapping with it, but not its threads: the mover, and captures in progress at the fork.
    private let ownerPID = getpid()

    /// What the lock guards: everything the capture and scope calls change.
    private struct State {
        var scope: RunScope
        /// `<storage>/runs/<run-id>/`, where `scope` is persisted: set by ``Client/setUp(through:)`` once
        /// `scope.json` is written (nil before, and when it cannot be created).
        var runDirectory: RunDirectory?
        /// The run directory between the two stages of ``Client/setUp(through:)`` (made, `scope.json` not yet written).
        var pendingRunDirectory: RunDirectory?
        /// The breadcrumbs when there is no journal.
        var memoryBreadcrumbs = MemoryBreadcrumbs()
        /// Set by ``Client/end(timeout:)``: later calls do nothing.
        var ended = false
        /// The tag keys of `scope.tags`, oldest set first (the first to go when a new one is over the cap).
        var tagOrder: [String]
        /// The global scope's attachments, in the order added (files are also in `scope.attachments`).
        var attachments: [Attachment] = []
    }
    private let state: Mutex<State>
    /// The storage directories' making still to do (``makeStorage()``), or `nil` once done or when there was none.
    private let pendingStorage: Mutex<(@Sendable () -> Void)?>
    private let logSink: (@Sendable (String) -> Void)?

    /// Makes the client of a start (``Vaka/start(_:)`` installed the crash handlers first; ``ClientSlot``: made by
    /// the `vaka.start` thread, or by the first call that needs it): release, contexts, the session (its `did`
    /// comes with ``setUp(through:)``) and delivery. The run's files are made by ``setUp(through:)``.
    /// - Throws: what ``Delivery/init(configuration:transport:clock:startWorker:)`` throws: nothing today (a `pending/`
    ///   that cannot be created makes delivery hold envelopes in memory); ``Vaka/start(_:)`` still turns Vaka off
    ///   with a `[vaka]` line should it throw.
    /// - Parameter makeStorage: the making of the storage directory and `crashes/` that ``Vaka/start(_:)`` left
    ///   to start's background part (a first run), or `nil`; run once, before any other file work of the run
    ///   (``makeStorage()``).
    convenience init(options: Vaka.Options, storage: URL, runID: String, dsn: DSN?, log: (@Sendable (String) -> Void)?,
                     makeStorage: (@Sendable () -> Void)? = nil) throws {
        try self.init(options: options, storagePath: storage.fileSystemPath, runID: runID, dsn: dsn, log: log,
                      makeStorage: makeStorage)
    }

    /// ``init(options:storage:runID:dsn:log:makeStorage:)`` with the storage directory given by its path
    /// (absolute): what ``Vaka/start(_:)`` calls.
    init(options: Vaka.Options, storagePath: String, runID: String, dsn: DSN?, log: (@Sendable (String) -> Void)?,
         makeStorage: (@Sendable () -> Void)? = nil) throws {
        self.pendingStorage = Mutex(makeStorage)
        self.options = options
        self.storagePath = storagePath
        self.runID = runID
        hasDSN = dsn != nil
        self.logSink = log
        let now = Date()
        let release = options.release ?? Vaka.defaultRelease()
        factory = EventFactory(release: release, startTime: now)
        stacks = StackCapture(arch: factory.arch)
        let ledger = CrashLedger(log: log)
        crashLedger = ledger
        var configuration = Delivery.Configuration(
            storagePath: storagePath, dsn: dsn, flushInterval: options.flushInterval,
            maxBatchSize: options.maxBatchSize, log: log,
            onEventSettled: { id, outcome in ledger.settled(id, outcome) })
        configuration.sendClientReports = options.sendClientReports
        // Its thread is started by the `vaka.start` thread (``begin()``), or by ``finishStart(onStartThread:)``.
        delivery = try Delivery(configuration: configuration, startWorker: false)
        processor = EventProcessor(options: options, reports: delivery.clientReports)
        var session: SessionState?
        if options.sessionTracking { session = SessionState(did: nil, started: now) }
        let tags = RunScope.bounded(tags: options.tags)
        if tags.dropped > 0 { log?("\(tags.dropped) of \(options.tags.count) tags left out: a run keeps at most \(RunScope.maxTags) tags") }
        let scope = RunScope(runID: runID, release: Vaka.Options.boundedRelease(release),
                             environment: Vaka.Options.boundedEnvironment(options.environment), tags: tags.tags,
                             userID: nil, session: session)
        state = Mutex(State(scope: scope, runDirectory: nil, tagOrder: tags.tags.keys.sorted()))
    }

    /// Makes the run's files up to `stage`, each stage once (the first caller does it, a concurrent one waits
    /// for it; a call whose stage was reached costs one atomic load):
    /// - ``SetUpStage/journal``: the run directory and its lock, the journal (registered with the crash handler
    ///   before it is published with its mover);
    /// - ``SetUpStage/scope``: the anon id (the session's `did`), then `scope.json` (the scope as it is then).
    /// The first step of start's background part (the `vaka.start` thread, ``begin()``); run first by a call
    /// that comes before it: a breadcrumb or log (the journal), a scope change or a capture (both), so that what
    /// it records survives a crash or a kill right after it returned.
    /// A run already ending (``end(timeout:)``) gets neither run directory nor journal nor `scope.json`: nothing
    /// is recorded any more, and its `exited` update follows at once. Does nothing in a `fork()`ed child (the files are its
    /// parent's).
    func setUp(through stage: SetUpStage = .scope) {
        guard setUpReached.load(ordering: .acquiring) < stage.rawValue, getpid() == ownerPID else { return }
        makeStorage()
        setUpLock.withLock { reached in
            if reached < SetUpStage.journal.rawValue {
                makeJournal()
                reached = SetUpStage.journal.rawValue
                setUpReached.store(reached, ordering: .releasing)
            }
            if stage == .scope && reached < SetUpStage.scope.rawValue {
                makeScopeFile()
                reached = SetUpStage.scope.rawValue
                setUpReached.store(reached, ordering: .releasing)
            }
        }
    }

    /// ``SetUpStage/journal``'s work, under ``setUpLock``.
    private func makeJournal() {
        guard !ending.load(ordering: .acquiring) else { return }
        let dir: RunDirectory
        do { dir = try RunDirectory(storagePath: storagePath, runID: runID) } catch {
            log("cannot create the run directory: \(error)")
            return
        }
        if let journal = Client.openJournal(in: dir.path, size: options.journalSize, log: logSink) {
            // Before it is published: a crash report then carries `journal_seq` (and in the fallback the handler
            // writes the rings to the file) for every record appended to it.
            journal.registerWithCrashHandler()
            let logScope = state.withLock { LogScope(run: $0.scope) }
            let mover = published.storeIfNil(JournalMover(journal: journal, delivery: delivery, factory: factory,
                                                          logs: ScopedLogBatcher(scope: logScope), processor: processor, log: logSink))
            journalBits.store(UInt(bitPattern: Unmanaged.passUnretained(mover.journal).toOpaque()), ordering: .releasing)
        }
        state.withLock { $0.pendingRunDirectory = dir }
    }

    /// ``SetUpStage/scope``'s work, under ``setUpLock``: the anon id, then `scope.json` written once with the
    /// scope as it is then, outside the state lock (the first `Codable` encode of the scope costs the runtime's
    /// type lookups), and again under it should the scope have changed meanwhile (scope calls and captures wait
    /// for this stage first, so none is expected; before `runDirectory` is set such a change writes nothing).
    private func makeScopeFile() {
        if options.sessionTracking {
            let did = Client.anonID(storagePath: storagePath, log: logSink)
            state.withLock { $0.scope.session?.did = did }
        }
        guard let (dir, written) = state.withLock({ state in state.pendingRunDirectory.map { ($0, state.scope) } }) else { return }
        // A run already ending (its journal made by an early breadcrumb or log) removes the directory next.
        if ending.load(ordering: .acquiring) {
            state.withLock { state in
                state.runDirectory = dir
                state.pendingRunDirectory = nil
            }
            return
        }
        do { try dir.write(written) } catch { log("cannot write the run scope: \(error)") }
        state.withLock { state in
            state.runDirectory = dir
            state.pendingRunDirectory = nil
            if state.scope != written { persistScope(state) }
        }
    }

    /// Opens `<run directory>/journal` (`size` bytes; `VAKA_JOURNAL_NO_MMAP=1` selects the write(2) fallback,
    /// see ``Journal``); `nil` with a debug line when it cannot be created.
    static func openJournal(in directory: String, size: Int, log: (@Sendable (String) -> Void)?) -> Journal? {
        do {
            // With SIGXFSZ blocked, as every SDK write: sizing the file past an RLIMIT_FSIZE quota then fails
            // with EFBIG (no journal: memory only) instead of killing the app.
            var opened: Result<Journal, Error> = .failure(JournalError(code: EINVAL, operation: "open"))
            _ = PrivateFiles.withFileSizeSignalBlocked {
                opened = Result {
                    try Journal(filePath: PrivateFiles.path(directory, "journal"), size: size, failed: { code in
                        log?("journal append failed: \(String(cString: strerror(code)))")
                    })
                }
                // EFBIG tells the helper to take the SIGXFSZ the sizing raised off the pending set.
                if case .failure(let error as JournalError) = opened { return error.code }
                return 0
            }
            let journal = try opened.get()
            if !journal.isMapped {
                log?("journal \(journal.path): shared mapping not used (errno \(journal.mmapError)); written to the file every \(Int(Journal.fallbackSyncInterval * 1000)) ms and at a crash")
            }
            return journal
        } catch {
            log?("cannot create the journal in \(directory) (\(error)); breadcrumbs are kept in memory and events written to storage at once")
            return nil
        }
    }

    private func log(_ message: @autoclosure () -> String) { logSink?(message()) }

    /// Writes one debug line (when `debug` is on).
    func logLine(_ message: String) { logSink?(message) }

    /// The release of this run.
    var currentRelease: String { state.withLock { $0.scope.release } }

    /// Starts the background part of start on a thread of its own (`vaka.start`): ``setUp(through:)`` (the run's
    /// files, unless a call already made them), then ``finishStart(onStartThread:)``. ``flush(timeout:)``,
    /// ``end(timeout:)`` and the captures that bypass the journal wait for it (or run it themselves when that
    /// thread has not begun it). A crash before `scope.json` was written (nothing recorded since start) is still
    /// reported at the next launch (the crash handlers are installed): with that launch's release and
    /// environment, and no session update (this run never made one).
    /// - Parameter startingThread: `false` does as when no thread can be created (tests of a run whose start's
    ///   background part has not begun when it ends).
    func begin(startingThread: Bool = true) {
        prepareBegin()
        // The thread keeps only the mover once start is done: a client dropped without `end` is released (its
        // run directory's lock with it), as the mover's own thread never held it.
        if !startingThread || !Client.startStartThread({ [weak self] in self }) { beginWithoutThread() }
    }

    /// Creates the `vaka.start` thread: it runs ``runStart()`` on the client `client` gives it (none: nothing to
    /// do), then that run's mover loop. `false` when no thread could be created (``beginWithoutThread()`` is then
    /// the caller's to run).
    static func startStartThread(_ client: @escaping @Sendable () -> Client?) -> Bool {
        OwnThread(name: "vaka.start") {
            guard let mover = client()?.runStart() else { return }
            mover.runOnCurrentThread()
        }.start()
    }

    /// What ``begin(startingThread:)`` does before its thread exists: start's background part is from now on to
    /// be taken (by the `vaka.start` thread, or by the first ``waitForStart()`` that comes before it), and a
    /// `fork()` prepares this client first (``prepareForFork()``). ``Vaka/start(_:)`` calls it when it makes the
    /// client (``ClientSlot``), whose `vaka.start` thread then runs ``runStart()``.
    /// - Parameter forkTarget: whether this client becomes the one a `fork()` prepares now; ``Vaka/start(_:)``'s
    ///   client maker passes `false` and makes it the target (``becomeForkTarget()``) only while its run is still
    ///   the started one (a client made after its run was closed must not take a later start's place).
    func prepareBegin(forkTarget: Bool = true) {
        startGate.close()
        startTaken.store(false, ordering: .releasing)
        if forkTarget { becomeForkTarget() }
        _ = Client.forkHookRegistered
    }

    /// Makes this client the one a `fork()` prepares (``prepareForFork()``).
    func becomeForkTarget() {
        Client.forkTarget.withLock { $0.client = self }
    }

    /// The `vaka.start` thread's work (after ``prepareBegin(forkTarget:)``): the storage directories on a first run, the crash
    /// runtime's deferred install, the delivery thread, the run's files, then ``finishStart(onStartThread:)``
    /// unless a ``waitForStart()`` took it first.
    /// - Returns: the mover whose loop the thread is to run then (`nil`: none, or the run is already ending).
    func runStart() -> JournalMover? {
        // First: the storage directory and `crashes/` on a first run (the crash runtime's reserve is made there).
        makeStorage()
        // The crash runtime's report reserve and libunwind's load and warm-up, left out of `Vaka.start`'s install.
        finishCrashInstall()
        // The delivery thread (with a DSN), started from here rather than by `Vaka.start`'s caller.
        delivery.startWorker()
        // In two steps: a breadcrumb or log waiting for the journal does not wait for `scope.json` as well.
        setUp(through: .journal)
        setUp(through: .scope)
        return finishStartOnStartThread()
    }

    /// What the `vaka.start` thread would have begun, for when no thread could be created (pthread_create:
    /// EAGAIN): the crash runtime's deferred part is done here, the run's files by the first call that needs
    /// them or at exit (``setUp(through:)``, ``end(timeout:atExit:)``), as when the thread is late.
    func beginWithoutThread() {
        makeStorage()
        finishCrashInstall()
        delivery.startWorker()
        logLine("no thread could be created for Vaka's start; its work is done by the calls that need it")
    }

    /// Makes the storage directory and `crashes/` when ``Vaka/start(_:)`` left that to start's background part (a
    /// first run): the `makeStorage` work given to ``init(options:storage:runID:dsn:log:makeStorage:)``, run once
    /// by whichever comes first (the `vaka.start` thread, ``setUp(through:)``, ``finishStart(onStartThread:)``);
    /// a concurrent caller waits for it. Once done, a call takes and releases a lock. Does nothing in a `fork()`ed child.
    private func makeStorage() {
        guard getpid() == ownerPID else { return }
        pendingStorage.withLock { work in
            guard let make = work else { return }
            work = nil
            make()
        }
    }

    /// The crash runtime's deferred install (`vaka_crash_finish_install`: the report's reserve, libunwind opened
    /// with `dlopen` and warmed up), with one debug line when libunwind cannot be opened: crash reports are then
    /// unwound by frame pointers.
    private func finishCrashInstall() {
        _ = vaka_crash_finish_install()
        if let why = vaka_crash_libunwind_error() {
            logLine("libunwind not loaded (\(String(cString: why))); crash reports unwind by frame pointers")
        }
    }

    /// The client whose journal a `fork()` in this process makes first (``prepareForFork()``): the last one begun
    /// (weak: a client dropped without `end` is released as before).
    private struct ForkTarget { weak var client: Client? }
    private static let forkTarget = Mutex(ForkTarget())
    /// The client a `fork()` prepares now (``prepareForFork()``), or `nil`.
    static var currentForkTarget: Client? { forkTarget.withLock { $0.client } }
    /// `pthread_atfork`'s prepare step ``prepareForFork()``, registered once per process by the first ``prepareBegin(forkTarget:)``
    /// (or by ``Vaka/start(_:)`` first, so that its own prepare step, registered after it, runs before it).
    static let forkHookRegistered: Bool = pthread_atfork({ Client.prepareForFork() }, nil, nil) == 0

    /// Runs in the forking thread just before a `fork()`, for the begun client:
    /// - makes its journal (``setUp(through:)``, the journal stage; one atomic load once it is made), so that a
    ///   child forked right after start shares it with its parent (its breadcrumbs and logs in the file its crash
    ///   report is joined with) instead of finding none and keeping them in memory (a child never makes the
    ///   run's files: they are its parent's);
    /// - then waits (at most ``forkWaitForStart`` seconds) for start's background part to end, so that the
    ///   `vaka.start` thread holds none of the client's locks (nor the Swift runtime's) when the process is
    ///   copied: a lock held by another thread at the fork stays held in the child, whose first scope call then
    ///   traps in `Mutex` (or waits forever). Not from inside `beforeSend` (its thread may be the one doing that
    ///   part).
    /// Does nothing on top of the crash handler (a previous handler chained to that forks): no lock or file is
    /// taken there.
    private static func prepareForFork() {
        guard vaka_crash_in_progress() == 0 else { return }
        guard let client = forkTarget.withLock({ $0.client }) else { return }
        client.setUp(through: .journal)
        if !HookThread.current.contains(.beforeSend) { _ = client.startGate.wait(timeout: forkWaitForStart) }
    }

    /// Longest wait of a `fork()` for start's background part (``prepareForFork()``), seconds: the crash join of
    /// many earlier reports may take longer, and a fork is not held up for it beyond this.
    static let forkWaitForStart: TimeInterval = 2

    /// The background part of start: the crash join and leftover sessions of earlier runs (their envelopes
    /// first), then this run's first session update, then the mover (this run's events after them). Marks
    /// start done (``waitForStart()``). On the `vaka.start` thread, that thread then becomes the mover's
    /// (`vaka.journal`); run by ``waitForStart()``, the mover gets a thread of its own. A run already ending
    /// (``end(timeout:)``) gets neither the first update (the `exited` one is then the first) nor a mover thread
    /// (the end drains the journal itself).
    private func finishStart(onStartThread: Bool, deferringSession: Bool = false) {
        makeStorage()
        delivery.startWorker()
        // A run ending at exit that defers its session (``end(timeout:atExit:)``) needs no run files and no `did`.
        if !deferringSession { setUp() }
        joinPreviousRuns()
        // Sessions deferred by earlier runs that ended at once: all of them, or, from such a run itself, once
        // enough wait.
        sendDeferredSessions(atLeast: deferringSession ? Client.maxDeferredSessions : 1)
        let endingNow = ending.load(ordering: .acquiring)
        if !endingNow && !onStartThread { mover?.start() }
        defer { startGate.open() }
        let items: [EnvelopeItem] = state.withLock { state in
            guard !ending.load(ordering: .acquiring), let update = sessionUpdate(.ok, &state) else { return [] }
            return [.session(update.jsonData())]
        }
        if !items.isEmpty {
            submit(Envelope(items: items))
            // `scope.json` says the first update was made only once it is written: a crash before that gives a
            // `crashed` update with `init: true` at the next launch.
            state.withLock { persistScope($0) }
        }
        delivery.wake()
    }

    /// The `vaka.start` thread's part: ``finishStart(onStartThread:)`` unless a ``waitForStart()`` took it first;
    /// returns the mover whose loop the thread is to run then (`nil`: none, or the run is already ending).
    private func finishStartOnStartThread() -> JournalMover? {
        guard !startTaken.exchange(true, ordering: .acquiringAndReleasing) else { return nil }
        finishStart(onStartThread: true)
        return ending.load(ordering: .acquiring) ? nil : mover
    }

    /// Waits until the background part of start (``finishStart(onStartThread:)``) is done; runs it on the
    /// calling thread when the `vaka.start` thread has not taken it yet. Returns at once in a `fork()`ed child:
    /// that thread is its parent's.
    func waitForStart() {
        guard getpid() == ownerPID else { return }
        if !startTaken.exchange(true, ordering: .acquiringAndReleasing) {
            finishStart(onStartThread: false)
            return
        }
        startGate.wait()
    }

    // MARK: - Scope

    /// Adds a breadcrumb: one journal record (see ``Breadcrumb/journalAttributes``), cut to the per-field limits
    /// first (``EventBudget/limited(_:)``) so that the journal holds no more than an event can. Without a journal,
    /// kept in memory.
    func addBreadcrumb(_ crumb: Breadcrumb) {
        guard !endedFlag.load(ordering: .relaxed) else { return }
        var crumb = crumb
        // A breadcrumb added from inside the hook (by the hook, or by a log it writes) is kept as given: passed
        // to the hook again, it would call itself without end.
        if let hook = options.beforeBreadcrumb, !HookThread.current.contains(.beforeBreadcrumb) {
            guard let kept = HookThread.running(.beforeBreadcrumb, { hook(crumb) }) else { return }
            crumb = kept
        }
        if !crumb.timestamp.isFinite { crumb.timestamp = Date().timeIntervalSince1970 }  // JSON has no NaN
        crumb = EventBudget.limited(crumb)
        // The level as the journal records it (also for breadcrumbs kept in memory: Relay refuses other names).
        crumb.level = Breadcrumb.levelName(Breadcrumb.journalLevel(crumb.level))
        if appendToJournal({ $0.append(crumb) }) { return }
        state.withLock { state in
            guard !state.ended else { return }
            state.memoryBreadcrumbs.add(crumb)
        }
    }

    /// The journal route of ``LogRouter`` (a ``LogRouter/JournalAppend``): the log appended to this run's journal
    /// (``LogRouter/journalSink(_:mover:)``), made first when start's background part has not made it yet;
    /// without a journal, nothing (the log still goes to breadcrumbs and the options' sinks).
    func appendLog(timeNs: UInt64, level: LogLevel, body: String, attributes: [(key: String, value: LogAttribute)]) {
        if journalBits.load(ordering: .acquiring) == 0 { setUp(through: .journal) }
        guard let mover = published.load() else { return }
        LogRouter.appendLog(to: mover.journal, mover: mover, timeNs: timeNs, level: level, body: body, attributes: attributes)
    }

    /// Runs `append` with this run's journal: once published, after one atomic load (``journalBits``); before,
    /// made first (``setUp(through:)``, the journal stage). `false` (nothing run) without a journal.
    @inline(__always)
    private func appendToJournal(_ append: (Journal) -> Void) -> Bool {
        var bits = journalBits.load(ordering: .acquiring)
        if bits == 0 {
            setUp(through: .journal)
            bits = journalBits.load(ordering: .acquiring)
        }
        guard let pointer = UnsafeRawPointer(bitPattern: bits) else { return false }
        Unmanaged<Journal>.fromOpaque(pointer)._withUnsafeGuaranteedRef { append($0) }
        return true
    }

    /// ``Vaka/addBreadcrumb(category:message:)``'s fast path: a breadcrumb of type `default`, level `info`, time
    /// now, appended to the journal with no lock and no allocation when both strings are within
    /// ``EventBudget/maxMessageChars`` bytes; otherwise through ``addBreadcrumb(_:)``.
    func addBreadcrumb(category: String, message: String) {
        guard !endedFlag.load(ordering: .relaxed) else { return }
        // With a `beforeBreadcrumb` hook the breadcrumb is built as a value for it (``addBreadcrumb(_:)``).
        if options.beforeBreadcrumb == nil, message.utf8.count <= EventBudget.maxMessageChars, category.utf8.count <= EventBudget.maxMessageChars,
           appendToJournal({ $0.append(.breadcrumb, level: LogLevel.info.rawValue, category: category, body: message) }) {
            return
        }
        addBreadcrumb(Breadcrumb(timestamp: Date().timeIntervalSince1970, category: category, message: message))
    }

    /// Sets (or with `nil` removes) a tag on all later events and on this run's crash. Key and value are cut to
    /// 200 characters (``EventBudget/maxTagChars``) first, as the server would. The run keeps at most
    /// ``RunScope/maxTags`` tags: a new key beyond that removes the tag set longest ago (debug line), so the
    /// newest tags win. `scope.json` is rewritten only when the tags change, and stays under
    /// ``RunScope/maxEncodedBytes`` (so each call costs at most one bounded write).
    func setTag(_ key: String, _ value: String?) {
        setUp()  // `scope.json`, so that a crash right after this call carries it
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

    /// Sets or clears `user.id` (cut to ``Vaka/Options/maxTagChars`` scalars): ``setUser(_:)`` with a user of
    /// that id only.
    func identify(_ userID: String?) {
        setUser(userID.map { User(id: $0) })
    }

    /// Sets (or with `nil` or an empty user clears) the user of later events and of this run's crash, each field
    /// cut to ``Vaka/Options/maxTagChars`` scalars; `scope.json` is rewritten when it changed.
    func setUser(_ user: User?) {
        setUp()  // `scope.json`, so that a crash right after this call carries it
        let user = user.map(\.bounded).flatMap { $0.isEmpty ? nil : $0 }
        state.withLock { state in
            guard !state.ended, state.scope.user != user else { return }
            state.scope.user = user
            persistScope(state)
        }
    }

    /// Sets (or with `nil` removes) context `name` of later events and of this run's crash (NaN and infinities
    /// as text). A value that would take contexts and extra over ``RunScope/maxDataBytes`` encoded is left out
    /// (debug line).
    func setContext(_ name: String, _ value: [String: JSONValue]?) {
        changeScopeData("context \(name.prefix(64).debugDescription)", removing: value == nil) { scope in
            var contexts = scope.contexts ?? [:]
            contexts[name] = value?.mapValues(\.finite)
            scope.contexts = contexts.isEmpty ? nil : contexts
        }
    }

    /// Sets (or with `nil` removes) extra `key` of later events and of this run's crash; bounded as
    /// ``setContext(_:_:)``.
    func setExtra(_ key: String, _ value: JSONValue?) {
        changeScopeData("extra \(key.prefix(64).debugDescription)", removing: value == nil) { scope in
            var extra = scope.extra ?? [:]
            extra[key] = value?.finite
            scope.extra = extra.isEmpty ? nil : extra
        }
    }

    /// Applies `change` to the scope's contexts or extra and rewrites `scope.json`, unless nothing changed or
    /// (when not `removing`) the result passes ``RunScope/maxDataBytes`` (then a debug line naming `what`).
    private func changeScopeData(_ what: String, removing: Bool, _ change: (inout RunScope) -> Void) {
        setUp()  // `scope.json`, so that a crash right after this call carries it
        state.withLock { state in
            guard !state.ended else { return }
            var scope = state.scope
            change(&scope)
            guard scope != state.scope else { return }
            if !removing, scope.dataBytes > RunScope.maxDataBytes {
                log("\(what) left out: contexts and extra would take more than \(RunScope.maxDataBytes) B")
                return
            }
            state.scope = scope
            persistScope(state)
        }
    }

    /// Adds an attachment to later events (``capture(error:stack:scope:)``, and
    /// ``capture(message:level:eventID:extra:tags:scope:attachments:stack:)`` with `attachments`); a file
    /// attachment also to this run's crash (its path made absolute and kept in `scope.json`). Left out with a
    /// debug line: beyond ``Attachment/maxRegistered``, bytes over ``Attachment/maxBytes``, a path or file name
    /// over ``Attachment/maxPathBytes``. The content type is cut to ``Vaka/Options/maxTagChars`` scalars.
    func addAttachment(_ attachment: Attachment) {
        setUp()  // `scope.json`, so that a crash right after this call carries it
        var attachment = attachment
        attachment.contentType = Vaka.Options.cut(attachment.contentType, maxChars: Vaka.Options.maxTagChars)
        let name = attachment.filename.prefix(200).debugDescription
        if case .data(let data) = attachment.content, data.count > Attachment.maxBytes {
            log("attachment \(name) left out: \(data.count) B, over \(Attachment.maxBytes) B")
            return
        }
        var ref: AttachmentRef?
        if case .file(let path) = attachment.content {
            let absolute = URL(fileURLWithPath: path).path
            guard absolute.utf8.count <= Attachment.maxPathBytes, attachment.filename.utf8.count <= Attachment.maxPathBytes else {
                log("attachment \(name) left out: its path or name is longer than \(Attachment.maxPathBytes) B")
                return
            }
            attachment.content = .file(path: absolute)
            ref = AttachmentRef(path: absolute, filename: attachment.filename, contentType: attachment.contentType)
        }
        state.withLock { state in
            guard !state.ended else { return }
            guard state.attachments.count < Attachment.maxRegistered else {
                log("attachment \(name) left out: at most \(Attachment.maxRegistered) are registered")
                return
            }
            state.attachments.append(attachment)
            if let ref {
                state.scope.attachments = (state.scope.attachments ?? []) + [ref]
                persistScope(state)
            }
        }
    }

    /// Removes every attachment of the global scope (also from this run's crash).
    func clearAttachments() {
        setUp()  // `scope.json`, so that a crash right after this call carries it
        state.withLock { state in
            guard !state.ended, !state.attachments.isEmpty else { return }
            state.attachments = []
            state.scope.attachments = nil
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

    /// Captures a handled error with the given stack trace (its exceptions: ``ErrorExceptions``); counts it in
    /// the session (the session update travels in the same envelope). The per-call `scope` (with the call's
    /// `fingerprint`) is laid over the global scope for this event only; the global attachments (unless `scope` clears them)
    /// and the scope's go with it.
    func capture(error: Error, stack: (stacktrace: Stacktrace?, images: [DebugImage]), scope: Scope? = nil) {
        setUp()  // the journal, `scope.json` and the session's `did` (a capture right after start)
        capturesInFlight.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { capturesInFlight.wrappingSubtract(1, ordering: .releasing) }
        let exceptions = ErrorExceptions.exceptions(for: error, stacktrace: stack.stacktrace)
        let type = exceptions.last?.type ?? String(reflecting: Swift.type(of: error))
        let id = EventFactory.newEventID()
        let dropsGlobal = scope?.clearsGlobalAttachments == true
        // The event and the session update are taken under the lock; encoding and fitting the event to the
        // budget (up to 900 KiB of JSON) happen after it, so other threads' scope calls do not wait for them.
        let taken: (event: Event, session: Data?, attachments: [Attachment])? = state.withLock { state in
            guard !state.ended else { return nil }
            var event = journal != nil
                ? factory.captured(eventID: id, level: .error, date: Date(), scope: state.scope)
                : factory.base(eventID: id, level: .error, date: Date(), scope: state.scope,
                               breadcrumbs: state.memoryBreadcrumbs.snapshot)
            event.exception = ValueList(exceptions)
            if !stack.images.isEmpty { event.debugMeta = DebugMeta(images: stack.images) }
            var session: Data?
            if state.scope.session != nil {
                state.scope.session!.errors += 1
                session = sessionUpdate(.ok, &state)?.jsonData()
                persistScope(state)
            }
            return (event, session, dropsGlobal ? [] : state.attachments)
        }
        guard let taken else { return }
        var event = taken.event
        scope?.apply(to: &event)
        record(event, session: taken.session, attachments: taken.attachments + (scope?.attachments ?? []))
        log("captured error \(type) as \(id)")
    }

    /// Whether an event of ``Vaka/capture(_:)`` or ``Vaka/capture(message:level:)`` is kept by
    /// ``Vaka/Options/sampleRate`` (always with 1); one not kept is counted (`sample_rate`, `error`).
    func sampled() -> Bool {
        let rate = options.sampleRate
        if rate >= 1 || rate.isNaN { return true }
        if rate > 0 && Double.random(in: 0..<1) < rate { return true }
        delivery.clientReports.record(.sampleRate, category: "error")
        log("event not kept by sampleRate \(rate)")
        return false
    }

    /// A handled error not kept by ``Vaka/Options/sampleRate`` still counts in the session (as Sentry's SDKs
    /// count it): `errors` goes up in `scope.json`, and the next session update (the next kept error, `exited`,
    /// `crashed` or `abnormal`) carries it; no update is sent for it alone.
    func countSampledOutError() {
        setUp()  // `scope.json`, so that a crash right after this call carries it
        state.withLock { state in
            guard !state.ended, state.scope.session != nil else { return }
            state.scope.session!.errors += 1
            persistScope(state)
        }
    }

    /// Captures a message event at `level` (`eventID` given only by tests that need a known id). `extra` and
    /// `tags` are the call's own (``Vaka/track(_:_:)``, ``Vaka/screen(_:)``), over the global scope's;
    /// `scope` as for ``capture(error:stack:scope:)``; `attachments`: whether the
    /// global scope's attachments go with it (``Vaka/capture(message:level:fingerprint:scope:)``; screens and
    /// custom events carry none). `stack`: the calling thread's stack for ``Vaka/Options/attachStacktrace``
    /// (`threads.values[0]`, `current: true`).
    func capture(message: String, level: Event.Level, eventID: String? = nil, extra: [String: JSONValue] = [:],
                 tags: [String: String] = [:], scope: Scope? = nil, attachments: Bool = false, stack: (stacktrace: Stacktrace?, images: [DebugImage])? = nil) {
        setUp()  // the journal and `scope.json` (a capture right after start)
        capturesInFlight.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { capturesInFlight.wrappingSubtract(1, ordering: .releasing) }
        let id = eventID ?? EventFactory.newEventID()
        let wantsGlobal = attachments && scope?.clearsGlobalAttachments != true
        let base: (event: Event, attachments: [Attachment])? = state.withLock { state in
            guard !state.ended else { return nil }
            let global = wantsGlobal ? state.attachments : []
            if journal != nil { return (factory.captured(eventID: id, level: level, date: Date(), scope: state.scope), global) }
            return (factory.base(eventID: id, level: level, date: Date(), scope: state.scope,
                                 breadcrumbs: state.memoryBreadcrumbs.snapshot), global)
        }
        guard let base else { return }
        var event = base.event
        event.logentry = LogEntry(formatted: message)
        if !extra.isEmpty { event.extra = (event.extra ?? [:]).merging(extra) { _, new in new } }
        if !tags.isEmpty { event.tags = (event.tags ?? [:]).merging(tags) { _, new in new } }
        if let stack, let trace = stack.stacktrace {
            event.threads = ValueList([SentryThread(name: Client.currentThreadName(), crashed: false, current: true, stacktrace: trace)])
            if !stack.images.isEmpty { event.debugMeta = DebugMeta(images: stack.images) }
        }
        scope?.apply(to: &event)
        record(event, session: nil, attachments: base.attachments + (scope?.attachments ?? []))
        log("captured \(event.level.rawValue) message as \(id)")
    }

    /// The calling thread's name: Foundation's `Thread.current.name` when set, else the kernel's
    /// (`/proc/thread-self/comm`, as `pthread_setname_np` set it); `nil` when neither is there.
    static func currentThreadName() -> String? {
        if let name = Thread.current.name, !name.isEmpty { return name }
        guard case .data(let data) = PrivateFiles.readCapped("/proc/thread-self/comm", maxBytes: 64) else { return nil }
        let name = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .newlines)
        return name.isEmpty ? nil : name
    }

    /// The journal level of an event level (`fatal` 21, `error` 17, `warning` 13, `info` 9, `debug` 5).
    static func journalLevel(_ level: Event.Level) -> UInt8 {
        switch level {
        case .fatal: return LogLevel.fatal.rawValue
        case .error: return LogLevel.error.rawValue
        case .warning: return LogLevel.warn.rawValue
        case .info: return LogLevel.info.rawValue
        case .debug: return LogLevel.debug.rawValue
        }
    }

    /// Records a captured event: appended to the journal (JSON without contexts and breadcrumbs, meta
    /// attributes `event_id` and `session`, the session update JSON that travels with it) for the mover,
    /// which is woken; the event then survives the process dying. Without a journal, or when the append fails
    /// (a full spill file, a record over the journal's limit), the mover is drained first (order is kept) and
    /// the event, completed with the breadcrumbs now, is written to delivery durably before returning.
    ///
    /// Attachments: with a journal, the bytes of data attachments are written to side files in
    /// `runs/<run-id>/attachments/` (``AttachmentItems/record(_:eventID:directory:log:)``) and every attachment
    /// is listed in the record's meta attribute `attachments`; the mover reads the files when it makes the
    /// envelope and deletes the side files once the envelope is on disk. Without a journal they are read now.
    private func record(_ event: Event, session: Data?, attachments: [Attachment] = []) {
        var event = event
        var refs: [AttachmentRef] = []
        // Captured from inside `beforeSend`: not passed to it (``EventProcessor/process(_:kind:runsBeforeSend:)``).
        let inBeforeSend = HookThread.current.contains(.beforeSend)
        let mover = self.mover
        if let mover {
            let journal = mover.journal
            if !attachments.isEmpty {
                let directory = state.withLock { $0.runDirectory?.url }.map(AttachmentItems.sideDirectory)
                refs = AttachmentItems.record(attachments, eventID: event.eventID, directory: directory, log: logSink)
            }
            if let body = try? event.jsonData() {
                var attributes = [Journal.Attribute(key: "event_id", value: .string(event.eventID), meta: true)]
                if let session { attributes.append(Journal.Attribute(key: "session", value: .string(String(decoding: session, as: UTF8.self)), meta: true)) }
                if inBeforeSend { attributes.append(Journal.Attribute(key: EventProcessor.capturedInBeforeSendKey, value: .string("1"), meta: true)) }
                if !refs.isEmpty, let list = try? JSONEncoder().encode(refs) {
                    attributes.append(Journal.Attribute(key: AttachmentItems.journalKey, value: .string(String(decoding: list, as: UTF8.self)), meta: true))
                }
                if journal.append(.event, level: Client.journalLevel(event.level), timeNs: Journal.nanoseconds(event.timestamp ?? 0),
                                  bodyBytes: body, attributes: attributes) != nil {
                    mover.eventAppended()
                    return
                }
            }
            log("could not journal event \(event.eventID); written to storage at once")
            // Earlier runs' envelopes and the mover's first: order is kept. Not from inside `beforeSend`: the hook's
            // thread may be the one doing start's background part (it would wait for itself) or a pass of the
            // mover (whose lock it holds).
            if !inBeforeSend {
                waitForStart()
                mover.drain()
            }
            event = factory.completed(event, breadcrumbs: Breadcrumb.last(journal.breadcrumbs(), before: nil))
        }
        // After earlier runs' envelopes and this run's first session update; not from inside `beforeSend` (above).
        if mover == nil && !inBeforeSend { waitForStart() }
        // The event's attachments (the `event_id` stays what it is: beforeSend cannot change it).
        let attachmentItems = attachments.isEmpty ? []
            : mover == nil ? AttachmentItems.items([], inMemory: attachments, eventID: event.eventID, log: logSink)
                             : AttachmentItems.items(refs, eventID: event.eventID, log: logSink)
        guard let processed = processor.process(event, kind: .captured, runsBeforeSend: !inBeforeSend) else {
            if let session { submit(Envelope(items: [.session(session)])) }
            // Its attachments go with it, counted as attachments dropped by the same hook.
            for item in attachmentItems { processor.reports?.record(.beforeSend, item: item) }
            AttachmentItems.removeSideFiles(refs)
            return
        }
        var items: [EnvelopeItem] = [.event(EventFactory.finalize(processed, log: logSink))]
        if let session { items.append(.session(session)) }
        items += attachmentItems
        submit(Envelope(header: .init(eventID: processed.eventID), items: items))
        AttachmentItems.removeSideFiles(refs)
    }

    /// Hands an envelope to delivery, durably (written to disk before returning).
    private func submit(_ envelope: Envelope) {
        do { try delivery.submit(envelope, durable: true) } catch { log("could not persist an envelope: \(error)") }
    }

    // MARK: - End

    /// Moves everything in the journal to delivery (``JournalMover/drain()``), then sends everything queued,
    /// waiting up to `timeout` seconds. `true` when nothing is left. From inside `beforeSend` (``HookThread``)
    /// only the last part: the hook runs on the start thread, or inside a pass of the mover that a drain would
    /// wait for, so the events still in the journal stay there for the mover.
    func flush(timeout: TimeInterval) -> Bool {
        if HookThread.current.contains(.beforeSend) { return delivery.flush(timeout: timeout) }
        waitForStart()
        mover?.drain()
        return delivery.flush(timeout: timeout)
    }

    /// Ends the session (`exited`; the first update, `init: true`, when the background part of start had not made
    /// one), moves what the journal holds to delivery, closes the journal, removes this run's directory (the
    /// journal with it), then flushes (up to `timeout` s), keeping what was not sent for the next launch.
    /// Idempotent.
    ///
    /// With `atExit` (the process's exit hook), a run whose start's background part has not begun (a program done
    /// within a millisecond or two) does only what that part must: the storage directories, the crash join when
    /// earlier runs left reports, the deferred sessions once ``maxDeferredSessions`` wait. Its session, which made
    /// no update yet, is written as a ``SessionRecord`` for a later launch to send instead of an `exited` update
    /// now (no `anon_id` read, no JSON, no envelope); when the record cannot be written the update is sent as
    /// without `atExit`.
    func end(timeout: TimeInterval, atExit: Bool = false) {
        // A fork child leaves the journal (shared with its parent: the parent's mover moves what the child
        // appended), the run directory and the session to the parent; it neither waits for threads it does not
        // have nor removes them, and sends no session update (the session is the parent process's).
        let forkChild = getpid() != ownerPID
        if !forkChild { ending.store(true, ordering: .releasing) }
        let deferring = atExit && !forkChild && !startTaken.exchange(true, ordering: .acquiringAndReleasing)
        if deferring {
            // A stage of the run's files that the `vaka.start` thread is making completes first (a later one sees
            // `ending` and makes nothing), so that what it made is removed below.
            setUpLock.withLock { _ in }
            finishStart(onStartThread: false, deferringSession: true)
        } else {
            // The session's `did` for a client whose start's background part never ran (nothing else: it is ending).
            setUp()
            // The background part of start first: its session update, if it made one, comes before the `exited` one.
            waitForStart()
        }
        // The session's end: its `exited` update, or its record (`nil`: ended before, or a fork child).
        var record: SessionRecord? = nil
        let taken: [EnvelopeItem]? = state.withLock { state in
            if state.ended { return nil }
            state.ended = true
            endedFlag.store(true, ordering: .relaxed)
            guard !forkChild, var session = state.scope.session else { return [] }
            if deferring && !session.initSent {
                record = SessionRecord(session: session, ended: Date(), release: state.scope.release,
                                       environment: state.scope.environment)
                session.status = .exited
                session.initSent = true
                state.scope.session = session
                return []
            }
            guard let update = sessionUpdate(.exited, &state) else { return [] }
            // `scope.json` keeps saying `ok` until the `exited` update is written (below): a process killed
            // while draining the journal is then `abnormal` at the next launch, not a session left open.
            return [.session(update.jsonData())]
        }
        guard var items = taken else { return }
        if !forkChild {
            // Captures that passed their `ended` check before it was set record their events now: wait for them.
            while capturesInFlight.load(ordering: .acquiring) != 0 { sched_yield() }
            mover?.stop()
            mover?.drain()
        }
        // Waits for appends in progress (a thread past the `ended` check), unregisters it from the crash handler.
        journal?.close()
        if let record {
            do {
                try record.write(storagePath: storagePath, runID: runID)
            } catch {
                log("cannot write the session record (\(error)); its update is sent now")
                items = [.session(record.update(did: Client.anonID(storagePath: storagePath, log: logSink)).jsonData())]
            }
        }
        if !items.isEmpty { submit(Envelope(items: items)) }
        // `ended` is set and the journal closed: no other call uses the run directory any more. Removed once the
        // `exited` update (or the session record) is written (its `scope.json` still says `ok`, so a process
        // killed before this point is `abnormal` at the next launch) and before the flush (a run that is gone
        // needs no `scope.json` saying `exited`: the next launch finds nothing to close).
        if !forkChild { state.withLock { ($0.runDirectory ?? $0.pendingRunDirectory)?.remove() } }
        delivery.close(timeout: timeout)
        log(delivery.summary)
    }

    /// Marks the run as ending before ``begin()``, as ``end(timeout:)`` does: tests of the single session update
    /// of a run that ends before the background part of start made its first one.
    func markEndingForTesting() { ending.store(true, ordering: .releasing) }

    // MARK: - Storage

    /// The anon id (`did`): a random UUID kept in `<storage>/anon_id` (mode 0600), created on first use.
    /// At most 4 KiB of the file is read; a bigger or unreadable one is replaced by a new id.
    static func anonID(storage: URL, log: ((String) -> Void)?) -> String? {
        anonID(storagePath: storage.fileSystemPath, log: log)
    }

    /// ``anonID(storage:log:)`` for the storage directory at `storagePath`: read and written without `URL` or
    /// `Data` (the start and exit paths use neither).
    static func anonID(storagePath: String, log: ((String) -> Void)?) -> String? {
        let path = PrivateFiles.path(storagePath, "anon_id")
        if case .success(let bytes) = PrivateFiles.readCappedBytes(path, maxBytes: 4096) {
            // ASCII whitespace around the id trimmed with index loops (generic collection adapters would cost
            // `Vaka.start` their first-use type lookups); a UUID is ASCII, so lower-casing is per byte.
            func isSpace(_ b: UInt8) -> Bool { b == 0x20 || (0x09...0x0D).contains(b) }
            var start = 0, end = bytes.count
            while start < end && isSpace(bytes[start]) { start += 1 }
            while end > start && isSpace(bytes[end - 1]) { end -= 1 }
            var lower = [UInt8]()
            for i in start..<end { lower.append((65...90).contains(bytes[i]) ? bytes[i] + 32 : bytes[i]) }
            let id = String(decoding: lower, as: UTF8.self)
            if RandomID.isUUID(id) { return id }
        }
        let id = RandomID.uuid(lowercase: true)
        do { try PrivateFiles.writeAtomically(text: id, toPath: path, sync: false) } catch { log?("cannot write anon_id: \(error)") }
        return id
    }
}

/// A gate, open at first: ``wait()`` blocks while it is closed (``close()``), until ``open()``.
/// `@unchecked Sendable`: `isOpen` is read and written only with `condition` held.
final class Gate: @unchecked Sendable {
    private let condition = NSCondition()
    private var isOpen = true

    /// Closes the gate: later ``wait()`` calls block until ``open()``.
    func close() {
        condition.lock()
        isOpen = false
        condition.unlock()
    }

    /// Opens the gate and wakes every waiter.
    func open() {
        condition.lock()
        isOpen = true
        condition.broadcast()
        condition.unlock()
    }

    /// Returns once the gate is open.
    func wait() {
        condition.lock()
        while !isOpen { condition.wait() }
        condition.unlock()
    }

    /// Returns once the gate is open (`true`), or after `timeout` seconds (`false` when it is still closed).
    func wait(timeout: TimeInterval) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !isOpen {
            if !condition.wait(until: deadline) { return isOpen }
        }
        return true
    }
}
