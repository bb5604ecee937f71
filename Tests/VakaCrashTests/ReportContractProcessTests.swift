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
    private let scenarios = ["null-deref", "c-assert", "swift-force-unwrap", "stack-overflow"]

    func testTheReaderTakesEveryLineTheWriterWrites() throws {
        var written = Set<String>()
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
}
