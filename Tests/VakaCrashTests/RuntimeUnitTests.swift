import Foundation
import VakaCrash
import XCTest
import VakaTestSupport

/// The C unit tests of the crash runtime's pieces (`Tests/unit/runtime_unit.c`: report writer escaping, the
/// message cap, the build-ID note reader, the frame-pointer walk over a crafted stack, the signal-name table,
/// the loaded images),
/// compiled with `cc` against the runtime's objects (``RuntimeProgram/library``, which reaches the internal
/// functions), and the C half of the report contract: two reports written by the runtime's own writer
/// functions that together hold every key of `include/vaka/vaka_report_format.h`.
final class RuntimeUnitTests: XCTestCase {
    /// Checks the C program must run at least (it prints its count; more may be added).
    static let minimumChecks = 54

    /// `runtime_unit`, built once per test process.
    static let program: Result<URL, Error> = Result(catching: {
        let library = try RuntimeProgram.library.get()
        guard let cc = RuntimeProgram.cc else { throw ChildError(description: "no C compiler (cc)") }
        let root = Paths.repositoryRoot
        let dir = Paths.freshDirectory("runtime-unit")
        let executable = dir.appendingPathComponent("runtime_unit")
        let result = try runChild(URL(fileURLWithPath: cc),
                                  ["-g", "-O0", "-std=gnu11", "-D_GNU_SOURCE", "-fno-omit-frame-pointer",
                                   "-I", root.appendingPathComponent("include").path,
                                   "-I", root.appendingPathComponent("Sources/VakaCrash").path,
                                   root.appendingPathComponent("Tests/unit/runtime_unit.c").path,
                                   library.path, "-lpthread", "-ldl", "-o", executable.path],
                                  label: "cc", outputDirectory: dir, timeout: 120)
        guard result.outcome == "exit 0" else { throw ChildError(description: "cc runtime_unit.c: \(result.stderrTail())") }
        return executable
    })

