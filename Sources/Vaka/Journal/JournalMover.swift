import Foundation
import Synchronization

/// ``LogBatcher`` with the ``LogScope`` of the run whose logs it batches: the mover's log batching (this run's
/// logs, and a dead run's at the next launch).
struct ScopedLogBatcher: Sendable {
    /// The batching.
    var batcher = LogBatcher()
    /// The run's release, environment and trace id.
    let scope: LogScope

    /// A batcher for the logs of a run with `scope`.
    init(scope: LogScope) { self.scope = scope }

    /// Takes one log record; `true` when a batch is due now (count or bytes).
    mutating func add(_ record: Journal.Record) -> Bool { batcher.add(record, scope: scope) }

    /// Whether the oldest record held is old enough to send (age).
    func isDue(now: Date) -> Bool { batcher.isDue(now: now) }

    /// Whether nothing is held.
    var isEmpty: Bool { batcher.isEmpty }

    /// The `log` item of everything held (emptied), or `nil` when nothing is held.
    mutating func takeItem() -> EnvelopeItem? { batcher.takeItem() }
}

/// Moves a run's journalled events (and logs) into ``Delivery``: one background thread per client
/// (`vaka.journal`), and ``drain()`` on the caller's thread for ``Client/flush(timeout:)`` and
/// ``Client/end(timeout:)``.
///
/// A pass (one at a time, under ``passState``'s lock):
/// 1. Events, in seq order (at most 2,000 a pass): each record's JSON is decoded (``Event``, as
///    ``EventFactory/captured(eventID:level:date:scope:)`` made it), given this run's contexts and the last
///    100 breadcrumbs with a lower seq (from a snapshot of the breadcrumb ring, ``Journal/breadcrumbs()``,
///    taken after the event was appended: one when the pass starts and one every 10 ms while it runs; the
///    ring keeps the newest breadcrumbs, so when more than it holds were added between an event and its
///    snapshot, that event gets only those still there, possibly none), fitted to the size budget (``EventFactory/finalize(_:budget:log:)``) and put
///    in an envelope with the session update of its meta attribute `session`, if any, and the `attachment` items
///    of its meta attribute `attachments` (the files read now; side files deleted once the envelope is on
///    disk: ``AttachmentItems``). The pass's envelopes go
///    to ``Delivery/submit(batch:)`` (queue mode: one write of `pending/` for up to 200 of them; outbox mode:
///    one file each, consumed one by one), and only once they are on disk are the records consumed
///    (``Journal/consume(through:)``): a record leaves the journal only when it is durable elsewhere. The
///    process dying between the write and the consume leaves that batch's records in the journal, so the next
///    launch delivers them again (same `event_id`: servers keep one).
///    When `pending/` cannot be written, the envelopes are held in memory by the queue (and still sent); the
///    records stay unconsumed until a later pass writes them (``Delivery/persistQueued()``).
/// 2. Logs: each record goes to the ``ScopedLogBatcher`` (when the client has one); a due batch (count, bytes, age,
///    log ring at least 750 ‰ full, or a drain) is submitted durably, then consumed through its last record.
/// 3. In the journal's fallback (mmap refused), ``Journal/sync()`` when anything was appended since the last.
///
/// When the thread runs: woken by ``eventAppended()`` and, when the log ring is 750 ‰ full, by ``logAppended()``
/// (an atomic flag; the condition is signalled only when the thread sleeps), else every second (every 200 ms in the fallback, so a SIGKILL loses at most that much).
///
/// `@unchecked Sendable`: `stopped` and `thread` are touched only with `cond` held; `passState` is a `Mutex`;
/// the flags are `Atomic`s; the other properties are `let`s of `Sendable` types set in `init`.
final class JournalMover: @unchecked Sendable {
    /// The journal whose events and logs are moved.
    let journal: Journal
    private let delivery: Delivery
    private let factory: EventFactory
    /// In-app marking, the PII rule and `beforeSend` (called on this thread), and the breadcrumb count.
    private let processor: EventProcessor
    private let logSink: (@Sendable (String) -> Void)?

    /// What one pass carries over to the next.
    private struct PassState {
        /// The last event record handed to delivery (the next pass starts after it).
        var eventCursor: Journal.Record?
        /// The last event record handed to delivery but not consumed yet (its envelope not on disk yet).
        var unconsumedEvent: Journal.Record?
        /// The last log record handed to the batcher.
        var logCursor: Journal.Record?
        /// The log batching (nil: logs stay in the journal).
        var logs: ScopedLogBatcher?
        /// The journal's last seq at the last sync (fallback only).
        var syncedSeq: UInt64 = 0
    }
    private let passState: Mutex<PassState>

