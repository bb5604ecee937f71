import Foundation
import Synchronization
import VakaCrash
import VakaSymbolication

/// The crash join, run on the `vaka.start` thread that ``Vaka/start(_:)`` starts (``Client/begin()``): what
/// earlier runs left behind becomes envelopes.
///
/// - A fork child's `<run-id>-<pid>.crash` gets its own event id and its parent run's scope, without a session update.
/// - Each `<storage>/crashes/<run-id>.crash` (other than this run's) becomes its fatal event
///   (``FatalEventBuilder``), completed with the scope **of the run that crashed** from
///   `<storage>/runs/<run-id>/` (release, environment, tags, user, contexts, extra, breadcrumbs, and the files
///   it attached with ``Vaka/addAttachment(path:filename:contentType:)``, read now; without it the current
///   release and environment), and queued with that run's session update `crashed` in the same envelope.
///   Its `event_id` comes from the crashed run's id (and, for a fork child, its pid:
///   ``FatalEventBuilder/eventID(forRunID:forkChildPID:)``), so it is the same at every launch. The event goes through ``EventFactory/finalize(_:budget:log:)`` (size limits).
/// - The report and the run directory are deleted only when the event is done:
///   - outbox mode: once the envelope is written to `outbox/`;
///   - with a DSN: once the server accepted it (2xx), told by the uploader through ``CrashLedger``. Until
///     then they stay; at the next launch a report whose event is still in `pending/` is not queued again
///     (``PersistentQueue/queuedEventIDs()``, read once per join: one pass over `pending/`, envelope headers
///     only), one whose event is not (accepted just before the process
///     died, or its batch file dropped by the cap) is queued again with the same `event_id`, which servers
///     deduplicate: a crash is re-sent at most once per launch that dies in that window.
///   - given up (413 even at the smallest budget, or another permanent 4xx): the report is renamed to
///     `<run-id>.crash.dropped` and the reason written to `<run-id>.crash.dropped.reason`; the run directory
///     is deleted.
///   When persisting fails both stay for the next launch. A report that does not parse is renamed to
///   `<run-id>.crash.invalid` and left alone.
/// - Before any report is parsed: reports of runs still alive (their run lock held; a fork child's while its
///   pid exists) are left alone, only the newest ``Client/maxKeptReports`` are kept (older ones deleted), and a
///   report whose event (named after the file) is already in `pending/` is only watched. A parsed report is
///   joined to the run of its own `run_id` line; reports named after their own run go first, so a copy never
///   takes the original's scope or session and is settled with it.
/// - A finished run directory without a report whose session never ended (status still `ok`: the process was
///   killed) gives a session update `abnormal`; then the directory is deleted.
/// - Every finished run's journal (`runs/<run-id>/journal`, ``Journal/read(_:)``) gives its events that the
///   run's mover had not consumed: each becomes its envelope as the mover would have made it (the event as
///   captured, with that run's scope; this machine's contexts; the last 100 breadcrumbs with a lower seq;
///   its session update), queued before the run's fatal event or `abnormal` update, in seq order (a record
///   torn by the process dying is skipped). Once they are on disk, `runs/<run-id>/journal.recovered` holds the
///   last seq delivered, so a run directory that stays (a crash waiting for the server) does not give them
///   twice. Logs left in the journal go the same way, as `log` items (``logMover(run:)``). A crashed run's fatal
///   event gets the last 100 breadcrumbs of its journal with a seq up to the report's `journal_seq` (all,
///   without one).
extension Client {
    /// Most crash reports (`*.crash`) kept in `crashes/`: the newest 50 by modification time. Older ones are
    /// deleted by the join (with their run directories) with a debug line, so that a program crashing in a
    /// loop without a reachable server does not fill the disk.
    static let maxKeptReports = 50

