import XCTest
import VakaTestSupport
@testable import Vaka
#if canImport(Glibc)
import Glibc
#endif

/// Logs through the real SDK into a journal that dies (`vaka-crashme log-flood` SIGKILLed at random moments),
/// logs arriving faster than the mover's interval, and a run whose files are under an `RLIMIT_FSIZE` quota
/// (`vaka-crashme fsize-flood`). Outbox mode: the
/// outbox file names give the order in which envelopes were written.
final class JournalKillAndQuotaTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// The index `i` of `prefix + "i"`, or `nil`.
    private func index(_ text: String?, after prefix: String) -> Int? {
        guard let text, text.hasPrefix(prefix) else { return nil }
        return Int(text.dropFirst(prefix.count))
    }

    /// `log-flood` (20,000 `Vaka.logger.info("log i")`) SIGKILLed at a random moment, at least 20 times (at most
    /// 40 runs, 10 minutes), each in a fresh storage directory. The killed run's journal, read offline, has at
    /// most one torn record. After the next launch the outbox's `log` items hold every log appended before the
    /// kill (the child's progress file says how many returned), in order, without a gap; a log may appear twice
    /// only as part of the mover's batch in flight (written to the outbox, the process killed before its
    /// records were consumed: the next launch writes that batch again, so the sequence restarts once, inside
    /// what was already written).
    func testLogFloodKilledAtRandomMomentsLosesNoLogAppendedBeforeTheKill() throws {
        var generator = SystemRandomNumberGenerator()
        var kills = 0, attempts = 0, recoveredFromJournal = 0, redelivered = 0
        let started = Date()
        while kills < 20 && attempts < 40 && Date().timeIntervalSince(started) < 600 {
            attempts += 1
            let storage = dirs.make("log-flood-\(attempts)")
            let logs = dirs.make("log-flood-logs-\(attempts)")
            let progressURL = storage.appendingPathComponent("log-flood.progress")
            let child = try RunningChild(Paths.harness, ["log-flood", "--storage", storage.path], logDirectory: logs)
            let deadline = Date().addingTimeInterval(60)
            while ((try? Data(contentsOf: progressURL))?.isEmpty ?? true) && Date() < deadline { usleep(1000) }
            usleep(UInt32.random(in: 0...100_000, using: &generator))
            child.sigkill()
            guard let result = child.wait(timeout: 60) else { XCTFail("log-flood hung"); return }
            guard result.signaled else {
                XCTAssertEqual(result.outcome, "exit 0", result.stderr)
                continue  // finished before the kill: not counted
            }
            kills += 1
            let progress = try String(contentsOf: progressURL, encoding: .utf8)
            let logged = try XCTUnwrap(Int(progress.split(whereSeparator: { $0 == "\n" }).first ?? ""), progress)

            let runs = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("runs").path)
            XCTAssertEqual(runs.count, 1)
            let journalURL = storage.appendingPathComponent("runs/\(try XCTUnwrap(runs.first))/journal")
            let (records, skipped) = try Journal.read(journalURL)
            XCTAssertLessThanOrEqual(skipped, 1, "at most one torn record")
            recoveredFromJournal += records.filter { $0.kind == .log && !$0.consumed }.count

            let relaunch = try runHarness(["--storage", storage.path], logDirectory: logs)
            XCTAssertEqual(relaunch.outcome, "exit 0", relaunch.stderr)
            let items = try readOutbox(storage).flatMap { $0.items.filter { $0.type == "log" } }
            let numbers = items.flatMap { ($0.payload["items"] as? [[String: Any]]) ?? [] }
                .compactMap { index($0["body"] as? String, after: "log ") }
            let distinct = Set(numbers)
            let top = numbers.max() ?? -1
            XCTAssertTrue(top == logged - 1 || top == logged, "newest log \(top), the child had logged \(logged)")
            XCTAssertEqual(distinct, Set(0..<(top + 1)), "every log before the kill, none missing")
            var restarts = 0
            for (a, b) in zip(numbers, numbers.dropFirst()) where b != a + 1 {
                restarts += 1
                XCTAssertLessThanOrEqual(b, a, "a gap between \(a) and \(b)")
            }
            XCTAssertLessThanOrEqual(restarts, 1, "in order, one restart at most")
            redelivered += numbers.count - distinct.count
        }
        XCTAssertGreaterThanOrEqual(kills, 20, "only \(kills) of \(attempts) runs were killed before they finished")
        print("log flood: \(kills) SIGKILLs in \(attempts) runs; \(recoveredFromJournal) logs recovered from killed runs' journals, \(redelivered) written twice")
    }

    /// 3,000 logs at 5,000 logs/s through the logger's journal route of a started client (about 80 bytes each;
    /// the default journal's log ring holds about 800): far more than the ring holds between two of the mover's
    /// 1 s passes, so without a wake-up as the ring fills most of them would go to the spill file (over 100 KB).
    /// The mover, woken at 750 ‰, keeps them in the ring: a generous bound of 40 KB allows for the mover being
    /// held up now and then on a busy machine. All 3,000 are delivered, in order.
    func testLogsFasterThanTheMoversIntervalStayInTheRing() throws {
        let storage = dirs.make("paced-logs")
        let client = try Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage), storage: storage,
                                runID: "P-\(UUID().uuidString)", dsn: nil, log: nil)
        client.begin()
        let journal = try XCTUnwrap(client.journal)
        let append = LogRouter.journalSink(journal, mover: client.mover)
        let spill = journal.url.path + ".spill"
        var next = DispatchTime.now().uptimeNanoseconds
        for i in 0..<3000 {
            while DispatchTime.now().uptimeNanoseconds < next {}
            next += 200_000
            append(LogRouter.realtimeNs(), .info, "log \(i)", [(key: "i", value: .integer(Int64(i)))])
        }
        var info = stat()
        let spilled = stat(spill, &info) == 0 ? Int(info.st_size) : 0
        client.end(timeout: 5)
        XCTAssertLessThan(spilled, 40_000, "bytes of logs spilled while the ring filled")
        let bodies = try readOutbox(storage).flatMap { $0.items.filter { $0.type == "log" } }
            .flatMap { ($0.payload["items"] as? [[String: Any]]) ?? [] }.compactMap { $0["body"] as? String }
        XCTAssertEqual(bodies, (0..<3000).map { "log \($0)" })
    }

    /// `fsize-flood` with a 16 KiB journal (so its event ring holds one event and the spill file grows): the
    /// soft `RLIMIT_FSIZE` is set to the spill's size once it holds 8 KiB, so the next spill write starts at the
    /// quota — as does the write(2) fallback's sync of its 16 KiB file (`VAKA_JOURNAL_NO_MMAP=1`). The
    /// process is not ended by SIGXFSZ, and every event is delivered once, in order (those the spill refuses are
    /// written to storage at once, after what the journal held).
    func testJournalWritesPastAFileSizeQuotaDoNotEndTheApp() throws {
        for fallback in [false, true] {
            let label = fallback ? "fallback" : "mapped"
            let storage = dirs.make("fsize-\(label)")
            let logs = dirs.make("fsize-logs-\(label)")
            var environment = ["VAKA_JOURNAL_SIZE": "16384"]
            if fallback { environment["VAKA_JOURNAL_NO_MMAP"] = "1" }
            let run = try runHarness(["fsize-flood", "--storage", storage.path], environment: environment,
                                     logDirectory: logs, timeout: 120)
            XCTAssertEqual(run.outcome, "exit 0", "\(label): SIGXFSZ is signal \(SIGXFSZ)\n\(run.stderr)")
            let words = run.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" })
            guard words.count >= 4, let quota = Int(words[1]), let count = Int(words[3]) else {
                XCTFail("\(label): \(run.stdout)\n\(run.stderr)")
                continue
            }
            XCTAssertGreaterThanOrEqual(quota, 8192, label)
            let ids = try readOutbox(storage).flatMap(\.events).compactMap { $0["event_id"] as? String }
            XCTAssertEqual(ids, (0..<count).map { "f5125" + String(format: "%027x", $0) }, "\(label): every event once, in order")
        }
    }
}
