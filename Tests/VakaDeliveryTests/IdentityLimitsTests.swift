import XCTest
import VakaTestSupport
@testable import Vaka
#if canImport(Glibc)
import Glibc
#endif

/// Every value that goes into an event is bounded,
/// identity fields included (release, environment, dist, server_name, sdk, tags and user id from options or
/// calls, the scope of a crashed run read back from disk), so no event stays over its byte budget because of
/// one, and what the server gets is what Relay accepts. Real ``Client`` against the loopback
/// ``TestHTTPServer`` answering 413 for any item over 1 MiB (as Sentry does); accepted events checked with
/// Relay's `StoreNormalizer` when `VAKA_RELAY_PYTHON` is set.
final class IdentityLimitsTests: LoopbackServerTestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        server.responder = { request in
            guard let body = try? Gzip.decompress(request.body), let envelope = try? Envelope(data: body) else { return nil }
            return envelope.items.contains { $0.payload.count > 1 << 20 } ? .status(413) : nil
        }
    }

    /// A client for `options` bounded as ``Vaka/start(_:)`` bounds them; the notes `start` would print.
    private func makeClient(_ options: Vaka.Options, storage: URL) throws -> (Client, [String]) {
        var notes: [String] = []
        let bounded = options.bounded { notes.append($0) }
        let client = try Client(options: bounded, storage: storage, runID: "RUN-\(UUID().uuidString)",
                                dsn: try DSN(server.dsn), log: log.sink)
        return (client, notes)
    }

    private func received(_ type: EnvelopeItem.ItemType) -> [Data] {
        server.requests.compactMap { receivedEnvelope($0) }.flatMap { $0.items.filter { $0.type == type }.map(\.payload) }
    }

    private func json(_ data: Data) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// A 1.2 M-character release ending in a newline and a 100,000-character environment with a `/`: the
    /// server gets an event and a session whose release and environment Relay keeps (200 and 64 bytes, `_`
    /// for refused characters); one note each.
    func testHugeReleaseAndEnvironmentOptionsReachTheServerAsRelayAcceptsThem() throws {
        let storage = dirs.make()
        let (client, notes) = try makeClient(Vaka.Options(dsn: server.dsn, release: String(repeating: "r", count: 1_200_000) + "\n",
                                                          environment: "prod/" + String(repeating: "e", count: 100_000),
                                                          storageDirectory: storage), storage: storage)
        XCTAssertEqual(notes.count, 2, "\(notes)")
        client.begin()
        client.capture(message: "boom", level: .error)
        XCTAssertTrue(client.flush(timeout: 20))
        client.end(timeout: 2)
        let events = received(.event)
        XCTAssertEqual(events.count, 1)
        let event = try json(try XCTUnwrap(events.first))
        XCTAssertEqual(event["release"] as? String, String(repeating: "r", count: 200))
        XCTAssertEqual(event["environment"] as? String, "prod_" + String(repeating: "e", count: 59))
        let sessions = try received(.session).map(json)
        XCTAssertFalse(sessions.isEmpty)
        for session in sessions {
            XCTAssertEqual((session["attrs"] as? [String: Any])?["release"] as? String, String(repeating: "r", count: 200))
        }
        let problems = try relayProblems(events, scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }

    /// 10,000 tags of 300-character keys and values through `Options.tags`: each cut to 200 at start, the first
    /// 200 by key order kept (a run keeps at most 200 tags, `RunScope.maxTags`), then as many as the byte budget
    /// holds (values shortened further first); the event is accepted (no 413) and Relay-valid.
    func testAHugeTagSetFromOptionsIsCutAndFitsTheBudget() throws {
        let storage = dirs.make()
        var tags: [String: String] = [:]
        for i in 0..<10_000 { tags[String(format: "%05d", i) + String(repeating: "k", count: 295)] = String(repeating: "v", count: 300) }
        let (client, notes) = try makeClient(Vaka.Options(dsn: server.dsn, sessionTracking: false, tags: tags,
                                                          storageDirectory: storage), storage: storage)
        XCTAssertEqual(notes, ["10000 tag(s) cut to 200 characters per key and value (Sentry's tag limits)",
                               "9800 of 10000 tags left out: a run keeps at most 200 tags (the first by key order)"])
        client.begin()
        client.capture(message: "boom", level: .error)
        XCTAssertTrue(client.flush(timeout: 30))
        client.end(timeout: 2)
        let events = received(.event)
        XCTAssertEqual(events.count, 1, "one request: never over the server's limit (a 413 gives a smaller retry)")
        let payload = try XCTUnwrap(events.first)
        XCTAssertLessThanOrEqual(payload.count, EventBudget.standard.maxEventBytes)
        let kept = try XCTUnwrap(try json(payload)["tags"] as? [String: String])
        XCTAssertGreaterThan(kept.count, 100)
        XCTAssertLessThanOrEqual(kept.count, RunScope.maxTags)
        XCTAssertTrue(kept.allSatisfy { $0.key.count <= 200 && $0.value.count <= 200 })
        let problems = try relayProblems(events, scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }

    /// A crashed run whose `scope.json` holds a 400 k-character release and environment (under the 1 MiB cap on
    /// `scope.json`, above which the scope is ignored; written by an older
    /// Vaka, or tampered with): the fatal event is bounded all the same and accepted, and only then is the
    /// report deleted — not given up as "cannot make it smaller".
    func testAHugeReleaseInACrashedRunsScopeStillGivesAnAcceptedCrash() throws {
        let storage = dirs.make()
        let runID = UUID().uuidString
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        let report = crashes.appendingPathComponent("\(runID).crash")
        try exampleCrashReport(runID: runID).write(to: report, atomically: true, encoding: .utf8)
        do {
            let dir = try RunDirectory(storage: storage, runID: runID)
            try dir.write(RunScope(runID: runID, release: String(repeating: "r", count: 400_000),
                                   environment: String(repeating: "e", count: 400_000), tags: [:], userID: nil, session: nil))
        }
        let (client, _) = try makeClient(Vaka.Options(dsn: server.dsn, sessionTracking: false, storageDirectory: storage), storage: storage)
        client.begin()
        XCTAssertTrue(client.flush(timeout: 20))
        client.end(timeout: 2)
        let events = received(.event)
        XCTAssertEqual(events.count, 1, "one request: no 413 and smaller retry")
        let event = try json(try XCTUnwrap(events.first))
        XCTAssertEqual(event["level"] as? String, "fatal")
        XCTAssertEqual((event["release"] as? String)?.utf8.count, 200)
        XCTAssertEqual((event["environment"] as? String)?.utf8.count, 64)
        XCTAssertFalse(FileManager.default.fileExists(atPath: report.path), "accepted: the report is deleted")
        XCTAssertFalse(FileManager.default.fileExists(atPath: report.path + ".dropped"), "\(log.lines.suffix(5))")
        let problems = try relayProblems(events, scratch: dirs.make("relay"))
        XCTAssertEqual(problems, [], "Relay's normalizer")
    }

    /// Every identity key over its limit at once (dist, server_name, sdk name and 100,000 sdk packages, a long
    /// event_id/platform/level/type): ``EventBudget/fit(_:)`` brings the event within the budget.
    func testEveryIdentityFieldIsBoundedByTheBudget() throws {
        let huge = String(repeating: "x", count: 1_000_000)
        let packages = (0..<100_000).map { JSONValue.object(["name": .string("p\($0)"), "version": .string("1")]) }
        let event: [String: JSONValue] = [
            "event_id": .string(huge), "level": .string(huge), "platform": .string(huge), "type": .string(huge),
            "timestamp": .string(huge), "release": .string(huge), "environment": .string(huge), "dist": .string(huge),
            "server_name": .string(huge), "sdk": .object(["name": .string(huge), "version": .string(huge), "packages": .array(packages)]),
            "logentry": .object(["formatted": .string("boom")])]
        let outcome = try EventBudget.standard.fit(json: event)
        XCTAssertTrue(outcome.fits, outcome.summary)
        XCTAssertLessThanOrEqual(outcome.data.count, EventBudget.standard.maxEventBytes)
        let fitted = try json(outcome.data)
        XCTAssertEqual((fitted["dist"] as? String)?.count, 64)
        XCTAssertEqual((fitted["server_name"] as? String)?.count, 200)
        XCTAssertEqual(((fitted["sdk"] as? [String: Any])?["packages"] as? [Any])?.count, 100)
        XCTAssertEqual((fitted["release"] as? String)?.utf8.count, 200)
    }
}
