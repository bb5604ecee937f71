import XCTest
import VakaTestSupport
@testable import Vaka

/// The `Delivery` entry type: background thread, triggers, flush/close, outbox mode.
final class DeliveryTests: XCTestCase {
    let dirs = ScratchDirs()
    var server: TestHTTPServer!
    var deliveries: [Delivery] = []

    override func setUpWithError() throws { server = try TestHTTPServer() }

    override func tearDown() {
        for d in deliveries { d.close(timeout: 0) }
        server.stop()
        dirs.removeAll()
    }

    private func make(storage: URL, dsn: String?, flushInterval: TimeInterval = 3600, maxBatchSize: Int = 50,
                      timeout: TimeInterval = 2, clock: DeliveryClock = SystemDeliveryClock(), log: LogSink? = nil) throws -> Delivery {
        let config = Delivery.Configuration(storageDirectory: storage, dsn: try dsn.map { try DSN($0) },
                                            flushInterval: flushInterval, maxBatchSize: maxBatchSize,
                                            requestTimeout: timeout, log: log?.sink)
        let d = try Delivery(configuration: config, clock: clock)
        deliveries.append(d)
        return d
    }

    func testFlushSendsEverythingAndReturnsTrue() throws {
        let storage = dirs.make()
        let log = LogSink()
        let d = try make(storage: storage, dsn: server.dsn, log: log)
        for n in 0..<7 { try d.submit(eventEnvelope(n)) }
        XCTAssertTrue(d.flush(timeout: 20))
        XCTAssertEqual(Set(receivedEventIDs(server).compactMap { $0 }), Set((0..<7).map(eventID)))
        XCTAssertEqual(batchFiles(storage), [])
        XCTAssertTrue(d.close(timeout: 5))
        XCTAssertFalse(log.lines.joined(separator: "\n").contains("testkey"), "key never logged")
        XCTAssertTrue(log.lines.contains { $0.contains("http://***@127.0.0.1") }, "\(log.lines)")
    }

    /// A delivery made with `startWorker: false` (as `Vaka.start` makes it) sends nothing and leaves `pending/`
    /// alone until its thread starts: ``Delivery/startWorker()`` (the `vaka.start` thread's call) opens the
    /// queue there and sends what a previous run left; ``Delivery/close(timeout:)`` of one never started returns
    /// at once, keeping what was queued for the next launch.
    func testWorkerStartedLaterOpensTheQueueAndSendsWhatWasLeft() throws {
        let storage = dirs.make()
        let earlier = try make(storage: storage, dsn: "http://k@127.0.0.1:9/1", timeout: 1)
        try earlier.submit(eventEnvelope(0), durable: true)
        earlier.close(timeout: 0)
        XCTAssertEqual(batchFiles(storage).count, 1)

        let config = Delivery.Configuration(storageDirectory: storage, dsn: try DSN(server.dsn), flushInterval: 3600)
        let d = try Delivery(configuration: config, startWorker: false)
        deliveries.append(d)
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(server.requests.count, 0, "nothing sent before the worker starts")
        d.startWorker()
        d.startWorker()  // once only
        XCTAssertEqual(server.waitForRequests(1).count, 1)
        XCTAssertEqual(receivedEventIDs(server), [eventID(0)])
        XCTAssertTrue(d.close(timeout: 5))

        // Never started: the close does not wait for a thread (it would wait requestTimeout + 5 s for one).
        let other = dirs.make()
        let never = try Delivery(configuration: Delivery.Configuration(storageDirectory: other, dsn: try DSN(server.dsn),
                                                                       flushInterval: 3600, requestTimeout: 30),
                                 startWorker: false)
        XCTAssertFalse(FileManager.default.fileExists(atPath: other.appendingPathComponent("pending").path),
                       "pending/ is made by the worker or the first use, not by init")
        try never.submit(eventEnvelope(1))
        let t0 = Date()
        XCTAssertFalse(never.close(timeout: 0))
        XCTAssertLessThan(Date().timeIntervalSince(t0), 20, "close waited for a worker that never started")
        // Nor did the zero-timeout close start one (its flush did, which then raced the close for the envelope).
        XCTAssertFalse(never.workerStarted)
        XCTAssertEqual(batchFiles(other).count, 1, "kept for the next launch")
        XCTAssertEqual(server.requests.count, 1)
    }

