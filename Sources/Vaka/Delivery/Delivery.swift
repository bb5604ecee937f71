import Foundation

/// The delivery half of the SDK in one object: give it envelopes, it gets them to the server (or the outbox).
///
/// - With a ``DSN``: envelopes go into a ``PersistentQueue`` in `<storage>/pending/` and a background thread
///   (`vaka.delivery`) runs the ``Uploader``: at start (pending files of a previous run), every
///   `flushInterval`, as soon as a batch holds `maxBatchSize` envelopes, on ``flush(timeout:)`` and on
///   ``close(timeout:)``; after a failure it waits for the backoff / rate limit to pass.
/// - Without a DSN (outbox mode): each envelope is written at once to `<storage>/outbox/` (``Outbox``).
///
/// Numbers from the options are clamped before use (NaN, negative, 0 or huge values never reach a timer):
/// `flushInterval` to 0.1...86,400 s (NaN: 10), `maxBatchSize` to 1...1,000, `requestTimeout` to 1...300 s
/// (NaN: 15); a clamped value is logged. `flush`/`close` timeouts are clamped to 0...86,400 s (NaN: 0).
///
/// Storage that cannot be written does not stop delivery: the queue holds batches in memory (bounded, see
/// ``PersistentQueue``) and sends them; ``flush(timeout:)`` returns `false` when an envelope was dropped
/// without being written or sent since the previous flush.
///
/// All methods are thread-safe. Intended wiring: `Vaka.start` builds a ``Configuration`` from its options
/// (`dsn` or `key`+`endpoint` → ``DSN``; `storageDirectory`, `flushInterval`, `maxBatchSize`, `debug`) and
/// keeps one `Delivery`; `capture`/`track`/... build an ``Envelope`` and call ``submit(_:durable:)``;
/// `Vaka.flush()` calls ``flush(timeout:)``, `Vaka.close()` ``close(timeout:)``.
///
/// `@unchecked Sendable`: the worker thread and the callers share the `var`s below, and touch them only with
/// `cond` held (an `NSCondition`, because the worker and ``flush(timeout:)`` wait on it, which
/// `Synchronization.Mutex` cannot do); the `let`s are set once in `init` and are `Sendable` themselves
/// (``PersistentQueue``, ``Uploader``, ``Outbox``, the clock, the `@Sendable` log).
final class Delivery: @unchecked Sendable {
    /// Settings; defaults are the SDK's.
    struct Configuration {
        /// The SDK storage directory's path (`Options.storageDirectory` or its default; absolute); created if needed.
        var storagePath: String
        /// ``storagePath`` as a file URL.
        var storageDirectory: URL {
            get { URL(fileURLWithPath: storagePath, isDirectory: true) }
            set { storagePath = newValue.fileSystemPath }
        }
        /// Where to send; `nil` selects outbox mode.
        var dsn: DSN?
        /// Seconds between automatic sends (`Options.flushInterval`, default 10).
        var flushInterval: TimeInterval = 10
        /// Envelopes per batch, and the batch size that triggers a send at once (`Options.maxBatchSize`, default 50).
        var maxBatchSize: Int = 50
        /// Most batch files kept in `pending/` (oldest dropped first). Default 200.
        var maxBatchFiles: Int = 200
        /// Bound on each HTTP request, seconds. Default 15.
        var requestTimeout: TimeInterval = 15
        /// `fsync` batch files before renaming them into place. Default `false` (process death is covered
        /// either way; this adds power-loss safety at a cost per write).
        var syncWrites = false
        /// Debug sink (`Options.debug`): receives one line per event of note, never the key, on the delivery
        /// thread or the caller's. `nil` = silent.
        var log: (@Sendable (String) -> Void)?
        /// Told (on the delivery thread) the `event_id` of each envelope with an event that the server accepted
        /// or that was given up (``Uploader/onEventSettled``). Not called in outbox mode: there an envelope is
        /// done once ``Delivery/submit(_:durable:)`` returns.
        var onEventSettled: (@Sendable (String, Uploader.EventSettlement) -> Void)?
        /// Most bytes of envelopes held in memory while the storage cannot be written (4 MiB; see ``PersistentQueue``).
        var maxMemoryBytes = PersistentQueue.defaultMaxMemoryBytes
        /// Count what is dropped and send it as client reports (``ClientReports``; `Options.sendClientReports`,
        /// default `true`).
        var sendClientReports = true
        /// Tests only: called in outbox mode after an outbox file carrying a client report is written and
        /// before that report is committed, with the file's URL (where a death leaves both on disk). `nil`: none.
        var afterOutboxWrite: (@Sendable (URL) -> Void)?

