import Foundation
import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A program's first run: `Vaka.start` on a storage directory that does not exist yet installs the crash handlers
/// without making it, and start's background thread (`vaka.start`) makes the storage directory and `crashes/`.
/// The harness's `crash-at-start` scenario reads through NULL right after `Vaka.start`, so over many runs the
/// crash lands both before that thread made the directories (the handler makes them itself) and after. Every run
/// must leave one complete report in `<storage>/crashes/`, the directories mode 0700, and the next launch must
/// send the crash as a fatal event (outbox mode).
final class FirstRunStorageTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// Crash runs per test: enough for the crash to land on both sides of the background thread's mkdir.
    static let runs = 30

    /// `st_mode & 0o7777` of `url`, or `nil` when it does not exist.
    private func mode(_ url: URL) -> mode_t? {
        var info = stat()
        guard stat(url.path, &info) == 0 else { return nil }
        return info.st_mode & 0o7777
    }

    /// The `.crash` files in `<storage>/crashes/`.
    private func reports(_ storage: URL) -> [URL] {
        let crashes = storage.appendingPathComponent("crashes")
        return ((try? FileManager.default.contentsOfDirectory(atPath: crashes.path)) ?? [])
            .filter { $0.hasSuffix(".crash") }.map { crashes.appendingPathComponent($0) }
    }

    /// Runs `crash-at-start` on `storage` (which must not exist) and checks the report and the modes.
    private func crashOnFirstRun(_ storage: URL, label: String) throws {
        XCTAssertNil(mode(storage), "\(storage.path) exists before the run")
        let child = try runHarness(["crash-at-start", "--storage", storage.path],
                                   environment: ["SWIFT_BACKTRACE": "enable=no"], logDirectory: dirs.make("logs"))
        XCTAssertEqual(child.outcome, "signal 11", "\(label): \(child.stderr.suffix(500))")
        XCTAssertFalse(child.stderr.contains("[vaka]"), "\(label): no [vaka] line: \(child.stderr.suffix(500))")
        XCTAssertEqual(mode(storage), 0o700, "\(label): storage directory")
        XCTAssertEqual(mode(storage.appendingPathComponent("crashes")), 0o700, "\(label): crashes/")
        let found = reports(storage)
        XCTAssertEqual(found.count, 1, "\(label): one report in crashes/")
        guard let report = found.first else { return }
        let text = try String(contentsOf: report, encoding: .utf8)
        let lines = text.split(separator: "\n")
        XCTAssertEqual(lines.last, "end", "\(label): a complete report")
        XCTAssertTrue(lines.contains("signal 11 SIGSEGV"), "\(label): \(lines.prefix(12))")
        XCTAssertEqual(mode(report), 0o600, "\(label): the report's mode")
    }

    /// The next launch (no scenario, outbox mode) sends the crash as a fatal SIGSEGV event and removes the report.
    private func assertDeliveredAtNextLaunch(_ storage: URL, label: String) throws {
        let child = try runHarness(["--storage", storage.path], logDirectory: dirs.make("logs"))
        XCTAssertEqual(child.outcome, "exit 0", "\(label): \(child.stderr.suffix(500))")
        let fatal = try readOutbox(storage).flatMap(\.events).filter { $0["level"] as? String == "fatal" }
        XCTAssertEqual(fatal.count, 1, "\(label): the crash is sent")
        let values = (fatal.first?["exception"] as? [String: Any])?["values"] as? [[String: Any]] ?? []
        let mechanism = values.last?["mechanism"] as? [String: Any]
        let signal = (mechanism?["meta"] as? [String: Any])?["signal"] as? [String: Any]
        XCTAssertEqual(signal?["name"] as? String, "SIGSEGV", "\(label): \(values)")
        XCTAssertEqual(reports(storage), [], "\(label): the report is joined and removed")
    }

    /// A missing storage directory (its parent exists).
    func testCrashRightAfterStartOnMissingStorageIsReported() throws {
        let base = dirs.make("first-run")
        for run in 0..<Self.runs {
            let storage = base.appendingPathComponent("s\(run)", isDirectory: true)
            try crashOnFirstRun(storage, label: "run \(run)")
            if run == 0 || run == Self.runs - 1 { try assertDeliveredAtNextLaunch(storage, label: "run \(run)") }
        }
    }

    /// A missing parent chain: `<tmp>/a/b/c` as storage, none of `a`, `b`, `c` there. Each directory made has
    /// the owner's read, write and search bits (the umask cut nothing else from 0700 here).
    func testCrashRightAfterStartOnMissingParentChainIsReported() throws {
        let base = dirs.make("first-run-chain")
        let saved = umask(0o022)
        defer { umask(saved) }
        for run in 0..<Self.runs {
            let top = base.appendingPathComponent("a\(run)", isDirectory: true)
            let storage = top.appendingPathComponent("b/c", isDirectory: true)
            try crashOnFirstRun(storage, label: "run \(run)")
            XCTAssertEqual(mode(top), 0o700, "run \(run): a")
            XCTAssertEqual(mode(top.appendingPathComponent("b")), 0o700, "run \(run): a/b")
            if run == 0 { try assertDeliveredAtNextLaunch(storage, label: "run \(run)") }
        }
    }
}
