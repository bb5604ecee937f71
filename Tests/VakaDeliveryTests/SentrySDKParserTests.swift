import XCTest
import VakaTestSupport
@testable import Vaka

/// What Vaka writes must parse with Sentry's own envelope parser (`sentry_sdk.envelope.Envelope`, the
/// Python SDK). The interpreter: env VAKA_SENTRY_PYTHON, else `.venv/bugsink/bin/python` of this checkout
/// (Bugsink depends on sentry-sdk). Skipped when neither has sentry_sdk, unless VAKA_REQUIRE_PEERS=1.
final class SentrySDKParserTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func python() throws -> String { try Peers.sentryPython() }

    func testEnvelopesParseWithSentrySDK() throws {
        let py = try python()
        let dir = dirs.make()
        let event = eventEnvelope(5, extra: [.session(Data(#"{"sid":"x","status":"crashed"}"#.utf8))])
        let logs = Envelope(header: .init(sentAt: Date(timeIntervalSince1970: 1_714_566_896.789)),
                            items: [.logs(Data(#"{"items":[{"level":"info","body":"a\nb"}]}"#.utf8), count: 1)])
        let split = event.with(items: [event.items[1]])
        var paths: [String] = []
        for (n, e) in [event, logs, split].enumerated() {
            let url = dir.appendingPathComponent("e\(n).envelope")
            try e.serialized().write(to: url)
            paths.append(url.path)
        }
        // an outbox file, as written in outbox mode
        paths.append(try Outbox(storageDirectory: dir).write(event).path)
        let script = """
        import sys, json
        from sentry_sdk.envelope import Envelope
        out = []
        for p in sys.argv[1:]:
            e = Envelope.deserialize(open(p, "rb").read())
            out.append({"headers": e.headers, "items": [{"type": i.type, "headers": i.headers,
                        "payload": i.payload.get_bytes().decode()} for i in e.items]})
        print(json.dumps(out))
        """
        let (status, out) = runTool(py, ["-c", script] + paths)
        XCTAssertEqual(status, 0, out)
        let parsed = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: Any]])
        XCTAssertEqual(parsed.count, 4)
        for (index, expected) in [event, logs, split, event].enumerated() {
            let p = parsed[index]
            let headers = try XCTUnwrap(p["headers"] as? [String: Any])
            XCTAssertEqual(headers["event_id"] as? String, expected.header.eventID)
            XCTAssertEqual((headers["sdk"] as? [String: Any])?["name"] as? String, "vaka.swift")
            let items = try XCTUnwrap(p["items"] as? [[String: Any]])
            XCTAssertEqual(items.map { $0["type"] as? String }, expected.items.map(\.type.rawValue))
            XCTAssertEqual(items.map { $0["payload"] as? String }, expected.items.map { String(decoding: $0.payload, as: UTF8.self) })
            for (i, item) in expected.items.enumerated() {
                let h = try XCTUnwrap(items[i]["headers"] as? [String: Any])
                XCTAssertEqual(h["length"] as? Int, item.payload.count)
                XCTAssertEqual(h["content_type"] as? String, item.contentType)
                XCTAssertEqual(h["item_count"] as? Int, item.itemCount)
            }
        }
        XCTAssertEqual((parsed[1]["headers"] as? [String: Any])?["sent_at"] as? String, "2024-05-01T12:34:56.789Z")
    }
}
