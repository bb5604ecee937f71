import Foundation
import XCTest
import VakaTestSupport

/// Signals the process survives: a previous handler that emulates a system call, returns, or fixes the fault,
/// and signals ignored or sent from outside. Vaka stays installed, leaves no report for a crash that did not
/// happen, and still reports the real crash that follows.
/// Each test is a small C program compiled against the runtime sources (``RuntimeProgram``), run with Vaka
/// and, where the comparison matters, without it (`$VK_NOVAKA`). The rule checked: one report where the docs
/// promise one, the same termination as without Vaka, no hang, and the app never dies because of Vaka.
final class SurvivedSignalTests: XCTestCase {
    /// The signal line of a report, e.g. "11 SIGSEGV".
    func signalLine(_ report: String) -> String { reportValue(report, "signal") ?? "" }

    /// A seccomp SIGSYS handler installed before Vaka that emulates a system call (as sandboxes do, on every
    /// trapped call) makes the process survive the "crash". Vaka writes a crash report for it anyway and
    /// restores the previous handlers for good, so the real crash that follows (a NULL write) has no report:
    /// the only report is a bogus SIGSYS one. Expected: exactly one report, the SIGSEGV.
    func testEmulatedSeccompSyscallDoesNotUninstallVaka() throws {
        #if arch(x86_64)
        let program = try RuntimeProgram.build("adv-sigsys", #"""
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <sys/prctl.h>
        #include <sys/syscall.h>
        #include <ucontext.h>
        static void h(int s, siginfo_t *i, void *u) {
            if (i->si_code == 1 /* SYS_SECCOMP */) ((ucontext_t *)u)->uc_mcontext.gregs[REG_RAX] = 4242;
        }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO; sigaction(SIGSYS, &sa, NULL);
            vk_start("advsys");
            if (vk_trap_getppid()) { perror("seccomp"); return 4; }
            long r = syscall(SYS_getppid);
            printf("emulated %ld installed %d\n", r, NOVAKA ? -1 : vaka_crash_is_installed());
            fflush(stdout);
            vk_null();
            return 0;
        }
        """#)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports.count, 1, "reports: \(run.reports)")
        XCTAssertEqual(signalLine(run.onlyReport), "11 SIGSEGV",
                       "the report is not the real crash:\n\(run.onlyReport.prefix(600))")
        #endif
    }

    /// Variant with threads: 8 threads make emulated (seccomp-trapped) calls at the same moment. The first one
    /// "wins" a capture; the others enter Vaka's handler meanwhile, and after the winner has chained (and the
    /// process survived) each waits out the 10 s grace period before reaching the app's handler: the app stalls
    /// for 10 s (0.00 s without Vaka). Bound: 5 s.
    func testConcurrentEmulatedSyscallsDoNotStall() throws {
        #if arch(x86_64)
        let program = try RuntimeProgram.build("adv-sigsys-mt", #"""
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <sys/prctl.h>
        #include <sys/syscall.h>
        #include <time.h>
        #include <ucontext.h>
        static void h(int s, siginfo_t *i, void *u) { if (i->si_code == 1) ((ucontext_t *)u)->uc_mcontext.gregs[REG_RAX] = 4242; }
        static pthread_barrier_t b;
        static void *work(void *a) { pthread_barrier_wait(&b); for (int i = 0; i < 100; i++) syscall(SYS_getppid); return a; }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO; sigaction(SIGSYS, &sa, NULL);
            vk_start("advsysmt");
            if (vk_trap_getppid()) { perror("seccomp"); return 4; }
            pthread_barrier_init(&b, NULL, 8);
            struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
            pthread_t t[8]; for (int i = 1; i < 8; i++) pthread_create(&t[i], NULL, work, NULL);
            work(NULL);
            for (int i = 1; i < 8; i++) pthread_join(t[i], NULL);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            printf("%.3f\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
            return 0;
        }
        """#)
        let run = try RuntimeProgram.run(program, timeout: 60)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        let seconds = Double(String(decoding: run.result.stdout, as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        XCTAssertTrue(seconds >= 0 && seconds < 5, "800 emulated calls on 8 threads took \(seconds) s")
        #endif
    }

    /// Variant: SIGTRAP ignored (SIG_IGN inherited over exec) and a `kill -TRAP` from outside, which the process
    /// survives without Vaka. With Vaka a crash report is written for it and Vaka is uninstalled, so the real
    /// SIGSEGV that follows is lost. Expected: one report, the SIGSEGV (or at least the SIGSEGV reported).
    func testIgnoredSignalFromOutsideDoesNotUninstallVaka() throws {
        let program = try RuntimeProgram.build("adv-ignkill", """
        int main(void) {
            signal(SIGTRAP, SIG_IGN); /* as if inherited over exec */
            vk_start("advignkill");
            kill(getpid(), SIGTRAP);  /* ignored: the process goes on */
            printf("survived\\n"); fflush(stdout);
            vk_null();
            return 0;
        }
        """)
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(program, vaka: vaka, timeout: 30)
            XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", "vaka=\(vaka) \(run.result.stderrTail())")
            if vaka {
                XCTAssertEqual(run.reports.count, 1, "reports: \(run.reports)")
                XCTAssertEqual(signalLine(run.onlyReport), "11 SIGSEGV",
                               "the report is not the real crash:\n\(run.onlyReport.prefix(600))")
            }
        }
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

    /// A write barrier (a SIGSEGV handler installed before Vaka that makes the page writable and returns), hit
    /// 200 times on each of 81 threads one after another (more threads than the handler's per-thread entry
    /// slots): every fault is survived, so each thread's slot is freed again; the program exits 0 with every
    /// write done and no report left, as without Vaka.
    func testThousandsOfSurvivedFaultsOnMoreThreadsThanEntrySlots() throws {
        let program = try RuntimeProgram.build("survive-many-threads", """
        #include <sys/mman.h>
        static char *page;
        static volatile int hits;
        static void h(int s, siginfo_t *i, void *u) { hits++; mprotect(page, 4096, PROT_READ | PROT_WRITE); }
        static void *w(void *a) {
            for (int i = 0; i < 200; i++) { mprotect(page, 4096, PROT_READ); page[1] = (char)i; }
            return NULL;
        }
        int main(void) {
            page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            struct sigaction sa = {0}; sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO; sigaction(SIGSEGV, &sa, NULL);
            vk_start("survivemany");
            for (int t = 0; t < 80; t++) { pthread_t th; pthread_create(&th, NULL, w, NULL); pthread_join(th, NULL); }
            for (int i = 0; i < 200; i++) { mprotect(page, 4096, PROT_READ); page[0] = (char)i; }
            printf("hits %d installed %d\\n", hits, NOVAKA ? -1 : vaka_crash_is_installed()); fflush(stdout);
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 120)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "hits 16200 installed 1\n")
        XCTAssertEqual(run.reports, [])
    }
}
