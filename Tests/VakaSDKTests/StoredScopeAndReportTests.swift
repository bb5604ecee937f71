import Synchronization
import XCTest
import VakaTestSupport
@testable import Vaka

/// What the SDK stores and reads back at the next launch: `scope.json` stays readable under many or huge tags
/// and `extra` keys, the storage directory survives a deploy behind a symbolic link, and the crash join reads
/// only the newest reports, never a live sibling's, and one event per `run_id` however many copies exist.
final class StoredScopeAndReportTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// The run's `lock` and `scope.json` are 0600 whatever the umask: under umask 0777 `open`'s 0600 left them mode
    /// 0, so the next launch of a program not run as root could not open a live sibling's lock (taking it for
    /// finished) nor read a crashed run's scope.
    func testRunFilesArePrivateNotUnreadableUnderUmask0777() throws {
        let storage = dirs.make("umask")
        let runID = UUID().uuidString
        let saved = umask(0o777)
        let made = Result { () throws -> RunDirectory in
            let dir = try RunDirectory(storage: storage, runID: runID)
            try dir.write(RunScope(runID: runID, release: "app@1", environment: "production", tags: [:], userID: nil, session: nil))
            return dir
        }
        // The client reports' lock too, which every launch opens read-write.
        let reports = ClientReports(storageDirectory: storage)
        reports.record(.queueOverflow, category: "error")
        reports.persist()
        umask(saved)
        let dir = try made.get()
        for path in [dir.url.appendingPathComponent("lock").path, dir.url.appendingPathComponent("scope.json").path,
                     reports.lockPath] {
            var info = stat()
            XCTAssertEqual(stat(path, &info), 0, path)
            XCTAssertEqual(info.st_mode & 0o7777, 0o600, path)
        }
    }

    /// `setTag` has no limit on the number of tags, and every call rewrites the whole `scope.json`. 3,000 tags
    /// of 200 + 200 characters (an app tagging per request id) make a 1.2 MB `scope.json` (and take ~35 s: each call re-encodes and rewrites all tags, under the client lock), which the next launch
    /// ignores as a whole (`RunDirectory.maxScopeBytes`, 1 MiB): the run that was killed loses its `abnormal`
    /// session update (and a crash of that run would lose its release, environment, user, tags and its
    /// `crashed` session update). The SDK must never write a scope its own join refuses to read.
    func testManyTagsDoNotMakeTheRunsScopeUnreadableAtTheNextLaunch() throws {
        let storage = dirs.make("tags")
        let runA = "A-\(UUID().uuidString)"
        weak var weakA: Client?
        do {
            let a = try Client(options: Vaka.Options(release: "app@1.0", sessionTracking: true, storageDirectory: storage),
                               storage: storage, runID: runA, dsn: nil, log: nil)
            a.begin()
            let started = Date()
            for i in 0..<3000 { a.setTag(String(repeating: "k", count: 190) + "\(i)", String(repeating: "v", count: 200)) }
            // Each call re-encodes and rewrites every tag: ~1.5 GB of JSON for 3,000 calls, on the caller's thread.
            let elapsed = Date().timeIntervalSince(started)
            // A generous bound (a debug build takes ~9 s on a loaded 2-core machine): it catches a scope write that
            // grows with the number of calls, not a slow machine.
            XCTAssertLessThan(elapsed, 30, "3,000 setTag calls blocked the caller for \(elapsed) s")
            weakA = a
            // no end(): the process is killed here (the run directory's lock goes with the client)
        }
        let scopeFile = RunDirectory.root(storage).appendingPathComponent(runA).appendingPathComponent("scope.json")
        let size = (try? FileManager.default.attributesOfItem(atPath: scopeFile.path)[.size] as? Int) ?? -1
        XCTAssertNil(weakA, "the first client must be gone so that its run counts as finished")
        // Remove what run A sent itself (its `ok` session update): only the next launch's output counts.
        try? FileManager.default.removeItem(at: storage.appendingPathComponent("outbox"))
        let b = try Client(options: Vaka.Options(release: "app@2.0", sessionTracking: false, storageDirectory: storage),
                           storage: storage, runID: "B-\(UUID().uuidString)", dsn: nil, log: nil)
        b.begin()
        b.end(timeout: 2)
        let sessions = try readOutbox(storage).flatMap(\.sessions)
        let abnormal = sessions.filter { $0["status"] as? String == "abnormal" }
        XCTAssertEqual(abnormal.count, 1, "scope.json of run A is \(size) B (cap \(RunDirectory.maxScopeBytes) B); sessions sent: \(sessions)")
        XCTAssertEqual(dig(abnormal.first, "attrs", "release") as? String, "app@1.0")
    }

    /// The default storage directory is named after the program's path *with symbolic links resolved*. Deploys
    /// that switch a `current` symbolic link between release directories (`/srv/app/current ->
    /// releases/20261130-1`, Capistrano style; Nix store paths alike) start the same program, by the same path,
    /// in a new storage directory after every deploy: the crash reports (and `pending/` batches) the previous
    /// release left (often the crash that made you deploy a fix) are never read again, and each deploy leaves
    /// a directory behind.
    func testOneProgramDeployedBehindASymlinkKeepsItsStorageAcrossReleases() throws {
        let root = dirs.make("deploy")
        let fm = FileManager.default
        for release in ["r1", "r2"] {
            let dir = root.appendingPathComponent("releases/\(release)")
            try fm.createDirectory(at: dir, withIntermediateDirectories: true)
            try Data("#!/bin/sh\n".utf8).write(to: dir.appendingPathComponent("server"))
        }
        let current = root.appendingPathComponent("current")
        try fm.createSymbolicLink(atPath: current.path, withDestinationPath: "releases/r1")
        let before = Vaka.programDirectoryName(argv0: current.path + "/server")
        try fm.removeItem(at: current)
        try fm.createSymbolicLink(atPath: current.path, withDestinationPath: "releases/r2")
        let after = Vaka.programDirectoryName(argv0: current.path + "/server")
        XCTAssertEqual(before, after, "started as \(current.path)/server before and after a deploy")
    }

    // MARK: - Variants: worst-case tags and extra keys, report pile-ups, live siblings, copies

    /// Worst case for `scope.json`: 250 tags whose keys and values are 200 control characters each (every one
    /// escaped as `\u00XX` in JSON), a 200-character user id. The newest 200 tags are kept (the 50 set first
    /// are gone), and the file stays under the derived bound and the 1 MiB the join reads.
    func testTheNewestTagsWinAndTheScopeStaysReadable() throws {
        XCTAssertLessThan(RunScope.maxEncodedBytes, RunDirectory.maxScopeBytes)
        let storage = dirs.make("tags2")
        let runA = "A-\(UUID().uuidString)"
        let control = String(repeating: "\u{01}", count: 190)
        do {
            let a = try Client(options: Vaka.Options(release: "app@1.0", sessionTracking: true, storageDirectory: storage),
                               storage: storage, runID: runA, dsn: nil, log: nil)
            a.begin()
            a.identify(String(repeating: "\u{02}", count: 1000))
            for i in 0..<250 { a.setTag(control + String(format: "%010d", i), control + "v") }
        }
        let scopeFile = RunDirectory.root(storage).appendingPathComponent(runA).appendingPathComponent("scope.json")
        let data = try Data(contentsOf: scopeFile)
        XCTAssertLessThanOrEqual(data.count, RunScope.maxEncodedBytes)
        let scope = try JSONDecoder().decode(RunScope.self, from: data)
        XCTAssertEqual(scope.tags.count, RunScope.maxTags)
        XCTAssertNil(scope.tags[control + String(format: "%010d", 49)], "the oldest tags go first")
        XCTAssertNotNil(scope.tags[control + String(format: "%010d", 50)])
        XCTAssertNotNil(scope.tags[control + String(format: "%010d", 249)], "the newest tag is kept")
        XCTAssertEqual(scope.userID?.unicodeScalars.count, 200)
    }

    /// `extra` whose keys are long and values tiny: measured as values only it looked like 45 KB and was kept
    /// whole (~530 KB). Keys count: what is left of `extra` is at most 256 KiB encoded.
    func testExtraKeysCountTowardTheLimit() throws {
        var extra: [String: JSONValue] = [:]
        for i in 0..<5_000 { extra[String(repeating: "k", count: 100) + "\(i)"] = .string("x") }
        let event: [String: JSONValue] = ["event_id": .string(String(repeating: "a", count: 32)), "level": .string("info"),
                                          "platform": .string("native"), "extra": .object(extra)]
        let outcome = try EventBudget.standard.fit(json: event)
        XCTAssertTrue(outcome.fits)
        let decoded = try XCTUnwrap(JSONSerialization.jsonObject(with: outcome.data) as? [String: Any])
        let kept = try XCTUnwrap(decoded["extra"] as? [String: Any])
        XCTAssertGreaterThan(kept.count, 1_000, "only as many as needed are dropped")
        XCTAssertLessThan(kept.count, 5_000)
        XCTAssertLessThanOrEqual(try JSONSerialization.data(withJSONObject: kept).count, EventBudget.maxExtraBytes + 64)
    }

    /// 60 reports in `crashes/` (none parses): the 10 oldest by modification time are deleted unread (no
    /// `.invalid`, which only parsing gives), the newest 50 are read (and set aside as `.invalid`).
    func testOnlyTheNewestReportsAreKeptAndParsed() throws {
        let storage = dirs.make("pileup")
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        let base = Date(timeIntervalSince1970: 1_700_000_000)
        for i in 0..<60 {
            let file = crashes.appendingPathComponent(String(format: "r%02d.crash", 59 - i))  // name order ≠ age order
            try Data("not a report \(i)\n".utf8).write(to: file)
            try FileManager.default.setAttributes([.modificationDate: base.addingTimeInterval(Double(i))], ofItemAtPath: file.path)
        }
        let log = LinesLog()
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage),
                                storage: storage, runID: UUID().uuidString, dsn: nil, log: log.add)
        client.begin()
        client.end(timeout: 1)
        let left = try FileManager.default.contentsOfDirectory(atPath: crashes.path).sorted()
        XCTAssertEqual(left.count, 50, "\(left)")
        // File i was written i seconds after the first: the oldest ten are r59...r50.
        for i in 0..<10 { XCTAssertFalse(left.contains { $0.hasPrefix(String(format: "r%02d.crash", 59 - i)) }, "r\(59 - i) is among the oldest") }
        XCTAssertTrue(left.allSatisfy { $0.hasSuffix(".crash.invalid") }, "\(left)")
        XCTAssertEqual(log.lines.filter { $0.contains("deleted the 10 oldest") }.count, 1, "\(log.lines)")
    }

    /// A report of a run whose lock is still held (a sibling process of the same program; its crash handler
    /// may still be writing) is not read: it stays as it is, and is read once that run is gone. The same for
    /// a fork child's report of that run while the child's pid exists.
    func testALiveSiblingsReportIsNotRead() throws {
        let storage = dirs.make("live")
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        let sibling = "S-\(UUID().uuidString)"
        var live: RunDirectory? = try RunDirectory(storage: storage, runID: sibling)  // holds the lock, as a live process
        let half = crashes.appendingPathComponent("\(sibling).crash")
        let child = crashes.appendingPathComponent("\(sibling)-\(getpid()).crash")  // a pid that exists
        for file in [half, child] { try Data("vaka-crash-report 1\nsignal 11\n".utf8).write(to: file) }
        func launch() throws {
            let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage),
                                    storage: storage, runID: UUID().uuidString, dsn: nil, log: nil)
            client.begin()
            client.end(timeout: 1)
        }
        try launch()
        XCTAssertTrue(FileManager.default.fileExists(atPath: half.path), "a live run's report was read")
        XCTAssertTrue(FileManager.default.fileExists(atPath: child.path), "a live child's report was read")
        XCTAssertEqual(try readOutbox(storage).flatMap(\.events).count, 0)
        XCTAssertNotNil(live)
        live = nil  // the sibling exits
        try launch()
        XCTAssertFalse(FileManager.default.fileExists(atPath: half.path), "read once the run is gone")
        XCTAssertTrue(FileManager.default.fileExists(atPath: half.path + ".invalid"))
    }

    /// A copy of a report named to sort first (`000-copy.crash`, the same `run_id`): the event carries the
    /// crashed run's scope (release) and its `crashed` session update, once; the original and the copy are
    /// both gone, and so is the run directory.
    func testACopySortedFirstDoesNotReplaceTheOriginal() throws {
        let storage = dirs.make("copy")
        let runID = UUID().uuidString
        let text = try exampleCrashReport(runID: runID)
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        let files = [crashes.appendingPathComponent("\(runID).crash"), crashes.appendingPathComponent("000-copy.crash")]
        for file in files { try text.write(to: file, atomically: true, encoding: .utf8) }
        do {
            let dir = try RunDirectory(storage: storage, runID: runID)
            try dir.write(RunScope(runID: runID, release: "crashed@1.0", environment: "production", tags: ["t": "1"],
                                   userID: nil, session: SessionState(did: nil, started: Date().addingTimeInterval(-5))))
        }
        let client = try Client(options: Vaka.Options(release: "current@2.0", sessionTracking: false, storageDirectory: storage),
                                storage: storage, runID: UUID().uuidString, dsn: nil, log: nil)
        client.begin()
        client.end(timeout: 1)
        let envelopes = try readOutbox(storage).filter { !$0.events.isEmpty }
        XCTAssertEqual(envelopes.count, 1, "one event for two files with one run_id")
        XCTAssertEqual(envelopes.first?.events.first?["release"] as? String, "crashed@1.0", "the copy took the scope")
        XCTAssertEqual(envelopes.first?.sessions.map { $0["status"] as? String }, ["crashed"])
        for file in files { XCTAssertFalse(FileManager.default.fileExists(atPath: file.path), file.lastPathComponent) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: RunDirectory.root(storage).appendingPathComponent(runID).path))
    }
}

/// Collects debug lines (thread-safe).
final class LinesLog: Sendable {
    private let stored = Mutex<[String]>([])
    var lines: [String] { stored.withLock { $0 } }
    func add(_ line: String) { stored.withLock { $0.append(line) } }
}
