import XCTest
import VakaTestSupport

/// `Vaka.start` leaves the crash join of earlier runs and this run's first session update to its background
/// thread (`vaka.start`): through the harness (`vaka-crashme`, outbox mode), with many crash reports waiting so
/// that the join is still running when `start` returns.
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
        XCTAssertEqual(own.sessions.first?["status"] as? String, "crashed", "the crashed run's scope was written before start returned")
    }
}