    func joinPreviousRuns() {
        // The common case, nothing left by an earlier run, costs two directory listings: the join's sets,
        // dictionaries and symbolicator are made only when there is something to join.
        guard earlierRunsLeftSomething() else {
            crashLedger.finishJoin()
            return
        }
        removeStaleSpares()
        removeStaleStagingDirectories()
        let crashes = storage.appendingFileComponent("crashes", isDirectory: true)
        var runs: [String: RunDirectory.Previous] = [:]
        var live = Set<String>()
        for run in RunDirectory.finishedRuns(storage: storage, except: runID, live: &live, log: { [weak self] in self?.logLine($0) }) {
            runs[run.runID] = run
        }
        live.insert(runID)
        var names = PrivateFiles.directoryNames(crashes.fileSystemPath)
            .filter { $0.hasSuffix(reportSuffix) && $0 != runID + reportSuffix }.sorted()
        // A report of a run whose process still lives (a sibling process of the same program) may be half
        // written by its crash handler: left for a later launch.
        names.removeAll { name in
            guard Client.belongsToLiveRun(runName(ofReport: name), live: live) else { return false }
            logLine("crash report \(name) belongs to a run that is still running; left for a later launch")
            return true
        }
        names = capReports(names, in: crashes, runs: &runs)
        // The crash handler keeps the report's reserve blocks past its end (freeing them at death was slow): a
        // report that may wait here for the server (with a DSN) gives them back now, its modification time kept
        // (the cap's order). In outbox mode the report is removed once its envelope is written.
        if delivery.queue != nil {
            for name in names { PrivateFiles.releaseBlocksPastEnd(crashes.appendingFileComponent(name).fileSystemPath) }
        }
        // Symbolication answers are kept per build ID in `<storage>/symcache/` (mode 0700), so a program that
        // crashes again in the same build is symbolicated from there (docs/symbolication.md).
        var cache: String?
        if !names.isEmpty {
            let dir = storage.appendingFileComponent("symcache", isDirectory: true)
            do { try PrivateFiles.makeDirectory(dir); cache = dir.fileSystemPath } catch { logLine("no symbol cache: \(error)") }
        }
        // Made for the first fatal event built (the symbolicator sets up its debug-file search): a join without one needs none.
        lazy var builder = FatalEventBuilder(symbolicator: Symbolicator(cacheDirectory: cache))
        // Read once, not once per report (that was quadratic in reports × pending/). An event settled by the
        // uploader after this snapshot is caught by the ledger (watch returns its outcome).
        // Event ids already in pending/ (read once), and those this join queues: a copy of a report (same run_id)
        // is watched with the first one, not queued again.
        var queued = names.isEmpty ? [] : (delivery.queue?.queuedEventIDs() ?? [])
        // Cheap checks first (no parsing): a report whose event, named after the file, is already queued is
        // only watched. The others are parsed, then taken originals first (file named after its own run_id),
        // so that a copy never takes the original's scope or session.
        var parsed: [(name: String, path: String, report: CrashReport, original: Bool)] = []
        for name in names {
            let path = crashes.appendingFileComponent(name).fileSystemPath
            let nameRun = runName(ofReport: name)
            if delivery.queue != nil {
                let fork = runs[nameRun] == nil ? Client.forkChildName(nameRun) : nil
                let eventID = FatalEventBuilder.eventID(forRunID: fork?.run ?? nameRun, forkChildPID: fork?.pid)
                if queued.contains(eventID) {
                    let entry = CrashLedger.Entry(reportPath: path, runDirectory: fork == nil ? runs.removeValue(forKey: nameRun)?.url : nil)
                    if let outcome = crashLedger.watch(eventID, entry) {
                        crashLedger.resolve(eventID, entry, outcome)
                    } else {
                        logLine("the crash of run \(nameRun) is already queued as event \(eventID); the report stays until the server accepts it")
                    }
                    continue
                }
            }
            let report: CrashReport
            do {
                report = try CrashReport(contentsOf: path)
            } catch {
                logLine("crash report \(name) does not parse (\(error)); renamed to \(name).invalid")
                delivery.clientReports.record(.internalSDKError, category: "error")
                _ = rename(path, path + ".invalid")
                continue
            }
            let own = report.isForkChild ? report.runID.map { "\($0)-\(report.pid ?? -1)" } : report.runID
            parsed.append((name, path, report, own == nil || own == nameRun))
        }
        parsed.sort { ($0.original ? 0 : 1, $0.name) < ($1.original ? 0 : 1, $1.name) }
        var done = Set<String>()  // event ids written to the outbox by this join
        for (name, path, report, _) in parsed {
            let nameRun = runName(ofReport: name)
            let crashedRun = report.runID ?? nameRun
            let ownName = report.isForkChild ? "\(crashedRun)-\(report.pid ?? -1)" : crashedRun
            if Client.belongsToLiveRun(ownName, live: live) {
                logLine("crash report \(name) is of run \(crashedRun), still running; left for a later launch")
                continue
            }
            // The scope is looked up by the report's own run_id, not its file name. A fork child's report
            // (<run-id>-<pid>.crash) takes its parent run's scope, but the run directory and its session stay the
            // parent's (ended by the parent's own report, exit or abnormal update).
            let previous = report.isForkChild ? report.runID.flatMap { runs[$0] }.map { run in
                var parentRun = run
                parentRun.scope?.session = nil
                return parentRun
            } : runs.removeValue(forKey: crashedRun)
            let eventID = FatalEventBuilder.eventID(forRunID: report.runID ?? crashedRun,
                                                    forkChildPID: report.isForkChild ? report.pid : nil)
            let entry = CrashLedger.Entry(reportPath: path, runDirectory: report.isForkChild ? nil : previous?.url)
            if delivery.queue != nil {
                if let outcome = crashLedger.watch(eventID, entry) {
                    crashLedger.resolve(eventID, entry, outcome)  // settled before the join looked
                    continue
                }
                if queued.contains(eventID) {
                    logLine("the crash of run \(crashedRun) is already queued as event \(eventID); the report stays until the server accepts it")
                    continue
                }
            } else if done.contains(eventID) {
                CrashLedger.remove(entry)  // a copy of a report already written to the outbox
                logLine("crash report \(name) is a copy of event \(eventID), already in the outbox; deleted")
                continue
            }
            var records: [Journal.Record]?
            if let previous {
                let recovered = recoverJournal(of: previous)
                records = recovered
                if !report.isForkChild { deliverJournal(recovered, of: previous) }
            }
            let envelope = fatalEnvelope(report: report, previous: previous, builder: builder, eventID: eventID, journal: records)
            do {
                if !envelope.items.isEmpty { try delivery.submit(envelope, durable: true) }
            } catch {
                crashLedger.unwatch(eventID)
                logLine("could not persist the crash event of run \(crashedRun): \(error); the report is kept")
                continue
            }
            if envelope.header.eventID == nil {
                // Dropped by beforeSend (counted): done, never joined again.
                crashLedger.unwatch(eventID)
                CrashLedger.remove(entry)
                done.insert(eventID)
                continue
            }
            if delivery.queue == nil {
                CrashLedger.remove(entry)
                done.insert(eventID)
                logLine("wrote the crash of run \(crashedRun) as event \(eventID) to the outbox")
            } else {
                queued.insert(eventID)
                logLine("queued the crash of run \(crashedRun) as event \(eventID); the report is deleted once the server accepts it")
            }
        }
        crashLedger.finishJoin()
        for run in runs.values.sorted(by: { $0.runID < $1.runID }) {
            deliverJournal(recoverJournal(of: run), of: run)
            if var session = run.scope?.session, session.status == .ok, let scope = run.scope {
                let update = session.update(.abnormal, now: Date(), release: scope.release, environment: scope.environment)
                do {
                    try delivery.submit(Envelope(items: [.session(update.jsonData())]), durable: true)
                    logLine("run \(run.runID) ended without exit or crash: session \(session.sid) abnormal")
                } catch {
                    logLine("could not persist the abnormal session of run \(run.runID): \(error)")
                    continue
                }
            }
            // Its `scope.json` first (one unlink right after the update is on disk): a process killed while the
            // rest of the directory goes would otherwise leave a session still `ok`, ended again by the next launch.
            unlink(run.url.fileSystemPath + "/scope.json")
            try? FileManager.default.removeItem(at: run.url)
        }
    }

