import Foundation
import VakaSymbolication

/// The crash join, run by ``Vaka/start(_:)``: what earlier runs left behind becomes envelopes.
///
/// - A fork child's `<run-id>-<pid>.crash` gets its own event id and its parent run's scope, without a session update.
/// - Each `<storage>/crashes/<run-id>.crash` (other than this run's) becomes its fatal event
///   (``FatalEventBuilder``), completed with the scope **of the run that crashed** from
///   `<storage>/runs/<run-id>/` (release, environment, tags, user, breadcrumbs; without it the current
///   release and environment), and queued with that run's session update `crashed` in the same envelope.
///   The envelope is persisted (`pending/` or `outbox/`) before the report and the run directory are deleted;
///   when persisting fails both stay for the next launch. A report that does not parse is renamed to
///   `<run-id>.crash.invalid` and left alone.
/// - A finished run directory without a report whose session never ended (status still `ok`: the process was
///   killed) gives a session update `abnormal`; then the directory is deleted.
extension Client {
    func joinPreviousRuns() {
        let crashes = storage.appendingPathComponent("crashes", isDirectory: true)
        var runs: [String: RunDirectory.Previous] = [:]
        for run in RunDirectory.finishedRuns(storage: storage, except: runID) { runs[run.runID] = run }
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: crashes.path)) ?? [])
            .filter { $0.hasSuffix(".crash") && $0 != "\(runID).crash" }.sorted()
        let builder = FatalEventBuilder(symbolicator: Symbolicator())
        for name in names {
            let path = crashes.appendingPathComponent(name).path
            let crashedRun = String(name.dropLast(".crash".count))
            let report: CrashReport
            do {
                report = try CrashReport(contentsOf: path)
            } catch {
                logLine("crash report \(name) does not parse (\(error)); renamed to \(name).invalid")
                _ = rename(path, path + ".invalid")
                continue
            }
            // A fork child's report (<run-id>-<pid>.crash) takes its parent run's scope, but the run directory and
            // its session stay the parent's (ended by the parent's own report, exit or abnormal update).
            let previous = report.isForkChild ? report.runID.flatMap { runs[$0] }.map { run in
                var parentRun = run
                parentRun.scope?.session = nil
                return parentRun
            } : runs.removeValue(forKey: crashedRun)
            let (envelope, eventID) = fatalEnvelope(report: report, previous: previous, builder: builder)
            do {
                try delivery.submit(envelope, durable: true)
            } catch {
                logLine("could not persist the crash event of run \(crashedRun): \(error); the report is kept")
                continue
            }
            unlink(path)
            if let previous, !report.isForkChild { try? FileManager.default.removeItem(at: previous.url) }
            logLine("queued the crash of run \(crashedRun) as event \(eventID)")
        }
        for run in runs.values.sorted(by: { $0.runID < $1.runID }) {
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
            try? FileManager.default.removeItem(at: run.url)
        }
    }

    /// The envelope for one crash: the fatal event with the crashed run's scope, and its `crashed` session update.
    func fatalEnvelope(report: CrashReport, previous: RunDirectory.Previous?, builder: FatalEventBuilder) -> (Envelope, String) {
        let fatal = builder.event(from: report)
        guard case .object(var event) = EventFactory.json(fatal) else {
            return (Envelope.event(id: fatal.eventID, payload: (try? fatal.jsonData()) ?? Data()), fatal.eventID)
        }
        let crashed = previous?.scope ?? RunScope(runID: report.runID ?? "", release: currentRelease,
                                                  environment: options.environment, tags: [:], userID: nil, session: nil)
        let crumbs = previous.map { BreadcrumbStore.load(runDirectory: $0.url) } ?? []
        event["release"] = .string(crashed.release)
        event["environment"] = .string(crashed.environment)
        var contexts = factory.contexts
        if case .object(let reported)? = event["contexts"], case .object(let device)? = reported["device"] {
            contexts["device"] = .object(device)
        }
        if case .object(var app)? = contexts["app"] {
            app["app_version"] = .string(crashed.release)
            if let started = crashed.session?.started {
                app["app_start_time"] = .string(Timestamps.rfc3339(Date(timeIntervalSince1970: started)))
            } else {
                app["app_start_time"] = nil
            }
            contexts["app"] = .object(app)
        }
        event["contexts"] = .object(contexts)
        factory.apply(scope: crashed, breadcrumbs: crumbs, to: &event)
        EventFactory.removeFrameTrust(&event)
        var items: [EnvelopeItem] = [.event(EventFactory.encode(event))]
        if var session = crashed.session, session.status == .ok {
            let when = report.timestampNs.map { Date(timeIntervalSince1970: Double($0) / 1e9) } ?? Date()
            let update = session.update(.crashed, now: when, release: crashed.release, environment: crashed.environment)
            items.append(.session(update.jsonData()))
        }
        return (Envelope(header: .init(eventID: fatal.eventID), items: items), fatal.eventID)
    }
}
