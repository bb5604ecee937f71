import XCTest
import VakaTestSupport
@testable import Vaka

/// Answers that are not the server's verdict on an event (a proxy's), and answers that will never change by
/// themselves (a redirect, 401, libcurl missing): the events stay queued, and a misconfiguration is printed
/// once without debug (``Uploader``'s `warn` sink, `[vaka]` on standard error in the SDK). Real libcurl against
/// the loopback ``TestHTTPServer``, which also plays the proxy (`http_proxy`/`https_proxy` point at it).
final class MisconfigurationTests: XCTestCase {
    let dirs = ScratchDirs()
    var server: TestHTTPServer!
    var clock: ManualClock!
    var log: LogSink!
    var warnings: LogSink!
    var settled: LogSink!
    private var savedProxies: [String: String] = [:]

    override func setUpWithError() throws {
        server = try TestHTTPServer()
        clock = ManualClock()
        log = LogSink()
        warnings = LogSink()
        settled = LogSink()
        for name in ["http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"] {
            if let v = ProcessInfo.processInfo.environment[name] { savedProxies[name] = v }
            unsetenv(name)
        }
    }

    override func tearDown() {
        server.stop()
        dirs.removeAll()
        for name in ["http_proxy", "https_proxy"] { unsetenv(name) }
        for (name, value) in savedProxies { setenv(name, value, 1) }
    }

    private func makeUploader(storage: URL, dsn: String? = nil, library: String = CurlTransport.defaultLibrary) throws -> (PersistentQueue, Uploader) {
        let q = try PersistentQueue(storageDirectory: storage, log: log.sink)
        let u = Uploader(queue: q, dsn: try DSN(dsn ?? server.dsn), transport: CurlTransport(timeout: 5, library: library),
                         clock: clock, requestTimeout: 5, log: log.sink, warn: warnings.sink,
                         onEventSettled: { [settled] id, outcome in settled!("\(id) \(outcome)") })
        return (q, u)
    }

    private func isWaiting(_ outcome: Uploader.Outcome) -> Bool {
        if case .waiting = outcome { return true }
        return false
    }

    /// A plain-http DSN behind `http_proxy`: the proxy itself answers the POST with 407. That is an HTTP answer,
    /// but a proxy's: the event is not given up, it is retried with backoff and sent once the proxy lets it through.
    func testA407FromAnHTTPProxyIsRetriedNotGivenUp() throws {
        setenv("http_proxy", server.baseURL, 1)
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage, dsn: "http://testkey@vaka-origin.invalid/42")
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(407, headers: ["Proxy-Authenticate": "Basic realm=\"corp\""]),
                       .status(407, headers: ["Proxy-Authenticate": "Basic realm=\"corp\""]))
        XCTAssertTrue(isWaiting(u.pump()))
        XCTAssertTrue(server.requests.first?.path.contains("vaka-origin.invalid") ?? false,
                      "the request did not go through the proxy: \(server.requests.map(\.path))")
        clock.advance(400)
        XCTAssertTrue(isWaiting(u.pump()))
        XCTAssertEqual(settled.lines, [], "a proxy's 407 settled the event")
        XCTAssertEqual(u.stats.droppedRejected, 0)
        XCTAssertEqual(batchFiles(storage).count, 1)
        XCTAssertEqual(warnings.lines.count, 1, "\(warnings.lines)")
        XCTAssertTrue(warnings.lines.first?.contains("407") ?? false, "\(warnings.lines)")
        clock.advance(400)  // the proxy now lets it through (the server's default answer is 200)
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(settled.lines, ["\(eventID(1)) accepted"])
        XCTAssertEqual(batchFiles(storage), [])
    }

    /// An https DSN behind `https_proxy`: the proxy refuses the tunnel with 403 (its ACL). A transport failure
    /// naming the proxy's status, not the server's 403: retried, the event kept, one line printed.
    func testAProxyRefusingTheTunnelWith403IsRetriedAndNamed() throws {
        setenv("https_proxy", server.baseURL, 1)
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage, dsn: "https://testkey@vaka-origin.invalid/42")
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(403))
        XCTAssertTrue(isWaiting(u.pump()))
        XCTAssertEqual(server.requests.first?.method, "CONNECT")
        XCTAssertEqual(settled.lines, [])
        XCTAssertEqual(u.stats.droppedRejected, 0)
        XCTAssertEqual(batchFiles(storage).count, 1)
        XCTAssertEqual(warnings.lines.count, 1, "\(warnings.lines)")
        XCTAssertTrue(warnings.lines.first.map { $0.contains("403") && $0.contains("tunnel") } ?? false, "\(warnings.lines)")
    }

    /// The proxy accepts the tunnel (`200 Connection established`) and closes it: nothing reached the server,
    /// so the crash event is neither accepted nor given up.
    func testATunnelThatFailsAfterTheProxysConnect200KeepsTheEvent() throws {
        setenv("https_proxy", server.baseURL, 1)
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage, dsn: "https://testkey@vaka-origin.invalid/42")
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.garbage("HTTP/1.1 200 Connection established\r\n\r\n"))
        XCTAssertTrue(isWaiting(u.pump()))
        XCTAssertEqual(settled.lines, [])
        XCTAssertEqual(u.stats.sent, 0)
        XCTAssertEqual(batchFiles(storage).count, 1)
    }

    /// A 301 (e.g. http → https): not followed, not retried forever: sending stops until the next launch, the
    /// files are kept, and one line names the status and the Location's host, never the key.
    func test3xxStopsUntilTheNextLaunchAndNamesOnlyTheLocationHost() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(301, headers: ["Location": "https://elsewhere.example/api/42/envelope/?sentry_key=testkey"]))
        XCTAssertEqual(u.pump(), .stopped)
        clock.advance(3600)
        try q.enqueue(eventEnvelope(2))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(server.requests.count, 1, "sent again after a redirect")
        XCTAssertEqual(settled.lines, [])
        XCTAssertEqual(warnings.lines.count, 1, "\(warnings.lines)")
        let line = warnings.lines.first ?? ""
        XCTAssertTrue(line.contains("301") && line.contains("elsewhere.example"), line)
        XCTAssertFalse(line.contains("testkey"), "the key is printed: \(line)")
        try q.persist()
        let (_, u2) = try makeUploader(storage: storage)  // the next launch: the server now accepts
        XCTAssertEqual(u2.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(1), eventID(2)])
    }

    /// Variant: a 307 without a Location is the same configuration error.
    func test307WithoutLocationAlsoStops() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(307))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(batchFiles(storage).count, 1)
        XCTAssertTrue(warnings.lines.first?.contains("307") ?? false, "\(warnings.lines)")
    }

    /// A 401 (the key is refused) is visible without debug, once.
    func test401IsPrintedOnce() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(401))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(warnings.lines.count, 1, "\(warnings.lines)")
        XCTAssertTrue(warnings.lines.first?.contains("401") ?? false)
        XCTAssertFalse(warnings.lines.first?.contains("testkey") ?? true)
    }

    /// A 403 for every envelope drops them (the server's verdict), but is printed once without debug.
    func testA403RejectionIsPrintedOncePerStatus() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage)
        for n in 1...3 { try q.enqueue(eventEnvelope(n)) }
        server.enqueue(.status(403), .status(403), .status(403))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(u.stats.droppedRejected, 3)
        XCTAssertEqual(warnings.lines.count, 1, "\(warnings.lines)")
        XCTAssertTrue(warnings.lines.first?.contains("403") ?? false)
    }

    /// No libcurl: one line without debug, sending stops, the events stay queued.
    func testMissingLibcurlIsPrintedOnceAndEventsStayQueued() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage, library: "libvaka-no-such-curl.so.4")
        try q.enqueue(eventEnvelope(1))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(batchFiles(storage).count, 1)
        XCTAssertEqual(warnings.lines.count, 1, "\(warnings.lines)")
        XCTAssertTrue(warnings.lines.first?.contains("libvaka-no-such-curl.so.4") ?? false, "\(warnings.lines)")
    }

    /// Variant: a library that loads but is not libcurl (no curl symbols, like a broken libcurl.so.4).
    func testBrokenLibcurlIsPrintedOnce() throws {
        let storage = dirs.make()
        let (q, u) = try makeUploader(storage: storage, library: "libz.so.1")
        try q.enqueue(eventEnvelope(1))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertEqual(batchFiles(storage).count, 1)
        XCTAssertEqual(warnings.lines.count, 1, "\(warnings.lines)")
        XCTAssertTrue(warnings.lines.first?.contains("symbol not found") ?? false, "\(warnings.lines)")
    }
}