    /// `<run-id>-<pid>` (a fork child's report name) split, when it has that form.
    static func forkChildName(_ name: String) -> (run: String, pid: Int64)? {
        guard let dash = name.lastIndex(of: "-"), let pid = Int64(name[name.index(after: dash)...]), pid > 0 else { return nil }
        return (String(name[..<dash]), pid)
    }

    /// Whether the report named `name` (without `.crash`) may still be being written: its run is in `live`
    /// (its lock is held), or it is a fork child's (`<run-id>-<pid>`) of a live run and that pid still exists.
    /// (A fork child keeps its parent's run lock while it lives, so a dead child of a live parent is told
    /// apart by its pid.)
    static func belongsToLiveRun(_ name: String, live: Set<String>) -> Bool {
        if live.contains(name) { return true }
        guard let fork = forkChildName(name), live.contains(fork.run), fork.pid <= Int64(Int32.max) else { return false }
        return kill(pid_t(fork.pid), 0) == 0 || errno == EPERM
    }

    /// `names` (report files in `crashes`) cut to the newest ``maxKeptReports`` by modification time (ties: by
    /// name); the older ones are deleted, with the run directories named like them (removed from `runs`: a
    /// crashed run gets no `abnormal` update). One `stat` per report, nothing parsed. Returns the kept names, sorted.
    func capReports(_ names: [String], in crashes: URL, runs: inout [String: RunDirectory.Previous]) -> [String] {
        guard names.count > Client.maxKeptReports else { return names }
        let dated = names.map { name -> (name: String, mtime: Int) in
            var st = stat()
            let mtime = stat(crashes.appendingFileComponent(name).fileSystemPath, &st) == 0 ? st.st_mtim.tv_sec * 1_000_000_000 + st.st_mtim.tv_nsec : 0
            return (name, mtime)
        }.sorted { ($0.mtime, $0.name) > ($1.mtime, $1.name) }
        for old in dated.dropFirst(Client.maxKeptReports) {
            unlink(crashes.appendingFileComponent(old.name).fileSystemPath)
            delivery.clientReports.record(.cacheOverflow, category: "error")
            if let run = runs.removeValue(forKey: runName(ofReport: old.name)) {
                try? FileManager.default.removeItem(at: run.url)
            }
        }
        logLine("crashes/ held \(names.count) reports; deleted the \(names.count - Client.maxKeptReports) oldest (at most \(Client.maxKeptReports) are kept)")
        return dated.prefix(Client.maxKeptReports).map(\.name).sorted()
    }

