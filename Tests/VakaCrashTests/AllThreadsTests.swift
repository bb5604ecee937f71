import Foundation
import XCTest
import VakaTestSupport

/// Every thread of the process in the crash report (docs/crash-handling.md, *Every thread*): the `all-threads`
/// scenario's event lists each parked thread by name with its known function among its frames, the crashed thread
/// first and marked, the thread that blocks every signal with a `state` saying why; Swift's own backtracer
/// (`SWIFT_BACKTRACE=threads=yes`, which runs after Vaka's handler in the same process) sees the same threads; and
/// the null-deref report stays within 4 KiB with the SDK's own threads in it.
final class AllThreadsTests: XCTestCase {
    /// The parked threads and the function each one must show (thread_scenarios.c, Scenarios.swift).
    static let parked: [(name: String, function: String)] = [
        ("crashme-read", "crashme_all_threads_read"),
        ("crashme-mutex", "crashme_all_threads_mutex"),
        ("crashme-spin", "crashme_all_threads_spin"),
        ("crashme-sleep", "crashme_all_threads_sleep"),
        ("crashme-cond", "crashme_all_threads_cond"),
        ("crashme-blocked", "crashme_all_threads_blocked"),
        ("vaka.impostor", "crashme_all_threads_impostor"),
        ("crashme-queue", "allThreadsDispatchWork"),
    ]

    /// One run of `all-threads` with Vaka and Swift's backtracer printing every thread, and its event.
    struct Run {
        var child: ChildResult
        var report: URL
        var event: [String: Any]
    }

    static func run(_ label: String) throws -> Run {
        let work = Paths.freshDirectory("all-threads-\(label)")
        let storage = work.appendingPathComponent("storage")
        // `threads=yes` is Swift 6.3.1's spelling (it answers `threads=all` with "unknown threads setting").
        let child = try runChild(Paths.harness, ["all-threads", "--storage", storage.path], label: "all-threads",
                                 outputDirectory: work,
                                 environment: ["SWIFT_BACKTRACE": "enable=yes,threads=yes,interactive=no,color=no,images=none,registers=none"],
                                 timeout: 90)
        let reports = ScenarioRuns.crashFiles(in: storage)
        guard reports.count == 1 else {
            throw ChildError(description: "\(reports.count) reports; child \(child.outcome): \(child.stderrTail())")
        }
        let convert = try runChild(Paths.cli, ["report", "convert", reports[0].path], label: "convert", outputDirectory: work)
        guard let event = decodeJSONObject(convert.stdout) else {
            throw ChildError(description: "convert: \(convert.outcome) \(convert.stderrTail())")
        }
        return Run(child: child, report: reports[0], event: event)
    }

    static func threads(_ event: [String: Any]) -> [[String: Any]] {
        ((event["threads"] as? [String: Any])?["values"] as? [[String: Any]]) ?? []
    }

    static func functions(_ thread: [String: Any]) -> [String] {
        let frames = ((thread["stacktrace"] as? [String: Any])?["frames"] as? [[String: Any]]) ?? []
        return frames.compactMap { $0["function"] as? String }
    }

