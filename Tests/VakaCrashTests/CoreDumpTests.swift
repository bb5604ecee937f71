import Foundation
import XCTest
import VakaTestSupport

/// The default action that ends a crashed process dumps core. Where no core file would be written anyway (a soft
/// `RLIMIT_CORE` of 0 and a `core_pattern` naming a file), the handler makes the process non-dumpable first, so that
/// the kernel skips its core-dump stage (which waits for every other thread to leave the address space);
/// everywhere else a core is written as without Vaka (docs/crash-handling.md, *Chaining*).
final class CoreDumpTests: XCTestCase {
    /// The kernel's `core_pattern`, or nil when it cannot be read.
    private var corePattern: String? {
        (try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8))?
            .trimmingCharacters(in: .newlines)
    }

    /// `vaka_sig_no_core_file()` under a soft `RLIMIT_CORE` of 0 and of 1 MiB: 1 only with 0, and only when the
    /// pattern names a file (not `|program` nor `@socket`, which the kernel feeds whatever the limit).
    func testNoCoreFileOnlyWithAZeroLimitAndAFilePattern() throws {
        guard let pattern = corePattern else { throw XCTSkip("/proc/sys/kernel/core_pattern is not readable") }
        let sources = Paths.repositoryRoot.appendingPathComponent("Sources/VakaCrash").path
        let program = try RuntimeProgram.build("nocorefile", """
        #include "sig_state.h"
        #include <sys/resource.h>
        int main(void) {
            struct rlimit rl;
            getrlimit(RLIMIT_CORE, &rl);
            rl.rlim_cur = 0;
            if (setrlimit(RLIMIT_CORE, &rl) != 0) return 90;
            printf("limit 0: %d\\n", vaka_sig_no_core_file());
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= 1048576 ? 1048576 : rl.rlim_max;
            if (rl.rlim_cur == 0) { printf("limit 1 MiB: skipped\\n"); return 0; }
            if (setrlimit(RLIMIT_CORE, &rl) != 0) return 91;
            printf("limit 1 MiB: %d\\n", vaka_sig_no_core_file());
            return 0;
        }
        """, extraFlags: ["-I", sources])
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        let file = !pattern.hasPrefix("|") && !pattern.hasPrefix("@")
        let stdout = String(decoding: run.result.stdout, as: UTF8.self)
        XCTAssertTrue(stdout.hasPrefix("limit 0: \(file ? 1 : 0)\n"), "pattern \(pattern): \(stdout)")
        XCTAssertFalse(stdout.contains("limit 1 MiB: 1"), stdout)
    }

    /// With core dumps on (a soft `RLIMIT_CORE` of 64 MiB, a `core_pattern` that is a plain file name, so the core
    /// lands in the working directory), a crash in a process with a second thread still leaves its core file, and
    /// its report, and ends with SIGSEGV. Skipped where the pattern is a program, a socket or a path elsewhere.
    func testCoreIsStillWrittenWhenCoreDumpsAreOn() throws {
        guard let pattern = corePattern, !pattern.isEmpty, !pattern.hasPrefix("|"), !pattern.hasPrefix("@"),
              !pattern.contains("/")
        else { throw XCTSkip("core_pattern \(corePattern ?? "unreadable") does not write a file in the working directory") }
        let program = try RuntimeProgram.build("corewritten", """
        #include <sys/resource.h>
        static void *idle(void *a) { (void)a; for (;;) pause(); return NULL; }
        int main(void) {
            struct rlimit rl;
            getrlimit(RLIMIT_CORE, &rl);
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= 67108864 ? 67108864 : rl.rlim_max;
            if (rl.rlim_cur < 1048576 || setrlimit(RLIMIT_CORE, &rl) != 0) return 90;
            if (chdir(getenv("VK_CORE_DIR")) != 0) return 91;
            vk_start("corewritten");
            pthread_t t;
            pthread_create(&t, NULL, idle, NULL);
            usleep(20000);
            vk_null();
            return 0;
        }
        """)
        let coreDir = Paths.freshDirectory("core-dir")
        let run = try RuntimeProgram.run(program, timeout: 30, environment: ["VK_CORE_DIR": coreDir.path])
        if run.result.outcome == "exit 90" { throw XCTSkip("RLIMIT_CORE's hard limit is below 1 MiB") }
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["corewritten.crash"])
        XCTAssertTrue(run.onlyReport.hasSuffix("\nend\n"), run.onlyReport)
        let cores = ((try? FileManager.default.contentsOfDirectory(atPath: coreDir.path)) ?? []).filter { $0.hasPrefix("core") }
        XCTAssertEqual(cores.count, 1, "no core file in \(coreDir.path) (pattern \(pattern))")
    }
}
