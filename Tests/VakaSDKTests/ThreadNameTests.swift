import XCTest
import VakaTestSupport
@testable import Vaka

/// Vaka's threads carry their names (`/proc/self/task/<tid>/comm`) from their first statement on: `vaka.start`
/// (which becomes `vaka.journal`, the mover, once start's background part is done) and `vaka.delivery`.
final class ThreadNameTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// The names of this process's threads.
    private func threadNames() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { tid in
            (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .newlines)
        }
    }

    func testStartAndDeliveryThreadsAreNamedRightAfterStart() throws {
        let storage = dirs.make("names")
        // Port 9 on loopback: nothing listens (queue mode, so the delivery thread runs).
        Vaka.start(Vaka.Options(dsn: "http://k@127.0.0.1:9/1", crashReporting: false, sessionTracking: false,
                                storageDirectory: storage))
        defer { Vaka.close(timeout: 0) }
        // Read at once; a thread just created may not have run yet, so look again (each name is set by the
        // thread's first statement: without it the kernel shows the process's name for the thread's whole life).
        var names = threadNames()
        let deadline = Date().addingTimeInterval(10)
        while !(names.contains("vaka.delivery") && (names.contains("vaka.start") || names.contains("vaka.journal")))
                && Date() < deadline {
            usleep(1_000)
            names = threadNames()
        }
        XCTAssertTrue(names.contains("vaka.delivery"), "\(names)")
        XCTAssertTrue(names.contains("vaka.start") || names.contains("vaka.journal"), "\(names)")
    }
}
