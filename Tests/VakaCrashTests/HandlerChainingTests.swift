import Foundation
import XCTest
import VakaTestSupport
import Vaka

/// Handlers installed before and after Vaka: a previous handler that leaves with `longjmp` keeps the thread's
/// signal mask, and a survived signal leaves the handlers installed after Vaka in place, on that signal and on
/// the others.
/// Each test is a small C program compiled against the runtime sources (``RuntimeProgram``), run with Vaka
/// and, where the comparison matters, without it (`$VK_NOVAKA`). The rule checked: one report where the docs
/// promise one, the same termination as without Vaka, no hang, and the app never dies because of Vaka.
final class HandlerChainingTests: XCTestCase {
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

    /// Nested signals on one thread, each survived: a SIGBUS handler installed before Vaka writes to a
    /// read-only page (a SIGSEGV inside it), the SIGSEGV handler installed before Vaka makes the page writable
    /// and returns, then the SIGBUS handler returns; three times. As without Vaka: exit 0, both handlers ran
    /// three times, no report, Vaka still installed. With `crash`, a null write afterwards (which the SIGSEGV
    /// handler gives up on) is still captured: one SIGSEGV report with fault address 0.
    func testSegvInsidePreviousSigbusHandlerBothSurvivedThenARealCrash() throws {
        let program = try RuntimeProgram.build("chain-nested", """
        #include <sys/mman.h>
        static char *rw, *ro;
        static volatile int segv, bus;
        static void on_segv(int s, siginfo_t *i, void *u) { if ((char *)i->si_addr != ro) { signal(SIGSEGV, SIG_DFL); return; } segv++; mprotect(ro, 4096, PROT_READ | PROT_WRITE); }
        static void on_bus(int s, siginfo_t *i, void *u) { bus++; ro[0] = 1; /* SIGSEGV inside the SIGBUS handler */ }
        int main(int argc, char **argv) {
            ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            struct sigaction sa = {0}; sa.sa_sigaction = on_segv; sa.sa_flags = SA_SIGINFO; sigaction(SIGSEGV, &sa, NULL);
            sa.sa_sigaction = on_bus; sigaction(SIGBUS, &sa, NULL);
            vk_start("nest");
            for (int i = 0; i < 3; i++) { mprotect(ro, 4096, PROT_READ); raise(SIGBUS); }
            printf("bus %d segv %d installed %d\\n", bus, segv, NOVAKA ? -1 : vaka_crash_is_installed()); fflush(stdout);
            if (argc > 1) vk_null();
            return 0;
        }
        """)
        let survived = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(survived.result.outcome, "exit 0", survived.result.stderrTail())
        XCTAssertEqual(String(decoding: survived.result.stdout, as: UTF8.self), "bus 3 segv 3 installed 1\n")
        XCTAssertEqual(survived.reports, [])
        let crashed = try RuntimeProgram.run(program, ["crash"], timeout: 30)
        XCTAssertEqual(crashed.result.outcome, "signal 11 (SIGSEGV)", crashed.result.stderrTail())
        XCTAssertEqual(crashed.reports, ["nest.crash"])
        XCTAssertEqual(reportValue(crashed.onlyReport, "signal"), "11 SIGSEGV", crashed.onlyReport)
        XCTAssertEqual(reportValue(crashed.onlyReport, "fault_addr"), "0x0", crashed.onlyReport)
    }
}
