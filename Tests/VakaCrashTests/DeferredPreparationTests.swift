import Foundation
import XCTest
import VakaTestSupport

/// `defer_preparation` (include/vaka/vaka_crash.h): install leaves the report's space reserve and libunwind's
/// warm-up to `vaka_crash_finish_install()`. A crash before that still gets a complete report: created by name
/// (no reserve), the crashed thread unwound by frame pointers (`fp`, no libunwind in the handler); after it, the
/// reserve exists and the frames are `cfi` again.
final class DeferredPreparationTests: XCTestCase {
    /// `deferred [finish|now]`: installs with `defer_preparation` (not with `now`), prints how many unnamed files
    /// (the reserve: an O_TMPFILE in the report directory, `... (deleted)` in /proc/self/fd) it holds, runs
    /// vaka_crash_finish_install() with `finish` and prints the count again, then writes through NULL. Each count
    /// comes with whether libunwind is mapped (it is opened with dlopen by the warm-up, not at process start).
    static let source = RuntimeProgram.reservesFunction + """
    /* 1 when libunwind is mapped in this process (/proc/self/maps). */
    static int libunwind_mapped(void) {
        FILE *f = fopen("/proc/self/maps", "r");
        char line[4096];
        int found = 0;
        while (f != NULL && fgets(line, sizeof line, f) != NULL) found |= strstr(line, "/libunwind.so") != NULL;
        if (f != NULL) fclose(f);
        return found;
    }
    int main(int argc, char **argv) {
        const char *mode = argc > 1 ? argv[1] : "";
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "deferred",
                                .defer_preparation = strcmp(mode, "now") != 0 };
        int rc = vaka_crash_install(&c);
        if (rc) { fprintf(stderr, "install failed %d\\n", rc); return 99; }
        printf("reserve %d libunwind %d\\n", reserves(getenv("VK_DIR")), libunwind_mapped());
        if (strcmp(mode, "finish") == 0) {
            if (vaka_crash_finish_install() != 0) return 98;
            if (vaka_crash_finish_install() != 0) return 97; /* a second call does nothing */
            printf("reserve %d libunwind %d\\n", reserves(getenv("VK_DIR")), libunwind_mapped());
        }
        fflush(stdout);
        vk_null();
        return 0;
    }
    """

    private func crash(_ mode: String) throws -> (stdout: String, report: String) {
        let program = try RuntimeProgram.build("deferred", Self.source)
        let run = try RuntimeProgram.run(program, [mode], timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["deferred.crash"], mode)
        let report = run.onlyReport
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV", report)
        XCTAssertTrue(report.hasSuffix("\nend\n"), "complete report: \(report)")
        return (String(decoding: run.result.stdout, as: UTF8.self), report)
    }

    /// A crash right after a deferring install: no reserve was made, the report is created by name and the
    /// crashed thread's callers come from the frame-pointer walk (libunwind is not even loaded before its warm-up).
    func testCrashBeforeFinishUnwindsByFramePointers() throws {
        let (stdout, report) = try crash("defer")
        XCTAssertEqual(stdout, "reserve 0 libunwind 0\n")
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertGreaterThanOrEqual(methods.count, 3, "vk_null, main and libc's caller: \(report)")
        XCTAssertEqual(Set(methods.dropFirst()), ["fp"], report)
    }

    /// After vaka_crash_finish_install (twice: the second does nothing) the reserve exists, libunwind is loaded and
    /// the handler unwinds with it (`cfi`), as after an install without deferral.
    func testCrashAfterFinishUsesReserveAndCFI() throws {
        for mode in ["finish", "now"] {
            let (stdout, report) = try crash(mode)
            XCTAssertEqual(stdout, mode == "finish" ? "reserve 0 libunwind 0\nreserve 1 libunwind 1\n" : "reserve 1 libunwind 1\n", mode)
            let methods = frameMethods(report)
            XCTAssertEqual(methods.first, "context", report)
            XCTAssertEqual(Set(methods.dropFirst()), ["cfi"], "\(mode): \(report)")
        }
    }

