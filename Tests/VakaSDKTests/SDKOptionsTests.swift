import Foundation
import Synchronization
import XCTest
import VakaTestSupport
@testable import Vaka

/// Each SDK option, checked on the envelopes the SDK writes in outbox mode (exact fields), every envelope
/// parsed by sentry_sdk's `Envelope` and every event checked by Relay's normalizer (``validateWithPeers``).
final class SDKOptionsTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() {
        Vaka.close(timeout: 1)
        dirs.removeAll()
    }

    struct CheckoutError: Error {}

    /// Starts Vaka in outbox mode on a fresh storage directory with `configure` applied; no session updates.
    private func start(_ label: String, _ configure: (inout Vaka.Options) -> Void) -> URL {
        let storage = dirs.make(label)
        var options = Vaka.Options(release: "shop@1.0", environment: "test", sessionTracking: false, storageDirectory: storage)
        configure(&options)
        Vaka.start(options)
        return storage
    }

    /// Closes Vaka, reads the outbox and checks every envelope with the peers.
    private func finish(_ storage: URL, file: StaticString = #filePath, line: UInt = #line) throws -> [OutboxEnvelope] {
        Vaka.close(timeout: 5)
        let envelopes = try readOutbox(storage)
        let check = try validateWithPeers(envelopes.map(\.file), scratch: dirs.make("peers"))
        XCTAssertEqual(check.problems, [], file: file, line: line)
        return envelopes
    }

    private func events(_ envelopes: [OutboxEnvelope]) -> [[String: Any]] { envelopes.flatMap(\.events) }

    /// The `discarded_events` of every `client_report` item, as `reason/category` → quantity (summed).
    private func discarded(_ envelopes: [OutboxEnvelope]) -> [String: Int] {
        var out: [String: Int] = [:]
        for envelope in envelopes {
            for item in envelope.items where item.type == "client_report" {
                XCTAssertNotNil(item.payload["timestamp"] as? Double)
                for entry in item.payload["discarded_events"] as? [[String: Any]] ?? [] {
                    let key = "\(entry["reason"] as? String ?? "?")/\(entry["category"] as? String ?? "?")"
                    out[key, default: 0] += entry["quantity"] as? Int ?? -1
                }
            }
        }
        return out
    }

    private func message(_ event: [String: Any]) -> String? { (event["logentry"] as? [String: Any])?["formatted"] as? String }

    func testSampleRateZeroDropsErrorsAndMessagesNotCustomEventsAndCountsThem() throws {
        let storage = start("sample") { $0.sampleRate = 0 }
        Vaka.capture(CheckoutError())
        Vaka.capture(message: "not kept")
        Vaka.track("purchase")
        Vaka.screen("Checkout")
        let envelopes = try finish(storage)
        XCTAssertEqual(events(envelopes).map(message).sorted { ($0 ?? "") < ($1 ?? "") }, ["purchase", "screen_view"])
        XCTAssertEqual(discarded(envelopes), ["sample_rate/error": 2])
    }

    func testSampleRateHalfKeepsSomeAndCountsTheRest() throws {
        let storage = start("half") { $0.sampleRate = 0.5 }
        for i in 0..<200 { Vaka.capture(message: "m\(i)") }
        let envelopes = try finish(storage)
        let kept = events(envelopes).count
        XCTAssertEqual(kept + (discarded(envelopes)["sample_rate/error"] ?? 0), 200)
        XCTAssertTrue((40...160).contains(kept), "\(kept) of 200 kept at 0.5")
    }

    func testBeforeSendEditsAndDropsOnTheMoverThread() throws {
        let onMain = Mutex<[Bool]>([])
        let storage = start("before-send") { options in
            options.beforeSend = { event in
                onMain.withLock { $0.append(Thread.isMainThread) }
                if (event.logentry?.formatted ?? "") == "drop me" { return nil }
                var event = event
                event.tags = (event.tags ?? [:]).merging(["scrubbed": "yes"]) { _, new in new }
                event.logentry?.formatted = "edited"
                return event
            }
        }
        XCTAssertTrue(Thread.isMainThread)
        Vaka.capture(message: "drop me")
        Vaka.capture(message: "keep me")
        Vaka.capture(CheckoutError())
        // The mover, woken by each capture, calls the hook (flush and close would call it on this thread for
        // what is still in the journal): wait for it, at most 20 s.
        let deadline = Date().addingTimeInterval(20)
        while onMain.withLock({ $0.count }) < 3 && Date() < deadline { usleep(10_000) }
        let envelopes = try finish(storage)
        let sent = events(envelopes)
        XCTAssertEqual(sent.count, 2)
        XCTAssertEqual(sent.map(message), ["edited", nil], "the message edited; the error has no logentry (its hook left it)")
        for event in sent { XCTAssertEqual((event["tags"] as? [String: String])?["scrubbed"], "yes") }
        XCTAssertEqual(discarded(envelopes), ["before_send/error": 1])
        // Called once per event, never on the capturing (main) thread: on the mover's.
        XCTAssertEqual(onMain.withLock { $0 }, [false, false, false])
    }

    /// A `beforeSend` that writes values JSON cannot hold (a NaN time, NaN and too-deep extra, a NaN breadcrumb
    /// time): the event is still sent with what the hook kept, not replaced by an empty object.
    func testBeforeSendWritingUnencodableValuesStillSendsTheEvent() throws {
        let storage = start("before-send-nan") { options in
            options.beforeSend = { event in
                var event = event
                var deep: JSONValue = .int(1)
                for _ in 0..<600 { deep = .array([deep]) }
                event.timestamp = .nan
                event.extra = ["ratio": .double(.nan), "deep": deep]
                if var crumbs = event.breadcrumbs {
                    crumbs.values[0].timestamp = -.infinity
                    event.breadcrumbs = crumbs
                }
                return event
            }
        }
        Vaka.addBreadcrumb(category: "cart", message: "added")
        Vaka.capture(message: "kept whole")
        let sent = events(try finish(storage))
        XCTAssertEqual(sent.map(message), ["kept whole"])
        XCTAssertGreaterThan(sent.first?["timestamp"] as? Double ?? 0, 1_700_000_000)
        XCTAssertEqual((sent.first?["extra"] as? [String: Any])?["ratio"] as? String, "nan")
        let crumbs = (sent.first?["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]] ?? []
        XCTAssertEqual(crumbs.map { $0["message"] as? String }, ["added"])
        XCTAssertGreaterThan(crumbs.first?["timestamp"] as? Double ?? 0, 1_700_000_000)
    }

    func testBeforeBreadcrumbDropsAndEditsEveryKindOfBreadcrumb() throws {
        let storage = start("before-crumb") { options in
            options.beforeBreadcrumb = { crumb in
                if crumb.category == "secret" { return nil }
                var crumb = crumb
                crumb.message = "[" + (crumb.message ?? "") + "]"
                return crumb
            }
        }
        Vaka.addBreadcrumb(category: "cart", message: "added")
        Vaka.addBreadcrumb(category: "secret", message: "password")
        Vaka.logger.info("logged")
        Vaka.capture(message: "with crumbs")
        let envelopes = try finish(storage)
        let crumbs = (events(envelopes).first?["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]] ?? []
        XCTAssertEqual(crumbs.map { $0["message"] as? String }, ["[added]", "[logged]"])
        XCTAssertEqual(crumbs.map { $0["category"] as? String }, ["cart", "log"])
    }

    /// A `beforeBreadcrumb` that adds a breadcrumb itself (directly, or by logging): the nested one is kept as
    /// given instead of passing through the hook again (which would call itself until the stack overflows).
    func testBeforeBreadcrumbAddingBreadcrumbsDoesNotRecurse() throws {
        let calls = Atomic<Int>(0)
        let storage = start("crumb-reentry") { options in
            options.beforeBreadcrumb = { crumb in
                calls.wrappingAdd(1, ordering: .relaxed)
                Vaka.addBreadcrumb(category: "hook", message: "from the hook")
                Vaka.logger.info("logged by the hook")
                var crumb = crumb
                crumb.message = "[" + (crumb.message ?? "") + "]"
                return crumb
            }
        }
        Vaka.addBreadcrumb(category: "cart", message: "added")
        Vaka.capture(message: "with crumbs")
        let envelopes = try finish(storage)
        let crumbs = (events(envelopes).first?["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]] ?? []
        XCTAssertEqual(crumbs.map { $0["message"] as? String }, ["from the hook", "logged by the hook", "[added]"])
        XCTAssertEqual(calls.load(ordering: .relaxed), 1)
    }

    func testMaxBreadcrumbsKeepsTheLastOnes() throws {
        let storage = start("max-crumbs") { $0.maxBreadcrumbs = 3 }
        for i in 0..<10 { Vaka.addBreadcrumb(category: "step", message: "crumb \(i)") }
        Vaka.capture(message: "after ten")
        let envelopes = try finish(storage)
        let crumbs = (events(envelopes).first?["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]] ?? []
        XCTAssertEqual(crumbs.map { $0["message"] as? String }, ["crumb 7", "crumb 8", "crumb 9"])
    }

    func testServerNameDistAndAttachStacktrace() throws {
        let storage = start("identity") { options in
            options.serverName = "web-7"
            options.dist = "build-42"
            options.attachStacktrace = true
        }
        Vaka.capture(message: "with a stack")
        let envelopes = try finish(storage)
        let event = try XCTUnwrap(events(envelopes).first)
        XCTAssertEqual(event["server_name"] as? String, "web-7")
        XCTAssertEqual(event["dist"] as? String, "build-42")
        let thread = try XCTUnwrap(((event["threads"] as? [String: Any])?["values"] as? [[String: Any]])?.first)
        XCTAssertEqual(thread["current"] as? Bool, true)
        XCTAssertEqual(thread["crashed"] as? Bool, false)
        let frames = (thread["stacktrace"] as? [String: Any])?["frames"] as? [[String: Any]] ?? []
        let functions = frames.compactMap { $0["function"] as? String }
        XCTAssertTrue(functions.last?.contains("testServerNameDistAndAttachStacktrace") ?? false, "newest frame: \(functions.suffix(3))")
        XCTAssertFalse(functions.contains { $0.contains("Vaka.capture") }, "capture itself is left out")
        XCTAssertFalse(((event["debug_meta"] as? [String: Any])?["images"] as? [Any] ?? []).isEmpty)
        XCTAssertNil(event["exception"])
    }

    func testWithoutAttachStacktraceAMessageHasNoThreads() throws {
        let storage = start("no-stack") { _ in }
        Vaka.capture(message: "plain")
        let event = try XCTUnwrap(events(try finish(storage)).first)
        XCTAssertNil(event["threads"])
        XCTAssertNil(event["server_name"], "no host name without sendDefaultPii")
        XCTAssertNil(event["dist"])
    }

    // MARK: - In-app and PII, on a handled error with a known stack (a Client as Vaka.start makes it)

    private func stack(home: String) -> (stacktrace: Stacktrace?, images: [DebugImage]) {
        let packages = ["/opt/shop/bin/shop", "/usr/lib/libfoo.so.1", "\(home)/lib/libbar.so", "/opt/shop/lib/libshopkit.so"]
        let frames = packages.enumerated().map { i, package in
            Frame(instructionAddr: HexAddress(0x1000 + UInt64(i) * 16), package: package, imageAddr: HexAddress(0x1000),
                  function: "f\(i)", inApp: package.hasPrefix("/opt/shop"), filename: "\(home)/src/F\(i).swift", lineno: i + 1)
        }
        let images = packages.map { DebugImage(codeFile: $0, imageAddr: HexAddress(0x1000), imageSize: 0x1000,
                                               codeID: "00112233445566778899aabbccddeeff01234567",
                                               debugID: "33221100-5544-7766-8899-aabbccddeeff") }
        return (Stacktrace(frames: frames), images)
    }

    private func capturedError(_ label: String, _ configure: (inout Vaka.Options) -> Void, home: String) throws -> [String: Any] {
        let storage = dirs.make(label)
        var options = Vaka.Options(release: "shop@1.0", environment: "test", sessionTracking: false, storageDirectory: storage)
        configure(&options)
        options = options.bounded(variable: { _ in nil }, note: { _ in })
        let client = try Client(options: options, storage: storage, runID: UUID().uuidString, dsn: nil, log: nil)
        client.begin()
        client.identify("user-1")
        client.capture(error: CheckoutError(), stack: stack(home: home))
        client.end(timeout: 5)
        let envelopes = try readOutbox(storage)
        let check = try validateWithPeers(envelopes.map(\.file), scratch: dirs.make("peers"))
        XCTAssertEqual(check.problems, [])
        return try XCTUnwrap(events(envelopes).first)
    }

    private func frames(_ event: [String: Any]) -> [[String: Any]] {
        let exception = ((event["exception"] as? [String: Any])?["values"] as? [[String: Any]])?.first
        return (exception?["stacktrace"] as? [String: Any])?["frames"] as? [[String: Any]] ?? []
    }

    func testInAppIncludeWinsOverExcludeOnEveryFrame() throws {
        let home = try XCTUnwrap(EventProcessor.homeDirectory())
        let event = try capturedError("in-app", { options in
            options.inAppInclude = ["libfoo", "/opt/shop/lib/"]
            options.inAppExclude = ["/opt/shop/", "libbar"]
        }, home: home)
        // shop: excluded by path; libfoo: included by name; libbar: excluded by name; libshopkit: included by path (wins).
        XCTAssertEqual(frames(event).map { $0["in_app"] as? Bool }, [false, true, false, true])
    }

    func testWithoutSendDefaultPiiTheHomeDirectoryIsATilde() throws {
        let home = try XCTUnwrap(EventProcessor.homeDirectory())
        let event = try capturedError("pii-off", { _ in }, home: home)
        let f = frames(event)
        XCTAssertEqual(f.map { $0["filename"] as? String }, (0..<4).map { "~/src/F\($0).swift" })
        XCTAssertEqual(f[2]["package"] as? String, "~/lib/libbar.so")
        let images = (event["debug_meta"] as? [String: Any])?["images"] as? [[String: Any]] ?? []
        XCTAssertEqual(images.map { $0["code_file"] as? String }, ["/opt/shop/bin/shop", "/usr/lib/libfoo.so.1", "~/lib/libbar.so", "/opt/shop/lib/libshopkit.so"])
        XCTAssertNil(event["server_name"])
        XCTAssertEqual(event["user"] as? [String: String], ["id": "user-1"], "no IP address")
        XCTAssertFalse(String(decoding: try JSONSerialization.data(withJSONObject: event), as: UTF8.self).contains(home + "/"))
    }

    func testWithSendDefaultPiiHostNameAndAutomaticIPAndPathsAsTheyAre() throws {
        let home = try XCTUnwrap(EventProcessor.homeDirectory())
        let event = try capturedError("pii-on", { $0.sendDefaultPii = true }, home: home)
        XCTAssertEqual(event["server_name"] as? String, EventProcessor.hostName())
        XCTAssertNotNil(event["server_name"])
        XCTAssertEqual(event["user"] as? [String: String], ["id": "user-1", "ip_address": "{{auto}}"])
        XCTAssertEqual(frames(event).first?["filename"] as? String, "\(home)/src/F0.swift")
    }

    func testTildeOnlyReplacesAWholeLeadingDirectory() {
        XCTAssertEqual(EventProcessor.tilde("/home/ana/x", home: "/home/ana"), "~/x")
        XCTAssertEqual(EventProcessor.tilde("/home/ana", home: "/home/ana"), "~")
        XCTAssertEqual(EventProcessor.tilde("/home/anatoly/x", home: "/home/ana"), "/home/anatoly/x")
        XCTAssertEqual(EventProcessor.tilde("/srv/home/ana/x", home: "/home/ana"), "/srv/home/ana/x")
    }

    // MARK: - The environment

    private func resolved(_ options: Vaka.Options, _ environment: [String: String]) -> (Vaka.Options, [String]) {
        var notes: [String] = []
        let o = options.bounded(variable: { environment[$0] }, note: { notes.append($0) })
        return (o, notes)
    }

    func testSentryVariablesFillWhatTheCodeDidNotGive() throws {
        let env = ["SENTRY_DSN": "http://envkey@127.0.0.1:9/7", "SENTRY_RELEASE": "app@2.0", "SENTRY_ENVIRONMENT": "staging"]
        let (fromEnv, notes) = resolved(Vaka.Options(), env)
        XCTAssertEqual(notes, [])
        XCTAssertEqual(fromEnv.dsn, "http://envkey@127.0.0.1:9/7")
        XCTAssertEqual(fromEnv.release, "app@2.0")
        XCTAssertEqual(fromEnv.environment, "staging")
        XCTAssertEqual(try fromEnv.parsedDSN()?.envelopeURL.absoluteString, "http://127.0.0.1:9/api/7/envelope/")

        // Code wins, also an environment set to the default value, and a key/endpoint pair.
        var code = Vaka.Options(dsn: "http://codekey@127.0.0.1:9/1", release: "code@1", environment: "production")
        XCTAssertEqual(resolved(code, env).0.dsn, "http://codekey@127.0.0.1:9/1")
        XCTAssertEqual(resolved(code, env).0.release, "code@1")
        XCTAssertEqual(resolved(code, env).0.environment, "production")
        code = Vaka.Options()
        code.environment = "qa"
        XCTAssertEqual(resolved(code, env).0.environment, "qa")
        XCTAssertNil(resolved(Vaka.Options(key: "k", endpoint: "http://127.0.0.1:9/api/1"), env).0.dsn)
        // VAKA_RELEASE (the default release's own variable) wins over SENTRY_RELEASE.
        XCTAssertNil(resolved(Vaka.Options(), env.merging(["VAKA_RELEASE": "vaka@3"]) { _, new in new }).0.release)
        // Empty variables count as not set.
        let empty = resolved(Vaka.Options(), ["SENTRY_DSN": "", "SENTRY_RELEASE": "", "SENTRY_ENVIRONMENT": ""])
        XCTAssertEqual(empty.1, [])
        XCTAssertNil(empty.0.dsn)
        XCTAssertEqual(empty.0.environment, "production")
    }

    /// Values read from a file with a line ending (a mounted secret, a CRLF `.env` file) or padded with blanks
    /// are used without them, as Sentry's SDKs use them; blanks alone count as not set.
    func testSentryVariablesAreUsedWithoutSurroundingWhitespace() {
        let (o, notes) = resolved(Vaka.Options(), ["SENTRY_DSN": " http://envkey@127.0.0.1:9/7\r\n",
                                                   "SENTRY_RELEASE": "app@2.0\n", "SENTRY_ENVIRONMENT": "staging\r\n"])
        XCTAssertEqual(o.dsn, "http://envkey@127.0.0.1:9/7")
        XCTAssertEqual(o.release, "app@2.0")
        XCTAssertEqual(o.environment, "staging")
        XCTAssertEqual(notes, [])
        let (blank, blankNotes) = resolved(Vaka.Options(), ["SENTRY_DSN": " \n", "SENTRY_RELEASE": "\t", "SENTRY_ENVIRONMENT": " "])
        XCTAssertNil(blank.dsn)
        XCTAssertEqual(blank.environment, Vaka.Options.defaultEnvironment)
        XCTAssertEqual(blankNotes, [])
    }

    func testBadSentryVariablesGiveOneLineEachAndNeverStopVaka() {
        let (o, notes) = resolved(Vaka.Options(), ["SENTRY_DSN": "ftp://nokey", "SENTRY_RELEASE": "a/b\u{1}",
                                                   "SENTRY_ENVIRONMENT": String(repeating: "e", count: 100)])
        XCTAssertNil(o.dsn)
        XCTAssertEqual(o.release, "a_b_")
        XCTAssertEqual(o.environment, String(repeating: "e", count: 64))
        XCTAssertEqual(notes.count, 3, "\(notes)")
        XCTAssertTrue(notes[0].hasPrefix("invalid SENTRY_DSN ("), notes[0])
        XCTAssertTrue(notes[1].hasPrefix(#"SENTRY_RELEASE "a/b\u{01}" changed to "a_b_" ("#), notes[1])
        XCTAssertTrue(notes[2].hasPrefix(#"SENTRY_ENVIRONMENT "\#(String(repeating: "e", count: 40))…" (100 bytes) changed to "\#(String(repeating: "e", count: 40))…" (64 bytes) ("#), notes[2])
    }

    /// `VAKA_RELEASE` (taken by `defaultRelease()`) that Relay would refuse gives the same one line as
    /// `SENTRY_RELEASE`; a usable one gives none.
    func testBadVakaReleaseGivesOneLine() {
        let (_, notes) = resolved(Vaka.Options(), ["VAKA_RELEASE": "a/b", "SENTRY_RELEASE": "ignored@1"])
        XCTAssertEqual(notes.count, 1, "\(notes)")
        XCTAssertTrue(notes.first?.hasPrefix(#"VAKA_RELEASE "a/b" changed to "a_b" ("#) ?? false, "\(notes)")
        XCTAssertEqual(resolved(Vaka.Options(), ["VAKA_RELEASE": "app@1.2"]).1, [])
    }

    func testOutOfRangeOptionsAreClampedWithALine() {
        var options = Vaka.Options()
        options.sampleRate = 7
        options.maxBreadcrumbs = 1000
        options.shutdownTimeout = -3
        let (o, notes) = resolved(options, [:])
        XCTAssertEqual(o.sampleRate, 1)
        XCTAssertEqual(o.maxBreadcrumbs, 100)
        XCTAssertEqual(o.shutdownTimeout, 0)
        XCTAssertEqual(notes.count, 3, "\(notes)")
        options.sampleRate = .nan
        XCTAssertEqual(resolved(options, [:]).0.sampleRate, 1)
    }

    func testEveryClampGivesItsLineWithoutDebug() {
        var options = Vaka.Options(flushInterval: 0, maxBatchSize: 0, debug: false)
        options.journalSize = 1
        let (o, notes) = resolved(options, [:])
        XCTAssertEqual(o.flushInterval, 0.1)
        XCTAssertEqual(o.maxBatchSize, 1)
        XCTAssertEqual(o.journalSize, 16 * 1024)
        XCTAssertEqual(notes, ["flushInterval 0.0 is outside 0.1...86400.0 s; using 0.1",
                               "maxBatchSize 0 is outside 1...1000; using 1",
                               "journalSize 1 is outside 16384...67108864 bytes; using 16384"])
        options = Vaka.Options(flushInterval: .nan, maxBatchSize: 5_000)
        options.journalSize = 1 << 40
        let (big, bigNotes) = resolved(options, [:])
        XCTAssertEqual(big.flushInterval, 10)
        XCTAssertEqual(big.maxBatchSize, 1_000)
        XCTAssertEqual(big.journalSize, 64 * 1024 * 1024)
        XCTAssertEqual(bigNotes.count, 3, "\(bigNotes)")
    }

    func testAChangedReleaseIsQuotedOldAndNew() {
        var options = Vaka.Options()
        options.release = "a/b\nc"
        let (o, notes) = resolved(options, [:])
        XCTAssertEqual(o.release, "a_b_c")
        XCTAssertEqual(notes.count, 1, "\(notes)")
        XCTAssertTrue(notes[0].hasPrefix(#"release "a/b\nc" changed to "a_b_c" (Relay refuses"#), notes[0])
        options.release = String(repeating: "r", count: 300)
        let long = resolved(options, [:]).1
        XCTAssertTrue(long[0].hasPrefix(#"release "\#(String(repeating: "r", count: 40))…" (300 bytes) changed to "\#(String(repeating: "r", count: 40))…" (200 bytes)"#), long[0])
    }
}
