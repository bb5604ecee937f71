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
        let storage = dirs.make("max-errors")
        let crashed = UUID().uuidString
        let runDir = storage.appendingPathComponent("runs/\(crashed)")
        try FileManager.default.createDirectory(at: runDir, withIntermediateDirectories: true)
        let scope = """
        {"runID":"\(crashed)","release":"app@1","environment":"production","tags":{},
         "session":{"sid":"\(UUID().uuidString.lowercased())","started":1700000000,"errors":\(Int.max),"status":"ok","initSent":true}}
        """
        try scope.write(to: runDir.appendingPathComponent("scope.json"), atomically: true, encoding: .utf8)
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        try exampleCrashReport(runID: crashed).write(to: crashes.appendingPathComponent("\(crashed).crash"), atomically: true, encoding: .utf8)
        let client = try Client(options: Vaka.Options(release: "app@2", sessionTracking: true, storageDirectory: storage),
                                storage: storage, runID: UUID().uuidString, dsn: nil, log: nil)
        client.begin()
        client.end(timeout: 1)
        let envelopes = try readOutbox(storage)
        let fatal = try XCTUnwrap(envelopes.first { $0.events.first?["level"] as? String == "fatal" })
        XCTAssertEqual(fatal.events.first?["release"] as? String, "app@1")
        let session = try XCTUnwrap(fatal.sessions.first)
        XCTAssertEqual(session["status"] as? String, "crashed")
        XCTAssertEqual((session["errors"] as? NSNumber)?.int64Value, Int64.max)
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
            var status: Int32 = 0
            var exited = false
            for _ in 0..<200 {
                if waitpid(pid, &status, WNOHANG) == pid { exited = true; break }
                usleep(50_000)
            }
            if !exited { kill(pid, SIGKILL); waitpid(pid, &status, 0) }
            XCTAssertTrue(exited, "round \(round): the child did not exit within 10 s")
            client.setUp(through: .journal)
            let journal = try XCTUnwrap(client.journal)
            if !journal.breadcrumbs().contains(where: { $0.category == "child" && $0.text == "round \(round)" }) { missing.append(round) }
            client.end(timeout: 0)
        }
        XCTAssertEqual(missing, [], "rounds whose child's breadcrumb is not in the shared journal")
    }
}
