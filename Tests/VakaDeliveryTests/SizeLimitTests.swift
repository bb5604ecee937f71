import XCTest
import VakaTestSupport
@testable import Vaka
#if canImport(Glibc)
import Glibc
#endif

/// The server's size limits: every event is built within ``EventBudget`` (900 KiB JSON,
/// 180 KiB gzipped, Sentry's per-field limits), a 413 for one event gets a smaller retry down to a floor, and
/// a crash report is deleted only once its event was accepted (or set aside with the reason when given up).
/// Against the loopback ``TestHTTPServer`` with size rules like Sentry's (413 for any item over 1 MiB) and
/// stricter ones; every event the server accepted is checked with Relay's `StoreNormalizer`.
final class SizeLimitTests: LoopbackServerTestCase {

    // MARK: - Helpers

    /// 413 for any request whose envelope has an item over `limit` bytes (as Sentry does for events over
    /// 1 MB), 200 otherwise.
    private func reject(itemsOver limit: Int) {
        server.responder = { request in
            guard let body = try? Gzip.decompress(request.body), let envelope = try? Envelope(data: body) else { return nil }
            return envelope.items.contains { $0.payload.count > limit } ? .status(413) : nil
        }
    }

    /// The event payloads the server received with their envelope's `event_id`, in request order.
    private func receivedEvents() -> [(id: String?, payload: Data)] {
        server.requests.compactMap { receivedEnvelope($0) }.flatMap { envelope in
            envelope.items.filter { $0.type == .event }.map { (id: envelope.header.eventID, payload: $0.payload) }
        }
    }

    private func json(_ data: Data) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    private func makeClient(_ storage: URL, runID: String = "RUN-\(UUID().uuidString)") throws -> Client {
        var options = Vaka.Options(dsn: server.dsn, sessionTracking: false, storageDirectory: storage)
        options.journalSize = 4 << 20  // a breadcrumb ring (3/8) that holds 100 breadcrumbs of 8 KiB
        return try Client(options: options, storage: storage, runID: runID, dsn: try DSN(server.dsn), log: log.sink)
    }

