import XCTest
import VakaTestSupport
@testable import Vaka

/// A run that reaches its exit before the background part of its start began (a program done within a millisecond
/// or two) writes its session as a record in `<storage>/sessions/` instead of encoding an `exited` update; a later
/// launch sends it as the run's one update (`init: true`, `exited`, its own sid, times, release and environment).
final class DeferredSessionTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func client(_ storage: URL, release: String = "shop@1.2.3", environment: String = "staging",
                        runID: String = UUID().uuidString, log: (@Sendable (String) -> Void)? = nil) throws -> Client {
        try Client(options: Vaka.Options(release: release, environment: environment, sessionTracking: true,
                                         storageDirectory: storage),
                   storage: storage, runID: runID, dsn: nil, log: log)
    }

    private func records(_ storage: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: SessionRecord.directory(storage).path)) ?? [])
            .filter { $0.hasSuffix(".session") }.sorted()
    }

    /// Writes `count` records of runs that ended at once, each with a sid of its own; returns the sids.
    /// Ends `endedFrom` on, one second apart (by default a quarter of an hour ago: younger than
    /// ``Client/maxDeferredSessionAge``).
    private func plantRecords(_ count: Int, in storage: URL, release: String = "old@1",
                              endedFrom: Double = Date().timeIntervalSince1970 - 900) throws -> [String] {
        var sids: [String] = []
        for i in 0..<count {
            var session = SessionState(did: nil, started: Date(timeIntervalSince1970: endedFrom + Double(i) - 0.002))
            session.errors = i % 3
            let ended = Date(timeIntervalSince1970: endedFrom + Double(i))
            try SessionRecord(session: session, ended: ended, release: release, environment: "production")
                .write(storage: storage, runID: UUID().uuidString)
            sids.append(session.sid)
        }
        return sids
    }

    /// The exit of a run whose start's background part had not begun writes a record, no update and no run
    /// files (not even the anon id: it is read by the launch that sends the record); the next launch sends the
    /// record as that run's only update, with that run's release and environment, and deletes it.
    func testAnExitBeforeTheBackgroundStartDefersTheSessionToTheNextLaunch() throws {
        let storage = dirs.make("deferred")
        let runID = UUID().uuidString
        let first = try client(storage, runID: runID)
        first.begin(startingThread: false)
        first.end(timeout: 1, atExit: true)

        XCTAssertEqual(try readOutbox(storage).flatMap(\.sessions).count, 0, "no update encoded at this exit")
        let name = try XCTUnwrap(records(storage).first, "the run's record")
        XCTAssertEqual(records(storage).count, 1)
        XCTAssertTrue(name.hasSuffix("-\(runID).session"), name)
        XCTAssertNotNil(SessionRecord.end(ofFileName: name), name)
        XCTAssertFalse(FileManager.default.fileExists(atPath: storage.appendingPathComponent("anon_id").path),
                       "the anon id is not read at such an exit")
        XCTAssertFalse(FileManager.default.fileExists(atPath: RunDirectory.root(storage).appendingPathComponent(runID).path))
        let text = try String(contentsOf: SessionRecord.directory(storage).appendingPathComponent(name), encoding: .utf8)
        let record = try XCTUnwrap(SessionRecord(data: Data(text.utf8)), text)
        XCTAssertEqual(record.release, "shop@1.2.3")
        XCTAssertEqual(record.environment, "staging")
        XCTAssertEqual(record.errors, 0)
        XCTAssertLessThanOrEqual(record.started, record.ended)
        let mode = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: SessionRecord.directory(storage)
            .appendingPathComponent(name).path)[.posixPermissions] as? Int)
        XCTAssertEqual(SessionRecord.end(ofFileName: name), Int64(record.ended.rounded(.down)))
        XCTAssertEqual(mode, 0o600)

        let second = try client(storage, release: "shop@2.0.0", environment: "production")
        second.begin()
        XCTAssertTrue(second.flush(timeout: 1))
        second.end(timeout: 1)
        let sessions = try readOutbox(storage).flatMap(\.sessions)
        let deferred = try XCTUnwrap(sessions.first { $0["sid"] as? String == record.sid }, "\(sessions)")
        XCTAssertEqual(sessions.filter { $0["sid"] as? String == record.sid }.count, 1)
        XCTAssertEqual(deferred["init"] as? Bool, true)
        XCTAssertEqual(deferred["status"] as? String, "exited")
        XCTAssertEqual(deferred["errors"] as? Int, 0)
        XCTAssertEqual(deferred["started"] as? String, Timestamps.rfc3339(Date(timeIntervalSince1970: record.started)))
        XCTAssertEqual(deferred["timestamp"] as? String, Timestamps.rfc3339(Date(timeIntervalSince1970: record.ended)))
        XCTAssertEqual(try XCTUnwrap(deferred["duration"] as? Double), record.ended - record.started, accuracy: 1e-6)
        let attrs = try XCTUnwrap(deferred["attrs"] as? [String: Any])
        XCTAssertEqual(attrs["release"] as? String, "shop@1.2.3", "the release of the run that ended, not the sender's")
        XCTAssertEqual(attrs["environment"] as? String, "staging")
        let anonID = try String(contentsOf: storage.appendingPathComponent("anon_id"), encoding: .utf8)
        XCTAssertEqual(deferred["did"] as? String, anonID.trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(records(storage), [], "sent records are deleted")
        // The sender's own session is its own: an `ok` update with init, then `exited`.
        XCTAssertEqual(sessions.filter { $0["sid"] as? String != record.sid }.map { $0["status"] as? String }, ["ok", "exited"])
    }

    /// A run whose start's background part had run, and one ended by `close()` rather than at exit, send their
    /// `exited` update at once as before.
    func testAnExitAfterTheBackgroundStartAndACloseSendTheUpdateAtOnce() throws {
        let storage = dirs.make("at-once")
        let begun = try client(storage)
        begun.begin()
        XCTAssertTrue(begun.flush(timeout: 1))  // the background part done
        begun.end(timeout: 1, atExit: true)
        let closed = try client(storage)
        closed.begin(startingThread: false)
        closed.end(timeout: 1)
        XCTAssertEqual(records(storage), [])
        let statuses = try readOutbox(storage).flatMap(\.sessions).map { $0["status"] as? String }
        XCTAssertEqual(statuses.filter { $0 == "exited" }.count, 2, "\(statuses)")
    }

    /// A handled error captured before the exit made the session's first update: the exit sends `exited` (the
    /// session is open at the server), even though it took over start's background part.
    func testASessionThatAlreadyMadeAnUpdateIsEndedAtOnce() throws {
        let storage = dirs.make("captured")
        let c = try client(storage)
        c.begin(startingThread: false)
        struct Declined: Error {}
        c.capture(error: Declined(), stack: (nil, []))
        c.end(timeout: 1, atExit: true)
        XCTAssertEqual(records(storage), [])
        let sessions = try readOutbox(storage).flatMap(\.sessions)
        XCTAssertEqual(sessions.map { $0["status"] as? String }, ["ok", "exited"], "\(sessions)")
        XCTAssertEqual(sessions.last?["init"] as? Bool, false)
        XCTAssertEqual(sessions.last?["errors"] as? Int, 1)
    }

    /// Runs that all end at once send nothing of earlier runs' records until `maxDeferredSessions` wait; then the
    /// exit sends them all, before writing its own record.
    func testRunsEndingAtOnceSendRecordsOnlyOnceEnoughWait() throws {
        let storage = dirs.make("batches")
        let planted = try plantRecords(Client.maxDeferredSessions - 1, in: storage)
        let quick = try client(storage)
        quick.begin(startingThread: false)
        quick.end(timeout: 1, atExit: true)
        XCTAssertEqual(try readOutbox(storage).flatMap(\.sessions).count, 0)
        XCTAssertEqual(records(storage).count, Client.maxDeferredSessions, "31 planted and the run's own")

        let ownID = UUID().uuidString
        let next = try client(storage, runID: ownID)
        next.begin(startingThread: false)
        next.end(timeout: 1, atExit: true)
        let sessions = try readOutbox(storage).flatMap(\.sessions)
        XCTAssertEqual(sessions.count, Client.maxDeferredSessions)
        XCTAssertTrue(Set(planted).isSubset(of: Set(sessions.compactMap { $0["sid"] as? String })))
        XCTAssertEqual(records(storage).count, 1, "only the sending run's own record is left")
        XCTAssertTrue(records(storage).first?.hasSuffix("-\(ownID).session") == true, "\(records(storage))")
        XCTAssertTrue(sessions.allSatisfy { $0["init"] as? Bool == true && $0["status"] as? String == "exited" })
        // Oldest end first, and each record's errors kept.
        let timestamps = sessions.compactMap { $0["timestamp"] as? String }
        XCTAssertEqual(timestamps, timestamps.sorted())
        let byID = Dictionary(uniqueKeysWithValues: sessions.map { ($0["sid"] as? String ?? "", $0["errors"] as? Int ?? -1) })
        for (i, sid) in planted.enumerated() { XCTAssertEqual(byID[sid], i % 3) }
    }

    /// More records than one envelope carries go in several envelopes of at most 100 session items.
    func testManyRecordsGoInEnvelopesOfAtMostAHundred() throws {
        let storage = dirs.make("many")
        let planted = try plantRecords(230, in: storage)
        let c = try client(storage)
        c.begin()
        XCTAssertTrue(c.flush(timeout: 5))
        let envelopes = try readOutbox(storage).filter { !$0.sessions.isEmpty }
        let deferred = envelopes.map { $0.sessions.filter { Set(planted).contains($0["sid"] as? String ?? "") }.count }.filter { $0 > 0 }
        XCTAssertEqual(deferred.sorted(by: >), [100, 100, 30])
        XCTAssertEqual(records(storage), [])
        c.end(timeout: 1)
    }

    /// Files in `sessions/` that are not records (garbage, too large, a bad sid or time, negative errors) are
    /// deleted with a debug line and send nothing; the good ones are sent.
    func testFilesThatAreNotRecordsAreRemovedAndTheRestSent() throws {
        let storage = dirs.make("bad")
        let good = try plantRecords(1, in: storage)
        let dir = SessionRecord.directory(storage)
        let valid = "sid 0c0ffee0-0000-4000-8000-000000000001\nstarted_us 1764000000000000\nended_us 1764000001000000\nerrors 0\nrelease a@1\n"
        let bad = [
            "garbage.session": "not a record\n",
            "big.session": SessionRecord.magic + "\n" + String(repeating: "x", count: SessionRecord.maxBytes),
            "version.session": "vaka-session 2\n" + valid,
            "sid.session": SessionRecord.magic + "\n" + valid.replacingOccurrences(of: "0c0ffee0-0000-4000-8000-000000000001", with: "nope"),
            "nan.session": SessionRecord.magic + "\n" + valid.replacingOccurrences(of: "started_us 1764000000000000", with: "started_us nan"),
            "errors.session": SessionRecord.magic + "\n" + valid.replacingOccurrences(of: "errors 0", with: "errors -1"),
            "norelease.session": SessionRecord.magic + "\n" + valid.replacingOccurrences(of: "release a@1\n", with: ""),
        ]
        for (name, text) in bad { try text.write(to: dir.appendingPathComponent(name), atomically: true, encoding: .utf8) }
        let lines = LinesLog()
        let c = try client(storage, log: { lines.add($0) })
        c.begin()
        XCTAssertTrue(c.flush(timeout: 1))
        c.end(timeout: 1)
        XCTAssertEqual(records(storage), [])
        let sids = try readOutbox(storage).flatMap(\.sessions).compactMap { $0["sid"] as? String }
        XCTAssertTrue(sids.contains(good[0]))
        XCTAssertFalse(sids.contains("0c0ffee0-0000-4000-8000-000000000001"))
        for name in bad.keys {
            XCTAssertTrue(lines.lines.contains { $0.contains("deferred session \(name) is not a session record") }, "\(name): \(lines.lines)")
        }
    }

    /// A process that finds `sessions/` locked (another process of the program sending them) leaves the
    /// records alone; once the lock is released the next launch sends them.
    func testRecordsLockedByAnotherSenderAreLeftAlone() throws {
        let storage = dirs.make("locked")
        let planted = try plantRecords(3, in: storage)
        let fd = open(SessionRecord.directory(storage).path, O_RDONLY | O_DIRECTORY)
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertEqual(flock(fd, LOCK_EX), 0)
        let first = try client(storage)
        first.begin()
        XCTAssertTrue(first.flush(timeout: 1))
        first.end(timeout: 1)
        XCTAssertEqual(records(storage).count, 3)
        close(fd)
        let second = try client(storage)
        second.begin()
        XCTAssertTrue(second.flush(timeout: 1))
        second.end(timeout: 1)
        XCTAssertEqual(records(storage), [])
        let sids = try readOutbox(storage).flatMap(\.sessions).compactMap { $0["sid"] as? String }
        XCTAssertEqual(Set(planted).intersection(sids).count, 3)
        XCTAssertEqual(sids.filter { Set(planted).contains($0) }.count, 3, "each once")
    }

    /// When the record cannot be written (here `sessions` is a file), the exit sends the `exited` update at once:
    /// the session is not lost.
    func testAnUnwritableRecordFallsBackToTheUpdate() throws {
        let storage = dirs.make("unwritable")
        try Data("x".utf8).write(to: SessionRecord.directory(storage))
        let c = try client(storage)
        c.begin(startingThread: false)
        c.end(timeout: 1, atExit: true)
        let sessions = try readOutbox(storage).flatMap(\.sessions)
        XCTAssertEqual(sessions.map { $0["status"] as? String }, ["exited"])
        XCTAssertEqual(sessions.first?["init"] as? Bool, true)
        XCTAssertNotNil(sessions.first?["did"] as? String)
    }

    /// A run that exits at once sends the waiting records, however few, once the oldest ended a day ago or more
    /// (Relay drops sessions that started more than five days ago; a program that always exits at once may run
    /// rarely), and not while the oldest is younger.
    func testRunsEndingAtOnceSendFewRecordsOnceTheOldestIsADayOld() throws {
        let storage = dirs.make("age")
        let now = Date().timeIntervalSince1970
        _ = try plantRecords(3, in: storage, endedFrom: now - Double(Client.maxDeferredSessionAge) + 600)
        let young = try client(storage)
        young.begin(startingThread: false)
        young.end(timeout: 1, atExit: true)
        XCTAssertEqual(try readOutbox(storage).flatMap(\.sessions).count, 0, "the oldest is younger than a day")
        XCTAssertEqual(records(storage).count, 4)

        let old = try plantRecords(1, in: storage, endedFrom: now - Double(Client.maxDeferredSessionAge) - 60)
        let next = try client(storage)
        next.begin(startingThread: false)
        next.end(timeout: 1, atExit: true)
        let sids = try readOutbox(storage).flatMap(\.sessions).compactMap { $0["sid"] as? String }
        XCTAssertEqual(sids.count, 5, "all five waiting records, the day-old one among them: \(sids)")
        XCTAssertTrue(sids.contains(old[0]))
        XCTAssertEqual(records(storage).count, 1, "only the sending run's own record is left")
    }

    /// The pass that sends the records deletes temporary files a killed writer left (an hour old or more) and keeps
    /// younger ones (a writer may be between its write and its rename); a directory with a record's name is left,
    /// said so, and does not stop the others.
    func testStaleTemporaryFilesAreRemovedAndAnUnremovableNameIsLeft() throws {
        let storage = dirs.make("tmp")
        let planted = try plantRecords(1, in: storage)
        let dir = SessionRecord.directory(storage)
        let stale = dir.appendingPathComponent(".tmp-STALE"), fresh = dir.appendingPathComponent(".tmp-FRESH")
        try Data("x".utf8).write(to: stale)
        try Data("x".utf8).write(to: fresh)
        let hoursAgo = Date(timeIntervalSinceNow: -2 * Double(Client.staleTemporaryAge))
        try FileManager.default.setAttributes([.modificationDate: hoursAgo], ofItemAtPath: stale.path)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("odd.session"), withIntermediateDirectories: false)
        let lines = LinesLog()
        let c = try client(storage, log: { lines.add($0) })
        c.begin()
        XCTAssertTrue(c.flush(timeout: 1))
        c.end(timeout: 1)
        XCTAssertFalse(FileManager.default.fileExists(atPath: stale.path))
        XCTAssertTrue(FileManager.default.fileExists(atPath: fresh.path))
        XCTAssertTrue(lines.lines.contains { $0.contains("odd.session is not a session record and cannot be removed") }, "\(lines.lines)")
        XCTAssertTrue(try readOutbox(storage).flatMap(\.sessions).contains { $0["sid"] as? String == planted[0] })
    }

    /// A record's text parses back to the same record, and its update is the one the run would have sent.
    func testARecordRoundTripsAndGivesTheRunsUpdate() throws {
        var session = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_764_000_000.125))
        session.errors = 2
        let record = SessionRecord(session: session, ended: Date(timeIntervalSince1970: 1_764_000_003.5),
                                   release: "app@1.0+build", environment: "prod")
        XCTAssertEqual(SessionRecord(data: Data(record.text.utf8)), record)
        var withoutEnvironment = record
        withoutEnvironment.environment = nil
        XCTAssertEqual(SessionRecord(data: Data(withoutEnvironment.text.utf8)), withoutEnvironment)
        let update = record.update(did: "did-1")
        var expected = session
        expected.did = "did-1"
        XCTAssertEqual(update, expected.update(.exited, now: Date(timeIntervalSince1970: 1_764_000_003.5), release: "app@1.0+build",
                                               environment: "prod"))
        XCTAssertEqual(update.duration ?? -1, 3.375, accuracy: 1e-9)
        XCTAssertEqual(update.`init`, true)
    }

    /// Real processes: runs of the harness that exit right after `Vaka.start` (whether each deferred its session
    /// or not depends on which thread ran first), then a launch that flushes: every run's session reaches the
    /// outbox exactly once, as its one `init: true`, `exited` update, and no record is left.
    func testEveryRunThatExitsAtOnceIsReportedExactlyOnce() throws {
        let storage = dirs.make("harness")
        let logs = dirs.make("harness-logs")
        for _ in 0..<6 {
            let run = try runHarness(["--storage", storage.path], environment: ["VAKA_NO_FLUSH": "1"], logDirectory: logs)
            XCTAssertEqual(run.outcome, "exit 0", run.stderr)
        }
        let probe = try runHarness(["start-probe", "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(probe.outcome, "exit 0", probe.stderr)
        let sessions = try readOutbox(storage).flatMap(\.sessions)
        let ended = sessions.filter { $0["status"] as? String == "exited" }
        XCTAssertEqual(ended.count, 7, "six quick runs and the probe: \(sessions)")
        XCTAssertEqual(Set(ended.compactMap { $0["sid"] as? String }).count, 7, "each session once")
        XCTAssertEqual(records(storage), [])
    }
}
