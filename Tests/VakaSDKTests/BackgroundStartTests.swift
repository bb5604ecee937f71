import XCTest
import VakaTestSupport
@testable import Vaka

/// `Vaka.start` leaves the run's files (run directory and lock, journal, anon id, `scope.json`), the crash join
/// of earlier runs and this run's first session update to its background thread (`vaka.start`): through the
/// harness (`vaka-crashme`, outbox mode), with many crash reports waiting so that the join is still running when
/// `start` returns; breadcrumbs from many threads while the journal is made; crashes right after `Vaka.start`
/// (nothing recorded yet; a breadcrumb added just before), reported at the next launch.
final class BackgroundStartTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// Reports waiting in `storage`: one real crash report (`null-deref`) copied `count` times, each under a
    /// run id of its own (its file name and `run_id` line). Returns the run ids.
    private func waitingReports(_ count: Int, in storage: URL) throws -> [String] {
        let source = dirs.make("source")
        let crash = try runHarness(["null-deref", "--storage", source.path], logDirectory: dirs.make("source-logs"))
        XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
        let sourceCrashes = source.appendingPathComponent("crashes")
        let name = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: sourceCrashes.path).first { $0.hasSuffix(".crash") })
        let text = try String(contentsOf: sourceCrashes.appendingPathComponent(name), encoding: .utf8)
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        return try (0..<count).map { _ in
            let runID = UUID().uuidString
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
                line.hasPrefix("run_id ") ? "run_id \(runID)" : String(line)
            }
            try lines.joined(separator: "\n").write(to: crashes.appendingPathComponent(runID + ".crash"), atomically: true, encoding: .utf8)
            return runID
        }
    }

    private func eventID(_ runID: String) -> String { runID.replacingOccurrences(of: "-", with: "").lowercased() }

    /// `start` returns while the join of 30 waiting reports still runs (reports left right after it), and
    /// `flush` waits for it: after `flush(timeout: 0)` every report is joined, and the outbox holds every
    /// crash before this run's first session update.
    func testStartReturnsBeforeTheCrashJoinAndFlushWaitsForIt() throws {
        let storage = dirs.make("probe")
        let runIDs = try waitingReports(30, in: storage)
        let probe = try runHarness(["start-probe", "--storage", storage.path], logDirectory: dirs.make("probe-logs"))
        XCTAssertEqual(probe.outcome, "exit 0", probe.stderr)
        let line = try XCTUnwrap(probe.stdout.split(separator: "\n").last { $0.hasPrefix("{") }, probe.stdout)
        let counts = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Int])
        XCTAssertGreaterThan(counts["reports_after_start"] ?? 0, 0, "start returned before the join of 30 reports was done: \(counts)")
        XCTAssertEqual(counts["reports_after_flush"], 0, "flush waited for the join: \(counts)")
        XCTAssertGreaterThanOrEqual(counts["outbox_after_flush"] ?? 0, 30, "\(counts)")

        let envelopes = try readOutbox(storage)
        let fatal = envelopes.indices.filter { envelopes[$0].events.first?["level"] as? String == "fatal" }
        XCTAssertEqual(Set(fatal.compactMap { envelopes[$0].events.first?["event_id"] as? String }), Set(runIDs.map(eventID)))
        let firstUpdate = try XCTUnwrap(envelopes.firstIndex { $0.sessions.contains { $0["status"] as? String == "ok" && $0["init"] as? Bool == true } },
                                        "this run's first session update")
        XCTAssertLessThan(try XCTUnwrap(fatal.max()), firstUpdate, "earlier runs' crashes before this run's session")
        XCTAssertEqual(envelopes.flatMap(\.sessions).last?["status"] as? String, "exited")
    }

    /// A crash right after `start`, while the join of 30 waiting reports runs, is reported at the next launch
    /// (with its scope's session `crashed`), and no earlier run's crash is lost.
    func testCrashRightAfterStartWhileTheJoinRunsIsReportedAtTheNextLaunch() throws {
        let storage = dirs.make("crash-during-join")
        let logs = dirs.make("crash-during-join-logs")
        let runIDs = try waitingReports(30, in: storage)
        let crash = try runHarness(["null-deref", "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
        let crashes = storage.appendingPathComponent("crashes")
        let left = try FileManager.default.contentsOfDirectory(atPath: crashes.path).filter { $0.hasSuffix(".crash") }
        let crashedRun = try XCTUnwrap(left.map { String($0.dropLast(".crash".count)) }.first { !runIDs.contains($0) }, "\(left)")

        let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: crashes.path).filter { $0.hasSuffix(".crash") }, [])
        let envelopes = try readOutbox(storage)
        let fatal = envelopes.filter { $0.events.first?["level"] as? String == "fatal" }
        XCTAssertEqual(Set(fatal.compactMap { $0.events.first?["event_id"] as? String }), Set((runIDs + [crashedRun]).map(eventID)))
        let own = try XCTUnwrap(fatal.first { $0.events.first?["event_id"] as? String == eventID(crashedRun) })
        XCTAssertEqual(dig(own.events.first, "exception", "values", 0, "type") as? String, "SIGSEGV")
        // Its session: `crashed` when start's background part had written `scope.json` before the crash; none
        // when the crash came first (the run had made no session update: there is nothing to end).
        if let session = own.sessions.first { XCTAssertEqual(session["status"] as? String, "crashed") }
        assertNoOrphanSessionUpdate(envelopes.flatMap(\.sessions))
    }

    /// 6 threads add 150 breadcrumbs each from the moment start's background part begins (some before the journal
    /// exists, making it or waiting for it; the rest after): the journal holds every one exactly once, each
    /// thread's in the order it added them.
    func testBreadcrumbsAddedWhileTheJournalIsMadeArriveOnceInOrder() throws {
        let threads = 6, perThread = 150
        for round in 0..<5 {
            let storage = dirs.make("handover-\(round)")
            let client = try Client(options: Vaka.Options(sessionTracking: true, storageDirectory: storage), storage: storage,
                                    runID: "H-\(UUID().uuidString)", dsn: nil, log: nil)
            XCTAssertNil(client.journal, "no journal before start's background part")
            let ready = DispatchSemaphore(value: 0), go = DispatchSemaphore(value: 0), done = DispatchGroup()
            for t in 0..<threads {
                done.enter()
                Thread {
                    ready.signal()
                    go.wait()
                    for i in 0..<perThread {
                        if i % 2 == 0 {
                            client.addBreadcrumb(category: "t\(t)", message: "\(i)")
                        } else {
                            client.addBreadcrumb(Breadcrumb(timestamp: Date().timeIntervalSince1970, type: "debug",
                                                            category: "t\(t)", message: "\(i)", data: ["i": .int(Int64(i))]))
                        }
                    }
                    done.leave()
                }.start()
            }
            for _ in 0..<threads { ready.wait() }
            client.begin()
            for _ in 0..<threads { go.signal() }
            XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
            let journal = try XCTUnwrap(client.journal)
            var seen: [String: [Int]] = [:]
            for record in journal.breadcrumbs() {
                seen[record.category, default: []].append(try XCTUnwrap(Int(record.text), record.text))
            }
            for t in 0..<threads {
                XCTAssertEqual(seen["t\(t)"], Array(0..<perThread), "round \(round): thread \(t)'s breadcrumbs, once each, in order")
            }
            client.end(timeout: 1)
        }
    }

    /// A crash right after `Vaka.start`, before anything was recorded (`null-deref`: the harness starts Vaka and
    /// dereferences NULL at once, so the crash may come before or after start's background part made the run's
    /// files): the next launch sends the fatal event with its signal, its frames and the release, and never a
    /// `crashed` session update claiming `init: false` for a session whose first update was not sent.
    func testACrashRightAfterStartIsReportedAtTheNextLaunch() throws {
        for round in 0..<3 {
            let storage = dirs.make("crash-at-once-\(round)")
            let logs = dirs.make("crash-at-once-logs-\(round)")
            let crash = try runHarness(["null-deref", "--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
            let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
            let envelopes = try readOutbox(storage)
            let event = try XCTUnwrap(envelopes.flatMap(\.events).first { $0["level"] as? String == "fatal" }, "round \(round)")
            XCTAssertEqual(dig(event, "exception", "values", 0, "type") as? String, "SIGSEGV")
            let frames = try XCTUnwrap(dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
            XCTAssertEqual(frames.last?["function"] as? String, "crashme_null_deref")
            // The same program: the crashed run's release (from its scope.json) or, without one, the relaunch's.
            let relaunchRelease = try XCTUnwrap(dig(envelopes.flatMap(\.sessions).last, "attrs", "release") as? String)
            XCTAssertEqual(event["release"] as? String, relaunchRelease)
            assertNoOrphanSessionUpdate(envelopes.flatMap(\.sessions))
        }
    }

    /// A crash right after three breadcrumbs added just after `Vaka.start` (`--trail 3:0`): the fatal event at the
    /// next launch carries them (a breadcrumb makes the journal first when start's background part has not).
    func testACrashRightAfterBreadcrumbsAddedAtStartCarriesThem() throws {
        let storage = dirs.make("crash-after-crumbs")
        let logs = dirs.make("crash-after-crumbs-logs")
        let crash = try runHarness(["null-deref", "--trail", "3:0", "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
        let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
        let envelopes = try readOutbox(storage)
        let event = try XCTUnwrap(envelopes.flatMap(\.events).first { $0["level"] as? String == "fatal" })
        XCTAssertEqual(dig(event, "exception", "values", 0, "type") as? String, "SIGSEGV")
        XCTAssertNotNil(event["release"] as? String)
        let crumbs = (dig(event, "breadcrumbs", "values") as? [[String: Any]]) ?? []
        XCTAssertEqual(crumbs.compactMap { $0["message"] as? String }, ["crumb 0", "crumb 1", "crumb 2"])
        assertNoOrphanSessionUpdate(envelopes.flatMap(\.sessions))
    }

    /// A crash report of a run that never made its run directory (crashed before start's background part):
    /// the join sends its fatal event with the launch's own release and environment and no session update for
    /// it, and deletes the report.
    func testAReportWithoutARunDirectoryGetsTheLaunchsReleaseAndNoSession() throws {
        let storage = dirs.make("no-run-dir")
        let crashed = UUID().uuidString
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        try exampleCrashReport(runID: crashed).write(to: crashes.appendingPathComponent("\(crashed).crash"), atomically: true, encoding: .utf8)
        let client = try Client(options: Vaka.Options(release: "app@2.0", environment: "staging", sessionTracking: true,
                                                      storageDirectory: storage),
                                storage: storage, runID: UUID().uuidString, dsn: nil, log: nil)
        client.begin()
        client.end(timeout: 1)
        let envelopes = try readOutbox(storage)
        let fatal = try XCTUnwrap(envelopes.first { $0.events.first?["level"] as? String == "fatal" })
        let event = try XCTUnwrap(fatal.events.first)
        XCTAssertEqual(event["event_id"] as? String, crashed.replacingOccurrences(of: "-", with: "").lowercased())
        XCTAssertEqual(event["release"] as? String, "app@2.0")
        XCTAssertEqual(event["environment"] as? String, "staging")
        XCTAssertEqual(fatal.sessions.count, 0, "no session: the crashed run never wrote one")
        let sessions = envelopes.flatMap(\.sessions)
        XCTAssertEqual(sessions.map { $0["status"] as? String }, ["exited"], "only the launch's own session")
        XCTAssertEqual(sessions.first?["init"] as? Bool, true)
        XCTAssertNotNil(sessions.first?["did"] as? String, "the anon id, read by start's background part")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: crashes.path).filter { $0.hasSuffix(".crash") }, [])
    }

    /// Every `crashed` update with `init: false` follows an earlier update of the same session.
    private func assertNoOrphanSessionUpdate(_ sessions: [[String: Any]], file: StaticString = #filePath, line: UInt = #line) {
        var sent = Set<String>()
        for session in sessions {
            let sid = session["sid"] as? String ?? ""
            if session["init"] as? Bool == false {
                XCTAssertTrue(sent.contains(sid), "update \(session) of a session whose first update was never sent", file: file, line: line)
            }
            sent.insert(sid)
        }
    }
}
