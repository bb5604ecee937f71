import Foundation
import XCTest
import VakaTestSupport

/// The report file at crash time: the descriptor limit reached, the crashes directory removed or read-only, a
/// full file system (with and without survived signals using the reserve), and the disk a kept report holds.
/// Each test is a small C program compiled against the runtime sources (``RuntimeProgram``), run with Vaka
/// and, where the comparison matters, without it (`$VK_NOVAKA`). The rule checked: one report where the docs
/// promise one, the same termination as without Vaka, no hang, and the app never dies because of Vaka.
final class ReportFileAtCrashTimeTests: XCTestCase {
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
    /// the storage, `rm -rf` + `mkdir`: the named reserve install made in it goes too). The descriptor opened at
    /// install names the deleted directory: renaming the reserve and openat fail with ENOENT, and the report is
    /// created by the absolute path (which exists again).
    func testReportDirectoryRecreatedAfterStartStillGivesAReport() throws {
        let program = try RuntimeProgram.build("adv-recreate", """
        #include <dirent.h>
        #include <sys/stat.h>
        int main(void) {
            vk_start("advrecreate");
            const char *d = getenv("VK_DIR");
            DIR *dir = opendir(d);
            struct dirent *e;
            int had = 0;
            while (dir != NULL && (e = readdir(dir)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", d, e->d_name);
                if (unlink(path) != 0) { perror("unlink"); return 5; }
                had++;
            }
            if (dir != NULL) closedir(dir);
            if (had != 1) { fprintf(stderr, "expected the reserve alone, found %d files\\n", had); return 6; }
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
        let (out, result) = try RuntimeProgram.runInPrivateMounts("adv-full-run",
            "set -e; mount -t tmpfs -o size=64k tmpfs \"$MNT\"; mkdir \"$MNT/r\"; " +
            "VK_DIR=\"$MNT/r\" '\(program.path)' || true; ls -l \"$MNT/r\"; cat \"$MNT/r/advfull.crash\"")
        XCTAssertTrue(out.contains(" 100% "), "the file system was not full:\n\(out)")
        XCTAssertNotNil(reportValue(out, "signal"), "no header in the report:\n\(out)\n\(result.stderrTail())")
    }

    /// Storage whose `crashes/` already exists (mode 0700) on a file system that is now read-only (remounted
    /// `ro`, a read-only bind mount, a full-disk protection...). `Vaka.start` accepts it without a word (an
    /// existing 0700 directory is fine as it is; the O_PATH open needs no write permission), so the harness
    /// crashes with no report and nothing on stderr. docs/crash-handling.md promises one `[vaka]` line whenever
    /// crash reporting cannot work; a writability probe at install gives it. Needs root.
    func testReadOnlyCrashesDirectoryIsSaidOnStderr() throws {
        let (_, result) = try RuntimeProgram.runInPrivateMounts("adv-ro-run",
            "set -e; mount -t tmpfs -o size=1m tmpfs \"$MNT\"; " +
            "mkdir -m 700 -p \"$MNT/s/crashes\"; chmod 700 \"$MNT/s\"; mount -o remount,ro \"$MNT\"; " +
            "exec '\(Paths.harness.path)' null-deref --storage \"$MNT/s\"", environment: ["SWIFT_BACKTRACE": "enable=no"])
        XCTAssertEqual(result.outcome, "signal 11 (SIGSEGV)", result.stderrTail())
        XCTAssertTrue(result.stderrTail().contains("[vaka]"),
                      "crash reporting cannot work, and stderr says nothing: '\(result.stderrTail())'")
    }

    /// Full file system, and signals the process survives (a seccomp-emulated call, a handled `int3`) while
    /// another thread keeps writing (a logger on the full disk). Each survived capture unlinks its report,
    /// which frees the reserve's blocks, and only then makes a new reserve (survived(): unlinkat, then
    /// vaka_sig_make_reserve): the writer takes the freed blocks first, the new reserve gets none, and the real
    /// crash that follows leaves a 0-byte report. Without survived signals the same crash keeps its whole
    /// report (testFullFileSystemAtCrashTimeStillKeepsTheHeader). Needs root.
    func testSurvivedSignalsOnAFullDiskKeepTheReserve() throws {
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
        let (out, result) = try RuntimeProgram.runInPrivateMounts("r2-full-run",
            "set -e; mount -t tmpfs -o size=1m tmpfs \"$MNT\"; mkdir \"$MNT/r\"; " +
            "VK_DIR=\"$MNT/r\" '\(program.path)' || true; cat \"$MNT/r/r2full.crash\"")
        XCTAssertTrue(out.contains(" 100% "), "the file system was not full:\n\(out)")
        XCTAssertEqual(reportValue(out, "signal"), "11 SIGSEGV", "no header in the report:\n\(out)\n\(result.stderrTail())")
        XCTAssertTrue(out.hasSuffix("end\n"), "the report is incomplete:\n\(out)")
    }

    /// The reserve's blocks (fallocate with FALLOC_FL_KEEP_SIZE) stay allocated past the end of the linked report
    /// until it is deleted (a crash loop while offline keeps one per launch): the reserve is small enough (64 KiB)
    /// that a report holds at most its own size and that, without a truncate on the crash path.
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
