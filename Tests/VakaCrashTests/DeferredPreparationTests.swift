import Foundation
import XCTest
import VakaTestSupport

/// `defer_preparation` (include/vaka/vaka_crash.h): install leaves the report's space reserve and libunwind's
/// warm-up to `vaka_crash_finish_install()`. A crash before that still gets a complete report: created by name
/// (no reserve), the crashed thread unwound by frame pointers (`fp`, no libunwind in the handler); after it, the
/// reserve exists and the frames are `cfi` again.
final class DeferredPreparationTests: XCTestCase {
    /// `deferred [finish|now]`: installs with `defer_preparation` (not with `now`), prints how many unnamed files
    /// (the reserve: an O_TMPFILE in the report directory, `... (deleted)` in /proc/self/fd) it holds, runs
    /// vaka_crash_finish_install() with `finish` and prints the count again, then writes through NULL. Each count
    /// comes with whether libunwind is mapped (it is opened with dlopen by the warm-up, not at process start).
    static let source = """
    #include <dirent.h>
    static int reserves(void) {
        const char *dir = getenv("VK_DIR");
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            char path[64], target[4096];
            snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
            ssize_t k = readlink(path, target, sizeof target - 1);
            if (k <= 0) continue;
            target[k] = '\\0';
            if (strncmp(target, dir, strlen(dir)) == 0 && strstr(target, " (deleted)") != NULL) n++;
        }
        if (d != NULL) closedir(d);
        return n;
    }
    /* 1 when libunwind is mapped in this process (/proc/self/maps). */
    static int libunwind_mapped(void) {
        FILE *f = fopen("/proc/self/maps", "r");
        char line[4096];
        int found = 0;
        while (f != NULL && fgets(line, sizeof line, f) != NULL) found |= strstr(line, "/libunwind.so") != NULL;
        if (f != NULL) fclose(f);
        return found;
    }
    int main(int argc, char **argv) {
        const char *mode = argc > 1 ? argv[1] : "";
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "deferred",
                                .defer_preparation = strcmp(mode, "now") != 0 };
        int rc = vaka_crash_install(&c);
        if (rc) { fprintf(stderr, "install failed %d\\n", rc); return 99; }
        printf("reserve %d libunwind %d\\n", reserves(), libunwind_mapped());
        if (strcmp(mode, "finish") == 0) {
            if (vaka_crash_finish_install() != 0) return 98;
            if (vaka_crash_finish_install() != 0) return 97; /* a second call does nothing */
            printf("reserve %d libunwind %d\\n", reserves(), libunwind_mapped());
        }
        fflush(stdout);
        vk_null();
        return 0;
    }
    """

    /// The methods of the crashed thread's `frame` lines, in order.
    private func frameMethods(_ report: String) -> [String] {
        report.split(separator: "\n").filter { $0.hasPrefix("frame ") }.map { String($0.split(separator: " ").last ?? "") }
    }

    private func crash(_ mode: String) throws -> (stdout: String, report: String) {
        let program = try RuntimeProgram.build("deferred", Self.source)
        let run = try RuntimeProgram.run(program, [mode], timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["deferred.crash"], mode)
        let report = run.onlyReport
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV", report)
        XCTAssertTrue(report.hasSuffix("\nend\n"), "complete report: \(report)")
        return (String(decoding: run.result.stdout, as: UTF8.self), report)
    }

    /// A crash right after a deferring install: no reserve was made, the report is created by name and the
    /// crashed thread's callers come from the frame-pointer walk (libunwind is not even loaded before its warm-up).
    func testCrashBeforeFinishUnwindsByFramePointers() throws {
        let (stdout, report) = try crash("defer")
        XCTAssertEqual(stdout, "reserve 0 libunwind 0\n")
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertGreaterThanOrEqual(methods.count, 3, "vk_null, main and libc's caller: \(report)")
        XCTAssertEqual(Set(methods.dropFirst()), ["fp"], report)
    }

    /// After vaka_crash_finish_install (twice: the second does nothing) the reserve exists, libunwind is loaded and
    /// the handler unwinds with it (`cfi`), as after an install without deferral.
    func testCrashAfterFinishUsesReserveAndCFI() throws {
        for mode in ["finish", "now"] {
            let (stdout, report) = try crash(mode)
            XCTAssertEqual(stdout, mode == "finish" ? "reserve 0 libunwind 0\nreserve 1 libunwind 1\n" : "reserve 1 libunwind 1\n", mode)
            let methods = frameMethods(report)
            XCTAssertEqual(methods.first, "context", report)
            XCTAssertEqual(Set(methods.dropFirst()), ["cfi"], "\(mode): \(report)")
        }
    }
}
