import XCTest
import VakaTestSupport
@testable import Vaka
#if canImport(Glibc)
import Glibc
#endif

/// Several report files for one event id (a copy of a
/// report, a fork child's report renamed: the same `run_id`) are all settled when the server accepts or gives
/// up the event: every report deleted (or set aside as `.dropped`), the run directory removed once, the crash
/// sent once, and nothing left to send at the next launch. Real ``Client`` (crash join, delivery threads,
/// libcurl) against the loopback ``TestHTTPServer``.
final class CrashLedgerTests: LoopbackServerTestCase {

    private func makeClient(_ storage: URL) throws -> Client {
        try Client(options: Vaka.Options(dsn: server.dsn, sessionTracking: false, storageDirectory: storage),
                   storage: storage, runID: "RUN-\(UUID().uuidString)", dsn: try DSN(server.dsn), log: log.sink)
    }

    /// One launch: start (the crash join runs), flush for at most `flush` seconds, end.
    @discardableResult
    private func launch(_ storage: URL, flush: TimeInterval) throws -> Bool {
        let client = try makeClient(storage)
        client.begin()
        let sent = client.flush(timeout: flush)
        client.end(timeout: 1)
        return sent
    }

    /// The requests that carried an event, as their envelope's `event_id`.
    private func eventRequests() -> [String?] {
        server.requests.compactMap { receivedEnvelope($0) }.filter { $0.items.contains { $0.type == .event } }.map(\.header.eventID)
    }

    /// The example report of docs/report-format.md under a fresh run id as `crashes/<run-id>.crash`, its run
    /// directory, and `copies` byte-for-byte copies of the report under other names in `crashes/`.
    private func plantCrash(_ storage: URL, copies: [String]) throws -> (reports: [URL], runDirectory: URL, eventID: String) {
        let runID = UUID().uuidString
        let text = try exampleCrashReport(runID: runID)
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        var reports = [crashes.appendingPathComponent("\(runID).crash")]
        for name in copies { reports.append(crashes.appendingPathComponent(name)) }
        for report in reports { try text.write(to: report, atomically: true, encoding: .utf8) }
        do {
            let dir = try RunDirectory(storage: storage, runID: runID)  // its lock is released when it goes
            try dir.write(RunScope(runID: runID, release: "crashed@1.0", environment: "production",
                                   tags: [:], userID: nil, session: nil))
        }
        return (reports, RunDirectory.root(storage).appendingPathComponent(runID),
                runID.replacingOccurrences(of: "-", with: "").lowercased())
    }

    private func exists(_ url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }

    /// A copy `zz-copy.crash` (sorted after the original) and a copy sorted before it
    /// (`00-copy.crash`, watched first): one event sent, all three reports and the run directory gone after the
    /// 200, and the next launch sends nothing.
    func testCopiesOfAReportAreAllDeletedWhenTheServerAcceptsTheEvent() throws {
        let storage = dirs.make()
        let crash = try plantCrash(storage, copies: ["zz-copy.crash", "00-copy.crash"])
        XCTAssertTrue(try launch(storage, flush: 20))
        XCTAssertEqual(eventRequests(), [crash.eventID], "one event for three files with one run_id")
        for report in crash.reports { XCTAssertFalse(exists(report), "\(report.lastPathComponent) left after the 200: \(log.lines)") }
        XCTAssertFalse(exists(crash.runDirectory))
        XCTAssertTrue(try launch(storage, flush: 5))
        XCTAssertEqual(eventRequests(), [crash.eventID], "a copy is not sent again at the next launch")
    }

    /// The event is queued at a launch whose server answers 503 (every file stays), and accepted at the next
    /// launch, which sends the envelope still in `pending/` possibly before the join has looked at the files:
    /// every file goes with that one 200, and a third launch has nothing to send.
    func testCopiesAreDeletedWhenTheEventQueuedByAnEarlierLaunchIsAccepted() throws {
        server.responder = { _ in .status(503) }
        let storage = dirs.make()
        let crash = try plantCrash(storage, copies: ["zz-copy.crash", "00-copy.crash"])
        XCTAssertFalse(try launch(storage, flush: 1))
        for report in crash.reports { XCTAssertTrue(exists(report), "not accepted yet: \(report.lastPathComponent) stays") }
        XCTAssertTrue(exists(crash.runDirectory))
        XCTAssertEqual(eventRequests(), [crash.eventID])

        server.responder = nil
        XCTAssertTrue(try launch(storage, flush: 20))
        XCTAssertEqual(eventRequests(), [crash.eventID, crash.eventID], "one 503, one 200: not queued once per copy")
        for report in crash.reports { XCTAssertFalse(exists(report), "\(report.lastPathComponent) left after the 200: \(log.lines)") }
        XCTAssertFalse(exists(crash.runDirectory))

        XCTAssertTrue(try launch(storage, flush: 5))
        XCTAssertEqual(eventRequests().count, 2, "nothing left to send")
    }

    /// A permanent rejection (400): every file of the event is set aside as `.crash.dropped` with its reason,
    /// none is sent again.
    func testCopiesAreAllSetAsideWhenTheEventIsGivenUp() throws {
        server.responder = { _ in .status(400) }
        let storage = dirs.make()
        let crash = try plantCrash(storage, copies: ["zz-copy.crash"])
        try launch(storage, flush: 10)
        XCTAssertEqual(eventRequests(), [crash.eventID])
        for report in crash.reports {
            XCTAssertFalse(exists(report), "\(report.lastPathComponent) left: \(log.lines)")
            XCTAssertTrue(exists(URL(fileURLWithPath: report.path + ".dropped")), report.lastPathComponent)
            let reason = try String(contentsOfFile: report.path + ".dropped.reason", encoding: .utf8)
            XCTAssertTrue(reason.contains("400"), reason)
        }
        XCTAssertFalse(exists(crash.runDirectory))
        try launch(storage, flush: 5)
        XCTAssertEqual(eventRequests().count, 1, "given up: never sent again")
    }

    /// The ledger alone: entries of one event id accumulate (the same entry once), and a settlement during the
    /// join is applied to an entry watched after it.
    func testLedgerKeepsEveryEntryOfAnEventAndAppliesAnEarlySettlementToLaterOnes() throws {
        let dir = dirs.make("ledger")
        let files = (0..<3).map { dir.appendingPathComponent("r\($0).crash") }
        for file in files { XCTAssertTrue(FileManager.default.createFile(atPath: file.path, contents: Data("x".utf8))) }
        let ledger = CrashLedger(log: nil)
        let a = CrashLedger.Entry(reportPath: files[0].path, runDirectory: nil)
        let b = CrashLedger.Entry(reportPath: files[1].path, runDirectory: nil)
        XCTAssertNil(ledger.watch("e1", a))
        XCTAssertNil(ledger.watch("e1", b))
        XCTAssertNil(ledger.watch("e1", a))
        XCTAssertEqual(ledger.entries("e1"), [a, b])
        ledger.settled("e1", .accepted)
        XCTAssertFalse(exists(files[0]))
        XCTAssertFalse(exists(files[1]))
        XCTAssertEqual(ledger.entries("e1"), [])
        // A third copy found after the settlement, still during the join: told how it ended.
        let c = CrashLedger.Entry(reportPath: files[2].path, runDirectory: nil)
        guard case .accepted? = ledger.watch("e1", c) else { return XCTFail("the early settlement was forgotten") }
        ledger.finishJoin()
    }
}
