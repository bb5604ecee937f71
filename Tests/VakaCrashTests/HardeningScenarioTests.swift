import Foundation
import XCTest
import VakaTestSupport

/// The hardening scenarios (see shared/cases/crash-scenarios.md): each runs through the same checks as the
/// basic crashes (``CrashScenarioTests/checkScenario(_:file:line:)``), plus what is particular to it.
extension CrashScenarioTests {
    func testWriteReadonly() { checkScenario("write-readonly") }
    func testCAssert() { checkScenario("c-assert") }
    func testSwiftTask() { checkScenario("swift-task") }
    func testDispatchQueue() { checkScenario("dispatch-queue") }
    func testStackOverflowThread() {
        checkScenario("stack-overflow-thread")
        assertCompleteReport("stack-overflow-thread")
    }

    func testHeapCorruption() {
        checkScenario("heap-corruption")
        assertCompleteReport("heap-corruption") // written while glibc's abort path runs: no deadlock
    }

    func testLocksHeld() {
        checkScenario("locks-held")
        assertCompleteReport("locks-held") // stdout/stderr FILE locks and an app mutex held by the crashed thread
    }

    /// Eight threads fault at the same instant: exactly one report (checkScenario), written by one of them.
    func testConcurrent() {
        checkScenario("concurrent")
        assertCompleteReport("concurrent")
        guard let event = ScenarioRuns.all["concurrent"]?.event else { return }
        let name = dig(event, "threads", "values", 0, "name") as? String ?? ""
        XCTAssertTrue(name.hasPrefix("crashme-cc-"), "crashed thread \(name) is not one of the eight workers")
    }

    /// The crash site is in a library dlopen'ed after start; its image is in the event with the build ID
    /// `readelf -n` shows.
    func testDlopenPlugin() throws {
        checkScenario("dlopen-plugin")
        try assertPluginImage("dlopen-plugin")
    }

    /// Same, with process_vm_readv refused by seccomp (EPERM) before start: the crash-time link-map walk must
    /// use the fallback reader (the report says `memory_read pipe`) and still find the plugin's build ID.
    func testDlopenPluginWithoutProcessVMReadv() throws {
        let key = "dlopen-plugin+deny-process-vm-readv"
        checkScenario(key)
        try assertPluginImage(key)
        guard let report = ScenarioRuns.all[key]?.reports.first else { return }
        let lines = try String(contentsOf: report, encoding: .utf8).split(separator: "\n")
        XCTAssertTrue(lines.contains("memory_read pipe"), "expected `memory_read pipe` in \(report.path)")
    }

