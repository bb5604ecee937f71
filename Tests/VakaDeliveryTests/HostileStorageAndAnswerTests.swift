import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// Hostile storage and server answers, with variants:
/// - a server's rate limit below one second (decimals, 0, a date in the past, all categories) never makes
///   the uploader resend in a loop (``RateLimits/minimumDelay``, one request per envelope per pump);
/// - a batch file that can never be sent (no intact envelope, not a regular file, over the size cap) is set
///   aside as `.bad` instead of blocking `flush`; at most 8 are kept;
/// - the queued `event_id`s are read in one pass, headers only;
/// - files under the storage directory are read with a size cap (a 1 GiB sparse file costs nothing);
/// - a response body is read up to 64 KiB, and a response whose headers arrived counts by its status even
///   when its body never ends or is cut short.
/// Real ``Delivery``/``Uploader``/``CurlTransport`` against loopback servers.
final class HostileStorageAndAnswerTests: LoopbackServerTestCase {

    private func makeDelivery(storage: URL, dsn: String? = nil) throws -> Delivery {
        let config = Delivery.Configuration(storageDirectory: storage, dsn: try DSN(dsn ?? server.dsn),
                                            flushInterval: 3600, requestTimeout: 5, log: log.sink)
        let d = try Delivery(configuration: config)
        deliveries.append(d)
        return d
    }

    // MARK: - 1. Rate limits below a second

