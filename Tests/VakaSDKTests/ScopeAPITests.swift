import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka

/// The scope API (`setUser`, `setContext`, `setExtra`, `addBreadcrumb(_:)` with data, a per-call ``Scope``,
/// `fingerprint`, attachments) and the exceptions of a captured error, read from the envelopes the SDK writes in
/// outbox mode, with exact fields; every envelope parses with `sentry_sdk`'s parser and every event passes
/// Relay's `StoreNormalizer` (``validateWithPeers(_:scratch:)``).
final class ScopeAPITests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// Vaka started in outbox mode on a new storage directory, without crash handlers or sessions.
    private func start(_ name: String) -> URL {
        let storage = dirs.make(name)
        var options = Vaka.Options(sessionTracking: false, storageDirectory: storage)
        options.crashReporting = false
        Vaka.start(options)
        return storage
    }

    /// `value` equals the JSON `expected` (numbers compared as numbers).
    private func assertJSON(_ value: Any?, _ expected: String, _ message: String = "", file: StaticString = #filePath, line: UInt = #line) {
        let want = try! JSONSerialization.jsonObject(with: Data(expected.utf8), options: [.fragmentsAllowed])
        guard let value else { return XCTFail("nil, expected \(expected) \(message)", file: file, line: line) }
        // Both sides as JSONSerialization reads them back, compared as NSObjects (numbers as numbers).
        let got = try! JSONSerialization.jsonObject(with: JSONSerialization.data(withJSONObject: [value]), options: [])
        let expectedArray = try! JSONSerialization.jsonObject(with: JSONSerialization.data(withJSONObject: [want]), options: [])
        XCTAssertTrue((got as! NSArray).isEqual(to: expectedArray as! [Any]), "\(value) != \(expected) \(message)", file: file, line: line)
    }

    /// The outbox's envelopes, after checking every one with sentry_sdk and every event with Relay.
    private func checkedOutbox(_ storage: URL, file: StaticString = #filePath, line: UInt = #line) throws -> [OutboxEnvelope] {
        let envelopes = try readOutbox(storage)
        let result = try validateWithPeers(envelopes.map(\.file), scratch: dirs.make("peers"))
        XCTAssertEqual(result.problems, [], file: file, line: line)
        XCTAssertEqual(result.envelopes, envelopes.count, file: file, line: line)
        return envelopes
    }

    /// Values JSON cannot hold (nested deeper than JSONEncoder/JSONDecoder take, NaN, a NaN breadcrumb time)
    /// in contexts, extra, breadcrumb data and a per-call scope: each event is still sent whole (its message),
    /// the deep value cut to `"..."` at ``JSONValue/maxDepth``, NaN as text.
    func testValuesJSONCannotHoldNeverCostTheEvent() throws {
        let storage = start("unencodable")
        var deep: JSONValue = .string("bottom")
        for _ in 0..<600 { deep = .object(["a": deep]) }
        Vaka.setContext("deep", ["v": deep])
        Vaka.capture(message: "deep context")
        Vaka.setContext("deep", nil)
        Vaka.setExtra("deep", deep)
        Vaka.capture(message: "deep extra")
        Vaka.setExtra("deep", nil)
        Vaka.addBreadcrumb(Breadcrumb(timestamp: .nan, category: "db", message: "deep crumb", data: ["v": deep, "nan": .double(.infinity)]))
        Vaka.capture(message: "deep crumb")
        Vaka.capture(message: "deep scope") { $0.setExtra("deep", .array([deep])) }
        Vaka.close(timeout: 5)
        let events = try checkedOutbox(storage).flatMap(\.events)
        XCTAssertEqual(events.map { ($0["logentry"] as? [String: Any])?["formatted"] as? String },
                       ["deep context", "deep extra", "deep crumb", "deep scope"])
        func depth(_ value: Any?) -> (levels: Int, leaf: Any?) {
            var levels = 0
            var value = value
            while let object = value as? [String: Any], let inner = object["a"] { levels += 1; value = inner }
            return (levels, value)
        }
        let context = ((events[0]["contexts"] as? [String: Any])?["deep"] as? [String: Any])?["v"]
        XCTAssertEqual(depth(context).leaf as? String, "...", "cut, not lost")
        XCTAssertEqual(depth(context).levels, JSONValue.maxDepth - 3)  // contexts.deep.v is level 3
        XCTAssertEqual(depth((events[1]["extra"] as? [String: Any])?["deep"]).leaf as? String, "...")
        let crumb = ((events[2]["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]])?.last
        XCTAssertEqual(crumb?["message"] as? String, "deep crumb")
        XCTAssertEqual((crumb?["data"] as? [String: Any])?["nan"] as? String, "inf")
        XCTAssertGreaterThan(crumb?["timestamp"] as? Double ?? 0, 1_700_000_000, "a NaN time is the time it was added")
        XCTAssertNotNil((events[3]["extra"] as? [String: Any])?["deep"] as? [Any])
    }

    /// Empty values an app may well pass: an `NSError` with an empty domain and description (Relay drops an
    /// exception with neither type nor value, and its stack trace with it), an attachment without a file name or
    /// content type (Relay refuses it), a user of empty fields (no user), an IP address that is none.
    func testEmptyNamesStillMakeEventsRelayKeepsWhole() throws {
        let storage = start("empty-names")
        Vaka.setUser(User(id: "", email: "", username: ""))
        Vaka.addAttachment(data: Data("a".utf8), filename: "", contentType: "")
        Vaka.capture(NSError(domain: "", code: 7, userInfo: [NSLocalizedDescriptionKey: ""]))
        Vaka.setUser(User(id: "u-1", ipAddress: "not an address"))
        Vaka.capture(message: "bad address")
        Vaka.capture(message: "IPv6") { $0.setUser(User(id: "u-2", ipAddress: "2001:db8::7")) }
        Vaka.close(timeout: 5)
        let envelopes = try checkedOutbox(storage)
        let event = try XCTUnwrap(envelopes.flatMap(\.events).first)
        let exception = try XCTUnwrap(((event["exception"] as? [String: Any])?["values"] as? [[String: Any]])?.last)
        XCTAssertEqual(exception["type"] as? String, "Foundation.NSError")
        XCTAssertNotNil(exception["stacktrace"])
        XCTAssertNil(event["user"], "a user of empty fields is no user")
        let attachment = try XCTUnwrap(envelopes.flatMap(\.attachments).first)
        XCTAssertEqual(attachment.header["filename"] as? String, "attachment")
        XCTAssertEqual(attachment.header["content_type"] as? String, "application/octet-stream")
        XCTAssertEqual(attachment.payload, Data("a".utf8))
        let users = envelopes.flatMap(\.events).dropFirst().map { $0["user"] as? [String: String] }
        XCTAssertEqual(users, [["id": "u-1"], ["id": "u-2", "ip_address": "2001:db8::7"]], "an address Relay would refuse is left out")
    }

    /// Breadcrumb level names as logging libraries write them (upper case, `warn`, `critical`, `trace`) keep
    /// their severity; an unknown name is `info`.
    func testBreadcrumbLevelNamesInAnyCaseKeepTheirSeverity() throws {
        let storage = start("crumb-levels")
        for level in ["WARNING", "warn", "Critical", "trace", "ERROR", "notice"] {
            Vaka.addBreadcrumb(Breadcrumb(category: "log", message: level, level: level))
        }
        Vaka.capture(message: "crumbs")
        Vaka.close(timeout: 5)
        let event = try XCTUnwrap(try checkedOutbox(storage).flatMap(\.events).first)
        let crumbs = (event["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]] ?? []
        XCTAssertEqual(crumbs.map { $0["level"] as? String }, ["warning", "warning", "fatal", "debug", "error", "info"])
    }

    /// Without a journal (`runs` cannot be a directory: breadcrumbs kept in memory) a breadcrumb level is named
    /// as the journal names it: Relay's normalizer refuses any other name.
    func testBreadcrumbLevelsKeptInMemoryAreSentryNames() throws {
        let storage = dirs.make("memory-levels")
        try Data().write(to: storage.appendingPathComponent("runs"))
        var options = Vaka.Options(sessionTracking: false, storageDirectory: storage)
        options.crashReporting = false
        Vaka.start(options)
        for level in ["WARNING", "notice", "Critical"] { Vaka.addBreadcrumb(Breadcrumb(category: "log", message: level, level: level)) }
        Vaka.capture(message: "crumbs")
        Vaka.close(timeout: 5)
        let event = try XCTUnwrap(try checkedOutbox(storage).flatMap(\.events).first)
        let crumbs = (event["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]] ?? []
        XCTAssertEqual(crumbs.map { $0["level"] as? String }, ["warning", "info", "fatal"])
    }

    /// Tags Relay would remove from the event (an empty key or value, a line break or other control character)
    /// are made keepable: the characters become spaces, an empty one is left out.
    func testTagsRelayWouldRemoveAreMadeKeepable() throws {
        let storage = start("odd-tags")
        Vaka.setTag("", "empty key")
        Vaka.setTag("empty value", "")
        Vaka.setTag("new\nline", "a\r\nb")
        Vaka.setTag("tab\tkey", "nul\u{0}")
        Vaka.setTag("plain", "kept")
        Vaka.capture(message: "tags")
        Vaka.close(timeout: 5)
        let event = try XCTUnwrap(try checkedOutbox(storage).flatMap(\.events).first)
        XCTAssertEqual(event["tags"] as? [String: String], ["new line": "a b", "tab key": "nul ", "plain": "kept"])
    }

    func testEachScopeCallReachesTheNextEventsWithExactFields() throws {
        let storage = start("scope-calls")
        Vaka.setUser(User(id: "u-1", email: "ana@example.com", username: "ana", ipAddress: "203.0.113.7"))
        Vaka.setContext("order", ["id": 1042, "total": 99.5, "items": ["book", "pen"], "gift": false, "note": .null])
        Vaka.setContext("os", ["theme": "dark"])  // laid over the os context Vaka fills
        Vaka.setContext("gone", ["x": 1])
        Vaka.setContext("gone", nil)
        Vaka.setExtra("cart_size", 3)
        Vaka.setExtra("ratio", .double(.nan))  // JSON has no NaN: sent as its text
        Vaka.setExtra("dropped", "x")
        Vaka.setExtra("dropped", nil)
        Vaka.setTag("flavor", "free")
        Vaka.addBreadcrumb(Breadcrumb(timestamp: 1_700_000_000.5, type: "query", category: "db", message: "SELECT orders",
                                      level: "warning", data: ["rows": 3, "ms": 41.5, "cached": false, "tables": ["orders"],
                                                               "plan": ["index": "orders_pk"], "none": .null]))
        Vaka.addBreadcrumb(category: "cart", message: "fast path")
        Vaka.capture(message: "first", fingerprint: ["checkout", "{{ default }}"])
        Vaka.identify("u-2")  // the short form: a user of that id only
        Vaka.capture(message: "second", level: .warning)
        Vaka.setUser(nil)
        Vaka.capture(message: "third")
        Vaka.close(timeout: 5)

        let events = try checkedOutbox(storage).flatMap(\.events)
        XCTAssertEqual(events.compactMap { dig($0, "logentry", "formatted") as? String }, ["first", "second", "third"])
        let first = events[0]
        assertJSON(first["user"], #"{"id": "u-1", "email": "ana@example.com", "username": "ana", "ip_address": "203.0.113.7"}"#)
        assertJSON(dig(first, "contexts", "order"), #"{"id": 1042, "total": 99.5, "items": ["book", "pen"], "gift": false, "note": null}"#)
        XCTAssertEqual(dig(first, "contexts", "os", "theme") as? String, "dark")
        XCTAssertEqual(dig(first, "contexts", "os", "name") as? String, "Linux", "Vaka's members of os kept")
        XCTAssertNil(dig(first, "contexts", "gone"))
        assertJSON(first["extra"], #"{"cart_size": 3, "ratio": "nan"}"#)
        assertJSON(first["tags"], #"{"flavor": "free"}"#)
        assertJSON(first["fingerprint"], #"["checkout", "{{ default }}"]"#)
        let crumbs = try XCTUnwrap(dig(first, "breadcrumbs", "values") as? [[String: Any]])
        XCTAssertEqual(crumbs.count, 2)
        assertJSON(crumbs[0], #"{"timestamp": 1700000000.5, "type": "query", "category": "db", "message": "SELECT orders", "level": "warning", "data": {"rows": 3, "ms": 41.5, "cached": false, "tables": ["orders"], "plan": {"index": "orders_pk"}, "none": null}}"#,
                   "every field through the journal")
        XCTAssertEqual(crumbs[1]["message"] as? String, "fast path")
        XCTAssertNil(crumbs[1]["data"])
        assertJSON(events[1]["user"], #"{"id": "u-2"}"#)
        XCTAssertNil(events[1]["fingerprint"], "a call's fingerprint is its own")
        XCTAssertNil(events[2]["user"])
    }

    func testPerCallScopeIsLaidOverTheGlobalOneAndDoesNotLeak() throws {
        let storage = start("per-call")
        Vaka.setUser(User(id: "global"))
        Vaka.setTag("flavor", "free")
        Vaka.setContext("order", ["id": 1])
        Vaka.setExtra("cart_size", 3)
        struct Declined: Error {}
        Vaka.capture(Declined(), fingerprint: ["from-argument"]) { scope in
            scope.setTag("payment", "card")
            scope.setTag("flavor", "pro")
            scope.setUser(User(id: "call", email: "call@example.com"))
            scope.setContext("order", ["id": 2])
            scope.setContext("payment", ["provider": "acme"])
            scope.setExtra("retry", true)
            scope.fingerprint = ["checkout", "declined"]
            scope.level = .fatal
        }
        Vaka.capture(message: "scoped message", fingerprint: ["m"]) { scope in
            scope.setExtra("only", "here")
        }
        Vaka.capture(message: "plain")
        Vaka.close(timeout: 5)

        let events = try checkedOutbox(storage).flatMap(\.events)
        XCTAssertEqual(events.count, 3)
        let scoped = events[0]
        XCTAssertEqual(scoped["level"] as? String, "fatal")
        assertJSON(scoped["tags"], #"{"flavor": "pro", "payment": "card"}"#)
        assertJSON(scoped["user"], #"{"id": "call", "email": "call@example.com"}"#)
        assertJSON(dig(scoped, "contexts", "order"), #"{"id": 2}"#)
        assertJSON(dig(scoped, "contexts", "payment"), #"{"provider": "acme"}"#)
        assertJSON(scoped["extra"], #"{"cart_size": 3, "retry": true}"#)
        assertJSON(scoped["fingerprint"], #"["checkout", "declined"]"#, "the scope's over the argument")
        assertJSON(events[1]["extra"], #"{"cart_size": 3, "only": "here"}"#)
        assertJSON(events[1]["fingerprint"], #"["m"]"#)
        let plain = events[2]
        XCTAssertEqual(plain["level"] as? String, "info")
        assertJSON(plain["tags"], #"{"flavor": "free"}"#)
        assertJSON(plain["user"], #"{"id": "global"}"#)
        assertJSON(dig(plain, "contexts", "order"), #"{"id": 1}"#)
        XCTAssertNil(dig(plain, "contexts", "payment"))
        assertJSON(plain["extra"], #"{"cart_size": 3}"#)
        XCTAssertNil(plain["fingerprint"])
    }

    /// Worst case for `scope.json` with the new scope fields: 200 tags and a user of control characters (each
    /// escaped as `\u00XX`), contexts and extra up to their 64 KiB (a call past it is left out with a debug
    /// line, an earlier value kept), 8 attachments with 4096-byte paths of control characters (a ninth left
    /// out). The file stays under ``RunScope/maxEncodedBytes`` and the 1 MiB the next launch reads (measured:
    /// 930,903 bytes, the bound 973,232).
    func testScopeFileStaysWithinItsBoundWithEveryFieldAtItsLimit() throws {
        XCTAssertLessThan(RunScope.maxEncodedBytes, RunDirectory.maxScopeBytes)
        let storage = dirs.make("scope-bound")
        let run = "B-\(UUID().uuidString)"
        let control = String(repeating: "\u{01}", count: 190)
        let lines = Locked<[String]>([])
        do {
            let client = try Client(options: Vaka.Options(release: "app@1.0", storageDirectory: storage),
                                    storage: storage, runID: run, dsn: nil, log: { line in lines.withLock { $0.append(line) } })
            client.begin()
            let long = String(repeating: "\u{02}", count: 1000)
            client.setUser(User(id: long, email: long, username: long, ipAddress: long))
            for i in 0..<200 { client.setTag(control + String(format: "%010d", i), control + "v") }
            for i in 0..<40 { client.setContext("c\(i)", ["blob": .string(String(repeating: "\u{03}", count: 500))]) }
            client.setExtra("late", .string(String(repeating: "x", count: 70_000)))
            for i in 0..<9 {
                let path = "/" + String(repeating: "\u{04}", count: Attachment.maxPathBytes - 8) + String(format: "%04d", i)
                client.addAttachment(Attachment(path: path, filename: String(repeating: "\u{05}", count: Attachment.maxPathBytes),
                                                contentType: String(repeating: "\u{06}", count: 300)))
            }
        }
        let data = try Data(contentsOf: RunDirectory.root(storage).appendingPathComponent(run).appendingPathComponent("scope.json"))
        XCTAssertLessThanOrEqual(data.count, RunScope.maxEncodedBytes)
        let scope = try JSONDecoder().decode(RunScope.self, from: data)
        XCTAssertLessThanOrEqual(scope.dataBytes, RunScope.maxDataBytes)
        XCTAssertNil(scope.extra?["late"], "over the data bound: left out")
        XCTAssertGreaterThan(scope.contexts?.count ?? 0, 10)
        XCTAssertLessThan(scope.contexts?.count ?? 0, 40, "the contexts past the bound left out")
        XCTAssertEqual(scope.attachments?.count, Attachment.maxRegistered)
        XCTAssertEqual(scope.user?.email?.unicodeScalars.count, 200)
        let said = lines.withLock { $0 }
        XCTAssertTrue(said.contains { $0.hasPrefix("extra \"late\" left out") }, "\(said.suffix(5))")
        XCTAssertTrue(said.contains { $0.contains("left out: at most 8 are registered") })
    }

    // MARK: - Errors

    enum CheckoutError: Error { case cardDeclined(code: Int), expired }
    enum Described: Error, CustomStringConvertible, CustomDebugStringConvertible {
        case hidden
        var description: String { "described" }
        var debugDescription: String { "debug described" }
    }
    struct PaymentFailed: WrappingError { var underlyingError: (any Error)? }
    final class Looping: WrappingError, @unchecked Sendable {  // @unchecked: set once before use, single thread
        var underlyingError: (any Error)?
    }
    struct Coded: CustomNSError {
        static var errorDomain: String { "shop.coded" }
        var errorCode: Int { 7 }
        var errorUserInfo: [String: Any] { [NSUnderlyingErrorKey: CheckoutError.expired] }
    }

    /// type/value/mechanism of each exception (stack traces left out), as JSON objects.
    private func shapes(_ error: Error) -> [[String: Any]] {
        ErrorExceptions.exceptions(for: error, stacktrace: nil).map { exception in
            let data = try! Event.encoder(encoding: .wire).encode(exception)
            return try! JSONSerialization.jsonObject(with: data) as! [String: Any]
        }
    }

    func testCapturedErrorsGiveTypeAndCaseNSErrorMetaAndChainedExceptions() {
        let module = String(reflecting: CheckoutError.self)  // VakaSDKTests.ScopeAPITests.CheckoutError
        assertJSON(shapes(CheckoutError.cardDeclined(code: 51)),
                   #"[{"type": "\#(module).cardDeclined", "value": "cardDeclined(code: 51)", "mechanism": {"type": "swift.error", "handled": true}}]"#)
        assertJSON(shapes(CheckoutError.expired)[0]["type"], #""\#(module).expired""#)
        assertJSON(shapes(Described.hidden)[0]["type"], #""\#(String(reflecting: Described.self))""#, "no case name to be had")
        assertJSON(shapes(Described.hidden)[0]["value"], #""described""#)

        // NSError: domain as type, ns_error meta, NSUnderlyingErrorKey chained, innermost first.
        let inner = NSError(domain: "inner.domain", code: 2, userInfo: [NSLocalizedDescriptionKey: "disk full"])
        let outer = NSError(domain: NSCocoaErrorDomain, code: 640, userInfo: [NSLocalizedDescriptionKey: "cannot save", NSUnderlyingErrorKey: inner])
        assertJSON(shapes(outer), #"""
            [{"type": "inner.domain", "value": "disk full", "mechanism": {"type": "swift.error", "handled": true, "source": "NSUnderlyingErrorKey", "meta": {"ns_error": {"code": 2, "domain": "inner.domain"}}}},
             {"type": "NSCocoaErrorDomain", "value": "cannot save", "mechanism": {"type": "swift.error", "handled": true, "meta": {"ns_error": {"code": 640, "domain": "NSCocoaErrorDomain"}}}}]
            """#)

        // A Swift error wrapping a CustomNSError wrapping an enum (through errorUserInfo).
        let wrapped = shapes(PaymentFailed(underlyingError: Coded()))
        XCTAssertEqual(wrapped.compactMap { $0["type"] as? String },
                       ["\(module).expired", String(reflecting: Coded.self), String(reflecting: PaymentFailed.self)])
        XCTAssertEqual(wrapped.map { dig($0, "mechanism", "source") as? String }, ["NSUnderlyingErrorKey", "underlyingError", nil])
        assertJSON(dig(wrapped[1], "mechanism", "meta", "ns_error"), #"{"code": 7, "domain": "shop.coded"}"#)
        XCTAssertNil(dig(wrapped[0], "mechanism", "meta"), "a plain Swift enum has no NSError identity")

        // A cycle stops at the first error met again; a long chain at 10.
        let a = Looping(), b = Looping()
        a.underlyingError = b
        b.underlyingError = a
        XCTAssertEqual(shapes(a).count, 2)
        var deep: Error = CheckoutError.expired
        for _ in 0..<30 { deep = PaymentFailed(underlyingError: deep) }
        let chain = shapes(deep)
        XCTAssertEqual(chain.count, ErrorExceptions.maxChainedErrors)
        XCTAssertNil(dig(chain.last!, "mechanism", "source"), "the captured error is last")
        XCTAssertEqual(dig(chain.first!, "mechanism", "source") as? String, "underlyingError")
    }

    func testCapturedErrorEventKeepsTheStackOnTheCapturedErrorOnly() throws {
        let storage = start("error-event")
        Vaka.capture(PaymentFailed(underlyingError: CheckoutError.cardDeclined(code: 51)))
        let inner = NSError(domain: "inner.domain", code: 2, userInfo: [NSLocalizedDescriptionKey: "disk full"])
        Vaka.capture(NSError(domain: NSCocoaErrorDomain, code: 640, userInfo: [NSUnderlyingErrorKey: inner]))
        Vaka.close(timeout: 5)
        let events = try checkedOutbox(storage).flatMap(\.events)  // Relay keeps ns_error and source (checked by hand)
        XCTAssertEqual(events.count, 2)
        assertJSON(dig(events[1], "exception", "values", 0, "mechanism"),
                   #"{"type": "swift.error", "handled": true, "source": "NSUnderlyingErrorKey", "meta": {"ns_error": {"code": 2, "domain": "inner.domain"}}}"#)
        assertJSON(dig(events[1], "exception", "values", 1, "mechanism", "meta"), #"{"ns_error": {"code": 640, "domain": "NSCocoaErrorDomain"}}"#)
        let event = events[0]
        let values = try XCTUnwrap(dig(event, "exception", "values") as? [[String: Any]])
        XCTAssertEqual(values.compactMap { $0["type"] as? String },
                       [String(reflecting: CheckoutError.self) + ".cardDeclined", String(reflecting: PaymentFailed.self)])
        XCTAssertNil(values[0]["stacktrace"])
        let frames = try XCTUnwrap(dig(values[1], "stacktrace", "frames") as? [[String: Any]])
        XCTAssertTrue(frames.contains { ($0["function"] as? String ?? "").contains("testCapturedErrorEventKeepsTheStackOnTheCapturedErrorOnly") })
    }

    // MARK: - Attachments

    /// The attachment items sentry_sdk 2.75 writes for `add_attachment(bytes=..., filename=..., content_type=...)`
    /// and `add_attachment(path=..., content_type=...)` on the scope before a `capture_message`, as sentry_sdk's
    /// own parser reads them back (headers and payload), next to Vaka's from `files` read by the same parser.
    private func sentryAttachments(data: Data, dataName: String, dataType: String, path: String, pathType: String,
                                   files: [URL]) throws -> (ours: [[String: Any]], reference: [[String: Any]]) {
        let script = """
            import base64, json, sys
            import sentry_sdk
            from sentry_sdk.envelope import Envelope
            from sentry_sdk.transport import Transport
            def items(env):
                return [{"headers": {k: v for k, v in i.headers.items()}, "payload": base64.b64encode(i.payload.get_bytes()).decode()}
                        for i in env.items if i.type == "attachment"]
            sent = []
            class Catch(Transport):
                def capture_envelope(self, envelope): sent.append(envelope)
            sentry_sdk.init(dsn="https://k@127.0.0.1/1", transport=Catch(), default_integrations=False)
            scope = sentry_sdk.get_current_scope()
            scope.add_attachment(bytes=base64.b64decode(sys.argv[1]), filename=sys.argv[2], content_type=sys.argv[3])
            scope.add_attachment(path=sys.argv[4], content_type=sys.argv[5])
            sentry_sdk.capture_message("m")
            sentry_sdk.flush()
            reference = [i for e in sent for i in items(Envelope.deserialize(e.serialize()))]
            ours = [i for p in sys.argv[6:] for i in items(Envelope.deserialize(open(p, "rb").read()))]
            print(json.dumps({"ours": ours, "reference": reference}))
            """
        let (status, out) = runTool(try Peers.sentryPython(), ["-c", script, data.base64EncodedString(), dataName, dataType, path, pathType] + files.map(\.path))
        XCTAssertEqual(status, 0, out)
        let parsed = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: [[String: Any]]], out)
        return (parsed["ours"] ?? [], parsed["reference"] ?? [])
    }

    func testAttachmentsAreSentAsSentrySDKSendsThemAndFilesAreReadWhenSent() throws {
        let storage = start("attachments")
        let log = dirs.make("files").appendingPathComponent("app.log")
        try Data("registered\n".utf8).write(to: log)
        let bytes = Data("{\"cart\": [1, 2]}\n".utf8)
        Vaka.addAttachment(data: bytes, filename: "cart.json", contentType: "application/json")
        Vaka.addAttachment(path: log.path, contentType: "text/plain")
        try Data("at capture\nline two\n".utf8).write(to: log)  // a file is read when the event is sent
        Vaka.capture(message: "with the global attachments")
        Vaka.capture(message: "per call") { scope in
            scope.clearAttachments()
            scope.addAttachment(data: Data([0, 1, 2, 255]), filename: "blob.bin")
        }
        Vaka.addAttachment(data: Data(count: Attachment.maxBytes + 1), filename: "huge.bin")  // over 1 MiB: left out
        Vaka.track("custom event")  // screens and custom events carry no attachments
        Vaka.clearAttachments()
        Vaka.capture(message: "none left")
        Vaka.flush()
        let runs = storage.appendingPathComponent("runs/\(try XCTUnwrap(Vaka.runID))/attachments")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: runs.path), [], "side files deleted once sent")
        Vaka.close(timeout: 5)

        let envelopes = try checkedOutbox(storage).filter { !$0.events.isEmpty }
        XCTAssertEqual(envelopes.compactMap { dig($0.events[0], "logentry", "formatted") as? String },
                       ["with the global attachments", "per call", "custom event", "none left"])
        let first = envelopes[0].attachments
        XCTAssertEqual(first.map { $0.header["filename"] as? String }, ["cart.json", "app.log"])
        XCTAssertEqual(first.map { $0.header["content_type"] as? String }, ["application/json", "text/plain"])
        XCTAssertEqual(first.map { $0.header["attachment_type"] as? String }, ["event.attachment", "event.attachment"])
        XCTAssertEqual(first.map { $0.header["length"] as? Int }, [bytes.count, 20])
        XCTAssertEqual(first.map(\.payload), [bytes, Data("at capture\nline two\n".utf8)])
        XCTAssertEqual(envelopes[1].attachments.map { $0.header["filename"] as? String }, ["blob.bin"], "the global ones cleared for this event only")
        XCTAssertEqual(envelopes[1].attachments.first?.header["content_type"] as? String, "application/octet-stream")
        XCTAssertEqual(envelopes[1].attachments.first?.payload, Data([0, 1, 2, 255]))
        XCTAssertEqual(envelopes[2].attachments.count, 0)
        XCTAssertEqual(envelopes[3].attachments.count, 0)

        // The same calls in sentry_sdk 2.75: the same headers (it leaves out attachment_type, whose default is
        // event.attachment) and payloads, both envelopes read by its parser.
        let (ours, reference) = try sentryAttachments(data: bytes, dataName: "cart.json", dataType: "application/json",
                                                      path: log.path, pathType: "text/plain", files: [envelopes[0].file])
        XCTAssertEqual(ours.count, 2)
        XCTAssertEqual(reference.count, 2)
        for (mine, theirs) in zip(ours, reference) {
            var headers = try XCTUnwrap(mine["headers"] as? [String: Any])
            XCTAssertEqual(headers.removeValue(forKey: "attachment_type") as? String, "event.attachment")
            assertJSON(headers, String(decoding: try JSONSerialization.data(withJSONObject: theirs["headers"] as Any), as: UTF8.self))
            XCTAssertEqual(mine["payload"] as? String, theirs["payload"] as? String)
        }
    }

    /// An attachment item keeps its `filename` and `attachment_type` when its envelope is read back (a batch
    /// file of `pending/`, an outbox file): what the uploader sends is what was written.
    func testAttachmentItemHeadersSurviveReadingTheEnvelopeBack() throws {
        let envelope = Envelope(header: .init(eventID: String(repeating: "a", count: 32)),
                                items: [.event(Data("{}".utf8)), .attachment(Data("x\ny".utf8), filename: "a.log", contentType: "text/plain")])
        let text = String(decoding: envelope.serialized(), as: UTF8.self)
        XCTAssertTrue(text.contains(#"{"attachment_type":"event.attachment","content_type":"text/plain","filename":"a.log","length":3,"type":"attachment"}"#), text)
        XCTAssertEqual(try Envelope(data: envelope.serialized()), envelope)
        XCTAssertEqual(RateLimits.category(for: .attachment), "attachment")
    }

    /// A run that died before its mover moved a captured event: the next launch sends the event from the dead
    /// run's journal with its attachments, the bytes from the side file in the run directory and the file as it
    /// is then.
    func testAnEventLeftInADeadRunsJournalIsSentWithItsAttachments() throws {
        let storage = dirs.make("dead-attachments")
        let deadRun = UUID().uuidString
        let file = dirs.make("dead-file").appendingPathComponent("trace.txt")
        try Data("at capture".utf8).write(to: file)
        let eventID = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
        do {
            let dir = try RunDirectory(storage: storage, runID: deadRun)
            try dir.write(RunScope(runID: deadRun, release: "dead@1.0", environment: "production", tags: [:], userID: nil, session: nil))
            let journal = try Journal(path: dir.url.appendingPathComponent("journal"))
            let refs = AttachmentItems.record([Attachment(data: Data("bytes".utf8), filename: "b.bin"), Attachment(path: file.path)],
                                              eventID: eventID, directory: AttachmentItems.sideDirectory(dir.url), log: nil)
            XCTAssertEqual(refs.map(\.sideFile), [true, false])
            let event = Event(eventID: eventID, timestamp: 1_700_000_000, level: .info, logentry: LogEntry(formatted: "left behind"))
            XCTAssertNotNil(journal.append(.event, level: 9, bodyBytes: try event.jsonData(), attributes: [
                Journal.Attribute(key: "event_id", value: .string(eventID), meta: true),
                Journal.Attribute(key: AttachmentItems.journalKey, value: .string(String(decoding: try JSONEncoder().encode(refs), as: UTF8.self)), meta: true),
            ]))
            journal.close()
        }
        try Data("at the next launch".utf8).write(to: file)
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage),
                                storage: storage, runID: "N-\(UUID().uuidString)", dsn: nil, log: nil)
        client.begin()
        client.end(timeout: 1)
        let envelope = try XCTUnwrap(try checkedOutbox(storage).first { $0.header["event_id"] as? String == eventID })
        XCTAssertEqual(envelope.attachments.map { $0.header["filename"] as? String }, ["b.bin", "trace.txt"])
        XCTAssertEqual(envelope.attachments.map(\.payload), [Data("bytes".utf8), Data("at the next launch".utf8)])
        XCTAssertFalse(FileManager.default.fileExists(atPath: RunDirectory.root(storage).appendingPathComponent(deadRun).path),
                       "the dead run's directory, side files included, is deleted once its events are queued")
    }

    /// A crash at the next launch carries the crashed run's user, contexts, extra, breadcrumb data and the file it
    /// attached, as the file is at the next launch (the harness's `--rich-scope FILE`).
    func testCrashAtTheNextLaunchCarriesUserContextsExtraAndTheAttachedFile() throws {
        let storage = dirs.make("crash-scope")
        let logs = dirs.make("crash-scope-logs")
        let file = dirs.make("crash-scope-file").appendingPathComponent("session.log")
        try Data("before the crash\n".utf8).write(to: file)
        let crash = try runHarness(["null-deref", "--rich-scope", file.path, "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
        let handle = try FileHandle(forWritingTo: file)
        handle.seekToEndOfFile()
        handle.write(Data("after the crash\n".utf8))
        try handle.close()
        let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)

        let envelopes = try checkedOutbox(storage)
        let fatal = try XCTUnwrap(envelopes.first { $0.events.first?["level"] as? String == "fatal" })
        let event = fatal.events[0]
        assertJSON(event["user"], #"{"id": "user-123", "email": "ana@example.com", "username": "ana", "ip_address": "203.0.113.7"}"#)
        assertJSON(dig(event, "contexts", "order"), #"{"id": 1042, "total": 99.5, "items": ["book", "pen"]}"#)
        XCTAssertEqual(dig(event, "extra", "cart_size") as? Int, 3)
        let crumb = try XCTUnwrap((dig(event, "breadcrumbs", "values") as? [[String: Any]])?.last)
        XCTAssertEqual(crumb["type"] as? String, "query")
        XCTAssertEqual(crumb["level"] as? String, "warning")
        assertJSON(crumb["data"], #"{"rows": 3, "cached": false, "tables": ["orders"]}"#)
        XCTAssertEqual(fatal.attachments.count, 1)
        assertJSON(fatal.attachments.first?.header, #"{"type": "attachment", "length": 33, "filename": "session.log", "content_type": "text/plain", "attachment_type": "event.attachment"}"#)
        XCTAssertEqual(fatal.attachments.first?.payload, Data("before the crash\nafter the crash\n".utf8), "read at the next launch")
        XCTAssertEqual(fatal.sessions.first?["status"] as? String, "crashed")
    }
}
