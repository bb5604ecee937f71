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
        let py = try Peers.sentryPython()
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

        let script = """
        import sys, json, sentry_sdk
        from sentry_sdk.envelope import Envelope
        from sentry_sdk.transport import Transport
        vaka = Envelope.deserialize(open(sys.argv[1], "rb").read())
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
        print(json.dumps({"vaka": [shape(i) for i in vaka.items],
                          "python": [shape(i) for e in caught for i in e.items if i.type == "log"],
                          "python_sdk": sentry_sdk.VERSION}))
        """
        let (status, out) = runTool(py, ["-c", script, received.path])
        XCTAssertEqual(status, 0, out)
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any], out)
        let vaka = try XCTUnwrap(result["vaka"] as? [[String: Any]])
        let python = try XCTUnwrap(result["python"] as? [[String: Any]])
        XCTAssertEqual(vaka.count, 1, "one log item")
        XCTAssertEqual(python.count, 1, "sentry_sdk wrote one log item")
        guard let v = vaka.first, let p = python.first else { return }
        for key in ["type", "content_type", "version"] {
            XCTAssertEqual(v[key] as? NSObject, p[key] as? NSObject, key)
        }
        XCTAssertEqual(v["type"] as? String, "log")
        // sentry_sdk adds `length` when it serializes; the envelope its transport gets has none yet.
        XCTAssertEqual(v["header_keys"] as? [String], ["content_type", "item_count", "length", "type"])
        XCTAssertEqual((p["header_keys"] as? [String])?.filter { $0 != "length" }, ["content_type", "item_count", "type"])
        XCTAssertEqual(v["payload_keys"] as? [String], p["payload_keys"] as? [String])
        XCTAssertEqual(v["item_count"] as? Int, 6)
        XCTAssertEqual(p["item_count"] as? Int, 6)
        let vLogs = try XCTUnwrap(v["logs"] as? [[String: Any]]), pLogs = try XCTUnwrap(p["logs"] as? [[String: Any]])
        XCTAssertEqual(vLogs.count, pLogs.count)
        for (i, (vl, pl)) in zip(vLogs, pLogs).enumerated() {
            XCTAssertEqual(vl["keys"] as? [String], pl["keys"] as? [String], "log \(i) keys")
            XCTAssertEqual(vl["types"] as? [String: String], pl["types"] as? [String: String], "log \(i) field types")
            XCTAssertEqual(vl["level"] as? String, pl["level"] as? String, "log \(i)")
            XCTAssertEqual(vl["body"] as? String, pl["body"] as? String, "log \(i)")
            XCTAssertEqual(vl["trace_id_len"] as? Int, 32)
            XCTAssertEqual(vl["values"] as? NSDictionary, pl["values"] as? NSDictionary, "log \(i) attribute values")
            let va = try XCTUnwrap(vl["attributes"] as? [String: [Any]]), pa = try XCTUnwrap(pl["attributes"] as? [String: [Any]])
            XCTAssertEqual(Set(pa.keys).subtracting(va.keys), Self.pythonOnly, "log \(i): attributes only sentry_sdk writes")
            XCTAssertEqual(Set(va.keys).subtracting(pa.keys), [], "log \(i): attributes only Vaka writes")
            for key in Set(va.keys).intersection(pa.keys) {
                XCTAssertEqual(va[key]! as NSArray, pa[key]! as NSArray, "log \(i) attribute \(key): [type, value type, keys]")
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
