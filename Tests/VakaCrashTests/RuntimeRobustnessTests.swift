import Foundation
import XCTest
import VakaTestSupport

/// Robustness of the C crash runtime in situations the Swift harness cannot set up, each a small C program
/// compiled against the runtime sources (``RuntimeProgram``). Every test runs the program with Vaka and
/// checks how the process ended (signal, no hang: the run is killed after a timeout) and the report.
final class RuntimeRobustnessTests: XCTestCase {
    /// The number of `frame` lines of a report.
    func frameCount(_ report: String) -> Int {
        report.split(separator: "\n").filter { $0.hasPrefix("frame ") }.count
    }

    /// A thread sits inside dl_iterate_phdr (holding the dynamic linker's lock) waiting for a mutex the
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

    /// A vfork child that crashes before exec shares our memory: it must not take the crash state (the
    /// parent's later crash is still captured, with the parent's pid) and must die by its own signal.
    func testVforkChildCrashLeavesParentState() throws {
        let program = try RuntimeProgram.build("vfork", """
        #include <sys/wait.h>
        int main(void) {
            vk_start("vfork");
            pid_t c = vfork();
            if (c == 0) { vk_null(); _exit(0); }
            int st; waitpid(c, &st, 0);
            printf("child=%d signal=%d installed=%d\\n", (int)c, WIFSIGNALED(st) ? WTERMSIG(st) : 0, vaka_crash_is_installed());
            fflush(stdout);
            vk_null();
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertFalse(run.result.timedOut)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let out = String(decoding: run.result.stdout, as: UTF8.self)
        XCTAssertTrue(out.contains("signal=11 installed=1"), out)
        XCTAssertEqual(run.reports, ["vfork.crash"], "only the parent writes a report")
        let report = run.onlyReport
        XCTAssertTrue(report.hasSuffix("\nend\n"), report)
        XCTAssertEqual(reportValue(report, "pid"), reportValue(report, "tid"), "the parent's main thread")
        XCTAssertFalse(out.contains("child=\(reportValue(report, "pid") ?? "?")"), "report is the parent's")
    }

    /// A fork child writes its own report, `<run_id>-<pid>.crash`; the parent's crash afterwards
    /// still writes `<run_id>.crash`; neither overwrites the other.
    func testForkChildWritesItsOwnReport() throws {
        let program = try RuntimeProgram.build("fork", """
        #include <sys/wait.h>
        int main(void) {
            vk_start("forkrun");
            pid_t c = fork();
            if (c == 0) vk_null();
            int st; waitpid(c, &st, 0);
            printf("child=%d signal=%d\\n", (int)c, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            fflush(stdout);
            abort();
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", run.result.stderrTail())
        let out = String(decoding: run.result.stdout, as: UTF8.self)
        guard let childPID = out.split(separator: "=").dropFirst().first?.split(separator: " ").first.map(String.init) else {
            return XCTFail("no child pid in \(out)")
        }
        XCTAssertTrue(out.contains("signal=11"), out)
        XCTAssertEqual(run.reports, ["forkrun-\(childPID).crash", "forkrun.crash"])
        let child = run.report("forkrun-\(childPID).crash"), parent = run.report("forkrun.crash")
        XCTAssertEqual(reportValue(child, "pid"), childPID)
        XCTAssertEqual(reportValue(child, "signal"), "11 SIGSEGV")
        XCTAssertEqual(reportValue(child, "run_id"), "forkrun")
        XCTAssertTrue(child.hasSuffix("\nend\n"))
        XCTAssertEqual(reportValue(parent, "signal"), "6 SIGABRT")
        XCTAssertNotEqual(reportValue(parent, "pid"), childPID)
        XCTAssertTrue(parent.hasSuffix("\nend\n"))
    }

    /// After a capture the process survived (a previous handler recovered with siglongjmp), a
    /// library puts our saved action back; the next fault on another thread must reach the previous action
    /// instead of looping through our handler forever.
    func testFaultAfterOurHandlerWasReinstalledDoesNotLoop() throws {
        let program = try RuntimeProgram.build("stale", """
        #include <setjmp.h>
        static sigjmp_buf jb;
        static volatile int armed = 1;
        static void gc(int s, siginfo_t *i, void *u) { if (armed) { armed = 0; siglongjmp(jb, 1); } signal(s, SIG_DFL); }
        int main(void) {
            struct sigaction sa = {0}, vk; sa.sa_sigaction = gc; sa.sa_flags = SA_SIGINFO; sigaction(SIGSEGV, &sa, NULL);
            vk_start("stale");
            sigaction(SIGSEGV, NULL, &vk);
            if (sigsetjmp(jb, 1) == 0) vk_null();
            sigaction(SIGSEGV, &vk, NULL);
            pthread_t t; pthread_create(&t, NULL, (void *(*)(void *))vk_null, NULL); pthread_join(t, NULL);
            return 3;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertFalse(run.result.timedOut, "looped")
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["stale.crash"])
    }

    /// A FIFO at the report path used to block open(2) forever. It is replaced by a regular report.
    func testFifoAtReportPathDoesNotBlock() throws {
        let program = try RuntimeProgram.build("fifo", """
        #include <sys/stat.h>
        int main(void) {
            vk_start("fifo");
            char p[4096]; snprintf(p, sizeof p, "%s/fifo.crash", getenv("VK_DIR"));
            if (mkfifo(p, 0600) != 0) { perror("mkfifo"); return 4; }
            vk_null();
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertFalse(run.result.timedOut, "open(2) blocked on the FIFO")
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["fifo.crash"])
        let attributes = try FileManager.default.attributesOfItem(atPath: run.directory.appendingPathComponent("fifo.crash").path)
        XCTAssertEqual(attributes[.type] as? FileAttributeType, .typeRegular)
        XCTAssertTrue(run.onlyReport.hasSuffix("\nend\n"), run.onlyReport)
    }

    /// The application gave the thread a 4 KiB alternate stack (guard page below). The first call of a
    /// C library function in the handler used to run the dynamic linker's lazy-binding resolver there, overflow
    /// the stack and fault again at the same place forever. Now every such function is bound at install, and
    /// a fault that repeats at the same PC is detected: the process ends with SIGSEGV, never hangs.
    func testTinyAlternateStackDoesNotLoop() throws {
        let program = try RuntimeProgram.build("smallalt", """
        #include <sys/mman.h>
        __attribute__((noinline)) int rec(int d) { if (d == 0) { vk_null(); return 0; } return rec(d - 1) + 1; }
        int main(int argc, char **argv) {
            size_t sz = (size_t)atoi(argv[1]);
            char *m = mmap(NULL, sz + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            mprotect(m, 4096, PROT_NONE);
            stack_t ss = { .ss_sp = m + 4096, .ss_size = sz };
            if (sigaltstack(&ss, NULL)) { perror("sigaltstack"); return 4; }
            vk_start("smallalt");
            return rec(20);
        }
        """, extraFlags: ["-Wl,-z,lazy"])
        for size in ["4096", "8192"] {
            let run = try RuntimeProgram.run(program, [size], timeout: 20)
            XCTAssertFalse(run.result.timedOut, "alternate stack of \(size) bytes: looped")
            XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", "\(size): \(run.result.stderrTail())")
            XCTAssertLessThanOrEqual(run.reports.count, 1)
            if let name = run.reports.first {
                XCTAssertEqual(reportValue(run.report(name), "signal"), "11 SIGSEGV", size)
            }
        }
    }

    /// Asynchronous signals are blocked while the handler runs, crash signals are not. With RLIMIT_FSIZE
    /// at 100 bytes the report write raises SIGXFSZ, whose default action used to end the process with
    /// SIGXFSZ in the middle of the capture; now the process ends with SIGSEGV as without Vaka.
    func testAsyncSignalsBlockedDuringCapture() throws {
        let program = try RuntimeProgram.build("fsize", """
        #include <sys/resource.h>
        int main(int argc, char **argv) {
            vk_start("fsize");
            struct sigaction sa;
            sigaction(SIGSEGV, NULL, &sa);
            int async[] = { SIGXFSZ, SIGALRM, SIGTERM, SIGINT, SIGPROF, SIGCHLD, SIGUSR1, SIGPIPE };
            int crash[] = { SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE, SIGSYS };
            for (unsigned i = 0; i < sizeof async / sizeof async[0]; i++)
                if (!sigismember(&sa.sa_mask, async[i])) { printf("async %d not blocked\\n", async[i]); return 5; }
            for (unsigned i = 0; i < sizeof crash / sizeof crash[0]; i++)
                if (sigismember(&sa.sa_mask, crash[i])) { printf("crash %d blocked\\n", crash[i]); return 6; }
            struct rlimit r = { 100, 100 };
            setrlimit(RLIMIT_FSIZE, &r);
            vk_null();
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)",
                       String(decoding: run.result.stdout, as: UTF8.self) + run.result.stderrTail())
        XCTAssertEqual(run.reports, ["fsize.crash"])
        XCTAssertTrue(run.onlyReport.hasPrefix("VAKA-CRASH 2\n"), "the first 100 bytes are written")
    }

    /// The app installs its own SIGSEGV handler after Vaka, then Vaka is closed. Uninstall used to put
    /// back the action from before Vaka (the default), silently removing the app's handler.
    func testUninstallKeepsHandlersInstalledAfterUs() throws {
        let program = try RuntimeProgram.build("clobber", #"""
        static void h(int s) { write(2, "app handler ran\n", 16); _exit(42); }
        int main(void) {
            vk_start("clobber");
            signal(SIGSEGV, h);
            if (vaka_crash_uninstall() != 0) return 4;
            struct sigaction sa; sigaction(SIGABRT, NULL, &sa);
            if (sa.sa_handler != SIG_DFL) return 5; /* ours was still current there: restored */
            vk_null();
        }
        """#)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertEqual(run.result.outcome, "exit 42", run.result.stderrTail())
        XCTAssertEqual(run.reports, [])
    }

    /// A seccomp filter traps getppid() with SIGSYS and the application's SA_SIGINFO handler (installed
    /// before Vaka) emulates it by setting the return register. Re-sending the signal with tgkill gave that
    /// handler si_code SI_TKILL and a different context; now it is called directly with the original
    /// siginfo and ucontext, and the emulation works as without Vaka.
    func testPreviousHandlerGetsOriginalSiginfoAndContext() throws {
        let program = try RuntimeProgram.build("sigsys", #"""
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <sys/prctl.h>
        #include <sys/syscall.h>
        #include <ucontext.h>
        static volatile int got_code = 99;
        static void h(int s, siginfo_t *i, void *u) {
            got_code = i->si_code;
            ucontext_t *uc = u;
            if (i->si_code == 1 /* SYS_SECCOMP */) uc->uc_mcontext.gregs[REG_RAX] = 4242;
        }
        int main(void) {
            struct sigaction sa = {0}; sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO; sigaction(SIGSYS, &sa, NULL);
            vk_start("sigsys");
            if (vk_trap_getppid()) { perror("seccomp"); return 4; }
            long r = syscall(SYS_getppid);
            printf("getppid=%ld code=%d\n", r, got_code);
            return r == 4242 && got_code == 1 ? 0 : 1;
        }
        """#)
        #if arch(x86_64)
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(program, vaka: vaka, timeout: 20)
            XCTAssertEqual(run.result.outcome, "exit 0",
                           "vaka=\(vaka): " + String(decoding: run.result.stdout, as: UTF8.self) + run.result.stderrTail())
        }
        #endif
    }

    /// SIGBUS with BUS_MCEERR_AO (a machine-check report, asynchronous: no instruction repeats it) must be
    /// re-sent, not returned from: returning left the process running although the default action ends it.
    /// The kernel lets a process send itself a signal with a positive si_code, so rt_tgsigqueueinfo fakes it.
    func testAsynchronousMachineCheckSigbusIsResent() throws {
        let program = try RuntimeProgram.build("mceerr", #"""
        #include <sys/syscall.h>
        int main(void) {
            vk_start("mceerr");
            siginfo_t si; memset(&si, 0, sizeof si);
            si.si_signo = SIGBUS; si.si_code = BUS_MCEERR_AO;
            if (syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), SIGBUS, &si) != 0) { perror("sigqueue"); return 4; }
            printf("still alive\n");
            return 3;
        }
        """#)
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(program, vaka: vaka, timeout: 20)
            XCTAssertEqual(run.result.outcome, "signal 7 (SIGBUS)", "vaka=\(vaka): \(run.result.stderrTail())")
            if vaka {
                XCTAssertEqual(reportValue(run.onlyReport, "code"), "5 BUS_MCEERR_AO")
            }
        }
    }

    /// The `image` lines of a report whose path ends with `suffix`: (base, build ID, path).
    func images(_ report: String, endingWith suffix: String) -> [(base: String, buildID: String, path: String)] {
        report.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 4).map(String.init)
            guard parts.count == 5, parts[0] == "image", parts[4].hasSuffix(suffix) else { return nil }
            return (parts[1], parts[3], parts[4])
        }
    }

    static func pluginSource(_ letter: String) -> String { """
        static int *volatile np = 0;
        __attribute__((noinline)) void plugin_\(letter)_crash(void) { *np = 1; }
        void plugin_entry(void) { plugin_\(letter)_crash(); }
        """ }

    /// `libA` is loaded before install (so it is in the install-time image cache), dlclose'd, and libB is
    /// dlopen'ed at the same address with the same layout. The report used to name libA (path and build ID)
    /// for libB's frames; the link-map path is now compared too.
    func testLibraryReloadedAtSameAddressIsNotStale() throws {
        let libA = try RuntimeProgram.buildLibrary("A", Self.pluginSource("A"))
        let libB = try RuntimeProgram.buildLibrary("B", Self.pluginSource("B"))
        let program = try RuntimeProgram.build("reload", #"""
        #include <dlfcn.h>
        int main(int argc, char **argv) {
            void *a = dlopen(argv[1], RTLD_NOW);
            if (!a) { fprintf(stderr, "%s\n", dlerror()); return 4; }
            Dl_info da; dladdr(dlsym(a, "plugin_entry"), &da);
            void *base_a = da.dli_fbase;
            vk_start("reload");
            dlclose(a);
            void *b = dlopen(argv[2], RTLD_NOW);
            if (!b) { fprintf(stderr, "%s\n", dlerror()); return 4; }
            void (*e)(void) = (void (*)(void))dlsym(b, "plugin_entry");
            Dl_info db; dladdr((void *)e, &db);
            printf("same_address=%d\n", db.dli_fbase == base_a); fflush(stdout);
            e();
        }
        """#, extraFlags: ["-ldl"])
        let run = try RuntimeProgram.run(program, [libA.path, libB.path], timeout: 20)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let report = run.onlyReport
        let scratch = Paths.freshDirectory("readelf-reload")
        XCTAssertEqual(images(report, endingWith: "/libA.so").count, 0, "libA was unloaded:\n\(report)")
        let b = images(report, endingWith: "/libB.so")
        XCTAssertEqual(b.count, 1, report)
        XCTAssertEqual(b.first?.buildID, try readelfBuildID(libB, scratch: scratch))
    }

    /// The handler reads every cached link-map entry and path in one batch and falls back to reading an entry or
    /// path on its own. Two libraries loaded before install: libA's path string (its link-map l_name, moved by the
    /// program into a page of its own) is made unreadable after install, so its batched piece faults and its own
    /// read fails too: it is listed from memory, with its build ID and an unknown path, and not from the cache.
    /// libB's l_name is pointed at a copy of its path after install, so the batched path (read at the old
    /// pointer) does not apply: its own read finds the same path, and it is listed from the cache.
    func testImagePathsThatTheBatchedReadCannotUse() throws {
        let libA = try RuntimeProgram.buildLibrary("A", Self.pluginSource("A"))
        let libB = try RuntimeProgram.buildLibrary("B", Self.pluginSource("B"))
        let program = try RuntimeProgram.build("batch", #"""
        #include <dlfcn.h>
        #include <link.h>
        #include <sys/mman.h>
        int main(int argc, char **argv) {
            void *a = dlopen(argv[1], RTLD_NOW), *b = dlopen(argv[2], RTLD_NOW);
            if (!a || !b) { fprintf(stderr, "%s\n", dlerror()); return 4; }
            struct link_map *la = NULL, *lb = NULL;
            if (dlinfo(a, RTLD_DI_LINKMAP, &la) != 0 || dlinfo(b, RTLD_DI_LINKMAP, &lb) != 0) return 4;
            char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (page == MAP_FAILED) return 4;
            strcpy(page, la->l_name);
            la->l_name = page;
            vk_start("batch");
            static char copy[4096];
            strcpy(copy, lb->l_name);
            lb->l_name = copy;
            mprotect(page, 4096, PROT_NONE);
            vk_null();
        }
        """#, extraFlags: ["-ldl"])
        let run = try RuntimeProgram.run(program, [libA.path, libB.path], timeout: 20)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let report = run.onlyReport
        let scratch = Paths.freshDirectory("readelf-batch")
        let idA = try readelfBuildID(libA, scratch: scratch)
        let linesA = report.split(separator: "\n").filter { $0.hasPrefix("image ") && $0.contains(" \(idA) ") }
        XCTAssertEqual(linesA.count, 1, report)
        XCTAssertEqual(linesA.first?.split(separator: " ").last, "-", "libA's path was unreadable:\n\(report)")
        XCTAssertEqual(images(report, endingWith: "/libA.so").count, 0, report)
        let b = images(report, endingWith: "/libB.so")
        XCTAssertEqual(b.count, 1, report)
        XCTAssertEqual(b.first?.path, libB.path)
        XCTAssertEqual(b.first?.buildID, try readelfBuildID(libB, scratch: scratch))
    }

    /// Threads that block every signal are described from /proc without being asked: their name and state come
    /// from the status file read to see that they block the thread signal. Its `Name:` escapes `\n` and `\\`
    /// (those names are taken from `comm` instead); a leading space and a tab are kept as they are.
    func testBlockedThreadsKeepTheirExactNames() throws {
        let program = try RuntimeProgram.build("names", #"""
        #include <sys/prctl.h>
        static volatile int ready;
        static void *th(void *name) {
            sigset_t all; sigfillset(&all); pthread_sigmask(SIG_SETMASK, &all, NULL);
            prctl(PR_SET_NAME, name, 0, 0, 0);
            __atomic_add_fetch(&ready, 1, __ATOMIC_SEQ_CST);
            for (;;) pause();
        }
        int main(void) {
            static const char *names[] = { " lead", "back\\slash", "tab\there", "nl\nx", "plain" };
            vk_start("names");
            for (int i = 0; i < 5; i++) { pthread_t t; pthread_create(&t, NULL, th, (void *)names[i]); }
            while (ready < 5) usleep(1000);
            usleep(20000); /* each in pause() */
            vk_null();
        }
        """#)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let report = run.onlyReport
        let lines = report.split(separator: "\n").map(String.init)
        for name in [#" lead"#, #"back\\slash"#, #"tab\there"#, #"nl\nx"#, "plain"] {
            let thread = lines.filter { $0.hasPrefix("thread ") && $0.hasSuffix(" blocked " + name) }
            XCTAssertEqual(thread.count, 1, "no blocked thread named \(name):\n\(report)")
            guard let tid = thread.first?.split(separator: " ")[1] else { continue }
            let proc = lines.filter { $0.hasPrefix("thread_proc \(tid) ") }
            XCTAssertEqual(proc.first?.split(separator: " ")[2], "S", "thread \(tid) sleeps in pause:\n\(report)")
        }
    }

    /// Libraries loaded with dlmopen into namespaces of their own are not in the base namespace's link map
    /// (`_r_debug.r_map`); glibc links each namespace's list from `_r_debug`'s `r_next` (r_version 2). libA is
    /// loaded so before install (in the image cache), libB after it (read from memory); the crash is in libA.
    /// Both must be listed, once each, with their build IDs: they used to be left out as if dlclose'd.
    func testLibrariesInOtherNamespacesAreListed() throws {
        let libA = try RuntimeProgram.buildLibrary("A", Self.pluginSource("A"))
        let libB = try RuntimeProgram.buildLibrary("B", Self.pluginSource("B"))
        let program = try RuntimeProgram.build("dlmopen", #"""
        #include <dlfcn.h>
        int main(int argc, char **argv) {
            void *a = dlmopen(LM_ID_NEWLM, argv[1], RTLD_NOW);
            if (!a) { fprintf(stderr, "%s\n", dlerror()); return 4; }
            void (*e)(void) = (void (*)(void))dlsym(a, "plugin_entry");
            vk_start("dlmopen");
            void *b = dlmopen(LM_ID_NEWLM, argv[2], RTLD_NOW);
            if (!b || !e) { fprintf(stderr, "%s\n", dlerror()); return 4; }
            e();
        }
        """#, extraFlags: ["-ldl"])
        let run = try RuntimeProgram.run(program, [libA.path, libB.path], timeout: 20)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let report = run.onlyReport
        let scratch = Paths.freshDirectory("readelf-dlmopen")
        for lib in [libA, libB] {
            let lines = images(report, endingWith: "/" + lib.lastPathComponent)
            XCTAssertEqual(lines.count, 1, "\(lib.lastPathComponent) is not listed once:\n\(report)")
            XCTAssertEqual(lines.first?.path, lib.path)
            XCTAssertEqual(lines.first?.buildID, try readelfBuildID(lib, scratch: scratch))
        }
    }

    /// A thread made with a raw clone(2) before install is invisible to glibc (`__libc_single_threaded` stays 1),
    /// but it is a thread of the process all the same: install's round must give it an alternate stack, so that
    /// its stack overflow is reported (the handler cannot run on the overflowed stack itself).
    func testStackOverflowOnRawCloneThreadMadeBeforeStart() throws {
        let program = try RuntimeProgram.build("rawclone", #"""
        #include <sched.h>
        #include <sys/mman.h>
        #include <sys/syscall.h>
        static volatile int started, go;
        __attribute__((noinline)) static int deep(int n) { volatile char b[512]; b[0] = (char)n; return deep(n + 1) + b[0]; }
        static int body(void *arg) {
            started = 1;
            while (!go) syscall(SYS_sched_yield);
            return deep(0);
        }
        int main(void) {
            size_t size = 1 << 20;
            char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (stack == MAP_FAILED || mprotect(stack, 4096, PROT_NONE) != 0) return 4;
            int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
            int tid = clone(body, stack + size, flags, NULL);
            if (tid < 0) return 4;
            while (!started) usleep(100);
            printf("tid=%d\n", tid); fflush(stdout);
            vk_start("rawclone");
            go = 1;
            for (;;) pause();
        }
        """#)
        let run = try RuntimeProgram.run(program, timeout: 20)
        XCTAssertFalse(run.result.timedOut)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let out = String(decoding: run.result.stdout, as: UTF8.self)
        let tid = out.split(separator: "\n").first { $0.hasPrefix("tid=") }.map { String($0.dropFirst(4)) }
        XCTAssertNotNil(tid, out)
        XCTAssertEqual(run.reports, ["rawclone.crash"], "the overflow on the clone(2) thread left no report")
        let report = run.onlyReport
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV")
        XCTAssertTrue(report.split(separator: "\n").contains { $0 == "thread \(tid ?? "?") crashed" }, report)
    }

    /// A library dlopen'ed after install whose first PT_LOAD has p_vaddr != 0 (linked with
    /// -Ttext-segment) has no ELF header at its load bias; it used to be missing from the report. Its header
    /// is now found below its dynamic section.
    func testLateLibraryWithNonZeroFirstSegmentIsListed() throws {
        let libC = try RuntimeProgram.buildLibrary("C", Self.pluginSource("C"), extraFlags: ["-Wl,-Ttext-segment=0x200000"])
        let program = try RuntimeProgram.build("late", #"""
        #include <dlfcn.h>
        int main(int argc, char **argv) {
            vk_start("late");
            void *b = dlopen(argv[1], RTLD_NOW);
            if (!b) { fprintf(stderr, "%s\n", dlerror()); return 4; }
            void (*e)(void) = (void (*)(void))dlsym(b, "plugin_entry");
            e();
        }
        """#, extraFlags: ["-ldl"])
        let run = try RuntimeProgram.run(program, [libC.path], timeout: 20)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let report = run.onlyReport
        let c = images(report, endingWith: "/libC.so")
        XCTAssertEqual(c.count, 1, report)
        XCTAssertEqual(c.first?.buildID, try readelfBuildID(libC, scratch: Paths.freshDirectory("readelf-late")))
        // The crash site lies in that image.
        if let base = c.first.flatMap({ UInt64($0.base.dropFirst(2), radix: 16) }),
           let pcText = reportValue(report, "frame")?.split(separator: " ").first,
           let pc = UInt64(pcText.dropFirst(2), radix: 16) {
            XCTAssertTrue(pc >= base && pc < base + 0x100000, "crash pc \(pcText) not in libC at \(c.first!.base)")
        } else {
            XCTFail("no base or frame in\n\(report)")
        }
    }
}
