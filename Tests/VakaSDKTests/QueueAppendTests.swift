import XCTest
import VakaTestSupport
@testable import Vaka

/// Durable envelopes are appended to the open batch's file; a tail torn by process death loses only itself.
final class QueueAppendTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func envelope(_ n: Int) -> Envelope {
        Envelope.event(id: String(format: "%032x", n), payload: Data(#"{"event_id":"\#(String(format: "%032x", n))"}"#.utf8))
    }

    func testDurableEnqueuesAppendAndATornTailKeepsTheRecordsBeforeIt() throws {
        let storage = dirs.make("append")
        let queue = try PersistentQueue(storageDirectory: storage, maxBatchSize: 50)
        for n in 0..<5 { try queue.enqueue(envelope(n), durable: true) }
        let pending = storage.appendingPathComponent("pending")
        let names = try FileManager.default.contentsOfDirectory(atPath: pending.path).filter { $0.hasSuffix(".batch") }
        XCTAssertEqual(names.count, 1)
        let file = pending.appendingPathComponent(names[0])
        let decoded = BatchFile.decode(try Data(contentsOf: file))
        XCTAssertFalse(decoded.damaged)
        XCTAssertEqual(decoded.records, (0..<5).map { envelope($0).serialized() })
        XCTAssertEqual((try FileManager.default.attributesOfItem(atPath: file.path))[.posixPermissions] as? Int, 0o600)

        // A process killed in the middle of an append leaves a short record at the end.
        let torn = BatchFile.encodeRecords([envelope(5).serialized()][...]).prefix(20)
        let handle = try FileHandle(forWritingTo: file)
        handle.seekToEndOfFile()
        handle.write(torn)
        try handle.close()
        let next = try PersistentQueue(storageDirectory: storage, maxBatchSize: 50)
        let ref = try XCTUnwrap(next.sealedBatches().first)
        XCTAssertEqual(next.records(of: ref), (0..<5).map { envelope($0).serialized() })
        XCTAssertEqual(next.stats.damagedFiles, 1)
    }
}