        /// Creates a configuration; see the properties for defaults.
        init(storageDirectory: URL, dsn: DSN?, flushInterval: TimeInterval = 10, maxBatchSize: Int = 50,
             maxBatchFiles: Int = 200, requestTimeout: TimeInterval = 15, syncWrites: Bool = false,
             log: (@Sendable (String) -> Void)? = nil,
             onEventSettled: (@Sendable (String, Uploader.EventSettlement) -> Void)? = nil) {
            self.init(storagePath: storageDirectory.fileSystemPath, dsn: dsn, flushInterval: flushInterval,
                      maxBatchSize: maxBatchSize, maxBatchFiles: maxBatchFiles, requestTimeout: requestTimeout,
                      syncWrites: syncWrites, log: log, onEventSettled: onEventSettled)
        }

        /// ``init(storageDirectory:dsn:flushInterval:maxBatchSize:maxBatchFiles:requestTimeout:syncWrites:log:onEventSettled:)``
        /// with the storage directory given by its path (absolute): what the client makes at start (no `URL`).
        init(storagePath: String, dsn: DSN?, flushInterval: TimeInterval = 10, maxBatchSize: Int = 50,
             maxBatchFiles: Int = 200, requestTimeout: TimeInterval = 15, syncWrites: Bool = false,
             log: (@Sendable (String) -> Void)? = nil,
             onEventSettled: (@Sendable (String, Uploader.EventSettlement) -> Void)? = nil) {
            self.onEventSettled = onEventSettled
            self.storagePath = storagePath
            self.dsn = dsn
            self.flushInterval = flushInterval
            self.maxBatchSize = maxBatchSize
            self.maxBatchFiles = maxBatchFiles
            self.requestTimeout = requestTimeout
            self.syncWrites = syncWrites
            self.log = log
        }
    }

    /// The configuration in use.
    let configuration: Configuration
    /// The queue (`nil` in outbox mode).
    let queue: PersistentQueue?
    /// The uploader (`nil` in outbox mode).
    let uploader: Uploader?
    /// The outbox (always present; used only in outbox mode).
    let outbox: Outbox
    /// What was dropped, per reason and category, sent with the next envelope (``ClientReports``).
    let clientReports: ClientReports

    private let clock: DeliveryClock
    private let log: @Sendable (String) -> Void
    private let cond = NSCondition()
    private var wakeRequested = true       // pump once at start: pending files of a previous run
    private var closed = false
    private var workerDone = false
    private var lastOutcome: Uploader.Outcome = .idle
    private var pumps = 0
    private var nextTimer: Date
    private var thread: OwnThread?
    private var reportedDrops = 0            // queue.stats.droppedUnwritable at the last flush's return
    private var outboxFailures = 0           // outbox writes that failed
    private var reportedOutboxFailures = 0   // outboxFailures at the last flush's return
    private var reportedOutboxDrops = 0      // outbox.droppedFiles at the last flush's return

    /// `configuration` with its numbers clamped (see the type's documentation); each change is logged.
    static func sanitized(_ configuration: Configuration, log: (String) -> Void) -> Configuration {
        var c = configuration
        func clamp(_ name: String, _ value: Double, _ range: ClosedRange<Double>, nan: Double) -> Double {
            let v = value.isNaN ? nan : min(max(value, range.lowerBound), range.upperBound)
            if v != value { log("\(name) \(value) is outside \(range.lowerBound)...\(range.upperBound) s; using \(v)") }
            return v
        }
        c.flushInterval = clamp("flushInterval", c.flushInterval, 0.1...Bounded.maxDelay, nan: 10)
        c.requestTimeout = clamp("requestTimeout", c.requestTimeout, 1...300, nan: 15)
        let batch = min(max(c.maxBatchSize, 1), 1_000)
        if batch != c.maxBatchSize { log("maxBatchSize \(c.maxBatchSize) is outside 1...1000; using \(batch)") }
        c.maxBatchSize = batch
        c.maxBatchFiles = max(c.maxBatchFiles, 1)
        return c
    }

