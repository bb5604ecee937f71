import Foundation
import Synchronization
import XCTest
import VakaTestSupport
import VakaCrash
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// The public facade called from several threads at once, with `start` and `close` among the calls: whatever
/// order they meet in, a running Vaka has its crash handlers installed, and no call crashes or hangs.
final class FacadeConcurrencyTests: XCTestCase {
    let dirs = ScratchDirs()

    /// A TCP port on loopback that accepts connections (the kernel's backlog) but never answers: a send to it
    /// waits for its timeout, so `close` spends its whole flush time waiting. The descriptor stays open until
    /// the returned closure is called.
    private func silentPort() throws -> (port: UInt16, done: () -> Void) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 && listen(fd, 64) == 0
            }
        }
        guard ok else { close(fd); throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }  // loopback refused: fail, never skip
        return (UInt16(bigEndian: addr.sin_port), { close(fd) })
    }

    /// `close` on one thread while `start` runs on another, `start` arriving after `close` has taken the running
    /// client but before it has finished (its flush waits for a server that never answers): the new run must
    /// keep its crash handlers. `close` uninstalls them at its very end, after giving up the lock, so the
    /// handlers `start` has just installed are removed and the new run reports no crash while `Vaka.runID`
    /// says it runs.
    func testStartDuringCloseKeepsTheNewRunsCrashHandlers() throws {
        let silent = try silentPort()
        defer { silent.done() }
        let dsn = "http://closekey@127.0.0.1:\(silent.port)/1"
        let storage = dirs.make("facade-close-start")
        let options = Vaka.Options(dsn: dsn, sessionTracking: false, storageDirectory: storage)
        Vaka.start(options)
        defer { Vaka.close(timeout: 1) }
        XCTAssertEqual(vaka_crash_is_installed(), 1, "the first start installed no crash handlers")
        let firstRun = Vaka.runID
        XCTAssertNotNil(firstRun)
        Vaka.capture(message: "pending when closing", level: .error)  // something for close to flush

        let closed = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            Vaka.close(timeout: 2)  // waits for the unanswered request (up to the 15 s request timeout)
            closed.signal()
        }
        // Wait until close has taken the client (runID gone), then start again while close is still flushing.
        let deadline = Date().addingTimeInterval(10)
        while Vaka.runID == firstRun && Date() < deadline { usleep(1_000) }
        XCTAssertNil(Vaka.runID, "close never took the running client")
        Vaka.start(options)
        XCTAssertNotNil(Vaka.runID, "the second start did not start")
        XCTAssertEqual(vaka_crash_is_installed(), 1, "right after the second start")
        XCTAssertEqual(closed.wait(timeout: .now() + 30), .success, "close did not return")

        XCTAssertNotNil(Vaka.runID, "the second run stopped")
        XCTAssertEqual(vaka_crash_is_installed(), 1,
                       "Vaka runs (runID \(Vaka.runID ?? "-")) but the concurrent close uninstalled its crash handlers")
    }

    enum FacadeError: Error { case failed }

    /// Eight threads calling capture (with a per-call scope too), setTag, addBreadcrumb (with data too),
    /// identify, setContext, setExtra, addAttachment, clearAttachments, screen, track and flush while another
    /// thread starts and closes Vaka ten times: every call returns (no deadlock, no crash) within a generous
    /// bound, and after the last close nothing is running and no crash handler is left installed.
    func testFacadeCallsFromManyThreadsWhileStartAndCloseRun() throws {
        let storage = dirs.make("facade-hammer")
        let options = Vaka.Options(sessionTracking: true, storageDirectory: storage)
        let stop = Atomic<Bool>(false)
        let group = DispatchGroup()
        for t in 0..<8 {
            group.enter()
            Thread.detachNewThread {
                var i = 0
                while !stop.load(ordering: .relaxed) {
                    switch i % 13 {
                    case 0: Vaka.capture(message: "m\(t)-\(i)", level: .warning)
                    case 1: Vaka.setTag("t\(t)", "\(i)")
                    case 2: Vaka.addBreadcrumb(category: "c", message: "\(i)")
                    case 3: Vaka.identify("user-\(t)")
                    case 4: Vaka.screen("s\(i % 3)")
                    case 5: Vaka.track("e\(t)", ["i": "\(i)"])
                    case 6: Vaka.setContext("c\(t)", ["i": .int(Int64(i))])
                    case 7: Vaka.setExtra("x\(t)", .int(Int64(i)))
                    case 8: Vaka.addBreadcrumb(Breadcrumb(category: "d", data: ["i": .int(Int64(i))]))
                    case 9: Vaka.addAttachment(data: Data("\(i)".utf8), filename: "a\(t).txt")
                    case 10: Vaka.capture(FacadeError.failed, fingerprint: ["f"]) { $0.setExtra("i", .int(Int64(i))) }
                    case 11: Vaka.clearAttachments()
                    default: _ = Vaka.flush(timeout: 0.05)
                    }
                    i += 1
                }
                group.leave()
            }
        }
        for _ in 0..<10 {
            Vaka.start(options)
            usleep(20_000)
            Vaka.close(timeout: 1)
        }
        stop.store(true, ordering: .relaxed)
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success, "a facade call did not return")
        XCTAssertNil(Vaka.runID)
        XCTAssertEqual(vaka_crash_is_installed(), 0)
    }
}