    /// Runs every C check; each failing check fails this test with its name and what differed.
    func testRuntimePiecesCUnitChecks() throws {
        let executable = try Self.program.get()
        let dir = Paths.freshDirectory("runtime-unit-run")
        let result = try runChild(executable, [], label: "unit", outputDirectory: dir, timeout: 120)
        let lines = String(decoding: result.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        var passed: [String] = []
        for line in lines {
            if line.hasPrefix("ok ") { passed.append(String(line.dropFirst(3))) }
            if line.hasPrefix("FAIL ") { XCTFail("C check \(line.dropFirst(5))") }
        }
        let summary = lines.last ?? ""
        XCTAssertEqual(result.outcome, "exit 0", "runtime_unit ended early or a check failed; last line: \(summary)\n\(result.stderrTail())")
        XCTAssertTrue(summary.hasPrefix("checks ") && summary.hasSuffix(" failed 0"), "summary: \(summary)")
        XCTAssertGreaterThanOrEqual(passed.count, Self.minimumChecks, "checks that passed: \(passed)")
        for group in ["escape_", "message_", "build_id_", "fp_walk_", "signal_names_", "si_code_names", "images_", "wait_verdict_", "format_udec_"] {
            XCTAssertTrue(passed.contains { $0.hasPrefix(group) }, "no \(group)* check ran")
        }
    }

    /// The contract reports written by the runtime's writer functions hold every key of the contract header,
    /// each as the key of a line, and the values the header names (format line, frame methods, memory_read).
    func testContractReportsHoldEveryKeyOfTheHeader() throws {
        let executable = try Self.program.get()
        let dir = Paths.freshDirectory("runtime-contract")
        let reports = dir.appendingPathComponent("reports", isDirectory: true)
        try FileManager.default.createDirectory(at: reports, withIntermediateDirectories: true)
        let result = try runChild(executable, ["--contract-report", reports.path], label: "contract",
                                  outputDirectory: dir, timeout: 60)
        XCTAssertEqual(result.outcome, "exit 0", result.stderrTail())
        let fault = try String(contentsOf: reports.appendingPathComponent("contract-fault.crash"), encoding: .utf8)
        let sender = try String(contentsOf: reports.appendingPathComponent("contract-sender.crash"), encoding: .utf8)
        let keys = Set((fault + sender).split(separator: "\n").map { String($0.split(separator: " ", maxSplits: 1)[0]) })
        let contract = [
            VAKA_REPORT_MAGIC, VAKA_REPORT_KEY_RUN_ID, VAKA_REPORT_KEY_PID, VAKA_REPORT_KEY_TID,
            VAKA_REPORT_KEY_THREAD_NAME, VAKA_REPORT_KEY_TIMESTAMP_NS, VAKA_REPORT_KEY_ARCH,
            VAKA_REPORT_KEY_EXECUTABLE, VAKA_REPORT_KEY_SIGNAL, VAKA_REPORT_KEY_CODE, VAKA_REPORT_KEY_FAULT_ADDR,
            VAKA_REPORT_KEY_SENDER, VAKA_REPORT_KEY_FATAL_MESSAGE, VAKA_REPORT_KEY_ABORT_MESSAGE,
            VAKA_REPORT_KEY_JOURNAL_SEQ,
            VAKA_REPORT_KEY_REGISTER, VAKA_REPORT_KEY_FRAME, VAKA_REPORT_KEY_FRAMES_TRUNCATED, VAKA_REPORT_KEY_IMAGE,
            VAKA_REPORT_KEY_MEMORY_READ, VAKA_REPORT_KEY_CAPTURE_NS, VAKA_REPORT_KEY_PAD, VAKA_REPORT_KEY_END,
        ]
        for key in contract { XCTAssertTrue(keys.contains(key), "no `\(key)` line in the contract reports") }
        XCTAssertEqual(keys.subtracting(contract), [], "keys the header does not name")
        for report in [fault, sender] {
            XCTAssertTrue(report.hasPrefix("\(VAKA_REPORT_MAGIC) \(VAKA_REPORT_VERSION)\n"), report)
            XCTAssertTrue(report.hasSuffix("\n\(VAKA_REPORT_KEY_END)\n"), "complete")
            XCTAssertEqual(report.utf8.count, 16384, "padded up to the reused file's size")
        }
        for method in [VAKA_REPORT_FRAME_METHOD_CONTEXT, VAKA_REPORT_FRAME_METHOD_CFI, VAKA_REPORT_FRAME_METHOD_FP,
                       VAKA_REPORT_FRAME_METHOD_SCAN] {
            XCTAssertTrue(fault.contains(" \(method)\n") && fault.contains("\n\(VAKA_REPORT_KEY_FRAME) 0x"), "frame method \(method)")
        }
        let memoryRead = reportValue(fault, VAKA_REPORT_KEY_MEMORY_READ)
        XCTAssertTrue([VAKA_REPORT_MEMORY_READ_PVR, VAKA_REPORT_MEMORY_READ_PIPE].contains(memoryRead ?? ""), "\(memoryRead ?? "nil")")
        XCTAssertEqual(reportValue(fault, VAKA_REPORT_KEY_SIGNAL), "11 \(String(cString: vaka_signal_name(SIGSEGV)))")
        XCTAssertEqual(reportValue(fault, VAKA_REPORT_KEY_CODE), "1 \(String(cString: vaka_si_code_name(SIGSEGV, 1)))")
        XCTAssertEqual(reportValue(fault, VAKA_REPORT_KEY_THREAD_NAME), "vaka\\tcontract")
        XCTAssertEqual(reportValue(fault, VAKA_REPORT_KEY_FATAL_MESSAGE), "Fatal error: contract \\\\ check\\tone")
        XCTAssertEqual(reportValue(fault, VAKA_REPORT_KEY_ABORT_MESSAGE), "assertion \\x01 failed")
        XCTAssertEqual(reportValue(sender, VAKA_REPORT_KEY_SENDER), "4242 1000")
        XCTAssertEqual(reportValue(fault, VAKA_REPORT_KEY_JOURNAL_SEQ), "3", "the registered journal's last seq")
        XCTAssertNil(reportValue(sender, VAKA_REPORT_KEY_JOURNAL_SEQ), "no journal registered: no line")
        XCTAssertEqual(reportValue(fault, VAKA_REPORT_KEY_FRAMES_TRUNCATED), "4")
        XCTAssertEqual(Int(VAKA_REPORT_MAX_FRAMES), Int(VAKA_MAX_FRAMES))
    }
}
