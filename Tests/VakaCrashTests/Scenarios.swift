import Foundation

/// What one `vaka-crashme` scenario must produce (see shared/cases/crash-scenarios.md and
/// Sources/VakaCrashmeC/include/vaka_crashme.h).
struct ScenarioExpectation {
    /// Name on the harness command line.
    var name: String
    /// The signal the process dies with, with and without Vaka.
    var signal: Int32
    /// `meta.signal.name`, e.g. "SIGSEGV".
    var signalName: String
    /// Accepted `meta.signal.code_name` values (usually one).
    var codeNames: Set<String>
    /// `mechanism.data.relevant_address`, where the scenario knows it.
    var faultAddress: UInt64? = nil
    /// Text that must appear in the fatal message (exception value or `extra.fatal_message`).
    var fatalMessage: String? = nil
    /// The crashed thread's expected name, for scenarios that name their thread.
    var threadName: String? = nil
    /// Whether the Swift runtime's backtracer handles this signal (all but SIGSYS), so its banner is on stderr.
    var swiftBacktrace: Bool = true
}

/// The banner Swift's backtracer prints to stderr on a crash (Swift 6.3, Linux), e.g.
/// `*** Program crashed: Bad pointer dereference at 0x0000000000000000 ***`.
let swiftBacktraceBanner = "*** Program crashed:"

/// `VAKA_CRASHME_WILD_ADDRESS` in Sources/VakaCrashmeC/include/vaka_crashme.h.
let wildWriteAddress: UInt64 = 0xdead_beef_008
/// `VAKA_CRASHME_THREAD_NAME` in the same header.
let backgroundThreadName = "crashme-bg"

/// si_code name for int3 (x86_64: the kernel sends SI_KERNEL) or brk (aarch64: TRAP_BRKPT).
#if arch(x86_64)
let breakpointCodeName = "SI_KERNEL"
#else
let breakpointCodeName = "TRAP_BRKPT"
#endif

/// Every scenario the harness offers, in `--list` order. A scenario added to the harness without an
/// entry here fails `testListMatchesExpectations`.
let scenarioExpectations: [ScenarioExpectation] = [
    ScenarioExpectation(name: "null-deref", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0),
    ScenarioExpectation(name: "wild-write", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: wildWriteAddress),
    ScenarioExpectation(name: "abort", signal: SIGABRT, signalName: "SIGABRT", codeNames: ["SI_TKILL"]),
    ScenarioExpectation(name: "swift-fatal-error", signal: SIGILL, signalName: "SIGILL", codeNames: ["ILL_ILLOPN"],
                        fatalMessage: "boom 42"),
    ScenarioExpectation(name: "swift-force-unwrap", signal: SIGILL, signalName: "SIGILL", codeNames: ["ILL_ILLOPN"],
                        fatalMessage: "Unexpectedly found nil"),
    ScenarioExpectation(name: "swift-index-out-of-range", signal: SIGILL, signalName: "SIGILL",
                        codeNames: ["ILL_ILLOPN"], fatalMessage: "Index out of range"),
    ScenarioExpectation(name: "divide-by-zero", signal: SIGFPE, signalName: "SIGFPE", codeNames: ["FPE_INTDIV"]),
    ScenarioExpectation(name: "illegal-instruction", signal: SIGILL, signalName: "SIGILL", codeNames: ["ILL_ILLOPN"]),
    ScenarioExpectation(name: "breakpoint", signal: SIGTRAP, signalName: "SIGTRAP", codeNames: [breakpointCodeName]),
    ScenarioExpectation(name: "bus-error", signal: SIGBUS, signalName: "SIGBUS", codeNames: ["BUS_ADRERR"]),
    ScenarioExpectation(name: "bad-syscall", signal: SIGSYS, signalName: "SIGSYS", codeNames: ["SYS_SECCOMP"],
                        swiftBacktrace: false),
    ScenarioExpectation(name: "background-thread", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0, threadName: backgroundThreadName),
    // The main thread's stack guard gap is unmapped (MAPERR); a PROT_NONE guard would give ACCERR.
    ScenarioExpectation(name: "stack-overflow", signal: SIGSEGV, signalName: "SIGSEGV",
                        codeNames: ["SEGV_MAPERR", "SEGV_ACCERR"]),
]

