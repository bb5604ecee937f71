import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka

/// The thread lines of report format 2 (`threads`, `thread`, `thread_proc`, `thread_frames`): how the reader takes
/// them, and how the fatal event's `threads.values` comes out of them (order, marks, state, caps).
final class ThreadLinesTests: XCTestCase {
    static let report = """
        VAKA-CRASH 2
        run_id 5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B
        pid 100
        tid 100
        thread_name main
        arch x86_64
        executable /app/bin/app
        signal 11 SIGSEGV
        code 1 SEGV_MAPERR
        fault_addr 0x0
        register rip 0x555500001000 rsp 0x7ffd00000f00 eflags 0x10246
        frame 0x555500001000 context
        frame 0x555500002000 cfi
        image 0x555500000000 0x10000 00112233 /app/bin/app
        image 0x7f0000000000 0x200000 44556677 /usr/lib/x86_64-linux-gnu/libc.so.6
        threads 300 4 1234
        thread 100 crashed
        thread 101 ok worker one
        thread_frames 101 cfi 1:85f16 0:1234 :1334 7fff00001234 +
        thread 102 blocked crashme-blk
        thread_proc 102 S 230 0x7ffd00001000 0x7f0000012345
        thread_frames 102 scan 1:12345 0:2345
        thread 103 missed stuck
        thread_proc 103 R running - -
        capture_ns 5000
        end

        """

    func testThreadLinesAreRead() throws {
        let report = try CrashReport(data: Data(Self.report.utf8))
        XCTAssertEqual(report.version, 2)
        XCTAssertFalse(report.isTruncated)
        XCTAssertEqual(report.diagnostics.malformedLines, 0, "\(report.diagnostics.problems)")
        // Version 2 writes every register on one `register` line.
        XCTAssertEqual(report.registers, [.init(name: "rip", value: 0x555500001000), .init(name: "rsp", value: 0x7ffd00000f00),
                                          .init(name: "eflags", value: 0x10246)])
        XCTAssertEqual(report.threadCount, CrashReport.ThreadCount(total: 300, listed: 4, waitNs: 1234))
        XCTAssertEqual(report.threads.map(\.tid), [100, 101, 102, 103])
        XCTAssertEqual(report.threads.map(\.status), ["crashed", "ok", "blocked", "missed"])
        XCTAssertEqual(report.threads[1].name, "worker one")
        // `<image>:<offset>` is that image's base plus the offset; a bare hex address stays as it is.
        // `:<offset>` is in the previous frame's image.
        XCTAssertEqual(report.threads[1].frames, [
            .init(address: 0x7f0000085f16, method: "context"),
            .init(address: 0x555500001234, method: "cfi"),
            .init(address: 0x555500001334, method: "cfi"),
            .init(address: 0x7fff00001234, method: "cfi"),
        ])
        XCTAssertEqual(report.threads[0].name, "main")
        XCTAssertTrue(report.threads[1].framesTruncated)
        XCTAssertEqual(report.threads[2].proc, CrashReport.ProcState(state: "S", syscall: 230, stackPointer: 0x7ffd00001000,
                                                                     pc: 0x7f0000012345))
        XCTAssertEqual(report.threads[2].frames.map(\.method), ["context", "scan"])
        XCTAssertEqual(report.threads[3].proc, CrashReport.ProcState(state: "R", syscall: nil, stackPointer: nil, pc: nil))
        XCTAssertTrue(report.threads[3].frames.isEmpty)
    }

    func testAVersion1ReportStillReadsWithoutThreads() throws {
        let report = try CrashReport(data: Data("VAKA-CRASH 1\nsignal 11 SIGSEGV\nframe 0x10 context\nend\n".utf8))
        XCTAssertEqual(report.version, 1)
        XCTAssertNil(report.threadCount)
        XCTAssertTrue(report.threads.isEmpty)
        let event = FatalEventBuilder(symbolicator: nil).event(from: report)
        XCTAssertEqual(event.threads?.values.count, 1)
        XCTAssertEqual(event.threads?.values.first?.crashed, true)
    }

    func testBadThreadLinesAreMalformedNotFatal() throws {
        let text = """
            VAKA-CRASH 2
            signal 11 SIGSEGV
            thread x ok a
            thread 5 ok b
            thread 5 ok again
            thread_frames 6 cfi 0:10
            thread_frames 5 cfi 9:10 zz
            thread_proc 5 S notanumber - -
            register rip 0x10 rsp
            end

            """
        let report = try CrashReport(data: Data(text.utf8))
        XCTAssertEqual(report.threads.map(\.tid), [5])
        XCTAssertEqual(report.diagnostics.malformedLines, 6, "\(report.diagnostics.problems)")
        XCTAssertTrue(report.registers.isEmpty, "a register line with an odd pair is dropped whole")
    }

