import Foundation
import XCTest
import VakaTestSupport

/// The C tests of the journal (`Tests/unit/journal_unit.c`): round trip of every field, a torn or damaged
/// record skipped, the breadcrumb ring's wrap, a full gated ring spilling, the write(2) fallback and its
/// sync, the file 0600 under umask 0777, the crash handler's registration, hostile files (a FIFO, a bad spill, a spill past RLIMIT_FSIZE), the spill
/// file starting over once consumed, close while a crash handler reads the journal, 8 appending threads against one consuming and snapshotting thread
/// (also built with `-fsanitize=thread`: ThreadSanitizer clean), and a child SIGKILLed at random moments while
/// appending (every record appended before the kill reads back in order, at most one torn).
final class JournalUnitTests: XCTestCase {
    /// `journal_unit` linked with the runtime's objects, built once per test process.
    static let program: Result<URL, Error> = Result(catching: {
        try build(name: "journal_unit", sources: [], flags: [], withLibrary: true)
    })

    /// `journal_unit` built with ThreadSanitizer from the journal's own sources.
    static let tsanProgram: Result<URL, Error> = Result(catching: {
        let src = Paths.repositoryRoot.appendingPathComponent("Sources/VakaCrash")
        return try build(name: "journal_unit_tsan",
                         sources: ["journal.c", "journal_read.c", "sig_journal.c"].map { src.appendingPathComponent($0).path },
                         flags: ["-fsanitize=thread", "-O1"], withLibrary: false)
    })

    static func build(name: String, sources: [String], flags: [String], withLibrary: Bool) throws -> URL {
        guard let cc = RuntimeProgram.cc else { throw ChildError(description: "no C compiler (cc)") }
        let root = Paths.repositoryRoot
        let dir = Paths.freshDirectory(name)
        let executable = dir.appendingPathComponent(name)
        var arguments = ["-g", "-std=gnu11", "-D_GNU_SOURCE", "-fno-omit-frame-pointer"] + flags + [
            "-I", root.appendingPathComponent("include").path,
            "-I", root.appendingPathComponent("Sources/VakaCrash").path,
            root.appendingPathComponent("Tests/unit/journal_unit.c").path,
        ] + sources
        if withLibrary { arguments += [try RuntimeProgram.library.get().path, "-ldl"] }
        arguments += ["-lpthread", "-o", executable.path]
        let result = try runChild(URL(fileURLWithPath: cc), arguments, label: "cc", outputDirectory: dir, timeout: 180)
        guard result.outcome == "exit 0" else { throw ChildError(description: "cc \(name): \(result.stderrTail())") }
        return executable
    }

    /// Runs `executable` with `arguments` (the scratch directory appended where `DIR` stands) and fails the test
    /// for each `FAIL` line; returns the names of the checks that passed.
    @discardableResult
    func runChecks(_ executable: URL, _ arguments: [String], environment: [String: String] = [:],
                   file: StaticString = #filePath, line: UInt = #line) throws -> [String] {
        let dir = Paths.freshDirectory("journal-unit-run")
        let result = try runChild(executable, arguments.map { $0 == "DIR" ? dir.path : $0 }, label: "unit",
                                  outputDirectory: dir, environment: environment, timeout: 300)
        let lines = String(decoding: result.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        var passed: [String] = []
        for l in lines {
            if l.hasPrefix("ok ") { passed.append(String(l.dropFirst(3))) }
            if l.hasPrefix("FAIL ") { XCTFail("C check \(l.dropFirst(5))", file: file, line: line) }
        }
        let summary = lines.last ?? ""
        XCTAssertEqual(result.outcome, "exit 0", "journal_unit ended early or a check failed; last line: \(summary)\n\(result.stderrTail())",
                       file: file, line: line)
        XCTAssertTrue(summary.hasPrefix("checks ") && summary.hasSuffix(" failed 0"), "summary: \(summary)", file: file, line: line)
        return passed
    }

    /// Every check of the default run passes, each group ran.
    func testJournalCUnitChecks() throws {
        let passed = try runChecks(try Self.program.get(), ["DIR"])
        for name in ["round_trip_every_field", "torn_record_skipped", "reader_refuses_non_journal",
                     "breadcrumb_ring_wraps_keeping_newest", "gated_ring_spills_when_full",
                     "spill_limit_enospc_and_record_limit_efbig", "no_mmap_fallback_sync",
                     "crash_registration_journal_seq", "reader_survives_random_damage",
                     "reader_does_not_block_on_a_fifo", "ring_records_survive_a_bad_spill_file",
                     "spill_past_the_file_size_limit_fails_with_efbig", "spill_is_reclaimed_once_consumed",
                     "close_waits_for_a_crash_handler_reading_the_journal",
                     "concurrent_8_writers_one_mover"] {
            XCTAssertTrue(passed.contains(name), "check \(name) did not pass (passed: \(passed))")
        }
    }

    /// 8 threads appending logs and breadcrumbs, one thread walking, consuming and snapshotting: no record
    /// lost, repeated, damaged or out of order per thread, and ThreadSanitizer reports nothing
    /// (halt_on_error: a report ends the program with a failure).
    func testConcurrentAppendsAreThreadSanitizerClean() throws {
        let executable: URL
        do { executable = try Self.tsanProgram.get() } catch {
            throw Peers.missing("no ThreadSanitizer build (\(error)): cc -fsanitize=thread needs libtsan (gcc's libtsan2)")
        }
        let passed = try runChecks(executable, ["--concurrency", "DIR"],
                                   environment: ["TSAN_OPTIONS": "halt_on_error=1 exitcode=66"])
        XCTAssertEqual(passed, ["concurrent_8_writers_one_mover"])
    }

    /// A child appending 10,000 records (logs, events, breadcrumbs in turn) SIGKILLed at a random moment, 25
    /// times: every record appended before the kill reads back in order, at most one torn; the newest
    /// breadcrumb survives.
    func testSigkillAtRandomMomentsLosesNothingAppended() throws {
        let seed = UInt32.random(in: 1 ... 1_000_000)
        let passed = try runChecks(try Self.program.get(), ["--kill", "DIR", "25", String(seed)])
        XCTAssertEqual(passed, ["sigkill_at_random_moments"], "seed \(seed)")
    }
}