/// Everything learned from running one scenario with Vaka and without it.
struct ScenarioOutcome {
    var expectation: ScenarioExpectation
    /// The storage directory given to the harness (reports in `crashes/`).
    var storage: URL
    /// The run with Vaka started.
    var withVaka: ChildResult?
    /// The run with `--no-vaka`.
    var withoutVaka: ChildResult?
    /// `*.crash` files found in `storage/crashes` after the run with Vaka.
    var reports: [URL] = []
    /// `*.crash` files found after the run without Vaka (must be none).
    var reportsWithoutVaka: [URL] = []
    /// `vaka report convert REPORT` on the single report.
    var convert: ChildResult?
    /// Its stdout decoded as a JSON object.
    var event: [String: Any]?
    /// That JSON, saved as `event.json` (for Relay validation).
    var eventFile: URL?
    /// Problems running the children (missing binaries, failed spawns).
    var setupErrors: [String] = []
}

/// Runs every scenario once with Vaka and once without, concurrently (a few at a time, each child bounded
/// by a timeout), then converts each report. Computed once per test process, on first use.
enum ScenarioRuns {
    static let all: [String: ScenarioOutcome] = {
        let outcomes = Locked<[String: ScenarioOutcome]>([:])
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = max(4, ProcessInfo.processInfo.activeProcessorCount * 2)
        for expectation in scenarioExpectations {
            queue.addOperation {
                let outcome = runScenario(expectation)
                outcomes.withLock { $0[expectation.name] = outcome }
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        return outcomes.withLock { $0 }
    }()

    /// Child environment: Swift's backtracer on (it is the handler Vaka chains to), never waiting for input.
    static let childEnvironment = ["SWIFT_BACKTRACE": "enable=yes,interactive=no,color=no"]

    static func crashFiles(in storage: URL) -> [URL] {
        let dir = storage.appendingPathComponent("crashes", isDirectory: true)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.filter { $0.hasSuffix(".crash") }.sorted().map { dir.appendingPathComponent($0) }
    }

    static func runScenario(_ expectation: ScenarioExpectation) -> ScenarioOutcome {
        let work = Paths.freshDirectory(expectation.name)
        let storage = work.appendingPathComponent("storage", isDirectory: true)
        let storageWithout = work.appendingPathComponent("storage-no-vaka", isDirectory: true)
        var outcome = ScenarioOutcome(expectation: expectation, storage: storage)
        do {
            outcome.withVaka = try runChild(Paths.harness, [expectation.name, "--storage", storage.path],
                                            label: "with-vaka", outputDirectory: work, environment: childEnvironment)
            outcome.reports = crashFiles(in: storage)
            outcome.withoutVaka = try runChild(Paths.harness, [expectation.name, "--storage", storageWithout.path, "--no-vaka"],
                                               label: "without-vaka", outputDirectory: work,
                                               environment: childEnvironment)
            outcome.reportsWithoutVaka = crashFiles(in: storageWithout)
            if outcome.reports.count == 1 {
                let convert = try runChild(Paths.cli, ["report", "convert", outcome.reports[0].path],
                                           label: "convert", outputDirectory: work)
                outcome.convert = convert
                outcome.event = decodeJSONObject(convert.stdout)
                if outcome.event != nil {
                    let eventFile = work.appendingPathComponent("event.json")
                    try convert.stdout.write(to: eventFile)
                    outcome.eventFile = eventFile
                }
            }
        } catch {
            outcome.setupErrors.append("\(error)")
        }
        return outcome
    }
}
