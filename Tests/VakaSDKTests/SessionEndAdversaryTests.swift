import Synchronization
import XCTest
import VakaTestSupport
@testable import Vaka

/// A run's session ends once, as that run's: hostile contents of a session record and processes that end while
/// others look at their run directories.
final class SessionEndAdversaryTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// A release or environment that begins with a combining mark (or another scalar that joins the space before
    /// it into one grapheme cluster) parses back from the record's text unchanged: the record is not taken for a
    /// broken one and deleted (the session lost), nor sent without its environment.
    func testARecordKeepsAReleaseAndEnvironmentThatBeginWithACombiningMark() throws {
        let session = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_764_000_000))
        for value in ["\u{301}app@1", "\u{200D}x", "\u{FE0F}1.0", "\u{1F3FB}skin", "a b  c "] {
            let record = SessionRecord(session: session, ended: Date(timeIntervalSince1970: 1_764_000_001),
                                       release: value, environment: value)
            let parsed = try XCTUnwrap(SessionRecord(data: Data(record.text.utf8)), "release \(value.unicodeScalars.map { $0.value })")
            XCTAssertEqual(parsed, record)
            XCTAssertEqual(parsed.update(did: nil).attrs.release, value)
            XCTAssertEqual(parsed.update(did: nil).attrs.environment, value)
        }
    }

    /// A run directory whose run is removing it (the run ended: its `exited` update is written) is never seen by
    /// another process's join as a finished run that still has its `scope.json` (which says `ok`): that process
    /// would send an `abnormal` update after the `exited` one, and move the journal's entries again. One thread
    /// ends runs over and over while another lists the finished runs as a join does (a lock taken through a
    /// descriptor of its own conflicts within one process as between processes).
    func testARunDirectoryBeingRemovedIsNeverJoinedWithItsScope() throws {
        let storage = dirs.make("removal")
        let stop = Atomic<Bool>(false)
        let seen = Mutex<[String]>([])
        let watcher = Thread {
            while !stop.load(ordering: .acquiring) {
                for run in RunDirectory.finishedRuns(storage: storage, except: "") where run.scope != nil {
                    seen.withLock { $0.append(run.runID) }
                }
            }
        }
        watcher.start()
        let deadline = Date().addingTimeInterval(8)
        var rounds = 0
        while rounds < 2000 && Date() < deadline && seen.withLock({ $0.isEmpty }) {
            let runID = UUID().uuidString
            let run = try RunDirectory(storage: storage, runID: runID)
            try run.write(RunScope(runID: runID, release: "r@1", environment: "production", tags: [:], userID: nil,
                                   session: SessionState(did: nil, started: Date())))
            run.remove()
            rounds += 1
        }
        stop.store(true, ordering: .releasing)
        while !watcher.isFinished { usleep(1000) }
        XCTAssertEqual(seen.withLock { $0 }, [], "runs joined with their scope while being removed (\(rounds) rounds)")
    }

    /// A run takes its directory's lock even when another process's join probes that lock at the moment the run
    /// makes it (the probe holds it for a `flock` and a `close`): a run left without its lock would be taken
    /// for a finished one while it lives (its session ended `abnormal`, its journal moved, its directory
    /// removed).
    func testARunHoldsItsLockWhileJoinsProbeIt() throws {
        let storage = dirs.make("lock-probe")
        let stop = Atomic<Bool>(false)
        let watcher = Thread {
            while !stop.load(ordering: .acquiring) { _ = RunDirectory.finishedRuns(storage: storage, except: "") }
        }
        watcher.start()
        defer {
            stop.store(true, ordering: .releasing)
            while !watcher.isFinished { usleep(1000) }
        }
        let deadline = Date().addingTimeInterval(8)
        var unlocked: [String] = []
        var rounds = 0
        while rounds < 2000 && Date() < deadline && unlocked.isEmpty {
            let runID = UUID().uuidString
            let run = try RunDirectory(storage: storage, runID: runID)
            let fd = open(run.path + "/lock", O_RDWR | O_CLOEXEC)
            XCTAssertGreaterThanOrEqual(fd, 0)
            // The watcher may hold it for a moment: only a lock taken, not one refused, shows the run lost it.
            if flock(fd, LOCK_EX | LOCK_NB) == 0 {
                var held = false
                for _ in 0..<3 where !held {
                    flock(fd, LOCK_UN)
                    usleep(200)
                    held = flock(fd, LOCK_EX | LOCK_NB) != 0
                }
                if !held { unlocked.append(runID) }
            }
            close(fd)
            run.remove()
            rounds += 1
        }
        XCTAssertEqual(unlocked, [], "runs without their lock (\(rounds) rounds)")
    }

    /// A run directory being made (its lock not yet there) is never listed as a finished run: a join would take it
    /// for a run that died before writing anything and delete it, with the lock and journal the run makes in it
    /// next.
    func testARunDirectoryBeingMadeIsNeverJoined() throws {
        let storage = dirs.make("making")
        let stop = Atomic<Bool>(false)
        let making = Mutex<Set<String>>([])
        let seen = Mutex<[String]>([])
        let watcher = Thread {
            while !stop.load(ordering: .acquiring) {
                for run in RunDirectory.finishedRuns(storage: storage, except: "") where making.withLock({ $0.contains(run.runID) }) {
                    seen.withLock { $0.append(run.runID) }
                }
            }
        }
        watcher.start()
        defer {
            stop.store(true, ordering: .releasing)
            while !watcher.isFinished { usleep(1000) }
        }
        let deadline = Date().addingTimeInterval(8)
        var rounds = 0
        while rounds < 2000 && Date() < deadline && seen.withLock({ $0.isEmpty }) {
            let runID = UUID().uuidString
            making.withLock { _ = $0.insert(runID) }
            let run = try RunDirectory(storage: storage, runID: runID)
            making.withLock { _ = $0.remove(runID) }
            run.remove()
            rounds += 1
        }
        XCTAssertEqual(seen.withLock { $0 }, [], "runs listed as finished while being made (\(rounds) rounds)")
    }
}
