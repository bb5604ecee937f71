import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka

/// Client reports (``ClientReports``): counted at the drop points, kept across runs in
/// `<storage>/client_reports.json`, sent with the next envelope that goes out, never lost when that envelope
/// fails and never sent twice once it went out; their item is what sentry_sdk 2.75 writes. And `SENTRY_DSN`
/// read by the SDK in the harness, delivering to a loopback server without `--dsn`.
final class ClientReportTests: XCTestCase {
    let dirs = ScratchDirs()
    var server: TestHTTPServer!
    var clock: ManualClock!

    override func setUpWithError() throws {
        server = try TestHTTPServer()
        clock = ManualClock()
    }

    override func tearDown() {
        server.stop()
        dirs.removeAll()
    }

    /// The client report items of `envelope`, as `reason/category` → quantity.
    private func reported(_ envelope: Envelope?) -> [String: Int] {
        var out: [String: Int] = [:]
        for item in envelope?.items ?? [] where item.type == .clientReport {
            let object = (try? JSONSerialization.jsonObject(with: item.payload)) as? [String: Any] ?? [:]
            XCTAssertNotNil(object["timestamp"] as? Double)
            for entry in object["discarded_events"] as? [[String: Any]] ?? [] {
                out["\(entry["reason"] as? String ?? "?")/\(entry["category"] as? String ?? "?")", default: 0] += entry["quantity"] as? Int ?? -1
            }
        }
        return out
    }

