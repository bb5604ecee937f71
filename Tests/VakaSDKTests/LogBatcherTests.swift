import XCTest
@testable import Vaka

/// `LogBatcher`: when a batch is due (count, bytes, age), and the `log` item it makes.
final class LogBatcherTests: XCTestCase {
    let scope = LogScope(release: "app@1.0", environment: "staging", traceID: "0123456789abcdef0123456789abcdef")

    private func payload(_ item: EnvelopeItem) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: item.payload) as? [String: Any])
    }

    private func logs(_ item: EnvelopeItem) throws -> [[String: Any]] {
        try XCTUnwrap(payload(item)["items"] as? [[String: Any]])
    }

    func testDueAtOneHundredLogs() throws {
        var batcher = LogBatcher()
        for i in 0..<99 {
            XCTAssertFalse(batcher.add(timeNs: 1, level: 9, body: "log \(i)", attributes: [], scope: scope), "due after \(i + 1)")
        }
        XCTAssertTrue(batcher.add(timeNs: 1, level: 9, body: "log 99", attributes: [], scope: scope))
        let item = try XCTUnwrap(batcher.takeItem())
        XCTAssertTrue(batcher.isEmpty)
        XCTAssertNil(batcher.takeItem())
        XCTAssertEqual(item.type, .log)
        XCTAssertEqual(item.itemCount, 100)
        XCTAssertEqual(item.contentType, "application/vnd.sentry.items.log+json")
        XCTAssertEqual(try payload(item)["version"] as? Int, 2)
        XCTAssertEqual(try logs(item).map { $0["body"] as? String }, (0..<100).map { "log \($0)" })
        // After a take the count starts again.
        XCTAssertFalse(batcher.add(timeNs: 1, level: 9, body: "again", attributes: [], scope: scope))
        XCTAssertEqual(try XCTUnwrap(batcher.takeItem()).itemCount, 1)
    }

    func testDueAtOneMebibyte() throws {
        var batcher = LogBatcher()
        let body = String(repeating: "x", count: 20_000)
        var added = 0
        var due = false
        var before = 0
        while !due && added < 100 {
            before = batcher.heldBytes
            due = batcher.add(timeNs: 1, level: 13, body: body, attributes: [(key: "n", value: .integer(Int64(added)))], scope: scope)
            added += 1
        }
        XCTAssertTrue(due)
        XCTAssertLessThan(added, 100, "due by bytes, not count")
        XCTAssertLessThan(before, 1 << 20, "not due before the bytes reached 1 MiB")
        let held = batcher.heldBytes
        XCTAssertGreaterThanOrEqual(held, 1 << 20)
        let item = try XCTUnwrap(batcher.takeItem())
        XCTAssertEqual(item.itemCount, added)
        XCTAssertEqual(item.payload.count, held + 24, "payload = held logs + {\"version\":2,\"items\":[ ]}")
        XCTAssertLessThan(item.payload.count, (1 << 20) + 21_000, "at most one log over the limit")
        XCTAssertEqual(try logs(item).count, added)
    }

    func testDueAfterFiveSeconds() throws {
        var batcher = LogBatcher()
        XCTAssertFalse(batcher.isDue(now: Date().addingTimeInterval(3600)), "nothing held: never due")
        let before = Date()
        XCTAssertFalse(batcher.add(timeNs: 1, level: 9, body: "a", attributes: [], scope: scope))
        let after = Date()
        XCTAssertFalse(batcher.isDue(now: before.addingTimeInterval(4.9)))
        XCTAssertTrue(batcher.isDue(now: after.addingTimeInterval(5)))
        // A later log does not make the batch younger.
        XCTAssertFalse(batcher.add(timeNs: 2, level: 9, body: "b", attributes: [], scope: scope))
        XCTAssertTrue(batcher.isDue(now: after.addingTimeInterval(5)))
        _ = batcher.takeItem()
        XCTAssertFalse(batcher.isDue(now: after.addingTimeInterval(3600)))
    }

    func testThresholdsAreConfigurable() {
        var batcher = LogBatcher(maxCount: 2, maxBytes: 1 << 20, maxAge: 1)
        XCTAssertFalse(batcher.add(timeNs: 1, level: 9, body: "a", attributes: [], scope: scope))
        XCTAssertTrue(batcher.add(timeNs: 1, level: 9, body: "b", attributes: [], scope: scope))
        var small = LogBatcher(maxCount: 100, maxBytes: 10, maxAge: 1)
        XCTAssertTrue(small.add(timeNs: 1, level: 9, body: "a", attributes: [], scope: scope))
        let before = Date()
        var aged = LogBatcher(maxAge: 1)
        _ = aged.add(timeNs: 1, level: 9, body: "a", attributes: [], scope: scope)
        XCTAssertFalse(aged.isDue(now: before.addingTimeInterval(0.9)))
        XCTAssertTrue(aged.isDue(now: Date().addingTimeInterval(1)))
    }

    func testLogFields() throws {
        var batcher = LogBatcher()
        let attributes: [(key: String, value: LogAttribute)] = [
            ("items", .integer(3)), ("ratio", .double(0.5)), ("retry", .boolean(true)),
            ("sentry.release", "spoofed"), ("user", .string("a\"n\\a\n\u{1}/é")), ("weird", .double(.nan)),
        ]
        _ = batcher.add(timeNs: 1_714_566_896_789_000_000, level: 17, body: "failed \"x\"\n", attributes: attributes,
                        scope: scope)
        _ = batcher.add(timeNs: 1_714_566_897_000_000_000, level: 14, body: "", attributes: [], scope: scope)
        let item = try XCTUnwrap(batcher.takeItem())
        let text = String(decoding: item.payload, as: UTF8.self)
        XCTAssertTrue(text.hasPrefix(#"{"version":2,"items":[{"timestamp":1714566896.789,"trace_id":"0123456789abcdef0123456789abcdef","level":"error","body":"failed \"x\"\n","#), text)
        XCTAssertTrue(text.contains(#""user":{"value":"a\"n\\a\n\u0001/é","type":"string"}"#), text)
        XCTAssertTrue(text.contains(#""timestamp":1714566897.0,"#), text)
        let all = try logs(item)
        let log = all[0]
        XCTAssertEqual(Set(log.keys), ["timestamp", "trace_id", "level", "body", "attributes"])
        XCTAssertEqual(log["body"] as? String, "failed \"x\"\n")
        let attrs = try XCTUnwrap(log["attributes"] as? [String: [String: Any]])
        func typed(_ key: String) -> (String?, Any?) { (attrs[key]?["type"] as? String, attrs[key]?["value"]) }
        XCTAssertEqual(typed("items").0, "integer"); XCTAssertEqual(typed("items").1 as? Int, 3)
        XCTAssertEqual(typed("ratio").0, "double"); XCTAssertEqual(typed("ratio").1 as? Double, 0.5)
        XCTAssertEqual(typed("retry").0, "boolean"); XCTAssertEqual(typed("retry").1 as? Bool, true)
        XCTAssertEqual(typed("user").1 as? String, "a\"n\\a\n\u{1}/é")
        XCTAssertEqual(typed("weird").0, "string"); XCTAssertEqual(typed("weird").1 as? String, "nan")
        XCTAssertEqual(typed("sentry.release").1 as? String, "app@1.0", "the SDK's attribute wins")
        XCTAssertEqual(typed("sentry.environment").1 as? String, "staging")
        XCTAssertEqual(typed("sentry.sdk.name").1 as? String, "vaka.swift")
        XCTAssertEqual(typed("sentry.sdk.version").1 as? String, SDKInfo.vaka.version)
        XCTAssertEqual(typed("sentry.severity_number").0, "integer")
        XCTAssertEqual(typed("sentry.severity_number").1 as? Int, 17)
        XCTAssertEqual(typed("sentry.severity_text").1 as? String, "error")
        XCTAssertEqual(attrs.count, 11, "five of the record (its sentry.release dropped) and six of the SDK")
        // An unknown journal level is sent as the nearest lower level.
        XCTAssertEqual(all[1]["level"] as? String, "warn")
    }

    func testNearestLevel() {
        XCTAssertEqual(LogLevel.allCases.map { LogLevel.nearest($0.rawValue) }, LogLevel.allCases)
        XCTAssertEqual(LogLevel.nearest(0), .trace)
        XCTAssertEqual(LogLevel.nearest(4), .trace)
        XCTAssertEqual(LogLevel.nearest(20), .error)
        XCTAssertEqual(LogLevel.nearest(255), .fatal)
    }

    func testTraceIDIsTheRunIDsHex() {
        XCTAssertEqual(LogScope.traceID(runID: "3F2A9C1E-0B1D-4E5F-8A9B-0C1D2E3F4A5B"), "3f2a9c1e0b1d4e5f8a9b0c1d2e3f4a5b")
        let other = LogScope.traceID(runID: "not-a-uuid")
        XCTAssertEqual(other.count, 32)
        XCTAssertTrue(other.allSatisfy { $0.isHexDigit && !$0.isUppercase })
        XCTAssertEqual(other, LogScope.traceID(runID: "not-a-uuid"))
        XCTAssertNotEqual(other, LogScope.traceID(runID: "not-a-uuid2"))
        let run = RunScope(runID: "3F2A9C1E-0B1D-4E5F-8A9B-0C1D2E3F4A5B", release: "r@1", environment: "dev", tags: [:])
        XCTAssertEqual(LogScope(run: run), LogScope(release: "r@1", environment: "dev", traceID: "3f2a9c1e0b1d4e5f8a9b0c1d2e3f4a5b"))
    }
}
