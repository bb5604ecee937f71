import Foundation
import XCTest
import VakaTestSupport

/// Swift's backtracer, which runs right after Vaka's crash handler in the same process, suspends every other
/// thread with SIGUSR1, SIGUSR2 or SIGPROF (the first one the thread does not block) and prints
/// `swift-runtime: failed to suspend thread N ...` for a thread that blocks all three. A thread of Vaka's that
/// has just answered the crash-time thread round may still be in the thread signal's handler then, whose mask
/// must leave SIGPROF unblocked.
final class SwiftBacktracerSuspendTests: XCTestCase {
    func testSwiftsBacktracerSuspendsVakasThreadsAfterTheThreadRound() throws {
        var problems: [String] = []
        // --settle: start's work is over (no thread being created), the mover waits in its condition.
        for index in 0..<10 {
            let work = Paths.freshDirectory("swift-suspend-\(index)")
            let storage = work.appendingPathComponent("storage")
            let child = try runChild(Paths.harness, ["swift-force-unwrap", "--settle", "--storage", storage.path],
                                     label: "swift-force-unwrap", outputDirectory: work,
                                     environment: ["SWIFT_BACKTRACE": "enable=yes,interactive=no,color=no,images=none"],
                                     timeout: 60)
            XCTAssertEqual(child.outcome, "signal 4 (SIGILL)", child.stderrTail())
            XCTAssertEqual(ScenarioRuns.crashFiles(in: storage).count, 1, child.stderrTail())
            XCTAssertTrue(child.stderrText.contains("Thread 1 \"vaka.journal\""), "Swift's backtrace lists the mover:\n\(child.stderrText)")
            if let line = child.stderrText.split(separator: "\n").first(where: { $0.contains("failed to suspend thread") }) {
                problems.append("run \(index): \(line)")
            }
        }
        XCTAssertEqual(problems, [], problems.joined(separator: "\n"))
    }

    /// `concurrent` (8 threads read through NULL at one barrier) with Swift's backtracer on, as programs run by
    /// default: the winner calls Swift's handler, which resets every crash signal to SIG_DFL, prints its
    /// backtrace and returns; the fault then repeats and ends the process. The threads waiting for the winner
    /// must not capture again in between: a second capture reopened the same report path and the death cut it
    /// short (7 of 12 runs of this test left a report with no `end` line, or none).
    /// Each run: SIGSEGV, one complete report, one Swift backtrace, whose crashed thread is the report's.
    func testConcurrentCrashesWithSwiftsBacktracerLeaveOneCompleteReport() throws {
        var problems: [String] = []
        for index in 0..<12 {
            let work = Paths.freshDirectory("swift-concurrent-\(index)")
            let storage = work.appendingPathComponent("storage")
            let child = try runChild(Paths.harness, ["concurrent", "--storage", storage.path],
                                     label: "concurrent", outputDirectory: work,
                                     environment: ["SWIFT_BACKTRACE": "enable=yes,interactive=no,color=no,images=none"],
                                     timeout: 30)
            let files = ScenarioRuns.crashFiles(in: storage)
            let report = files.count == 1 ? ((try? String(contentsOf: files[0], encoding: .utf8)) ?? "") : ""
            let lines = report.split(separator: "\n")
            let thread = reportValue(report, "thread_name") ?? "?"
            let backtraces = child.stderrText.components(separatedBy: "*** Program crashed:").count - 1
            var wrong: [String] = []
            if child.outcome != "signal 11 (SIGSEGV)" { wrong.append("ended by \(child.outcome)") }
            if files.count != 1 { wrong.append("\(files.count) reports") }
            if files.count == 1 && lines.last != "end" { wrong.append("report without its end line (\(lines.count) lines)") }
            if backtraces != 1 { wrong.append("\(backtraces) Swift backtraces") }
            if !child.stderrText.contains("\"\(thread)\" crashed:") {
                wrong.append("Swift's backtrace does not show the report's thread \(thread) as the crashed one")
            }
            if !wrong.isEmpty { problems.append("run \(index): " + wrong.joined(separator: ", ")) }
        }
        XCTAssertEqual(problems, [], problems.joined(separator: "\n"))
    }

    /// The same with a previous handler in C that does what Swift's backtracer does (every crash signal back to
    /// SIG_DFL, some work, return), for a fault and for abort() on 8 threads at one barrier: abort() raises
    /// SIGABRT again after the handler returns, as the fault repeats. When the waiting threads captured again
    /// in between, 6 of 10 fault runs and 5 of 10 abort runs left no report at all. Each run: the signal, one
    /// complete report of that signal, the handler run once.
    func testConcurrentFaultsAndAbortsUnderABacktracerLikeHandlerLeaveOneCompleteReport() throws {
        let program = try RuntimeProgram.build("backtracer-like-concurrent", """
        #include <time.h>
        static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP };
        static void backtracer(int s, siginfo_t *i, void *u) {
            for (int k = 0; k < 6; k++) signal(sigs[k], SIG_DFL);
            write(2, "backtracer ran\\n", 15);
            struct timespec t = { 0, 20000000 }; nanosleep(&t, NULL);
        }
        static pthread_barrier_t barrier;
        static void *crash(void *how) {
            pthread_barrier_wait(&barrier);
            if (how != NULL) abort();
            vk_null();
            return NULL;
        }
        int main(int argc, char **argv) {
            struct sigaction sa = {0}; sa.sa_sigaction = backtracer; sa.sa_flags = SA_SIGINFO | SA_NODEFER;
            for (int k = 0; k < 6; k++) sigaction(sigs[k], &sa, NULL);
            vk_start("bt-like");
            pthread_barrier_init(&barrier, NULL, 8);
            pthread_t threads[8];
            for (int i = 0; i < 8; i++) pthread_create(&threads[i], NULL, crash, argc > 1 ? (void *)1 : NULL);
            for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);
            return 0;
        }
        """)
        var problems: [String] = []
        for (arguments, outcome) in [([String](), "signal 11 (SIGSEGV)"), (["abort"], "signal 6 (SIGABRT)")] {
            for index in 0..<10 {
                let run = try RuntimeProgram.run(program, arguments, timeout: 30)
                let lines = run.onlyReport.split(separator: "\n")
                let handlerRuns = run.result.stderrText.components(separatedBy: "backtracer ran").count - 1
                var wrong: [String] = []
                if run.result.outcome != outcome { wrong.append("ended by \(run.result.outcome)") }
                if run.reports.count != 1 { wrong.append("\(run.reports.count) reports") }
                if run.reports.count == 1 && lines.last != "end" { wrong.append("report without its end line (\(lines.count) lines)") }
                if run.reports.count == 1 && !run.onlyReport.contains("\nsignal \(outcome.split(separator: " ")[1]) ") {
                    wrong.append("report of another signal")
                }
                if handlerRuns != 1 { wrong.append("the handler ran \(handlerRuns) times") }
                if !wrong.isEmpty { problems.append("\(arguments.first ?? "fault") run \(index): " + wrong.joined(separator: ", ")) }
            }
        }
        XCTAssertEqual(problems, [], problems.joined(separator: "\n"))
    }
}