    /// `deferredpipe [finish]`: installs with `defer_preparation` (process_vm_readv works here), prints whether
    /// the handler's safe memory reader has its fallback pipe and whether the handler's image list has libunwind in it, runs
    /// vaka_crash_finish_install() with `finish` and prints both again; then a seccomp filter refuses
    /// process_vm_readv (EPERM), as a sandbox set up after start would, and the program writes through NULL. Built
    /// with the runtime's own headers: the image list is read from `vaka_state`.
    static let pipeSource = """
    #include "sig_state.h"
    #include <sys/stat.h>
    /* 1 when the handler's safe memory reader has its fallback pipe, and it is open in this process. */
    static int reader_pipe(void) {
        struct stat st;
        return vaka_state.reader.pipe_w >= 0 && fstat(vaka_state.reader.pipe_w, &st) == 0 && S_ISFIFO(st.st_mode);
    }
    static int cached_libunwind(void) {
        vaka_image_cache *cache = atomic_load(&vaka_state.images);
        int found = 0;
        for (size_t i = 0; cache != NULL && i < cache->count; i++) {
            char path[4097];
            size_t n = cache->images[i].path_len < 4096 ? cache->images[i].path_len : 4096;
            memcpy(path, cache->pool + cache->images[i].path_off, n);
            path[n] = '\\0';
            found |= strstr(path, "/libunwind.so") != NULL;
        }
        return found;
    }
    int main(int argc, char **argv) {
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "deferredpipe", .defer_preparation = 1 };
        if (vaka_crash_install(&c) != 0) return 99;
        printf("pipe %d libunwind cached %d\\n", reader_pipe(), cached_libunwind());
        if (argc > 1 && strcmp(argv[1], "finish") == 0) {
            if (vaka_crash_finish_install() != 0) return 98;
            printf("pipe %d libunwind cached %d\\n", reader_pipe(), cached_libunwind());
        }
        if (vk_seccomp_one(SYS_process_vm_readv, SECCOMP_RET_ERRNO | EPERM) != 0) return 97;
        fflush(stdout);
        vk_null();
        return 0;
    }
    """

    /// A deferring install leaves the safe memory reader's fallback pipe to vaka_crash_finish_install when
    /// process_vm_readv works: none before it, one after it, and a crash whose process_vm_readv is refused after
    /// start reads memory through that pipe (`memory_read pipe`); before it such a crash reads none. The finish
    /// also collects the image list again, so libunwind (opened by the finish) is in it.
    func testFinishMakesTheReaderPipeAndCachesLibunwind() throws {
        let sources = Paths.repositoryRoot.appendingPathComponent("Sources/VakaCrash").path
        let program = try RuntimeProgram.build("deferredpipe", Self.pipeSource, extraFlags: ["-I", sources])
        for mode in ["finish", "defer"] {
            let run = try RuntimeProgram.run(program, [mode], timeout: 30)
            XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", "\(mode): \(run.result.stderrTail())")
            XCTAssertEqual(run.reports, ["deferredpipe.crash"], mode)
            let report = run.onlyReport
            XCTAssertTrue(report.hasSuffix("\nend\n"), "\(mode): complete report: \(report)")
            let stdout = String(decoding: run.result.stdout, as: UTF8.self)
            if mode == "finish" {
                XCTAssertEqual(stdout, "pipe 0 libunwind cached 0\npipe 1 libunwind cached 1\n")
                XCTAssertEqual(reportValue(report, "memory_read"), "pipe", report)
            } else {
                XCTAssertEqual(stdout, "pipe 0 libunwind cached 0\n")
                XCTAssertEqual(reportValue(report, "memory_read"), "none", report)
            }
        }
    }

    /// The plugin of ``testFinishInstallWhileAPluginConstructorCallsVaka``: its constructor (run by the dynamic
    /// linker with its load lock held) writes one byte to the descriptor in `$VK_PLUGIN_FD`, sleeps, then asks
    /// Vaka to list the images again (as a plugin that makes itself known does) and says how that went.
    static let pluginSource = """
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <unistd.h>
    int vaka_crash_refresh_images(void);
    __attribute__((constructor)) static void plugin_init(void) {
        const char *fd = getenv("VK_PLUGIN_FD");
        if (fd != NULL) (void)!write(atoi(fd), "x", 1);
        usleep(300 * 1000);
        const char *line = vaka_crash_refresh_images() > 0 ? "refreshed\\n" : "refresh failed\\n";
        (void)!write(1, line, strlen(line));
    }
    """