    /// Makes the queue and starts the delivery thread, which first opens the queue (`pending/` created and
    /// listed: the files of a previous run); in outbox mode only remembers the directory.
    /// - Parameters:
    ///   - configuration: settings.
    ///   - transport: HTTP client; default a ``CurlTransport`` with `requestTimeout` (libcurl is loaded at the first send).
    ///   - clock: time source for backoff and rate limits; default the system clock.
    ///   - startWorker: start the delivery thread now; with `false` it is started by ``startWorker()`` (what
    ///     `Vaka.start` does from its `vaka.start` thread, so that its caller creates one thread, not two), or by
    ///     the first ``flush(timeout:)``. Until then envelopes are queued, not sent.
    /// - Throws: nothing today (a `<storage>/pending` that cannot be created or listed makes the queue hold
    ///   envelopes in memory; see ``PersistentQueue``); kept `throws` for API stability.
    init(configuration: Configuration, transport: HTTPTransport? = nil, clock: DeliveryClock = SystemDeliveryClock(),
         startWorker: Bool = true) throws {
        let sink = configuration.log
        log = { message in sink?(message) }
        self.configuration = Delivery.sanitized(configuration, log: { message in sink?(message) })
        self.clock = clock
        let reports = ClientReports(storagePath: configuration.storagePath,
                                    enabled: configuration.sendClientReports, log: sink)
        clientReports = reports
        var box = Outbox(storagePath: configuration.storagePath)
        box.dropSink = { records in reports.record(.cacheOverflow, serialized: records) }
        outbox = box
        let config = self.configuration
        nextTimer = Date().addingTimeInterval(config.flushInterval)
        guard let dsn = config.dsn else {
            queue = nil
            uploader = nil
            log("no DSN: envelopes are written to \(outbox.directoryPath)")
            return
        }
        let q = try PersistentQueue(storagePath: config.storagePath,
                                    maxBatchSize: config.maxBatchSize,
                                    maxBatchFiles: config.maxBatchFiles,
                                    syncWrites: config.syncWrites, maxMemoryBytes: config.maxMemoryBytes, log: log,
                                    dropSink: { reason, records in reports.record(reason, serialized: records) },
                                    openNow: false)
        queue = q
        uploader = Uploader(queue: q, dsn: dsn,
                            transport: transport ?? CurlTransport(timeout: config.requestTimeout, log: log),
                            clock: clock, requestTimeout: config.requestTimeout, log: log,
                            onEventSettled: config.onEventSettled, clientReports: reports)
        if configuration.log != nil { log("sending to \(dsn) (envelope URL \(dsn.envelopeURL.absoluteString))") }
        if startWorker { self.startWorker() }
    }

    /// Starts the delivery thread (`vaka.delivery`) unless it was started or ``close(timeout:)`` was called;
    /// nothing in outbox mode. The thread opens the queue first (``PersistentQueue/open()``), then sends what a
    /// previous run left in `pending/`.
    func startWorker() {
        guard queue != nil else { return }
        cond.lock(); defer { cond.unlock() }
        guard thread == nil, !closed else { return }
        let t = OwnThread(name: "vaka.delivery") { [weak self] in
            self?.queue?.open()
            self?.run()
        }
        thread = t
        // No thread left: envelopes stay in `pending/` (a later call, or the next launch, sends them).
        if !t.start() { thread = nil }
    }

    /// Hands over one envelope.
    /// - Parameter durable: in queue mode, write it to its batch file before returning (survives SIGKILL);
    ///   otherwise it sits in memory until the next send, `flush` or `close`. Outbox writes are always immediate.
    /// - Throws: ``DeliveryIOError`` when a required write fails (queue mode: the envelope is still queued
    ///   in memory).
    func submit(_ envelope: Envelope, durable: Bool = false) throws {
        guard let queue = queue else {
            let droppedBefore = outbox.droppedFiles
            // The client report of what was dropped so far travels in this file (settled by the write). Its
            // in-flight entry names the file, so a death between the write and the commit does not send the
            // counts again.
            let now = clock.now
            let name = outbox.newFileName(for: envelope, at: now)
            let ticket = clientReports.take(now: now, carrierName: name)
            var written = envelope
            if let ticket { written.items.append(ticket.item) }
            do {
                try outbox.write(written, named: name)
            } catch {
                if let ticket { clientReports.abort(ticket) }
                clientReports.record(.internalSDKError, envelope: envelope)
                cond.lock(); outboxFailures += 1; cond.unlock()
                log("outbox write failed (\(error)); the envelope is dropped")
                throw error
            }
            if let ticket {
                configuration.afterOutboxWrite?(outbox.directory.appendingFileComponent(name))
                clientReports.commit(ticket)
            }
            log("wrote \(name)")
            let dropped = outbox.droppedFiles - droppedBefore
            if dropped > 0 {
                log("outbox over \(outbox.maxFiles) files or \(outbox.maxBytes) B: dropped the \(dropped) oldest file(s)")
            }
            return
        }
        do {
            let full = try queue.enqueue(envelope, durable: durable || isClosed)
            if full { wake() }
        } catch {
            wake()  // the envelope is held in memory as a sealed batch: send it
            throw error
        }
    }

