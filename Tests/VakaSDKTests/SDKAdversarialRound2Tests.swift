import XCTest
@testable import Vaka

/// Second adversary round against the SDK (issue 8). Each test shows one finding; they fail on the code they
/// were written against.
final class SDKAdversarialRound2Tests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

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
            XCTAssertLessThan(elapsed, 10, "3,000 setTag calls blocked the caller for \(elapsed) s")
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
}
