import XCTest
import VakaTestSupport
@testable import Vaka
import VakaSymbolication

/// The JSON of every event kind the SDK sends (fatal from a crash report, handled error, message, screen view,
/// custom event, and events over the field limits and the byte budget) compared field for field, value for value,
/// with `EventGolden.json` beside this file. Only values that depend on the machine or the clock are replaced
/// by placeholders (`timestamp`, the `contexts` the SDK reads from the machine, the fatal event's
/// `app_start_time`); keys are compared exactly. `VAKA_RECORD_GOLDEN=1` rewrites the file from the current code.
final class EventGoldenTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    static let golden = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("EventGolden.json")

    /// A client in outbox mode with tags, a user and breadcrumbs set.
    private func makeClient(_ storage: URL) throws -> Client {
        var options = Vaka.Options(release: "shop@1.2.3", environment: "staging", sessionTracking: true,
                                   tags: ["region": "eu", "tier": "gold"], storageDirectory: storage)
        options.journalSize = 1 << 20  // room for all 130 breadcrumbs of the limits event (1.5 KB each)
        let client = try Client(options: options, storage: storage, runID: "0C0FFEE0-0000-4000-8000-000000000001",
                                dsn: nil, log: nil)
        client.begin()
        client.setTag("build", "42")
        client.identify("user-7")
        client.addBreadcrumb(Breadcrumb(timestamp: 1_700_000_000.25, category: "cart", message: "added item",
                                        data: ["sku": "A-1", "qty": "2"]))
        client.addBreadcrumb(Breadcrumb(timestamp: 1_700_000_001.5, type: "navigation", category: "navigation",
                                        message: "Checkout", level: nil, data: ["from": "Cart", "to": "Checkout"]))
        return client
    }

    /// A stack trace with `frames` frames (trust set, as the builders make it) and one image.
    private func stack(frames: Int) -> (stacktrace: Stacktrace?, images: [DebugImage]) {
        let list = (0..<frames).map { i in
            Frame(instructionAddr: HexAddress(0x5555_0000_1000 + UInt64(i) * 16), trust: i == frames - 1 ? "context" : "cfi",
                  package: "/opt/shop/bin/shop", imageAddr: HexAddress(0x5555_0000_0000), function: "shop.step\(i)() -> ()",
                  symbol: "$s4shop5step\(i)yyF", symbolAddr: HexAddress(0x5555_0000_1000 + UInt64(i) * 16 - 4), inApp: true,
                  filename: "/src/shop/Step.swift", lineno: 10 + i, colno: 5)
        }
        let image = DebugImage(codeFile: "/opt/shop/bin/shop", imageAddr: HexAddress(0x5555_0000_0000), imageSize: 0x20000,
                               codeID: "00112233445566778899aabbccddeeff01234567", debugID: "33221100-5544-7766-8899-aabbccddeeff",
                               arch: "x86_64")
        return (Stacktrace(frames: list), [image])
    }

    struct ShopError: Error, CustomStringConvertible {
        var description: String { "checkout failed: card declined" }
    }

    /// The events of every kind, by name, as the JSON objects put in envelopes.
    private func events() throws -> [String: Any] {
        let storage = dirs.make("golden")
        let client = try makeClient(storage)
        client.capture(error: ShopError(), stack: stack(frames: 3))
        client.capture(message: "payment provider slow", level: .warning, eventID: "11111111111111111111111111111111")
        // What Vaka.screen and Vaka.track send.
        client.capture(message: "screen_view", level: .info, extra: ["screen": .string("Checkout")],
                       tags: ["vaka.event": "screen_view", "screen": "Checkout"])
        client.capture(message: "purchase", level: .info, extra: ["amount": .string("9.99"), "currency": .string("EUR")],
                       tags: ["vaka.event": "purchase"])
        // Over the per-field limits: a long message, a long tag, 130 breadcrumbs with long data.
        for i in 0..<130 {
            client.addBreadcrumb(EventBudget.limited(Breadcrumb(timestamp: 1_700_000_100 + Double(i), message: "step \(i)",
                                                                data: ["blob": .string(String(repeating: "d", count: 1500))])))
        }
        client.setTag("long", String(repeating: "t", count: 300))
        client.capture(message: String(repeating: "m", count: 9000), level: .error, eventID: "22222222222222222222222222222222",
                       extra: ["big": .string(String(repeating: "x", count: 20000)), "n": .int(3), "ok": .bool(true)])
        // Over the frame limit.
        client.capture(error: ShopError(), stack: stack(frames: 300))
        // Over the byte budget: extra values that do not compress.
        var noise: [String: JSONValue] = [:]
        var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        for k in 0..<80 {
            var s = ""
            for _ in 0..<12000 {
                seed = seed &* 6364136223846793005 &+ 1442695040888963407
                s.unicodeScalars.append(Unicode.Scalar(UInt8(0x21 + (seed >> 33) % 90)))
            }
            noise["k\(k)"] = .string(s)
        }
        client.capture(message: "huge", level: .info, eventID: "33333333333333333333333333333333", extra: noise)
        _ = client.flush(timeout: 0)  // the mover writes the journalled events to the outbox
        let outbox = try readOutbox(storage)
        let sent = outbox.flatMap(\.events)
        XCTAssertEqual(sent.count, 7, "events in the outbox")
        guard sent.count == 7 else { return [:] }
        var out: [String: Any] = [
            "error": sent[0], "message": sent[1], "screen": sent[2], "track": sent[3], "limits": sent[4],
            "frames": sent[5], "budget": sent[6],
        ]
        // Fatal: the docs example report, without and with the crashed run's scope and breadcrumbs.
        let runID = "0C0FFEE0-0000-4000-8000-0000000000AA"
        let report = try CrashReport(data: Data(exampleCrashReport(runID: runID).utf8))
        let builder = FatalEventBuilder(symbolicator: Symbolicator())
        for (name, previous) in [("fatal", nil as RunDirectory.Previous?), ("fatal-scope", try previousRun(runID))] {
            let envelope = client.fatalEnvelope(report: report, previous: previous, builder: builder, eventID: "44444444444444444444444444444444")
            let item = try XCTUnwrap(envelope.items.first { $0.type == .event })
            out[name] = try JSONSerialization.jsonObject(with: item.payload)
        }
        client.end(timeout: 1)
        return out
    }

    /// A finished run directory with a scope and breadcrumbs.
    private func previousRun(_ runID: String) throws -> RunDirectory.Previous {
        let dir = dirs.make("run")
        let journal = try Journal(path: dir.appendingPathComponent("journal"))
        for crumb in [Breadcrumb(timestamp: 1_699_999_999, category: "app", message: "launched"),
                      Breadcrumb(timestamp: 1_700_000_000, type: "navigation", category: "navigation", message: "Home",
                                 data: ["to": "Home"])] {
            XCTAssertNotNil(journal.append(crumb))
        }
        journal.close()
        var session = SessionState(did: "device-1", started: Date(timeIntervalSince1970: 1_699_999_990.5))
        session.errors = 1
        let scope = RunScope(runID: runID, release: "shop@1.2.2", environment: "production", tags: ["region": "us"],
                             userID: "user-3", session: session)
        return RunDirectory.Previous(url: dir, runID: runID, scope: scope)
    }

    /// `value` with the clock- and machine-dependent values replaced by placeholders.
    /// (A handled event's `event_id` is random; a fatal event's `contexts.device.arch` is the report's.)
    private func normalize(_ value: Any, path: [String] = [], fatal: Bool = false) -> Any {
        if let object = value as? [String: Any] {
            var out: [String: Any] = [:]
            for (key, member) in object {
                out[key] = path.isEmpty ? normalize(member, path: ["$"], fatal: key.hasPrefix("fatal"))
                                        : normalize(member, path: path + [key], fatal: fatal)
            }
            return out
        }
        if let array = value as? [Any] { return array.map { normalize($0, path: path + ["[]"], fatal: fatal) } }
        let field = Array(path.dropFirst())
        if field == ["timestamp"] || field == ["event_id"] { return "<\(field[0])>" }
        if field.first == "contexts", field != ["contexts", "app", "app_version"],
           !(fatal && field == ["contexts", "device", "arch"]) {
            return "<\(field.joined(separator: "."))>"
        }
        return value
    }

    func testEveryEventKindMatchesTheGoldenJSON() throws {
        let events = try events()
        let normalized = normalize(events)
        let data = try JSONSerialization.data(withJSONObject: normalized, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
        if ProcessInfo.processInfo.environment["VAKA_RECORD_GOLDEN"] == "1" {
            try data.write(to: EventGoldenTests.golden)
            return
        }
        let expected = try JSONSerialization.jsonObject(with: Data(contentsOf: EventGoldenTests.golden)) as? [String: Any]
        let expectedEvents = try XCTUnwrap(expected)
        XCTAssertEqual(Set(expectedEvents.keys), Set((normalized as? [String: Any] ?? [:]).keys))
        for (name, expected) in expectedEvents {
            var want = expected, got = (normalized as? [String: Any])?[name] ?? NSNull()
            // The size before trimming counts the digits of the clock's `timestamp`: compared within 16 bytes.
            if var w = want as? [String: Any], var g = got as? [String: Any], var we = w["extra"] as? [String: Any],
               var ge = g["extra"] as? [String: Any], let wb = we["event_trimmed_from_bytes"] as? Int,
               let gb = ge["event_trimmed_from_bytes"] as? Int {
                XCTAssertLessThanOrEqual(abs(wb - gb), 16, "event \(name): event_trimmed_from_bytes \(gb), golden \(wb)")
                we["event_trimmed_from_bytes"] = "<bytes>"
                ge["event_trimmed_from_bytes"] = "<bytes>"
                w["extra"] = we
                g["extra"] = ge
                want = w
                got = g
            }
            let wantText = String(decoding: try JSONSerialization.data(withJSONObject: want, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]), as: UTF8.self)
            let gotText = String(decoding: try JSONSerialization.data(withJSONObject: got, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]), as: UTF8.self)
            if wantText != gotText {
                let w = wantText.split(separator: "\n"), g = gotText.split(separator: "\n")
                let first = zip(w, g).enumerated().first { $0.element.0 != $0.element.1 }
                XCTFail("event \(name) differs from the golden JSON at line \(first?.offset ?? min(w.count, g.count)): expected \(first.map { String($0.element.0) } ?? "end") got \(first.map { String($0.element.1) } ?? "end")")
            }
        }
    }
}