    /// Hands over several envelopes and makes them durable once (the journal mover's pass): in queue mode each
    /// is added to the open batch without a write, then the queue is written once (``PersistentQueue/persist(final:)``);
    /// in outbox mode each is written to its own file at once, as ``submit(_:durable:)`` does.
    /// - Returns: `true` when every envelope is on disk (queue: `pending/`; outbox: `outbox/`, or dropped there
    ///   after a failed write, which is counted as for ``submit(_:durable:)``); `false` when some are held only
    ///   in memory because the queue could not be written: they are still sent, and ``persistQueued()`` tries again.
    @discardableResult
    func submit(batch envelopes: [Envelope]) -> Bool {
        guard let queue = queue else {
            for envelope in envelopes { try? submit(envelope) }  // a failed outbox write is logged and counted there
            return true
        }
        var full = false
        var held = false
        for envelope in envelopes {
            do { full = try queue.enqueue(envelope, durable: false) || full } catch { held = true; full = true }
        }
        if full { wake() }
        return persistQueued() && !held
    }

    /// Writes what the queue holds only in memory (the open batch, batches whose write failed) to `pending/`.
    /// `true` when nothing is left only in memory (always `true` in outbox mode).
    func persistQueued() -> Bool {
        guard let queue = queue else { return true }
        do {
            try queue.persist()
            return true
        } catch {
            log("could not write the queue (\(error)); envelopes stay in memory and are still sent")
            return false
        }
    }

    /// Sends everything queued, waiting until the queue is empty or `timeout` seconds pass (clamped to
    /// 0...86,400; NaN counts as 0).
    /// Returns early (`false`) when sending is stopped (a 401, a 3xx or a permanent transport error), or the next allowed attempt (backoff or
    /// rate limit) lies beyond the deadline. Outbox mode: `true` unless an outbox write failed, or old outbox
    /// files were dropped to keep it within its caps (``Outbox/maxFiles``, ``Outbox/maxBytes``), since the
    /// previous flush.
    /// - Parameter startingWorker: start the delivery thread first when it was not started (``startWorker()``);
    ///   ``close(timeout:)`` passes `false` for a zero timeout, where a thread started only to be stopped would
    ///   race the close for what it sends.
    /// - Returns: `true` when nothing is left to send and nothing was dropped unwritten and unsent since the
    ///   previous flush (an envelope dropped from memory because the storage could not be written, or an
    ///   outbox file that could not be written or was dropped at the outbox's cap, makes it `false` once).
    @discardableResult
    func flush(timeout: TimeInterval, startingWorker: Bool = true) -> Bool {
        guard let queue = queue, let uploader = uploader else {
            cond.lock(); defer { cond.unlock() }
            let dropped = outbox.droppedFiles
            let clean = outboxFailures == reportedOutboxFailures && dropped == reportedOutboxDrops
            reportedOutboxFailures = outboxFailures
            reportedOutboxDrops = dropped
            return clean
        }
        if startingWorker { startWorker() }
        let deadline = Date().addingTimeInterval(Bounded.timeout(timeout))
        do { try queue.persist() } catch { log("flush: could not write to storage (\(error)); envelopes stay in memory") }
        cond.lock(); defer { cond.unlock() }
        // `false` also when envelopes were dropped unwritten and unsent since the previous flush.
        func result(_ empty: Bool) -> Bool {
            let dropped = queue.stats.droppedUnwritable
            defer { reportedDrops = dropped }
            return empty && dropped == reportedDrops
        }
        if closed { return result(queue.isEmpty) }
        wakeRequested = true
        cond.broadcast()
        var seen = pumps
        while true {
            if pumps > seen {
                seen = pumps
                if queue.isEmpty { return result(true) }
                switch lastOutcome {
                case .stopped:
                    return result(false)
                case .waiting(let until), .held(let until):
                    if until.timeIntervalSince(clock.now) > deadline.timeIntervalSinceNow { return result(false) }
                case .idle:
                    // Pump again only for envelopes that arrived during the pump; what the pump could not
                    // settle (e.g. an unreadable batch file) waits for the timer instead of spinning.
                    if queue.openCount > 0 {
                        wakeRequested = true
                        cond.broadcast()
                    }
                }
            }
            if uploader.isStopped { return result(false) }
            if !cond.wait(until: Bounded.waitDeadline(deadline)) && Date() >= deadline { return result(queue.isEmpty) }
        }
    }