    func testEventListsEveryThreadCrashedFirstWithStateAndCaps() throws {
        let report = try CrashReport(data: Data(Self.report.utf8))
        let event = FatalEventBuilder(symbolicator: nil).event(from: report)
        let threads = try XCTUnwrap(event.threads?.values)
        XCTAssertEqual(threads.map(\.id), [100, 101, 102, 103])
        XCTAssertEqual(threads.map(\.crashed), [true, false, false, false])
        XCTAssertEqual(threads.map(\.current), [true, false, false, false])
        XCTAssertEqual(threads[1].name, "worker one")
        XCTAssertNil(threads[1].state)
        // Oldest first, the thread's PC last.
        XCTAssertEqual(threads[1].stacktrace?.frames.map(\.instructionAddr.value),
                       [0x7fff00001234, 0x555500001334, 0x555500001234, 0x7f0000085f16])
        XCTAssertEqual(threads[1].stacktrace?.frames.last?.package, "/usr/lib/x86_64-linux-gnu/libc.so.6")
        XCTAssertEqual(threads[1].stacktrace?.frames[1].inApp, true)
        let blocked = try XCTUnwrap(threads[2].state)
        XCTAssertTrue(blocked.contains("sleeping in system call 230") && blocked.contains("blocks the signal")
                      && blocked.contains("stack scan"), blocked)
        XCTAssertTrue(threads[3].state?.contains("did not answer") == true, threads[3].state ?? "")
        XCTAssertNil(threads[3].stacktrace)
        // Capped: 300 threads, 4 listed; thread 101's frames were cut by the writer.
        XCTAssertEqual(event.extra?["threads_total"], .int(300))
        XCTAssertEqual(event.extra?["threads_listed"], .int(4))
        XCTAssertEqual(event.extra?["thread_frames_truncated"], .array([.int(101)]))
        // Images that only other threads' frames point into are in debug_meta too.
        XCTAssertEqual(event.debugMeta?.images.map(\.codeFile), ["/app/bin/app", "/usr/lib/x86_64-linux-gnu/libc.so.6"])
    }

    /// A thread the round did not ask (the program had taken over the thread signal) says so, and a `state` names
    /// how the callers after the /proc PC were found: unwound by CFI, or a stack scan.
    func testStateNamesAnUnaskedThreadAndHowItsCallersWereFound() throws {
        let text = """
            VAKA-CRASH 2
            signal 6 SIGABRT
            tid 1
            image 0x1000 0x100000 00 /a
            threads 3 3 0
            thread 1 crashed
            thread 2 unasked idle
            thread_proc 2 S 34 0x7ffd00001000 0x1010
            thread_frames 2 cfi 0:10 :20
            thread 3 blocked waiter
            thread_proc 3 S 128 0x7ffd00002000 0x1030
            thread_frames 3 cfi 0:30 :40
            end

            """
        let report = try CrashReport(data: Data(text.utf8))
        XCTAssertEqual(report.diagnostics.malformedLines, 0, "\(report.diagnostics.problems)")
        let threads = try XCTUnwrap(FatalEventBuilder(symbolicator: nil).event(from: report).threads?.values)
        let unasked = try XCTUnwrap(threads[1].state)
        XCTAssertTrue(unasked.contains("sleeping in system call 34") && unasked.contains("not asked")
                      && unasked.contains("unwound from them (cfi)"), unasked)
        let blocked = try XCTUnwrap(threads[2].state)
        XCTAssertTrue(blocked.contains("blocks the signal") && !blocked.contains("stack scan"), blocked)
        XCTAssertEqual(threads[1].stacktrace?.frames.count, 2)
    }

    func testEventCapsThreadsAndFramesOfALargerReport() throws {
        var text = "VAKA-CRASH 2\nsignal 11 SIGSEGV\ntid 1\nimage 0x1000 0x100000 00 /a\nthreads 200 200 0\nthread 1 crashed main\n"
        for tid in 2...200 {
            text += "thread \(tid) ok t\(tid)\nthread_frames \(tid) cfi" + String(repeating: " 0:10", count: 100) + "\n"
        }
        text += "end\n"
        let report = try CrashReport(data: Data(text.utf8))
        XCTAssertEqual(report.threads.count, 200)
        let event = FatalEventBuilder(symbolicator: nil).event(from: report)
        let threads = try XCTUnwrap(event.threads?.values)
        XCTAssertEqual(threads.count, FatalEventBuilder.maxThreads)
        XCTAssertEqual(threads.dropFirst().map { $0.stacktrace?.frames.count ?? 0 }.max(), FatalEventBuilder.maxThreadFrames)
        XCTAssertEqual(event.extra?["threads_total"], .int(200))
        XCTAssertEqual(event.extra?["threads_listed"], .int(Int64(FatalEventBuilder.maxThreads)))
    }
}
