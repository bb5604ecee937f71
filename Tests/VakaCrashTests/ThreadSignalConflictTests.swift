import Foundation
import XCTest
import VakaTestSupport

/// The thread signal (docs/crash-handling.md, *Every thread*) meets programs that use signals themselves: a
/// signal thread that blocks every signal and takes them with `sigwait` or a `signalfd` (its "any other signal:
/// shut down" branch must never see Vaka's request, neither at `start` nor during a crash), and an application
/// that takes the thread signal over after `start` (`SIG_DFL`, whose action would end the process with that
/// signal; `SIG_IGN`; its own handler). Each program ends as it does without Vaka.
final class ThreadSignalConflictTests: XCTestCase {
    /// One program, its mode in `argv[1]`. `early-wait`/`early-fd`: a signal thread made before `start`, still
    /// setting up (every signal blocked) or already waiting, then `main` returns 3 (`-now`: `start` right after
    /// they are made, while glibc is still starting them). `wait`/`fd`: a signal thread
    /// made after `start`, then `abort()`. `dfl`/`ign`/`own`: the thread signal (`SIGRTMAX - 1`, Vaka's choice in
    /// a program that handles no real-time signal) set to that action after `start`, then `abort()`.
    static let source = """
    #include <sys/signalfd.h>
    static sigset_t all;
    static void *sig_thread(void *a) {
        if (a != NULL) usleep(100000); /* still setting up while start runs */
        int sig;
        while (sigwait(&all, &sig) == 0) {
            if (sig == SIGHUP) continue;
            fprintf(stderr, "signal thread: %d, shutting down\\n", sig);
            exit(0);
        }
        return NULL;
    }
    static void *fd_thread(void *a) {
        if (a != NULL) usleep(100000);
        int fd = signalfd(-1, &all, SFD_CLOEXEC);
        struct signalfd_siginfo si;
        while (read(fd, &si, sizeof si) == sizeof si) {
            fprintf(stderr, "signalfd thread: %u, shutting down\\n", si.ssi_signo);
            exit(0);
        }
        return NULL;
    }
    static void *idle(void *a) { (void)a; for (;;) pause(); return NULL; }
    static void own(int sig) { static const char m[] = "application handler called\\n"; (void)sig; write(2, m, sizeof m - 1); }
    int main(int argc, char **argv) {
        const char *mode = argc > 1 ? argv[1] : "";
        pthread_t t;
        sigfillset(&all);
        if (strncmp(mode, "early-", 6) == 0) {
            pthread_sigmask(SIG_BLOCK, &all, NULL);
            /* one signal thread still setting up at start, one already waiting */
            int fd = strncmp(mode, "early-fd", 8) == 0;
            pthread_create(&t, NULL, fd ? fd_thread : sig_thread, (void *)1);
            pthread_create(&t, NULL, fd ? fd_thread : sig_thread, NULL);
            if (strstr(mode, "-now") == NULL) usleep(20000); /* -now: start while the last one is still starting */
            vk_start("conflict");
            usleep(200000);
            return 3;
        }
        vk_start("conflict");
        pthread_create(&t, NULL, idle, NULL);
        if (strcmp(mode, "dfl") == 0) signal(SIGRTMAX - 1, SIG_DFL);
        if (strcmp(mode, "ign") == 0) signal(SIGRTMAX - 1, SIG_IGN);
        if (strcmp(mode, "own") == 0) signal(SIGRTMAX - 1, own);
        if (strcmp(mode, "wait") == 0 || strcmp(mode, "fd") == 0) {
            pthread_sigmask(SIG_BLOCK, &all, NULL);
            pthread_create(&t, NULL, strcmp(mode, "fd") == 0 ? fd_thread : sig_thread, NULL);
        }
        usleep(50000);
        abort();
    }
    """

    static let program = Result { try RuntimeProgram.build("thread-signal-conflict", source) }

    /// Runs `mode` with and without Vaka: the same ending, and the program's own signal code never ran.
    private func runBoth(_ mode: String) throws -> RuntimeProgram.Run {
        let program = try Self.program.get()
        let without = try RuntimeProgram.run(program, [mode], vaka: false, timeout: 30)
        let with = try RuntimeProgram.run(program, [mode], timeout: 30)
        XCTAssertEqual(with.result.outcome, without.result.outcome, "\(mode): \(with.result.stderrTail())")
        XCTAssertFalse(with.result.stderrText.contains("shutting down"), "\(mode): \(with.result.stderrText)")
        XCTAssertFalse(with.result.stderrText.contains("application handler called"), "\(mode): \(with.result.stderrText)")
        return with
    }

    /// Signal threads that existed before `start` (one still setting up with every signal blocked, one already in
    /// `sigwait` or reading its `signalfd`, or — `-now` — one that glibc is still starting, every signal blocked
    /// until it runs with its creator's mask) are not sent the install-time request: the program runs on and
    /// returns 3, as without Vaka (before, it shut down at `start` with status 0; a starting one was asked and
    /// took the request as its own signal once it waited, in about 1 run in 5 of `-now`).
    func testSignalThreadsThatExistedBeforeStartAreNotAsked() throws {
        for mode in ["early-wait", "early-fd", "early-wait-now", "early-fd-now"] {
            let run = try runBoth(mode)
            XCTAssertEqual(run.result.outcome, "exit 3", mode)
            XCTAssertEqual(run.reports, [], mode)
        }
    }

    /// A signal thread made after `start` is not sent the crash-time request: the process still dies of SIGABRT
    /// (before, the signal thread took the request and exited with 0 while the report was being written), and the
    /// signal thread is listed as blocking the signal, described from /proc.
    func testSignalThreadsDoNotTakeTheCrashTimeRequest() throws {
        for mode in ["wait", "fd"] {
            let run = try runBoth(mode)
            XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", mode)
            let report = run.onlyReport
            XCTAssertTrue(report.hasSuffix("\nend\n"), "\(mode): \(report)")
            let threads = report.split(separator: "\n").filter { $0.hasPrefix("thread ") }
            XCTAssertEqual(threads.count, 3, "\(mode): \(report)")
            XCTAssertEqual(threads.filter { $0.contains(" blocked ") }.count, 1, "\(mode): \(report)")
        }
    }

    /// The thread signal taken over after `start`: no request is sent (SIG_DFL would end the process with that
    /// signal instead of SIGABRT; SIG_IGN or the application's handler would leave the round to wait out its
    /// 500 ms deadline, and that handler would run on every thread); the other thread is still listed with its
    /// frames from /proc.
    func testThreadSignalTakenOverAfterStartIsNotSent() throws {
        for mode in ["dfl", "ign", "own"] {
            let run = try runBoth(mode)
            XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", mode)
            let report = run.onlyReport
            XCTAssertTrue(report.hasSuffix("\nend\n"), "\(mode): \(report)")
            XCTAssertTrue(report.contains(" unasked "), "\(mode): \(report)")
            XCTAssertTrue(report.contains("\nthread_proc "), "\(mode): \(report)")
            XCTAssertTrue(report.contains("\nthread_frames "), "\(mode): \(report)")
            // Nothing to wait for: far below the deadline (500 ms), whatever the load.
            let wait = reportValue(report, "threads")?.split(separator: " ").last.flatMap { UInt64($0) }
            XCTAssertLessThan(try XCTUnwrap(wait, "\(mode): \(report)"), 400_000_000, mode)
        }
    }
}