/// The two encodings of an event: `report` (what `vaka report convert` writes) keeps the frame field `trust`,
/// `wire` (what is sent) leaves it out and changes nothing else.
final class EventEncodingTests: XCTestCase {
    func testWireEncodingLeavesOutOnlyFrameTrust() throws {
        let frame = Frame(instructionAddr: HexAddress(0x1234), trust: "cfi", package: "/bin/app", inApp: true, lineno: 3)
        let event = Event(eventID: String(repeating: "a", count: 32), timestamp: 1.5, level: .fatal,
                          exception: ValueList([Exception(type: "SIGSEGV", stacktrace: Stacktrace(frames: [frame]))]),
                          threads: ValueList([SentryThread(id: 7, crashed: true, stacktrace: Stacktrace(frames: [frame]))]),
                          release: "app@1", logentry: LogEntry(formatted: "boom"), user: User(id: "u"))
        let report = String(decoding: try event.jsonData(), as: UTF8.self)
        let wire = String(decoding: try event.jsonData(encoding: .wire), as: UTF8.self)
        XCTAssertEqual(report.components(separatedBy: #","trust":"cfi""#).count - 1, 2, report)
        XCTAssertFalse(wire.contains("trust"), wire)
        XCTAssertEqual(report.replacingOccurrences(of: #","trust":"cfi""#, with: ""), wire)
        // The wire JSON goes through the budget unchanged, and reads back as the same event without trust.
        XCTAssertEqual(String(decoding: EventFactory.finalize(event), as: UTF8.self), wire)
        var expected = event
        expected.exception?.values[0].stacktrace?.frames[0].trust = nil
        expected.threads?.values[0].stacktrace?.frames[0].trust = nil
        XCTAssertEqual(try JSONDecoder().decode(Event.self, from: Data(wire.utf8)), expected)
    }
}

/// What the event golden does not cover: the envelope around each item, as the SDK writes it in outbox mode
/// (the same bytes it sends). Recorded from the SDK before the event model became typed: the envelope header
/// (`event_id` only for an event, `sdk`), the item header (`content_type`, `length` = the payload's bytes,
/// `type`), the session updates (keys and values of the start and the exit) and the outbox file names.
final class EnvelopeGoldenTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// One envelope file split into its header, and each item's header and payload.
    private func split(_ url: URL) throws -> (header: [String: Any], items: [(header: [String: Any], payload: [String: Any])]) {
        let bytes = [UInt8](try Data(contentsOf: url))
        var pos = 0
        func line() -> Data {
            let start = pos
            while pos < bytes.count, bytes[pos] != 0x0A { pos += 1 }
            defer { if pos < bytes.count { pos += 1 } }
            return Data(bytes[start..<pos])
        }
        let header = try XCTUnwrap(try JSONSerialization.jsonObject(with: line()) as? [String: Any])
        var items: [(header: [String: Any], payload: [String: Any])] = []
        while pos < bytes.count {
            let itemHeader = try XCTUnwrap(try JSONSerialization.jsonObject(with: line()) as? [String: Any])
            let length = try XCTUnwrap(itemHeader["length"] as? Int)
            XCTAssertLessThanOrEqual(pos + length, bytes.count, url.lastPathComponent)
            let payload = Data(bytes[pos..<min(pos + length, bytes.count)])
            pos += length
            if pos < bytes.count, bytes[pos] == 0x0A { pos += 1 }
            items.append((itemHeader, try XCTUnwrap(try JSONSerialization.jsonObject(with: payload) as? [String: Any])))
        }
        return (header, items)
    }

    func testEnvelopeHeadersItemHeadersAndSessionUpdatesAsRecorded() throws {
        let storage = dirs.make("envelopes")
        let options = Vaka.Options(release: "shop@1.2.3", environment: "staging", sessionTracking: true,
                                   storageDirectory: storage)
        let client = try Client(options: options, storage: storage, runID: "0C0FFEE0-0000-4000-8000-000000000002",
                                dsn: nil, log: nil)
        client.begin()
        // A run whose start finished (its first session update made) before it ends: a run that ends sooner
        // sends one update instead (StartPathTests).
        client.waitForStart()
        client.capture(message: "payment provider slow", level: .warning, eventID: "11111111111111111111111111111111")
        client.end(timeout: 1)
        let outbox = storage.appendingPathComponent("outbox")
        let names = try FileManager.default.contentsOfDirectory(atPath: outbox.path).filter { $0.hasSuffix(".envelope") }.sorted()
        XCTAssertEqual(names.count, 3, "\(names)")
        guard names.count == 3 else { return }
        let name = try NSRegularExpression(pattern: #"^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-[0-9]{6}-[0-9a-f]{32}\.envelope$"#)
        for file in names {
            XCTAssertNotNil(name.firstMatch(in: file, range: NSRange(file.startIndex..., in: file)), file)
        }
        XCTAssertTrue(names[1].hasSuffix("-11111111111111111111111111111111.envelope"), names[1])
        let sdk = ["name": "vaka.swift", "version": FatalEventBuilder.sdk.version]
        let envelopes = try names.map { try split(outbox.appendingPathComponent($0)) }
        for (index, envelope) in envelopes.enumerated() {
            XCTAssertEqual(envelope.items.count, 1, names[index])
            let expectedHeaderKeys: Set<String> = index == 1 ? ["event_id", "sdk"] : ["sdk"]
            XCTAssertEqual(Set(envelope.header.keys), expectedHeaderKeys, names[index])
            XCTAssertEqual(envelope.header["sdk"] as? [String: String], sdk, names[index])
            guard let item = envelope.items.first else { continue }
            XCTAssertEqual(Set(item.header.keys), ["content_type", "length", "type"], names[index])
            XCTAssertEqual(item.header["content_type"] as? String, "application/json", names[index])
            XCTAssertEqual(item.header["type"] as? String, index == 1 ? "event" : "session", names[index])
        }
        XCTAssertEqual(envelopes[1].header["event_id"] as? String, "11111111111111111111111111111111")
        XCTAssertEqual(envelopes[1].items.first?.payload["event_id"] as? String, "11111111111111111111111111111111")
        let start = try XCTUnwrap(envelopes[0].items.first?.payload)
        let exit = try XCTUnwrap(envelopes[2].items.first?.payload)
        let sessionKeys: Set<String> = ["attrs", "did", "errors", "init", "seq", "sid", "started", "status", "timestamp"]
        XCTAssertEqual(Set(start.keys), sessionKeys)
        XCTAssertEqual(Set(exit.keys), sessionKeys.union(["duration"]))
        for (update, status, isInit) in [(start, "ok", true), (exit, "exited", false)] {
            XCTAssertEqual(update["attrs"] as? [String: String], ["environment": "staging", "release": "shop@1.2.3"])
            XCTAssertEqual(update["status"] as? String, status)
            XCTAssertEqual(update["init"] as? Bool, isInit)
            XCTAssertEqual(update["errors"] as? Int, 0)
            XCTAssertEqual(update["sid"] as? String, start["sid"] as? String)
            XCTAssertEqual(update["did"] as? String, start["did"] as? String)
            for key in ["started", "timestamp"] {
                let value = update[key] as? String ?? ""
                XCTAssertNotNil(try NSRegularExpression(pattern: #"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"#)
                    .firstMatch(in: value, range: NSRange(value.startIndex..., in: value)), "\(key) \(value)")
            }
        }
        XCTAssertEqual(exit["started"] as? String, start["started"] as? String)
        XCTAssertGreaterThanOrEqual(exit["seq"] as? Int ?? 0, start["seq"] as? Int ?? 0)
    }
}