    func testEveryRateLimitFromTheServerLastsAtLeastOneSecond() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        let cases: [(Int, [String: String], String)] = [
            (429, ["retry-after": "0.001"], RateLimits.all),
            (429, ["retry-after": "0"], RateLimits.all),
            (429, ["retry-after": "Mon, 01 Jan 2001 00:00:00 GMT"], RateLimits.all),  // in the past
            (429, ["x-sentry-rate-limits": "0.001:error:key"], "error"),
            (200, ["x-sentry-rate-limits": "0::organization"], RateLimits.all),
        ]
        for (status, headers, category) in cases {
            var r = RateLimits()
            XCTAssertTrue(r.update(status: status, headers: headers, now: now), "\(headers)")
            XCTAssertEqual(r.deadlines[category], now + RateLimits.minimumDelay, "\(headers)")
            XCTAssertTrue(r.isLimited(category == RateLimits.all ? "session" : category, at: now + 0.5), "\(headers)")
        }
        // Longer limits are kept as they are.
        var r = RateLimits()
        r.update(status: 429, headers: ["retry-after": "2.5"], now: now)
        XCTAssertEqual(r.deadlines[RateLimits.all], now + 2.5)
    }

    /// Variants of a sub-second rate limit through the real delivery thread: `Retry-After: 0`, a past HTTP date,
    /// and an all-categories `X-Sentry-Rate-Limits` of 0 s. Each must give a handful of requests in 3 s.
    func testZeroAndPastRateLimitsDoNotFloodTheServer() throws {
        let answers: [[String: String]] = [["Retry-After": "0"], ["Retry-After": "Thu, 01 Jan 1970 00:00:00 GMT"],
                                           ["X-Sentry-Rate-Limits": "0::organization"],
                                           ["X-Sentry-Rate-Limits": "0.0001:error;session:key, 0.0001::organization"]]
        for (index, headers) in answers.enumerated() {
            let before = server.requests.count
            server.responder = { _ in .status(429, headers: headers) }
            let d = try makeDelivery(storage: dirs.make())
            try d.submit(eventEnvelope(100 + index), durable: true)
            d.wake()
            Thread.sleep(forTimeInterval: 3)
            d.close(timeout: 0)
            let count = server.requests.count - before
            XCTAssertGreaterThan(count, 0, "\(headers)")
            XCTAssertLessThanOrEqual(count, 10, "\(count) requests in 3 s for 429 \(headers)")
        }
    }

    /// One pump sends a rate-limited envelope once, even when its limit is over before the pump looks again
    /// (the clock moves 0.6 s at every reading here, so the 1 s limit is over two readings later).
    func testARateLimitedEnvelopeIsNotResentInTheSamePump() throws {
        let clock = JumpingClock(step: 0.6)
        let q = try PersistentQueue(storageDirectory: dirs.make(), log: log.sink)
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: CurlTransport(timeout: 5),
                         clock: clock, requestTimeout: 5, log: log.sink)
        // After 20 requests the server accepts, so a looping pump ends (and the count shows it).
        let answered = Counter()
        server.responder = { _ in
            answered.next() > 20 ? .status(200) : .status(429, headers: ["X-Sentry-Rate-Limits": "1:error:key"])
        }
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(sessionEnvelope(2))
        _ = u.pump()
        XCTAssertEqual(receivedEventIDs(server).filter { $0 == eventID(1) }.count, 1,
                       "the event was sent again in the same pump: \(server.requests.count) requests")
        XCTAssertFalse(q.isEmpty)
    }

    // MARK: - 2. Batch files that can never be sent

    func testBatchFilesThatCanNeverBeSentAreSetAsideAndFlushReturnsTrue() throws {
        for damage in ["huge sparse", "fifo", "magic only", "torn first record"] {
            let storage = dirs.make()
            let pending = storage.appendingPathComponent("pending")
            try FileManager.default.createDirectory(at: pending, withIntermediateDirectories: true)
            let junk = pending.appendingPathComponent("0000000000000001-0000abcd.batch")
            switch damage {
            case "huge sparse":  // a valid start, then 1 GiB: over the cap (50 MiB), must not be read
                try Data("VAKA-BATCH 1\n5\nhello\n".utf8).write(to: junk)
                XCTAssertEqual(truncate(junk.path, 1 << 30), 0)
            case "fifo": XCTAssertEqual(mkfifo(junk.path, 0o600), 0)  // opening it must not block
            case "magic only": try Data("VAKA-BATCH 1\n".utf8).write(to: junk)
            default: try Data("VAKA-BATCH 1\n100\n{\"event_id\":".utf8).write(to: junk)
            }
            let d = try makeDelivery(storage: storage)
            try d.submit(eventEnvelope(20), durable: true)
            let started = Date()
            let flushed = d.flush(timeout: 8)
            let took = Date().timeIntervalSince(started)
            XCTAssertTrue(flushed, "\(damage): flush returned false (took \(took) s)")
            XCTAssertLessThan(took, 6, damage)
            XCTAssertTrue(receivedEventIDs(server).contains(eventID(20)), damage)
            let left = try FileManager.default.contentsOfDirectory(atPath: pending.path)
            XCTAssertFalse(left.contains { $0.hasSuffix(".batch") }, "\(damage): \(left)")
            if damage == "magic only" {
                XCTAssertFalse(left.contains { $0.hasSuffix(".bad") }, "an empty intact file is deleted: \(left)")
            } else {
                XCTAssertEqual(left.filter { $0.hasSuffix(".batch.bad") }, ["0000000000000001-0000abcd.batch.bad"], damage)
                XCTAssertEqual(d.queue?.stats.setAsideFiles, 1, damage)
                XCTAssertTrue(log.lines.contains { $0.contains("0000000000000001-0000abcd.batch set aside") }, damage)
            }
            d.close(timeout: 0)
        }
    }

    func testBatchFileCapFollowsTheBatchSizeAndAtMostEightBadFilesAreKept() throws {
        let storage = dirs.make()
        let pending = storage.appendingPathComponent("pending")
        try FileManager.default.createDirectory(at: pending, withIntermediateDirectories: true)
        for i in 0..<12 { try Data().write(to: pending.appendingPathComponent(String(format: "%016d-00000000.batch.bad", i + 1))) }
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 2, log: log.sink)
        XCTAssertEqual(q.settings.maxFileBytes, 2 * (PersistentQueue.maxEnvelopeBytes + 16) + 16)
        let bad = try FileManager.default.contentsOfDirectory(atPath: pending.path).filter { $0.hasSuffix(".bad") }.sorted()
        XCTAssertEqual(bad.count, PersistentQueue.maxBadFiles)
        XCTAssertEqual(bad.first, String(format: "%016d-00000000.batch.bad", 5), "the oldest are deleted")
        // Just over the cap: set aside without being read; at the cap: read.
        let over = pending.appendingPathComponent("0000000000000100-00000000.batch")
        let fine = pending.appendingPathComponent("0000000000000101-00000000.batch")
        try BatchFile.encode([eventEnvelope(1).serialized()]).write(to: fine)
        try Data("VAKA-BATCH 1\n".utf8).write(to: over)
        XCTAssertEqual(truncate(over.path, off_t(q.settings.maxFileBytes + 1)), 0)
        let q2 = try PersistentQueue(storageDirectory: storage, maxBatchSize: 2, log: log.sink)
        let refs = q2.sealedBatches()
        XCTAssertEqual(refs.map(\.name), [over.lastPathComponent, fine.lastPathComponent])
        XCTAssertNil(q2.records(of: refs[0]))
        XCTAssertEqual(q2.records(of: refs[1])?.count, 1)
        XCTAssertTrue(log.lines.contains { $0.contains("over the \(q.settings.maxFileBytes) B") }, "\(log.lines)")
    }

    // MARK: - 3. Queued event ids, one pass

    func testQueuedEventIDsComeFromEveryPlaceAnEnvelopeWaits() throws {
        let storage = dirs.make()
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 2, log: log.sink)
        for n in 1...5 { try q.enqueue(eventEnvelope(n)) }  // two sealed files and an open batch
        try q.enqueue(sessionEnvelope(6))                       // no event id
        XCTAssertEqual(q.queuedEventIDs(), Set((1...5).map(eventID)))
        XCTAssertTrue(q.containsEvent(eventID(3)))
        XCTAssertFalse(q.containsEvent(eventID(9)))
        // A later launch reads the files (headers only); a torn tail keeps the intact records before it.
        try q.persist()
        let files = batchFiles(storage)
        let last = storage.appendingPathComponent("pending").appendingPathComponent(try XCTUnwrap(files.last))
        let handle = try FileHandle(forWritingTo: last)
        handle.seekToEndOfFile()
        handle.write(Data("999\n{\"event_id\":\"deadbeef".utf8))
        try handle.close()
        let again = try PersistentQueue(storageDirectory: storage, maxBatchSize: 2, log: log.sink)
        XCTAssertEqual(again.queuedEventIDs(), Set((1...5).map(eventID)))
        let headers = try XCTUnwrap(BatchFile.scanHeaders(path: last.path))
        XCTAssertEqual(headers.compactMap(BatchFile.eventID(inHeader:)), [eventID(5)])
    }

    // MARK: - 4. Size-capped reads

    func testCappedReadsNeverReadAHugeFileWhole() throws {
        let dir = dirs.make()
        let huge = dir.appendingPathComponent("huge")
        _ = FileManager.default.createFile(atPath: huge.path, contents: Data("head\n".utf8))
        XCTAssertEqual(truncate(huge.path, 1 << 30), 0)
        let tail = Data("\nlast line\n".utf8)
        let h = try FileHandle(forWritingTo: huge)
        h.seekToEndOfFile()
        h.write(tail)
        try h.close()
        let started = Date()
        guard case .tooLarge(let size) = PrivateFiles.readCapped(huge.path, maxBytes: 1 << 20) else { return XCTFail("read") }
        XCTAssertEqual(size, Int64(1 << 30) + Int64(tail.count))
        XCTAssertEqual(PrivateFiles.readTail(huge.path, maxBytes: tail.count), tail)
        XCTAssertEqual(PrivateFiles.readTail(huge.path, maxBytes: 4 << 20)?.count, 4 << 20)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        guard case .notRegular = PrivateFiles.readCapped(dir.path, maxBytes: 10) else { return XCTFail("directory") }
        guard case .unreadable(ENOENT) = PrivateFiles.readCapped(dir.appendingPathComponent("none").path, maxBytes: 10) else {
            return XCTFail("missing")
        }
        let small = dir.appendingPathComponent("small")
        try Data(count: 1000).write(to: small)
        guard case .data(let whole) = PrivateFiles.readCapped(small.path, maxBytes: 1000) else { return XCTFail("at the cap") }
        XCTAssertEqual(whole.count, 1000)
        guard case .tooLarge(1000) = PrivateFiles.readCapped(small.path, maxBytes: 999) else { return XCTFail("over the cap") }
        // The outbox reader (used by `vaka outbox show`) refuses a file over the largest envelope.
        let outbox = Outbox(storageDirectory: dir)
        XCTAssertThrowsError(try outbox.read(huge)) { XCTAssertTrue("\($0)".contains("over"), "\($0)") }
    }

    func testAHugeOrOddScopeFileIsIgnoredWithADebugLine() throws {
        let storage = dirs.make()
        for (name, kind) in [("HUGE", "huge"), ("DIR", "directory")] {
            let run = RunDirectory.root(storage).appendingPathComponent(name)
            try FileManager.default.createDirectory(at: run, withIntermediateDirectories: true)
            let scope = run.appendingPathComponent("scope.json")
            if kind == "huge" {
                try JSONEncoder().encode(RunScope(runID: name, release: "r", environment: "e", tags: [:], userID: nil, session: nil)).write(to: scope)
                XCTAssertEqual(truncate(scope.path, 1 << 30), 0)
            } else {
                try FileManager.default.createDirectory(at: scope, withIntermediateDirectories: false)
            }
        }
        let lines = LogSink()
        let runs = RunDirectory.finishedRuns(storage: storage, except: "CURRENT", log: lines.sink)
        XCTAssertEqual(runs.map(\.runID), ["DIR", "HUGE"])
        XCTAssertTrue(runs.allSatisfy { $0.scope == nil })
        XCTAssertTrue(lines.lines.contains { $0.contains("HUGE: scope.json is 1073741824 B") }, "\(lines.lines)")
        XCTAssertTrue(lines.lines.contains { $0.contains("DIR: scope.json is not a regular file") }, "\(lines.lines)")
    }

    // MARK: - 8. Endless and cut-short response bodies

    func testA200WithAnEndlessBodyIsADeliveryReadOnlyUpToTheCap() throws {
        for body in [RawServer.Body.hugeContentLength, .endlessChunks] {
            let raw = try RawServer(body: body)
            defer { raw.stop() }
            let transport = CurlTransport(timeout: 15, log: log.sink)
            let request = HTTPRequest(url: URL(string: raw.url)!, headers: [("Content-Type", "application/x-sentry-envelope")],
                                      body: Data("x".utf8), timeout: 15)
            let started = Date()
            let result = transport.sendSynchronously(request)
            let took = Date().timeIntervalSince(started)
            guard case .success(let response) = result else { return XCTFail("\(body): \(result)") }
            XCTAssertEqual(response.status, 200, "\(body)")
            XCTAssertEqual(response.headers["x-test"], "yes", "\(body)")
            XCTAssertLessThan(took, 10, "\(body): the body was read for \(took) s")
            raw.stop()
            // Unbounded, curl would read on for the whole 15 s timeout (~35 GB); it stops at 64 KiB (the
            // server gets ahead by at most its socket buffers).
            XCTAssertLessThan(raw.bytesSent, 64 << 20, "\(body): \(raw.bytesSent) bytes sent before the client hung up")
            XCTAssertTrue(log.lines.contains { $0.contains("not read past 65536 bytes") }, "\(log.lines)")
        }
    }

    func testAStatusWhoseHeadersArrivedCountsWhenTheBodyIsCutShort() throws {
        // Headers, 10 bytes of a 1000-byte body, then the server hangs up: curl says "partial file".
        let cut = try RawServer(body: .cutShort)
        defer { cut.stop() }
        let request = HTTPRequest(url: URL(string: cut.url)!, headers: [], body: Data("x".utf8), timeout: 5)
        guard case .success(let response) = CurlTransport(timeout: 5, log: log.sink).sendSynchronously(request) else {
            return XCTFail("a 200 whose body was cut short is still a 200")
        }
        XCTAssertEqual(response.status, 200)
        XCTAssertTrue(log.lines.contains { $0.contains("body cut short") }, "\(log.lines)")
        // The status line cut short: no answer (a transient failure), not a status.
        let torn = try RawServer(body: .tornHeaders)
        defer { torn.stop() }
        let request2 = HTTPRequest(url: URL(string: torn.url)!, headers: [], body: Data("x".utf8), timeout: 5)
        guard case .failure(let error) = CurlTransport(timeout: 5).sendSynchronously(request2) else {
            return XCTFail("a header block cut short is not an answer")
        }
        XCTAssertFalse(error.isPermanent)
    }

    /// Through the delivery thread: the event is delivered once (not resent after backoff), and flush is quick.
    func testAnEventAnsweredWithAnEndlessBodyIsDeliveredOnce() throws {
        let raw = try RawServer(body: .endlessChunks)
        defer { raw.stop() }
        let d = try makeDelivery(storage: dirs.make(), dsn: "http://testkey@127.0.0.1:\(raw.port)/42")
        try d.submit(eventEnvelope(30), durable: true)
        let started = Date()
        XCTAssertTrue(d.flush(timeout: 12))
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        XCTAssertEqual(raw.requestCount, 1)
        XCTAssertEqual(d.uploader?.stats.sent, 1)
        XCTAssertEqual(d.uploader?.stats.failures, 0)
    }
}

