import Foundation
import XCTest
import VakaTestSupport

/// `make_report_dir` (include/vaka/vaka_crash.h), the C runtime alone: install accepts a report directory that
/// does not exist yet, a crash before `vaka_crash_open_report_dir()` makes it (and every missing directory above
/// it, each 0700 whatever the umask) and writes its report there, and `vaka_crash_open_report_dir()` refuses a
/// directory still missing, then opens it once made, so that `vaka_crash_finish_install()` makes the reserve in it.
final class MissingReportDirectoryTests: XCTestCase {
    /// `missing MODE`: the report directory is `$VK_DIR/a/b/crashes` (none of it there); umask 0277 (mkdir's
    /// 0700 would give 0500). MODE `crash`: install with `make_report_dir`, crash. `open`: install, print
    /// `open <rc>` of vaka_crash_open_report_dir() (still missing), make the directories (mkdir), print `open <rc>`
    /// again, run vaka_crash_finish_install() and print `reserve <n>` (unnamed files held in the directory), crash.
    /// `noflag`: install without `make_report_dir`, print `install <rc>`, exit 0. `umask`: umask 0777 from the
    /// start, install with `make_report_dir`, crash (the report is created by its path). `reserve`: the
    /// directories made first (umask 0077), then umask 0777, install, vaka_crash_open_report_dir(),
    /// vaka_crash_finish_install() (its reserve made under that umask), crash (the report is the reserve).
    /// `finishfirst`: install, vaka_crash_finish_install() while the directory is still missing (`reserve <n>`), make
    /// the directories, vaka_crash_open_report_dir() (`open <rc>`, `reserve <n>`), crash.
    static let source = RuntimeProgram.reservesFunction + """
    #include <sys/stat.h>
    int main(int argc, char **argv) {
        const char *mode = argc > 1 ? argv[1] : "";
        char a[4096], b[4096], dir[4096];
        snprintf(a, sizeof a, "%s/a", getenv("VK_DIR"));
        snprintf(b, sizeof b, "%s/b", a);
        snprintf(dir, sizeof dir, "%s/crashes", b);
        umask(strcmp(mode, "umask") == 0 ? 0777 : 0277);
        if (strcmp(mode, "reserve") == 0) {
            umask(0077);
            if (mkdir(a, 0700) || mkdir(b, 0700) || mkdir(dir, 0700)) return 98;
            umask(0777);
        }
        vaka_crash_config c = { .report_dir = dir, .run_id = "missing", .defer_preparation = 1,
                                .make_report_dir = strcmp(mode, "noflag") != 0 };
        int rc = vaka_crash_install(&c);
        if (strcmp(mode, "noflag") == 0) { printf("install %d\\n", rc); return 0; }
        if (rc) { fprintf(stderr, "install failed %d\\n", rc); return 99; }
        if (strcmp(mode, "open") == 0) {
            printf("open %d\\n", vaka_crash_open_report_dir());
            umask(0077);
            if (mkdir(a, 0700) || mkdir(b, 0700) || mkdir(dir, 0700)) return 98;
            printf("open %d\\n", vaka_crash_open_report_dir());
            printf("open %d\\n", vaka_crash_open_report_dir()); /* a second call does nothing */
            if (vaka_crash_finish_install() != 0) return 97;
            printf("reserve %d\\n", reserves(dir));
        }
        if (strcmp(mode, "reserve") == 0) {
            if (vaka_crash_open_report_dir() != 0 || vaka_crash_finish_install() != 0) return 97;
            printf("reserve %d\\n", reserves(dir));
        }
        if (strcmp(mode, "finishfirst") == 0) {
            if (vaka_crash_finish_install() != 0) return 97;
            printf("reserve %d\\n", reserves(dir));
            umask(0077);
            if (mkdir(a, 0700) || mkdir(b, 0700) || mkdir(dir, 0700)) return 98;
            printf("open %d\\n", vaka_crash_open_report_dir());
            printf("reserve %d\\n", reserves(dir));
        }
        fflush(stdout);
        vk_null();
        return 0;
    }
    """

    private func mode(_ url: URL) -> mode_t? {
        var info = stat()
        guard stat(url.path, &info) == 0 else { return nil }
        return info.st_mode & 0o7777
    }

    private func crash(_ mode: String) throws -> (stdout: String, crashes: URL) {
        let program = try RuntimeProgram.build("missing", Self.source)
        let run = try RuntimeProgram.run(program, [mode], timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let crashes = run.directory.appendingPathComponent("a/b/crashes")
        let report = (try? String(contentsOf: crashes.appendingPathComponent("missing.crash"), encoding: .utf8)) ?? ""
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV", "\(mode): \(report)")
        XCTAssertTrue(report.hasSuffix("\nend\n"), "\(mode): complete report: \(report)")
        return (String(decoding: run.result.stdout, as: UTF8.self), crashes)
    }

    /// A crash before the directory was made: the handler makes `a`, `a/b` and `a/b/crashes`, each 0700 although
    /// the umask (0277) would have given 0500, and writes the report there.
    func testCrashMakesTheMissingDirectories() throws {
        let (_, crashes) = try crash("crash")
        let b = crashes.deletingLastPathComponent()
        for dir in [b.deletingLastPathComponent(), b, crashes] { XCTAssertEqual(mode(dir), 0o700, dir.path) }
    }

    /// vaka_crash_open_report_dir: ENOENT (2) while the directory is missing, 0 once made (and again: nothing to
    /// do); the reserve is then made in it, and the crash's report is written there.
    func testOpenReportDirectoryOnceMade() throws {
        let (stdout, _) = try crash("open")
        XCTAssertEqual(stdout, "open \(ENOENT)\nopen 0\nopen 0\nreserve 1\n")
    }

    /// The other order (a program that runs vaka_crash_finish_install before the directory exists, as the harness
    /// may on a first run): no reserve while the directory is missing, one made when vaka_crash_open_report_dir opens
    /// it, and the crash's report is that reserve (its blocks past its end).
    func testOpenReportDirectoryAfterFinishStillMakesTheReserve() throws {
        let (stdout, crashes) = try crash("finishfirst")
        XCTAssertEqual(stdout, "reserve 0\nopen 0\nreserve 1\n")
        var st = stat()
        XCTAssertEqual(stat(crashes.appendingPathComponent("missing.crash").path, &st), 0)
        XCTAssertGreaterThanOrEqual(Int(st.st_blocks) * 512, 64 * 1024, "the report is the reserve")
    }

    /// The report is the owner's to read at the next launch whatever the umask: 0600 under umask 0777, created
    /// by its path in the directories the handler made, or linked from the reserve made under that umask.
    func testReportIsPrivateNotUnreadableUnderAnyUmask() throws {
        for mode in ["umask", "reserve"] {
            let (stdout, crashes) = try crash(mode)
            if mode == "reserve" { XCTAssertEqual(stdout, "reserve 1\n") }
            XCTAssertEqual(self.mode(crashes.appendingPathComponent("missing.crash")), 0o600, mode)
            XCTAssertEqual(self.mode(crashes), 0o700, mode)
        }
    }

    /// Without `make_report_dir` a missing directory is refused as before (ENOENT).
    func testMissingDirectoryWithoutTheFlagIsRefused() throws {
        let program = try RuntimeProgram.build("missing", Self.source)
        let run = try RuntimeProgram.run(program, ["noflag"], timeout: 30)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "install \(ENOENT)\n")
    }
}