    /// Random letters and digits: text that compresses about as badly as real text can.
    private func randomText(_ count: Int) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
        var g = SystemRandomNumberGenerator()
        return String(decoding: (0..<count).map { _ in alphabet[Int(g.next() % 62)] }, as: UTF8.self)
    }

    /// Writes the example report of docs/report-format.md as `<storage>/crashes/<run-id>.crash` and, with
    /// `breadcrumbs`, the crashed run's directory (scope and breadcrumbs); returns the report's path and
    /// the crash's event id.
    private func plantCrash(_ storage: URL, breadcrumbs: [Breadcrumb] = []) throws -> (report: URL, runDirectory: URL, eventID: String) {
        let runID = UUID().uuidString
        let text = try exampleCrashReport(runID: runID)
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        let report = crashes.appendingPathComponent("\(runID).crash")
        try text.write(to: report, atomically: true, encoding: .utf8)
        do {
            let dir = try RunDirectory(storage: storage, runID: runID)  // its lock is released when it goes
            try dir.write(RunScope(runID: runID, release: "crashed@1.0", environment: "production",
                                   tags: ["flavor": "free"], userID: "user-1", session: nil))
            // A journal big enough for every breadcrumb whole (3/8 of 8 MiB hold 100 × 20 KB).
            let journal = try Journal(path: dir.url.appendingPathComponent("journal"), size: 8 << 20)
            for crumb in breadcrumbs { XCTAssertNotNil(journal.append(crumb)) }
            journal.close()
        }
        return (report, RunDirectory.root(storage).appendingPathComponent(runID),
                runID.replacingOccurrences(of: "-", with: "").lowercased())
    }

    // MARK: - Per-field limits and the budget, through the SDK against a server that rejects items over 1 MiB

    func testFiveMegabyteMessageIsCutToSentrysMessageLimitAndAccepted() throws {
        reject(itemsOver: 1 << 20)
        let client = try makeClient(dirs.make())
        client.capture(message: String(repeating: "long message ", count: 5_000_000 / 13), level: .error)
        XCTAssertTrue(client.flush(timeout: 20))
        client.end(timeout: 2)
        let events = receivedEvents()
        XCTAssertEqual(events.count, 1, "sent once, accepted")
        XCTAssertFalse(server.requests.isEmpty)
        let event = try json(try XCTUnwrap(events.first).payload)
        let message = try XCTUnwrap(dig(event, "logentry", "formatted") as? String)
        XCTAssertEqual(message.unicodeScalars.count, EventBudget.maxMessageChars)
        XCTAssertTrue(message.hasSuffix("..."))
        XCTAssertLessThan(try XCTUnwrap(events.first).payload.count, 64 * 1024)
        let problems = try relayProblems(events.map(\.payload), scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }

    func testTenThousandTagsAreCutToTheBudgetAndEachTagToTwoHundredCharacters() throws {
        reject(itemsOver: 1 << 20)
        let client = try makeClient(dirs.make())
        var tags: [String: String] = [:]
        for i in 0..<10_000 { tags[String(format: "tag-%05d", i) + String(repeating: "k", count: 250)] = randomText(300) }
        client.capture(message: "many tags", level: .info, tags: tags)
        XCTAssertTrue(client.flush(timeout: 30))
        client.end(timeout: 2)
        let events = receivedEvents()
        XCTAssertEqual(events.count, 1)
        let payload = try XCTUnwrap(events.first).payload
        XCTAssertLessThanOrEqual(payload.count, EventBudget.standard.maxEventBytes)
        XCTAssertLessThanOrEqual(try Gzip.compress(payload).count, EventBudget.standard.maxCompressedBytes)
        let kept = try XCTUnwrap(try json(payload)["tags"] as? [String: String])
        XCTAssertGreaterThan(kept.count, 10, "the first tags (in key order) are kept")
        XCTAssertLessThan(kept.count, 10_000)
        XCTAssertNotNil(kept.keys.first { $0.hasPrefix("tag-00000") })
        for (k, v) in kept {
            XCTAssertLessThanOrEqual(k.unicodeScalars.count, EventBudget.maxTagChars)
            XCTAssertLessThanOrEqual(v.unicodeScalars.count, EventBudget.maxTagChars)
        }
        XCTAssertTrue(log.lines.contains { $0.contains("trimmed to the size budget") }, "\(log.lines)")
        let problems = try relayProblems([payload], scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }

    func testFiveThousandFramesKeepTheOldestAndTheNewestAndSaySoInTheEvent() throws {
        reject(itemsOver: 1 << 20)
        let client = try makeClient(dirs.make())
        let frames = (0..<5000).map { i in
            Frame(instructionAddr: HexAddress(UInt64(0x10000 + i * 16)), package: "/usr/bin/app",
                  function: "function_number_\(i)_" + String(repeating: "x", count: 200), inApp: true)
        }
        client.capture(error: DeepError.tooDeep, stack: (Stacktrace(frames: frames), []))
        XCTAssertTrue(client.flush(timeout: 20))
        client.end(timeout: 2)
        let events = receivedEvents()
        XCTAssertEqual(events.count, 1)
        let event = try json(try XCTUnwrap(events.first).payload)
        let sent = try XCTUnwrap(dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        XCTAssertEqual(sent.count, EventBudget.maxFrames)
        XCTAssertEqual(sent.first?["function"] as? String, frames.first?.function, "the oldest frame is kept")
        XCTAssertEqual(sent.last?["function"] as? String, frames.last?.function, "the newest frame is kept")
        XCTAssertEqual(sent[124]["function"] as? String, frames[124].function)
        XCTAssertEqual(sent[125]["function"] as? String, frames[4875].function)
        XCTAssertEqual(dig(event, "extra", "frames_omitted") as? Int, 4750)
        let problems = try relayProblems(events.map(\.payload), scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }

    func testBudgetTrimsBreadcrumbsFirstThenStringsThenFramesAndTheCrashLast() throws {
        let frames: [JSONValue] = (0..<200).map { i in .object(["instruction_addr": .string(String(format: "0x%x", 0x1000 + i)),
                                                                 "function": .string("f\(i)"), "in_app": .bool(true)]) }
        let crumbs: [JSONValue] = (0..<100).map { i in .object(["timestamp": .double(Double(i)), "type": .string("default"),
                                                                "message": .string("#\(i) " + randomText(4000))]) }
        let event: [String: JSONValue] = [
            "event_id": .string(String(repeating: "ab", count: 16)), "platform": .string("native"), "level": .string("fatal"),
            "exception": .object(["values": .array([.object(["type": .string("SIGSEGV"), "value": .string("crash"),
                                                             "stacktrace": .object(["frames": .array(frames)])])])]),
            "breadcrumbs": .object(["values": .array(crumbs)]),
            "extra": .object(["note": .string(randomText(10_000))]),
        ]
        // 1. Breadcrumbs only, newest kept.
        var outcome = try EventBudget(maxEventBytes: 200 * 1024, maxCompressedBytes: 200 * 1024).fit(json: event)
        var out = try json(outcome.data)
        let kept = try XCTUnwrap(dig(out, "breadcrumbs", "values") as? [[String: Any]])
        XCTAssertTrue(outcome.fits)
        XCTAssertGreaterThan(kept.count, 10)
        XCTAssertLessThan(kept.count, 100)
        XCTAssertTrue((kept.last?["message"] as? String ?? "").hasPrefix("#99 "), "the newest breadcrumb is kept")
        XCTAssertEqual(dig(out, "extra", "breadcrumbs_omitted") as? Int, 100 - kept.count)
        XCTAssertEqual((dig(out, "extra", "note") as? String)?.count, 10_000, "strings are cut only after all breadcrumbs")
        XCTAssertEqual((dig(out, "exception", "values", 0, "stacktrace", "frames") as? [Any])?.count, 200)
        // 2. No breadcrumbs left, long strings cut, frames whole.
        outcome = try EventBudget(maxEventBytes: 20 * 1024, maxCompressedBytes: 20 * 1024).fit(json: event)
        out = try json(outcome.data)
        XCTAssertTrue(outcome.fits)
        XCTAssertNil(out["breadcrumbs"])
        XCTAssertLessThanOrEqual((dig(out, "extra", "note") as? String)?.count ?? 0, 4096)
        XCTAssertEqual((dig(out, "exception", "values", 0, "stacktrace", "frames") as? [Any])?.count, 200)
        // 3. Frames: the oldest and the newest halves; the exception itself stays.
        outcome = try EventBudget(maxEventBytes: 3 * 1024, maxCompressedBytes: 3 * 1024).fit(json: event)
        out = try json(outcome.data)
        XCTAssertTrue(outcome.fits, outcome.summary)
        let sent = try XCTUnwrap(dig(out, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        XCTAssertLessThan(sent.count, 200)
        XCTAssertEqual(sent.first?["function"] as? String, "f0")
        XCTAssertEqual(sent.last?["function"] as? String, "f199")
        XCTAssertEqual(dig(out, "extra", "frames_omitted") as? Int, 200 - sent.count)
        XCTAssertEqual(dig(out, "exception", "values", 0, "type") as? String, "SIGSEGV")
        XCTAssertEqual(dig(out, "exception", "values", 0, "value") as? String, "crash")
        XCTAssertLessThanOrEqual(outcome.data.count, 3 * 1024)
        // Unchanged when within the budget: the very same bytes.
        let small = Event(eventID: "x", level: .error, logentry: LogEntry(formatted: "hi"))
        XCTAssertEqual(EventBudget.standard.fit(small).data, try small.jsonData(encoding: .wire))
    }

    // MARK: - 413 → a smaller retry

    func test413ForAnythingOver100KBGetsSmallerRetriesUntilAccepted() throws {
        reject(itemsOver: 100_000)
        let client = try makeClient(dirs.make())
        for i in 0..<100 { client.addBreadcrumb(Breadcrumb(timestamp: Double(i), category: "big", message: "#\(i) " + randomText(20_000))) }
        client.capture(message: "after big breadcrumbs", level: .error)
        XCTAssertTrue(client.flush(timeout: 30))
        let stats = try XCTUnwrap(client.delivery.uploader?.stats)
        client.end(timeout: 2)
        let events = receivedEvents()
        XCTAssertGreaterThanOrEqual(events.count, 2, "at least one 413 and one retry")
        XCTAssertEqual(Set(events.map(\.id)).count, 1, "the same event_id every time")
        let sizes = events.map(\.payload.count)
        XCTAssertEqual(sizes, sizes.sorted(by: >), "each retry smaller")
        XCTAssertEqual(Set(sizes).count, sizes.count, "never the same item twice")
        XCTAssertLessThanOrEqual(sizes.last ?? .max, 100_000)
        XCTAssertGreaterThan(sizes.first ?? 0, 100_000)
        XCTAssertEqual(stats.retrimmed, events.count - 1)
        XCTAssertEqual(stats.droppedTooLarge, 0)
        let accepted = try json(try XCTUnwrap(events.last).payload)
        XCTAssertEqual(dig(accepted, "logentry", "formatted") as? String, "after big breadcrumbs")
        let crumbs = try XCTUnwrap(dig(accepted, "breadcrumbs", "values") as? [[String: Any]])
        XCTAssertTrue((crumbs.last?["message"] as? String ?? "").hasPrefix("#99 "), "the newest breadcrumbs stay")
        XCTAssertGreaterThan(dig(accepted, "extra", "breadcrumbs_omitted") as? Int ?? 0, 50)
        let problems = try relayProblems([try XCTUnwrap(events.last).payload], scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }

    // MARK: - Crash reports: deleted only once accepted; given up with a reason

    func testServerAlways413GivesTheCrashUpWithAReasonAndNeverRetriesForever() throws {
        server.responder = { _ in .status(413) }
        let storage = dirs.make()
        let crumbs = (0..<100).map { Breadcrumb(timestamp: Double($0), category: "big", message: randomText(20_000)) }
        let crash = try plantCrash(storage, breadcrumbs: crumbs)
        let client = try makeClient(storage)
        client.begin()
        XCTAssertTrue(client.flush(timeout: 30), "nothing left: the event was given up")
        let stats = try XCTUnwrap(client.delivery.uploader?.stats)
        client.end(timeout: 2)
        let events = receivedEvents()
        XCTAssertEqual(Set(events.map(\.id)), [crash.eventID])
        let sizes = events.map(\.payload.count)
        XCTAssertEqual(sizes, sizes.sorted(by: >), "each retry smaller")
        XCTAssertEqual(Set(sizes).count, sizes.count, "never the same item twice")
        XCTAssertLessThanOrEqual(events.count, 6, "bounded: halving from ≤ 900 KiB to the 16 KiB floor")
        XCTAssertGreaterThanOrEqual(sizes.last ?? 0, EventBudget.floorBytes)
        XCTAssertEqual(stats.droppedTooLarge, 1)
        XCTAssertFalse(FileManager.default.fileExists(atPath: crash.report.path))
        let dropped = crash.report.path + ".dropped"
        XCTAssertTrue(FileManager.default.fileExists(atPath: dropped), "the report is kept aside")
        let reason = try String(contentsOfFile: dropped + ".reason", encoding: .utf8)
        XCTAssertTrue(reason.contains("413") && reason.contains(crash.eventID), reason)
        XCTAssertFalse(FileManager.default.fileExists(atPath: crash.runDirectory.path))

        // The next launch neither sends it again nor touches the dropped report.
        let before = server.requests.count
        let again = try makeClient(storage)
        again.begin()
        XCTAssertTrue(again.flush(timeout: 5))
        again.end(timeout: 2)
        XCTAssertEqual(server.requests.count, before)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dropped))
    }

    func testSmallCrashRejectedWith413IsGivenUpAtOnceBelowTheFloor() throws {
        server.responder = { _ in .status(413) }
        let storage = dirs.make()
        let crash = try plantCrash(storage)
        let client = try makeClient(storage)
        client.begin()
        XCTAssertTrue(client.flush(timeout: 20))
        client.end(timeout: 2)
        XCTAssertEqual(receivedEvents().count, 1, "half of a small event is under the floor: no retry")
        let reason = try String(contentsOfFile: crash.report.path + ".dropped.reason", encoding: .utf8)
        XCTAssertTrue(reason.contains("floor"), reason)
    }

    func testCrashReportStaysUntilTheServerAcceptsAndIsNotQueuedTwice() throws {
        server.responder = { _ in .status(503) }
        let storage = dirs.make()
        let crumbs = (0..<100).map { Breadcrumb(timestamp: Double($0), category: "big", message: "#\($0) " + randomText(20_000)) }
        let crash = try plantCrash(storage, breadcrumbs: crumbs)
        // As the crash handler leaves it: 64 KiB of reserved blocks past the report's end.
        // (util-linux's fallocate(1): Swift's Glibc module does not import fallocate(2).)
        let reserve = Process()
        reserve.executableURL = URL(fileURLWithPath: "/usr/bin/fallocate")
        reserve.arguments = ["--keep-size", "--length", "65536", crash.report.path]
        try reserve.run()
        reserve.waitUntilExit()
        XCTAssertEqual(reserve.terminationStatus, 0)
        var planted = stat()
        XCTAssertEqual(stat(crash.report.path, &planted), 0)
        XCTAssertGreaterThanOrEqual(Int(planted.st_blocks) * 512, 64 * 1024)

        // Launch 1: the server answers 503; the crash is queued, the report and the run directory stay.
        let first = try makeClient(storage)
        first.begin()
        XCTAssertFalse(first.flush(timeout: 1))
        first.end(timeout: 1)
        XCTAssertTrue(FileManager.default.fileExists(atPath: crash.report.path), "not accepted yet: the report stays")
        // ...without the reserve's blocks past its end, and with its modification time (the cap's order).
        var waiting = stat()
        XCTAssertEqual(stat(crash.report.path, &waiting), 0)
        XCTAssertEqual(waiting.st_size, planted.st_size)
        XCTAssertLessThanOrEqual(Int(waiting.st_blocks) * 512, (Int(waiting.st_size) + 4095) / 4096 * 4096,
                                 "a waiting \(waiting.st_size)-byte report holds \(Int(waiting.st_blocks) * 512) bytes of disk")
        XCTAssertEqual(waiting.st_mtim.tv_sec, planted.st_mtim.tv_sec)
        XCTAssertEqual(waiting.st_mtim.tv_nsec, planted.st_mtim.tv_nsec)
        XCTAssertTrue(FileManager.default.fileExists(atPath: crash.runDirectory.path))
        XCTAssertEqual(receivedEvents().map(\.id), [crash.eventID])
        XCTAssertFalse(batchFiles(storage).isEmpty)

        // Launch 2: the envelope still in pending/ is sent as it is; the report goes only after the 200.
        server.responder = nil
        let second = try makeClient(storage)
        second.begin()
        second.waitForStart()  // the crash join runs on the vaka.start thread
        // The delivery thread sends pending/ from the start, the join runs beside it: either the join looks first
        // (it finds the event queued and says so) or the 200 comes first (the ledger hands the join that outcome
        // and nothing is logged). Neither order is guaranteed; in both the crash is not queued again (below).
        let sentBeforeJoinEnded = receivedEvents().count == 2
        XCTAssertTrue(log.lines.contains { $0.contains("already queued as event \(crash.eventID)") } || sentBeforeJoinEnded,
                      "no 200 before the join looked, yet it did not find the event queued: \(log.lines)")
        XCTAssertTrue(second.flush(timeout: 20))
        second.end(timeout: 2)
        let events = receivedEvents()
        XCTAssertEqual(events.map(\.id), [crash.eventID, crash.eventID], "one 503, one 200: not queued twice")
        XCTAssertEqual(events[0].payload, events[1].payload)
        XCTAssertFalse(FileManager.default.fileExists(atPath: crash.report.path), "accepted: the report is deleted")
        XCTAssertFalse(FileManager.default.fileExists(atPath: crash.runDirectory.path))
        XCTAssertFalse(FileManager.default.fileExists(atPath: crash.report.path + ".dropped"))
        let event = try json(events[1].payload)
        XCTAssertEqual(event["level"] as? String, "fatal")
        XCTAssertEqual(dig(event, "tags", "flavor") as? String, "free", "the crashed run's scope")
        let kept = try XCTUnwrap(dig(event, "breadcrumbs", "values") as? [[String: Any]])
        XCTAssertGreaterThan(kept.count, 0)
        XCTAssertLessThan(kept.count, 100, "breadcrumbs reduced to the budget")
        XCTAssertTrue((kept.last?["message"] as? String ?? "").hasPrefix("#99 "))
        XCTAssertLessThanOrEqual(try Gzip.compress(events[1].payload).count, EventBudget.standard.maxCompressedBytes)
        let problems = try relayProblems([events[1].payload], scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }
}

/// The error of the 5,000-frame test.
private enum DeepError: Error { case tooDeep }