/// A thread-safe counter: ``next()`` returns 1, 2, 3...
final class Counter: Sendable {
    private let n = Mutex(0)
    func next() -> Int { n.withLock { $0 += 1; return $0 } }
}

/// A clock that moves `step` seconds forward at every reading.
final class JumpingClock: DeliveryClock {
    private let t = Mutex(Date(timeIntervalSince1970: 1_700_000_000))
    private let step: TimeInterval
    init(step: TimeInterval) { self.step = step }
    var now: Date { t.withLock { $0 += step; return $0 } }
}

/// A loopback HTTP/1.1 server that answers every request with `200` and `X-Test: yes`, then a hostile body.
/// Each connection is served on its own thread, which writes until the client hangs up (or 20 s passed).
final class RawServer: Sendable {
    enum Body { case hugeContentLength, endlessChunks, cutShort, tornHeaders }
    let body: Body
    let port: UInt16
    private let listenFD: Int32
    /// What the connection threads count, and whether ``stop()`` was called.
    private struct Counts { var bytesSent = 0; var requests = 0; var stopped = false }
    private let counts = Mutex(Counts())
    var url: String { "http://127.0.0.1:\(port)/api/42/envelope/" }
    var bytesSent: Int { counts.withLock { $0.bytesSent } }
    var requestCount: Int { counts.withLock { $0.requests } }

