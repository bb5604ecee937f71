import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka

/// Logs reach a loopback server as Sentry `log` items that `sentry_sdk.envelope.Envelope` parses, shaped as
/// sentry_sdk 2.75 itself writes them for the same calls (`enable_logs=True`, `sentry_sdk.logger.*`, a
/// custom `Transport` catching its envelopes).
final class LogDeliveryTests: LoopbackServerTestCase {
    /// Attributes only the Python SDK writes: the interpreter (`process.runtime.*`) and the host name
    /// (`server.address`; Vaka sends no host name, as its events carry no `server_name`).
    static let pythonOnly: Set<String> = ["process.runtime.name", "process.runtime.version", "server.address"]

    /// The calls, made by both SDKs.
    private func logCalls() {
        Vaka.logger.info("checkout done", attributes: ["user": "ana", "items": 3, "ratio": 0.5, "retry": true])
        Vaka.logger.error("payment failed")
        Vaka.logger.trace("t")
        Vaka.logger.debug("d")
        Vaka.logger.warn("w")
        Vaka.logger.fatal("f")
    }

    private static let pythonCalls = """
    L = sentry_sdk.logger
    L.info("checkout done", attributes={"user": "ana", "items": 3, "ratio": 0.5, "retry": True})
    L.error("payment failed")
    L.trace("t"); L.debug("d"); L.warning("w"); L.fatal("f")
    """

    func testLogItemsMatchSentrySDK() throws {
        let scratch = dirs.make()
        // The log route: the calls go to a journal; its log records go to a batcher, as the mover hands them on.
        let scope = LogScope(release: "app@1.0", environment: "staging",
                             traceID: LogScope.traceID(runID: UUID().uuidString))
        let journal = try Journal(path: scratch.appendingPathComponent("journal"))
        defer { journal.close() }
        var options = Vaka.Options()
        options.logLevel = .trace
        options.logBreadcrumbLevel = nil
        LogRouter.activate(options: options, journal: LogRouter.journalSink(journal), addBreadcrumb: { _ in })
        logCalls()
        LogRouter.deactivate()
        var batcher = LogBatcher()
        var last: Journal.Record?
        while let record = journal.next(.log, after: last) {
            XCTAssertFalse(batcher.add(record, scope: scope))
            last = record
        }
        let item = try XCTUnwrap(batcher.takeItem())

        let delivery = try Delivery(configuration: Delivery.Configuration(
            storageDirectory: scratch, dsn: try DSN(server.dsn), flushInterval: 3600, maxBatchSize: 50, log: log.sink))
        deliveries.append(delivery)
        try delivery.submit(Envelope(items: [item]), durable: true)
        XCTAssertTrue(delivery.flush(timeout: 20))
        let requests = server.requests
        XCTAssertEqual(requests.count, 1)
        let body = try Gzip.decompress(try XCTUnwrap(requests.first).body)
        let received = scratch.appendingPathComponent("received.envelope")
        try body.write(to: received)
        let (vaka, python) = try logItemShapes(received: [received], scratch: scratch)
        XCTAssertEqual(vaka.count, 1, "one log item")
        guard let v = vaka.first else { return }
        XCTAssertEqual(v["item_count"] as? Int, 6)
        assertShapesMatch(v, python)
        let vLogs = try XCTUnwrap(v["logs"] as? [[String: Any]])
        XCTAssertEqual(vLogs.map { $0["body"] as? String }, ["checkout done", "payment failed", "t", "d", "w", "f"])
    }

