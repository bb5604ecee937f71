import Foundation

/// The delivery half of the SDK in one object: give it envelopes, it gets them to the server (or the outbox).
///
/// - With a ``DSN``: envelopes go into a ``PersistentQueue`` in `<storage>/pending/` and a background thread
///   (`vaka.delivery`) runs the ``Uploader``: at start (pending files of a previous run), every
///   `flushInterval`, as soon as a batch holds `maxBatchSize` envelopes, on ``flush(timeout:)`` and on
///   ``close(timeout:)``; after a failure it waits for the backoff / rate limit to pass.
/// - Without a DSN (outbox mode): each envelope is written at once to `<storage>/outbox/` (``Outbox``).
///
/// All methods are thread-safe. Intended wiring: `Vaka.start` builds a ``Configuration`` from its options
/// (`dsn` or `key`+`endpoint` → ``DSN``; `storageDirectory`, `flushInterval`, `maxBatchSize`, `debug`) and
/// keeps one `Delivery`; `capture`/`track`/... build an ``Envelope`` and call ``submit(_:durable:)``;
/// `Vaka.flush()` calls ``flush(timeout:)``, `Vaka.close()` ``close(timeout:)``.
final class Delivery {
    /// Settings; defaults are the SDK's.
    struct Configuration {
        /// The SDK storage directory (`Options.storageDirectory` or its default); created if needed.
        var storageDirectory: URL
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
        /// Debug sink (`Options.debug`): receives one line per event of note, never the key. `nil` = silent.
        var log: ((String) -> Void)?