    private let wakeRequested = Atomic<Bool>(false)
    private let sleeping = Atomic<Bool>(false)
    private let cond = NSCondition()
    private var stopped = false
    /// Whether the loop runs (on its own thread, or on one that called ``runOnCurrentThread()``); cleared when it ends.
    private var thread = false

    /// Seconds between passes when nothing wakes the thread: 1, or 0.2 in the fallback.
    let interval: TimeInterval

    /// Log ring fill (per mille) from which held logs are sent at once: 750.
    static let logRingHighWater = 750

    /// A mover for `journal` (not started: ``start()``). `logs`: the log batching, or `nil`. `processor`: the
    /// step every event goes through (``EventProcessor``).
    init(journal: Journal, delivery: Delivery, factory: EventFactory, logs: ScopedLogBatcher?,
         processor: EventProcessor = EventProcessor(), log: (@Sendable (String) -> Void)?) {
        self.journal = journal
        self.delivery = delivery
        self.factory = factory
        self.processor = processor
        self.logSink = log
        interval = journal.isMapped ? 1 : Journal.fallbackSyncInterval
        passState = Mutex(PassState(logs: logs))
    }

    /// Starts the `vaka.journal` thread.
    func start() {
        cond.lock(); defer { cond.unlock() }
        guard !thread, !stopped else { return }
        let t = OwnThread(name: "vaka.journal") { [self] in run() }
        thread = true
        // No thread left: the journal keeps its records (a later start, or the next launch's join, moves them).
        if !t.start() { thread = false }
    }

    /// Runs the `vaka.journal` loop on the calling thread (renamed so) until ``stop()``, as ``start()``'s thread
    /// would: for a thread that has nothing else to do (the background part of start, once done), so that the
    /// process has one thread less to create and to tear down.
    func runOnCurrentThread() {
        cond.lock()
        guard !thread, !stopped else { cond.unlock(); return }
        thread = true
        cond.unlock()
        ThreadName.rename("vaka.journal")
        run()
    }

    /// Called after an event record was appended: wakes the thread (a store, plus a signal only when it sleeps).
    func eventAppended() { wake() }

    /// Called when a log could not be appended (the journal's spill file full, a write error): counted in the
    /// client reports (`buffer_overflow`, `log_item`).
    func logNotRecorded() { processor.reports?.record(.bufferOverflow, category: "log_item") }

    /// Called after a log record was appended: every ``logCheckInterval``-th call looks at the log ring and
    /// wakes the thread when it is at least ``logRingHighWater`` full, so that a burst of logs is moved (and
    /// its ring space freed) before the ring fills and appends go to the spill file at write(2) cost. The
    /// other calls cost one relaxed atomic increment.
    func logAppended() {
        let n = logsAppended.wrappingAdd(1, ordering: .relaxed).newValue
        if n % JournalMover.logCheckInterval == 0, journal.fillPermille(.log) >= JournalMover.logRingHighWater { wake() }
    }

    /// How many logs apart ``logAppended()`` looks at the log ring's fill: 32 (the default journal's log ring
    /// holds about 700 short logs, so the check comes well before the ring is full).
    static let logCheckInterval: UInt32 = 32

    private let logsAppended = Atomic<UInt32>(0)

    /// Wakes the thread: a store, plus a signal only when it sleeps.
    private func wake() {
        wakeRequested.store(true, ordering: .sequentiallyConsistent)
        if sleeping.load(ordering: .sequentiallyConsistent) {
            cond.lock()
            cond.signal()
            cond.unlock()
        }
    }

    /// Stops the thread (waiting for its current pass). Later ``drain()`` calls still work.
    func stop() {
        cond.lock()
        stopped = true
        cond.broadcast()
        let running = thread
        cond.unlock()
        guard running else { return }
        // The thread's pass holds `passState`: taking it once waits for the pass to end.
        passState.withLock { _ in }
        cond.lock()
        while thread { _ = cond.wait(until: Date().addingTimeInterval(0.05)) }
        cond.unlock()
    }

    /// Moves everything committed so far, logs included (``Client/flush(timeout:)``, close): passes until the
    /// events up to the journal's last seq at the call are moved (a pass moves at most ``maxEventsPerPass``),
    /// or a pass stops short (delivery refused a batch: it is held and retried).
    func drain() {
        let horizon = journal.lastSeq
        while true {
            let (capped, reached) = pass(force: true)
            if !capped || reached >= horizon { return }
        }
    }