    func testFlushIgnoresLimitsOnCategoriesItDoesNotSend() throws {
        // as Bugsink does on every answer
        for _ in 0..<20 { server.enqueue(.status(200, headers: ["X-Sentry-Rate-Limits": "86400:transaction;span:organization"])) }
        let d = try make(storage: dirs.make(), dsn: server.dsn, maxBatchSize: 2)
        for n in 0..<9 { try d.submit(eventEnvelope(n), durable: n % 2 == 0) }
        XCTAssertTrue(d.flush(timeout: 30))
        XCTAssertEqual(server.requests.count, 9)
    }

    func testFullBatchTriggersASendWithoutFlush() throws {
        let storage = dirs.make()
        let d = try make(storage: storage, dsn: server.dsn, flushInterval: 3600, maxBatchSize: 3)
        // Let the start-up pump finish first: run late (busy machine), it would seal a batch holding only the
        // first envelope, and the other two would then wait for the timer.
        XCTAssertTrue(d.flush(timeout: 10))
        for n in 0..<3 { try d.submit(eventEnvelope(n)) }
        let reqs = server.waitForRequests(3)
        XCTAssertEqual(reqs.count, 3, "maxBatchSize reached → sent without flush or timer")
    }

    func testFlushIntervalTriggersASend() throws {
        let d = try make(storage: dirs.make(), dsn: server.dsn, flushInterval: 0.2, maxBatchSize: 50)
        try d.submit(eventEnvelope(1))
        XCTAssertEqual(server.waitForRequests(1).count, 1, "sent by the flush-interval timer")
    }

    func testPendingFilesOfPreviousRunAreSentAtStart() throws {
        let storage = dirs.make()
        let previous = try PersistentQueue(storageDirectory: storage, maxBatchSize: 10)
        for n in 1...4 { try previous.enqueue(eventEnvelope(n), durable: true) }
        _ = try make(storage: storage, dsn: server.dsn)
        XCTAssertEqual(server.waitForRequests(4).count, 4, "sent at start without any call")
    }

