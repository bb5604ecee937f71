import XCTest
import VakaTestSupport
@testable import Vaka

/// What a program does in the first moments after `Vaka.start`, and what an earlier run left on disk, against
/// start's background part: odd `scope.json` content at the crash join, and a `fork()` before the run's files
/// exist.
final class StartAdversaryTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// A crashed run whose `scope.json` says its session already counted `Int.max` errors (a file damaged or
    /// written by hand): the join sends its fatal event and a `crashed` update that keeps that count, instead of
    /// trapping on the overflow at every launch.
    func testCrashedRunWithLargestErrorCountIsJoined() throws {
        try assertJoined(errorsInScope: "\(Int.max)", crashedUpdateErrors: Int64.max)
    }

    /// A negative error count in `scope.json` (which Relay would refuse in the session update) is taken as none.
    func testCrashedRunWithNegativeErrorCountIsJoined() throws {
        try assertJoined(errorsInScope: "-5", crashedUpdateErrors: 1)
    }

    private func assertJoined(errorsInScope: String, crashedUpdateErrors: Int64, file: StaticString = #filePath, line: UInt = #line) throws {
        let envelopes = try joinCrashedRun(named: "errors") { crashed in
            """
            {"runID":"\(crashed)","release":"app@1","environment":"production","tags":{},
             "session":{"sid":"\(UUID().uuidString.lowercased())","started":1700000000,"errors":\(errorsInScope),"status":"ok","initSent":true}}
            """
        }
        let fatal = try XCTUnwrap(envelopes.first { $0.events.first?["level"] as? String == "fatal" })
        XCTAssertEqual(fatal.events.first?["release"] as? String, "app@1")
        let session = try XCTUnwrap(fatal.sessions.first)
        XCTAssertEqual(session["status"] as? String, "crashed")
        XCTAssertEqual((session["errors"] as? NSNumber)?.int64Value, crashedUpdateErrors, file: file, line: line)
    }

    /// Leaves in a fresh storage directory a crashed run (a run directory with the `scope.json` that `scopeJSON`
    /// makes from the run id, and an example crash report of that run), then starts and ends a client (release
    /// `app@2`) on it; returns the outbox's envelopes.
    private func joinCrashedRun(named name: String, scopeJSON: (String) -> String) throws -> [OutboxEnvelope] {
        let storage = dirs.make(name)
        let crashed = UUID().uuidString
        let runDir = storage.appendingPathComponent("runs/\(crashed)")
        try FileManager.default.createDirectory(at: runDir, withIntermediateDirectories: true)
        try scopeJSON(crashed).write(to: runDir.appendingPathComponent("scope.json"), atomically: true, encoding: .utf8)
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        try exampleCrashReport(runID: crashed).write(to: crashes.appendingPathComponent("\(crashed).crash"), atomically: true, encoding: .utf8)
        let client = try Client(options: Vaka.Options(release: "app@2", sessionTracking: true, storageDirectory: storage),
                                storage: storage, runID: UUID().uuidString, dsn: nil, log: nil)
        client.begin()
        client.end(timeout: 1)
        return try readOutbox(storage)
    }

    /// A crashed run whose `scope.json` holds deeply nested JSON in `extra` (a damaged or hostile file within the
    /// 1 MiB cap): the join does not overflow the stack; the fatal event goes out.
    func testCrashedRunWithDeeplyNestedScopeIsJoined() throws {
        let depth = 200_000
        let envelopes = try joinCrashedRun(named: "deep") { crashed in
            "{\"runID\":\"\(crashed)\",\"release\":\"app@1\",\"environment\":\"production\",\"tags\":{},\"extra\":{\"a\":"
                + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}}"
        }
        XCTAssertNotNil(envelopes.first { $0.events.first?["level"] as? String == "fatal" })
    }

}

