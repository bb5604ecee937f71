import Foundation
import XCTest
import VakaTestSupport

/// The named reserves in the report directory (`.reserve-0` ... `.reserve-3`, docs/crash-handling.md, "The
/// report's file"): made by the deferred part of an install (vaka_crash_finish_install) when none is free, kept
/// from run to run, taken by the next install at once (a crash right after start then renames it instead of
/// creating its report), held by one process at a time (flock), and never used when they are not a plain empty
/// file with one name.
final class NamedReserveTests: XCTestCase {
    /// `named MODE`: installs with `defer_preparation` (run id `r-MODE`), prints `reserve <n>` (the reserves it holds
    /// in the directory, named or not), then:
    /// - `keep`: vaka_crash_finish_install(), `reserve <n>` again, a normal exit;
    /// - `crash`: writes through NULL;
    /// - `finishcrash`: vaka_crash_finish_install(), `reserve <n>`, writes through NULL;
    /// - `hold`: runs itself as `crash` and then `finishcrash` (other processes while this one holds its reserve),
    ///   prints `child <signal>` for each and `reserve <n>` after them, a normal exit;
    /// - `forkcrash`: forks a child that writes through NULL, prints `child <signal>`, then writes through NULL;
    /// - `dirgone`: vaka_crash_finish_install(), then closes the report directory's descriptor (as a program that
    ///   closes descriptors it does not know), prints `closed <n>`, writes through NULL;
    /// - `reinstallfork`: vaka_crash_finish_install(), installs again (run id `r-again`, holding a second reserve
    ///   while the first install's target keeps its own), forks a child that prints `child reserve <n>` and exits, prints `reserve <n>`.
    static let source = RuntimeProgram.reservesFunction + """
    #include <fcntl.h>
    #include <spawn.h>
    #include <sys/wait.h>
    extern char **environ;
    static int child_signal(pid_t pid) {
        int status = 0;
        if (pid <= 0 || waitpid(pid, &status, 0) != pid) return -1;
        return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    }
    static int run_self(const char *self, const char *mode) {
        pid_t pid = -1;
        char *argv[] = { (char *)self, (char *)mode, NULL };
        posix_spawn_file_actions_t actions; /* its own lines are not this test's */
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
        int rc = posix_spawn(&pid, self, &actions, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&actions);
        return rc == 0 ? child_signal(pid) : -1;
    }
    int main(int argc, char **argv) {
        const char *mode = argc > 1 ? argv[1] : "";
        const char *dir = getenv("VK_DIR");
        char id[64];
        snprintf(id, sizeof id, "r-%s", mode);
        vaka_crash_config c = { .report_dir = dir, .run_id = id, .defer_preparation = 1 };
        if (vaka_crash_install(&c) != 0) return 99;
        printf("reserve %d\\n", reserves(dir));
        fflush(stdout);
        if (strcmp(mode, "keep") == 0 || strcmp(mode, "finishcrash") == 0) {
            if (vaka_crash_finish_install() != 0) return 98;
            printf("reserve %d\\n", reserves(dir));
            fflush(stdout);
            if (strcmp(mode, "keep") == 0) return 0;
        } else if (strcmp(mode, "hold") == 0) {
            printf("child %d\\n", run_self(argv[0], "crash"));
            printf("child %d\\n", run_self(argv[0], "finishcrash"));
            fflush(stdout);
            printf("reserve %d\\n", reserves(dir));
            return 0;
        } else if (strcmp(mode, "dirgone") == 0) {
            if (vaka_crash_finish_install() != 0) return 98;
            int closed = 0;
            for (int fd = 3; fd < 1024; fd++) {
                char link[64], target[4096];
                snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
                ssize_t k = readlink(link, target, sizeof target - 1);
                if (k <= 0) continue;
                target[k] = '\\0';
                if (strcmp(target, dir) == 0 && close(fd) == 0) closed++;
            }
            printf("closed %d\\n", closed);
            fflush(stdout);
        } else if (strcmp(mode, "reinstallfork") == 0) {
            if (vaka_crash_finish_install() != 0) return 98;
            vaka_crash_config again = { .report_dir = dir, .run_id = "r-again" };
            if (vaka_crash_install(&again) != 0) return 97;
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                printf("child reserve %d\\n", reserves(dir));
                fflush(stdout);
                _exit(0);
            }
            child_signal(pid);
            printf("reserve %d\\n", reserves(dir));
            return 0;
        } else if (strcmp(mode, "forkcrash") == 0) {
            pid_t pid = fork();
            if (pid == 0) vk_null();
            printf("child %d\\n", child_signal(pid));
            fflush(stdout);
        }
        vk_null();
        return 0;
    }
    """

