import XCTest
import VakaTestSupport

/// The SDK end to end through the harness (`vaka-crashme`), in outbox mode (no DSN): what each scenario writes,
/// the crash join, abnormal sessions, file modes, and every envelope checked by the real peers
/// (sentry_sdk's `Envelope`, Relay's `StoreNormalizer`, Bugsink's event schema).
final class HarnessTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func mode(_ url: URL) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: url.path))?[.posixPermissions] as? Int
    }

    func testEventsScenarioWritesEventsAndASession() throws {
        let storage = dirs.make("events")
        let logs = dirs.make("events-logs")
        let child = try runHarness(["events", "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        let envelopes = try readOutbox(storage)
        let events = envelopes.flatMap(\.events)
        let sessions = envelopes.flatMap(\.sessions)
        XCTAssertEqual(events.count, 4, "screen Cart, purchase, screen Checkout, handled error")

        // Every event: the common fields.
        for event in events {
            XCTAssertEqual(event["platform"] as? String, "native")
            XCTAssertEqual(dig(event, "sdk", "name") as? String, "vaka.swift")
            XCTAssertEqual(dig(event, "contexts", "os", "name") as? String, "Linux")
            XCTAssertNotNil(dig(event, "contexts", "os", "kernel_version") as? String)
            XCTAssertNotNil(dig(event, "contexts", "os", "distribution_name") as? String, "from /etc/os-release")
            XCTAssertEqual(dig(event, "contexts", "device", "arch") as? String, "x86_64")
            XCTAssertEqual(dig(event, "contexts", "app", "app_name") as? String, "vaka-crashme")
            XCTAssertEqual(event["environment"] as? String, "production")
            XCTAssertTrue((event["release"] as? String ?? "").hasPrefix("vaka-crashme@"))
            XCTAssertEqual((event["event_id"] as? String)?.count, 32)
        }
        let screen = events[0]
        XCTAssertEqual(dig(screen, "logentry", "formatted") as? String, "screen_view")
        XCTAssertEqual(dig(screen, "extra", "screen") as? String, "Cart")
        XCTAssertEqual(dig(screen, "breadcrumbs", "values", -1, "type") as? String, "navigation")
        let purchase = events[1]
        XCTAssertEqual(dig(purchase, "logentry", "formatted") as? String, "purchase")
        XCTAssertEqual(dig(purchase, "extra", "plan") as? String, "pro")

        let error = events[3]
        XCTAssertEqual(error["level"] as? String, "error")
        XCTAssertEqual(dig(error, "exception", "values", 0, "type") as? String, "vaka_crashme.CheckoutError.cardDeclined", "the Swift type and its case")
        XCTAssertEqual(dig(error, "exception", "values", 0, "value") as? String, "card declined (code 51)")
        XCTAssertEqual(dig(error, "exception", "values", 0, "mechanism", "handled") as? Bool, true)
        let frames = try XCTUnwrap(dig(error, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        XCTAssertTrue((frames.last?["function"] as? String ?? "").contains("handledErrorScenario"), "\(frames.last ?? [:])")
        XCTAssertEqual(frames.last?["in_app"] as? Bool, true)
        XCTAssertNotNil(dig(error, "debug_meta", "images", 0, "debug_id") as? String)
        XCTAssertEqual(dig(error, "user", "id") as? String, "user-123")
        XCTAssertEqual(dig(error, "tags", "flavor") as? String, "free")
        let crumbs = try XCTUnwrap(dig(error, "breadcrumbs", "values") as? [[String: Any]])
        XCTAssertEqual(crumbs.map { $0["message"] as? String }, ["Cart", "Added item 42", "Opened checkout", "Checkout"])
        XCTAssertEqual(dig(crumbs[3], "data", "from") as? String, "Cart")

        // Session: ok (init) at start, ok with errors 1 next to the handled error, exited at exit.
        XCTAssertEqual(sessions.map { $0["status"] as? String }, ["ok", "ok", "exited"])
        XCTAssertEqual(sessions.first?["init"] as? Bool, true)
        XCTAssertEqual(sessions.last?["errors"] as? Int, 1)
        XCTAssertEqual(Set(sessions.compactMap { $0["sid"] as? String }).count, 1)
        let anon = try String(contentsOf: storage.appendingPathComponent("anon_id"), encoding: .utf8)
        XCTAssertEqual(sessions.first?["did"] as? String, anon)
        XCTAssertTrue(envelopes.contains { $0.events.count == 1 && $0.sessions.count == 1 }, "error + session update in one envelope")

        // Modes: directories 0700, files 0600; the run directory is gone after a normal exit.
        XCTAssertEqual(mode(storage.appendingPathComponent("outbox")), 0o700)
        XCTAssertEqual(mode(storage.appendingPathComponent("runs")), 0o700)
        XCTAssertEqual(mode(storage.appendingPathComponent("anon_id")), 0o600)
        for envelope in envelopes { XCTAssertEqual(mode(envelope.file), 0o600, envelope.file.path) }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("runs").path), [])
    }

    /// When `libunwind.so.8` cannot be opened (an empty file of that name first on LD_LIBRARY_PATH), a handled
    /// error's stack comes from the crash runtime's frame-pointer walk, which starts at the frame record
    /// `vaka_crash_capture_frames` makes for itself: the newest frame is still the capturing function
    /// (`handledErrorScenario`, Vaka's own frames left out as with libunwind), and the walk goes on to `main`.
    func testHandledErrorWithoutLibunwindIsUnwoundByFramePointers() throws {
        let storage = dirs.make("no-libunwind")
        let logs = dirs.make("no-libunwind-logs")
        let libraries = dirs.make("no-libunwind-lib")
        XCTAssertTrue(FileManager.default.createFile(atPath: libraries.appendingPathComponent("libunwind.so.8").path,
                                                     contents: Data()))
        let child = try runHarness(["handled-error", "--storage", storage.path],
                                   environment: ["LD_LIBRARY_PATH": libraries.path, "VAKA_DEBUG": "1"], logDirectory: logs)
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        XCTAssertTrue(child.stderr.contains("libunwind not loaded"), "the fallback is what runs: \(child.stderr)")
        let events = try readOutbox(storage).flatMap(\.events)
        XCTAssertEqual(events.count, 1)
        let frames = try XCTUnwrap(dig(events.first ?? [:], "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        let functions = frames.reversed().map { $0["function"] as? String ?? "?" }  // newest first
        XCTAssertTrue(functions.first?.contains("handledErrorScenario") ?? false, "\(functions)")
        XCTAssertTrue(functions.dropFirst().contains("vaka_crashme_main"), "frame pointers reach main: \(functions)")
    }

    func testCrashJoinSendsTheCrashedRunsScopeWithASessionCrashed() throws {
        let storage = dirs.make("crash")
        let logs = dirs.make("crash-logs")
        let crash = try runHarness(["null-deref", "--scope", "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
        let crashes = storage.appendingPathComponent("crashes")
        let reports = try FileManager.default.contentsOfDirectory(atPath: crashes.path).filter { $0.hasSuffix(".crash") }
        XCTAssertEqual(reports.count, 1)
        let runID = try XCTUnwrap(reports.first).replacingOccurrences(of: ".crash", with: "")
        // The crashed run's session as its scope.json holds it (its first update may not have been sent: the
        // crash came right after `start`, while its background part ran).
        let scopeData = try Data(contentsOf: storage.appendingPathComponent("runs/\(runID)/scope.json"))
        let crashedScope = try XCTUnwrap(try JSONSerialization.jsonObject(with: scopeData) as? [String: Any])
        let crashedSession = try XCTUnwrap(crashedScope["session"] as? [String: Any])
        if let sent = try readOutbox(storage).flatMap(\.sessions).first {
            XCTAssertEqual(sent["sid"] as? String, crashedSession["sid"] as? String)
        }

        let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: crashes.path).filter { $0.hasSuffix(".crash") }, [],
                       "report deleted once the envelope is persisted")
        XCTAssertFalse(FileManager.default.fileExists(atPath: storage.appendingPathComponent("runs/\(runID)").path))
        let envelopes = try readOutbox(storage)
        let fatalEnvelope = try XCTUnwrap(envelopes.first { $0.events.first?["level"] as? String == "fatal" })
        let event = try XCTUnwrap(fatalEnvelope.events.first)
        XCTAssertEqual(event["event_id"] as? String, runID.replacingOccurrences(of: "-", with: "").lowercased())
        XCTAssertEqual(dig(event, "exception", "values", 0, "type") as? String, "SIGSEGV")
        XCTAssertEqual(dig(event, "exception", "values", 0, "mechanism", "handled") as? Bool, false)
        let frames = try XCTUnwrap(dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        XCTAssertEqual(frames.last?["function"] as? String, "crashme_null_deref")
        XCTAssertNotNil(dig(event, "debug_meta", "images", 0, "code_id"))
        XCTAssertEqual(dig(event, "tags", "flavor") as? String, "free")
        XCTAssertEqual(dig(event, "user", "id") as? String, "user-123")
        XCTAssertEqual((dig(event, "breadcrumbs", "values") as? [[String: Any]])?.compactMap { $0["message"] as? String },
                       ["Added item 42", "Opened checkout"])
        XCTAssertEqual(event["release"] as? String, crashedScope["release"] as? String)
        let session = try XCTUnwrap(fatalEnvelope.sessions.first, "crashed update in the same envelope")
        XCTAssertEqual(session["status"] as? String, "crashed")
        XCTAssertEqual(session["sid"] as? String, crashedSession["sid"] as? String, "the session of the run that crashed")
        XCTAssertEqual(session["init"] as? Bool, !(crashedSession["initSent"] as? Bool ?? true), "init: true when the run had sent no update")
        // The relaunch has its own session, which exited.
        XCTAssertEqual(envelopes.flatMap(\.sessions).last?["status"] as? String, "exited")
        XCTAssertNotEqual(envelopes.flatMap(\.sessions).last?["sid"] as? String, crashedSession["sid"] as? String)
    }

    /// The crash join keeps what it symbolicated in `<storage>/symcache/<build-id>.symcache` (mode 0700
    /// directory), and the next crash of the same build, symbolicated from there, gets the same frames.
    func testCrashJoinKeepsASymbolCacheAndTheNextCrashOfTheBuildGetsTheSameFrames() throws {
        let storage = dirs.make("symcache")
        let logs = dirs.make("symcache-logs")
        var fatalFrames: [[String]] = []
        var seen = Set<String>()
        for round in 0..<2 {
            let crash = try runHarness(["null-deref", "--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
            let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
            let fatal = try readOutbox(storage).flatMap(\.events).filter { $0["level"] as? String == "fatal" }
            let event = try XCTUnwrap(fatal.first { !seen.contains($0["event_id"] as? String ?? "") }, "round \(round)")
            seen.insert(event["event_id"] as? String ?? "")
            let frames = try XCTUnwrap(dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
            fatalFrames.append(frames.map { f in
                ["function", "filename", "lineno"].map { "\(f[$0] ?? "-")" }.joined(separator: " ")
            })
            XCTAssertEqual(frames.last?["function"] as? String, "crashme_null_deref")
            let cache = storage.appendingPathComponent("symcache")
            XCTAssertEqual(mode(cache), 0o700)
            let files = try FileManager.default.contentsOfDirectory(atPath: cache.path)
            // The executable's image (the one the crashing frame is in) has a cache file named by its build ID.
            // (Frames are compared by name, file and line: ASLR moves their addresses from run to run.)
            let images = try XCTUnwrap(dig(event, "debug_meta", "images") as? [[String: Any]])
            let crashing = try XCTUnwrap(images.first { ($0["code_file"] as? String)?.hasSuffix("/vaka-crashme") == true })
            let buildID = try XCTUnwrap(crashing["code_id"] as? String)
            XCTAssertTrue(files.contains("\(buildID).symcache"), "\(files)")
        }
        XCTAssertEqual(fatalFrames[0], fatalFrames[1], "the second crash, symbolicated from the cache, gets the same frames")
    }

    func testKilledRunIsSentAsAbnormalAtTheNextLaunch() throws {
        let storage = dirs.make("killed")
        let logs = dirs.make("killed-logs")
        let child = try RunningChild(Paths.harness, ["capture-many", "--storage", storage.path],
                                     environment: ["VAKA_CAPTURE_COUNT": "100000000"], logDirectory: logs)
        let progress = storage.appendingPathComponent("capture-many.progress")
        let deadline = Date().addingTimeInterval(60)
        // The progress file is made before the first capture; one index written means a capture returned, and a
        // capture makes the run's `scope.json` first (whether or not start's background part got to it).
        while ((try? FileManager.default.attributesOfItem(atPath: progress.path)[.size] as? Int) ?? nil ?? 0) == 0,
              Date() < deadline { usleep(10_000) }
        child.sigkill()
        _ = child.wait(timeout: 30)
        // The killed run's session from its scope.json: killed right after its first capture, it may not have sent
        // its first update yet (the background part of start sends it).
        let runs = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("runs").path)
        XCTAssertEqual(runs.count, 1)
        let scopeData = try Data(contentsOf: storage.appendingPathComponent("runs/\(try XCTUnwrap(runs.first))/scope.json"))
        let scope = try XCTUnwrap(try JSONSerialization.jsonObject(with: scopeData) as? [String: Any])
        let sid = try XCTUnwrap(dig(scope, "session", "sid") as? String)
        let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
        let updates = try readOutbox(storage).flatMap(\.sessions).filter { $0["sid"] as? String == sid }
        XCTAssertEqual(updates.last?["status"] as? String, "abnormal", "\(updates)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("runs").path), [])
    }

    func testAFailedFlushWithSentryDSNFromTheEnvironmentIsExplainedAsQueuedNotAsOutbox() throws {
        let storage = dirs.make("sentry-dsn")
        let logs = dirs.make("sentry-dsn-logs")
        // No --dsn: the SDK reads $SENTRY_DSN (port 9 on loopback: nothing listens, the envelopes stay queued).
        let child = try runHarness(["message", "--storage", storage.path],
                                   environment: ["SENTRY_DSN": "http://envkey@127.0.0.1:9/7", "VAKA_FLUSH_TIMEOUT": "0"],
                                   logDirectory: logs)
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        XCTAssertTrue(child.stderr.contains("flush returned false: envelopes still queued"), child.stderr)
        XCTAssertFalse(child.stderr.contains("outbox file"), child.stderr)
        let pending = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("pending").path)
        XCTAssertFalse(pending.isEmpty, "unsent envelopes stay in pending/")
    }

    func testDebugOutputNeverShowsTheKey() throws {
        let storage = dirs.make("debug")
        let logs = dirs.make("debug-logs")
        // Port 9 on loopback: nothing listens, every send fails and is retried at the next launch.
        let child = try runHarness(["message", "--dsn", "http://secretkey0123456789@127.0.0.1:9/7", "--storage", storage.path],
                                   environment: ["VAKA_DEBUG": "1", "VAKA_FLUSH_TIMEOUT": "0"], logDirectory: logs)
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        XCTAssertTrue(child.stderr.contains("[vaka]"), child.stderr)
        XCTAssertFalse(child.stderr.contains("secretkey0123456789"), child.stderr)
        let pending = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("pending").path)
        XCTAssertFalse(pending.isEmpty, "unsent envelopes stay in pending/")
    }

    func testEveryEnvelopeParsesWithSentrySDKAndEveryEventPassesRelayAndBugsinkSchema() throws {
        let logs = dirs.make("peers-logs")
        var files: [URL] = []
        for scenario in ["handled-error", "message", "events"] {
            let storage = dirs.make(scenario)
            let child = try runHarness([scenario, "--scope", "--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(child.outcome, "exit 0", child.stderr)
            files += try readOutbox(storage).map(\.file)
        }
        for crash in ["swift-fatal-error", "abort", "background-thread"] {
            let storage = dirs.make(crash)
            _ = try runHarness([crash, "--scope", "--storage", storage.path], logDirectory: logs)
            let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
            let envelopes = try readOutbox(storage)
            XCTAssertTrue(envelopes.contains { $0.events.first?["level"] as? String == "fatal" }, crash)
            files += envelopes.map(\.file)
        }
        let result = try validateWithPeers(files, scratch: dirs.make("peers"))
        XCTAssertEqual(result.problems, [])
        XCTAssertEqual(result.envelopes, files.count)
        XCTAssertEqual(result.events, 1 + 1 + 4 + 3, "handled-error, message, events (4), three crashes")
    }
}
