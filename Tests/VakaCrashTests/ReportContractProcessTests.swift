import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaCrash

/// The report contract on reports the real signal handler wrote: the Swift reader knows every key the C writer
/// writes, parses every line without a problem and fills the field of each key. A key renamed on one side only
/// (a literal instead of the contract header's macro) shows up here as an unknown key or an empty field.
final class ReportContractProcessTests: XCTestCase {
    /// Scenarios whose reports together hold every key but `pad` (written only over a kept spare file; its lines
    /// are checked by `SurvivedSignalSpareTests.testSurvivedSignalsSpareIsReusedAndRemoved`): `fault_addr` (SIGSEGV),
    /// `abort_message` and `sender` (c-assert), `fatal_message` (Swift force-unwrap), `frames_truncated`
    /// (stack overflow).
    private let scenarios = ["null-deref", "c-assert", "swift-force-unwrap", "stack-overflow", "all-threads"]

    func testTheReaderTakesEveryLineTheWriterWrites() throws {
        var written = Set<String>()
        // `journal_seq`: a C program with a registered journal (the harness's SDK registers its own only once
        // the SDK keeps its run journal; testJournalSeqIsTheLastAppendedRecord checks the value).
        let journalRun = try Self.journalCrash(mapped: true)
        written.formUnion(journalRun.report.split(separator: "\n").dropFirst().map { String($0.prefix { $0 != " " }) })
        for scenario in scenarios {
            let work = Paths.freshDirectory("contract-\(scenario)")
            let storage = work.appendingPathComponent("storage", isDirectory: true)
            let run = try runChild(Paths.harness, [scenario, "--storage", storage.path], label: scenario,
                                   outputDirectory: work, environment: ["SWIFT_BACKTRACE": "enable=no"])
            XCTAssertEqual(run.reason, .uncaughtSignal, "\(scenario): \(run.stderrTail())")
            let reports = ScenarioRuns.crashFiles(in: storage)
            guard reports.count == 1 else {
                XCTFail("\(scenario): \(reports.count) reports, expected 1; \(run.stderrTail())")
                continue
            }
            let text = try String(contentsOf: reports[0], encoding: .utf8)
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            XCTAssertEqual(lines.first.map(String.init), "\(VAKA_REPORT_MAGIC) \(VAKA_REPORT_VERSION)")
            var keys = Set<String>()
            for line in lines.dropFirst() {
                let key = String(line.prefix { $0 != " " })
                XCTAssertNotNil(ReportKey.byName[key], "\(scenario): the reader does not know the key '\(key)' of the line '\(line)'")
                keys.insert(key)
            }
            written.formUnion(keys)
            let report = try CrashReport(contentsOf: reports[0].path)
            XCTAssertEqual(report.diagnostics, CrashReport.Diagnostics(), "\(scenario): lines the reader skipped\n\(text)")
            XCTAssertFalse(report.isTruncated, "\(scenario)\n\(text)")
            for key in ReportKey.allCases where keys.contains(key.name) {
                XCTAssertTrue(key.isFilled(in: report),
                              "\(scenario): the report has '\(key.name)' lines but the reader left the field empty\n\(text)")
            }
        }
        let expected = Set(ReportKey.allCases.map(\.name)).subtracting([ReportKey.pad.name])
        XCTAssertEqual(written.intersection(expected), expected,
                       "keys no scenario's report held: \(expected.subtracting(written).sorted())")
    }

    /// A C program (the real runtime) that opens a journal beside its reports (`mapped`: or in the write(2)
    /// fallback), appends 5 breadcrumbs, registers it with vaka_crash_set_journal, appends 2 more and writes
    /// through a null pointer. Returns the report's text and the journal's path.
    static func journalCrash(mapped: Bool) throws -> (report: String, journal: URL, run: RuntimeProgram.Run) {
        let program = try RuntimeProgram.build("journal-crash", """
            #include "vaka/vaka_journal.h"
            int main(int argc, char **argv) {
                vk_start("journal-run");
                char path[4096];
                snprintf(path, sizeof path, "%s/journal", getenv("VK_DIR"));
                vaka_journal_options o = { .path = path, .flags = argc > 1 ? VAKA_JOURNAL_NO_MMAP : 0 };
                vaka_journal *j = NULL;
                if (vaka_journal_open(&o, &j) != 0) return 5;
                char body[32];
                for (int i = 1; i <= 7; i++) {
                    if (i == 6) vaka_crash_set_journal(j);
                    snprintf(body, sizeof body, "crumb %d", i);
                    vaka_journal_entry e = { .kind = VAKA_JOURNAL_BREADCRUMB, .level = 9, .body = body,
                                             .body_len = (uint32_t)strlen(body) };
                    if (vaka_journal_append(j, &e, NULL) != 0) return 6;
                }
                vk_null();
                return 0;
            }
            """)
        let run = try RuntimeProgram.run(program, mapped ? [] : ["--no-mmap"])
        return (run.onlyReport, run.directory.appendingPathComponent("journal"), run)
    }

    /// The report of a crash with a registered journal says `journal_seq 7` (the last record appended), the
    /// reader takes it into `CrashReport.journalSeq`, and the journal file holds the 7 records — also when the
    /// journal is in its write(2) fallback, where only the crash handler's sync puts them on disk.
    func testJournalSeqIsTheLastAppendedRecord() throws {
        for mapped in [true, false] {
            let (text, journal, run) = try Self.journalCrash(mapped: mapped)
            XCTAssertEqual(run.result.reason, .uncaughtSignal, "mapped \(mapped): \(run.result.stderrTail())")
            XCTAssertEqual(reportValue(text, VAKA_REPORT_KEY_JOURNAL_SEQ), "7", "mapped \(mapped)\n\(text)")
            let report = try CrashReport(data: Data(text.utf8))
            XCTAssertEqual(report.journalSeq, 7)
            let records = try Journal.read(journal)
            XCTAssertEqual(records.skipped, 0)
            XCTAssertEqual(records.records.map(\.text), (1 ... 7).map { "crumb \($0)" }, "mapped \(mapped)")
        }
    }
}