    private struct FileState: Equatable {
        var inode: UInt64
        var size: Int64
        var allocated: Int64 // bytes (st_blocks * 512)
        var links: UInt64
    }

    private func state(_ path: String) -> FileState? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return FileState(inode: UInt64(st.st_ino), size: Int64(st.st_size), allocated: Int64(st.st_blocks) * 512,
                         links: UInt64(st.st_nlink))
    }

    private func names(_ dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).sorted()
    }

    /// Runs `named MODE` with its reports in `dir` (kept from run to run); checks how it ended.
    @discardableResult
    private func run(_ program: URL, _ mode: String, in dir: URL, outcome: String) throws -> String {
        let run = try RuntimeProgram.run(program, [mode], timeout: 30, environment: ["VK_DIR": dir.path])
        XCTAssertEqual(run.result.outcome, outcome, "\(mode): \(run.result.stderrTail())")
        return String(decoding: run.result.stdout, as: UTF8.self)
    }

    /// The `named` program built, a fresh report directory named after `label`, and the reserve a first launch
    /// (`keep`) left in it.
    private func directoryWithAReserve(_ label: String) throws -> (program: URL, dir: URL, reserve: FileState) {
        let program = try RuntimeProgram.build("named", Self.source)
        let dir = Paths.freshDirectory(label)
        try run(program, "keep", in: dir, outcome: "exit 0")
        return (program, dir, try XCTUnwrap(state(dir.appendingPathComponent(".reserve-0").path)))
    }

    private func reportIsComplete(_ path: String, _ label: String) {
        let report = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        XCTAssertTrue(report.hasPrefix("VAKA-CRASH "), "\(label): \(report)")
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV", "\(label): \(report)")
        XCTAssertTrue(report.hasSuffix("\nend\n"), "\(label): complete report: \(report)")
    }

    /// A launch that ran its deferred part leaves `.reserve-0`: empty, its blocks allocated (64 KiB past its end),
    /// mode 0600. The next launch takes that same file (no second one is made) and a crash right after its install,
    /// before any deferred work, renames it to the report: the report is that inode, with the reserve's blocks. The
    /// launch after makes a new `.reserve-0`.
    func testACrashRightAfterStartRenamesTheReserveALaunchLeft() throws {
        let program = try RuntimeProgram.build("named", Self.source)
        let dir = Paths.freshDirectory("named-reserve")
        XCTAssertEqual(try run(program, "keep", in: dir, outcome: "exit 0"), "reserve 0\nreserve 1\n")
        XCTAssertEqual(names(dir), [".reserve-0"])
        let reserve = dir.appendingPathComponent(".reserve-0").path
        let made = try XCTUnwrap(state(reserve))
        XCTAssertEqual(made.size, 0)
        XCTAssertGreaterThanOrEqual(made.allocated, 64 * 1024, "the reserve's blocks past its end")
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: reserve)[.posixPermissions] as? Int, 0o600)

        XCTAssertEqual(try run(program, "keep", in: dir, outcome: "exit 0"), "reserve 1\nreserve 1\n",
                       "taken at install: the deferred part has none to make")
        XCTAssertEqual(names(dir), [".reserve-0"])
        XCTAssertEqual(state(reserve), made, "the same file, untouched")

        XCTAssertEqual(try run(program, "crash", in: dir, outcome: "signal 11 (SIGSEGV)"), "reserve 1\n")
        XCTAssertEqual(names(dir), ["r-crash.crash"])
        let report = dir.appendingPathComponent("r-crash.crash").path
        reportIsComplete(report, "crash")
        let renamed = try XCTUnwrap(state(report))
        XCTAssertEqual(renamed.inode, made.inode, "the report is the reserve, renamed")
        XCTAssertGreaterThanOrEqual(renamed.allocated, 64 * 1024)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: report)[.posixPermissions] as? Int, 0o600)

        try FileManager.default.removeItem(atPath: report) // the next launch's crash join
        XCTAssertEqual(try run(program, "keep", in: dir, outcome: "exit 0"), "reserve 0\nreserve 1\n")
        XCTAssertEqual(names(dir), [".reserve-0"])
        XCTAssertNotEqual(state(reserve)?.inode, made.inode, "a new one")

        // One without its blocks (made on a full disk, or by hand) gets them from the next launch's deferred part.
        try FileManager.default.removeItem(atPath: reserve)
        XCTAssertTrue(FileManager.default.createFile(atPath: reserve, contents: Data(), attributes: [.posixPermissions: 0o600]))
        let bare = try XCTUnwrap(state(reserve))
        XCTAssertEqual(bare.allocated, 0)
        XCTAssertEqual(try run(program, "keep", in: dir, outcome: "exit 0"), "reserve 1\nreserve 1\n")
        let grown = try XCTUnwrap(state(reserve))
        XCTAssertEqual(grown.inode, bare.inode)
        XCTAssertEqual(grown.size, 0)
        XCTAssertGreaterThanOrEqual(grown.allocated, 64 * 1024, "given its blocks")
    }

    /// A program that closes the report directory's descriptor after start: the crash still renames the reserve,
    /// by the directory's path.
    func testTheReserveIsRenamedByPathWhenTheDirectoryDescriptorIsGone() throws {
        let (program, dir, made) = try directoryWithAReserve("named-reserve-dirgone")
        XCTAssertEqual(try run(program, "dirgone", in: dir, outcome: "signal 11 (SIGSEGV)"), "reserve 1\nclosed 1\n")
        XCTAssertEqual(names(dir), ["r-dirgone.crash"])
        XCTAssertEqual(state(dir.appendingPathComponent("r-dirgone.crash").path)?.inode, made.inode, "the reserve, renamed")
        reportIsComplete(dir.appendingPathComponent("r-dirgone.crash").path, "dirgone")
    }

    /// A second install in one process keeps the first install's target (and its reserve) open, in case a crash
    /// was reading it: two reserves held. A fork child holds neither (its copies are closed), so it never keeps a
    /// slot locked after its parent is gone.
    func testAForkChildAfterAReinstallHoldsNoReserve() throws {
        let program = try RuntimeProgram.build("named", Self.source)
        let dir = Paths.freshDirectory("named-reserve-reinstall")
        XCTAssertEqual(try run(program, "reinstallfork", in: dir, outcome: "exit 0"),
                       "reserve 0\nchild reserve 0\nreserve 2\n")
        XCTAssertEqual(names(dir), [".reserve-0", ".reserve-1"])
    }

    /// A reserve is one process's: while `hold` holds `.reserve-0`, a process that crashes right after its install
    /// finds no other and creates its report by name (a file of its own, without the reserve's blocks), and one
    /// that ran its deferred part first makes and renames `.reserve-1`. `.reserve-0` stays the holder's throughout.
    func testAReserveHeldByAnotherProcessIsNotTaken() throws {
        let (program, dir, made) = try directoryWithAReserve("named-reserve-held")
        let reserve = dir.appendingPathComponent(".reserve-0").path
        XCTAssertEqual(try run(program, "hold", in: dir, outcome: "exit 0"), "reserve 1\nchild 11\nchild 11\nreserve 1\n")
        XCTAssertEqual(names(dir), [".reserve-0", "r-crash.crash", "r-finishcrash.crash"])
        XCTAssertEqual(state(reserve), made, "the holder's reserve, untouched")
        let byName = try XCTUnwrap(state(dir.appendingPathComponent("r-crash.crash").path))
        XCTAssertNotEqual(byName.inode, made.inode)
        XCTAssertLessThan(byName.allocated, 64 * 1024, "created by name: no reserve's blocks")
        let second = try XCTUnwrap(state(dir.appendingPathComponent("r-finishcrash.crash").path))
        XCTAssertNotEqual(second.inode, made.inode)
        XCTAssertGreaterThanOrEqual(second.allocated, 64 * 1024, "`.reserve-1`, made by its deferred part, renamed")
        reportIsComplete(dir.appendingPathComponent("r-crash.crash").path, "crash")
        reportIsComplete(dir.appendingPathComponent("r-finishcrash.crash").path, "finishcrash")
    }

    /// A fork child shares its parent's open reserve but never writes into it: its report is a file of its own
    /// (`<run_id>-<pid>.crash`), and the parent's crash after it still renames the reserve.
    func testAForkChildLeavesTheParentsReserve() throws {
        let (program, dir, made) = try directoryWithAReserve("named-reserve-fork")
        XCTAssertEqual(try run(program, "forkcrash", in: dir, outcome: "signal 11 (SIGSEGV)"), "reserve 1\nchild 11\n")
        let reports = names(dir)
        XCTAssertEqual(reports.count, 2, "\(reports)")
        XCTAssertTrue(reports.contains("r-forkcrash.crash"), "\(reports)")
        let child = try XCTUnwrap(reports.first { $0.hasPrefix("r-forkcrash-") && $0.hasSuffix(".crash") }, "\(reports)")
        XCTAssertNotEqual(state(dir.appendingPathComponent(child).path)?.inode, made.inode, "the child's own file")
        XCTAssertEqual(state(dir.appendingPathComponent("r-forkcrash.crash").path)?.inode, made.inode,
                       "the parent's report is its reserve")
        reportIsComplete(dir.appendingPathComponent(child).path, "child")
        reportIsComplete(dir.appendingPathComponent("r-forkcrash.crash").path, "parent")
    }

    /// The disk fills up between two launches (a 128 KiB tmpfs in a private mount namespace, filled after the
    /// first): the reserve the first left still has its blocks, so the second, which crashes right after its
    /// install (no deferred part, which on a full disk could get no blocks), writes its whole report. Needs root.
    func testAFullDiskBeforeStartStillTakesTheWholeReport() throws {
        let program = try RuntimeProgram.build("named", Self.source)
        let (out, result) = try RuntimeProgram.runInPrivateMounts("named-reserve-full",
            "set -e; mount -t tmpfs -o size=128k tmpfs \"$MNT\"; mkdir \"$MNT/r\"; " +
            "VK_DIR=\"$MNT/r\" '\(program.path)' keep; dd if=/dev/zero of=\"$MNT/fill\" bs=4k 2>/dev/null || true; " +
            "df -k \"$MNT\" | tail -1; VK_DIR=\"$MNT/r\" '\(program.path)' crash || true; ls -a \"$MNT/r\"; " +
            "echo REPORT; cat \"$MNT/r/r-crash.crash\"")
        XCTAssertTrue(out.contains(" 100% "), "the file system was not full:\n\(out)")
        XCTAssertFalse(out.contains(".reserve-0"), "renamed to the report:\n\(out)")
        let report = out.components(separatedBy: "REPORT\n").last ?? ""
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV", "\(out)\n\(result.stderrTail())")
        XCTAssertTrue(report.contains("\nthreads ") && report.hasSuffix("\nend\n"), "the whole report:\n\(out)")
    }

    /// Whatever sits at a reserve's name and is not a plain empty file with one name is never opened for writing,
    /// renamed or changed: a symlink (to a file elsewhere), a FIFO, a directory, a file with bytes in it, an empty
    /// file with a second name. With all four names taken so, the install keeps an unnamed reserve (O_TMPFILE) and
    /// a crash right after start creates its report by name.
    func testWhatIsNotAPlainEmptyFileIsLeftAlone() throws {
        let program = try RuntimeProgram.build("named", Self.source)
        for variant in ["hardlink", "nonempty"] {
            let dir = Paths.freshDirectory("named-reserve-odd-\(variant)")
            let outside = Paths.freshDirectory("named-reserve-outside-\(variant)")
            let target = outside.appendingPathComponent("target")
            try Data("outside".utf8).write(to: target)
            try FileManager.default.createSymbolicLink(atPath: dir.appendingPathComponent(".reserve-0").path,
                                                       withDestinationPath: target.path)
            XCTAssertEqual(mkfifo(dir.appendingPathComponent(".reserve-1").path, 0o600), 0)
            try FileManager.default.createDirectory(at: dir.appendingPathComponent(".reserve-2"), withIntermediateDirectories: false)
            let last = dir.appendingPathComponent(".reserve-3").path
            if variant == "nonempty" {
                try Data("data".utf8).write(to: URL(fileURLWithPath: last))
            } else {
                let other = outside.appendingPathComponent("other-name").path
                XCTAssertTrue(FileManager.default.createFile(atPath: other, contents: Data()))
                XCTAssertEqual(link(other, last), 0)
            }
            let before = [".reserve-0", ".reserve-1", ".reserve-2", ".reserve-3"].map { state(dir.appendingPathComponent($0).path) }

            XCTAssertEqual(try run(program, "keep", in: dir, outcome: "exit 0"), "reserve 0\nreserve 1\n",
                           "\(variant): an unnamed reserve instead")
            XCTAssertEqual(try run(program, "crash", in: dir, outcome: "signal 11 (SIGSEGV)"), "reserve 0\n", variant)
            XCTAssertEqual(names(dir), [".reserve-0", ".reserve-1", ".reserve-2", ".reserve-3", "r-crash.crash"], variant)
            reportIsComplete(dir.appendingPathComponent("r-crash.crash").path, variant)
            let after = [".reserve-0", ".reserve-1", ".reserve-2", ".reserve-3"].map { state(dir.appendingPathComponent($0).path) }
            XCTAssertEqual(after, before, "\(variant): left as they were")
            XCTAssertEqual(try String(contentsOf: target, encoding: .utf8), "outside", variant)
            if variant == "nonempty" { XCTAssertEqual(try String(contentsOfFile: last, encoding: .utf8), "data") }
        }
    }
}
