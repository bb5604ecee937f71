import XCTest
import VakaTestSupport
@testable import Vaka

final class QueueTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func mode(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? NSNumber)?.intValue ?? -1
    }

    func testBatchesInMemoryUntilSealedThenWritesPrivateFiles() throws {
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 3)
        XCTAssertEqual(mode(q.directory.path), 0o700)
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(eventEnvelope(2))
        XCTAssertEqual(batchFiles(storage), [], "not written before a send/seal")
        XCTAssertFalse(q.isEmpty)
        try q.seal()
        let files = batchFiles(storage)
        XCTAssertEqual(files.count, 1)
        XCTAssertEqual(mode(q.directory.appendingPathComponent(files[0]).path), 0o600)
        let refs = q.sealedBatches()
        XCTAssertEqual(refs.map(\.name), files)
        XCTAssertEqual(q.records(of: refs[0]), [eventEnvelope(1).serialized(), eventEnvelope(2).serialized()])
        // no temporary files left behind
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: q.directory.path).count, 1)
    }

    func testMaxBatchSizeSealsAndReportsFull() throws {
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 2)
        XCTAssertFalse(try q.enqueue(eventEnvelope(1)))
        XCTAssertTrue(try q.enqueue(eventEnvelope(2)))
        XCTAssertFalse(try q.enqueue(eventEnvelope(3)))
        XCTAssertEqual(q.sealedBatches().count, 1)
        XCTAssertEqual(q.records(of: q.sealedBatches()[0])?.count, 2)
    }

    func testDurableEnqueueWritesOpenBatchWithoutSealing() throws {
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 10)
        try q.enqueue(eventEnvelope(1), durable: true)
        try q.enqueue(eventEnvelope(2), durable: true)
        let files = batchFiles(storage)
        XCTAssertEqual(files.count, 1, "durable envelopes share the open batch file")
        XCTAssertEqual(q.sealedBatches(), [], "the open batch is not handed to the uploader until sealed")
        let data = try Data(contentsOf: q.directory.appendingPathComponent(files[0]))
        XCTAssertEqual(BatchFile.decode(data).records.count, 2)
    }

    func testPreviousRunFilesArePickedUpAndNamesKeepAgeOrder() throws {
        let storage = dirs.make()
        do {
            let previous = try PersistentQueue(storageDirectory: storage, maxBatchSize: 1)
            try previous.enqueue(eventEnvelope(1))
            try previous.enqueue(eventEnvelope(2))
            try previous.enqueue(eventEnvelope(3), durable: true)
            // the process "dies" here: no close
        }
        // A temporary file of a write killed two hours ago, and one of a write in progress in another process
        // sharing the storage directory (modified now): only the first is removed, so the second's rename works.
        let leftover = storage.appendingPathComponent("pending/.tmp-leftover").path
        let inProgress = storage.appendingPathComponent("pending/.tmp-in-progress").path
        _ = FileManager.default.createFile(atPath: leftover, contents: Data("x".utf8))
        _ = FileManager.default.createFile(atPath: inProgress, contents: Data("y".utf8))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -2 * 3600)], ofItemAtPath: leftover)
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 1)
        XCTAssertEqual(q.sealedBatches().count, 3)
        XCTAssertFalse(FileManager.default.fileExists(atPath: leftover))
        XCTAssertTrue(FileManager.default.fileExists(atPath: inProgress), "another process's write in progress was deleted")
        XCTAssertEqual(rename(inProgress, storage.appendingPathComponent("pending/renamed").path), 0)
        try q.enqueue(eventEnvelope(4))
        let ids = q.sealedBatches().map { q.records(of: $0).flatMap { try? Envelope(data: $0[0]) }?.header.eventID }
        XCTAssertEqual(ids, [eventID(1), eventID(2), eventID(3), eventID(4)])
    }

    /// The outbox's first write removes the temporary file of a write killed two hours ago and keeps one of a
    /// write in progress (modified now), as the queue's load does in `pending/`.
    func testOutboxFirstWriteRemovesOnlyStaleTemporaryFiles() throws {
        let storage = dirs.make()
        let outboxDirectory = storage.appendingPathComponent("outbox").path
        try FileManager.default.createDirectory(atPath: outboxDirectory, withIntermediateDirectories: true)
        let leftover = outboxDirectory + "/.tmp-leftover", inProgress = outboxDirectory + "/.tmp-in-progress"
        _ = FileManager.default.createFile(atPath: leftover, contents: Data("x".utf8))
        _ = FileManager.default.createFile(atPath: inProgress, contents: Data("y".utf8))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -2 * 3600)], ofItemAtPath: leftover)
        let outbox = Outbox(storageDirectory: storage)
        try outbox.write(eventEnvelope(1))
        XCTAssertFalse(FileManager.default.fileExists(atPath: leftover))
        XCTAssertTrue(FileManager.default.fileExists(atPath: inProgress))
        XCTAssertEqual(outbox.list().count, 1)
    }

    func testCapDropsOldestFilesAndCounts() throws {
        let storage = dirs.make()
        let log = LogSink()
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 1, log: log.sink)  // default cap 200
        XCTAssertEqual(q.settings.maxBatchFiles, 200)
        for n in 0..<203 { try q.enqueue(eventEnvelope(n)) }
        XCTAssertEqual(batchFiles(storage).count, 200)
        XCTAssertEqual(q.stats.droppedBatchFiles, 3)
        XCTAssertEqual(q.stats.droppedEnvelopes, 3)
        let first = q.sealedBatches().first.flatMap { q.records(of: $0) }.flatMap { try? Envelope(data: $0[0]) }
        XCTAssertEqual(first?.header.eventID, eventID(3), "the three oldest were dropped")
        XCTAssertTrue(log.lines.contains { $0.contains("cap 200") && $0.contains("dropped 1 oldest") }, "\(log.lines.suffix(3))")
    }

    func testCommitRewritesOrDeletes() throws {
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 3)
        for n in 1...3 { try q.enqueue(eventEnvelope(n)) }
        let ref = q.sealedBatches()[0]
        XCTAssertTrue(try q.commit(ref, records: [eventEnvelope(3).serialized()]))
        XCTAssertEqual(q.records(of: ref), [eventEnvelope(3).serialized()])
        XCTAssertTrue(try q.commit(ref, records: []))
        XCTAssertEqual(batchFiles(storage), [])
        XCTAssertTrue(q.isEmpty)
        XCTAssertFalse(try q.commit(ref, records: [Data()]), "a vanished file is not recreated")
    }

    func testDamagedFileKeepsIntactRecords() throws {
        let storage = dirs.make()
        let q0 = try PersistentQueue(storageDirectory: storage, maxBatchSize: 2)
        try q0.enqueue(eventEnvelope(1)); try q0.enqueue(eventEnvelope(2))
        let path = q0.directory.appendingPathComponent(batchFiles(storage)[0])
        let data = try Data(contentsOf: path)
        try data.prefix(data.count - 5).write(to: path)
        let q = try PersistentQueue(storageDirectory: storage)
        XCTAssertEqual(q.records(of: q.sealedBatches()[0]), [eventEnvelope(1).serialized()])
        XCTAssertEqual(q.stats.damagedFiles, 1)
    }
}
