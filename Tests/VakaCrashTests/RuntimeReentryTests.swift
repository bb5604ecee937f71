import Foundation
import XCTest

/// Re-entry of the crash handler from several threads at once: the handler tracks its entries per handling
/// thread (kernel tid, depth, newest entry) and gives the report to the first thread that arrives. Each case
/// is a small C program against the runtime (``RuntimeProgram``) whose threads fault together.
final class RuntimeReentryTests: XCTestCase {
    /// Four threads released together each write through a null pointer. `fault` as the first argument makes
    /// the capture fault on purpose after the header (vaka_crash_test_fault_in_handler(1)).
    static let source = """
    #include <sys/syscall.h>
    #define THREADS 4
    static pthread_barrier_t barrier;
    static void *crasher(void *arg) {
        (void)arg;
        pthread_barrier_wait(&barrier);
        vk_null();
        return NULL;
    }
    int main(int argc, char **argv) {
        vk_start("reentry");
        if (argc > 1 && strcmp(argv[1], "fault") == 0) vaka_crash_test_fault_in_handler(1);
        pthread_barrier_init(&barrier, NULL, THREADS);
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, crasher, NULL);
        for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
        return 0;
    }
    """

    private func lines(_ report: String, key: String) -> [Substring] {
        report.split(separator: "\n").filter { $0 == key || $0.hasPrefix(key + " ") }
    }

    /// Threads crashing at the same time: one report, from one thread (a single header, a worker's tid), complete
    /// (`end`), and the process ends with SIGSEGV. Repeated, since which thread wins varies.
    func testThreadsCrashingTogetherGiveOneCompleteReport() throws {
        let program = try RuntimeProgram.build("reentry-plain", Self.source)
        for attempt in 0..<3 {
            let run = try RuntimeProgram.run(program, timeout: 60)
            XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", "attempt \(attempt): \(run.result.stderrTail())")
            XCTAssertEqual(run.reports, ["reentry.crash"], "attempt \(attempt)")
            let report = run.onlyReport
            XCTAssertEqual(lines(report, key: "VAKA-CRASH").count, 1, report)
            XCTAssertEqual(lines(report, key: "tid").count, 1, report)
            XCTAssertEqual(lines(report, key: "signal"), ["signal 11 SIGSEGV"], report)
            XCTAssertEqual(lines(report, key: "code"), ["code 1 SEGV_MAPERR"], report)
            XCTAssertNotEqual(reportValue(report, "tid"), reportValue(report, "pid"), "a worker thread crashed, not main")
            XCTAssertTrue(report.hasSuffix("\nend\n"), report)
        }
    }

    /// Threads crashing at the same time while the winner's capture faults inside the handler: the nested fault
    /// is told apart from the other threads' entries (per-thread tracking), so the report is the winner's alone —
    /// one header, its lines intact, no `end` (truncated) — and the process still ends with the original SIGSEGV.
    func testFaultInsideTheHandlerWhileThreadsCrashTogether() throws {
        let program = try RuntimeProgram.build("reentry-fault", Self.source)
        for attempt in 0..<3 {
            let run = try RuntimeProgram.run(program, ["fault"], timeout: 60)
            XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", "attempt \(attempt): \(run.result.stderrTail())")
            XCTAssertEqual(run.reports, ["reentry.crash"], "attempt \(attempt)")
            let report = run.onlyReport
            XCTAssertEqual(lines(report, key: "VAKA-CRASH"), ["VAKA-CRASH 2"], report)
            XCTAssertEqual(lines(report, key: "tid").count, 1, report)
            XCTAssertEqual(lines(report, key: "signal"), ["signal 11 SIGSEGV"], report)
            XCTAssertEqual(lines(report, key: "fault_addr"), ["fault_addr 0x0"], report)
            XCTAssertTrue(lines(report, key: "end").isEmpty, "the capture faulted: truncated\n\(report)")
            XCTAssertTrue(lines(report, key: "frame").isEmpty, "the fault came before the frames\n\(report)")
            XCTAssertTrue(report.hasSuffix("\n"), "only complete lines are kept\n\(report)")
        }
    }

    /// 150 threads released together each write through a null pointer: more threads in the handler at once
    /// than it has entry slots (the threads past the 64th go without the repeated-fault check). Still one
    /// report from one worker thread, complete, and death by SIGSEGV; with the capture faulting on purpose
    /// after the header, the nested fault is still told apart: one header, no `end`, SIGSEGV.
    func testMoreThreadsCrashingTogetherThanEntrySlots() throws {
        let program = try RuntimeProgram.build("reentry-150", Self.source.replacingOccurrences(of: "#define THREADS 4", with: "#define THREADS 150"))
        for mode in [[], ["fault"]] {
            for attempt in 0..<2 {
                let run = try RuntimeProgram.run(program, mode, timeout: 60)
                let label = "\(mode) attempt \(attempt)"
                XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", "\(label): \(run.result.stderrTail())")
                XCTAssertEqual(run.reports, ["reentry.crash"], label)
                let report = run.onlyReport
                XCTAssertEqual(lines(report, key: "VAKA-CRASH").count, 1, report)
                XCTAssertEqual(lines(report, key: "tid").count, 1, report)
                XCTAssertNotEqual(reportValue(report, "tid"), reportValue(report, "pid"), "a worker thread crashed, not main")
                XCTAssertEqual(report.hasSuffix("\nend\n"), mode.isEmpty, "\(label): \(report.suffix(200))")
            }
        }
    }
}