    /// Through the whole SDK: `Vaka.start` with a DSN to the loopback server and `logLevel` `.info`, a call at
    /// every level (typed attributes), `Vaka.flush()`. The server receives `log` items that sentry_sdk's
    /// `Envelope` parses, shaped as sentry_sdk's own; each log at or above `info` once, nothing below it.
    func testLoggerCallsReachTheServerThroughTheSDK() throws {
        let storage = dirs.make()
        var options = Vaka.Options(dsn: server.dsn, release: "app@1.0", environment: "staging", sessionTracking: false,
                                   storageDirectory: storage)
        options.crashReporting = false
        options.logLevel = .info
        Vaka.start(options)
        defer { Vaka.close(timeout: 0) }
        logCalls()
        XCTAssertTrue(Vaka.flush(timeout: 20))
        var files: [URL] = []
        for (i, request) in server.requests.enumerated() {
            let body = try Gzip.decompress(request.body)
            let url = storage.appendingPathComponent("received-\(i).envelope")
            try body.write(to: url)
            files.append(url)
        }
        XCTAssertFalse(files.isEmpty, "nothing reached the server")
        let (vaka, python) = try logItemShapes(received: files, scratch: storage)
        XCTAssertFalse(vaka.isEmpty, "no log item reached the server")
        let bodies = vaka.flatMap { ($0["logs"] as? [[String: Any]]) ?? [] }.compactMap { $0["body"] as? String }
        XCTAssertEqual(bodies, ["checkout done", "payment failed", "w", "f"], "each log at or above info once, in order")
        XCTAssertEqual(vaka.compactMap { $0["item_count"] as? Int }.reduce(0, +), 4)
        for item in vaka { assertShapesMatch(item, python) }
    }