    /// The file in a run directory that holds the last journal seq the crash join delivered.
    static let recoveredMarker = "journal.recovered"

    /// Every record of `run`'s journal (seq order; empty when it has none or it cannot be read: debug line).
    func recoverJournal(of run: RunDirectory.Previous) -> [Journal.Record] {
        let url = run.url.appendingFileComponent("journal")
        guard FileManager.default.fileExists(atPath: url.path) else { return [] }
        do {
            let (records, skipped) = try Journal.read(url)
            if skipped > 0 { logLine("run \(run.runID): \(skipped) journal record(s) torn or damaged, skipped") }
            return records
        } catch {
            logLine("run \(run.runID): the journal cannot be read (\(error)); its breadcrumbs and events are lost")
            return []
        }
    }

    /// Queues the events (and logs) `records` of `run`'s journal that its mover had not consumed and no
    /// earlier join delivered (see the extension's documentation), then records the last seq delivered.
    func deliverJournal(_ records: [Journal.Record], of run: RunDirectory.Previous) {
        let markerURL = run.url.appendingFileComponent(Client.recoveredMarker)
        var done: UInt64 = 0
        if case .data(let data) = PrivateFiles.readCapped(markerURL.path, maxBytes: 64) {
            done = UInt64(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }
        let pending = records.filter { !$0.consumed && $0.seq > done && ($0.kind == .event || $0.kind == .log) }
        guard let last = pending.last else { return }
        var envelopes: [Envelope] = []
        var logs = logMover(run: run)
        for record in pending {
            if record.kind == .event {
                if let envelope = JournalMover.envelope(for: record, breadcrumbs: Breadcrumb.last(records, before: record.seq, limit: processor.maxBreadcrumbs),
                                                        factory: factory, processor: processor, log: { [weak self] in self?.logLine($0) }) {
                    envelopes.append(envelope)
                }
            } else if logs.add(record), let item = logs.takeItem() {
                envelopes.append(Envelope(items: [item]))
            }
        }
        if let item = logs.takeItem() { envelopes.append(Envelope(items: [item])) }
        guard delivery.submit(batch: envelopes) else {
            logLine("run \(run.runID): \(envelopes.count) envelope(s) from its journal are held in memory; they are recovered again at the next launch")
            return
        }
        logLine("run \(run.runID): queued \(envelopes.count) envelope(s) its journal held")
        do {
            try PrivateFiles.writeAtomically(Data(String(last.seq).utf8), to: markerURL, sync: false)
        } catch {
            logLine("run \(run.runID): cannot write \(Client.recoveredMarker) (\(error))")
        }
    }

    /// The log batching for the logs recovered from run `run`: its release, environment and trace id (from
    /// its scope; without one, the current release and environment).
    func logMover(run: RunDirectory.Previous) -> ScopedLogBatcher {
        let scope = run.scope.map(LogScope.init(run:))
            ?? LogScope(release: currentRelease, environment: options.environment, traceID: LogScope.traceID(runID: run.runID))
        return ScopedLogBatcher(scope: scope)
    }

    /// The envelope for one crash: the fatal event (`event_id` `eventID`) with the crashed run's scope, within
    /// the size budget, and its `crashed` session update. Breadcrumbs: the last 100 of `journal` (the crashed
    /// run's journal records; `nil`: read from `previous`) up to the report's journal seq.
    func fatalEnvelope(report: CrashReport, previous: RunDirectory.Previous?, builder: FatalEventBuilder,
                       eventID: String, journal: [Journal.Record]? = nil) -> Envelope {
        var event = builder.event(from: report)
        event.eventID = eventID
        let crashed = previous?.scope ?? RunScope(runID: report.runID ?? "", release: currentRelease,
                                                  environment: options.environment, tags: [:], userID: nil, session: nil)
        let records = journal ?? previous.map { recoverJournal(of: $0) } ?? []
        let crumbs = Breadcrumb.last(records, before: report.journalSeq.map { $0 &+ 1 }, limit: processor.maxBreadcrumbs)
        event.release = crashed.release
        event.environment = crashed.environment
        // This machine's contexts, with the device the report names and the crashed run's release and start.
        var contexts = factory.contexts
        if let device = event.contexts?.device { contexts.device = device }
        contexts.app?.appVersion = crashed.release
        contexts.app?.appStartTime = crashed.session.map { Timestamps.rfc3339(Date(timeIntervalSince1970: $0.started)) }
        event.contexts = contexts
        EventFactory.apply(scope: crashed, breadcrumbs: crumbs, to: &event)
        // In-app marking, the PII rule and beforeSend (on this thread): a dropped crash leaves its session update.
        var items: [EnvelopeItem] = []
        if let processed = processor.process(event, kind: .crash) {
            items.append(.event(EventFactory.finalize(processed, log: { [weak self] in self?.logLine($0) })))
        } else {
            logLine("crash event \(eventID) dropped by beforeSend")
        }
        if var session = crashed.session, session.status == .ok {
            let when = report.timestampNs.map { Date(timeIntervalSince1970: Double($0) / 1e9) } ?? Date()
            let update = session.update(.crashed, now: when, release: crashed.release, environment: crashed.environment)
            items.append(.session(update.jsonData()))
        }
        let attachments = crashAttachments(crashed, eventID: eventID)
        if items.contains(where: { $0.type == .event }) {
            items += attachments
        } else {
            for item in attachments { processor.reports?.record(.beforeSend, item: item) }
        }
        return Envelope(header: .init(eventID: items.contains { $0.type == .event } ? eventID : nil), items: items)
    }

    /// The `attachment` items of a crash: the files the crashed run registered (``RunScope/attachments``), read
    /// now, within ``Attachment``'s limits (one left out gets a debug line).
    func crashAttachments(_ crashed: RunScope, eventID: String) -> [EnvelopeItem] {
        guard let refs = crashed.attachments, !refs.isEmpty else { return [] }
        return AttachmentItems.items(refs, eventID: eventID, log: { [weak self] in self?.logLine($0) })
    }
}

/// The crash reports of earlier runs whose fatal events are queued, keyed by `event_id`: when the uploader
/// reports an event settled (``Uploader/onEventSettled``), its report and run directory are deleted
/// (accepted) or the report is set aside as `<run-id>.crash.dropped` with the reason beside it (given up).
///
/// One event id may have several report files: a copy of a report (`zz-copy.crash`), a fork child's report
/// renamed — any two files with the same `run_id` (and pid, for a fork child) give the same `event_id`. The
/// ledger keeps every file watched for an event id, and settles all of them together (each report deleted or
/// set aside, each run directory removed once), so a copy is neither left behind nor sent again.
///
/// The delivery thread starts sending `pending/` (possibly a crash queued by an earlier launch) before the
/// crash join runs; settlements of events not watched yet are remembered until ``finishJoin()`` so that the
/// join can act on them (``watch(_:_:)``), for every file of that event id. Thread-safe: the ledger's state is
/// behind one `Mutex`.
final class CrashLedger: Sendable {
    /// The files of one crash.
    struct Entry: Equatable {
        /// `<storage>/crashes/<run-id>.crash`.
        var reportPath: String
        /// `<storage>/runs/<run-id>/`, when the crashed run left one.
        var runDirectory: URL?
    }

