import XCTest
import VakaTestSupport

/// A program that can create no thread at all (its user at `RLIMIT_NPROC`: `pthread_create` fails with `EAGAIN`),
/// run as `nobody` with the limit at 1 (root is not held to it, so these tests need root to switch user): Vaka
/// starts, records, delivers to the outbox and exits without threads of its own, and a crash is still reported.
final class ThreadExhaustionTests: XCTestCase {
    private var root: URL?
    override func tearDown() { if let root { try? FileManager.default.removeItem(at: root) } }

    /// A storage directory `nobody` owns, and the harness run as `nobody` under `RLIMIT_NPROC` 1 (at most 30 s).
    private func runWithoutThreads(_ arguments: [String]) throws -> (child: Child, storage: URL) {
        guard getuid() == 0 else { throw XCTSkip("needs root: the harness runs as nobody under RLIMIT_NPROC 1") }
        let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("vaka-nproc-\(UUID().uuidString)")
        root = dir
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        XCTAssertEqual(chmod(dir.path, 0o755), 0)
        let storage = dir.appendingPathComponent("storage")
        try FileManager.default.createDirectory(at: storage, withIntermediateDirectories: true)
        XCTAssertEqual(chown(storage.path, 65534, 65534), 0)
        let child = try RunningChild(URL(fileURLWithPath: "/usr/bin/setpriv"),
                                     ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/prlimit", "--nproc=1", "--",
                                      Paths.harness.path] + arguments + ["--storage", storage.path],
                                     environment: ["VAKA_DEBUG": "1"], logDirectory: dir)
        let result = try XCTUnwrap(child.wait(timeout: 30), "vaka-crashme \(arguments) without threads ran longer than 30 s (killed)")
        return (result, storage)
    }

    /// Start, a captured message and the exit: no hang at the exit (it waited for a `vaka.close` or start thread
    /// that was never created), the message and the run's `exited` session update in the outbox.
    func testStartCaptureAndExitWithoutThreads() throws {
        let (child, storage) = try runWithoutThreads(["message"])
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        XCTAssertTrue(child.stderr.contains("no thread could be created for Vaka's start"), child.stderr)
        let envelopes = try readOutbox(storage)
        XCTAssertTrue(envelopes.flatMap(\.events).contains { ($0["logentry"] as? [String: Any])?["formatted"] as? String == "Cache rebuilt" },
                      "\(envelopes.map(\.items))")
        XCTAssertTrue(envelopes.flatMap(\.sessions).contains { $0["status"] as? String == "exited" }, "\(envelopes.map(\.items))")
    }

    /// A crash in such a program: its report is written, whole.
    func testCrashWithoutThreadsIsReported() throws {
        let (child, storage) = try runWithoutThreads(["null-deref"])
        XCTAssertEqual(child.outcome, "signal \(SIGSEGV)", child.stderr)
        let crashes = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("crashes").path)
            .filter { $0.hasSuffix(".crash") }
        XCTAssertEqual(crashes.count, 1, "\(crashes)")
        let report = try String(contentsOfFile: storage.appendingPathComponent("crashes/\(crashes[0])").path, encoding: .utf8)
        XCTAssertTrue(report.contains("\nsignal 11 SIGSEGV\n") && report.hasSuffix("\nend\n"), report)
    }
}
