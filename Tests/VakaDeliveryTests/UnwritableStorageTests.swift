import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// Unwritable storage at the delivery level (no root needed; StorageFailureTests in VakaSDKTests does the same
/// with real full/read-only file systems and RLIMIT_FSIZE): a `pending/` that cannot be created (a regular file
/// is in its place, so every batch write fails with ENOTDIR), the in-memory bound, and a batch-file rewrite
/// that fails in the middle of a pump. Against the loopback TestHTTPServer.
final class UnwritableStorageTests: LoopbackServerTestCase {

    /// A storage directory whose `pending` is a regular file: nothing can be written under it.
    private func unwritableStorage() throws -> URL {
        let storage = dirs.make()
        try Data("not a directory".utf8).write(to: storage.appendingPathComponent("pending"))
        return storage
    }

    private func make(storage: URL, clock: DeliveryClock = SystemDeliveryClock(), maxMemoryBytes: Int? = nil) throws -> Delivery {
        var config = Delivery.Configuration(storageDirectory: storage, dsn: try DSN(server.dsn), flushInterval: 3600,
                                            requestTimeout: 2, log: log.sink)
        if let maxMemoryBytes { config.maxMemoryBytes = maxMemoryBytes }
        let d = try Delivery(configuration: config, clock: clock)
        deliveries.append(d)
        return d
    }

    func testUnwritablePendingStillDeliversDurableEnvelopesAndFlushIsTrue() throws {
        let d = try make(storage: try unwritableStorage())
        for n in 0..<3 {
            XCTAssertThrowsError(try d.submit(eventEnvelope(n), durable: true), "not persisted: the caller is told")
        }
        XCTAssertTrue(d.flush(timeout: 20), "all sent from memory: \(log.lines)")
        XCTAssertEqual(Set(receivedEventIDs(server).compactMap { $0 }), Set((0..<3).map(eventID)))
        XCTAssertTrue(log.lines.contains { $0.contains("envelope(s) in memory") }, "\(log.lines)")
        XCTAssertEqual(d.queue?.stats.droppedUnwritable, 0)
        XCTAssertTrue(d.close(timeout: 5))
    }

    func testMemoryBoundDropsTheOldestAndFlushReportsTheLossOnce() throws {
        let clock = ManualClock()
        let size = eventEnvelope(0).serialized().count
        let d = try make(storage: try unwritableStorage(), clock: clock, maxMemoryBytes: 2 * size + size / 2)
        server.enqueue(.status(503))
        XCTAssertThrowsError(try d.submit(eventEnvelope(1), durable: true))
        XCTAssertFalse(d.flush(timeout: 2), "503: 5 s backoff beyond the deadline")
        for n in 2...6 { XCTAssertThrowsError(try d.submit(eventEnvelope(n), durable: true)) }
        XCTAssertEqual(d.queue?.memoryCount, 2, "at most 2.5 envelopes' bytes are held: the 2 newest")
        XCTAssertEqual(d.queue?.stats.droppedUnwritable, 4)
        XCTAssertTrue(log.lines.contains { $0.contains("dropped the") && $0.contains("oldest envelope(s)") }, "\(log.lines)")
        XCTAssertFalse(d.flush(timeout: 1), "envelopes were neither written nor sent")
        clock.advance(5)
        d.wake()
        XCTAssertTrue(d.flush(timeout: 20), "the rest is sent; the loss was reported by the previous flush")
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(5), eventID(6)])
    }

    func testCloseCountsWhatIsStillOnlyInMemoryAsLost() throws {
        server.enqueue(.status(500))
        let clock = ManualClock()
        let d = try make(storage: try unwritableStorage(), clock: clock)
        XCTAssertThrowsError(try d.submit(eventEnvelope(1), durable: true))
        XCTAssertFalse(d.flush(timeout: 2))
        XCTAssertFalse(d.close(timeout: 0))
        XCTAssertEqual(d.queue?.stats.droppedUnwritable, 1)
        XCTAssertTrue(log.lines.contains { $0.contains("held in memory are lost") }, "\(log.lines)")
    }

    func testFailedRewriteOfABatchFileKeepsTheRestInMemoryAndThePumpGoesOn() throws {
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, log: log.sink)
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(eventEnvelope(2))
        try q.enqueue(eventEnvelope(3))
        try q.seal()
        let name = try XCTUnwrap(batchFiles(storage).first)
        let path = storage.appendingPathComponent("pending/\(name)").path
        let transport = HookTransport(CurlTransport(timeout: 2))
        var swapped = false
        transport.beforeSend = {
            // After the file was read: a non-empty directory in its place makes every rewrite's rename fail.
            guard !swapped else { return }
            swapped = true
            unlink(path)
            mkdir(path, 0o700)
            _ = FileManager.default.createFile(atPath: path + "/x", contents: Data())
        }
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: transport, clock: ManualClock(),
                         requestTimeout: 2, log: log.sink)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(2), eventID(3)], "each sent once, in one pump")
        XCTAssertTrue(q.isEmpty)
        XCTAssertTrue(log.lines.contains { $0.contains("kept in memory") }, "\(log.lines)")
    }
}
