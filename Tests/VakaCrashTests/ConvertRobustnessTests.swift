import Foundation
import XCTest
import VakaTestSupport

/// `vaka report convert` on bad input never crashes: it exits non-zero with a message on stderr, or exits 0
/// with a partial event marked `extra.report_truncated == true`.
final class ConvertRobustnessTests: XCTestCase {
    /// A real report (from the null-deref scenario) cut in half.
    func testTruncatedRealReport() throws {
        guard let report = ScenarioRuns.all["null-deref"]?.reports.first else {
            return XCTFail("no real report to cut: the null-deref scenario produced none (see testNullDeref)")
        }
        let data = try Data(contentsOf: report)
        XCTAssertGreaterThan(data.count, 0)
        let cut = Paths.freshDirectory("truncated").appendingPathComponent("half.crash")
        try data.prefix(data.count / 2).write(to: cut)
        assertConvertSurvives(cut)
    }

    /// The documented example report without its `end` line (independent of the crash runtime).
    func testDocumentedExampleWithoutEnd() throws {
        let lines = [
            "VAKA-CRASH 1", "run_id 5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B", "pid 41872", "tid 41872",
            "thread_name vaka-crashme", "timestamp_ns 1796040000123456789", "arch x86_64",
            "executable /nonexistent/vaka-crashme", "signal 11 SIGSEGV", "code 1 SEGV_MAPERR", "fault_addr 0x0",
            "register rip 0x55d4c2a0b1c4", "frame 0x55d4c2a0b1c4 context", "frame 0x55d4c2a0b3a0 cfi",
            "image 0x55d4c2a00000 0x3c000 68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434 /nonexistent/vaka-crashme",
        ]
        let file = Paths.freshDirectory("no-end").appendingPathComponent("no-end.crash")
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: file)
        assertConvertSurvives(file)
    }

    func testEmptyFile() throws {
        let file = Paths.freshDirectory("empty").appendingPathComponent("empty.crash")
        try Data().write(to: file)
        assertConvertSurvives(file)
    }

    /// 64 KiB of pseudo-random bytes (fixed seed, so a failure reproduces).
    func testRandomBytes() throws {
        var state: UInt64 = 0x5641_4b41_2024
        var bytes = [UInt8](repeating: 0, count: 64 * 1024)
        for index in bytes.indices {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            bytes[index] = UInt8(truncatingIfNeeded: state >> 33)
        }
        let file = Paths.freshDirectory("random").appendingPathComponent("random.crash")
        try Data(bytes).write(to: file)
        assertConvertSurvives(file)
    }

    /// A valid header followed by one 10 MiB line.
    func testTenMegabyteLine() throws {
        var data = Data("VAKA-CRASH 1\nrun_id huge-line\nthread_name ".utf8)
        data.append(Data(repeating: UInt8(ascii: "x"), count: 10 * 1024 * 1024))
        data.append(Data("\nend\n".utf8))
        let file = Paths.freshDirectory("huge-line").appendingPathComponent("huge-line.crash")
        try data.write(to: file)
        assertConvertSurvives(file)
    }

    /// A report of an unknown format version is refused (docs/report-format.md): non-zero exit, no crash.
    func testUnknownVersionIsRefused() throws {
        let file = Paths.freshDirectory("version").appendingPathComponent("v999.crash")
        try Data("VAKA-CRASH 999\nrun_id x\nsignal 11 SIGSEGV\nend\n".utf8).write(to: file)
        let result = try convert(file)
        XCTAssertFalse(result.diedBySignal, "vaka report convert crashed: \(result.outcome): \(result.stderrTail())")
        XCTAssertNotEqual(result.outcome, "exit 0", "a report of version 999 must be refused")
        XCTAssertFalse(result.stderr.isEmpty, "an error message is expected on stderr")
    }

    // MARK: - Helpers

    func convert(_ file: URL) throws -> ChildResult {
        try runChild(Paths.cli, ["report", "convert", file.path], label: "convert-\(file.lastPathComponent)",
                     outputDirectory: file.deletingLastPathComponent(), timeout: 60)
    }

    func assertConvertSurvives(_ file: URL, line: UInt = #line) {
        let result: ChildResult
        do {
            result = try convert(file)
        } catch {
            return XCTFail("\(error)", line: line)
        }
        XCTAssertFalse(result.diedBySignal, "vaka report convert \(file.lastPathComponent) crashed: \(result.outcome): \(result.stderrTail())",
                       line: line)
        guard !result.diedBySignal else { return }
        if result.status == 0 {
            let event = decodeJSONObject(result.stdout)
            XCTAssertNotNil(event, "exit 0 without a JSON event on stdout", line: line)
            XCTAssertEqual(dig(event, "extra", "report_truncated") as? Bool, true,
                           "exit 0 is only acceptable for a partial event marked extra.report_truncated == true",
                           line: line)
        } else {
            XCTAssertFalse(result.stderr.isEmpty, "non-zero exit without an error message on stderr", line: line)
        }
    }
}