    private func run() {
        cond.lock()
        while !stopped {
            sleeping.store(true, ordering: .sequentiallyConsistent)
            if !wakeRequested.exchange(false, ordering: .sequentiallyConsistent) {
                _ = cond.wait(until: Date().addingTimeInterval(interval))
            }
            sleeping.store(false, ordering: .sequentiallyConsistent)
            wakeRequested.store(false, ordering: .sequentiallyConsistent)
            if stopped { break }
            cond.unlock()
            pass(force: false)
            cond.lock()
        }
        thread = false
        cond.broadcast()
        cond.unlock()
    }

    /// One pass (see the type's documentation); `force` sends held logs whatever their age. Returns whether it
    /// stopped at ``maxEventsPerPass`` (more events may be waiting) and the seq of the last event it moved.
    @discardableResult
    private func pass(force: Bool) -> (capped: Bool, reached: UInt64) {
        passState.withLock { state in
            let capped = moveEvents(&state)
            moveLogs(&state, force: force)
            if !journal.isMapped {
                let last = journal.lastSeq
                if last != state.syncedSeq {
                    journal.sync()
                    state.syncedSeq = last
                }
            }
            return (capped, state.eventCursor?.seq ?? 0)
        }
    }

    /// Most envelopes handed to delivery in one go (bounds the memory of a pass over a full ring and spill).
    static let maxEnvelopesPerSubmit = 200

    /// Moves the events (up to ``maxEventsPerPass``); true when it stopped at that cap.
    private func moveEvents(_ state: inout PassState) -> Bool {
        if let held = state.unconsumedEvent {
            // Envelopes of an earlier pass still only in memory: written now?
            guard delivery.persistQueued() else { return false }
            journal.consume(through: held)
            state.unconsumedEvent = nil
        }
        guard journal.next(.event, after: state.eventCursor) != nil else { return false }
        // Breadcrumb snapshots, each with the journal's last seq read just before it (its horizon): every event
        // up to a horizon has its earlier breadcrumbs in that snapshot, unless the ring had already moved past
        // them. An event takes the first snapshot whose horizon covers it; a new one is taken when none does,
        // and every ``snapshotInterval`` while the pass runs, so that events appended meanwhile are looked at
        // before the ring overwrites their breadcrumbs.
        var trails: [(horizon: UInt64, trail: BreadcrumbTrail)] = []
        var lastSnapshot = DispatchTime.now().uptimeNanoseconds
        func snapshot() {
            let horizon = journal.lastSeq
            if let newest = trails.last, newest.horizon == horizon { return }
            trails.append((horizon, BreadcrumbTrail(journal.breadcrumbs())))
            lastSnapshot = DispatchTime.now().uptimeNanoseconds
        }
        func trail(for seq: UInt64) -> BreadcrumbTrail {
            trails.removeAll { $0.horizon < seq }  // events come in seq order: older snapshots are done
            if let covering = trails.first { return covering.trail }
            snapshot()
            return trails.last!.trail  // its horizon is at least `seq`: the record was committed before
        }
        var envelopes: [Envelope] = []
        var sideFiles: [AttachmentRef] = []  // of the events in `envelopes`: deleted once those are on disk
        var last: Journal.Record?
        func submit() {
            guard let through = last else { return }
            if delivery.submit(batch: envelopes) {
                journal.consume(through: through)
                state.unconsumedEvent = nil
                AttachmentItems.removeSideFiles(sideFiles)
                sideFiles.removeAll()
            } else {
                state.unconsumedEvent = through
            }
            envelopes.removeAll(keepingCapacity: true)
            last = nil
        }
        // Outbox mode: each envelope is its own file, durable once written: consumed one by one, so a death
        // mid-pass leaves at most one envelope to be written again.
        let perEnvelope = delivery.queue == nil
        var moved = 0
        while moved < JournalMover.maxEventsPerPass, let record = journal.next(.event, after: state.eventCursor) {
            moved += 1
            state.eventCursor = record
            last = record
            let breadcrumbs = trail(for: record.seq).last(before: record.seq, limit: processor.maxBreadcrumbs)
            if let envelope = JournalMover.envelope(for: record, breadcrumbs: breadcrumbs, factory: factory,
                                                    processor: processor, log: logSink) {
                envelopes.append(envelope)
            }
            sideFiles += AttachmentItems.refs(of: record).filter(\.sideFile)  // also of an event not sent
            if DispatchTime.now().uptimeNanoseconds - lastSnapshot > JournalMover.snapshotInterval { snapshot() }
            if perEnvelope || envelopes.count >= JournalMover.maxEnvelopesPerSubmit {
                submit()
                if state.unconsumedEvent != nil { return false }
            }
        }
        submit()
        return moved == JournalMover.maxEventsPerPass
    }