    /// What the ledger holds: entries watched by event id, and settlements that came before their watch.
    private struct State {
        var watched: [String: [Entry]] = [:]
        var early: [String: Uploader.EventSettlement] = [:]
        var joining = true
    }

    private let state = Mutex(State())
    private let log: (@Sendable (String) -> Void)?

    /// A ledger logging to `log` (debug output; called from the delivery thread and the caller's).
    init(log: (@Sendable (String) -> Void)?) { self.log = log }

    /// Watches `entry`'s files for `eventID`, besides any other entry already watched for it (the same entry
    /// twice counts once). Returns how the event ended when the uploader already settled it in this process
    /// (the caller then ``resolve(_:_:_:)``s the entry); that outcome is kept until ``finishJoin()``, so every
    /// other file of the same event id is settled the same way; `nil` when the entry is now watched.
    func watch(_ eventID: String, _ entry: Entry) -> Uploader.EventSettlement? {
        state.withLock { state in
            if let outcome = state.early[eventID] { return outcome }
            var entries = state.watched[eventID] ?? []
            if !entries.contains(entry) { entries.append(entry) }
            state.watched[eventID] = entries
            return nil
        }
    }

    /// The entries watched for `eventID` (empty when none), in the order they were watched.
    func entries(_ eventID: String) -> [Entry] {
        state.withLock { $0.watched[eventID] ?? [] }
    }