    /// `pluginfinish <plugin>`: installs with `defer_preparation`, starts a thread that dlopens the plugin, and
    /// runs vaka_crash_finish_install() as soon as the plugin's constructor has begun; then writes through NULL.
    static let pluginFinishSource = RuntimeProgram.pluginThreadFunction + """
    int main(int argc, char **argv) {
        if (argc < 2) return 90;
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "pluginfinish", .defer_preparation = 1 };
        if (vaka_crash_install(&c) != 0) return 99;
        pthread_t thread;
        int started = start_plugin_thread(argv[1], &thread);
        if (started != 0) return started;
        int rc = vaka_crash_finish_install();
        void *plugin = NULL;
        pthread_join(thread, &plugin);
        printf("finished %d plugin %s\\n", rc, plugin != NULL ? "loaded" : "missing");
        fflush(stdout);
        vk_null();
        return 0;
    }
    """

    /// vaka_crash_finish_install (the `vaka.start` thread's job) while another thread is inside dlopen, in a
    /// library constructor that calls Vaka: the finish opens libunwind, whose dlopen waits for the dynamic
    /// linker's lock that thread holds, so it must not hold Vaka's install lock meanwhile (the constructor's
    /// vaka_crash_refresh_images waits for that lock: both would wait for good). Both go through, and the crash
    /// after them is unwound with libunwind.
    func testFinishInstallWhileAPluginConstructorCallsVaka() throws {
        let plugin = try RuntimeProgram.buildLibrary("finishplugin", Self.pluginSource)
        let program = try RuntimeProgram.build("pluginfinish", Self.pluginFinishSource, extraFlags: ["-rdynamic"])
        let run = try RuntimeProgram.run(program, [plugin.path], timeout: 20)
        XCTAssertFalse(run.result.timedOut, "hung: \(run.result.stderrTail())")
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "refreshed\nfinished 0 plugin loaded\n")
        XCTAssertEqual(run.reports, ["pluginfinish.crash"])
        let report = run.onlyReport
        XCTAssertTrue(report.hasSuffix("\nend\n"), "complete report: \(report)")
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertEqual(Set(methods.dropFirst()), ["cfi"], report)
    }

    /// `crashplugin <plugin>`: installs with `defer_preparation`, starts a thread that dlopens a plugin whose
    /// constructor writes through NULL after a pause, and meanwhile runs vaka_crash_finish_install(), whose dlopen
    /// of libunwind waits for the dynamic linker's lock that the crashing constructor holds.
    static let crashPluginSource = """
    #include <dlfcn.h>
    static void *open_plugin(void *path) { return dlopen((const char *)path, RTLD_NOW | RTLD_LOCAL); }
    int main(int argc, char **argv) {
        if (argc < 2) return 90;
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "crashplugin", .defer_preparation = 1 };
        if (vaka_crash_install(&c) != 0) return 99;
        pthread_t thread;
        if (pthread_create(&thread, NULL, open_plugin, argv[1]) != 0) return 92;
        usleep(100 * 1000);
        vaka_crash_finish_install();
        pthread_join(thread, NULL);
        return 0;
    }
    """

    /// A crash inside a library constructor (its thread holds the dynamic linker's lock) while the finish of a
    /// deferred install waits in dlopen for that lock: the report is written whole, its frames by frame pointers
    /// (libunwind is not loaded yet) reaching the constructor, and the process dies by the signal.
    func testCrashInAConstructorWhileFinishInstallWaitsInDlopen() throws {
        let plugin = try RuntimeProgram.buildLibrary("crashplugin", """
        #include <unistd.h>
        static int *volatile nowhere = 0;
        __attribute__((constructor, noinline)) void crash_plugin_init(void) {
            usleep(400 * 1000);
            *nowhere = 1;
        }
        """)
        let program = try RuntimeProgram.build("crashplugin", Self.crashPluginSource)
        let run = try RuntimeProgram.run(program, [plugin.path], timeout: 20)
        XCTAssertFalse(run.result.timedOut, "hung: \(run.result.stderrTail())")
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["crashplugin.crash"])
        let report = run.onlyReport
        XCTAssertTrue(report.hasSuffix("\nend\n"), "complete report: \(report)")
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertGreaterThanOrEqual(methods.count, 2, report)
        XCTAssertFalse(methods.contains("cfi"), "libunwind was not ready: \(report)")
    }
}
