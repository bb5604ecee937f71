import Foundation
import XCTest
import VakaTestSupport

/// Adversarial checks of the C crash runtime (issue 8 follow-up): situations a crash-reporter tester tries in
/// order to lose a crash, change how the process ends, or make the app die because of Vaka. Each test is a
/// small C program compiled against the runtime sources (``RuntimeProgram``), run with Vaka and, where the
/// comparison matters, without it (`$VK_NOVAKA`). The rule checked: one report where the docs promise one,
/// the same termination as without Vaka, no hang, and the app never dies because of Vaka.
/// These tests FAIL on the code they were written against; each names the finding it shows.
final class RuntimeAdversarialTests: XCTestCase {
    /// The signal line of a report, e.g. "11 SIGSEGV".
    func signalLine(_ report: String) -> String { reportValue(report, "signal") ?? "" }

    // MARK: - a signal the process survives uninstalls Vaka

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

    // MARK: - SIG_IGN inherited for a synchronous trap

    /// SIGTRAP ignored (SIG_IGN inherited over exec: a launcher that ignores it), then `int3` (on aarch64 Swift's
    /// own traps are `brk`, i.e. SIGTRAP). The kernel forces a synchronous trap through an ignored action: without
    /// Vaka the process dies of SIGTRAP. With Vaka the previous action (SIG_IGN) is "chained" by returning, so
    /// the program runs on past the trap and exits 0.
    func testIgnoredSigtrapStillEndsTheProcess() throws {
        #if arch(x86_64)
        let program = try RuntimeProgram.build("adv-igntrap", """
        int main(void) {
            signal(SIGTRAP, SIG_IGN);
            vk_start("advigntrap");
            __asm__ volatile("int3");
            printf("ran past the trap\\n");
            return 0;
        }
        """)
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(program, vaka: vaka, timeout: 30)
            XCTAssertEqual(run.result.outcome, "signal 5 (SIGTRAP)",
                           "vaka=\(vaka): " + String(decoding: run.result.stdout, as: UTF8.self))
        }
        #endif
    }

    /// Same for a seccomp SIGSYS (SECCOMP_RET_TRAP) with SIGSYS ignored: the kernel kills the process with
    /// SIGSYS; with Vaka the program goes on with the system call's number as its result.
    func testIgnoredSeccompSigsysStillEndsTheProcess() throws {
        #if arch(x86_64)
        let program = try RuntimeProgram.build("adv-ignsys", #"""
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <sys/prctl.h>
        #include <sys/syscall.h>
        int main(void) {
            signal(SIGSYS, SIG_IGN);
            vk_start("advignsys");
            if (vk_trap_getppid()) { perror("seccomp"); return 4; }
            long r = syscall(SYS_getppid);
            printf("ran past the trapped call: %ld\n", r);
            return 0;
        }
        """#)
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(program, vaka: vaka, timeout: 30)
            XCTAssertEqual(run.result.outcome, "signal 31 (SIGSYS)",
                           "vaka=\(vaka): " + String(decoding: run.result.stdout, as: UTF8.self))
        }
        #endif
    }

    // MARK: - blocked masks

    /// A thread that existed before start, under a mask inherited blocked over exec, calls the documented remedy
    /// for pre-existing threads, `vaka_crash_thread_attach()` (`Vaka.attachCurrentThread()`), then faults. Attach
    /// gives it an alternate stack but leaves SIGSEGV blocked in its own mask (it could unblock it: it is that
    /// thread), so the kernel kills the process without a report.
    func testAttachedPreexistingThreadUnderBlockedMaskIsReported() throws {
        let program = try RuntimeProgram.build("adv-preattach", """
        static volatile int started;
        static void *work(void *a) {
            while (!started) usleep(1000);
            if (!NOVAKA && vaka_crash_thread_attach() != 0) exit(4);
            vk_null();
            return a;
        }
        int main(void) {
            sigset_t all; sigfillset(&all); pthread_sigmask(SIG_BLOCK, &all, NULL); /* as inherited over exec */
            pthread_t t; pthread_create(&t, NULL, work, NULL);                       /* exists before start */
            vk_start("advpreattach");
            started = 1;
            pthread_join(t, NULL);
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["advpreattach.crash"])
    }

    // MARK: - the report file cannot be opened at crash time

    /// The classic: the app leaks descriptors until RLIMIT_NOFILE is reached (EMFILE), then crashes because of
    /// it. openat(report) fails with EMFILE and no report is written (no reserve descriptor, no fallback).
    func testDescriptorLimitReachedStillGivesAReport() throws {
        let program = try RuntimeProgram.build("adv-emfile", """
        #include <fcntl.h>
        #include <sys/resource.h>
        int main(void) {
            struct rlimit r = { 256, 256 };
            setrlimit(RLIMIT_NOFILE, &r);
            vk_start("advemfile");
            int n = 0;
            while (open("/dev/null", O_RDONLY) >= 0) n++;
            printf("opened %d, errno %d\\n", n, errno); fflush(stdout);
            vk_null();
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["advemfile.crash"])
        XCTAssertTrue(run.onlyReport.hasSuffix("end\n"), run.onlyReport)
    }

    /// The report directory is removed and created again after start (a cleanup job, another process sharing
    /// the storage, `rm -rf` + `mkdir`). The descriptor opened at install names the deleted directory: openat
    /// fails with ENOENT and there is no fallback to the absolute path (which exists again and worked before the
    /// descriptor was introduced). No report.
    func testReportDirectoryRecreatedAfterStartStillGivesAReport() throws {
        let program = try RuntimeProgram.build("adv-recreate", """
        #include <sys/stat.h>
        int main(void) {
            vk_start("advrecreate");
            const char *d = getenv("VK_DIR");
            if (rmdir(d) != 0 || mkdir(d, 0700) != 0) { perror("recreate"); return 4; }
            vk_null();
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["advrecreate.crash"])
    }

    /// The storage's file system is full at crash time (a 64 KiB tmpfs in a private mount namespace, filled
    /// after start: the disk filling up is often what made the app crash). openat creates the file (tmpfs
    /// inodes are not the limit) but every write fails with ENOSPC: a 0-byte report, which the next launch
    /// renames to `.invalid` (the run then counts as `abnormal`, not `crashed`). Nothing reserves the space at
    /// install. Expected: at least the report's header (signal, si_code, fault address). Needs root.
    func testFullFileSystemAtCrashTimeStillKeepsTheHeader() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else {
            throw XCTSkip("needs root and unshare(1) for a private tmpfs mount")
        }
        let program = try RuntimeProgram.build("adv-full", """
        int main(void) {
            vk_start("advfull");
            if (system("dd if=/dev/zero of=\\"$MNT/fill\\" bs=4k 2>/dev/null") == -1) return 4;
            /* Full before the crash (after it, the report has released the reserve's blocks past its end). */
            if (system("df -k \\"$MNT\\" | tail -1") == -1) return 4;
            vk_null();
            return 0;
        }
        """)
        let dir = Paths.freshDirectory("adv-full-run")
        let mnt = dir.appendingPathComponent("mnt")
        try FileManager.default.createDirectory(at: mnt, withIntermediateDirectories: true)
        let script = "set -e; export MNT='\(mnt.path)'; mount -t tmpfs -o size=64k tmpfs \"$MNT\"; mkdir \"$MNT/r\"; " +
            "VK_DIR=\"$MNT/r\" '\(program.path)' || true; ls -l \"$MNT/r\"; cat \"$MNT/r/advfull.crash\""
        let result = try runChild(URL(fileURLWithPath: "/usr/bin/unshare"),
                                  ["-m", "--propagation", "private", "/bin/bash", "-c", script],
                                  label: "unshare", outputDirectory: dir, timeout: 60)
        let out = String(decoding: result.stdout, as: UTF8.self)
        XCTAssertTrue(out.contains(" 100% "), "the file system was not full:\n\(out)")
        XCTAssertNotNil(reportValue(out, "signal"), "no header in the report:\n\(out)\n\(result.stderrTail())")
    }

    /// Storage whose `crashes/` already exists (mode 0700) on a file system that is now read-only (remounted
    /// `ro`, a read-only bind mount, a full-disk protection...). `Vaka.start` accepts it without a word (an
    /// existing 0700 directory is fine as it is; the O_PATH open needs no write permission), so the harness
    /// crashes with no report and nothing on stderr. Kind 5 promises one stderr line whenever crash reporting
    /// cannot work; a writability probe at install would give it. Needs root.
    func testReadOnlyCrashesDirectoryIsSaidOnStderr() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else {
            throw XCTSkip("needs root and unshare(1) for a private tmpfs mount")
        }
        let dir = Paths.freshDirectory("adv-ro-run")
        let mnt = dir.appendingPathComponent("mnt")
        try FileManager.default.createDirectory(at: mnt, withIntermediateDirectories: true)
        let script = "set -e; MNT='\(mnt.path)'; mount -t tmpfs -o size=1m tmpfs \"$MNT\"; " +
            "mkdir -m 700 -p \"$MNT/s/crashes\"; chmod 700 \"$MNT/s\"; mount -o remount,ro \"$MNT\"; " +
            "exec '\(Paths.harness.path)' null-deref --storage \"$MNT/s\""
        let result = try runChild(URL(fileURLWithPath: "/usr/bin/unshare"),
                                  ["-m", "--propagation", "private", "/bin/bash", "-c", script],
                                  label: "unshare", outputDirectory: dir,
                                  environment: ["SWIFT_BACKTRACE": "enable=no"], timeout: 60)
        XCTAssertEqual(result.outcome, "signal 11 (SIGSEGV)", result.stderrTail())
        XCTAssertTrue(result.stderrTail().contains("[vaka]"),
                      "crash reporting cannot work, and stderr says nothing: '\(result.stderrTail())'")
    }

    // MARK: - the interposers make the app die

    /// A program built with AddressSanitizer (`swift build --sanitize=address` links clang's static ASan
    /// runtime into the executable, like this clang does) and the crash runtime: the runtime's strong
    /// `pthread_create` replaces ASan's interceptor (a weak definition), so ASan never learns about the thread
    /// and aborts in `pthread_join` ("Joining already joined thread") — even when Vaka is never started.
    /// Without the runtime the same program exits 0.
    func testAddressSanitizerProgramCanJoinItsThreads() throws {
        let clang = ["/opt/swift/usr/bin/clang"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let clang else { throw Peers.missing("no clang in the Swift toolchain (/opt/swift/usr/bin/clang)") }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("adv-asan")
        let source = dir.appendingPathComponent("asan.c")
        try Data((RuntimeProgram.prelude + """
        static void *work(void *a) { return a; }
        int main(void) {
            vk_start("advasan");
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL) != 0) { puts("create failed"); return 5; }
            pthread_join(t, NULL);
            puts("joined");
            return 0;
        }
        """).utf8).write(to: source)
        let executable = dir.appendingPathComponent("asan")
        let link = try runChild(URL(fileURLWithPath: clang),
                                ["-fsanitize=address", "-g", "-O0", "-I",
                                 Paths.repositoryRoot.appendingPathComponent("include").path, source.path,
                                 library.path, "-lunwind", "-lelf", "-lpthread", "-ldl", "-o", executable.path],
                                label: "clang-asan", outputDirectory: dir, timeout: 180)
        guard link.outcome == "exit 0" else { throw ChildError(description: "clang: \(link.stderrTail())") }
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(executable, vaka: vaka, timeout: 60)
            XCTAssertEqual(run.result.outcome, "exit 0", "vaka=\(vaka): \(run.result.stderrTail())")
        }
    }

    /// Variant: ThreadSanitizer with its runtime linked statically (`gcc -fsanitize=thread -static-libtsan`; Swift's
    /// `--sanitize=thread` links clang's static TSan runtime the same way). TSan never sees the thread start and
    /// the thread dies of a SEGV inside TSan — with Vaka started or not.
    func testThreadSanitizerProgramCanRunItsThreads() throws {
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("adv-tsan")
        let source = dir.appendingPathComponent("tsan.c")
        try Data((RuntimeProgram.prelude + """
        static int shared;
        static void *work(void *a) { shared++; return a; }
        int main(void) {
            vk_start("advtsan");
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL) != 0) { puts("create failed"); return 5; }
            pthread_join(t, NULL);
            printf("joined %d\\n", shared);
            return 0;
        }
        """).utf8).write(to: source)
        let executable = dir.appendingPathComponent("tsan")
        let link = try runChild(URL(fileURLWithPath: cc),
                                ["-fsanitize=thread", "-static-libtsan", "-g", "-O0", "-I",
                                 Paths.repositoryRoot.appendingPathComponent("include").path, source.path,
                                 library.path, "-lunwind", "-lelf", "-lpthread", "-ldl", "-o", executable.path],
                                label: "cc-tsan", outputDirectory: dir, timeout: 180)
        guard link.outcome == "exit 0" else { throw XCTSkip("cannot link with a static TSan runtime: \(link.stderrTail())") }
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(executable, vaka: vaka, timeout: 60)
            XCTAssertEqual(run.result.outcome, "exit 0", "vaka=\(vaka): \(run.result.stderrTail(600))")
        }
    }

    /// A fully static program (`cc -static`, as ``StaticStdlibTests`` builds one): `dlsym(RTLD_NEXT,
    /// "pthread_create")` finds nothing there, so the interposer returns EAGAIN for every thread — with Vaka
    /// installed or not. The app cannot create a single thread because it links Vaka.
    func testFullyStaticProgramCanCreateThreads() throws {
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        #if arch(x86_64)
        let libDir = "/usr/lib/x86_64-linux-gnu"
        #else
        let libDir = "/usr/lib/aarch64-linux-gnu"
        #endif
        for lib in ["libunwind.a", "libelf.a", "libz.a", "liblzma.a"]
        where !FileManager.default.fileExists(atPath: "\(libDir)/\(lib)") {
            throw XCTSkip("\(libDir)/\(lib) missing: cannot link a static program")
        }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("adv-static-threads")
        let source = dir.appendingPathComponent("st.c")
        try Data((RuntimeProgram.prelude + """
        static void *work(void *a) { return a; }
        int main(void) {
            vk_start("advstatic");
            pthread_t t;
            int rc = pthread_create(&t, NULL, work, NULL);
            printf("pthread_create %d\\n", rc);
            if (rc != 0) return 5;
            pthread_join(t, NULL);
            return 0;
        }
        """).utf8).write(to: source)
        let executable = dir.appendingPathComponent("st")
        let link = try runChild(URL(fileURLWithPath: cc),
                                ["-static", "-O0", "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                 source.path, library.path, "-lunwind", "-llzma", "-lelf", "-lz", "-lpthread",
                                 "-o", executable.path],
                                label: "cc-static", outputDirectory: dir, timeout: 120)
        guard link.outcome == "exit 0" else { throw ChildError(description: "cc -static: \(link.stderrTail())") }
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(executable, vaka: vaka, timeout: 30)
            XCTAssertEqual(run.result.outcome, "exit 0",
                           "vaka=\(vaka): " + String(decoding: run.result.stdout, as: UTF8.self))
        }
    }
}
