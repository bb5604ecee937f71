import XCTest
import VakaTestSupport
@testable import Vaka

/// In-process tests of the SDK's parts: breadcrumb store, sessions, run directories, options, no-ops before start.
final class SDKUnitTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// A breadcrumb goes through the journal and back unchanged: type, category, message, level, data and
    /// timestamp; the journal file is private (0600); an event carries the last 100, oldest first.
    func testBreadcrumbsRoundTripThroughTheJournal() throws {
        let storage = dirs.make("crumbs")
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: "B-\(UUID().uuidString)", dsn: nil, log: nil)
        client.setUp(through: .journal)  // made by start's background part, or now
        let journal = try XCTUnwrap(client.journal)
        let odd = [Breadcrumb(timestamp: 1_700_000_000.5, type: "navigation", category: "navigation", message: "Home",
                              level: "warning", data: ["from": "Cart", "to": "Home"]),
                   Breadcrumb(timestamp: 1_700_000_001, category: nil, message: nil, level: nil),
                   Breadcrumb(timestamp: 1_700_000_002, category: "c", message: "d", level: "debug"),
                   Breadcrumb(timestamp: 1_700_000_003, category: "e", message: "f", level: "error"),
                   Breadcrumb(timestamp: 1_700_000_004, category: "g", message: "h", level: "fatal")]
        for crumb in odd { client.addBreadcrumb(crumb) }
        XCTAssertEqual(journal.breadcrumbs().map(Breadcrumb.init(record:)), odd)
        for i in 0..<250 { client.addBreadcrumb(category: "c", message: "m\(i)") }
        client.capture(message: "after", level: .info)
        let mode = try FileManager.default.attributesOfItem(atPath: journal.url.path)[.posixPermissions] as? Int
        XCTAssertEqual(mode, 0o600)
        client.end(timeout: 1)
        let event = try XCTUnwrap(readOutbox(storage).flatMap(\.events).first)
        let messages = (dig(event, "breadcrumbs", "values") as? [[String: Any]])?.map { $0["message"] as? String }
        XCTAssertEqual(messages, (150..<250).map { "m\($0)" })
    }

    func testSessionUpdatesFollowSentrySemantics() throws {
        var session = SessionState(did: "d1d1d1d1-0000-4000-8000-000000000000", started: Date(timeIntervalSince1970: 1_700_000_000))
        let first = session.update(.ok, now: Date(timeIntervalSince1970: 1_700_000_001), release: "app@1", environment: "production")
        XCTAssertTrue(first.`init`)
        XCTAssertNil(first.duration)
        session.errors = 2
        let last = session.update(.exited, now: Date(timeIntervalSince1970: 1_700_000_011), release: "app@1", environment: "production")
        XCTAssertFalse(last.`init`)
        XCTAssertEqual(last.duration, 11)
        XCTAssertEqual(last.errors, 2)
        XCTAssertGreaterThan(last.seq, first.seq)
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: last.jsonData()) as? [String: Any])
        XCTAssertEqual(json["status"] as? String, "exited")
        XCTAssertEqual(json["started"] as? String, "2023-11-14T22:13:20.000Z")
        XCTAssertEqual(json["did"] as? String, "d1d1d1d1-0000-4000-8000-000000000000")
        XCTAssertEqual((json["attrs"] as? [String: Any])?["release"] as? String, "app@1")
    }

    func testLiveRunDirectoriesAreNotJoined() throws {
        let storage = dirs.make("runs")
        let live = try RunDirectory(storage: storage, runID: "LIVE")
        try live.write(RunScope(runID: "LIVE", release: "r", environment: "e", tags: [:], userID: nil, session: nil))
        // A run whose process is gone: directory and scope, no lock holder.
        let deadURL = RunDirectory.root(storage).appendingPathComponent("DEAD")
        try FileManager.default.createDirectory(at: deadURL, withIntermediateDirectories: true)
        let scope = RunScope(runID: "DEAD", release: "r1", environment: "e1", tags: ["t": "v"], userID: "u", session: nil)
        try JSONEncoder().encode(scope).write(to: deadURL.appendingPathComponent("scope.json"))
        let finished = RunDirectory.finishedRuns(storage: storage, except: "CURRENT")
        XCTAssertEqual(finished.map(\.runID), ["DEAD"])
        XCTAssertEqual(finished.first?.scope, scope)
        live.remove()
        XCTAssertFalse(FileManager.default.fileExists(atPath: live.url.path))
    }

    func testOptionsDestinations() throws {
        XCTAssertNil(try Vaka.Options().parsedDSN())
        let dsn = try XCTUnwrap(try Vaka.Options(dsn: "https://abc123@sentry.example.com/42").parsedDSN())
        XCTAssertEqual(dsn.projectID, "42")
        let keyed = try XCTUnwrap(try Vaka.Options(key: "abc123", endpoint: "https://sentry.example.com/api/42").parsedDSN())
        XCTAssertEqual(keyed, dsn)
        XCTAssertThrowsError(try Vaka.Options(dsn: "not a dsn").parsedDSN())
        let o = Vaka.Options()
        XCTAssertEqual(o.environment, "production")
        XCTAssertEqual(o.flushInterval, 10)
        XCTAssertEqual(o.maxBatchSize, 50)
        XCTAssertEqual(o.sessionTimeout, 30)
        XCTAssertTrue(o.crashReporting && o.sessionTracking && o.enabled && !o.debug)
    }

    func testDefaultReleaseAndStorage() {
        let release = Vaka.defaultRelease()
        XCTAssertTrue(release.contains("@0.0.0"), release)
        XCTAssertFalse(release.contains(" "), release)
        XCTAssertTrue(Vaka.defaultStorageDirectory().path.contains("/vaka/"))
    }

    func testOsReleaseParsing() throws {
        let file = dirs.make("osrel").appendingPathComponent("os-release")
        try "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID='12'\n# comment\n".write(to: file, atomically: true, encoding: .utf8)
        let values = EventFactory.osRelease(path: file.path)
        XCTAssertEqual(values["PRETTY_NAME"], "Debian GNU/Linux 12 (bookworm)")
        XCTAssertEqual(values["ID"], "debian")
        XCTAssertEqual(values["VERSION_ID"], "12")
    }

    /// Every call before start (and with enabled: false) is a no-op that writes nothing.
    func testCallsBeforeStartAreNoOps() throws {
        let storage = dirs.make("disabled")
        Vaka.start(Vaka.Options(enabled: false, storageDirectory: storage))
        Vaka.screen("S"); Vaka.track("t", ["k": "v"])
        Vaka.capture(message: "m", level: .warning)
        Vaka.capture(NSError(domain: "d", code: 1))
        Vaka.addBreadcrumb(category: "c", message: "m")
        Vaka.identify("u"); Vaka.identify(nil); Vaka.setTag("k", "v")
        XCTAssertTrue(Vaka.flush())
        Vaka.close()
        XCTAssertNil(Vaka.runID)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storage.path), [])
    }

    /// The stack of a handled error: the calling function is the newest frame, named, in the test bundle image.
    func testHandledStackTraceNamesTheCaller() throws {
        let capture = StackCapture(arch: "x86_64")
        let (stacktrace, images) = capture.capture(skip: 0)
        let frames = try XCTUnwrap(stacktrace?.frames)
        XCTAssertGreaterThan(frames.count, 2)
        let newest = try XCTUnwrap(frames.last)
        XCTAssertTrue(newest.function?.contains("testHandledStackTraceNamesTheCaller") ?? false, "\(newest)")
        XCTAssertEqual(newest.inApp, true)
        XCTAssertTrue(images.contains { $0.codeFile == newest.package && $0.codeID != nil }, "\(images)")
    }

    /// The crash join deletes `crashes/.<run-id>-<pid>.spare` (and older `.<run-id>.spare`; a survived signal's report the C runtime keeps as its
    /// next reserve) left by a killed run, and keeps this run's and a live run's (its `runs/<id>/lock` held).
    func testCrashJoinRemovesSparesOfKilledRunsOnly() throws {
        let storage = dirs.make("spares")
        let crashes = storage.appendingPathComponent("crashes", isDirectory: true)
        let liveRun = storage.appendingPathComponent("runs/live", isDirectory: true)
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: liveRun, withIntermediateDirectories: true)
        let lock = open(liveRun.appendingPathComponent("lock").path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        XCTAssertEqual(flock(lock, LOCK_EX | LOCK_NB), 0)
        defer { close(lock) }
        let current = "T-\(UUID().uuidString)"
        for run in ["dead", "live", current, "dead-123", "live-456", "\(current)-789"] {
            try Data("x\n".utf8).write(to: crashes.appendingPathComponent(".\(run).spare"))
        }
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: current, dsn: nil, log: nil)
        client.joinPreviousRuns()
        client.end(timeout: 1)
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: crashes.path)) ?? []).sorted()
        XCTAssertEqual(left, [".\(current)-789.spare", ".\(current).spare", ".live-456.spare", ".live.spare"])
    }

    /// The crash join deletes `runs/.<run-id>/` directories that a process dying while it made its run directory
    /// left (with their unheld `lock`, or none), and keeps this run's, one whose `lock` is held (being made by a
    /// live process) and names that are not a run's (`.<not a UUID>`).
    func testCrashJoinRemovesRunDirectoriesLeftHalfMade() throws {
        let storage = dirs.make("staging")
        let runs = storage.appendingPathComponent("runs", isDirectory: true)
        let current = UUID().uuidString
        let (deadLocked, deadBare, live, other) = (UUID().uuidString, UUID().uuidString, UUID().uuidString, ".not-a-run")
        for name in [".\(deadLocked)", ".\(deadBare)", ".\(live)", ".\(current)", other] {
            try FileManager.default.createDirectory(at: runs.appendingPathComponent(name), withIntermediateDirectories: true)
        }
        for name in [".\(deadLocked)", ".\(live)", ".\(current)"] {
            XCTAssertTrue(FileManager.default.createFile(atPath: runs.appendingPathComponent("\(name)/lock").path, contents: Data()))
        }
        let lock = open(runs.appendingPathComponent(".\(live)/lock").path, O_RDWR | O_CLOEXEC)
        XCTAssertEqual(flock(lock, LOCK_EX | LOCK_NB), 0)
        defer { close(lock) }
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: current, dsn: nil, log: nil)
        XCTAssertTrue(client.earlierRunsLeftSomething())
        client.joinPreviousRuns()
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: runs.path)) ?? []).sorted()
        XCTAssertEqual(left, [".\(current)", ".\(live)", other].sorted())
        client.end(timeout: 1)
    }

    /// Concurrent calls from many threads neither crash nor lose breadcrumbs beyond the cap.
    func testBreadcrumbsAndTagsFromManyThreads() throws {
        let storage = dirs.make("threads")
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: "T-\(UUID().uuidString)", dsn: nil, log: nil)
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for i in 0..<200 {
                client.addBreadcrumb(Breadcrumb(timestamp: 0, category: "t\(t)", message: "\(i)"))
                if i % 50 == 0 { client.setTag("t\(t)", "\(i)") }
            }
        }
        client.capture(message: "after", level: .info)
        client.end(timeout: 1)
        let outbox = try readOutbox(storage)
        let event = try XCTUnwrap(outbox.flatMap(\.events).first)
        XCTAssertEqual((dig(event, "breadcrumbs", "values") as? [Any])?.count, 100)
        XCTAssertEqual((event["tags"] as? [String: Any])?.count, 8)
    }
}
