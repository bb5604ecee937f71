import XCTest
import VakaTestSupport
@testable import Vaka
#if canImport(Glibc)
import Glibc
#endif

/// Breadcrumbs, events and logs through the run's journal, end to end: SIGKILLs at random moments
/// (`vaka-crashme journal-flood`, `log-flood`), every crash scenario with numbered breadcrumbs (`--trail`), 8
/// capturing threads, the write(2) fallback (`VAKA_JOURNAL_NO_MMAP=1`), logs arriving faster than the mover's
/// interval, and a run whose files are under an `RLIMIT_FSIZE` quota (`vaka-crashme fsize-flood`). Outbox mode:
/// the outbox file names give the order in which envelopes were written.
final class JournalSDKTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// Runs `vaka-crashme SCENARIO --storage DIR` in a fresh storage directory and SIGKILLs it at a random
    /// moment, 0...`maxDelay` µs after its progress file `DIR/SCENARIO.progress` is first written
    /// (``runHarnessKilledAtRandomMoment(_:progress:maxDelay:logDirectory:using:)``), until it was killed 20
    /// times (at most 40 runs, 10 minutes; a run that finishes first must exit 0 and does not count). `check`
    /// gets each killed run's storage directory, log directory and progress file. Returns the kills and runs.
    private func killAtRandomMoments(_ scenario: String, maxDelay: UInt32,
                                     check: (_ storage: URL, _ logs: URL, _ progress: URL) throws -> Void) throws -> (kills: Int, attempts: Int) {
        var generator = SystemRandomNumberGenerator()
        var kills = 0, attempts = 0
        let started = Date()
        while kills < 20 && attempts < 40 && Date().timeIntervalSince(started) < 600 {
            attempts += 1
            let storage = dirs.make("\(scenario)-\(attempts)")
            let logs = dirs.make("\(scenario)-logs-\(attempts)")
            let progress = storage.appendingPathComponent("\(scenario).progress")
            guard let result = try runHarnessKilledAtRandomMoment([scenario, "--storage", storage.path], progress: progress,
                                                                  maxDelay: maxDelay, logDirectory: logs, using: &generator)
            else { XCTFail("\(scenario) hung"); break }
            guard result.signaled else {
                XCTAssertEqual(result.outcome, "exit 0", result.stderr)
                continue  // finished before the kill: not counted
            }
            kills += 1
            try check(storage, logs, progress)
        }
        XCTAssertGreaterThanOrEqual(kills, 20, "only \(kills) of \(attempts) runs of \(scenario) were killed before they finished")
        return (kills, attempts)
    }

    /// The run directory a killed run left under `STORAGE/runs/`, or nil when there is none: the kill came while
    /// the run's exit was removing it (after its last session update was written). More than one is a failure.
    private func killedRunDirectory(_ storage: URL) throws -> URL? {
        let runs = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("runs").path)
        XCTAssertLessThanOrEqual(runs.count, 1, "\(runs)")
        return runs.first.map { storage.appendingPathComponent("runs/\($0)") }
    }

    /// `journal-flood` without the harness's flush, SIGKILLed while it exits (`Vaka.end`: stopping the mover,
    /// draining the journal, the `exited` update): the killed run's session must not be left `ok` — it ends `abnormal`
    /// (killed before its `exited` update was written) or `exited` — and every event still arrives.
    /// (`scope.json` says `exited` only once that update is written; were it written first, a kill between
    /// the two would leave the session open: no `exited`, and no `abnormal` either.)
    func testKilledWhileExitDrainsTheJournalEndsTheSession() throws {
        var generator = SystemRandomNumberGenerator()
        var statuses: [String: Int] = [:]
        for attempt in 0..<8 {
            let storage = dirs.make("exit-drain-\(attempt)")
            let logs = dirs.make("exit-drain-logs-\(attempt)")
            let progress = storage.appendingPathComponent("journal-flood.progress")
            let child = try RunningChild(Paths.harness, ["journal-flood", "--storage", storage.path],
                                         environment: ["VAKA_FLOOD_COUNT": "5000", "VAKA_NO_FLUSH": "1"], logDirectory: logs)
            // Wait for the last capture (5,000 breadcrumbs, 200 events); the harness then exits without a flush,
            // so its exit hook moves the events the mover has not (one outbox file each): kill within 0-30 ms.
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline {
                let text = (try? String(contentsOf: progress, encoding: .utf8)) ?? ""
                if text.hasPrefix("5000 200") { break }
                usleep(200)
            }
            usleep(UInt32.random(in: 0...30_000, using: &generator))
            child.sigkill()
            let result = try XCTUnwrap(child.wait(timeout: 60), "journal-flood hung")
            guard let sid = try readOutbox(storage).flatMap(\.sessions).first?["sid"] as? String else {
                XCTFail("no session update from the killed run: \(result.stderr)"); continue
            }
            let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
            let outbox = try readOutbox(storage)
            let status = outbox.flatMap(\.sessions).filter { $0["sid"] as? String == sid }.last?["status"] as? String ?? "none"
            statuses[status, default: 0] += 1
            XCTAssertTrue(status == "abnormal" || status == "exited", "attempt \(attempt) (\(result.outcome)): the session was left \(status)")
            let events = Set(outbox.flatMap(\.events).compactMap { numbered(dig($0, "logentry", "formatted") as? String, after: "flood event ") })
            XCTAssertEqual(events, Set(0..<200), "attempt \(attempt): every event")
        }
        print("killed while exiting: session statuses \(statuses)")
    }

    /// `journal-flood` (10,000 breadcrumbs, a numbered event after every 25th) SIGKILLed at a random moment,
    /// at least 20 times, each in a fresh storage directory. Before the next launch the killed run's journal
    /// is read offline: its breadcrumbs are the last ones added before the kill, numbered without a gap, the
    /// newest being the last one the child reported (or the one after it, added just before the kill), at
    /// most one record torn. After the next launch the outbox holds every event captured before the kill, in
    /// capture order without a gap; an event may appear twice only as part of the mover's batch in flight
    /// (written to the outbox, the process killed before the records were consumed: the next launch writes
    /// that batch again, so the sequence restarts once, inside what was already written). The killed run's
    /// session ends `abnormal` (or `exited`, when the kill came after its exit had written that update).
    func testJournalFloodKilledAtRandomMomentsLosesNothingBeforeTheKill() throws {
        var recoveredFromJournal = 0, redelivered = 0, withBreadcrumbs = 0, withoutBreadcrumbs = 0, killedBeforeScope = 0
        let (kills, attempts) = try killAtRandomMoments("journal-flood", maxDelay: 150_000) { storage, logs, progressURL in
            let progress = try String(contentsOf: progressURL, encoding: .utf8).split(whereSeparator: { $0 == " " || $0 == "\n" }).prefix(2).compactMap { Int($0) }
            XCTAssertEqual(progress.count, 2)
            guard progress.count == 2 else { return }
            let (crumbsAdded, eventsCaptured) = (progress[0], progress[1])

            // The killed run's journal, read offline.
            let runDir = try killedRunDirectory(storage)
            let journalURL = runDir?.appendingPathComponent("journal")
            if let journalURL, FileManager.default.fileExists(atPath: journalURL.path) {
                let (records, skipped) = try Journal.read(journalURL)
                XCTAssertLessThanOrEqual(skipped, 1, "at most one torn record")
                let crumbs = records.filter { $0.kind == .breadcrumb }.compactMap { numbered($0.text, after: "crumb ") }
                let last = try XCTUnwrap(crumbs.last)
                XCTAssertTrue(last == crumbsAdded - 1 || last == crumbsAdded, "newest breadcrumb \(last), child had added \(crumbsAdded)")
                XCTAssertEqual(crumbs, Array((last - crumbs.count + 1)...last), "contiguous, oldest first")
                XCTAssertTrue(crumbs.first == 0 || crumbs.count > 100, "all of them, or more than an event carries: \(crumbs.count)")
                recoveredFromJournal += records.filter { $0.kind == .event && !$0.consumed }.count
            } else {
                // Killed while its exit was removing the run directory (the journal, or the whole directory,
                // already deleted): only a run that recorded everything and moved it gets there; the delivery
                // checks below still hold.
                XCTAssertEqual(crumbsAdded, 10_000, "the journal is gone only when the run was exiting")
            }

            // The killed run's session from its scope.json (its first update is sent by the background part of
            // start); when its exit had already removed scope.json, its first update went out (flush waits for
            // start), so the outbox's first session is the killed run's. Neither: the kill came after the
            // journal was made (by the first breadcrumb) and before `scope.json` (made by the first capture, or
            // start's background part): such a run made no session update, so none is owed for it
            // (docs/ingest.md), and it recorded no event (a capture makes `scope.json` before its record).
            let scope = runDir.flatMap { try? JSONSerialization.jsonObject(with: Data(contentsOf: $0.appendingPathComponent("scope.json"))) }
            let sid = try scope.flatMap { dig($0, "session", "sid") as? String }
                ?? readOutbox(storage).flatMap(\.sessions).first?["sid"] as? String
            if sid == nil {
                XCTAssertNotNil(runDir, "no scope.json and no session sent: the run directory is there")
                XCTAssertEqual(eventsCaptured, 0, "a capture makes scope.json before it records its event")
                killedBeforeScope += 1
            }
            let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
            let outbox = try readOutbox(storage)
            let events = outbox.flatMap(\.events).compactMap { numbered(dig($0, "logentry", "formatted") as? String, after: "flood event ") }
            redelivered += assertEveryNumberBeforeTheKill(events, recorded: eventsCaptured, "events")
            // An event carries the breadcrumbs before it still in the ring when the mover (or the next launch)
            // takes it: contiguous, ending with the one added right before it. Under this flood (1,000
            // breadcrumbs in a few ms) the ring has often moved past them: then it carries none.
            for event in outbox.flatMap(\.events) {
                guard let n = numbered(dig(event, "logentry", "formatted") as? String, after: "flood event ") else { continue }
                let trail = ((dig(event, "breadcrumbs", "values") as? [[String: Any]]) ?? []).compactMap { numbered($0["message"] as? String, after: "crumb ") }
                if trail.isEmpty { withoutBreadcrumbs += 1; continue }
                XCTAssertEqual(trail.last, n * 25 + 24, "event \(n)")
                XCTAssertEqual(trail, Array((trail[0])...(trail[0] + trail.count - 1)), "event \(n): contiguous")
                XCTAssertLessThanOrEqual(trail.count, 100)
                withBreadcrumbs += 1
            }
            // The killed run's session ends: `abnormal`, or `exited` when the kill came after the run's exit had
            // written its `exited` update (the run directory not yet removed); never left open.
            if let sid {
                let updates = outbox.flatMap(\.sessions).filter { $0["sid"] as? String == sid }
                let status = updates.last?["status"] as? String
                XCTAssertTrue(status == "abnormal" || status == "exited", "\(updates)")
            }
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("runs").path), [],
                           "the killed run's directory is removed by the join, the relaunch's at its exit")
        }
        print("journal flood: \(kills) SIGKILLs in \(attempts) runs; \(recoveredFromJournal) events recovered from killed runs' journals, \(redelivered) written twice; \(withBreadcrumbs) events with their last breadcrumbs, \(withoutBreadcrumbs) whose breadcrumbs the ring had overwritten; \(killedBeforeScope) killed before scope.json")
    }

    /// Every crash scenario with `--trail 150:5`: at the next launch the fatal event's breadcrumbs are the last
    /// 100 added before the crash, `crumb 149` (the last one) included, and the 5 messages captured among
    /// them are delivered too (from the crashed run's journal when its mover had not moved them yet).
    func testEveryCrashScenarioCarriesTheLastBreadcrumbsBeforeTheCrash() throws {
        let list = try runHarnessList()
        XCTAssertGreaterThan(list.count, 20)
        for scenario in list {
            try checkTrail(scenario: scenario, environment: [:])
        }
    }

    /// mmap refused (`VAKA_JOURNAL_NO_MMAP=1`: the journal's write(2) fallback): breadcrumbs and events are
    /// still recorded, and delivered after a crash.
    func testWithoutSharedMappingBreadcrumbsAndEventsSurviveACrash() throws {
        for scenario in ["null-deref", "abort", "swift-fatal-error"] {
            try checkTrail(scenario: scenario, environment: ["VAKA_JOURNAL_NO_MMAP": "1"]) { stderr in
                XCTAssertTrue(stderr.contains("[vaka] journal: mmap refused"), stderr)
            }
        }
    }

    private func runHarnessList() throws -> [String] {
        let logs = dirs.make("list-logs")
        let list = try runHarness(["--list"], logDirectory: logs)
        return list.stdout.split(separator: "\n").map(String.init)
    }

    private func checkTrail(scenario: String, environment: [String: String], stderrCheck: ((String) -> Void)? = nil) throws {
        let storage = dirs.make("trail-\(scenario)")
        let logs = dirs.make("trail-logs-\(scenario)")
        let crash = try runHarness([scenario, "--trail", "150:5", "--storage", storage.path], environment: environment, logDirectory: logs)
        XCTAssertTrue(crash.signaled, "\(scenario): \(crash.outcome)\n\(crash.stderr)")
        stderrCheck?(crash.stderr)
        let relaunch = try runHarness(["--storage", storage.path], environment: environment, logDirectory: logs)
        XCTAssertEqual(relaunch.outcome, "exit 0", "\(scenario): \(relaunch.stderr)")
        let events = try readOutbox(storage).flatMap(\.events)
        guard let fatal = events.first(where: { $0["level"] as? String == "fatal" }) else {
            return XCTFail("\(scenario): no fatal event\n\(crash.stderr)\n\(relaunch.stderr)")
        }
        let messages = (dig(fatal, "breadcrumbs", "values") as? [[String: Any]])?.compactMap { $0["message"] as? String }
        XCTAssertEqual(messages, (50..<150).map { "crumb \($0)" }, scenario)
        // Each message, in order. Written twice only by one restart of the sequence: the mover's envelope in
        // flight when the process died (written to the outbox, its record not consumed yet), and in the
        // fallback also what the mover (still running while the crash handler works) wrote after the handler
        // had written the rings to the file: the next launch writes those again.
        let trailEvents = events.filter { (dig($0, "logentry", "formatted") as? String ?? "").hasPrefix("trail event ") }
        let trail = trailEvents.compactMap { numbered(dig($0, "logentry", "formatted") as? String, after: "trail event ") }
        var firsts: [Int] = []
        for k in trail where !firsts.contains(k) { firsts.append(k) }
        XCTAssertEqual(firsts, Array(0..<5), "\(scenario): every message, in order: \(trail)")
        let restarts = zip(trail, trail.dropFirst()).filter { $1 != $0 + 1 }.count
        XCTAssertLessThanOrEqual(restarts, 1, "\(scenario): \(trail)")
        if environment["VAKA_JOURNAL_NO_MMAP"] == nil {
            XCTAssertLessThanOrEqual(trail.count, 6, "\(scenario): mapped: at most the one in flight twice: \(trail)")
        }
        // Each message carries the breadcrumbs added before it: event k comes right after crumb k·149/5.
        for (k, event) in zip(trail, trailEvents) {
            let crumbs = (dig(event, "breadcrumbs", "values") as? [[String: Any]])?.compactMap { $0["message"] as? String }
            XCTAssertEqual(crumbs?.last, "crumb \(k * 149 / 5)", "\(scenario): event \(k)")
        }
    }

    /// The crash join takes a crashed run's breadcrumbs up to the report's `journal_seq`: those appended
    /// after it (by other threads while the handler ran) are not the state at death. Without the key, all.
    func testFatalEventBreadcrumbsStopAtTheReportsJournalSeq() throws {
        for (seqLine, expected) in [("journal_seq 120", 20..<120), ("", 50..<150)] {
            let storage = dirs.make("seq")
            let runID = UUID().uuidString
            var text = try exampleCrashReport(runID: runID)
            text = text.replacingOccurrences(of: "journal_seq 1042\n", with: seqLine.isEmpty ? "" : seqLine + "\n")
            XCTAssertEqual(text.contains("journal_seq"), !seqLine.isEmpty)
            let crashes = storage.appendingPathComponent("crashes")
            try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
            try text.write(to: crashes.appendingPathComponent("\(runID).crash"), atomically: true, encoding: .utf8)
            do {
                let dir = try RunDirectory(storage: storage, runID: runID)  // its lock is released when it goes
                let journal = try Journal(path: dir.url.appendingPathComponent("journal"))
                for i in 0..<150 { XCTAssertEqual(journal.append(.breadcrumb, level: 9, category: "c", body: "crumb \(i)"), UInt64(i + 1)) }
                journal.close()
            }
            let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                    runID: "J-\(UUID().uuidString)", dsn: nil, log: nil)
            client.joinPreviousRuns()
            let fatal = try XCTUnwrap(readOutbox(storage).flatMap(\.events).first { $0["level"] as? String == "fatal" })
            let messages = (dig(fatal, "breadcrumbs", "values") as? [[String: Any]])?.compactMap { $0["message"] as? String }
            XCTAssertEqual(messages, expected.map { "crumb \($0)" }, seqLine)
        }
    }

    /// Logs in the journal go out as `log` items: from a live run through the mover (flush), and from a run
    /// that died before its mover took them, at the next launch (the crash join), with that run's release.
    func testJournalledLogsAreSentByTheMoverAndRecoveredFromADeadRun() throws {
        let storage = dirs.make("logs")
        let deadRun = UUID().uuidString
        do {
            let dir = try RunDirectory(storage: storage, runID: deadRun)
            try dir.write(RunScope(runID: deadRun, release: "dead@1.0", environment: "production", tags: [:], userID: nil, session: nil))
            let journal = try Journal(path: dir.url.appendingPathComponent("journal"))
            for i in 0..<3 {
                XCTAssertNotNil(journal.append(.log, level: LogLevel.warn.rawValue, body: "dead log \(i)",
                                               attributes: [Journal.Attribute(key: "i", value: .integer(Int64(i)))]))
            }
            journal.close()
        }
        let client = try Client(options: Vaka.Options(release: "live@2.0", sessionTracking: false, storageDirectory: storage),
                                storage: storage, runID: "L-\(UUID().uuidString)", dsn: nil, log: nil)
        client.begin()
        client.setUp(through: .journal)  // made by start's background part, or now
        let journal = try XCTUnwrap(client.journal)
        for i in 0..<2 { journal.append(.log, level: LogLevel.info.rawValue, body: "live log \(i)") }
        XCTAssertTrue(client.flush(timeout: 1))
        client.end(timeout: 1)
        let logs = try readOutbox(storage).flatMap { $0.items.filter { $0.type == "log" }.map(\.payload) }
        let items = logs.flatMap { ($0["items"] as? [[String: Any]]) ?? [] }
        XCTAssertEqual(items.compactMap { $0["body"] as? String }, ["dead log 0", "dead log 1", "dead log 2", "live log 0", "live log 1"])
        XCTAssertEqual(items.first.flatMap { dig($0, "attributes", "sentry.release", "value") as? String }, "dead@1.0")
        XCTAssertEqual(items.last.flatMap { dig($0, "attributes", "sentry.release", "value") as? String }, "live@2.0")
        XCTAssertEqual(items.first.flatMap { dig($0, "attributes", "i", "value") as? Int }, 0)
        XCTAssertEqual(items.first?["level"] as? String, "warn")
    }

    /// A crashed run whose journal still held an event, with a DSN that never answers: the first launch queues
    /// the journal's event and the crash, and the run directory stays (the crash waits for the server); a
    /// later launch that queues the crash again does not queue the journal's event again (`journal.recovered`).
    func testEventsLeftInAJournalAreQueuedOnceWhileTheRunDirectoryStays() throws {
        let storage = dirs.make("once")
        let runID = UUID().uuidString
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        try exampleCrashReport(runID: runID).write(to: crashes.appendingPathComponent("\(runID).crash"), atomically: true, encoding: .utf8)
        let eventID = "0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e"
        do {
            let dir = try RunDirectory(storage: storage, runID: runID)
            try dir.write(RunScope(runID: runID, release: "dead@1.0", environment: "production", tags: [:], userID: nil, session: nil))
            let journal = try Journal(path: dir.url.appendingPathComponent("journal"))
            let event = Event(eventID: eventID, timestamp: 1_700_000_000, level: .info, logentry: LogEntry(formatted: "left behind"))
            XCTAssertNotNil(journal.append(.event, level: 9, bodyBytes: try event.jsonData(),
                                           attributes: [Journal.Attribute(key: "event_id", value: .string(eventID), meta: true)]))
            journal.close()
        }
        func launch() throws -> [String] {
            let client = try Client(options: Vaka.Options(dsn: "http://key@127.0.0.1:9/1", sessionTracking: false, storageDirectory: storage),
                                    storage: storage, runID: "Q-\(UUID().uuidString)", dsn: try DSN("http://key@127.0.0.1:9/1"), log: nil)
            client.begin()
            client.end(timeout: 0)
            // `pending/` as the next process finds it (every batch file sealed; the client's own queue may still
            // hold its last batch open when it ends before its uploader took it).
            let queue = try PersistentQueue(storageDirectory: storage)
            return queue.sealedBatches().flatMap { queue.records(of: $0) ?? [] }.compactMap { data in
                let header = data.prefix { $0 != 0x0A }
                return (try? JSONSerialization.jsonObject(with: header) as? [String: Any])?["event_id"] as? String
            }
        }
        let first = try launch()
        XCTAssertEqual(first.filter { $0 == eventID }.count, 1, "\(first)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: RunDirectory.root(storage).appendingPathComponent(runID).path), "the crash is not accepted yet")
        // Its batch file lost (dropped by the file cap, say): the next launch queues the crash again, not the
        // journal's event, which the first launch had queued.
        try FileManager.default.removeItem(at: storage.appendingPathComponent("pending"))
        let second = try launch()
        XCTAssertEqual(second.filter { $0 == eventID }.count, 0, "not queued again: \(second)")
        XCTAssertEqual(second.count, 1, "the crash, queued again: \(second)")
    }

    /// 8 threads capture 100 messages each while adding breadcrumbs: every event is delivered exactly once,
    /// and each thread's events in the order that thread captured them.
    func testEventsFromEightThreadsNoneLostNoneDuplicated() throws {
        let storage = dirs.make("threads")
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: "T-\(UUID().uuidString)", dsn: nil, log: nil)
        client.begin()
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for i in 0..<100 {
                client.addBreadcrumb(category: "t\(t)", message: "crumb \(i)")
                client.capture(message: "t\(t) event \(i)", level: .info)
            }
        }
        client.end(timeout: 5)
        let messages = try readOutbox(storage).flatMap(\.events).compactMap { dig($0, "logentry", "formatted") as? String }
        XCTAssertEqual(messages.count, 800)
        XCTAssertEqual(Set(messages).count, 800, "no duplicates")
        for t in 0..<8 {
            XCTAssertEqual(messages.filter { $0.hasPrefix("t\(t) ") }, (0..<100).map { "t\(t) event \($0)" }, "thread \(t)")
        }
    }

    /// `log-flood` (20,000 `Vaka.logger.info("log i")`) SIGKILLed at a random moment, at least 20 times (at most
    /// 40 runs, 10 minutes), each in a fresh storage directory. The killed run's journal, read offline, has at
    /// most one torn record. After the next launch the outbox's `log` items hold every log appended before the
    /// kill (the child's progress file says how many returned), in order, without a gap; a log may appear twice
    /// only as part of the mover's batch in flight (written to the outbox, the process killed before its
    /// records were consumed: the next launch writes that batch again, so the sequence restarts once, inside
    /// what was already written).
    func testLogFloodKilledAtRandomMomentsLosesNoLogAppendedBeforeTheKill() throws {
        var recoveredFromJournal = 0, redelivered = 0
        let (kills, attempts) = try killAtRandomMoments("log-flood", maxDelay: 100_000) { storage, logs, progressURL in
            let progress = try String(contentsOf: progressURL, encoding: .utf8)
            let logged = try XCTUnwrap(Int(progress.split(whereSeparator: { $0 == "\n" }).first ?? ""), progress)

            if let runDir = try killedRunDirectory(storage),
               FileManager.default.fileExists(atPath: runDir.appendingPathComponent("journal").path) {
                let (records, skipped) = try Journal.read(runDir.appendingPathComponent("journal"))
                XCTAssertLessThanOrEqual(skipped, 1, "at most one torn record")
                recoveredFromJournal += records.filter { $0.kind == .log && !$0.consumed }.count
            } else {
                // Killed while its exit was removing the run directory: only after every log was appended.
                XCTAssertEqual(logged, 20_000, "the journal is gone only when the run was exiting")
            }

            let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
            let items = try readOutbox(storage).flatMap { $0.items.filter { $0.type == "log" } }
            let numbers = items.flatMap { ($0.payload["items"] as? [[String: Any]]) ?? [] }
                .compactMap { numbered($0["body"] as? String, after: "log ") }
            redelivered += assertEveryNumberBeforeTheKill(numbers, recorded: logged, "logs")
        }
        print("log flood: \(kills) SIGKILLs in \(attempts) runs; \(recoveredFromJournal) logs recovered from killed runs' journals, \(redelivered) written twice")
    }

    /// 3,000 logs at 5,000 logs/s through the logger's journal route of a started client (about 80 bytes each;
    /// the default journal's log ring holds about 800): far more than the ring holds between two of the mover's
    /// 1 s passes, so without a wake-up as the ring fills most of them would go to the spill file (over 100 KB).
    /// The mover, woken at 750 ‰, keeps them in the ring: a generous bound of 40 KB allows for the mover being
    /// held up now and then on a busy machine. All 3,000 are delivered, in order.
    func testLogsFasterThanTheMoversIntervalStayInTheRing() throws {
        let storage = dirs.make("paced-logs")
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: "P-\(UUID().uuidString)", dsn: nil, log: nil)
        client.begin()
        client.setUp(through: .journal)  // made by start's background part, or now
        let journal = try XCTUnwrap(client.journal)
        let append = LogRouter.journalSink(journal, mover: client.mover)
        let spill = journal.url.path + ".spill"
        var next = DispatchTime.now().uptimeNanoseconds
        for i in 0..<3000 {
            while DispatchTime.now().uptimeNanoseconds < next {}
            next += 200_000
            append(LogRouter.realtimeNs(), .info, "log \(i)", [(key: "i", value: .integer(Int64(i)))])
        }
        var info = stat()
        let spilled = stat(spill, &info) == 0 ? Int(info.st_size) : 0
        client.end(timeout: 5)
        XCTAssertLessThan(spilled, 40_000, "bytes of logs spilled while the ring filled")
        let bodies = try readOutbox(storage).flatMap { $0.items.filter { $0.type == "log" } }
            .flatMap { ($0.payload["items"] as? [[String: Any]]) ?? [] }.compactMap { $0["body"] as? String }
        XCTAssertEqual(bodies, (0..<3000).map { "log \($0)" })
    }

    /// `fsize-flood` with a 16 KiB journal (so its event ring holds one event and the spill file grows): the
    /// soft `RLIMIT_FSIZE` is set to the spill's size once it holds 8 KiB, so the next spill write starts at the
    /// quota — as does the write(2) fallback's sync of its 16 KiB file (`VAKA_JOURNAL_NO_MMAP=1`). The
    /// process is not ended by SIGXFSZ, and every event is delivered once, in order (those the spill refuses are
    /// written to storage at once, after what the journal held).
    func testJournalWritesPastAFileSizeQuotaDoNotEndTheApp() throws {
        for fallback in [false, true] {
            let label = fallback ? "fallback" : "mapped"
            let storage = dirs.make("fsize-\(label)")
            let logs = dirs.make("fsize-logs-\(label)")
            var environment = ["VAKA_JOURNAL_SIZE": "16384"]
            if fallback { environment["VAKA_JOURNAL_NO_MMAP"] = "1" }
            let run = try runHarness(["fsize-flood", "--storage", storage.path], environment: environment,
                                     logDirectory: logs, timeout: 120)
            XCTAssertEqual(run.outcome, "exit 0", "\(label): SIGXFSZ is signal \(SIGXFSZ)\n\(run.stderr)")
            let words = run.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" })
            guard words.count >= 4, let quota = Int(words[1]), let count = Int(words[3]) else {
                XCTFail("\(label): \(run.stdout)\n\(run.stderr)")
                continue
            }
            XCTAssertGreaterThanOrEqual(quota, 8192, label)
            let ids = try readOutbox(storage).flatMap(\.events).compactMap { $0["event_id"] as? String }
            XCTAssertEqual(ids, (0..<count).map { "f5125" + String(format: "%027x", $0) }, "\(label): every event once, in order")
        }
    }
}