    /// Stops watching every entry of `eventID` (its envelope could not be persisted).
    func unwatch(_ eventID: String) {
        state.withLock { $0.watched[eventID] = nil }
    }

    /// The join is over: settlements of unwatched events are no longer remembered.
    func finishJoin() {
        state.withLock { state in
            state.joining = false
            state.early = [:]
        }
    }

    /// Event `eventID` was accepted or given up (called by the uploader on the delivery thread).
    func settled(_ eventID: String, _ outcome: Uploader.EventSettlement) {
        let entries = state.withLock { state in
            // Remembered during the join also when watched: a copy of the report may be found after this.
            if state.joining, state.early.count < 10_000 { state.early[eventID] = outcome }  // bounded even if the join never runs
            return state.watched.removeValue(forKey: eventID) ?? []
        }
        // Each run directory once: a later entry naming an already removed directory does not name it again.
        var removedDirectories = Set<URL>()
        for var entry in entries {
            if let dir = entry.runDirectory, !removedDirectories.insert(dir.standardizedFileURL).inserted { entry.runDirectory = nil }
            resolve(eventID, entry, outcome)
        }
    }

    /// Deletes the crash's files (accepted), or renames the report to `.crash.dropped` and writes the
    /// reason to `.crash.dropped.reason` (given up); the run directory is deleted either way.
    func resolve(_ eventID: String, _ entry: Entry, _ outcome: Uploader.EventSettlement) {
        switch outcome {
        case .accepted:
            CrashLedger.remove(entry)
            log?("crash event \(eventID) accepted by the server; deleted \((entry.reportPath as NSString).lastPathComponent)")
        case .givenUp(let reason):
            let dropped = entry.reportPath + ".dropped"
            if rename(entry.reportPath, dropped) != 0 {
                log?("could not rename \(entry.reportPath): \(String(cString: strerror(errno)))")
            }
            let note = "\(Timestamps.rfc3339(Date())) event \(eventID) given up: \(reason)\n"
            do {
                try PrivateFiles.writeAtomically(Data(note.utf8), to: URL(fileURLWithPath: dropped + ".reason"), sync: false)
            } catch {
                log?("could not write \(dropped).reason: \(error)")
            }
            if let dir = entry.runDirectory { try? FileManager.default.removeItem(at: dir) }
            log?("crash event \(eventID) given up (\(reason)); report kept as \((dropped as NSString).lastPathComponent)")
        }
    }

