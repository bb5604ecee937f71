import Foundation
import XCTest

/// Edge cases of the crash handler next to those of ``SurvivedSignalTests``, ``IgnoredOrBlockedSignalTests`` and
/// ``ReportFileAtCrashTimeTests`` (ignored SIGABRT, previous handlers that abort...), each a small C program
/// against the runtime (``RuntimeProgram``).
final class RuntimeHandlerEdgeTests: XCTestCase {
    /// `abort()` with SIGABRT ignored (inherited over exec): glibc raises SIGABRT (ignored), then resets it to
    /// SIG_DFL and raises it again, which ends the process without entering any handler. The first raise comes
    /// from the process itself (si_code SI_TKILL): it must still be captured, and its report kept although the
    /// handler "survived" it — it is the crash's only report.
    func testAbortUnderIgnoredSigabrtIsStillReported() throws {
        let program = try RuntimeProgram.build("edge-ignabrt", """
        int main(void) {
            signal(SIGABRT, SIG_IGN); /* as if inherited over exec */
            vk_start("edgeignabrt");
            abort();
        }
        """)
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(program, vaka: vaka, timeout: 30)
            XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", "vaka=\(vaka) \(run.result.stderrTail())")
            if vaka {
                XCTAssertEqual(run.reports, ["edgeignabrt.crash"])
                XCTAssertEqual(reportValue(run.onlyReport, "signal"), "6 SIGABRT", run.onlyReport)
                XCTAssertTrue(run.onlyReport.hasSuffix("end\n"), run.onlyReport)
            }
        }
    }

    /// A soft RLIMIT_FSIZE of 0 under an unlimited hard limit (set after start): every report write failed with
    /// EFBIG and the report was 0 bytes. The handler may raise its own soft limit: a complete report, and the
    /// process still ends with SIGSEGV (not the SIGXFSZ a write over the limit raises).
    func testSoftFileSizeLimitStillGivesAFullReport() throws {
        let program = try RuntimeProgram.build("edge-fsize", """
        #include <sys/resource.h>
        int main(void) {
            vk_start("edgefsize");
            struct rlimit r = { 0, RLIM_INFINITY };
            if (setrlimit(RLIMIT_FSIZE, &r) != 0) { perror("setrlimit"); return 4; }
            vk_null();
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["edgefsize.crash"])
        XCTAssertEqual(reportValue(run.onlyReport, "signal"), "11 SIGSEGV", run.onlyReport)
        XCTAssertTrue(run.onlyReport.hasSuffix("end\n"), run.onlyReport)
    }

    /// An emulated system call (seccomp SIGSYS handler that returns) on a program that then exits normally:
    /// the survived signal's report must not stay behind to be joined as a crash at the next launch, and Vaka
    /// is still installed afterwards.
    func testSurvivedSignalLeavesNoReportAtNormalExit() throws {
        #if arch(x86_64)
        let program = try RuntimeProgram.build("edge-survive", #"""
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <sys/prctl.h>
        #include <sys/syscall.h>
        #include <ucontext.h>
        static void h(int s, siginfo_t *i, void *u) {
            if (i->si_code == 1) ((ucontext_t *)u)->uc_mcontext.gregs[REG_RAX] = 4242;
        }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO; sigaction(SIGSYS, &sa, NULL);
            vk_start("edgesurvive");
            if (vk_trap_getppid()) { perror("seccomp"); return 4; }
            long a = syscall(SYS_getppid), b = syscall(SYS_getppid);
            printf("%ld %ld %d\n", a, b, vaka_crash_is_installed());
            return 0;
        }
        """#)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "4242 4242 1\n")
        XCTAssertEqual(run.reports, [])
        #endif
    }

    /// A SIGSEGV handler installed before Vaka that recovers with siglongjmp (a probe for readable memory, as
    /// some runtimes do), then a real NULL write. The recovered fault is survived: exactly one report, the real
    /// crash's (the probe's fault address is 0x10, the crash's 0). A handler that stayed off after the probe
    /// would leave the probe's report as the only one.
    func testFaultRecoveredWithSiglongjmpDoesNotUninstallVaka() throws {
        let program = try RuntimeProgram.build("edge-longjmp", """
        #include <setjmp.h>
        static sigjmp_buf env;
        static volatile int probing;
        static void h(int s) { if (probing) siglongjmp(env, 1); signal(SIGSEGV, SIG_DFL); /* fault again: die */ }
        int main(int argc, char **argv) {
            struct sigaction sa = {0}; sa.sa_handler = h; sa.sa_flags = SA_NODEFER; sigaction(SIGSEGV, &sa, NULL);
            vk_start("edgelongjmp");
            probing = 1;
            if (sigsetjmp(env, 1) == 0) { *(volatile int *)0x10 = 1; printf("not reached\\n"); }
            probing = 0;
            printf("recovered %d\\n", NOVAKA ? -1 : vaka_crash_is_installed()); fflush(stdout);
            if (argc > 1) return 0; /* "exit": a normal exit after the recovery */
            vk_null();
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "recovered 1\n")
        XCTAssertEqual(run.reports, ["edgelongjmp.crash"])
        XCTAssertEqual(reportValue(run.onlyReport, "fault_addr"), "0x0", run.onlyReport)

        let exit = try RuntimeProgram.run(program, ["exit"], timeout: 30)
        XCTAssertEqual(exit.result.outcome, "exit 0", exit.result.stderrTail())
        XCTAssertEqual(exit.reports, [], "the recovered fault's report stayed behind at a normal exit")
    }

    /// A SIGSEGV handler installed before Vaka that makes the page writable and returns (a write barrier, a
    /// lazily mapped heap): the instruction runs again and succeeds. Survived: no report, Vaka still installed.
    func testFaultFixedByPreviousHandlerLeavesNoReport() throws {
        let program = try RuntimeProgram.build("edge-mprotect", """
        #include <sys/mman.h>
        static char *page;
        static void h(int s, siginfo_t *i, void *u) { mprotect(page, 4096, PROT_READ | PROT_WRITE); }
        int main(void) {
            page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            struct sigaction sa = {0}; sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO; sigaction(SIGSEGV, &sa, NULL);
            vk_start("edgemprotect");
            page[0] = 7;
            printf("%d %d\\n", page[0], NOVAKA ? -1 : vaka_crash_is_installed());
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "7 1\n")
        XCTAssertEqual(run.reports, [])
    }

    /// A SIGSEGV handler installed before Vaka that calls abort() (prints, then aborts): Vaka runs it with its
    /// own handlers in place (to see a siglongjmp), so the SIGABRT raised inside it must not replace the
    /// SIGSEGV report. The process ends with SIGABRT, as without Vaka.
    func testAbortInsidePreviousHandlerKeepsTheFaultsReport() throws {
        let program = try RuntimeProgram.build("edge-abortinside", """
        static void h(int s) { abort(); }
        int main(void) {
            signal(SIGSEGV, h);
            vk_start("edgeabortinside");
            vk_null();
            return 0;
        }
        """)
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(program, vaka: vaka, timeout: 30)
            XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", "vaka=\(vaka) \(run.result.stderrTail())")
            if vaka {
                XCTAssertEqual(run.reports, ["edgeabortinside.crash"])
                XCTAssertEqual(reportValue(run.onlyReport, "signal"), "11 SIGSEGV", run.onlyReport)
            }
        }
    }

    /// A SIGSEGV handler installed before Vaka that recovers with siglongjmp, used as a readable-memory probe
    /// called several times from the same function: every probe faults at the same instruction, and the
    /// kernel puts each signal frame at the same place of the same stack. Without Vaka all five probes
    /// recover and the program exits 0. With Vaka it must too (each probe is a signal the process survives);
    /// the repeated-fault check must not take the entry left by the first probe's siglongjmp for a fault
    /// that repeats inside the handler.
    func testRepeatedProbeRecoveredWithSiglongjmpAtTheSamePCSurvives() throws {
        let program = try RuntimeProgram.build("edge-probe-loop", """
        #include <setjmp.h>
        static sigjmp_buf env;
        static volatile int recovered;
        static void h(int s) { recovered++; siglongjmp(env, 1); }
        __attribute__((noinline)) static int readable(volatile int *p) {
            if (sigsetjmp(env, 1) == 0) { (void)*p; return 1; }
            return 0;
        }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_handler = h; sigaction(SIGSEGV, &sa, NULL);
            vk_start("edgeprobeloop");
            int ok = 0;
            for (int i = 0; i < 5; i++) ok += readable((volatile int *)0x10);
            printf("readable %d recovered %d installed %d\\n", ok, recovered, NOVAKA ? -1 : vaka_crash_is_installed());
            fflush(stdout);
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "exit 0", without.result.stderrTail())
        XCTAssertEqual(String(decoding: without.result.stdout, as: UTF8.self), "readable 0 recovered 5 installed -1\n")
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(with.result.outcome, "exit 0", "the second probe killed the process: \(with.result.stderrTail())")
        XCTAssertEqual(String(decoding: with.result.stdout, as: UTF8.self), "readable 0 recovered 5 installed 1\n")
        XCTAssertEqual(with.reports, [], "a recovered probe left a report at a normal exit")
    }

    /// A test harness that catches abort() with siglongjmp (an "expect death" helper) called twice from the
    /// same place: both aborts go through the same raise() instruction with the signal frame at the same
    /// place. Without Vaka the program goes on and exits 0; with Vaka the second abort must be survived too,
    /// not taken for a fault that repeats inside the handler.
    func testAbortCaughtWithSiglongjmpTwiceFromTheSamePlaceSurvives() throws {
        let program = try RuntimeProgram.build("edge-abort-twice", """
        #include <setjmp.h>
        static sigjmp_buf env;
        static volatile int caught;
        static void h(int s) { caught++; siglongjmp(env, 1); }
        __attribute__((noinline)) static int dies(void) {
            if (sigsetjmp(env, 1) == 0) { abort(); }
            return 1;
        }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_handler = h; sigaction(SIGABRT, &sa, NULL);
            vk_start("edgeaborttwice");
            int n = 0;
            for (int i = 0; i < 3; i++) n += dies();
            printf("caught %d %d\\n", n, caught); fflush(stdout);
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "exit 0", without.result.stderrTail())
        XCTAssertEqual(String(decoding: without.result.stdout, as: UTF8.self), "caught 3 3\n")
        let with = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(with.result.outcome, "exit 0", "the second abort killed the process: \(with.result.stderrTail())")
        XCTAssertEqual(String(decoding: with.result.stdout, as: UTF8.self), "caught 3 3\n")
        XCTAssertEqual(with.reports, [], "a caught abort left a report at a normal exit")
    }

    /// A worker thread probes memory with a SIGSEGV handler installed before Vaka that recovers with
    /// siglongjmp (the worker goes on and ends), then the main thread writes through a null pointer. The
    /// process ends with SIGSEGV, and its one report must be the main thread's crash (fault address 0, the
    /// main thread's tid), not the worker's recovered probe (fault address 0x10): the recovered probe on one
    /// thread must not keep another thread's real crash from being captured.
    func testFaultRecoveredWithSiglongjmpOnAnotherThreadDoesNotHideTheNextCrash() throws {
        let program = try RuntimeProgram.build("edge-longjmp-other", """
        #include <setjmp.h>
        static __thread sigjmp_buf env;
        static __thread volatile int probing;
        static void h(int s) { if (probing) siglongjmp(env, 1); signal(SIGSEGV, SIG_DFL); /* fault again: die */ }
        static void *probe(void *a) {
            probing = 1;
            if (sigsetjmp(env, 1) == 0) { *(volatile int *)0x10 = 1; }
            probing = 0;
            return NULL;
        }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_handler = h; sa.sa_flags = SA_NODEFER; sigaction(SIGSEGV, &sa, NULL);
            vk_start("edgelongjmpother");
            pthread_t t; pthread_create(&t, NULL, probe, NULL); pthread_join(t, NULL);
            printf("recovered %d\\n", getpid()); fflush(stdout);
            vk_null();
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let stdout = String(decoding: run.result.stdout, as: UTF8.self)
        XCTAssertTrue(stdout.hasPrefix("recovered "), stdout)
        let pid = stdout.dropFirst("recovered ".count).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(run.reports, ["edgelongjmpother.crash"])
        XCTAssertEqual(reportValue(run.onlyReport, "fault_addr"), "0x0",
                       "the report is the worker's recovered probe, the main thread's crash is lost:\n\(run.onlyReport.prefix(400))")
        XCTAssertEqual(reportValue(run.onlyReport, "tid"), pid, "the crashed thread is the main thread")
    }

    /// A SIGSEGV handler installed before Vaka that ends a faulting worker thread with pthread_exit (a server
    /// that sacrifices the worker and goes on), then the main thread writes through a null pointer. As without
    /// Vaka the process ends with SIGSEGV; its one report must be the main thread's crash (fault address 0, the
    /// main thread's tid): the capture of a worker that never came back from the previous handler must not
    /// keep every later crash from being captured.
    func testWorkerEndedInsidePreviousHandlerDoesNotHideTheNextCrash() throws {
        let program = try RuntimeProgram.build("edge-pthread-exit", """
        #include <sys/syscall.h>
        static void h(int s) { if (getpid() != (pid_t)syscall(SYS_gettid)) pthread_exit(NULL); signal(SIGSEGV, SIG_DFL); }
        static void *worker(void *a) { *(volatile int *)0x10 = 1; return NULL; }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_handler = h; sa.sa_flags = SA_NODEFER; sigaction(SIGSEGV, &sa, NULL);
            vk_start("edgepthreadexit");
            pthread_t t; pthread_create(&t, NULL, worker, NULL); pthread_join(t, NULL);
            printf("worker ended %d\\n", getpid()); fflush(stdout);
            vk_null();
            return 0;
        }
        """)
        let without = try RuntimeProgram.run(program, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "signal 11 (SIGSEGV)", without.result.stderrTail())
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let stdout = String(decoding: run.result.stdout, as: UTF8.self)
        XCTAssertTrue(stdout.hasPrefix("worker ended "), stdout)
        let pid = stdout.dropFirst("worker ended ".count).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(run.reports, ["edgepthreadexit.crash"])
        XCTAssertEqual(reportValue(run.onlyReport, "fault_addr"), "0x0",
                       "the report is the ended worker's fault, the main thread's crash is lost:\n\(run.onlyReport.prefix(400))")
        XCTAssertEqual(reportValue(run.onlyReport, "tid"), pid, "the crashed thread is the main thread")
    }

    /// A worker whose fault the previous handler ends (pthread_exit) or recovers (siglongjmp, then the worker
    /// returns), then the main thread returns from main: without Vaka the process exits 0 and so it must with
    /// Vaka, leaving no report (the worker's signal was survived: nobody crashed).
    func testWorkerEndedAfterPreviousHandlerThenNormalExitLeavesNoReport() throws {
        let program = try RuntimeProgram.build("edge-worker-exit", """
        #include <setjmp.h>
        static __thread sigjmp_buf env;
        static int recover;
        static void h(int s) { if (recover) siglongjmp(env, 1); pthread_exit(NULL); }
        static void *worker(void *a) { if (sigsetjmp(env, 1) == 0) { *(volatile int *)0x10 = 1; } return NULL; }
        int main(int argc, char **argv) {
            recover = argc > 1;
            struct sigaction sa = {0}; sa.sa_handler = h; sa.sa_flags = SA_NODEFER; sigaction(SIGSEGV, &sa, NULL);
            vk_start("edgeworkerexit");
            pthread_t t; pthread_create(&t, NULL, worker, NULL); pthread_join(t, NULL);
            printf("worker ended %d\\n", NOVAKA ? -1 : vaka_crash_is_installed()); fflush(stdout);
            return 0;
        }
        """)
        for arguments in [[], ["recover"]] {
            let without = try RuntimeProgram.run(program, arguments, vaka: false, timeout: 30)
            XCTAssertEqual(without.result.outcome, "exit 0", "\(arguments) \(without.result.stderrTail())")
            let run = try RuntimeProgram.run(program, arguments, timeout: 30)
            XCTAssertEqual(run.result.outcome, "exit 0", "\(arguments) \(run.result.stderrTail())")
            XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "worker ended 1\n", "\(arguments)")
            XCTAssertEqual(run.reports, [], "\(arguments): the ended worker's survived fault left a report")
        }
    }
}