/// The outbox (no DSN) is bounded like the send queue.
final class OutboxCapTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    func testOutboxKeepsAtMostMaxFilesDroppingTheOldest() throws {
        let outbox = Outbox(storageDirectory: dirs.make(), maxFiles: 5)
        var written: [String] = []
        for n in 1...8 { written.append(try outbox.write(eventEnvelope(n)).lastPathComponent) }
        XCTAssertEqual(outbox.list().map(\.lastPathComponent), Array(written.suffix(5)))
        XCTAssertEqual(outbox.droppedFiles, 3)
    }

    /// Variant: the byte cap, counting files of earlier runs found at the first write.
    func testOutboxKeepsAtMostMaxBytesCountingEarlierFiles() throws {
        let storage = dirs.make()
        let size = eventEnvelope(1).serialized().count
        let earlier = Outbox(storageDirectory: storage)
        for n in 1...3 { try earlier.write(eventEnvelope(n)) }
        let outbox = Outbox(storageDirectory: storage, maxBytes: size * 4)  // "the next run"
        var written: [String] = []
        for n in 4...6 { written.append(try outbox.write(eventEnvelope(n)).lastPathComponent) }
        let left = outbox.list().map(\.lastPathComponent)
        XCTAssertEqual(left.count, 4)
        XCTAssertEqual(Array(left.suffix(3)), written)
        XCTAssertEqual(outbox.droppedFiles, 2)
    }

    /// Through `Delivery` (the SDK's outbox mode): an outbox already at 1,000 files stays at 1,000, and flush
    /// reports the drop once.
    func testDeliveryOutboxModeDropsTheOldestAndFlushSaysSoOnce() throws {
        let storage = dirs.make()
        let directory = storage.appendingPathComponent("outbox")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let old = eventEnvelope(0).serialized()
        for n in 0..<1_000 {
            try old.write(to: directory.appendingPathComponent(String(format: "20000101T000000.000Z-%06d-old.envelope", n)))
        }
        let log = LogSink()
        let d = try Delivery(configuration: Delivery.Configuration(storageDirectory: storage, dsn: nil, log: log.sink))
        defer { d.close(timeout: 1) }
        try d.submit(eventEnvelope(1))
        let names = Outbox(storageDirectory: storage).list().map(\.lastPathComponent)
        XCTAssertEqual(names.count, 1_000)
        XCTAssertFalse(names.contains("20000101T000000.000Z-000000-old.envelope"))
        XCTAssertTrue(names.last?.hasSuffix("-\(eventID(1)).envelope") ?? false)
        XCTAssertFalse(d.flush(timeout: 1))
        XCTAssertTrue(d.flush(timeout: 1))
        XCTAssertTrue(log.lines.contains { $0.contains("dropped the 1 oldest") }, "\(log.lines)")
    }
}