/// A `fork()` right after start, before start's background part made the journal: the child's breadcrumbs go
/// to the journal it shares with its parent (the one its crash report is joined with), not to the child's memory.
final class StartForkTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    func testChildForkedRightAfterStartRecordsInTheSharedJournal() throws {
        var missing: [Int] = []
        for round in 0..<10 {
            let storage = dirs.make("fork-\(round)")
            let client = try Client(options: Vaka.Options(sessionTracking: true, storageDirectory: storage), storage: storage,
                                    runID: "FK-\(UUID().uuidString)", dsn: nil, log: nil)
            client.begin()
            let pid = fork()
            if pid == 0 {
                alarm(30)
                client.addBreadcrumb(category: "child", message: "round \(round)")
                _exit(0)
            }
            XCTAssertGreaterThan(pid, 0)
            XCTAssertTrue(waitForForkedChild(pid, seconds: 10).exited, "round \(round): the child did not exit within 10 s")
            client.setUp(through: .journal)
            let journal = try XCTUnwrap(client.journal)
            if !journal.breadcrumbs().contains(where: { $0.category == "child" && $0.text == "round \(round)" }) { missing.append(round) }
            client.end(timeout: 0)
        }
        XCTAssertEqual(missing, [], "rounds whose child's breadcrumb is not in the shared journal")
    }
}

/// The harness's `start-storm` (real processes): 8 threads call breadcrumbs, logs, `setTag`, `setUser` and
/// `capture` from the moment `Vaka.start` returned, with a `beforeBreadcrumb` hook that calls back into Vaka and
/// debug logging on, after the main thread forked a child right after start.
final class StartStormTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func logBodies(_ envelopes: [OutboxEnvelope]) -> [String] {
        envelopes.flatMap(\.items).filter { $0.type == "log" }
            .flatMap { ($0.payload["items"] as? [[String: Any]]) ?? [] }.compactMap { $0["body"] as? String }
    }

    /// No deadlock (the harness exits 3 when its threads do not finish within 60 s), every capture and every log
    /// exactly once, the forked child's capture and log too (its log goes through the journal it shares with its
    /// parent: without one it is dropped) and no crash of the child (a scope call in a child forked while
    /// start's thread holds the client's lock traps), one session `ok` then `exited`.
    func testCallsFromManyThreadsRightAfterStartWithAForkedChild() throws {
        for round in 0..<3 {
            let storage = dirs.make("storm-\(round)")
            let run = try runHarness(["start-storm", "--storage", storage.path],
                                     environment: ["VAKA_DEBUG": "1", "VAKA_BEFORE_BREADCRUMB": "reenter", "VAKA_STORM_FORK": "1"],
                                     logDirectory: dirs.make("storm-logs-\(round)"), timeout: 90)
            XCTAssertEqual(run.outcome, "exit 0", run.stderr)
            let envelopes = try readOutbox(storage)
            let messages = envelopes.flatMap(\.events).compactMap { dig($0, "logentry", "formatted") as? String }
            for t in 0..<8 {
                for j in 0..<4 { XCTAssertEqual(messages.filter { $0 == "storm t\(t) \(j)" }.count, 1, "round \(round): storm t\(t) \(j)") }
            }
            // A child that crashes (a lock held by start's thread at the fork traps in `Mutex`) leaves a report.
            // (The report's named reserve, `.reserve-0`, is not a report.)
            let crashes = ((try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("crashes").path)) ?? [])
                .filter { !$0.hasPrefix(".reserve-") }
            XCTAssertEqual(crashes, [], "round \(round): the forked child crashed")
            XCTAssertEqual(messages.filter { $0 == "storm child" }.count, 1, "round \(round): the child's capture")
            let logs = logBodies(envelopes)
            XCTAssertEqual(logs.filter { $0 == "child log" }.count, 1, "round \(round): the child's log")
            for t in 0..<8 {
                let own = logs.filter { $0.hasPrefix("t\(t) log ") }
                XCTAssertEqual(own, (0..<200).map { "t\(t) log \($0)" }, "round \(round): thread \(t)'s logs, once each, in order")
            }
            let sessions = envelopes.flatMap(\.sessions)
            XCTAssertEqual(sessions.map { $0["status"] as? String }, ["ok", "exited"], "round \(round)")
            XCTAssertEqual(sessions.map { $0["init"] as? Bool }, [true, false], "round \(round)")
        }
    }
}