    /// rbp holds garbage at the crash site, so CFI and frame pointers stop there; the stack scan still finds
    /// the callers (frames with trust `scan`), and the capture survives (complete report, no second crash).
    func testCorruptFramePointer() {
        checkScenario("corrupt-frame-pointer")
        assertCompleteReport("corrupt-frame-pointer")
        guard let event = ScenarioRuns.all["corrupt-frame-pointer"]?.event else { return }
        let frames = dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]] ?? []
        XCTAssertGreaterThanOrEqual(frames.count, 2, "only the crash site was recovered")
        let scanned = frames.filter { $0["trust"] as? String == "scan" }
        XCTAssertFalse(scanned.isEmpty, "no frame with trust `scan`: \(frames.map { $0["trust"] ?? "?" })")
        // The scan finds the harness's caller of the scenario function (its Swift closure / main).
        let harness = Paths.resolved(Paths.harness.path)
        XCTAssertTrue(scanned.contains { ($0["package"] as? String).map(Paths.resolved) == harness && $0["function"] != nil },
                      "no scanned frame in the harness: \(scanned.map { $0["function"] ?? "?" })")
    }

    /// The capture itself faults (test hook, stage 2 = while unwinding): no loop, no hang, the process dies
    /// with the original signal, and the report is either absent or recognisably truncated (no `end`).
    func testCrashInHandler() throws { try checkFaultedCapture("crash-in-handler", signal: SIGSEGV, name: "SIGSEGV") }
    func testFaultAfterHeaderNullDeref() throws {
        try checkFaultedCapture("null-deref+fault-stage-1", signal: SIGSEGV, name: "SIGSEGV")
    }
    func testFaultAfterHeaderAbort() throws { try checkFaultedCapture("abort+fault-stage-1", signal: SIGABRT, name: "SIGABRT") }
    func testFaultWhileUnwindingAbort() throws {
        try checkFaultedCapture("abort+fault-stage-2", signal: SIGABRT, name: "SIGABRT")
    }
    func testFaultWhileUnwindingBackgroundThread() throws {
        try checkFaultedCapture("background-thread+fault-stage-2", signal: SIGSEGV, name: "SIGSEGV")
    }

    /// Checks a run whose capture faulted on purpose: ends by `signal` like the run without Vaka, did not hang,
    /// left at most one report, and that report has its header, no `end`, no partial last line, and converts
    /// to an event marked truncated.
    func checkFaultedCapture(_ key: String, signal: Int32, name: String,
                             file: StaticString = #filePath, line: UInt = #line) throws {
        guard let outcome = ScenarioRuns.all[key], let withVaka = outcome.withVaka, let withoutVaka = outcome.withoutVaka else {
            return XCTFail("\(key): \(ScenarioRuns.all[key]?.setupErrors ?? ["not run"])", file: file, line: line)
        }
        XCTAssertFalse(withVaka.timedOut, "\(key): hung", file: file, line: line)
        XCTAssertEqual(withoutVaka.outcome, "signal \(signal) (\(name))", file: file, line: line)
        XCTAssertEqual(withVaka.outcome, withoutVaka.outcome, "\(key): \(withVaka.stderrTail())", file: file, line: line)
        XCTAssertLessThanOrEqual(outcome.reports.count, 1, file: file, line: line)
        guard let report = outcome.reports.first else { return }
        let text = try String(contentsOf: report, encoding: .utf8)
        XCTAssertTrue(text.hasPrefix("VAKA-CRASH 2\n"), "\(key): header missing: \(text.prefix(200))", file: file, line: line)
        XCTAssertFalse(text.split(separator: "\n").contains("end"), "\(key): a faulted capture wrote `end`", file: file, line: line)
        XCTAssertTrue(text.isEmpty || text.hasSuffix("\n"), "\(key): partial last line kept", file: file, line: line)
        XCTAssertEqual(outcome.convert?.outcome, "exit 0", outcome.convert?.stderrTail() ?? "convert did not run",
                       file: file, line: line)
        let event = outcome.event
        XCTAssertEqual(dig(event, "extra", "report_truncated") as? Bool, true, file: file, line: line)
        XCTAssertEqual(dig(event, "tags", "vaka.report_truncated") as? String, "true", file: file, line: line)
        XCTAssertEqual(dig(event, "exception", "values", 0, "type") as? String, name, file: file, line: line)
    }

    // MARK: - Helpers

    /// The report ends with `end` (the reader did not mark it truncated) and the child did not time out.
    func assertCompleteReport(_ key: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let outcome = ScenarioRuns.all[key] else { return XCTFail("\(key): not run", file: file, line: line) }
        XCTAssertEqual(outcome.withVaka?.timedOut, false, "\(key): hung", file: file, line: line)
        XCTAssertEqual(dig(outcome.event, "extra", "report_truncated") as? Bool, false,
                       "\(key): report truncated", file: file, line: line)
    }

    /// The plugin image is in debug_meta with code_id = its build ID from `readelf -n`.
    func assertPluginImage(_ key: String, file: StaticString = #filePath, line: UInt = #line) throws {
        guard let event = ScenarioRuns.all[key]?.event else { return } // checkScenario reported it
        let plugin = Paths.productsDirectory.appendingPathComponent(pluginFileName)
        let buildID = try readelfBuildID(plugin, scratch: Paths.freshDirectory("readelf-plugin"))
        let images = dig(event, "debug_meta", "images") as? [[String: Any]] ?? []
        let image = images.first { ($0["code_file"] as? String).map(Paths.resolved) == Paths.resolved(plugin.path) }
        XCTAssertNotNil(image, "\(key): plugin image missing: \(images.map { $0["code_file"] ?? "?" })", file: file, line: line)
        XCTAssertEqual((image?["code_id"] as? String)?.lowercased(), buildID, "\(key): plugin code_id vs readelf -n",
                       file: file, line: line)
        XCTAssertEqual((image?["debug_id"] as? String)?.lowercased(), debugID(fromBuildID: buildID), file: file, line: line)
    }
}