    /// Deletes the report and the run directory of a crash whose event is done.
    static func remove(_ entry: Entry) {
        // The run's `scope.json` before the report: a process killed between the two leaves a report without a
        // session (its event, same id, written again) rather than a run whose session is still `ok` (an `abnormal`
        // update after its `crashed` one).
        if let dir = entry.runDirectory { unlink(dir.fileSystemPath + "/scope.json") }
        unlink(entry.reportPath)
        if let dir = entry.runDirectory { try? FileManager.default.removeItem(at: dir) }
    }
}

extension Client {
    /// Whether an earlier run left anything the join looks at: a directory in `runs/` other than this run's
    /// (a run's, or the `.<run-id>` of a run directory being made), or in `crashes/` a report (`*.crash`) or a
    /// spare (`.*.spare`) not of this run. `false` means ``joinPreviousRuns()`` has nothing to do.
    func earlierRunsLeftSomething() -> Bool {
        for name in PrivateFiles.directoryNames(RunDirectory.root(storagePath)) where name != runID {
            if !name.hasPrefix(".") { return true }
            // A run directory being made (``RunDirectory``), not this run's: left behind only by a process that
            // died in the middle (``removeStaleStagingDirectories()``).
            if let staged = RunDirectory.stagedRunID(name), staged != runID { return true }
        }
        let ownReport = runID + reportSuffix, ownSpare = "." + runID
        for name in PrivateFiles.directoryNames(PrivateFiles.path(storagePath, "crashes")) {
            if name.hasSuffix(reportSuffix) && name != ownReport { return true }
            if name.hasPrefix(".") && name.hasSuffix(".spare") && !name.hasPrefix(ownSpare) { return true }
        }
        return false
    }