    func testAReportGoesOutOnceWithTheNextAcceptedEnvelopeAndComesBackWhenItFails() throws {
        let storage = dirs.make("reports")
        let reports = ClientReports(storageDirectory: storage)
        let q = try PersistentQueue(storageDirectory: storage)
        let u = Uploader(queue: q, dsn: try DSN(server.dsn), transport: CurlTransport(timeout: 5), clock: clock,
                         requestTimeout: 5, clientReports: reports)
        reports.record(.sampleRate, category: "error", quantity: 2)
        reports.record(.beforeSend, item: .logs(Data(#"{"version":2,"items":[{},{},{}]}"#.utf8), count: 3))
        let expected = ["sample_rate/error": 2, "before_send/log_item": 3, "before_send/log_byte": 32]

        // 503: the envelope and its report both stay.
        server.enqueue(.status(503))
        try q.enqueue(sessionEnvelope(1))
        guard case .waiting = u.pump() else { return XCTFail("a 503 makes the uploader wait") }
        XCTAssertEqual(reported(receivedEnvelope(server.requests[0])), expected)
        XCTAssertEqual(reports.pendingCounts().count, 3, "put back")

        // A 400 for the next envelope: it is dropped (counted), the report is put back again.
        clock.advance(10)
        server.enqueue(.status(400))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(reported(receivedEnvelope(server.requests[1])), expected)

        // Accepted: the report (with the rejected envelope's session counted) goes out, once.
        try q.enqueue(sessionEnvelope(2))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(reported(receivedEnvelope(server.requests[2])), expected.merging(["send_error/session": 1]) { _, new in new })
        XCTAssertEqual(reports.pendingCounts().count, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: storage.appendingPathComponent("client_reports.json").path))
        try q.enqueue(sessionEnvelope(3))
        XCTAssertEqual(u.pump(), .idle)
        XCTAssertEqual(server.requests.count, 4)
        XCTAssertEqual(reported(receivedEnvelope(server.requests[3])), [:], "never sent twice")
    }

    func testCountsSurviveTheProcessAndAReportInFlightOfADeadProcessIsReclaimed() throws {
        let storage = dirs.make("persist")
        do {
            let first = ClientReports(storageDirectory: storage)
            first.record(.cacheOverflow, category: "error")  // the first drop is written at once
            first.record(.cacheOverflow, category: "error")  // within the second: held until persist()
            first.persist()
        }
        // A process that died with a report in flight (pid 0x7ffffffe does not exist).
        let url = storage.appendingPathComponent("client_reports.json")
        var file = ClientReports.File(data: try Data(contentsOf: url))
        XCTAssertEqual(file.pending, [ClientReports.Key(reason: "cache_overflow", category: "error"): 2])
        file.inFlight["2147483646:dead"] = [ClientReports.Key(reason: "send_error", category: "session"): 1]
        try file.encoded().write(to: url)

        let second = ClientReports(storageDirectory: storage)
        let ticket = try XCTUnwrap(second.take())
        XCTAssertEqual(ticket.counts, [ClientReports.Key(reason: "cache_overflow", category: "error"): 2,
                                       ClientReports.Key(reason: "send_error", category: "session"): 1])
        // Another value in this live process cannot take what travels: nothing is sent twice.
        XCTAssertNil(ClientReports(storageDirectory: storage).take())
        second.abort(ticket)
        let third = ClientReports(storageDirectory: storage)
        let again = try XCTUnwrap(third.take())
        XCTAssertEqual(again.counts, ticket.counts)
        third.commit(again)
        XCTAssertNil(ClientReports(storageDirectory: storage).take())
        XCTAssertFalse(FileManager.default.fileExists(atPath: url.path))
    }

    /// Outbox mode: a death after the outbox file carrying the client report is written and before the report
    /// is committed leaves both on disk (the state the test hook copies at that point, its entry then given a pid
    /// that does not exist). The next process finds the file the entry names and does not send the counts again;
    /// an entry whose file was never written goes back to `pending` and out with the next envelope.
    func testADeathBetweenTheOutboxWriteAndTheCommitSendsTheCountsOnce() throws {
        let storage = dirs.make("outbox-death")
        let url = storage.appendingPathComponent("client_reports.json")
        let atDeath = Locked<Data?>(nil)
        var config = Delivery.Configuration(storageDirectory: storage, dsn: nil)
        config.afterOutboxWrite = { _ in
            let data = try? Data(contentsOf: url)
            atDeath.withLock { $0 = data }
        }
        let first = try Delivery(configuration: config)
        first.clientReports.record(.sampleRate, category: "error")
        try first.submit(sessionEnvelope(1))
        var file = ClientReports.File(data: try XCTUnwrap(atDeath.withLock { $0 }, "the hook ran"))
        XCTAssertEqual(file.inFlight.count, 1)
        let (owner, counts) = try XCTUnwrap(file.inFlight.first)
        let carrier = try XCTUnwrap(file.carriers[owner], "the entry names its outbox file")
        XCTAssertEqual(Outbox(storageDirectory: storage).list().map(\.lastPathComponent), [carrier])
        file.inFlight = ["2147483646:dead": counts]
        file.carriers = ["2147483646:dead": carrier]
        try file.encoded().write(to: url)

        let second = try Delivery(configuration: .init(storageDirectory: storage, dsn: nil))
        try second.submit(sessionEnvelope(2))
        let outbox = Outbox(storageDirectory: storage)
        XCTAssertEqual(try outbox.list().map { reported(try outbox.read($0)) }, [["sample_rate/error": 1], [:]], "sent once")
        XCTAssertFalse(FileManager.default.fileExists(atPath: url.path), "the entry is settled")

        // The death came before the write: no such file, the counts go again.
        let reports = ClientReports(storageDirectory: storage)
        reports.record(.beforeSend, category: "error")
        let ticket = try XCTUnwrap(reports.take(carrierName: "20260101T000000.000Z-000009-x.envelope"))
        var unwritten = ClientReports.File(data: try Data(contentsOf: url))
        XCTAssertEqual(unwritten.carriers.count, 1)
        unwritten.inFlight = ["2147483646:dead": ticket.counts]
        unwritten.carriers = ["2147483646:dead": "20260101T000000.000Z-000009-x.envelope"]
        try unwritten.encoded().write(to: url)
        try Delivery(configuration: .init(storageDirectory: storage, dsn: nil)).submit(sessionEnvelope(3))
        XCTAssertEqual(try outbox.list().map { reported(try outbox.read($0)) }, [["sample_rate/error": 1], [:], ["before_send/error": 1]])
        XCTAssertFalse(FileManager.default.fileExists(atPath: url.path))
    }

    func testWithStorageThatCannotBeWrittenCountsStillGoOutFromMemory() throws {
        let reports = ClientReports(storageDirectory: URL(fileURLWithPath: "/proc/self/no-such-directory"))
        reports.record(.queueOverflow, category: "error", quantity: 3)
        let ticket = try XCTUnwrap(reports.take())
        XCTAssertTrue(ticket.inMemory)
        XCTAssertEqual(ticket.counts, [ClientReports.Key(reason: "queue_overflow", category: "error"): 3])
        XCTAssertNil(reports.take(), "one report travels at a time")
        reports.abort(ticket)
        let again = try XCTUnwrap(reports.take(), "put back in memory")
        XCTAssertEqual(again.counts, ticket.counts)
        reports.commit(again)
        XCTAssertNil(reports.take())
    }

    func testDropsAtTheQueueAndOutboxCapsAreCounted() throws {
        let storage = dirs.make("caps")
        let reports = ClientReports(storageDirectory: storage)
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 1, maxBatchFiles: 2,
                                    dropSink: { reason, records in reports.record(reason, serialized: records) })
        for n in 0..<4 { try q.enqueue(eventEnvelope(n, extra: [.session(Data("{}".utf8))])) }
        XCTAssertEqual(reports.pendingCounts(), [ClientReports.Key(reason: "cache_overflow", category: "error"): 2,
                                                 ClientReports.Key(reason: "cache_overflow", category: "session"): 2])
        let outboxStorage = dirs.make("outbox-cap")
        let outboxReports = ClientReports(storageDirectory: outboxStorage)
        var outbox = Outbox(storageDirectory: outboxStorage, maxFiles: 2)
        outbox.dropSink = { outboxReports.record(.cacheOverflow, serialized: $0) }
        for n in 0..<3 { try outbox.write(eventEnvelope(n)) }
        XCTAssertEqual(outboxReports.pendingCounts(), [ClientReports.Key(reason: "cache_overflow", category: "error"): 1])
    }

    /// The item sentry_sdk 2.75 writes for the same drops (its transport's `record_lost_event` and pending
    /// client report), parsed back by its `Envelope`: same item headers, same payload fields and entries.
    func testTheItemIsWhatSentrySDKWrites() throws {
        let python = try Peers.sentryPython()
        let storage = dirs.make("sdk-compare")
        let reports = ClientReports(storageDirectory: storage)
        reports.record(.sampleRate, category: "error")
        reports.record(.beforeSend, category: "error", quantity: 2)
        reports.record(.sendError, category: "session")
        let ticket = try XCTUnwrap(reports.take())
        let ours = storage.appendingPathComponent("ours.envelope")
        try Envelope(items: [.session(Data(#"{"sid":"x","status":"ok","attrs":{"release":"a@1"}}"#.utf8)), ticket.item]).serialized().write(to: ours)
        let script = """
            import json, sys
            import sentry_sdk
            from sentry_sdk.envelope import Envelope
            client = sentry_sdk.Client(dsn="http://key@127.0.0.1:9/1", send_client_reports=True)
            t = client.transport
            t.record_lost_event("sample_rate", data_category="error")
            t.record_lost_event("before_send", data_category="error")
            t.record_lost_event("before_send", data_category="error")
            t.record_lost_event("send_error", data_category="session")
            theirs = Envelope(items=[t._fetch_pending_client_report(force=True)])
            def describe(env):
                for item in env.items:
                    if item.type != "client_report": continue
                    p = json.loads(item.payload.get_bytes())
                    return {"headers": item.headers, "keys": sorted(p), "ts": type(p["timestamp"]).__name__,
                            "entries": sorted([sorted(e.items()) for e in p["discarded_events"]])}
            print(json.dumps({"sdk": sentry_sdk.VERSION,
                              "theirs": describe(Envelope.deserialize(theirs.serialize())),
                              "ours": describe(Envelope.deserialize(open(sys.argv[1], "rb").read()))}))
            """
        let (status, out) = runTool(python, ["-c", script, ours.path])
        XCTAssertEqual(status, 0, out)
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any], out)
        XCTAssertTrue((result["sdk"] as? String ?? "").hasPrefix("2."), "\(result["sdk"] ?? "?")")
        let theirs = try XCTUnwrap(result["theirs"] as? [String: Any])
        let mine = try XCTUnwrap(result["ours"] as? [String: Any])
        let theirHeaders = try XCTUnwrap(theirs["headers"] as? [String: Any])
        let myHeaders = try XCTUnwrap(mine["headers"] as? [String: Any])
        XCTAssertEqual(Set(myHeaders.keys), Set(theirHeaders.keys))
        XCTAssertEqual(myHeaders["type"] as? String, "client_report")
        XCTAssertEqual(myHeaders["content_type"] as? String, theirHeaders["content_type"] as? String)
        XCTAssertEqual(myHeaders["length"] as? Int, ticket.item.payload.count)
        XCTAssertEqual(mine["keys"] as? [String], theirs["keys"] as? [String])
        XCTAssertEqual(mine["ts"] as? String, "float")
        XCTAssertEqual(theirs["ts"] as? String, "float")
        XCTAssertEqual(String(describing: mine["entries"] ?? ""), String(describing: theirs["entries"] ?? "-"))
    }

    // MARK: - SENTRY_DSN in the harness

    private func runHarness(_ arguments: [String], environment: [String: String]) throws -> (status: Int32, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try Paths.built(Paths.harness))
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for key in ["VAKA_DSN", "SENTRY_DSN", "SENTRY_RELEASE", "SENTRY_ENVIRONMENT", "VAKA_RELEASE"] { env[key] = nil }
        env["SWIFT_BACKTRACE"] = "enable=no"
        process.environment = env.merging(environment) { _, new in new }
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let data = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    func testSentryDSNInTheEnvironmentDeliversWithoutDSNOption() throws {
        let storage = dirs.make("sentry-dsn")
        let (status, stderr) = try runHarness(["message", "--storage", storage.path],
                                              environment: ["SENTRY_DSN": server.dsn, "SENTRY_RELEASE": "env-app@4.5",
                                                            "SENTRY_ENVIRONMENT": "from-env"])
        XCTAssertEqual(status, 0, stderr)
        let envelopes = server.requests.compactMap { receivedEnvelope($0) }
        let events = envelopes.flatMap { $0.items.filter { $0.type == .event } }
            .compactMap { try? JSONSerialization.jsonObject(with: $0.payload) as? [String: Any] }
        XCTAssertEqual(events.count, 1, "\(server.requests.count) request(s); stderr: \(stderr)")
        XCTAssertEqual(events.first?["release"] as? String, "env-app@4.5")
        XCTAssertEqual(events.first?["environment"] as? String, "from-env")
        XCTAssertEqual(server.requests.first?.path, "/api/42/envelope/")
        XCTAssertEqual(Outbox(storageDirectory: storage).list(), [], "nothing went to the outbox")
    }

    /// With a DSN (queue mode): a crash dropped by `beforeSend` at the next launch is not sent, its `crashed`
    /// session update is, with the client report saying why; the report is deleted, and a further launch
    /// sends neither again.
    func testACrashDroppedByBeforeSendIsReportedToTheServer() throws {
        let storage = dirs.make("queue-drop")
        // `--scope`: its scope calls write `scope.json` (with the session) before the crash; a crash right after
        // `Vaka.start` with nothing recorded may come before start's background part wrote it, and has no session.
        let crashed = try runHarness(["null-deref", "--scope", "--storage", storage.path], environment: [:])
        XCTAssertNotEqual(crashed.status, 0)
        for _ in 0..<2 {
            let (status, stderr) = try runHarness(["--storage", storage.path, "--dsn", server.dsn], environment: ["VAKA_BEFORE_SEND": "drop"])
            XCTAssertEqual(status, 0, stderr)
        }
        let envelopes = server.requests.compactMap { receivedEnvelope($0) }
        XCTAssertEqual(envelopes.flatMap { $0.items.filter { $0.type == .event } }.count, 0, "the crash is not sent")
        let sessions = envelopes.flatMap { $0.items.filter { $0.type == .session } }
            .compactMap { try? JSONSerialization.jsonObject(with: $0.payload) as? [String: Any] }
        XCTAssertEqual(sessions.filter { $0["status"] as? String == "crashed" }.count, 1)
        XCTAssertEqual(envelopes.map(reported).filter { !$0.isEmpty }, [["before_send/error": 1]], "one report, once")
        let left = (try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("crashes").path)) ?? []
        XCTAssertEqual(left.filter { $0.hasSuffix(".crash") || $0.hasSuffix(".dropped") }, [])
    }

    func testABadSentryDSNIsOneLineAndOutboxMode() throws {
        let storage = dirs.make("bad-sentry-dsn")
        let (status, stderr) = try runHarness(["message", "--storage", storage.path], environment: ["SENTRY_DSN": "not a dsn"])
        XCTAssertEqual(status, 0, stderr)
        let lines = stderr.split(separator: "\n").filter { $0.hasPrefix("[vaka]") }
        XCTAssertEqual(lines.count, 1, stderr)
        XCTAssertTrue(lines.first?.hasPrefix("[vaka] invalid SENTRY_DSN (") ?? false, stderr)
        XCTAssertFalse(Outbox(storageDirectory: storage).list().isEmpty)
        XCTAssertEqual(server.requests.count, 0)
    }
}