    /// Flushes (up to `timeout` seconds), stops the delivery thread and writes whatever is still queued to
    /// disk for the next launch. Later ``submit(_:durable:)`` calls write straight to disk and send nothing.
    /// - Returns: `true` when everything was sent (always `true` in outbox mode).
    @discardableResult
    func close(timeout: TimeInterval) -> Bool {
        defer { clientReports.persist() }
        guard let queue = queue else { return flush(timeout: 0) }
        // A close that waits for nothing does not start a delivery thread that was never started: what is queued
        // is written for the next launch, not raced for by a thread stopped as it begins.
        var sent = flush(timeout: timeout, startingWorker: Bounded.timeout(timeout) > 0)
        uploader?.cancel()
        // The exchange in progress (a server that does not answer) is not waited for up to its request timeout:
        // it ends within about a second, its envelopes kept for the next launch.
        uploader?.transport.abortAll()
        cond.lock()
        closed = true
        if thread == nil { workerDone = true }  // never started: nothing to wait for
        cond.broadcast()
        // The worker finishes its current request (aborted above; bounded by requestTimeout in any case) and exits.
        let limit = Date().addingTimeInterval(configuration.requestTimeout + 5)
        while !workerDone, cond.wait(until: Bounded.waitDeadline(limit)), Date() < limit {}
        cond.unlock()
        let droppedBefore = queue.stats.droppedUnwritable
        do { try queue.persist(final: true) } catch { log("close: could not write the queue: \(error)") }
        if queue.stats.droppedUnwritable > droppedBefore { sent = false }
        if let t = uploader?.transport as? CurlTransport { t.invalidate() }
        log(sent ? "closed; queue empty" : "closed; \(queue.fileCount) batch file(s) kept for the next launch")
        return sent
    }

    /// Whether the delivery thread was started (``startWorker()``), for tests.
    var workerStarted: Bool {
        cond.lock(); defer { cond.unlock() }
        return thread != nil
    }

    /// Asks the delivery thread to send now (used after a batch fills; tests use it after moving the clock).
    func wake() {
        cond.lock()
        wakeRequested = true
        cond.broadcast()
        cond.unlock()
    }

    /// Whether ``close(timeout:)`` was called.
    var isClosed: Bool {
        cond.lock(); defer { cond.unlock() }
        return closed
    }

    /// One line of counters for debug output: sent, failures, dropped (cap, 413, 4xx), files pending.
    var summary: String {
        guard let q = queue, let u = uploader else { return "outbox mode: \(outbox.list().count) file(s)" }
        let qs = q.stats, us = u.stats
        return "sent \(us.sent), failed requests \(us.failures), dropped: \(qs.droppedBatchFiles) batch file(s) / \(qs.droppedEnvelopes) envelope(s) over the cap, \(us.droppedTooLarge) too large, \(us.droppedRejected) rejected, \(qs.droppedUnwritable) unwritable; \(q.fileCount) batch file(s) pending, \(q.memoryCount) envelope(s) in memory, \(qs.writeFailures) failed write(s)"
    }

    // MARK: - Worker

    private func run() {
        guard let uploader = uploader else { return }
        cond.lock()
        while !closed {
            let now = Date()
            let due = wakeRequested || now >= nextTimer || retryDue(now)
            if !due {
                _ = cond.wait(until: Bounded.waitDeadline(nextWake(now), now: now))
                continue
            }
            wakeRequested = false
            if now >= nextTimer { nextTimer = now.addingTimeInterval(configuration.flushInterval) }
            cond.unlock()
            let outcome = uploader.pump()
            cond.lock()
            lastOutcome = outcome
            pumps += 1
            cond.broadcast()
        }
        workerDone = true
        cond.broadcast()
        cond.unlock()
    }

    /// Whether the last pump's wait (backoff / rate limit) has passed.
    private func retryDue(_ now: Date) -> Bool {
        switch lastOutcome {
        case .waiting(let until), .held(let until):
            return clock.now >= until
        case .idle, .stopped:
            return false
        }
    }

    /// When the worker must look again: the flush timer, or the end of the last pump's wait (mapped from the
    /// injected clock onto real time).
    private func nextWake(_ now: Date) -> Date {
        var wake = nextTimer
        switch lastOutcome {
        case .waiting(let until), .held(let until):
            wake = min(wake, now.addingTimeInterval(max(0, until.timeIntervalSince(clock.now))))
        case .idle, .stopped:
            break
        }
        return wake
    }
}