    /// Deletes `<storage>/runs/.<run-id>/` directories (and the `lock` in them) left by processes that died
    /// between making that directory and renaming it to `runs/<run-id>` (``RunDirectory``): a crash or a kill
    /// in the first moments after `Vaka.start`, while the `vaka.start` thread made the run's files. A program
    /// crashing at start under a supervisor would otherwise leave one more each time. One whose `lock` another
    /// process holds is being made now and is left alone; so is this run's. A process that finds its staging
    /// directory removed meanwhile makes its run directory in place (``RunDirectory``).
    func removeStaleStagingDirectories() {
        let root = RunDirectory.root(storagePath)
        for name in PrivateFiles.directoryNames(root) {
            guard let staged = RunDirectory.stagedRunID(name), staged != runID else { continue }
            let directory = PrivateFiles.path(root, name)
            let lockPath = PrivateFiles.path(directory, "lock")
            // Held: the process making it is alive (it holds that lock until its run ends).
            if RunDirectory.lockHeld(at: lockPath) { continue }
            unlink(lockPath)
            if rmdir(directory) == 0 { logLine("removed runs/\(name), left by a run that died while making its run directory") }
        }
    }

    /// Deletes `<storage>/crashes/.<run-id>-<pid>.spare` files (and older `.<run-id>.spare`) left by runs killed (SIGKILL) after a signal they
    /// survived: the C runtime keeps that report's file open under this hidden name as its next reserve and
    /// unlinks it at a normal exit (docs/crash-handling.md). Spares of this run, and of runs whose
    /// `runs/<run-id>/lock` is still held (a live process), are left alone.
    func removeStaleSpares() {
        let crashes = storage.appendingFileComponent("crashes", isDirectory: true)
        let names = PrivateFiles.directoryNames(crashes.fileSystemPath)
        for name in names where name.hasPrefix(".") && name.hasSuffix(".spare") {
            // `.<run-id>-<pid>.spare` (the pid of the process that kept it: a fork child keeps its parent's
            // run id); `.<run-id>.spare` from an older version.
            let whole = String(name.dropFirst().dropLast(".spare".count))
            var run = whole
            if let dash = whole.lastIndex(of: "-") {
                let pid = whole[whole.index(after: dash)...]
                if !pid.isEmpty && pid.allSatisfy({ $0 >= "0" && $0 <= "9" }) { run = String(whole[..<dash]) }
            }
            guard !run.isEmpty, run != runID, whole != runID, !run.contains("/") else { continue }
            let held = Set([run, whole]).contains { candidate in
                RunDirectory.lockHeld(at: storage.appendingFileComponent("runs/\(candidate)/lock").fileSystemPath)
            }
            if held { continue }
            if unlink(crashes.appendingFileComponent(name).fileSystemPath) == 0 { logLine("removed \(name), left by a killed run") }
        }
    }
}

/// The file-name suffix of a crash report, `.crash`: the report contract's `VAKA_REPORT_FILE_SUFFIX`
/// (reports are named `<run-id>.crash`, `<run-id>-<pid>.crash` in a fork child).
private let reportSuffix = VAKA_REPORT_FILE_SUFFIX

/// The run part of report file name `name` (`<run-id>` or `<run-id>-<pid>`): `name` without ``reportSuffix``.
private func runName(ofReport name: String) -> String {
    String(name.dropLast(reportSuffix.count))
}
