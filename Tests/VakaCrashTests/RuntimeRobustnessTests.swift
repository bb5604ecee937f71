import Foundation
import XCTest

/// Robustness of the C crash runtime in situations the Swift harness cannot set up, each a small C program
/// compiled against the runtime sources (``RuntimeProgram``). Every test runs the program with Vaka and
/// checks how the process ended (signal, no hang: the run is killed after a timeout) and the report.
final class RuntimeRobustnessTests: XCTestCase {
    /// The number of `frame` lines of a report.
    func frameCount(_ report: String) -> Int {
        report.split(separator: "\n").filter { $0.hasPrefix("frame ") }.count
    }

    /// H1: a thread sits inside dl_iterate_phdr (holding the dynamic linker's lock) waiting for a mutex the
    /// crashing thread holds; libunwind's unw_step calls dl_iterate_phdr and would wait forever. The capture
    /// watchdog ends the process with the original signal and a truncated report that has the
    /// frame-pointer frames.
    func testWatchdogEndsCaptureStuckInDlIteratePhdr() throws {
        let program = try RuntimeProgram.build("dliter", """
        #include <link.h>
        static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        static volatile int inside;
        static int cb(struct dl_phdr_info *i, size_t s, void *d) { inside = 1; pthread_mutex_lock(&m); pthread_mutex_unlock(&m); return 1; }
        static void *th(void *a) { dl_iterate_phdr(cb, NULL); return NULL; }
        int main(void) {
            vk_start("dliter");
            pthread_mutex_lock(&m);
            pthread_t t; pthread_create(&t, NULL, th, NULL);
            while (!inside) usleep(1000);
            vk_null();
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertFalse(run.result.timedOut, "the capture hung")
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["dliter.crash"])
        let report = run.onlyReport
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV")
        XCTAssertFalse(report.hasSuffix("\nend\n"), "a watchdog-ended capture must be truncated")
        XCTAssertNotNil(reportValue(report, "register"), "registers are flushed before unwinding")
        XCTAssertGreaterThanOrEqual(frameCount(report), 2, report)
    }
}
