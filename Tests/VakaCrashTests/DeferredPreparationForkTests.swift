import Foundation
import XCTest
import VakaTestSupport

/// `defer_preparation` and `fork()`: a child forked before `vaka_crash_finish_install()` has run in the parent
/// (a program that starts Vaka and then daemonizes at once) never gets that call itself (the thread that would
/// make it is not in the child). The child prepares libunwind in its own fork hook instead, so its crashes are
/// unwound with libunwind (`cfi`) like those of a prepared process, not by frame pointers alone.
final class DeferredPreparationForkTests: XCTestCase {
    /// `forked`: installs with `defer_preparation`, forks at once (no vaka_crash_finish_install anywhere) and the
    /// child writes through NULL; the parent waits for it and exits 0.
    static let source = """
    #include <sys/wait.h>
    int main(void) {
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "forked", .defer_preparation = 1 };
        int rc = vaka_crash_install(&c);
        if (rc) { fprintf(stderr, "install failed %d\\n", rc); return 99; }
        pid_t child = fork();
        if (child == 0) { vk_null(); _exit(3); }
        int status = 0;
        if (waitpid(child, &status, 0) != child) return 98;
        printf("child %s %d\\n", WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return 0;
    }
    """

    func testForkChildBeforeFinishInstallUnwindsWithLibunwind() throws {
        let program = try RuntimeProgram.build("forked", Self.source)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "child signal 11\n")
        XCTAssertEqual(run.reports.count, 1, "\(run.reports)")
        let name = try XCTUnwrap(run.reports.first)
        XCTAssertTrue(name.hasPrefix("forked-") && name.hasSuffix(".crash"), name)
        let report = run.report(name)
        XCTAssertTrue(report.hasSuffix("\nend\n"), "complete report: \(report)")
        let methods = report.split(separator: "\n").filter { $0.hasPrefix("frame ") }.map { String($0.split(separator: " ").last ?? "") }
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertGreaterThanOrEqual(methods.count, 3, "vk_null, main and libc's caller: \(report)")
        XCTAssertEqual(Set(methods.dropFirst()), ["cfi"], report)
    }
}
