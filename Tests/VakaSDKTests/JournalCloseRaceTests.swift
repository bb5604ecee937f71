import Foundation
import Synchronization
import XCTest
import VakaTestSupport
@testable import Vaka

/// Capturing threads racing the end of a run: an event whose capture was accepted (it logged "captured ...
/// as <id>") is never lost, even when its journal append lands while `end` drains the journal.
final class JournalCloseRaceTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// 20 rounds: 4 threads capture 200 KB messages (encoding one takes long enough for `end` to drain the
    /// journal meanwhile) in a tight loop while the main thread ends the client. Every event id the client
    /// logged as captured is in the outbox afterwards.
    func testCapturesRacingEndAreNeverLost() throws {
        var lost: [String] = []
        var accepted = 0
        for round in 0..<20 {
            let storage = dirs.make("race-\(round)")
            let captured = Mutex<[String]>([])
            let log: @Sendable (String) -> Void = { line in
                guard line.hasPrefix("captured "), let id = line.split(separator: " ").last else { return }
                captured.withLock { $0.append(String(id)) }
            }
            let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                    runID: "R-\(UUID().uuidString)", dsn: nil, log: log)
            client.begin()
            let stop = Atomic<Bool>(false)
            let group = DispatchGroup()
            for t in 0..<4 {
                group.enter()
                Thread.detachNewThread {
                    var i = 0
                    while !stop.load(ordering: .relaxed) {
                        client.capture(message: "t\(t) event \(i) " + String(repeating: "x", count: 200_000), level: .info)
                        i += 1
                    }
                    group.leave()
                }
            }
            usleep(UInt32(2_000 + round * 500))
            client.end(timeout: 5)
            stop.store(true, ordering: .relaxed)
            XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
            let ids = Set(try readOutbox(storage).flatMap(\.events).compactMap { $0["event_id"] as? String })
            let logged = captured.withLock { $0 }
            accepted += logged.count
            lost += logged.filter { !ids.contains($0) }
        }
        XCTAssertGreaterThan(accepted, 0)
        XCTAssertEqual(lost.count, 0, "\(lost.count) of \(accepted) accepted events lost, e.g. \(lost.prefix(3))")
    }

    /// A burst of 5,000 captures (most go to the spill file: the event ring holds a few hundred) and an
    /// immediate end, the server unreachable: every event is queued in `pending/` (the end drains the journal
    /// completely, not one pass's worth, before the run directory and its journal go).
    func testBurstBiggerThanOnePassIsDrainedAtEnd() throws {
        let storage = dirs.make("burst")
        let dsn = "http://key@127.0.0.1:9/1"
        let client = try Client(options: Vaka.Options(dsn: dsn, sessionTracking: false, storageDirectory: storage),
                                storage: storage, runID: "B-\(UUID().uuidString)", dsn: try DSN(dsn), log: nil)
        client.begin()
        for i in 0..<5_000 { client.capture(message: "burst \(i)", level: .info, eventID: String(format: "%032x", i + 1)) }
        client.end(timeout: 0)
        // Every batch file end left in pending/ (the open one included), read as the next launch would.
        let queue = try PersistentQueue(storageDirectory: storage)
        let ids = queue.sealedBatches().flatMap { queue.records(of: $0) ?? [] }.compactMap { data in
            let header = data.prefix { $0 != 0x0A }
            return (try? JSONSerialization.jsonObject(with: header) as? [String: Any])?["event_id"] as? String
        }
        let missing = Set((0..<5_000).map { String(format: "%032x", $0 + 1) }).subtracting(ids)
        XCTAssertEqual(ids.count, 5_000, "events queued")
        XCTAssertEqual(missing.count, 0, "events lost, e.g. \(missing.sorted().prefix(3))")
    }
}

/// Hostile sizes through the journal: one huge log among ordinary ones.
final class JournalHugeInputTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// 20 ordinary logs around one 2 MiB log (over the 1 MiB a log envelope may have): the ordinary logs are
    /// all delivered; the huge one does not take its batch down with it.
    func testOneHugeLogDoesNotLoseItsBatch() throws {
        let storage = dirs.make("huge-log")
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: "H-\(UUID().uuidString)", dsn: nil, log: nil)
        client.begin()
        client.setUp(through: .journal)  // made by start's background part, or now
        let journal = try XCTUnwrap(client.journal)
        for i in 0..<10 { XCTAssertNotNil(journal.append(.log, level: LogLevel.info.rawValue, body: "before \(i)")) }
        XCTAssertNotNil(journal.append(.log, level: LogLevel.info.rawValue, body: String(repeating: "h", count: 2 << 20)))
        for i in 0..<10 { XCTAssertNotNil(journal.append(.log, level: LogLevel.info.rawValue, body: "after \(i)")) }
        client.end(timeout: 5)
        let bodies = try readOutbox(storage).flatMap(\.items).filter { $0.type == "log" }
            .flatMap { ($0.payload["items"] as? [[String: Any]]) ?? [] }.compactMap { $0["body"] as? String }
        let ordinary = bodies.filter { !$0.hasPrefix("hh") }
        XCTAssertEqual(ordinary, (0..<10).map { "before \($0)" } + (0..<10).map { "after \($0)" })
    }
}

/// A `fork()`ed child of a started run that ends Vaka (its `atexit` hook runs `Vaka.close`): the mover thread
/// and the delivery thread did not survive the fork.
final class JournalForkChildTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// The child adds a breadcrumb, captures a message and ends the client: it exits within 20 s (it used to
    /// wait forever for its copy of the parent's mover thread), and the parent's run directory and journal
    /// are still there for the parent.
    func testForkChildEndingTheRunExitsAndLeavesTheParentsJournal() throws {
        let storage = dirs.make("fork")
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: "F-\(UUID().uuidString)", dsn: nil, log: nil)
        client.begin()
        client.setUp(through: .journal)  // made by start's background part, or now
        let journal = try XCTUnwrap(client.journal)
        client.addBreadcrumb(category: "parent", message: "before fork")
        let pid = fork()
        if pid == 0 {
            alarm(30)
            client.addBreadcrumb(category: "child", message: "in child")
            client.capture(message: "from the child", level: .info)
            client.end(timeout: 0)
            _exit(0)
        }
        XCTAssertGreaterThan(pid, 0)
        XCTAssertTrue(waitForForkedChild(pid, seconds: 20, interval: 100_000).exited, "the fork child did not exit within 20 s")
        XCTAssertTrue(FileManager.default.fileExists(atPath: journal.url.path), "the child removed the parent's journal")
        XCTAssertNotNil(client.journal?.append(.breadcrumb, level: 9, body: "parent goes on"))
        client.end(timeout: 0)
    }
}

/// Odd journal sizes: every one opens a journal within the limits (16 KiB...64 MiB, whole pages).
final class JournalOddSizeTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    func testOddSizesAreClamped() throws {
        let dir = dirs.make("sizes")
        for (i, size) in [Int.min, -1, 0, 1, 4095, Int(Int32.max), Int.max].enumerated() {
            let journal = try Journal(path: dir.appendingPathComponent("j\(i)"), size: size)
            let bytes = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: journal.url.path)[.size] as? Int)
            XCTAssertTrue((16 << 10 ... 64 << 20).contains(bytes) && bytes % 4096 == 0, "size \(size): file of \(bytes) bytes")
            XCTAssertNotNil(journal.append(.log, level: 9, body: "ok"), "size \(size)")
            journal.close()
            XCTAssertEqual(try Journal.read(journal.url).records.map(\.text), ["ok"])
        }
    }
}
