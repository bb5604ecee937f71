import Foundation
import XCTest
import VakaTestSupport

/// Swift's backtracer, which runs right after Vaka's crash handler in the same process, suspends every other
/// thread with SIGUSR1, SIGUSR2 or SIGPROF (the first one the thread does not block) and prints
/// `swift-runtime: failed to suspend thread N ...` for a thread that blocks all three. A thread of Vaka's that
/// has just answered the crash-time thread round may still be in the thread signal's handler then, whose mask
/// must leave SIGPROF unblocked.
final class SwiftBacktracerSuspendTests: XCTestCase {
    func testSwiftsBacktracerSuspendsVakasThreadsAfterTheThreadRound() throws {
        var problems: [String] = []
        // --settle: start's work is over (no thread being created), the mover waits in its condition.
        for index in 0..<10 {
            let work = Paths.freshDirectory("swift-suspend-\(index)")
            let storage = work.appendingPathComponent("storage")
            let child = try runChild(Paths.harness, ["swift-force-unwrap", "--settle", "--storage", storage.path],
                                     label: "swift-force-unwrap", outputDirectory: work,
                                     environment: ["SWIFT_BACKTRACE": "enable=yes,interactive=no,color=no,images=none"],
                                     timeout: 60)
            XCTAssertEqual(child.outcome, "signal 4 (SIGILL)", child.stderrTail())
            XCTAssertEqual(ScenarioRuns.crashFiles(in: storage).count, 1, child.stderrTail())
            XCTAssertTrue(child.stderrText.contains("Thread 1 \"vaka.journal\""), "Swift's backtrace lists the mover:\n\(child.stderrText)")
            if let line = child.stderrText.split(separator: "\n").first(where: { $0.contains("failed to suspend thread") }) {
                problems.append("run \(index): \(line)")
            }
        }
        XCTAssertEqual(problems, [], problems.joined(separator: "\n"))
    }
}