    func testEveryParkedThreadIsListedWithItsFunctionAndSwiftsBacktracerSeesTheSameThreads() throws {
        let run = try Self.run("event")
        XCTAssertEqual(run.child.outcome, "signal 11 (SIGSEGV)", run.child.stderrTail())
        let threads = Self.threads(run.event)
        XCTAssertGreaterThanOrEqual(threads.count, Self.parked.count + 2, "\(threads.map { $0["name"] ?? "?" })")

        // The crashed thread first, marked, the only one marked.
        let first = try XCTUnwrap(threads.first)
        XCTAssertEqual(first["crashed"] as? Bool, true)
        XCTAssertEqual(first["current"] as? Bool, true)
        XCTAssertTrue(Self.functions(first).contains("crashme_all_threads"), "\(Self.functions(first))")
        XCTAssertEqual(threads.filter { $0["crashed"] as? Bool == true }.count, 1)
        let ids = threads.compactMap { ($0["id"] as? NSNumber)?.int64Value }
        XCTAssertEqual(Set(ids).count, threads.count, "thread ids repeat: \(ids)")

        for (name, function) in Self.parked {
            guard let thread = threads.first(where: { $0["name"] as? String == name }) else {
                XCTFail("no thread \(name) in \(threads.map { $0["name"] ?? "?" })")
                continue
            }
            XCTAssertEqual(thread["crashed"] as? Bool, false, name)
            // Swift functions are demangled with their module and signature (`vaka_crashme.allThreadsDispatchWork(...)`).
            XCTAssertTrue(Self.functions(thread).contains { $0 == function || $0.contains(".\(function)(") },
                          "\(name): \(function) not in \(Self.functions(thread))")
        }
        // A program thread named like Vaka's own was never marked as one: it is asked and unwinds itself, like the
        // others; the SDK's own threads are not asked.
        let threadLines = CrashReportFile.threadLines(try CrashReportFile.read(run.report))
        let impostor = try XCTUnwrap(threadLines.first { $0[3] == "vaka.impostor" }, "\(threadLines)")
        XCTAssertEqual(impostor[2], "ok", "\(impostor)")
        let sdkThreads = threadLines.filter { $0[3].hasPrefix("vaka.") && $0[3] != "vaka.impostor" }
        XCTAssertFalse(sdkThreads.isEmpty, "\(threadLines)")
        for thread in sdkThreads { XCTAssertEqual(thread[2], "vaka", "\(thread)") }
        // In the event: listed by name, with the reason it has no frames.
        for line in sdkThreads {
            let thread = try XCTUnwrap(threads.first { ($0["id"] as? NSNumber)?.stringValue == line[1] }, "\(line)")
            XCTAssertEqual(thread["name"] as? String, line[3])
            XCTAssertEqual(thread["state"] as? String, "Vaka's own thread: not unwound (the crash does not wait for it)")
            XCTAssertTrue(Self.functions(thread).isEmpty, "\(line[3]): \(Self.functions(thread))")
        }
        // The thread that blocks every signal cannot unwind itself: listed, with the reason and /proc's registers.
        let blocked = try XCTUnwrap(threads.first { $0["name"] as? String == "crashme-blocked" })
        let state = blocked["state"] as? String ?? ""
        XCTAssertTrue(state.contains("blocks the signal"), state)
        XCTAssertTrue(state.contains("system call 230") || state.contains("system call"), state)
        // The Task's thread: named before the task suspended, now back in the pool (a suspended task has no stack).
        let task = try XCTUnwrap(threads.first { $0["name"] as? String == "crashme-task" })
        XCTAssertFalse(Self.functions(task).isEmpty, "the Task's thread has no frames")

        // Swift's backtracer, run after Vaka's handler in the same process, lists the same threads — except the
        // ones it could not suspend (it says which: the spinning one, the one that blocks every signal), which Vaka
        // still lists. It prints `Thread N "name":`, or `Thread N:` for some threads whose name it did not read.
        let stderr = run.child.stderrText
        var swiftNamed: [String] = []
        var swiftUnnamed = 0
        for line in stderr.split(separator: "\n") where line.hasPrefix("Thread ") {
            let rest = line.dropFirst("Thread ".count)
            guard let first = rest.first, first.isNumber else { continue }
            if let open = line.firstIndex(of: "\""), let close = line[line.index(after: open)...].firstIndex(of: "\"") {
                swiftNamed.append(String(line[line.index(after: open)..<close]))
            } else {
                swiftUnnamed += 1
            }
        }
        XCTAssertFalse(swiftNamed.isEmpty, "Swift's backtracer printed no threads:\n\(run.child.stderrTail(3000))")
        var notSuspended = Set<Int64>()
        for line in stderr.split(separator: "\n") where line.contains("failed to suspend thread ") {
            if let tid = line.components(separatedBy: "failed to suspend thread ").last?.split(separator: " ").first,
               let value = Int64(tid) { notSuspended.insert(value) }
        }
        let vakaNames = threads.compactMap { $0["name"] as? String }
        let suspendable = threads.filter { !notSuspended.contains(($0["id"] as? NSNumber)?.int64Value ?? -1) }
        let message = "Vaka: \(vakaNames), Swift: \(swiftNamed) and \(swiftUnnamed) unnamed, not suspended by Swift: \(notSuspended)"
        XCTAssertEqual(threads.count - suspendable.count, notSuspended.count, message)
        XCTAssertEqual(suspendable.count, swiftNamed.count + swiftUnnamed, message)
        // Every name Swift printed is one of Vaka's (as many times), and only as many of Vaka's are left as Swift
        // printed without a name.
        var left = suspendable.compactMap { $0["name"] as? String }
        for name in swiftNamed {
            guard let index = left.firstIndex(of: name) else {
                XCTFail("Swift's thread \(name) is not in Vaka's list: \(message)")
                continue
            }
            left.remove(at: index)
        }
        XCTAssertEqual(left.count, swiftUnnamed, message)
    }

