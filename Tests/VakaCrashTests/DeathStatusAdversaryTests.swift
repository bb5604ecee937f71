import Foundation
import XCTest
import VakaTestSupport

/// A crashed process ends as it would without Vaka, to the bit: the same wait status (signal and core-dump flag)
/// and the same core file (or none), with core dumps off (a soft `RLIMIT_CORE` of 0, where the handler makes the
/// process non-dumpable before the default action) and on.
final class DeathStatusAdversaryTests: XCTestCase {
    /// The kernel's `core_pattern`, or nil when it cannot be read.
    private var corePattern: String? {
        (try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8))?
            .trimmingCharacters(in: .newlines)
    }

    /// One program forks a child per case (a NULL read with a second thread, `abort()`, a NULL read under a
    /// SIGSEGV disposition of SIG_IGN, a SIGFPE raised by `raise`, SIGSEGV sent with `kill` while SIG_IGN) and
    /// prints each child's raw wait status and how many core files it left in a directory of its own; run with
    /// Vaka and without, the lines are the same. Core dumps on only where `core_pattern` is a plain file name
    /// (the core lands in the working directory).
    func testWaitStatusAndCoreFileAreThoseOfTheCrashWithoutVaka() throws {
        let pattern = corePattern ?? "|"
        let coresLand = !pattern.isEmpty && !pattern.hasPrefix("|") && !pattern.hasPrefix("@") && !pattern.contains("/")
        let program = try RuntimeProgram.build("deathstatus", """
        #include <dirent.h>
        #include <sys/resource.h>
        #include <sys/stat.h>
        #include <sys/wait.h>
        static void *idle(void *a) { (void)a; for (;;) pause(); return NULL; }
        static int cores(const char *dir) {
            DIR *d = opendir(dir); int n = 0; struct dirent *e;
            if (!d) return -1;
            while ((e = readdir(d)) != NULL) if (strncmp(e->d_name, "core", 4) == 0) n++;
            closedir(d);
            return n;
        }
        int main(int argc, char **argv) {
            int limits = argc > 1 ? atoi(argv[1]) : 1;
            const char *base = getenv("VK_CASE_DIR");
            for (int on = 0; on < limits; on++) {
                for (int kind = 0; kind < 5; kind++) {
                    char dir[4096];
                    snprintf(dir, sizeof dir, "%s/%d-%d", base, on, kind);
                    mkdir(dir, 0700);
                    fflush(stdout);
                    pid_t pid = fork();
                    if (pid == 0) {
                        struct rlimit rl;
                        getrlimit(RLIMIT_CORE, &rl);
                        rl.rlim_cur = on ? (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= 67108864 ? 67108864 : rl.rlim_max) : 0;
                        if (setrlimit(RLIMIT_CORE, &rl) != 0 || chdir(dir) != 0) _exit(90);
                        char id[32];
                        snprintf(id, sizeof id, "case-%d-%d", on, kind);
                        if (kind == 2 || kind == 4) signal(SIGSEGV, SIG_IGN);
                        vk_start(id);
                        pthread_t t;
                        pthread_create(&t, NULL, idle, NULL);
                        usleep(10000);
                        switch (kind) {
                        case 0: vk_null(); break;
                        case 1: abort();
                        case 2: vk_null(); break;
                        case 3: raise(SIGFPE); break;
                        case 4: kill(getpid(), SIGSEGV); usleep(10000); _exit(7);
                        }
                        _exit(8);
                    }
                    int status = 0;
                    waitpid(pid, &status, 0);
                    printf("limit %s kind %d: status 0x%x cores %d\\n", on ? "on" : "0", kind, status, cores(dir));
                }
            }
            return 0;
        }
        """)
        let limits = coresLand ? "2" : "1"
        let with = try RuntimeProgram.run(program, [limits], timeout: 60,
                                          environment: ["VK_CASE_DIR": Paths.freshDirectory("death-vaka").path])
        let without = try RuntimeProgram.run(program, [limits], vaka: false, timeout: 60,
                                             environment: ["VK_CASE_DIR": Paths.freshDirectory("death-plain").path])
        XCTAssertEqual(with.result.outcome, "exit 0", with.result.stderrTail())
        XCTAssertEqual(without.result.outcome, "exit 0", without.result.stderrTail())
        let withLines = String(decoding: with.result.stdout, as: UTF8.self)
        let withoutLines = String(decoding: without.result.stdout, as: UTF8.self)
        XCTAssertEqual(withLines.split(separator: "\n").count, coresLand ? 10 : 5, withLines)
        XCTAssertEqual(withLines, withoutLines, "pattern \(pattern)")
        // Every crash but the ignored kill() was reported.
        XCTAssertEqual(with.reports, ["case-0-0.crash", "case-0-1.crash", "case-0-2.crash", "case-0-3.crash"]
                       + (coresLand ? ["case-1-0.crash", "case-1-1.crash", "case-1-2.crash", "case-1-3.crash"] : []))
        if coresLand { XCTAssertTrue(withoutLines.contains("limit on kind 0: status 0x8b cores 1"), withoutLines) }
    }
}
