import XCTest
import VakaTestSupport
@testable import Vaka

/// Every status path of the uploader against a real loopback HTTP server, with a hand-moved clock.
final class UploaderTests: XCTestCase {
    let dirs = ScratchDirs()
    var server: TestHTTPServer!
    var clock: ManualClock!
    var log: LogSink!

    override func setUpWithError() throws {
        server = try TestHTTPServer()
        clock = ManualClock()
        log = LogSink()
    }

    override func tearDown() {
        server.stop()
        dirs.removeAll()
    }

    private func makeUploader(storage: URL, maxBatchSize: Int = 50, timeout: TimeInterval = 2) throws -> (PersistentQueue, Uploader) {
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: maxBatchSize, log: log.sink)
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: CurlTransport(timeout: timeout),
                         clock: clock, requestTimeout: timeout, log: log.sink)
        return (q, u)
    }

    func test2xxSendsGzipEnvelopeWithHeadersAndDeletesBatch() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1, extra: [.session(Data(#"{"status":"crashed"}"#.utf8))]))
        try q.enqueue(eventEnvelope(2))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(batchFiles(storage), [])
        XCTAssertTrue(q.isEmpty)
        let reqs = server.requests
        XCTAssertEqual(reqs.count, 2, "one POST per envelope")
        let r = reqs[0]
        XCTAssertEqual(r.method, "POST")
        XCTAssertEqual(r.path, "/api/42/envelope/")
        XCTAssertEqual(r.headers["content-type"], "application/x-sentry-envelope")
        XCTAssertEqual(r.headers["content-encoding"], "gzip")
        XCTAssertEqual(r.headers["x-sentry-auth"], "Sentry sentry_version=7, sentry_key=testkey, sentry_client=vaka.swift/0.1.0")
        let env = try XCTUnwrap(receivedEnvelope(r))
        XCTAssertEqual(env.header.eventID, eventID(1))
        XCTAssertEqual(env.header.sentAt, Date(timeIntervalSince1970: clock.now.timeIntervalSince1970), "sent_at is the send time")
        XCTAssertEqual(env.items.map(\.type), [.event, .session])
        XCTAssertEqual(env.items, eventEnvelope(1, extra: [.session(Data(#"{"status":"crashed"}"#.utf8))]).items)
        XCTAssertEqual(receivedEnvelope(reqs[1])?.header.eventID, eventID(2))
        XCTAssertEqual(u.stats.sent, 2)
        XCTAssertFalse(log.lines.joined().contains("testkey"), "the key is never logged")
    }

    /// Without zlib (a library name that cannot be opened) the envelope is not lost: it goes uncompressed,
    /// without Content-Encoding, after one debug line (not one per envelope).
    func testWithoutZlibEnvelopesGoUncompressedAfterOneDebugLine() throws {
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, log: log.sink)
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: CurlTransport(timeout: 2), clock: clock,
                         requestTimeout: 2, log: log.sink, zlibLibrary: "libz-vaka-missing.so.1")
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(eventEnvelope(2))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertTrue(q.isEmpty)
        XCTAssertEqual(u.stats.sent, 2, log.lines.joined(separator: "\n"))
        let reqs = server.requests
        XCTAssertEqual(reqs.count, 2)
        for (n, r) in reqs.enumerated() {
            XCTAssertNil(r.headers["content-encoding"], "no Content-Encoding for an uncompressed body")
            XCTAssertEqual(r.headers["content-type"], "application/x-sentry-envelope")
            XCTAssertNotEqual(Array(r.body.prefix(2)), [0x1F, 0x8B], "not gzip")
            let env = try Envelope(data: r.body)
            XCTAssertEqual(env.header.eventID, eventID(n + 1))
            XCTAssertEqual(env.items, eventEnvelope(n + 1).items)
        }
        let said = log.lines.filter { $0.contains("envelopes are sent uncompressed") }
        XCTAssertEqual(said.count, 1, log.lines.joined(separator: "\n"))
        XCTAssertTrue(said.first?.contains("libz-vaka-missing.so.1") == true, said.first ?? "")
        XCTAssertTrue(log.lines.contains { $0.contains("uncompressed)") }, "the send line says the body was uncompressed")
    }

    func test5xxBacksOffExponentiallyTo300AndResetsOnSuccess() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        var delays: [TimeInterval] = []
        for _ in 0..<8 {
            server.enqueue(.status(500))
            let before = server.requests.count
            guard case .waiting(let until) = u.pump() else { return XCTFail("expected waiting") }
            XCTAssertEqual(server.requests.count, before + 1)
            delays.append(until.timeIntervalSince(clock.now))
            // just before the deadline nothing is sent
            clock.set(until - 0.5)
            XCTAssertEqual(u.pump(), .waiting(until: until))
            XCTAssertEqual(server.requests.count, before + 1)
            clock.set(until)
        }
        XCTAssertEqual(delays, [5, 10, 20, 40, 80, 160, 300, 300])
        XCTAssertEqual(batchFiles(storage).count, 1, "kept while failing")
        server.enqueue(.status(503))
        guard case .waiting = u.pump() else { return XCTFail() }
        clock.advance(300)
        XCTAssertEqual(u.pump(), .idle)  // default reply 200
        XCTAssertEqual(batchFiles(storage), [])
        XCTAssertEqual(u.backoff.failures, 0)
        try q.enqueue(eventEnvelope(2))
        server.enqueue(.status(502))
        guard case .waiting(let until) = u.pump() else { return XCTFail() }
        XCTAssertEqual(until.timeIntervalSince(clock.now), 5, "backoff restarts at 5 s after a success")
    }

    func test503RetryAfterLengthensBackoff() throws {
        let (q, u) = try makeUploader(storage: dirs.make())
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(503, headers: ["Retry-After": "42"]))
        XCTAssertEqual(u.pump(), .waiting(until: clock.now + 42))
    }

    func test429RetryAfterSecondsHoldsEverything() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(sessionEnvelope(2))
        server.enqueue(.status(429, headers: ["Retry-After": "120"]))
        let t0 = clock.now
        XCTAssertEqual(u.pump(), .waiting(until: t0 + 120))
        XCTAssertEqual(server.requests.count, 1, "the session waits too: Retry-After limits all categories")
        clock.set(t0 + 119)
        XCTAssertEqual(u.pump(), .waiting(until: t0 + 120))
        XCTAssertEqual(server.requests.count, 1)
        clock.set(t0 + 120)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(1), nil])
        XCTAssertEqual(batchFiles(storage), [])
    }

    func test429RetryAfterHTTPDate() throws {
        let (q, u) = try makeUploader(storage: dirs.make())
        try q.enqueue(eventEnvelope(1))
        clock.set(Date(timeIntervalSince1970: 1_700_000_000))  // Tue, 14 Nov 2023 22:13:20 GMT
        server.enqueue(.status(429, headers: ["Retry-After": "Tue, 14 Nov 2023 22:16:40 GMT"]))
        XCTAssertEqual(u.pump(), .waiting(until: Date(timeIntervalSince1970: 1_700_000_200)))
    }

    func test429WithoutHeadersWaits60s() throws {
        let (q, u) = try makeUploader(storage: dirs.make())
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(429))
        XCTAssertEqual(u.pump(), .waiting(until: clock.now + 60))
    }

    func testRateLimitedCategoryIsHeldWhileOthersFlow() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(sessionEnvelope(2))
        try q.enqueue(eventEnvelope(3))
        let t0 = clock.now
        server.enqueue(.status(429, headers: ["X-Sentry-Rate-Limits": "60:error:project:quota, 5:transaction:org", "Retry-After": "999"]))
        XCTAssertEqual(u.pump(), .held(until: t0 + 60), "held until the error limit ends (the transaction limit holds nothing)")
        // event 1 refused, session 2 sent, event 3 held without a request
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), nil])
        XCTAssertEqual(q.records(of: q.sealedBatches()[0])?.compactMap { try? Envelope(data: $0).header.eventID }, [eventID(1), eventID(3)])
        clock.set(t0 + 30)
        XCTAssertEqual(u.pump(), .held(until: t0 + 60))
        XCTAssertEqual(server.requests.count, 2)
        clock.set(t0 + 60)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), nil, eventID(1), eventID(3)])
        XCTAssertEqual(batchFiles(storage), [])
    }

    func testMixedEnvelopeSendsUnlimitedItemsAndKeepsLimitedOnes() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(sessionEnvelope(1))
        try q.enqueue(eventEnvelope(2, extra: [.session(Data("{}".utf8))]))
        let t0 = clock.now
        server.enqueue(.status(200, headers: ["X-Sentry-Rate-Limits": "100:session:project"]))
        XCTAssertEqual(u.pump(), .held(until: t0 + 100))
        let second = try XCTUnwrap(receivedEnvelope(server.requests[1]))
        XCTAssertEqual(second.items.map(\.type), [.event], "the session item is held back")
        XCTAssertEqual(second.header.eventID, eventID(2))
        clock.set(t0 + 100)
        XCTAssertEqual(u.pump(), .idle)
        let third = try XCTUnwrap(receivedEnvelope(server.requests[2]))
        XCTAssertEqual(third.items.map(\.type), [.session])
        XCTAssertNil(third.header.eventID)
    }

    func testLimitsOnUnusedCategoriesHoldNothing() throws {
        // Bugsink answers every envelope with `X-Sentry-Rate-Limits: 86400:transaction;span:organization`.
        // An envelope queued while a pump runs must not make the pump report "held for a day".
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, log: log.sink)
        let hook = HookTransport(CurlTransport(timeout: 2))
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: hook, clock: clock, requestTimeout: 2)
        var injected = false
        hook.beforeSend = {
            guard !injected else { return }
            injected = true
            try! q.enqueue(eventEnvelope(2))  // a concurrent submit...
            try! q.seal()                      // ...that filled its batch
        }
        server.enqueue(.status(200, headers: ["X-Sentry-Rate-Limits": "86400:transaction;span:organization"]))
        try q.enqueue(eventEnvelope(1))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertTrue(u.rateLimits.isLimited("transaction", at: clock.now))
        XCTAssertFalse(q.isEmpty, "the envelope queued during the pump waits for the next one")
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertTrue(q.isEmpty)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(2)])
    }

    func test401StopsUntilRelaunchAndKeepsFiles() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(eventEnvelope(2))
        server.enqueue(.status(401))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(server.requests.count, 1)
        clock.advance(3600)
        try q.enqueue(eventEnvelope(3))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(server.requests.count, 1, "nothing sent after a 401")
        XCTAssertTrue(u.isStopped)
        XCTAssertEqual(batchFiles(storage).count, 1)
        try q.persist()
        // "relaunch": a new queue and uploader on the same directory
        let (_, u2) = try makeUploader(storage: storage)
        XCTAssertEqual(u2.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(1), eventID(2), eventID(3)])
        XCTAssertEqual(batchFiles(storage), [])
    }

    func test413SplitsIntoHalvesAndDropsSingleItems() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        let items = (0..<4).map { EnvelopeItem.logs(Data(#"{"items":[{"n":\#($0)}]}"#.utf8), count: 1) }
        try q.enqueue(Envelope(items: items))
        // 4 items → 413; [0,1] → 413; [0] → 200; [1] → 413 (dropped); [2,3] → 200
        server.enqueue(.status(413), .status(413), .status(200), .status(413), .status(200))
        XCTAssertEqual(u.pump(), .idle)
        let counts = server.requests.map { receivedEnvelope($0)?.items.count ?? -1 }
        XCTAssertEqual(counts, [4, 2, 1, 1, 2])
        let sentPayloads = server.requests.compactMap { receivedEnvelope($0) }.enumerated()
            .filter { [2, 4].contains($0.offset) }.flatMap { $0.element.items.map(\.payload) }
        XCTAssertEqual(sentPayloads, [items[0].payload, items[2].payload, items[3].payload])
        XCTAssertEqual(u.stats.droppedTooLarge, 1)
        XCTAssertEqual(batchFiles(storage), [])
    }

    func testPermanent4xxDropsButOthersContinue() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(eventEnvelope(2))
        server.enqueue(.status(400, body: #"{"detail":"invalid"}"#))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(2)])
        XCTAssertEqual(u.stats.droppedRejected, 1)
        XCTAssertEqual(batchFiles(storage), [])
    }

    func testGarbageResponseIsSurvived() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.garbage("\u{1}\u{2}this is not HTTP at all\r\n\r\n"))
        guard case .waiting(let until) = u.pump() else { return XCTFail("garbage must count as a failure") }
        XCTAssertEqual(until.timeIntervalSince(clock.now), 5)
        XCTAssertEqual(batchFiles(storage).count, 1)
        clock.set(until)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(batchFiles(storage), [])
    }

    func testNeverAnsweringServerTimesOutAndIsRetried() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage, timeout: 1)
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.silent)
        guard case .waiting(let until) = u.pump() else { return XCTFail("a silent server must count as a failure") }
        XCTAssertEqual(until.timeIntervalSince(clock.now), 5)
        XCTAssertEqual(batchFiles(storage).count, 1)
        clock.set(until)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(server.requests.count, 2)
    }

    func testOfflineServerIsRetried() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        let dead = try TestHTTPServer()
        let deadDSN = try DSN(dead.dsn)
        dead.stop()  // port closed: connection refused
        let offline = Uploader(queue: q, dsn: deadDSN, transport: CurlTransport(timeout: 2), clock: clock, requestTimeout: 2)
        guard case .waiting(let until) = offline.pump() else { return XCTFail("offline must count as a failure") }
        XCTAssertEqual(until.timeIntervalSince(clock.now), 5)
        XCTAssertEqual(batchFiles(storage).count, 1)
        XCTAssertEqual(u.pump(), .idle)  // the same queue, a reachable server
    }

    func testPendingFilesOfPreviousRunAreSent() throws {
        let storage = dirs.make()
        do {
            let previous = try PersistentQueue(storageDirectory: storage, maxBatchSize: 2)
            for n in 1...3 { try previous.enqueue(eventEnvelope(n), durable: true) }
        }
        XCTAssertEqual(batchFiles(storage).count, 2)
        let (_, u) = try makeUploader(storage: storage)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(2), eventID(3)])
        XCTAssertEqual(batchFiles(storage), [])
    }

    func testUnreadableRecordIsDropped() throws {
        let storage = dirs.make()
        let pending = storage.appendingPathComponent("pending")
        try FileManager.default.createDirectory(at: pending, withIntermediateDirectories: true)
        try BatchFile.encode([Data("junk".utf8), eventEnvelope(1).serialized()])
            .write(to: pending.appendingPathComponent("0000000000000001-00000000.batch"))
        let (_, u) = try makeUploader(storage: storage)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1)])
        XCTAssertEqual(u.stats.droppedUnreadable, 1)
    }
}

/// Forwards to another transport after running `beforeSend` (to act during a pump).
///
/// `@unchecked Sendable`: the tests set `beforeSend` before they pump the uploader themselves, and the pump
/// calls ``send(_:completion:)`` on that same thread, so `beforeSend` (and what it captures: the test's queue
/// and flags) is never used by two threads.
final class HookTransport: HTTPTransport, @unchecked Sendable {
    let inner: HTTPTransport
    var beforeSend: () -> Void = {}
    init(_ inner: HTTPTransport) { self.inner = inner }
    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, TransportError>) -> Void) {
        beforeSend()
        inner.send(request, completion: completion)
    }
}