    /// The crash inside the allocator (its lock held) and the one with stdio's and an app mutex held still give a
    /// complete report with every thread: the round takes no lock and allocates nothing.
    func testLocksHeldStillGiveEveryThread() throws {
        for scenario in ["heap-corruption", "locks-held"] {
            let work = Paths.freshDirectory("threads-\(scenario)")
            let storage = work.appendingPathComponent("storage")
            let child = try runChild(Paths.harness, [scenario, "--storage", storage.path], label: scenario,
                                     outputDirectory: work, environment: ["SWIFT_BACKTRACE": "enable=no"], timeout: 60)
            XCTAssertTrue(child.diedBySignal && !child.timedOut, "\(scenario): \(child.outcome)")
            let reports = ScenarioRuns.crashFiles(in: storage)
            XCTAssertEqual(reports.count, 1, scenario)
            guard let report = reports.first else { continue }
            let parsed = try CrashReportFile.read(report)
            XCTAssertTrue(parsed.hasSuffix("\nend\n"), "\(scenario): report without end")
            let threadLines = parsed.split(separator: "\n").filter { $0.hasPrefix("thread ") }
            XCTAssertTrue(parsed.contains("\nthreads "), "\(scenario): no threads line")
            XCTAssertGreaterThanOrEqual(threadLines.count, 2, "\(scenario): the SDK's threads are missing:\n\(parsed)")
        }
    }