    init(body: Body) throws {
        self.body = body
        let listenFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listenFD = listenFD
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(listenFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0, listen(listenFD, 8) == 0 else { throw NSError(domain: "RawServer", code: Int(errno)) }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listenFD, $0, &len) } }
        port = UInt16(bigEndian: bound.sin_port)
        Thread { self.acceptLoop() }.start()
    }

    func stop() {
        let was = counts.withLock { counts in
            defer { counts.stopped = true }
            return counts.stopped
        }
        if !was { shutdown(listenFD, Int32(SHUT_RDWR)); close(listenFD) }
    }

    private var isStopped: Bool { counts.withLock { $0.stopped } }

    private func acceptLoop() {
        while !isStopped {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 { if errno == EINTR { continue } else { return } }
            Thread { self.serve(fd) }.start()
        }
    }

    private func send(_ fd: Int32, _ data: [UInt8]) -> Bool {
        var off = 0
        while off < data.count {
            let n = data.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + off, data.count - off, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return false }
            off += n
            counts.withLock { $0.bytesSent += n }
        }
        return true
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // Read the request head and its body (Content-Length).
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return }
            buffer += chunk[0..<n]
            let text = String(decoding: buffer, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let head = text[..<end.lowerBound].lowercased()
                let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if text.utf8.distance(from: text.utf8.startIndex, to: end.upperBound.samePosition(in: text.utf8)!) + length <= buffer.count { break }
            }
        }
        counts.withLock { $0.requests += 1 }
        let deadline = Date().addingTimeInterval(20)
        switch body {
        case .hugeContentLength:
            guard send(fd, Array("HTTP/1.1 200 OK\r\nX-Test: yes\r\nContent-Length: 99999999999\r\n\r\n".utf8)) else { return }
            let block = [UInt8](repeating: 0x7B, count: 65536)
            while Date() < deadline, send(fd, block) {}
        case .endlessChunks:
            guard send(fd, Array("HTTP/1.1 200 OK\r\nX-Test: yes\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)) else { return }
            let block = Array("1000\r\n".utf8) + [UInt8](repeating: 0x7B, count: 4096) + Array("\r\n".utf8)
            while Date() < deadline, send(fd, block) {}
        case .cutShort:
            _ = send(fd, Array("HTTP/1.1 200 OK\r\nX-Test: yes\r\nContent-Length: 1000\r\n\r\n0123456789".utf8))
        case .tornHeaders:
            _ = send(fd, Array("HTTP/1.1 2".utf8))
        }
    }
}
