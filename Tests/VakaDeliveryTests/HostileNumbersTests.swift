import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// A number from outside the process must never trap. The classic input (`503` with
/// `Retry-After: 1e300`, which killed the app with SIGILL) and variants go through the real ``Uploader`` and
/// ``Delivery`` (real threads and condition waits) against the loopback ``TestHTTPServer``; the parsers get
/// the rest (negative, NaN, inf, -0, huge integers, 10 KB headers, garbage rate-limit lists, HTTP dates in year
/// 99999 and year 0), plus batch files with absurd length fields, scope numbers and NaN/negative options.
/// "The process survives" is the test running on; the clamps are asserted on the real outputs.
final class HostileNumbersTests: XCTestCase {
    let dirs = ScratchDirs()
    var server: TestHTTPServer!
    var clock: ManualClock!
    var log: LogSink!
    var deliveries: [Delivery] = []

    override func setUpWithError() throws {
        server = try TestHTTPServer()
        clock = ManualClock()
        log = LogSink()
    }

    override func tearDown() {
        for d in deliveries { d.close(timeout: 0) }
        server.stop()
        dirs.removeAll()
    }

    private let day: TimeInterval = 86_400

    private func makeUploader() throws -> (PersistentQueue, Uploader) {
        let q = try PersistentQueue(storageDirectory: dirs.make(), log: log.sink)
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: CurlTransport(timeout: 2),
                         clock: clock, requestTimeout: 2, log: log.sink)
        return (q, u)
    }

    private func makeDelivery(flushInterval: TimeInterval = 3600, maxBatchSize: Int = 50,
                              requestTimeout: TimeInterval = 2) throws -> Delivery {
        let config = Delivery.Configuration(storageDirectory: dirs.make(), dsn: try DSN(server.dsn),
                                            flushInterval: flushInterval, maxBatchSize: maxBatchSize,
                                            requestTimeout: requestTimeout, log: log.sink)
        let d = try Delivery(configuration: config)
        deliveries.append(d)
        return d
    }

    // MARK: - Through the uploader and the delivery thread

    func test503RetryAfter1e300IsClampedToADay() throws {
        let (q, u) = try makeUploader()
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(503, headers: ["Retry-After": "1e300"]))
        XCTAssertEqual(u.pump(), .waiting(until: clock.now + day), "backoff clamped to one day")
        XCTAssertTrue(log.lines.contains { $0.contains("next attempt in 86400 s") }, "\(log.lines)")
        XCTAssertFalse(q.isEmpty, "the envelope is kept")
    }

    func test429RetryAfter1e300LimitsEverythingForADay() throws {
        let (q, u) = try makeUploader()
        try q.enqueue(eventEnvelope(1))
        server.enqueue(.status(429, headers: ["Retry-After": "1e300"]))
        XCTAssertEqual(u.pump(), .waiting(until: clock.now + day))
        XCTAssertEqual(u.rateLimits.deadlines[RateLimits.all], clock.now + day)
        clock.advance(day)
        XCTAssertEqual(u.pump(), .idle, "sent once the clamped limit passed")
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), eventID(1)])
    }

    /// The delivery thread waits on the clamped deadline (`NSCondition.wait(until:)` traps beyond ~292 years).
    func testDeliveryThreadSurvives503And429With1e300AndFlushStaysBounded() throws {
        for status in [503, 429] {
            server.enqueue(.status(status, headers: ["Retry-After": "1e300"]))
            let d = try makeDelivery()
            try d.submit(eventEnvelope(status))
            XCTAssertFalse(d.flush(timeout: 2), "a day of backoff is beyond the deadline: false at once")
            XCTAssertFalse(d.flush(timeout: .nan))
            XCTAssertFalse(d.flush(timeout: -.infinity))
            XCTAssertFalse(d.close(timeout: -1))
        }
        XCTAssertEqual(server.requests.count, 2)
    }

    func testRetryAfterVariantsThroughTheUploader() throws {
        // (header value, delay of the resulting 503 wait): unusable values leave the 5 s backoff.
        let cases: [(String, TimeInterval)] = [
            ("-1", 5), ("nan", 5), ("NaN", 5), ("inf", 5), ("-inf", 5), ("-0", 5), ("1e309", 5),
            ("99999999999999999999", day), ("18446744073709551616", day), (String(repeating: "9", count: 10_240), 5),
            ("Sun, 06 Nov 99999 08:49:37 GMT", 5), ("Sun, 06 Nov 0000 08:49:37 GMT", 5),
            ("Sun, 06 Nov 9223372036854775807 08:49:37 GMT", 5), ("Sun Nov  6 08:49:37 -9223372036854775808", 5),
        ]
        for (value, delay) in cases {
            let (q, u) = try makeUploader()
            try q.enqueue(eventEnvelope(1))
            server.enqueue(.status(503, headers: ["Retry-After": value]))
            XCTAssertEqual(u.pump(), .waiting(until: clock.now + delay), "Retry-After: \(value.prefix(40))")
        }
    }

    func testGarbageRateLimitHeadersThroughTheUploader() throws {
        let (q, u) = try makeUploader()
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(sessionEnvelope(2))
        let garbage = "99999999999999999999:error:key, nan:session, inf:session, -5:session, :::, ,,,, 1e400:session, "
            + String(repeating: "x;", count: 5_000) + ":" + String(repeating: "9", count: 2_000)
        server.enqueue(.status(429, headers: ["X-Sentry-Rate-Limits": garbage]))
        let outcome = u.pump()
        XCTAssertEqual(u.rateLimits.deadlines["error"], clock.now + day, "20-digit delay clamped to a day")
        XCTAssertNil(u.rateLimits.deadlines["session"], "NaN, inf, negative and overflowing delays are ignored")
        XCTAssertEqual(outcome, .held(until: clock.now + day))
        XCTAssertEqual(receivedEventIDs(server), [eventID(1), nil], "the session still flows")
    }

    // MARK: - Parsers

    func testRetryAfterParser() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        XCTAssertEqual(RateLimits.parseRetryAfter("1e300", now: now), day)
        XCTAssertEqual(RateLimits.parseRetryAfter("-0", now: now), 0)
        XCTAssertEqual(RateLimits.parseRetryAfter(" 42 ", now: now), 42)
        for bad in ["-1", "nan", "-nan", "inf", "+inf", "infinity", "", " ", "1e309",
                    String(repeating: "1", count: 10_240), "Sun, 06 Nov 99999 08:49:37 GMT"] {
            XCTAssertNil(RateLimits.parseRetryAfter(bad, now: now), bad)
        }
        XCTAssertEqual(RateLimits.parseRetryAfter("Mon, 01 Jan 0001 00:00:00 GMT", now: now), 0, "a date in the past")
        XCTAssertEqual(RateLimits.parseRetryAfter("Fri, 31 Dec 9999 23:59:59 GMT", now: now), day)
    }

    func testHTTPDateParserRejectsYearsOutsideStructTm() {
        XCTAssertNil(Timestamps.parseHTTPDate("Sun, 06 Nov 99999 08:49:37 GMT"))
        XCTAssertNil(Timestamps.parseHTTPDate("Sun, 06 Nov 9223372036854775807 08:49:37 GMT"))
        XCTAssertNil(Timestamps.parseHTTPDate("Sun Nov  6 08:49:37 99999999999"))
        XCTAssertNil(Timestamps.parseHTTPDate("Sun, 06 Nov 1994 99999999999999999999:49:37 GMT"))
        XCTAssertNil(Timestamps.parseHTTPDate(String(repeating: "Sun, 06 Nov 1994 ", count: 600)))
        XCTAssertNotNil(Timestamps.parseHTTPDate("Sat, 01 Jan 0000 00:00:00 GMT"), "year 0 is representable")
        XCTAssertEqual(Timestamps.parseHTTPDate("Sun, 06 Nov 1994 08:49:37 GMT"), Date(timeIntervalSince1970: 784_111_777))
    }

    func testSentryRateLimitParserClampsAndCaps() {
        let groups = RateLimits.parseSentryHeader("99999999999999999999:error:key, -0:session, nan:a, inf:b, -1:c, x:d, 5")
        XCTAssertEqual(groups.map { $0.0 }, [day, 0, 5])
        XCTAssertEqual(groups.map { $0.1 }, [["error"], ["session"], [RateLimits.all]])
        let many = RateLimits.parseSentryHeader(Array(repeating: "1:a", count: 1_000).joined(separator: ","))
        XCTAssertEqual(many.count, RateLimits.maxGroups)
        let wide = RateLimits.parseSentryHeader("1:" + (0..<1_000).map { "c\($0)" }.joined(separator: ";"))
        XCTAssertEqual(wide.first?.1.count, RateLimits.maxCategoriesPerGroup)
    }

    func testRFC3339FormattingClampsAnyDate() {
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: 1e300)), "9999-12-31T23:59:59.999Z")
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: -1e300)), "0001-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: .nan)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: .infinity)), "9999-12-31T23:59:59.999Z")
    }

    /// Times read back from files are whole milliseconds stored in a `Double` (1880972209.76 is just under .760
    /// in binary): each is written with its own millisecond, never the one before.
    func testRFC3339WritesTheMillisecondOfEveryWholeMillisecondTime() {
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: 1_880_972_209.76)), "2029-08-09T12:16:49.760Z")
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: 1_741_263_110.1)), "2025-03-06T12:11:50.100Z")
        var wrong: [String] = []
        for ms in Int64(1_714_566_896_000)..<1_714_566_898_000 {
            let text = Timestamps.rfc3339(Date(timeIntervalSince1970: Double(ms) / 1000))
            if !text.hasSuffix(String(format: ".%03dZ", Int(ms % 1000))) { wrong.append("\(ms): \(text)") }
        }
        XCTAssertEqual(wrong, [])
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: -0.0005)), "1969-12-31T23:59:59.999Z", "rounded down")
    }

    /// The RFC 3339 reader takes the whole string (both cases of `T` and `Z`), a four-digit year, and nothing after
    /// the time zone.
    func testRFC3339ParsingTakesTheWholeStringOnly() {
        XCTAssertEqual(Timestamps.parseRFC3339("2024-05-01t12:34:56.789z")?.timeIntervalSince1970 ?? 0, 1_714_566_896.789, accuracy: 0.0005)
        XCTAssertEqual(Timestamps.parseRFC3339("2024-05-01T12:34:56.789-01:30")?.timeIntervalSince1970 ?? 0, 1_714_572_296.789, accuracy: 0.0005)
        XCTAssertNil(Timestamps.parseRFC3339("2024-05-01T12:34:56.789Zjunk"))
        XCTAssertNil(Timestamps.parseRFC3339("24-05-01T12:34:56Z"))
        XCTAssertNil(Timestamps.parseRFC3339("2024-05-01T12:34:56"))
        XCTAssertNil(Timestamps.parseRFC3339("2024-05-01T12:34:56.Z"))
        XCTAssertNil(Timestamps.parseRFC3339(""))
        XCTAssertNil(Timestamps.parseRFC3339(String(repeating: "2024-05-01T12:34:56Z", count: 1_000)))
        let now = Date(timeIntervalSince1970: 1_714_566_896.789)
        XCTAssertEqual(Timestamps.parseRFC3339(Timestamps.rfc3339(now))?.timeIntervalSince1970 ?? 0, now.timeIntervalSince1970, accuracy: 0.0005)
    }

    // MARK: - Files on disk and options

    /// A run's scope.json is read back by the crash join: a session start of 1e300 or -1e300 must still give
    /// a valid `crashed` update.
    func testSessionUpdateFromAbsurdScopeNumbers() throws {
        for started in [1e300, -1e300, 1.7e308] {
            var session = SessionState(did: nil, started: Date())
            session.started = started
            let update = session.update(.crashed, now: Date(timeIntervalSince1970: 1e300), release: "r", environment: nil)
            XCTAssertEqual(update.timestamp, "9999-12-31T23:59:59.999Z")
            XCTAssertEqual(update.seq, Int64.max)
            XCTAssertNotEqual(String(decoding: update.jsonData(), as: UTF8.self), "{}", "encodes (no NaN/inf)")
        }
    }

    func testBatchFilesWithAbsurdLengthFieldsAreSurvived() throws {
        let storage = dirs.make()
        let pending = storage.appendingPathComponent("pending")
        try FileManager.default.createDirectory(at: pending, withIntermediateDirectories: true)
        let bodies = ["VAKA-BATCH 1\n99999999999999999999\nx\n", "VAKA-BATCH 1\n-5\nx\n",
                      "VAKA-BATCH 1\n999999999999\nx\n", "VAKA-BATCH 1\n9223372036854775807\n",
                      "VAKA-BATCH 1\n" + String(repeating: "9", count: 10_000) + "\n"]
        for (i, body) in bodies.enumerated() {
            try Data(body.utf8).write(to: pending.appendingPathComponent(String(format: "%016d-0000000%d.batch", i + 1, i)))
        }
        // The highest sequence a name can carry: the next one must not overflow.
        try Data("VAKA-BATCH 1\n".utf8).write(to: pending.appendingPathComponent("9999999999999999-00000000.batch"))
        let q = try PersistentQueue(storageDirectory: storage, log: log.sink)
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: CurlTransport(timeout: 2),
                         clock: clock, requestTimeout: 2, log: log.sink)
        // No intact envelope: set aside as .bad (never sendable, so never retried), the empty intact one deleted.
        for ref in q.sealedBatches() { XCTAssertNil(q.records(of: ref)) }
        XCTAssertEqual(q.stats.damagedFiles, bodies.count)
        XCTAssertEqual(q.stats.setAsideFiles, bodies.count)
        XCTAssertTrue(q.isEmpty)
        let left = try FileManager.default.contentsOfDirectory(atPath: pending.path).sorted()
        XCTAssertEqual(left.filter { $0.hasSuffix(".batch.bad") }.count, bodies.count, "\(left)")
        XCTAssertFalse(left.contains { $0.hasSuffix(".batch") }, "\(left)")
        try q.enqueue(eventEnvelope(1))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(server), [eventID(1)])
    }

    func testNaNNegativeZeroAndHugeOptionsAreClamped() throws {
        let variants: [(TimeInterval, Int, TimeInterval)] = [
            (.nan, 0, .nan), (-1, -5, -1), (0, Int.min, 0), (1e300, Int.max, 1e300), (.infinity, 1, .infinity),
        ]
        for (interval, batch, timeout) in variants {
            let d = try makeDelivery(flushInterval: interval, maxBatchSize: batch, requestTimeout: timeout)
            XCTAssertTrue((0.1...day).contains(d.configuration.flushInterval), "\(interval)")
            XCTAssertTrue((1...1_000).contains(d.configuration.maxBatchSize), "\(batch)")
            XCTAssertTrue((1...300).contains(d.configuration.requestTimeout), "\(timeout)")
            try d.submit(eventEnvelope(batch & 0xff))
            XCTAssertTrue(d.flush(timeout: 20), "delivers with clamped options \(interval) \(batch) \(timeout)")
        }
        XCTAssertEqual(server.requests.count, variants.count)
        XCTAssertTrue(log.lines.contains { $0.contains("flushInterval nan") }, "\(log.lines)")
    }

    func testFlushTimeoutsFromOutsideAreBounded() throws {
        let d = try makeDelivery()
        for timeout in [TimeInterval.nan, -1, -.infinity, 0, 1e300, .infinity, .greatestFiniteMagnitude] {
            XCTAssertTrue(d.flush(timeout: timeout), "empty queue: true at once for \(timeout)")
        }
    }

    func testDegenerateProcMapsSpanDoesNotTrap() {
        // loadedImages comes from the C runtime's image list; converting it must not trap on any entry.
        XCTAssertFalse(StackCapture.loadedImages().isEmpty)
        XCTAssertThrowsError(try Gzip.decompress(Data()), "empty input is an error, not a trap")
    }
}