    /// A short in-suite soak of the two thread scenarios, two at a time: every run ends by its signal within the
    /// timeout, with exactly one complete report (`scripts/soak` with `VAKA_SOAK_FOCUS` runs the long one).
    func testRepeatedThreadScenariosNeverHangOrLoseTheReport() throws {
        let runs = ["all-threads", "stack-overflow-early-thread"].flatMap { Array(repeating: $0, count: 6) }
        let problems = Locked<[String]>([])
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        for (index, scenario) in runs.enumerated() {
            queue.addOperation {
                do {
                    let work = Paths.freshDirectory("threads-soak-\(index)")
                    let storage = work.appendingPathComponent("storage")
                    let child = try runChild(Paths.harness, [scenario, "--storage", storage.path], label: scenario,
                                             outputDirectory: work,
                                             environment: ["SWIFT_BACKTRACE": "enable=yes,interactive=no,color=no"],
                                             timeout: 30)
                    let reports = ScenarioRuns.crashFiles(in: storage)
                    let text = try reports.first.map { try CrashReportFile.read($0) } ?? ""
                    if child.timedOut || child.outcome != "signal 11 (SIGSEGV)" || reports.count != 1 || !text.hasSuffix("\nend\n") {
                        problems.withLock { $0.append("run \(index) \(scenario): \(child.outcome), \(reports.count) reports") }
                    }
                } catch {
                    problems.withLock { $0.append("run \(index) \(scenario): \(error)") }
                }
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        let found = problems.withLock { $0 }
        XCTAssertTrue(found.isEmpty, found.joined(separator: "\n"))
    }

    func testNullDerefReportWithTheSDKThreadsStaysWithin4KiBAndTheirThreadsAreNotAsked() throws {
        let work = Paths.freshDirectory("threads-size")
        let storage = work.appendingPathComponent("storage")
        // --settle: Vaka.flush() and 200 ms first, so the SDK's start-up work is over and its thread gone (flush returns
        // a moment before that thread ends; listed, it adds about 140 bytes), the other threads idle, as later in a run.
        let child = try runChild(Paths.harness, ["null-deref", "--settle", "--storage", storage.path], label: "null-deref",
                                 outputDirectory: work, environment: ["SWIFT_BACKTRACE": "enable=no"])
        XCTAssertEqual(child.outcome, "signal 11 (SIGSEGV)", child.stderrTail())
        let report = try XCTUnwrap(ScenarioRuns.crashFiles(in: storage).first)
        let text = try CrashReportFile.read(report)
        XCTAssertTrue(text.contains("\nthreads "), text)
        XCTAssertTrue(text.contains("\nthread ") && text.contains(" crashed\n"), text)
        XCTAssertFalse(text.contains("linux-vdso.so.1"), "the vDSO is listed twice")
        // The executable's path is written twice (`executable` and the first `image`): counted as 64 bytes, so the
        // bound does not depend on where the package is checked out.
        let exe = text.split(separator: "\n").first { $0.hasPrefix("executable ") }.map { $0.dropFirst("executable ".count) } ?? ""
        let size = text.utf8.count - 2 * exe.utf8.count + 2 * 64
        XCTAssertLessThanOrEqual(size, 4096, "report of \(text.utf8.count) bytes:\n\(text)")
        // Vaka's own threads (here the journal mover, once start is settled) are not asked to unwind themselves,
        // so the crash does not wait for them to be scheduled, and nothing of them is read from /proc: each is
        // listed with status `vaka` and the name the SDK gave it, without `thread_proc` or `thread_frames`.
        let own = CrashReportFile.threadLines(text).filter { $0[3].hasPrefix("vaka.") }
        XCTAssertFalse(own.isEmpty, "no vaka.* thread in the report:\n\(text)")
        // The `vaka.start` thread became the journal's mover: the table has its new name.
        XCTAssertTrue(own.contains { $0[3] == "vaka.journal" }, "the mover is not listed as vaka.journal:\n\(text)")
        for thread in own {
            XCTAssertEqual(thread[2], "vaka", "\(thread[3]) was asked:\n\(text)")
            XCTAssertTrue(["vaka.start", "vaka.journal", "vaka.delivery", "vaka.close"].contains(thread[3]), "\(thread)")
            XCTAssertFalse(text.contains("\nthread_proc \(thread[1]) "), "\(thread[3]) read from /proc:\n\(text)")
            XCTAssertFalse(text.contains("\nthread_frames \(thread[1]) "), "\(thread[3]) unwound:\n\(text)")
        }
        let threads = try XCTUnwrap(text.split(separator: "\n").first { $0.hasPrefix("threads ") }).split(separator: " ")
        XCTAssertEqual(threads.count, 4, text)
        XCTAssertTrue(text.hasSuffix("\nend\n"), text)
    }
}

/// Reading a report file's text.
enum CrashReportFile {
    static func read(_ url: URL) throws -> String {
        try String(contentsOf: url, encoding: .utf8)
    }

    /// The `thread <tid> <status> <name>` lines of a report's text, each split into those four fields.
    static func threadLines(_ text: String) -> [[String]] {
        text.split(separator: "\n").filter { $0.hasPrefix("thread ") }
            .map { $0.split(separator: " ", maxSplits: 3).map(String.init) }.filter { $0.count == 4 }
    }
}