        /// Creates a configuration; see the properties for defaults.
        init(storageDirectory: URL, dsn: DSN?, flushInterval: TimeInterval = 10, maxBatchSize: Int = 50,
             maxBatchFiles: Int = 200, requestTimeout: TimeInterval = 15, syncWrites: Bool = false,
             log: ((String) -> Void)? = nil) {
            self.storageDirectory = storageDirectory
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

    private let clock: DeliveryClock
    private let log: (String) -> Void
    private let cond = NSCondition()
    private var wakeRequested = true       // pump once at start: pending files of a previous run
    private var closed = false
    private var workerDone = false
    private var lastOutcome: Uploader.Outcome = .idle
    private var pumps = 0
    private var nextTimer: Date
    private var thread: Thread?

    /// Opens the queue (picking up files of a previous run) and starts the delivery thread; in outbox mode
    /// only remembers the directory.
    /// - Parameters:
    ///   - configuration: settings.
    ///   - transport: HTTP client; default a ``CurlTransport`` with `requestTimeout` (libcurl is loaded at the first send).
    ///   - clock: time source for backoff and rate limits; default the system clock.
    /// - Throws: when `<storage>/pending` cannot be created or listed.
    init(configuration: Configuration, transport: HTTPTransport? = nil, clock: DeliveryClock = SystemDeliveryClock()) throws {
        self.configuration = configuration
        self.clock = clock
        let sink = configuration.log
        log = { message in sink?(message) }
        outbox = Outbox(storageDirectory: configuration.storageDirectory)
        nextTimer = Date().addingTimeInterval(configuration.flushInterval)
        guard let dsn = configuration.dsn else {
            queue = nil
            uploader = nil
            log("no DSN: envelopes are written to \(outbox.directory.path)")
            return
        }
        let q = try PersistentQueue(storageDirectory: configuration.storageDirectory,
                                    maxBatchSize: configuration.maxBatchSize,
                                    maxBatchFiles: configuration.maxBatchFiles,
                                    syncWrites: configuration.syncWrites, log: log)
        queue = q
        uploader = Uploader(queue: q, dsn: dsn,
                            transport: transport ?? CurlTransport(timeout: configuration.requestTimeout, log: log),
                            clock: clock, requestTimeout: configuration.requestTimeout, log: log)
        log("sending to \(dsn) (envelope URL \(dsn.envelopeURL.absoluteString))")
        let t = Thread { [weak self] in self?.run() }
        t.name = "vaka.delivery"
        thread = t
        t.start()
    }

    /// Hands over one envelope.
    /// - Parameter durable: in queue mode, write it to its batch file before returning (survives SIGKILL);
    ///   otherwise it sits in memory until the next send, `flush` or `close`. Outbox writes are always immediate.
    /// - Throws: ``DeliveryIOError`` when a required write fails (queue mode: the envelope is still queued
    ///   in memory).
    func submit(_ envelope: Envelope, durable: Bool = false) throws {
        guard let queue = queue else {
            let url = try outbox.write(envelope, at: clock.now)
            log("wrote \(url.lastPathComponent)")
            return
        }
        let full = try queue.enqueue(envelope, durable: durable || isClosed)
        if full { wake() }
    }

    /// Sends everything queued, waiting until the queue is empty or `timeout` seconds pass.
    /// Returns early (`false`) when sending is stopped (a 401 or a permanent transport error), or the next
    /// allowed attempt (backoff or rate limit) lies beyond the deadline. Outbox mode: always `true` (writes are
    /// immediate).
    /// - Returns: `true` when nothing is left to send.
    @discardableResult
    func flush(timeout: TimeInterval) -> Bool {
        guard let queue = queue, let uploader = uploader else { return true }
        let deadline = Date().addingTimeInterval(max(0, timeout))
        do { try queue.persist() } catch { log("flush: could not write the open batch: \(error)") }
        cond.lock(); defer { cond.unlock() }
        if closed { return queue.isEmpty }
        wakeRequested = true
        cond.broadcast()
        var seen = pumps
        while true {
            if pumps > seen {
                seen = pumps
                if queue.isEmpty { return true }
                switch lastOutcome {
                case .stopped:
                    return false
                case .waiting(let until), .held(let until):
                    if until.timeIntervalSince(clock.now) > deadline.timeIntervalSinceNow { return false }
                case .idle:
                    wakeRequested = true  // new envelopes arrived during the pump
                    cond.broadcast()
                }
            }
            if uploader.isStopped { return false }
            if !cond.wait(until: deadline) { return queue.isEmpty }
        }
    }

    /// Flushes (up to `timeout` seconds), stops the delivery thread and writes whatever is still queued to
    /// disk for the next launch. Later ``submit(_:durable:)`` calls write straight to disk and send nothing.
    /// - Returns: `true` when everything was sent (always `true` in outbox mode).
    @discardableResult
    func close(timeout: TimeInterval) -> Bool {
        guard let queue = queue else { return true }
        let sent = flush(timeout: timeout)
        uploader?.cancel()
        cond.lock()
        closed = true
        cond.broadcast()
        // The worker finishes its current request (bounded by requestTimeout) and exits.
        let limit = Date().addingTimeInterval(configuration.requestTimeout + 5)
        while !workerDone, cond.wait(until: limit) {}
        cond.unlock()
        do { try queue.persist() } catch { log("close: could not write the open batch: \(error)") }
        if let t = uploader?.transport as? CurlTransport { t.invalidate() }
        log(sent ? "closed; queue empty" : "closed; \(queue.fileCount) batch file(s) kept for the next launch")
        return sent
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
        return "sent \(us.sent), failed requests \(us.failures), dropped: \(qs.droppedBatchFiles) batch file(s) / \(qs.droppedEnvelopes) envelope(s) over the cap, \(us.droppedTooLarge) too large, \(us.droppedRejected) rejected; \(q.fileCount) batch file(s) pending"
    }

    // MARK: - Worker

    private func run() {
        guard let uploader = uploader else { return }
        cond.lock()
        while !closed {
            let now = Date()
            let due = wakeRequested || now >= nextTimer || retryDue(now)
            if !due {
                _ = cond.wait(until: nextWake(now))
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
