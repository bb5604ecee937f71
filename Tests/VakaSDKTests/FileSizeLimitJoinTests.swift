import XCTest
import Foundation
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The launch after a crash under a file size quota (`RLIMIT_FSIZE`): the crash join's writes (the symbol
/// cache's file among them) fail with `EFBIG` instead of the app being killed by `SIGXFSZ`.
final class FileSizeLimitJoinTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// A crashed run, then a launch of the harness under a 1 KiB quota (prlimit(1); its stderr through a pipe, so
    /// that the test's log file is not under the quota): it joins the crash, symbolicates (the symbol cache's
    /// file is over 1 KiB) and exits 0; no temporary symbol cache file is left, and none over the quota.
    func testCrashJoinUnderFileSizeLimitDoesNotKillTheApp() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit") else { throw XCTSkip("needs prlimit(1)") }
        let storage = dirs.make("fsize-join")
        let logs = dirs.make("fsize-join-logs")
        let crash = try runHarness(["null-deref", "--storage", storage.path], logDirectory: logs)
        XCTAssertEqual(crash.outcome, "signal 11", crash.stderr)
        let script = "set -o pipefail; { /usr/bin/prlimit --fsize=1024 -- '\(Paths.harness.path)' --storage '\(storage.path)'; } 2>&1 | cat >&2"
        let child = try RunningChild(URL(fileURLWithPath: "/bin/bash"), ["-c", script], environment: ["VAKA_DEBUG": "1"],
                                     logDirectory: logs)
        let relaunch = try XCTUnwrap(child.wait(timeout: 60), "the relaunch hung")
        XCTAssertEqual(relaunch.outcome, "exit 0", "not killed by SIGXFSZ (bash: exit 153):\n\(relaunch.stderr)")
        XCTAssertTrue(relaunch.stderr.contains("File too large"), "the quota was hit:\n\(relaunch.stderr)")
        let cache = storage.path + "/symcache"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: cache)) ?? [] {
            XCTAssertFalse(name.hasPrefix("."), "a temporary symbol cache file is left: \(name)")
            var info = stat()
            XCTAssertEqual(stat(cache + "/" + name, &info), 0)
            XCTAssertLessThanOrEqual(info.st_size, 1024, "\(name) is over the quota")
        }
    }
}