    func testFlushFailsFastOn401AndFilesAreKeptForNextLaunch() throws {
        let storage = dirs.make()
        server.enqueue(.status(401))
        let d = try make(storage: storage, dsn: server.dsn)
        try d.submit(eventEnvelope(1))
        try d.submit(eventEnvelope(2))
        XCTAssertFalse(d.flush(timeout: 30))
        XCTAssertEqual(server.requests.count, 1)
        XCTAssertFalse(d.close(timeout: 30))
        // Both kept on disk. One file or two: the delivery thread's first pass (files of a previous run) may run
        // between the two submits and seal event 1 alone, then close writes event 2 to a file of its own.
        let kept = batchFiles(storage).flatMap {
            BatchFile.decode(try! Data(contentsOf: storage.appendingPathComponent("pending/\($0)"))).records
        }
        XCTAssertEqual(kept.compactMap { try? Envelope(data: $0).header.eventID }, [eventID(1), eventID(2)])
        // next launch sends them
        let d2 = try make(storage: storage, dsn: server.dsn)
        XCTAssertTrue(d2.flush(timeout: 20))
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(1), eventID(2)])
    }

    func testFlushReturnsFalseWhenBackoffOutlastsTheDeadlineAndCloseKeepsEverything() throws {
        let storage = dirs.make()
        server.enqueue(.status(500))
        let clock = ManualClock()
        let d = try make(storage: storage, dsn: server.dsn, clock: clock)
        try d.submit(eventEnvelope(1))
        XCTAssertFalse(d.flush(timeout: 3), "5 s backoff > 3 s deadline: returns without waiting it out")
        try d.submit(eventEnvelope(2))  // in memory only
        XCTAssertFalse(d.close(timeout: 0))
        let records = batchFiles(storage).flatMap {
            BatchFile.decode(try! Data(contentsOf: storage.appendingPathComponent("pending/\($0)"))).records
        }
        XCTAssertEqual(records.compactMap { try? Envelope(data: $0).header.eventID }, [eventID(1), eventID(2)],
                       "close persists what is still in memory")
        try d.submit(eventEnvelope(3))  // after close: written straight to disk
        XCTAssertEqual(batchFiles(storage).flatMap {
            BatchFile.decode(try! Data(contentsOf: storage.appendingPathComponent("pending/\($0)"))).records
        }.count, 3)
    }

    func testRetryAfterBackoffWhenClockMoves() throws {
        let storage = dirs.make()
        server.enqueue(.status(503))
        let clock = ManualClock()
        let d = try make(storage: storage, dsn: server.dsn, clock: clock)
        try d.submit(eventEnvelope(1))
        XCTAssertFalse(d.flush(timeout: 1))
        XCTAssertEqual(server.requests.count, 1)
        clock.advance(5)
        d.wake()
        XCTAssertTrue(d.flush(timeout: 20))
        XCTAssertEqual(server.requests.count, 2)
    }

    func testNeverAnsweringServerDoesNotHangFlushOrClose() throws {
        let storage = dirs.make()
        server.enqueue(.silent)
        let log = LogSink()
        let d = try make(storage: storage, dsn: server.dsn, timeout: 1, log: log)
        try d.submit(eventEnvelope(1))
        XCTAssertFalse(d.flush(timeout: 3))
        XCTAssertEqual(server.requests.count, 1)
        XCTAssertTrue(log.lines.contains { $0.contains("no answer") && $0.contains("curl 28") }, "\(log.lines)")
        XCTAssertFalse(d.close(timeout: 0))
        XCTAssertEqual(batchFiles(storage).count, 1)
    }

    func testOutboxModeWritesOneFilePerEnvelope() throws {
        let storage = dirs.make()
        let clock = ManualClock(Date(timeIntervalSince1970: 1_714_566_896.789))
        let d = try make(storage: storage, dsn: nil, clock: clock)
        try d.submit(eventEnvelope(1))
        clock.advance(1)
        try d.submit(sessionEnvelope(2))
        XCTAssertTrue(d.flush(timeout: 1))
        let outbox = Outbox(storageDirectory: storage)
        let files = outbox.list()
        XCTAssertEqual(files.count, 2)
        XCTAssertTrue(files[0].lastPathComponent.hasPrefix("20240501T123456.789Z-"), files[0].lastPathComponent)
        XCTAssertTrue(files[0].lastPathComponent.hasSuffix("-\(eventID(1)).envelope"), files[0].lastPathComponent)
        XCTAssertTrue(files[1].lastPathComponent.hasPrefix("20240501T123457.789Z-"))
        XCTAssertEqual(try outbox.read(files[0]), eventEnvelope(1))
        let attrs = try FileManager.default.attributesOfItem(atPath: files[0].path)
        XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let dirAttrs = try FileManager.default.attributesOfItem(atPath: outbox.directory.path)
        XCTAssertEqual((dirAttrs[.posixPermissions] as? NSNumber)?.intValue, 0o700)
        XCTAssertFalse(FileManager.default.fileExists(atPath: storage.appendingPathComponent("pending").path))
        XCTAssertEqual(server.requests.count, 0)
    }

    func testOutboxKeepsTheOrderOfEnvelopesWrittenInTheSameMillisecond() throws {
        let storage = dirs.make()
        let outbox = Outbox(storageDirectory: storage)
        let instant = Date(timeIntervalSince1970: 1_714_566_896.789)
        let ids = (0..<30).map { _ in UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }
        for id in ids {
            try outbox.write(Envelope(header: .init(eventID: id), items: []), at: instant)
        }
        XCTAssertEqual(try outbox.list().map { try outbox.read($0).header.eventID }, ids,
                       "list() must return envelopes in the order they were written")
    }

    func testConcurrentSubmitsAreAllDelivered() throws {
        let storage = dirs.make()
        let d = try make(storage: storage, dsn: server.dsn, maxBatchSize: 5)
        DispatchQueue.concurrentPerform(iterations: 40) { n in
            try! d.submit(eventEnvelope(n), durable: n % 3 == 0)
        }
        XCTAssertTrue(d.flush(timeout: 30))
        XCTAssertEqual(Set(receivedEventIDs(server).compactMap { $0 }), Set((0..<40).map(eventID)))
        XCTAssertEqual(server.requests.count, 40, "no duplicates when nothing failed")
    }
}