    /// Most events one pass moves (the next pass goes on): 2,000.
    static let maxEventsPerPass = 2_000

    /// Nanoseconds between breadcrumb snapshots while a pass runs: 10 ms.
    static let snapshotInterval: UInt64 = 10_000_000

    /// The envelope of event record `record` with `breadcrumbs` (see the type's documentation), the event
    /// passed through `processor` (``EventProcessor``); the crash join uses it for the events a run left in its
    /// journal. `nil` (a line to `log`) when the JSON does not decode; only the session update, when the
    /// processor's `beforeSend` dropped the event (`nil` without one).
    static func envelope(for record: Journal.Record, breadcrumbs: [Breadcrumb], factory: EventFactory,
                         processor: EventProcessor = EventProcessor(), log: ((String) -> Void)?) -> Envelope? {
        let event: Event
        do {
            event = try JSONDecoder().decode(Event.self, from: Data(record.body))
        } catch {
            log?("journal event record \(record.seq) does not decode (\(error)); dropped")
            processor.reports?.record(.internalSDKError, category: "error")
            return nil
        }
        let session = record.meta("session").map { EnvelopeItem.session(Data($0.utf8)) }
        let attachments = AttachmentItems.refs(of: record)
        guard let processed = processor.process(factory.completed(event, breadcrumbs: breadcrumbs), kind: .captured,
                                                runsBeforeSend: record.meta(EventProcessor.capturedInBeforeSendKey) == nil) else {
            log?("event \(event.eventID) dropped by beforeSend")
            // Its attachments go with it, counted as attachments dropped by the same hook.
            for item in AttachmentItems.items(attachments, eventID: event.eventID, log: log) {
                processor.reports?.record(.beforeSend, item: item)
            }
            return session.map { Envelope(items: [$0]) }
        }
        var items: [EnvelopeItem] = [.event(EventFactory.finalize(processed, log: log))]
        if let session { items.append(session) }
        if !attachments.isEmpty { items += AttachmentItems.items(attachments, eventID: processed.eventID, log: log) }
        return Envelope(header: .init(eventID: processed.eventID), items: items)
    }

    private func moveLogs(_ state: inout PassState, force: Bool) {
        guard var logs = state.logs else { return }
        defer { state.logs = logs }
        func send() {
            guard let through = state.logCursor, let item = logs.takeItem() else { return }
            do {
                try delivery.submit(Envelope(items: [item]), durable: true)
            } catch {
                logSink?("could not write a log envelope (\(error)); it is held in memory and still sent")
            }
            journal.consume(through: through)
        }
        while let record = journal.next(.log, after: state.logCursor) {
            state.logCursor = record
            if logs.add(record) { send() }
        }
        if !logs.isEmpty && (force || logs.isDue(now: Date()) || journal.fillPermille(.log) >= JournalMover.logRingHighWater) {
            send()
        }
    }
}

/// The breadcrumbs of one journal snapshot for the events of a pass: each event gets the last 100 with a lower
/// seq, each record decoded into a ``Breadcrumb`` once, when an event first needs it. Used by one pass only
/// (not shared between threads).
final class BreadcrumbTrail {
    private let records: [Journal.Record]
    private var decoded: [Breadcrumb?]

    /// The breadcrumb records of `records` (seq order).
    init(_ records: [Journal.Record]) {
        self.records = records.filter { $0.kind == .breadcrumb }
        decoded = Array(repeating: nil, count: self.records.count)
    }

    /// The last `limit` (100) breadcrumbs whose seq is below `seq`, oldest first.
    func last(before seq: UInt64, limit: Int = EventBudget.maxBreadcrumbs) -> [Breadcrumb] {
        var lo = 0, hi = records.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if records[mid].seq < seq { lo = mid + 1 } else { hi = mid }
        }
        var out: [Breadcrumb] = []
        out.reserveCapacity(min(limit, lo))
        for i in max(0, lo - limit)..<lo {
            if decoded[i] == nil { decoded[i] = Breadcrumb(record: records[i]) }
            out.append(decoded[i]!)
        }
        return out
    }
}

extension Journal.Record {
    /// The string value of meta attribute `key` (`event_id`, `session`), or `nil`.
    func meta(_ key: String) -> String? {
        for attribute in attributes where attribute.meta && attribute.key == key {
            if case .string(let value) = attribute.value { return value }
        }
        return nil
    }
}
