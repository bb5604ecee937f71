import Foundation
import XCTest
import VakaTestSupport

/// Crashes `vaka-crashme` in every scenario, with Vaka started and without, and checks the report, the
/// fatal event JSON from `vaka report convert`, and that Vaka does not change how the process ends.
/// All scenarios run once, concurrently, on first use (``ScenarioRuns``); each test checks one.
final class CrashScenarioTests: XCTestCase {
    /// The harness's GNU build ID as `readelf -n` prints it (lower-case hex).
    static let harnessBuildID: Result<String, Error> = Result {
        try readelfBuildID(Paths.harness, scratch: Paths.freshDirectory("readelf"))
    }

    /// How many of the newest frames may come before the scenario's own function (the crash site itself
    /// may be in libc or the Swift runtime: abort → raise → pthread_kill, fatalError → _assertionFailure).
    static let newestFrameWindow = 6

    func testNullDeref() { checkScenario("null-deref") }
    func testWildWrite() { checkScenario("wild-write") }
    func testAbort() { checkScenario("abort") }
    func testSwiftFatalError() { checkScenario("swift-fatal-error") }
    func testSwiftForceUnwrap() { checkScenario("swift-force-unwrap") }
    func testSwiftIndexOutOfRange() { checkScenario("swift-index-out-of-range") }
    func testDivideByZero() { checkScenario("divide-by-zero") }
    func testIllegalInstruction() { checkScenario("illegal-instruction") }
    func testBreakpoint() { checkScenario("breakpoint") }
    func testBusError() { checkScenario("bus-error") }
    func testBadSyscall() { checkScenario("bad-syscall") }
    func testBackgroundThread() { checkScenario("background-thread") }
    func testStackOverflow() { checkScenario("stack-overflow") }

    /// Every scenario the harness lists has expectations here, and the other way round.
    func testListMatchesExpectations() throws {
        let result = try runChild(Paths.harness, ["--list"], label: "list", outputDirectory: Paths.freshDirectory("list"))
        XCTAssertEqual(result.outcome, "exit 0", result.stderrTail())
        let listed = String(decoding: result.stdout, as: UTF8.self).split(separator: "\n").map(String.init)
        XCTAssertEqual(listed, scenarioExpectations.map(\.name))
    }

    /// An unknown scenario is a usage error: message on stderr, exit status 2, no crash.
    func testUnknownScenarioExitsWithStatus2() throws {
        let dir = Paths.freshDirectory("unknown")
        let result = try runChild(Paths.harness, ["no-such-scenario", "--storage", dir.path], label: "unknown",
                                  outputDirectory: dir)
        XCTAssertEqual(result.outcome, "exit 2")
        XCTAssertTrue(result.stderrText.contains("no-such-scenario"), result.stderrText)
    }

    /// The test's own debug_id derivation, against the vectors in shared/notes/sentry-protocol.md.
    func testDebugIDDerivationVectors() {
        XCTAssertEqual(debugID(fromBuildID: "68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434"),
                       "e20a2268-5dc6-c165-b6aa-a12fa6765a6e")
        XCTAssertEqual(debugID(fromBuildID: "6e4250d99632b8031d64f7107b94ff9c4737db1a"),
                       "d950426e-3296-03b8-1d64-f7107b94ff9c")
        XCTAssertEqual(debugID(fromBuildID: "0102"), "00000201-0000-0000-0000-000000000000")
        XCTAssertNil(debugID(fromBuildID: ""))
    }

