import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka

/// The Swift face of the journal (`Journal`): records and typed attributes round-trip through the file, the
/// mover's walk and consume, the breadcrumb snapshot, the write(2) fallback, close.
final class JournalTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    func testRecordsAndTypedAttributesRoundTripThroughTheFile() throws {
        let url = dirs.make("journal").appendingPathComponent("journal")
        let journal = try Journal(path: url)
        XCTAssertTrue(journal.isMapped)
        XCTAssertEqual(journal.mmapError, 0)
        let attributes = [Journal.Attribute(key: "type", value: "navigation", meta: true),
                          Journal.Attribute(key: "count", value: .integer(-42)),
                          Journal.Attribute(key: "ratio", value: .double(0.25)),
                          Journal.Attribute(key: "ok", value: .boolean(true)),
                          Journal.Attribute(key: "ключ", value: .string("значение ✓"))]
        let s1 = journal.append(.breadcrumb, level: 9, timeNs: 1_700_000_000_500_000_000, category: "ui",
                                body: "tapped ✓", attributes: attributes)
        let s2 = journal.append(.event, level: 17, bodyBytes: Data("{\"event_id\":\"e\"}".utf8),
                                attributes: [Journal.Attribute(key: "event_id", value: "e", meta: true)])
        let s3 = journal.append(.log, level: 13, body: "")
        XCTAssertEqual([s1, s2, s3], [1, 2, 3])
        XCTAssertEqual(journal.lastSeq, 3)
        let (records, skipped) = try Journal.read(url)
        XCTAssertEqual(skipped, 0)
        XCTAssertEqual(records.map(\.seq), [1, 2, 3])
        XCTAssertEqual(records[0], Journal.Record(seq: 1, timeNs: 1_700_000_000_500_000_000, kind: .breadcrumb,
                                                  level: 9, category: "ui", body: Array("tapped ✓".utf8),
                                                  attributes: attributes, consumed: false))
        XCTAssertEqual(records[0].timestamp, 1_700_000_000.5, accuracy: 1e-6)
        XCTAssertEqual(records[1].kind, .event)
        XCTAssertEqual(records[1].text, "{\"event_id\":\"e\"}")
        XCTAssertEqual(records[1].attributes, [Journal.Attribute(key: "event_id", value: "e", meta: true)])
        XCTAssertEqual(records[2].kind, .log)
        XCTAssertEqual(records[2].body, [])
        XCTAssertGreaterThan(records[2].timeNs, 1_600_000_000_000_000_000, "time 0 means now")
        journal.close()
    }

    func testMoverWalkConsumeAndBreadcrumbSnapshot() throws {
        let url = dirs.make("journal").appendingPathComponent("journal")
        let journal = try Journal(path: url, size: 16 * 1024)
        XCTAssertNil(journal.next(.event, after: nil))
        for i in 0 ..< 200 { journal.append(.event, level: 0, body: "event \(i) " + String(repeating: "x", count: 100)) }
        for i in 0 ..< 500 { journal.append(.breadcrumb, level: 9, category: "c", body: "crumb \(i)") }
        XCTAssertGreaterThan(journal.fillPermille(.event), 900, "200 events fill the 4.5 KiB event ring and spill")
        var seen: [String] = []
        var last: Journal.Record?
        while let r = journal.next(.event, after: last) {
            seen.append(String(r.text.split(separator: " ")[1]))
            last = r
            if seen.count == 50 { journal.consume(through: r) }
        }
        XCTAssertEqual(seen, (0 ..< 200).map(String.init))
        XCTAssertEqual(journal.next(.event, after: nil).map { String($0.text.split(separator: " ")[1]) }, "50",
                       "after consuming 50 the walk starts at the 51st")
        let consumed = try Journal.read(url).records.filter { $0.kind == .event && $0.consumed }.count
        XCTAssertEqual(consumed, 50)
        journal.consume(through: last!)
        XCTAssertNil(journal.next(.event, after: nil))
        XCTAssertEqual(journal.fillPermille(.event), 0)

        let crumbs = journal.breadcrumbs()
        XCTAssertEqual(crumbs.last?.text, "crumb 499")
        XCTAssertGreaterThan(crumbs.count, 50)
        XCTAssertEqual(crumbs.map(\.seq), crumbs.map(\.seq).sorted())
        let first = Int(crumbs[0].text.split(separator: " ")[1])!
        XCTAssertEqual(crumbs.map(\.text), (first ..< 500).map { "crumb \($0)" }, "an unbroken run of the newest")
        journal.close()
    }

    func testFallbackWritesOnSyncAndCloseIsIdempotent() throws {
        let url = dirs.make("journal").appendingPathComponent("journal")
        let failures = Locked<[Int32]>([])
        let journal = try Journal(path: url, allowMmap: false, failed: { code in failures.withLock { $0.append(code) } })
        XCTAssertFalse(journal.isMapped)
        XCTAssertNotEqual(journal.mmapError, 0)
        journal.append(.log, level: 9, body: "kept after sync")
        XCTAssertEqual(try Journal.read(url).records.count, 0, "nothing on disk before sync")
        journal.sync()
        XCTAssertEqual(try Journal.read(url).records.map(\.text), ["kept after sync"])
        journal.append(.log, level: 9, body: "kept by close")
        journal.close()
        journal.close()
        XCTAssertEqual(try Journal.read(url).records.map(\.text), ["kept after sync", "kept by close"])
        XCTAssertNil(journal.append(.log, level: 9, body: "after close"))
        XCTAssertEqual(failures.withLock { $0 }, [EBADF])
        XCTAssertEqual(journal.lastSeq, 0)
        XCTAssertEqual(journal.breadcrumbs(), [])
    }

    func testOpenAndReadErrors() throws {
        let dir = dirs.make("journal")
        XCTAssertThrowsError(try Journal(path: dir.appendingPathComponent("missing/journal"))) { error in
            XCTAssertEqual(error as? JournalError, JournalError(code: ENOENT, operation: "open"))
        }
        XCTAssertThrowsError(try Journal.read(dir.appendingPathComponent("none"))) { error in
            XCTAssertEqual((error as? JournalError)?.code, ENOENT)
        }
        let junk = dir.appendingPathComponent("junk")
        try Data(repeating: 0x41, count: 8192).write(to: junk)
        XCTAssertThrowsError(try Journal.read(junk)) { error in
            XCTAssertEqual((error as? JournalError)?.code, EBADMSG)
        }
    }
}
