import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Every file the SDK reads back from its storage directory
/// is read with a size cap. A crashed run whose `journal` is 1 GiB (sparse here), a 1 GiB
/// `scope.json` and a 1 GiB `anon_id`: the next launch (`Vaka.start` with its crash join) finishes within
/// generous bounds, and the crash still arrives (a journal over its size limit is not read at all).
final class StorageFileSizeTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// Makes `url` a 1 GiB sparse file that ends with its old content (after a newline).
    private func inflate(_ url: URL) throws {
        let old = (try? Data(contentsOf: url)) ?? Data()
        XCTAssertEqual(truncate(url.path, 1 << 30), 0)
        let handle = try FileHandle(forWritingTo: url)
        handle.seekToEndOfFile()
        handle.write(Data("\n".utf8) + old)
        try handle.close()
    }

    private func crashedRun(_ label: String) throws -> (storage: URL, logs: URL, runID: String) {
        let storage = dirs.make(label)
        let logs = dirs.make(label + "-logs")
        let crash = try runHarness(["null-deref", "--scope", "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
        let reports = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("crashes").path)
        let runID = try XCTUnwrap(reports.first { $0.hasSuffix(".crash") }).replacingOccurrences(of: ".crash", with: "")
        return (storage, logs, runID)
    }

    private func fatalEvent(_ storage: URL) throws -> [String: Any] {
        try XCTUnwrap(readOutbox(storage).flatMap(\.events).first { $0["level"] as? String == "fatal" })
    }

    func testAHugeJournalIsNotReadAndTheCrashStillArrives() throws {
        let (storage, logs, runID) = try crashedRun("journal")
        try inflate(storage.appendingPathComponent("runs/\(runID)/journal"))
        let started = Date()
        let relaunch = try runHarness(["--storage", storage.path], environment: ["VAKA_DEBUG": "1"], logDirectory: logs, timeout: 60)
        let took = Date().timeIntervalSince(started)
        XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
        XCTAssertLessThan(took, 10, "start with a 1 GiB journal took \(took) s")
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        XCTAssertLessThan(usage.ru_maxrss, 512 * 1024, "a child used \(usage.ru_maxrss) KiB")
        XCTAssertTrue(relaunch.stderr.contains("the journal cannot be read"), relaunch.stderr)
        let event = try fatalEvent(storage)
        XCTAssertNil(dig(event, "breadcrumbs", "values"), "a journal over the size limit is not read")
        XCTAssertEqual(dig(event, "tags", "flavor") as? String, "free", "the scope still joins")
    }

    func testAHugeScopeFileIsIgnoredAndTheCrashStillArrives() throws {
        let (storage, logs, runID) = try crashedRun("scope")
        try inflate(storage.appendingPathComponent("runs/\(runID)/scope.json"))
        let started = Date()
        let relaunch = try runHarness(["--storage", storage.path], environment: ["VAKA_DEBUG": "1"], logDirectory: logs, timeout: 60)
        XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertTrue(relaunch.stderr.contains("scope.json is 10737"), relaunch.stderr)
        let event = try fatalEvent(storage)
        XCTAssertEqual(dig(event, "exception", "values", 0, "type") as? String, "SIGSEGV")
        XCTAssertNil(dig(event, "user", "id"), "the crashed run's scope was not read")
    }

    func testAHugeAnonIDFileIsReplaced() throws {
        let storage = dirs.make("anon")
        let logs = dirs.make("anon-logs")
        let first = try runHarness(["--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(first.outcome, "exit 0", first.stderr)
        let anon = storage.appendingPathComponent("anon_id")
        try inflate(anon)
        let started = Date()
        let second = try runHarness(["--storage", storage.path], logDirectory: logs, timeout: 60)
        XCTAssertEqual(second.outcome, "exit 0", second.stderr)
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        let size = (try FileManager.default.attributesOfItem(atPath: anon.path))[.size] as? Int
        XCTAssertEqual(size, 36, "a new anon id was written")
        let did = try XCTUnwrap(readOutbox(storage).flatMap(\.sessions).last?["did"] as? String)
        XCTAssertEqual(did, try String(contentsOf: anon, encoding: .utf8))
    }
}
