import Foundation
import XCTest
import VakaTestSupport

/// `beforeSend` and `sampleRate` on crash events, which the harness's next launch sends (outbox mode): a crash
/// dropped by the hook is gone for good (its report deleted, its session update still sent, a client report
/// saying so); an edited one is sent as edited, the hook called on the `vaka.start` thread; `sampleRate: 0`
/// drops handled errors but never crashes. Every envelope parses with sentry_sdk, every event passes Relay.
final class CrashHookTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func crash(_ storage: URL, environment: [String: String] = [:]) throws {
        let child = try runHarness(["null-deref", "--storage", storage.path, "--scope"], environment: environment, logDirectory: dirs.make("logs"))
        XCTAssertTrue(child.signaled, "the harness did not crash: \(child.outcome) \(child.stderr.suffix(500))")
    }

    private func launch(_ storage: URL, _ arguments: [String] = [], environment: [String: String]) throws {
        let child = try runHarness(arguments + ["--storage", storage.path], environment: environment, logDirectory: dirs.make("logs"))
        XCTAssertEqual(child.outcome, "exit 0", child.stderr.suffix(1000).description)
    }

    private func checkPeers(_ envelopes: [OutboxEnvelope]) throws {
        let check = try validateWithPeers(envelopes.map(\.file), scratch: dirs.make("peers"))
        XCTAssertEqual(check.problems, [])
    }

    private func discarded(_ envelopes: [OutboxEnvelope]) -> [[String: Any]] {
        envelopes.flatMap { $0.items.filter { $0.type == "client_report" } }.flatMap { $0.payload["discarded_events"] as? [[String: Any]] ?? [] }
    }

    private func reports(_ storage: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("crashes").path)) ?? [])
            .filter { $0.hasSuffix(".crash") }
    }

    func testBeforeSendDropsACrashAtTheNextLaunchForGood() throws {
        let storage = dirs.make("drop-crash")
        try crash(storage)
        XCTAssertEqual(reports(storage).count, 1)
        try launch(storage, environment: ["VAKA_BEFORE_SEND": "drop"])
        let envelopes = try readOutbox(storage)
        try checkPeers(envelopes)
        XCTAssertEqual(envelopes.flatMap(\.events).count, 0, "the crash was dropped")
        let crashed = envelopes.filter { $0.sessions.contains { $0["status"] as? String == "crashed" } }
        XCTAssertEqual(crashed.count, 1, "the crashed session is still sent")
        XCTAssertNil(crashed.first?.header["event_id"], "no event in that envelope")
        let entries = discarded(envelopes)
        XCTAssertEqual(entries.count, 1)
        XCTAssertEqual(entries.first?["reason"] as? String, "before_send")
        XCTAssertEqual(entries.first?["category"] as? String, "error")
        XCTAssertEqual(entries.first?["quantity"] as? Int, 1)
        XCTAssertEqual(reports(storage), [], "the report is deleted: never joined again")
        // A further launch sends neither the crash nor the count again.
        let before = Set(envelopes.map(\.file))
        try launch(storage, environment: ["VAKA_BEFORE_SEND": "drop"])
        let later = try readOutbox(storage).filter { !before.contains($0.file) }
        XCTAssertEqual(later.flatMap(\.events).count, 0)
        XCTAssertEqual(discarded(later).count, 0, "counted once")
    }

    func testBeforeSendEditsACrashAtTheNextLaunch() throws {
        let storage = dirs.make("edit-crash")
        try crash(storage)
        try launch(storage, environment: ["VAKA_BEFORE_SEND": "edit"])
        let envelopes = try readOutbox(storage)
        try checkPeers(envelopes)
        let fatal = try XCTUnwrap(envelopes.flatMap(\.events).first { $0["level"] as? String == "fatal" })
        let tags = fatal["tags"] as? [String: String] ?? [:]
        XCTAssertEqual(tags["before_send"], "edited")
        XCTAssertEqual(tags["flavor"], "free", "the crashed run's scope was joined before the hook")
        // The hook runs on vaka.start, or on the harness's main thread when its flush() comes first (it then does
        // start's background part itself): either way, once, and the harness says which.
        XCTAssertNotNil((fatal["extra"] as? [String: Any])?["before_send_main_thread"] as? Bool)
        XCTAssertEqual((fatal["breadcrumbs"] as? [String: Any]).flatMap { $0["values"] as? [Any] }?.count, 2)
        XCTAssertEqual(discarded(envelopes).count, 0)
    }

    /// A `beforeSend` that calls back into Vaka (`setTag`, `addBreadcrumb`, the logger, `capture(message:)`,
    /// `flush`): on the mover thread (inside its pass) and on the start thread at the next launch (inside the
    /// crash join) the harness still exits; the event the hook captures is sent once, without the hook.
    func testBeforeSendCallingBackIntoVakaNeitherTrapsNorHangs() throws {
        let reenter = ["VAKA_BEFORE_SEND": "reenter"]
        let handled = dirs.make("reenter-handled")
        try launch(handled, ["handled-error"], environment: reenter)
        var envelopes = try readOutbox(handled)
        try checkPeers(envelopes)
        var events = envelopes.flatMap(\.events)
        func fromHook(_ event: [String: Any]) -> Bool { (event["logentry"] as? [String: Any])?["formatted"] as? String == "from beforeSend" }
        let error = events.filter { $0["exception"] != nil }
        XCTAssertEqual(error.count, 1, "the handled error")
        XCTAssertEqual(error.first.flatMap { ($0["tags"] as? [String: String])?["before_send"] }, "reentered")
        // The event the hook captured is sent without passing through it (else one more for each, without end).
        let captured = events.filter(fromHook)
        XCTAssertEqual(captured.count, 1, "the message the hook captured")
        XCTAssertNil(captured.first.flatMap { ($0["tags"] as? [String: String])?["before_send"] })

        let crashed = dirs.make("reenter-crash")
        try crash(crashed)
        try launch(crashed, environment: reenter)
        envelopes = try readOutbox(crashed)
        try checkPeers(envelopes)
        events = envelopes.flatMap(\.events)
        let fatal = try XCTUnwrap(events.first { $0["level"] as? String == "fatal" })
        XCTAssertEqual((fatal["tags"] as? [String: String])?["before_send"], "reentered")
        XCTAssertEqual(events.filter(fromHook).count, 1, "captured by the hook on the start thread, sent once")
        XCTAssertEqual(reports(crashed), [], "the crash was sent")
    }

    /// `Vaka.close()` from `beforeSend` (on the thread that drains the journal, and on the start thread for a
    /// crash) ends the run once the hook has returned; the event the hook saw is still sent.
    func testBeforeSendCallingCloseEndsTheRunWithoutTrapOrHang() throws {
        let close = ["VAKA_BEFORE_SEND": "close"]
        let handled = dirs.make("close-handled")
        try launch(handled, ["handled-error"], environment: close)
        var envelopes = try readOutbox(handled)
        try checkPeers(envelopes)
        XCTAssertEqual(envelopes.flatMap(\.events).filter { $0["exception"] != nil }.count, 1)
        // The program exits right after: the exit waits for that end, whose `exited` update is written.
        XCTAssertEqual(envelopes.flatMap(\.sessions).compactMap { $0["status"] as? String }.last, "exited")

        let crashed = dirs.make("close-crash")
        try crash(crashed)
        try launch(crashed, environment: close)
        envelopes = try readOutbox(crashed)
        try checkPeers(envelopes)
        XCTAssertEqual(envelopes.flatMap(\.events).filter { $0["level"] as? String == "fatal" }.count, 1)
    }

    /// A `beforeSend` that captures, in a run without a journal (`runs/` cannot be created: events go to delivery
    /// at once): the hook of the crash event runs inside the crash join, on the thread that does start's background
    /// part, and its capture does not wait for that part to end (it waited for itself: the harness hung in its
    /// flush or its exit).
    func testBeforeSendCapturingWithoutJournalDuringTheCrashJoinDoesNotHang() throws {
        let storage = dirs.make("reenter-no-journal")
        try crash(storage)
        let runs = storage.appendingPathComponent("runs")
        try FileManager.default.removeItem(at: runs)
        XCTAssertTrue(FileManager.default.createFile(atPath: runs.path, contents: Data("not a directory".utf8)))
        let child = try runHarness(["--storage", storage.path], environment: ["VAKA_BEFORE_SEND": "reenter"],
                                   logDirectory: dirs.make("logs"), timeout: 30)
        XCTAssertEqual(child.outcome, "exit 0", child.stderr.suffix(1000).description)
        let events = try readOutbox(storage).flatMap(\.events)
        XCTAssertEqual(events.filter { $0["level"] as? String == "fatal" }.count, 1, "the crash")
        XCTAssertEqual(events.filter { ($0["logentry"] as? [String: Any])?["formatted"] as? String == "from beforeSend" }.count, 1,
                       "the message the hook captured")
        XCTAssertEqual(reports(storage), [], "the crash was sent")
    }

    func testSampleRateZeroDropsHandledErrorsButNeverACrash() throws {
        let storage = dirs.make("sample-crash")
        let zero = ["VAKA_SAMPLE_RATE": "0"]
        try launch(storage, ["handled-error"], environment: zero)
        try crash(storage, environment: zero)
        try launch(storage, environment: zero)
        let envelopes = try readOutbox(storage)
        try checkPeers(envelopes)
        let events = envelopes.flatMap(\.events)
        XCTAssertEqual(events.map { $0["level"] as? String }, ["fatal"], "the handled error is not kept, the crash is")
        let exited = envelopes.flatMap(\.sessions).filter { $0["status"] as? String == "exited" }
        XCTAssertEqual(exited.map { $0["errors"] as? Int }, [1, 0], "the error not kept still counts in its run's session")
        let entries = discarded(envelopes)
        XCTAssertEqual(entries.map { $0["reason"] as? String }, ["sample_rate"])
        XCTAssertEqual(entries.first?["category"] as? String, "error")
        XCTAssertEqual(entries.first?["quantity"] as? Int, 1)
    }

    /// Crashes lost at the join are counted too: reports beyond the newest 50 (deleted unread,
    /// `cache_overflow`) and reports that do not parse (`.crash.invalid`, `internal_sdk_error`).
    func testCrashReportsLostAtTheJoinAreCounted() throws {
        let storage = dirs.make("lost-crashes")
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        for i in 0..<52 {
            let url = crashes.appendingPathComponent(String(format: "00000000-0000-4000-8000-%012d.crash", i))
            try Data("not a report \(i)\n".utf8).write(to: url)
            var times = [timespec(tv_sec: 1_700_000_000 + i, tv_nsec: 0), timespec(tv_sec: 1_700_000_000 + i, tv_nsec: 0)]
            XCTAssertEqual(utimensat(AT_FDCWD, url.path, &times, 0), 0)
        }
        try launch(storage, environment: [:])
        let envelopes = try readOutbox(storage)
        try checkPeers(envelopes)
        var counts: [String: Int] = [:]
        for entry in discarded(envelopes) {
            counts["\(entry["reason"] as? String ?? "?")/\(entry["category"] as? String ?? "?")", default: 0] += entry["quantity"] as? Int ?? -1
        }
        XCTAssertEqual(counts, ["cache_overflow/error": 2, "internal_sdk_error/error": 50])
    }

    /// `inAppInclude`/`inAppExclude` and the PII rule apply to the crash event at the next launch too: with
    /// `HOME` set to the directory above this checkout, every path of the harness (its image, its frames'
    /// source files, `app_identifier`) starts with `~/`.
    func testInAppListsAndThePIIRuleApplyToACrashEvent() throws {
        let storage = dirs.make("crash-in-app")
        try crash(storage)
        let home = Paths.repositoryRoot.deletingLastPathComponent().path
        try launch(storage, environment: ["VAKA_IN_APP_EXCLUDE": "vaka-crashme", "VAKA_IN_APP_INCLUDE": "libc.so", "HOME": home])
        let envelopes = try readOutbox(storage)
        try checkPeers(envelopes)
        let fatal = try XCTUnwrap(envelopes.flatMap(\.events).first { $0["level"] as? String == "fatal" })
        let exception = ((fatal["exception"] as? [String: Any])?["values"] as? [[String: Any]])?.first
        let frames = (exception?["stacktrace"] as? [String: Any])?["frames"] as? [[String: Any]] ?? []
        let harness = frames.filter { ($0["package"] as? String)?.hasSuffix("/vaka-crashme") == true }
        XCTAssertFalse(harness.isEmpty)
        XCTAssertEqual(Set(harness.map { $0["in_app"] as? Bool }), [false], "excluded by image name")
        let libc = frames.filter { ($0["package"] as? String).map { ($0 as NSString).lastPathComponent.hasPrefix("libc.so") } == true }
        XCTAssertFalse(libc.isEmpty, "frames: \(frames.map { $0["package"] ?? "-" })")
        XCTAssertEqual(Set(libc.map { $0["in_app"] as? Bool }), [true], "included by image name")
        let text = String(decoding: try JSONSerialization.data(withJSONObject: fatal), as: UTF8.self)
        XCTAssertFalse(text.contains(home + "/"), "the home directory is a tilde everywhere")
        XCTAssertTrue(harness.allSatisfy { ($0["package"] as? String)?.hasPrefix("~/") == true })
        let images = (fatal["debug_meta"] as? [String: Any])?["images"] as? [[String: Any]] ?? []
        XCTAssertTrue(images.contains { ($0["code_file"] as? String)?.hasPrefix("~/") == true && ($0["code_file"] as? String)?.hasSuffix("/vaka-crashme") == true })
        XCTAssertEqual(((fatal["contexts"] as? [String: Any])?["app"] as? [String: Any])?["app_identifier"] as? String,
                       "~/" + Paths.harness.path.dropFirst(home.count + 1))
        XCTAssertNil(fatal["server_name"])
    }
}
