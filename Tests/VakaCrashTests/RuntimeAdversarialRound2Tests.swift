import Foundation
import XCTest
import VakaTestSupport
import Vaka

/// Second adversarial round on the crash runtime (issue 8): signals the process survives, the report reserve,
/// the mask interposers. Each test compares a small C program (``RuntimeProgram``) with and without Vaka; each
/// failed when written (findings, not fixed here).
final class RuntimeAdversarialRound2Tests: XCTestCase {
    /// A SIGSEGV handler installed before Vaka with SA_NODEFER that recovers with `longjmp` from a `setjmp` that
    /// saved no mask (glibc's `setjmp`): without Vaka the thread's mask is unchanged afterwards, so a later
    /// SIGTERM ends the process. With Vaka the previous handler runs inside Vaka's handler, whose `sa_mask`
    /// blocks every non-crash signal; the `longjmp` leaves that mask in place: SIGTERM, SIGINT, SIGALRM,
    /// SIGCHLD stay blocked for good and the program ignores `kill -TERM`.
    func testLongjmpOutOfPreviousHandlerKeepsTheThreadsSignalMask() throws {
        let program = try RuntimeProgram.build("r2-longjmp-mask", """
        #include <setjmp.h>
        static jmp_buf env;
        static void h(int s) { longjmp(env, 1); }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_handler = h; sa.sa_flags = SA_NODEFER; sigaction(SIGSEGV, &sa, NULL);
            vk_start("r2mask");
            if (setjmp(env) == 0) { *(volatile int *)0x10 = 1; }
            sigset_t now; sigprocmask(SIG_BLOCK, NULL, &now);
            printf("recovered, SIGTERM blocked: %d\\n", sigismember(&now, SIGTERM)); fflush(stdout);
            kill(getpid(), SIGTERM);
            sleep(1);
            printf("still alive after SIGTERM\\n");
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "signal 15 (SIGTERM)", without.result.stderrTail())
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(String(decoding: with.result.stdout, as: UTF8.self).split(separator: "\n").first,
                       "recovered, SIGTERM blocked: 0")
        XCTAssertEqual(with.result.outcome, without.result.outcome, with.result.stderrTail())
        // The recovered fault's report stays: after the longjmp no Vaka code runs before SIGTERM kills the process,
        // and marking such reports provisional would lose real crashes whose previous handler _exit()s. Documented
        // in docs/crash-handling.md, "A signal the process survives" (Limit) and "Known limits".
        XCTAssertEqual(with.reports, ["r2mask.crash"], "the recovered fault's report (the documented limit)")
        XCTAssertEqual(reportValue(with.onlyReport, "signal"), "11 SIGSEGV", with.onlyReport)
        XCTAssertEqual(reportValue(with.onlyReport, "fault_addr"), "0x10", with.onlyReport)
    }

    /// SIGABRT the process survives: a handler that returns from `raise(SIGABRT)`/`kill(getpid(), SIGABRT)`,
    /// or a test harness that leaves `abort()` with `siglongjmp`. Without Vaka the program goes on and exits 0.
    /// With Vaka it also exits 0, but the SIGABRT report is kept (survived() and vaka_sig_at_exit() never
    /// remove a SIGABRT report): the next launch joins a crash that never happened.
    func testSurvivedSigabrtLeavesNoReportAtNormalExit() throws {
        let program = try RuntimeProgram.build("r2-abrt-survived", """
        #include <setjmp.h>
        static sigjmp_buf env;
        static volatile int got;
        static void h(int s) { got++; if (got == 3) siglongjmp(env, 1); }
        int main(int argc, char **argv) {
            struct sigaction sa = {0}; sa.sa_handler = h; sigaction(SIGABRT, &sa, NULL);
            vk_start("r2abrt");
            raise(SIGABRT);                       /* handler returns */
            kill(getpid(), SIGABRT);              /* handler returns */
            if (sigsetjmp(env, 1) == 0) abort();  /* handler leaves with siglongjmp */
            printf("handled %d\\n", got); fflush(stdout);
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "exit 0", without.result.stderrTail())
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(with.result.outcome, "exit 0", with.result.stderrTail())
        XCTAssertEqual(String(decoding: with.result.stdout, as: UTF8.self), "handled 3\n")
        XCTAssertEqual(with.reports, [], "a SIGABRT the process survived left a crash report:\n\(with.onlyReport)")
    }
    /// Two libraries that both recover faults: A (installed before Vaka) makes page 1 writable and returns; B
    /// (installed after Vaka, chaining to what it saved — Vaka's handler — as such libraries do) makes page 2
    /// writable and returns. Without Vaka both pages are fixed, then the NULL write dies with SIGSEGV. With Vaka
    /// the first fault goes B → Vaka, whose capture puts A back in place of B (vaka_sig_restore_previous) and,
    /// when A recovers, re-arms its own handler (put_ours_back): B is gone, so page 2's fault reaches A, which
    /// resets SIGSEGV to SIG_DFL: the app dies of a fault its library would have recovered.
    func testHandlerInstalledAfterVakaStillRecoversAfterASurvivedFault() throws {
        let program = try RuntimeProgram.build("r2-two-recoverers", """
        #include <sys/mman.h>
        static char *p1, *p2;
        static long pg;
        static void A(int s, siginfo_t *si, void *uc) {
            char *a = si->si_addr;
            if (a >= p1 && a < p1 + pg) { mprotect(p1, pg, PROT_READ | PROT_WRITE); return; }
            signal(SIGSEGV, SIG_DFL);
        }
        static struct sigaction B_prev;
        static void B(int s, siginfo_t *si, void *uc) {
            char *a = si->si_addr;
            if (a >= p2 && a < p2 + pg) { mprotect(p2, pg, PROT_READ | PROT_WRITE); return; }
            if (B_prev.sa_flags & SA_SIGINFO) B_prev.sa_sigaction(s, si, uc);
            else if (B_prev.sa_handler == SIG_DFL) signal(SIGSEGV, SIG_DFL);
            else if (B_prev.sa_handler != SIG_IGN) B_prev.sa_handler(s);
        }
        int main(void) {
            pg = sysconf(_SC_PAGESIZE);
            p1 = mmap(0, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            p2 = mmap(0, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            struct sigaction sa = {0}; sa.sa_sigaction = A; sa.sa_flags = SA_SIGINFO | SA_NODEFER;
            sigaction(SIGSEGV, &sa, NULL);
            vk_start("r2two");
            struct sigaction sb = {0}; sb.sa_sigaction = B; sb.sa_flags = SA_SIGINFO | SA_NODEFER;
            sigaction(SIGSEGV, &sb, &B_prev);
            p1[0] = 1; printf("p1\\n"); fflush(stdout);
            p2[0] = 1; printf("p2\\n"); fflush(stdout);
            vk_null();
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "signal 11 (SIGSEGV)", without.result.stderrTail())
        XCTAssertEqual(String(decoding: without.result.stdout, as: UTF8.self), "p1\np2\n")
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(String(decoding: with.result.stdout, as: UTF8.self), "p1\np2\n",
                       "the library installed after Vaka no longer recovered its own fault")
        XCTAssertEqual(with.result.outcome, "signal 11 (SIGSEGV)", with.result.stderrTail())
        XCTAssertEqual(with.reports, ["r2two.crash"])
        XCTAssertEqual(reportValue(with.onlyReport, "fault_addr"), "0x0", with.onlyReport)
    }
    /// A one-shot SIGTRAP handler (SA_RESETHAND) that returns: the kernel resets SIGTRAP to SIG_DFL, the program
    /// goes on past the `int3` and exits 0. With Vaka survived() sees SIG_DFL in place ("expects death", as for
    /// Swift's backtracer) and keeps the report; nothing removes it at the normal exit: a false crash is joined
    /// at the next launch.
    func testOneShotTrapHandlerThatReturnsLeavesNoReportAtNormalExit() throws {
        let program = try RuntimeProgram.build("r2-resethand-trap", """
        static volatile int got;
        static void h(int s) { got++; }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_handler = h; sa.sa_flags = SA_RESETHAND; sigaction(SIGTRAP, &sa, NULL);
            vk_start("r2trap");
            __asm__ volatile("int3");
            printf("handled %d\\n", got); fflush(stdout);
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "exit 0", without.result.stderrTail())
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(with.result.outcome, "exit 0", with.result.stderrTail())
        XCTAssertEqual(String(decoding: with.result.stdout, as: UTF8.self), "handled 1\n")
        XCTAssertEqual(with.reports, [], "a SIGTRAP the process survived left a crash report")
    }
    /// Full file system, and signals the process survives (a seccomp-emulated call, a handled `int3`) while
    /// another thread keeps writing (a logger on the full disk). Each survived capture unlinks its report,
    /// which frees the reserve's blocks, and only then makes a new reserve (survived(): unlinkat, then
    /// vaka_sig_make_reserve): the writer takes the freed blocks first, the new reserve gets none, and the real
    /// crash that follows leaves a 0-byte report. Without survived signals the same crash keeps its whole
    /// report (testFullFileSystemAtCrashTimeStillKeepsTheHeader). Needs root.
    func testSurvivedSignalsOnAFullDiskKeepTheReserve() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else {
            throw XCTSkip("needs root and unshare(1) for a private tmpfs mount")
        }
        let program = try RuntimeProgram.build("r2-full-survived", """
        #include <fcntl.h>
        static volatile int n, stop;
        static int f;
        static void h(int s) { n++; }
        static void *filler(void *a) {
            static char buf[4096];
            while (!stop) (void)!write(f, buf, sizeof buf);
            return NULL;
        }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_handler = h; sigaction(SIGTRAP, &sa, NULL);
            vk_start("r2full");
            char path[4200]; snprintf(path, sizeof path, "%s/../fill", getenv("VK_DIR"));
            f = open(path, O_WRONLY | O_CREAT, 0600);
            static char buf[4096];
            while (write(f, buf, sizeof buf) > 0) {}
            pthread_t t; pthread_create(&t, 0, filler, 0);
            for (int i = 0; i < 200; i++) __asm__ volatile("int3");
            stop = 1; pthread_join(t, NULL);
            /* Full before the crash (after it, the report has released the reserve's blocks past its end). */
            if (system("df -k \\"$MNT\\" | tail -1") == -1) return 4;
            vk_null();
            return 0;
        }
        """)
        let dir = Paths.freshDirectory("r2-full-run")
        let mnt = dir.appendingPathComponent("mnt")
        try FileManager.default.createDirectory(at: mnt, withIntermediateDirectories: true)
        let script = "set -e; export MNT='\(mnt.path)'; mount -t tmpfs -o size=1m tmpfs \"$MNT\"; mkdir \"$MNT/r\"; " +
            "VK_DIR=\"$MNT/r\" '\(program.path)' || true; cat \"$MNT/r/r2full.crash\""
        let result = try runChild(URL(fileURLWithPath: "/usr/bin/unshare"),
                                  ["-m", "--propagation", "private", "/bin/bash", "-c", script],
                                  label: "unshare", outputDirectory: dir, timeout: 60)
        let out = String(decoding: result.stdout, as: UTF8.self)
        XCTAssertTrue(out.contains(" 100% "), "the file system was not full:\n\(out)")
        XCTAssertEqual(reportValue(out, "signal"), "11 SIGSEGV", "no header in the report:\n\(out)\n\(result.stderrTail())")
        XCTAssertTrue(out.hasSuffix("end\n"), "the report is incomplete:\n\(out)")
    }
    /// A survived signal's report is kept open as the next reserve under the hidden `.<run_id>.spare`: a normal
    /// exit unlinks it, a later crash writes its report into it (renamed back to `<run_id>.crash`, cut to its own
    /// length), and a process killed in between leaves it (the Swift crash join deletes it).
    func testSurvivedSignalsSpareIsReusedAndRemoved() throws {
        let program = try RuntimeProgram.build("r2-spare", """
        static void h(int s) { }
        /* Deep: the SIGTRAP report (many frames) is longer than the crash's, which is padded to its size. */
        __attribute__((noinline)) static int deep(int n) {
            if (n == 0) { __asm__ volatile("int3"); return 0; }
            return deep(n - 1) + 1;
        }
        int main(int argc, char **argv) {
            struct sigaction sa = {0}; sa.sa_handler = h; sigaction(SIGTRAP, &sa, NULL);
            vk_start("r2spare");
            if (deep(100) != 100) return 3;
            if (argc > 1 && argv[1][0] == 'k') kill(getpid(), SIGKILL);
            if (argc > 1 && argv[1][0] == 'c') vk_null();
            return 0;
        }
        """)
        func files(_ run: RuntimeProgram.Run) -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: run.directory.path)) ?? []).sorted()
        }
        let exit = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(exit.result.outcome, "exit 0", exit.result.stderrTail())
        XCTAssertEqual(files(exit), [], "a normal exit left files")
        let killed = try RuntimeProgram.run(program, ["kill"], timeout: 30)
        XCTAssertEqual(killed.result.outcome, "signal 9 (SIGKILL)", killed.result.stderrTail())
        let spare = files(killed)
        XCTAssertEqual(spare.count, 1, "\(spare)")
        let pid = spare.first?.dropFirst(".r2spare-".count).dropLast(".spare".count) ?? ""
        XCTAssertTrue(spare.first?.hasPrefix(".r2spare-") == true && spare.first?.hasSuffix(".spare") == true &&
                      !pid.isEmpty && pid.allSatisfy(\.isNumber), "\(spare): not `.r2spare-<pid>.spare`")
        let crash = try RuntimeProgram.run(program, ["crash"], timeout: 30)
        XCTAssertEqual(crash.result.outcome, "signal 11 (SIGSEGV)", crash.result.stderrTail())
        XCTAssertEqual(files(crash), ["r2spare.crash"])
        XCTAssertEqual(reportValue(crash.onlyReport, "signal"), "11 SIGSEGV", crash.onlyReport)
        XCTAssertTrue(crash.onlyReport.hasSuffix("end\n"), crash.onlyReport)
        XCTAssertEqual(crash.onlyReport.components(separatedBy: "\nend\n").count, 2, "bytes of the SIGTRAP report remain")
        XCTAssertTrue(crash.onlyReport.contains("\npad "), "the longer SIGTRAP file was not padded:\n\(crash.onlyReport)")
        XCTAssertFalse(crash.onlyReport.contains("SIGTRAP"), crash.onlyReport)
        let parsed = try CrashReport(contentsOf: crash.directory.appendingPathComponent("r2spare.crash").path)
        XCTAssertFalse(parsed.isTruncated)
        XCTAssertEqual(parsed.signal.number, 11)
        XCTAssertEqual(parsed.diagnostics, CrashReport.Diagnostics(), "the pad lines were not ignored")
    }
    /// A one-shot SIGSEGV handler (SA_RESETHAND) that fixes the fault (makes the page writable) and returns: the
    /// instruction runs again and succeeds. survived() sees SIG_DFL in place and a fault that repeats, assumes the
    /// re-run instruction will end the process and returns early: the report stays and the arbitration is never
    /// reset (crash_tid still set). The real NULL write that follows gets no report of its own — the only report
    /// is the fixed fault's (its address, its stack) — and with a normal exit instead, that report stays behind.
    func testOneShotHandlerThatFixesTheFaultLeavesVakaArmed() throws {
        let program = try RuntimeProgram.build("r2-resethand-fix", """
        #include <sys/mman.h>
        static char *p1; static long pg;
        static void A(int s) { mprotect(p1, pg, PROT_READ | PROT_WRITE); }
        int main(int argc, char **argv) {
            pg = sysconf(_SC_PAGESIZE);
            p1 = mmap(0, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            struct sigaction sa = {0}; sa.sa_handler = A; sa.sa_flags = SA_RESETHAND; sigaction(SIGSEGV, &sa, NULL);
            vk_start("r2fix");
            p1[0] = 1; printf("fixed\\n"); fflush(stdout);
            if (argc > 1) return 0;
            vk_null();
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "signal 11 (SIGSEGV)", without.result.stderrTail())
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(with.result.outcome, "signal 11 (SIGSEGV)", with.result.stderrTail())
        XCTAssertEqual(with.reports, ["r2fix.crash"])
        XCTAssertEqual(reportValue(with.onlyReport, "fault_addr"), "0x0", "the report is the fixed fault's:\n\(with.onlyReport)")

        let exit = try RuntimeProgram.run(program, ["exit"], timeout: 30)
        XCTAssertEqual(exit.result.outcome, "exit 0", exit.result.stderrTail())
        XCTAssertEqual(exit.reports, [], "the fixed fault left a crash report at a normal exit")
    }
    /// A survived signal on one signal drops the handlers installed after Vaka on every other crash signal: a
    /// SIGTRAP handled before Vaka (returns), and a SIGSEGV handler a JIT/GC installed after Vaka that recovers
    /// its own faults and never chains to Vaka. The SIGTRAP capture restores every saved previous action
    /// (vaka_sig_restore_previous: SIGSEGV goes back to SIG_DFL) and re-arms ours (put_ours_back): the JIT's
    /// handler is gone, and its next recoverable fault kills the app. Without Vaka the program exits 0.
    func testSurvivedTrapKeepsAnotherSignalsHandlerInstalledAfterVaka() throws {
        let program = try RuntimeProgram.build("r2-trap-drops-segv", """
        #include <sys/mman.h>
        static char *p2; static long pg;
        static void T(int s) {}
        static void B(int s, siginfo_t *si, void *uc) {
            char *a = si->si_addr;
            if (a >= p2 && a < p2 + pg) { mprotect(p2, pg, PROT_READ | PROT_WRITE); return; }
            signal(SIGSEGV, SIG_DFL);
        }
        int main(void) {
            pg = sysconf(_SC_PAGESIZE);
            p2 = mmap(0, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            struct sigaction st = {0}; st.sa_handler = T; sigaction(SIGTRAP, &st, NULL);
            vk_start("r2trapsegv");
            struct sigaction sb = {0}; sb.sa_sigaction = B; sb.sa_flags = SA_SIGINFO; sigaction(SIGSEGV, &sb, NULL);
            __asm__ volatile("int3");
            p2[0] = 1; printf("fixed\\n"); fflush(stdout);
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "exit 0", without.result.stderrTail())
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(with.result.outcome, "exit 0", "the JIT's handler was dropped: \(with.result.stderrTail())")
        XCTAssertEqual(String(decoding: with.result.stdout, as: UTF8.self), "fixed\n")
        XCTAssertEqual(with.reports, [])
    }
    /// The reserve's blocks (fallocate with FALLOC_FL_KEEP_SIZE, 256 KiB) stay allocated past the end of the
    /// linked report: every report of a few KiB holds 256 KiB of disk until it is deleted (a crash loop while
    /// offline keeps one per launch). Expected: the report holds about its own size.
    func testReportHoldsAboutItsOwnSizeOnDisk() throws {
        let program = try RuntimeProgram.build("r2-report-blocks", """
        int main(void) { vk_start("r2blocks"); vk_null(); return 0; }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.reports, ["r2blocks.crash"])
        var st = stat()
        XCTAssertEqual(stat(run.directory.appendingPathComponent("r2blocks.crash").path, &st), 0)
        let onDisk = Int(st.st_blocks) * 512
        XCTAssertLessThanOrEqual(onDisk, Int(st.st_size) + 64 * 1024,
                                 "a \(st.st_size)-byte report holds \(onDisk) bytes of disk")
    }
}