    /// Every event passes Sentry Relay's StoreNormalizer (scripts/relay-validate.py run by
    /// `$VAKA_RELAY_PYTHON`). Skipped when that variable is unset, unless `VAKA_REQUIRE_PEERS=1`.
    func testEventsPassRelayNormalizer() throws {
        let python = try Peers.relayPython()
        let script = Paths.repositoryRoot.appendingPathComponent("scripts/relay-validate.py")
        XCTAssertTrue(FileManager.default.fileExists(atPath: script.path), "missing \(script.path)")
        let outcomes = scenarioExpectations.map { ScenarioRuns.all[$0.name] }
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: outcomes.count) { index in
            let name = scenarioExpectations[index].name
            var problem: String?
            if let outcome = outcomes[index], let eventFile = outcome.eventFile {
                do {
                    let result = try runChild(URL(fileURLWithPath: python), [script.path, eventFile.path],
                                              label: "relay", outputDirectory: eventFile.deletingLastPathComponent(),
                                              timeout: 120)
                    if result.outcome != "exit 0" {
                        problem = "\(result.outcome): \(String(decoding: result.stdout.suffix(1500), as: UTF8.self)) \(result.stderrTail())"
                    }
                } catch {
                    problem = "\(error)"
                }
            } else {
                problem = "no event to validate (see test for \(name))"
            }
            if let problem {
                failures.withLock { $0.append("\(name): \(problem)") }
            }
        }
        let problems = failures.withLock { $0 }.sorted()
        XCTAssertTrue(problems.isEmpty, "Relay StoreNormalizer rejected events:\n" + problems.joined(separator: "\n"))
    }

    // MARK: - The checks for one scenario

    func checkScenario(_ name: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let outcome = ScenarioRuns.all[name] else {
            return XCTFail("no expectation for scenario \(name)", file: file, line: line)
        }
        let expected = outcome.expectation
        guard outcome.setupErrors.isEmpty, let withVaka = outcome.withVaka, let withoutVaka = outcome.withoutVaka else {
            return XCTFail("\(name): \(outcome.setupErrors.joined(separator: "; "))", file: file, line: line)
        }

        // The process ends the same way with and without Vaka, and that is the scenario's signal.
        XCTAssertEqual(withoutVaka.outcome, "signal \(expected.signal) (\(signalName(expected.signal)))",
                       "\(name) --no-vaka: \(withoutVaka.stderrTail())", file: file, line: line)
        XCTAssertEqual(withVaka.outcome, withoutVaka.outcome,
                       "\(name): termination with Vaka differs from --no-vaka. stderr: \(withVaka.stderrTail())",
                       file: file, line: line)
        XCTAssertEqual(outcome.reportsWithoutVaka.count, 0, "\(name) --no-vaka wrote a report", file: file, line: line)

        // Swift's own backtrace is still printed (Vaka chains to the Swift runtime's handler).
        let bannerWithout = withoutVaka.stderrText.contains(swiftBacktraceBanner)
        XCTAssertEqual(bannerWithout, expected.swiftBacktrace,
                       "\(name) --no-vaka: Swift backtrace banner expected: \(expected.swiftBacktrace)",
                       file: file, line: line)
        XCTAssertEqual(withVaka.stderrText.contains(swiftBacktraceBanner), expected.swiftBacktraceWithVaka ?? bannerWithout,
                       "\(name): Swift's backtrace banner '\(swiftBacktraceBanner)' with Vaka vs without differs. stderr with Vaka: \(withVaka.stderrTail())",
                       file: file, line: line)

        // Exactly one report, converted to a fatal event.
        guard outcome.reports.count == 1 else {
            return XCTFail("\(name): expected exactly one .crash in \(outcome.storage.path)/crashes, found \(outcome.reports.map(\.lastPathComponent))",
                           file: file, line: line)
        }
        guard let convert = outcome.convert else { return XCTFail("\(name): convert did not run", file: file, line: line) }
        XCTAssertEqual(convert.outcome, "exit 0", "\(name): vaka report convert: \(convert.stderrTail())", file: file, line: line)
        guard let event = outcome.event else {
            return XCTFail("\(name): convert printed no JSON object: \(String(decoding: convert.stdout.prefix(500), as: UTF8.self)) \(convert.stderrTail())",
                           file: file, line: line)
        }
        checkEvent(event, outcome: outcome, file: file, line: line)
    }

    func checkEvent(_ event: [String: Any], outcome: ScenarioOutcome, file: StaticString, line: UInt) {
        let expected = outcome.expectation
        let name = expected.name
        let runID = outcome.reports[0].deletingPathExtension().lastPathComponent
        XCTAssertEqual(event["event_id"] as? String, runID.replacingOccurrences(of: "-", with: "").lowercased(),
                       "\(name): event_id", file: file, line: line)
        XCTAssertEqual(event["level"] as? String, "fatal", file: file, line: line)
        XCTAssertEqual(event["platform"] as? String, "native", file: file, line: line)

        // Signal and si_code.
        let exception = dig(event, "exception", "values", 0)
        XCTAssertEqual(dig(exception, "type") as? String, expected.signalName, "\(name): exception type", file: file, line: line)
        let mechanism = dig(exception, "mechanism")
        XCTAssertEqual(dig(mechanism, "type") as? String, "signalhandler", file: file, line: line)
        XCTAssertEqual(dig(mechanism, "handled") as? Bool, false, file: file, line: line)
        XCTAssertEqual(dig(mechanism, "meta", "signal", "number") as? Int, Int(expected.signal), "\(name): signal number",
                       file: file, line: line)
        XCTAssertEqual(dig(mechanism, "meta", "signal", "name") as? String, expected.signalName, file: file, line: line)
        let codeName = dig(mechanism, "meta", "signal", "code_name") as? String
        XCTAssertTrue(codeName.map(expected.codeNames.contains) ?? false,
                      "\(name): code_name \(codeName ?? "nil"), expected one of \(expected.codeNames.sorted())",
                      file: file, line: line)

        // Fault address.
        let relevant = dig(mechanism, "data", "relevant_address")
        if let address = expected.faultAddress {
            XCTAssertEqual(parseHexAddress(relevant), address,
                           "\(name): relevant_address \(relevant ?? "nil"), expected 0x\(String(address, radix: 16))",
                           file: file, line: line)
        }
        if name == "bus-error" {
            // The start of the page past the end of the file: page aligned, not null.
            let address = parseHexAddress(relevant) ?? 0
            XCTAssertTrue(address != 0 && address % 4096 == 0, "\(name): relevant_address \(relevant ?? "nil")",
                          file: file, line: line)
        }

        // Frames: oldest first, the crash site last (its PC came from the signal context); the
        // scenario's own function in the harness image among the newest frames.
        let frames = dig(exception, "stacktrace", "frames") as? [[String: Any]] ?? []
        XCTAssertFalse(frames.isEmpty, "\(name): no frames", file: file, line: line)
        XCTAssertEqual(frames.last?["trust"] as? String, "context", "\(name): last frame must be the crash site",
                       file: file, line: line)
        let harnessPath = Paths.resolved(Paths.harness.path)
        let frameImagePath = expected.frameImage.map { Paths.resolved(Paths.productsDirectory.appendingPathComponent($0).path) }
            ?? harnessPath
        let window = max(Self.newestFrameWindow, expected.frameWindow)
        let newest = frames.suffix(window)
        let wanted = normalizedName(name)
        let found = newest.contains { frame in
            guard let function = frame["function"] as? String, let package = frame["package"] as? String else { return false }
            return Paths.resolved(package) == frameImagePath && normalizedName(function).contains(wanted)
        }
        let shown = newest.reversed().map { "\($0["function"] as? String ?? "?") in \($0["package"] as? String ?? "?")" }
        XCTAssertTrue(found, "\(name): no frame in \(frameImagePath) whose function contains '\(wanted)' among the newest \(window) frames (newest first): \(shown)",
                      file: file, line: line)

        // Crashed thread.
        let thread = dig(event, "threads", "values", 0)
        XCTAssertEqual(dig(thread, "crashed") as? Bool, true, file: file, line: line)
        let threadID = dig(thread, "id") as? Int
        XCTAssertNotNil(threadID, "\(name): thread id", file: file, line: line)
        XCTAssertEqual(dig(exception, "thread_id") as? Int, threadID, file: file, line: line)
        if expected.offMainThread {
            let pid = dig(event, "extra", "pid") as? Int
            XCTAssertNotNil(pid, "\(name): extra.pid", file: file, line: line)
            XCTAssertNotEqual(threadID, pid, "\(name): the crashed thread must not be the main thread (tid == pid)",
                              file: file, line: line)
        }
        if let message = expected.abortMessage {
            let abort = dig(event, "extra", "abort_message") as? String ?? ""
            XCTAssertTrue(abort.contains(message), "\(name): abort message '\(message)' not in extra.abort_message '\(abort)'",
                          file: file, line: line)
        }
        if let threadName = expected.threadName {
            XCTAssertEqual(dig(thread, "name") as? String, threadName, "\(name): thread name", file: file, line: line)
            let pid = dig(event, "extra", "pid") as? Int
            XCTAssertNotNil(pid, "\(name): extra.pid", file: file, line: line)
            XCTAssertNotEqual(threadID, pid, "\(name): the crashed thread must not be the main thread (tid == pid)",
                              file: file, line: line)
        }

        // Images: the harness with its build ID as code_id and the derived debug_id; every frame's image listed.
        let images = dig(event, "debug_meta", "images") as? [[String: Any]] ?? []
        switch Self.harnessBuildID {
        case .failure(let error):
            XCTFail("\(name): \(error)", file: file, line: line)
        case .success(let buildID):
            let harness = images.first { ($0["code_file"] as? String).map(Paths.resolved) == harnessPath }
            XCTAssertNotNil(harness, "\(name): no image for \(harnessPath) in debug_meta.images: \(images.map { $0["code_file"] ?? "?" })",
                            file: file, line: line)
            if let harness {
                XCTAssertEqual(harness["type"] as? String, "elf", file: file, line: line)
                XCTAssertEqual((harness["code_id"] as? String)?.lowercased(), buildID, "\(name): code_id vs readelf -n",
                               file: file, line: line)
                XCTAssertEqual((harness["debug_id"] as? String)?.lowercased(), debugID(fromBuildID: buildID),
                               "\(name): debug_id", file: file, line: line)
            }
        }
        let imageFiles = Set(images.compactMap { $0["code_file"] as? String })
        // The frames of every thread: debug_meta holds the images any of them points into.
        let threadFrames = ((dig(event, "threads", "values") as? [[String: Any]]) ?? []).flatMap {
            (dig($0, "stacktrace", "frames") as? [[String: Any]]) ?? []
        }
        let framePackages = Set((frames + threadFrames).compactMap { $0["package"] as? String })
        XCTAssertTrue(framePackages.isSubset(of: imageFiles),
                      "\(name): frames point into images missing from debug_meta: \(framePackages.subtracting(imageFiles).sorted())",
                      file: file, line: line)
        XCTAssertTrue(imageFiles.isSubset(of: framePackages),
                      "\(name): debug_meta lists images no frame points into: \(imageFiles.subtracting(framePackages).sorted())",
                      file: file, line: line)

        // The Swift runtime's fatal message.
        if let message = expected.fatalMessage {
            let value = dig(exception, "value") as? String ?? ""
            let extra = dig(event, "extra", "fatal_message") as? String ?? ""
            XCTAssertTrue(value.contains(message) || extra.contains(message),
                          "\(name): fatal message '\(message)' not in exception value '\(value)' nor extra.fatal_message '\(extra)'",
                          file: file, line: line)
        }
    }
}