    /// The shapes of the `log` items of the envelope files `received`, read with sentry_sdk's `Envelope`
    /// (`vaka`), and of the one `log` item sentry_sdk 2.75 writes for ``pythonCalls`` (`python`): item header
    /// keys, payload keys, and per log its keys, field types, level, body, attribute types and chosen values.
    private func logItemShapes(received: [URL], scratch: URL) throws -> (vaka: [[String: Any]], python: [String: Any]) {
        let py = try Peers.sentryPython()
        let script = """
        import sys, json, sentry_sdk
        from sentry_sdk.envelope import Envelope
        from sentry_sdk.transport import Transport
        vaka = [Envelope.deserialize(open(path, "rb").read()) for path in sys.argv[1:]]
        caught = []
        class T(Transport):
            def capture_envelope(self, envelope): caught.append(envelope)
        sentry_sdk.init(dsn="http://k@127.0.0.1:9/1", transport=T, enable_logs=True, release="app@1.0",
                        environment="staging")
        \(Self.pythonCalls)
        sentry_sdk.flush()
        def shape(item):
            headers = dict(item.headers)
            payload = json.loads(item.payload.get_bytes())
            logs = []
            for log in payload["items"]:
                attributes = log["attributes"]
                logs.append({"keys": sorted(log),
                             "types": {k: type(v).__name__ for k, v in log.items() if k != "attributes"},
                             "level": log["level"], "body": log["body"], "trace_id_len": len(log["trace_id"]),
                             "attributes": {k: [v["type"], type(v["value"]).__name__, sorted(v)] for k, v in attributes.items()},
                             "values": {k: attributes[k]["value"] for k in ("sentry.release", "sentry.environment",
                                        "sentry.severity_number", "sentry.severity_text", "user", "items", "ratio", "retry")
                                        if k in attributes}})
            return {"type": item.type, "header_keys": sorted(headers), "content_type": headers.get("content_type"),
                    "item_count": headers.get("item_count"), "payload_keys": sorted(payload),
                    "version": payload.get("version"), "logs": logs}
        print(json.dumps({"vaka": [shape(i) for e in vaka for i in e.items if i.type == "log"],
                          "python": [shape(i) for e in caught for i in e.items if i.type == "log"],
                          "python_sdk": sentry_sdk.VERSION}))
        """
        let (status, out) = runTool(py, ["-c", script] + received.map(\.path))
        XCTAssertEqual(status, 0, out)
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any], out)
        let vaka = try XCTUnwrap(result["vaka"] as? [[String: Any]])
        let python = try XCTUnwrap(result["python"] as? [[String: Any]])
        XCTAssertEqual(python.count, 1, "sentry_sdk wrote one log item")
        XCTAssertEqual(python.first?["item_count"] as? Int, 6)
        return (vaka, try XCTUnwrap(python.first))
    }

    /// Vaka's log item `v` against sentry_sdk's `p` (shapes from ``logItemShapes(received:scratch:)``): the same
    /// item type, content type, payload keys and version; and each of Vaka's logs as sentry_sdk's log of the
    /// same body: keys, field types, level, attribute types and values (sentry_sdk also writes ``pythonOnly``).
    private func assertShapesMatch(_ v: [String: Any], _ p: [String: Any], file: StaticString = #filePath, line: UInt = #line) {
        for key in ["type", "content_type", "version"] {
            XCTAssertEqual(v[key] as? NSObject, p[key] as? NSObject, key, file: file, line: line)
        }
        XCTAssertEqual(v["type"] as? String, "log", file: file, line: line)
        // sentry_sdk adds `length` when it serializes; the envelope its transport gets has none yet.
        XCTAssertEqual(v["header_keys"] as? [String], ["content_type", "item_count", "length", "type"], file: file, line: line)
        XCTAssertEqual((p["header_keys"] as? [String])?.filter { $0 != "length" }, ["content_type", "item_count", "type"], file: file, line: line)
        XCTAssertEqual(v["payload_keys"] as? [String], p["payload_keys"] as? [String], file: file, line: line)
        let vLogs = (v["logs"] as? [[String: Any]]) ?? [], pLogs = (p["logs"] as? [[String: Any]]) ?? []
        XCTAssertEqual(v["item_count"] as? Int, vLogs.count, file: file, line: line)
        for vl in vLogs {
            let body = vl["body"] as? String ?? ""
            guard let pl = pLogs.first(where: { $0["body"] as? String == body }) else {
                XCTFail("sentry_sdk wrote no log \(body.debugDescription)", file: file, line: line)
                continue
            }
            XCTAssertEqual(vl["keys"] as? [String], pl["keys"] as? [String], "log \(body) keys", file: file, line: line)
            XCTAssertEqual(vl["types"] as? [String: String], pl["types"] as? [String: String], "log \(body) field types", file: file, line: line)
            XCTAssertEqual(vl["level"] as? String, pl["level"] as? String, "log \(body)", file: file, line: line)
            XCTAssertEqual(vl["trace_id_len"] as? Int, 32, file: file, line: line)
            XCTAssertEqual(vl["values"] as? NSDictionary, pl["values"] as? NSDictionary, "log \(body) attribute values", file: file, line: line)
            let va = (vl["attributes"] as? [String: [Any]]) ?? [:], pa = (pl["attributes"] as? [String: [Any]]) ?? [:]
            XCTAssertEqual(Set(pa.keys).subtracting(va.keys), Self.pythonOnly, "log \(body): attributes only sentry_sdk writes", file: file, line: line)
            XCTAssertEqual(Set(va.keys).subtracting(pa.keys), [], "log \(body): attributes only Vaka writes", file: file, line: line)
            for key in Set(va.keys).intersection(pa.keys) {
                XCTAssertEqual(va[key]! as NSArray, pa[key]! as NSArray, "log \(body) attribute \(key): [type, value type, keys]", file: file, line: line)
            }
        }
    }

    /// Sentry limits logs by two categories, `log_item` and `log_byte`: either holds log items back, and
    /// neither holds events.
    func testLogItemsHonourBothLogCategories() {
        let now = Date()
        for category in ["log_item", "log_byte"] {
            var limits = RateLimits()
            limits.update(status: 429, headers: ["x-sentry-rate-limits": "60:\(category):organization"], now: now)
            XCTAssertTrue(limits.isLimited(RateLimits.category(for: .log), at: now.addingTimeInterval(1)), category)
            XCTAssertFalse(limits.isLimited(RateLimits.category(for: .log), at: now.addingTimeInterval(61)), category)
            XCTAssertFalse(limits.isLimited(RateLimits.category(for: .event), at: now.addingTimeInterval(1)), category)
        }
    }
}
