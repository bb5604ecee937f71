import Foundation
import XCTest
import VakaTestSupport

/// `defer_preparation` and `fork()`: a child forked before `vaka_crash_finish_install()` has run in the parent
/// (a program that starts Vaka and then daemonizes at once) never gets that call itself (the thread that would
/// make it is not in the child). The child prepares libunwind in its own fork hook instead, so its crashes are
/// unwound with libunwind (`cfi`) like those of a prepared process, not by frame pointers alone.
final class DeferredPreparationForkTests: XCTestCase {
    /// `forked`: installs with `defer_preparation`, forks at once (no vaka_crash_finish_install anywhere) and the
    /// child writes through NULL; the parent waits for it and exits 0.
    static let source = """
    #include <sys/wait.h>
    int main(void) {
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "forked", .defer_preparation = 1 };
        int rc = vaka_crash_install(&c);
        if (rc) { fprintf(stderr, "install failed %d\\n", rc); return 99; }
        pid_t child = fork();
        if (child == 0) { vk_null(); _exit(3); }
        int status = 0;
        if (waitpid(child, &status, 0) != child) return 98;
        printf("child %s %d\\n", WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return 0;
    }
    """

    func testForkChildBeforeFinishInstallUnwindsWithLibunwind() throws {
        let program = try RuntimeProgram.build("forked", Self.source)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "child signal 11\n")
        XCTAssertEqual(run.reports.count, 1, "\(run.reports)")
        let name = try XCTUnwrap(run.reports.first)
        XCTAssertTrue(name.hasPrefix("forked-") && name.hasSuffix(".crash"), name)
        let report = run.report(name)
        XCTAssertTrue(report.hasSuffix("\nend\n"), "complete report: \(report)")
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertGreaterThanOrEqual(methods.count, 3, "vk_null, main and libc's caller: \(report)")
        XCTAssertEqual(Set(methods.dropFirst()), ["cfi"], report)
    }

    /// The plugin of ``testForkWhileAnotherThreadIsInDlopenDoesNotHang``: its constructor (run by the dynamic
    /// linker with its load lock held) writes one byte to the descriptor in `$VK_PLUGIN_FD`, sleeps, then takes
    /// the program's `app_lock` (as a plugin calling into its host does).
    static let pluginSource = """
    #include <pthread.h>
    #include <stdlib.h>
    #include <unistd.h>
    extern pthread_mutex_t app_lock;
    __attribute__((constructor)) static void plugin_init(void) {
        const char *fd = getenv("VK_PLUGIN_FD");
        if (fd != NULL) (void)!write(atoi(fd), "x", 1);
        usleep(300 * 1000);
        pthread_mutex_lock(&app_lock);
        pthread_mutex_unlock(&app_lock);
    }
    """

    /// `pluginfork <plugin>`: installs with `defer_preparation`, then registers fork handlers that hold `app_lock`
    /// across fork (the usual pthread_atfork idiom; registered after Vaka's, its prepare handler runs first),
    /// starts a thread that dlopens the plugin and forks as soon as the plugin's constructor has begun. The
    /// child writes through NULL; the parent waits for it and for the thread.
    static let pluginForkSource = RuntimeProgram.pluginThreadFunction + """
    #include <sys/wait.h>
    pthread_mutex_t app_lock = PTHREAD_MUTEX_INITIALIZER;
    static void lock_app(void) { pthread_mutex_lock(&app_lock); }
    static void unlock_app(void) { pthread_mutex_unlock(&app_lock); }
    int main(int argc, char **argv) {
        if (argc < 2) return 90;
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "pluginfork", .defer_preparation = 1 };
        int rc = vaka_crash_install(&c);
        if (rc) { fprintf(stderr, "install failed %d\\n", rc); return 99; }
        if (pthread_atfork(lock_app, unlock_app, unlock_app) != 0) return 94;
        pthread_t thread;
        int started = start_plugin_thread(argv[1], &thread);
        if (started != 0) return started;
        pid_t child = fork();
        if (child == 0) { vk_null(); _exit(3); }
        int status = 0;
        if (waitpid(child, &status, 0) != child) return 98;
        void *plugin = NULL;
        pthread_join(thread, &plugin);
        printf("child %s %d plugin %s\\n", WIFSIGNALED(status) ? "signal" : "exit",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), plugin != NULL ? "loaded" : "missing");
        return 0;
    }
    """

    /// A fork before vaka_crash_finish_install while another thread is inside dlopen: fork's prepare hook must not
    /// open libunwind then. dlopen would wait for the dynamic linker's lock, held by that thread, which waits for a
    /// lock an earlier prepare handler of the program took (or, with glibc before 2.36, for the lock fork itself
    /// holds while the prepare handlers run, when it registers fork handlers): both would wait for good. The fork
    /// goes through and the child's crash is reported (by frame pointers: libunwind is not loaded in it).
    func testForkWhileAnotherThreadIsInDlopenDoesNotHang() throws {
        let plugin = try RuntimeProgram.buildLibrary("forkplugin", Self.pluginSource)
        let program = try RuntimeProgram.build("pluginfork", Self.pluginForkSource, extraFlags: ["-rdynamic"])
        let run = try RuntimeProgram.run(program, [plugin.path], timeout: 20)
        XCTAssertFalse(run.result.timedOut, "fork hung: \(run.result.stderrTail())")
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "child signal 11 plugin loaded\n")
        XCTAssertEqual(run.reports.count, 1, "\(run.reports)")
        let report = run.onlyReport
        XCTAssertTrue(report.hasSuffix("\nend\n"), "complete report: \(report)")
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertGreaterThanOrEqual(methods.count, 3, "vk_null, main and libc's caller: \(report)")
        XCTAssertEqual(Set(methods.dropFirst()), ["fp"], report)
    }
}
