import Foundation
import VakaTestSupport

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
    /// Whether the banner is printed with Vaka started, when that differs from ``swiftBacktrace`` (a thread
    /// without an alternate stack: only Vaka gives it one, and then Swift's handler can run too). `nil`: same.
    var swiftBacktraceWithVaka: Bool? = nil
    /// How many of the newest frames may come before the scenario's own function (see
    /// `CrashScenarioTests.newestFrameWindow`); larger where libc adds frames (assert, double free).
    var frameWindow: Int = 6
    /// File name (in the products directory) of the image the scenario's function lies in; `nil`: the harness.
    var frameImage: String? = nil
    /// The crashed thread is not the main thread (tid != pid), for scenarios whose thread has no fixed name.
    var offMainThread: Bool = false
    /// Text that must appear in `extra.abort_message` (glibc's abort message).
    var abortMessage: String? = nil
    /// Extra harness arguments (both runs) and extra child environment, for variants of a scenario.
    var arguments: [String] = []
    /// Start both runs with every signal blocked (a parent's mask, inherited over exec).
    var blockAllSignals: Bool = false
    var environment: [String: String] = [:]
    /// Key in ``ScenarioRuns/all``: the name, or `name+variant` for a variant run.
    var variant: String? = nil
    var key: String { variant.map { "\(name)+\($0)" } ?? name }
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

/// Whether the harness under test is a `-c release` build (`VAKA_HARNESS_CONFIG=release`, set by scripts/test
/// together with `VAKA_PRODUCTS_DIR` for its release run). Release builds trap on force-unwrap and index out
/// of range without a message (see shared/notes/swift-runtime-linux.md).
let harnessIsRelease = ProcessInfo.processInfo.environment["VAKA_HARNESS_CONFIG"] == "release"

/// `message` for a debug harness, `nil` (no message expected) for a release one.
func debugOnly(_ message: String) -> String? { harnessIsRelease ? nil : message }

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
                        fatalMessage: debugOnly("Unexpectedly found nil")),
    ScenarioExpectation(name: "swift-index-out-of-range", signal: SIGILL, signalName: "SIGILL",
                        codeNames: ["ILL_ILLOPN"], fatalMessage: debugOnly("Index out of range")),
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
    // Hardening scenarios.
    ScenarioExpectation(name: "write-readonly", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_ACCERR"]),
    // abort → raise → abort → __assert_fail_base → __assert_fail → crashme_c_assert
    ScenarioExpectation(name: "c-assert", signal: SIGABRT, signalName: "SIGABRT", codeNames: ["SI_TKILL"],
                        frameWindow: 10, abortMessage: "Assertion `value == 42"),
    ScenarioExpectation(name: "swift-task", signal: SIGILL, signalName: "SIGILL", codeNames: ["ILL_ILLOPN"],
                        fatalMessage: debugOnly("Unexpectedly found nil"), offMainThread: true),
    ScenarioExpectation(name: "dispatch-queue", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0, offMainThread: true),
    ScenarioExpectation(name: "dlopen-plugin", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0, frameImage: pluginFileName),
    // Without Vaka the thread has no alternate stack: the kernel kills the process before Swift's handler
    // can run. With Vaka the pthread_create interposer gave it one, so Swift's handler runs after ours.
    ScenarioExpectation(name: "stack-overflow-thread", signal: SIGSEGV, signalName: "SIGSEGV",
                        codeNames: ["SEGV_MAPERR", "SEGV_ACCERR"], threadName: overflowThreadName,
                        swiftBacktrace: false, swiftBacktraceWithVaka: true),
    // Swift's backtracer is off here: Swift 6.3.1's own handler hangs now and then when several threads crash
    // together under load, with or without Vaka (measured without Vaka: 5 of 96 runs, 4 at a time, ran past
    // 10 s after starting a second backtrace). That would make this test flaky for a reason not ours.
    ScenarioExpectation(name: "concurrent", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0, swiftBacktrace: false, offMainThread: true,
                        environment: ["SWIFT_BACKTRACE": "enable=no"]),
    // abort → raise → abort → __libc_message → malloc_printerr → _int_free → free → crashme_heap_corruption
    ScenarioExpectation(name: "heap-corruption", signal: SIGABRT, signalName: "SIGABRT", codeNames: ["SI_TKILL"],
                        frameWindow: 10, abortMessage: "double free"),
    ScenarioExpectation(name: "corrupt-frame-pointer", signal: SIGSEGV, signalName: "SIGSEGV",
                        codeNames: ["SEGV_MAPERR"], faultAddress: 0),
    // Checked by CrashScenarioTests.testCrashInHandler (a truncated report or none), not by checkScenario.
    ScenarioExpectation(name: "crash-in-handler", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0),
    ScenarioExpectation(name: "locks-held", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0),
    // Blocked signals. Without Vaka the blocked SIGSEGV kills the process before any handler; with Vaka it stays
    // unblocked and the report is written. Swift's backtracer is off: its `swift-backtrace` helper would inherit
    // the thread's blocked mask and never exit (see blockedSignalExpectations).
    ScenarioExpectation(name: "blocked-signals-thread", signal: SIGSEGV, signalName: "SIGSEGV",
                        codeNames: ["SEGV_MAPERR"], faultAddress: 0, threadName: blockedThreadName,
                        swiftBacktrace: false, environment: ["SWIFT_BACKTRACE": "enable=no"]),
    // Every thread (AllThreadsTests checks the thread list itself).
    ScenarioExpectation(name: "all-threads", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0),
    // A thread that existed before Vaka.start: install gave it an alternate stack from its pool. Without Vaka it has
    // none, and the kernel kills the process before Swift's handler can run.
    ScenarioExpectation(name: "stack-overflow-early-thread", signal: SIGSEGV, signalName: "SIGSEGV",
                        codeNames: ["SEGV_MAPERR", "SEGV_ACCERR"], threadName: "crashme-early",
                        swiftBacktrace: false, swiftBacktraceWithVaka: true),
]

/// Scenarios run with blocked signals, in both runs (with Vaka and --no-vaka). Swift's
/// backtracer is off in these runs: Swift 6.3.1's `swift-backtrace` helper inherits the blocked mask and then
/// never exits (its own timeout is a signal), and without Vaka its in-process handler dies of a blocked SIGSEGV
/// inside itself (abort ends with SIGSEGV instead of SIGABRT) — neither is Vaka's to fix or to test here.
let blockedSignalExpectations: [ScenarioExpectation] = {
    let noBacktrace = ["SWIFT_BACKTRACE": "enable=no"]
    // Every signal blocked by the parent before exec.
    var list: [ScenarioExpectation] = [
        ScenarioExpectation(name: "null-deref", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                            faultAddress: 0),
        ScenarioExpectation(name: "swift-force-unwrap", signal: SIGILL, signalName: "SIGILL", codeNames: ["ILL_ILLOPN"],
                            fatalMessage: debugOnly("Unexpectedly found nil")),
        ScenarioExpectation(name: "swift-fatal-error", signal: SIGILL, signalName: "SIGILL", codeNames: ["ILL_ILLOPN"],
                            fatalMessage: "boom 42"),
        ScenarioExpectation(name: "abort", signal: SIGABRT, signalName: "SIGABRT", codeNames: ["SI_TKILL"]),
        ScenarioExpectation(name: "blocked-signals-thread", signal: SIGSEGV, signalName: "SIGSEGV",
                            codeNames: ["SEGV_MAPERR"], faultAddress: 0, threadName: blockedThreadName),
        // A thread created after start (its mask is the main thread's, unblocked by install).
        ScenarioExpectation(name: "background-thread", signal: SIGSEGV, signalName: "SIGSEGV",
                            codeNames: ["SEGV_MAPERR"], faultAddress: 0, threadName: backgroundThreadName),
        ScenarioExpectation(name: "divide-by-zero", signal: SIGFPE, signalName: "SIGFPE", codeNames: ["FPE_INTDIV"]),
        ScenarioExpectation(name: "breakpoint", signal: SIGTRAP, signalName: "SIGTRAP", codeNames: [breakpointCodeName]),
        ScenarioExpectation(name: "bus-error", signal: SIGBUS, signalName: "SIGBUS", codeNames: ["BUS_ADRERR"]),
        ScenarioExpectation(name: "bad-syscall", signal: SIGSYS, signalName: "SIGSYS", codeNames: ["SYS_SECCOMP"]),
    ].map { expectation in
        var blocked = expectation
        blocked.blockAllSignals = true
        blocked.variant = "blocked-mask"
        return blocked
    }
    // The program blocks every signal in the main thread after start, each way the C library offers (and the
    // raw system call, which only the pthread_create trampoline can undo, for the threads created after it).
    let afterStartWays: [(ScenarioExpectation, String)] = [
        (ScenarioExpectation(name: "null-deref", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                             faultAddress: 0), "pthread_sigmask-block"),
        (ScenarioExpectation(name: "divide-by-zero", signal: SIGFPE, signalName: "SIGFPE", codeNames: ["FPE_INTDIV"]),
         "pthread_sigmask-setmask"),
        (ScenarioExpectation(name: "illegal-instruction", signal: SIGILL, signalName: "SIGILL",
                             codeNames: ["ILL_ILLOPN"]), "sigprocmask-block"),
        (ScenarioExpectation(name: "swift-fatal-error", signal: SIGILL, signalName: "SIGILL", codeNames: ["ILL_ILLOPN"],
                             fatalMessage: "boom 42"), "sigprocmask-setmask"),
        (ScenarioExpectation(name: "abort", signal: SIGABRT, signalName: "SIGABRT", codeNames: ["SI_TKILL"]),
         "sigprocmask-setmask"),
        (ScenarioExpectation(name: "background-thread", signal: SIGSEGV, signalName: "SIGSEGV",
                             codeNames: ["SEGV_MAPERR"], faultAddress: 0, threadName: backgroundThreadName),
         "raw-syscall"),
        // What stays impossible: the main thread blocked with the raw system call, then a fault on it. The
        // process ends as without Vaka, with no report (checked by testRawSyscallBlockedMainThreadIsNotReported).
        (ScenarioExpectation(name: "null-deref", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                             faultAddress: 0), "raw-syscall"),
    ]
    let afterStart: [ScenarioExpectation] = afterStartWays.map { way in
        var blocked = way.0
        blocked.arguments = ["--block-signals", way.1]
        blocked.variant = way.1
        return blocked
    }
    list += afterStart
    return list.map { expectation in
        var blocked = expectation
        blocked.environment = noBacktrace
        blocked.swiftBacktrace = false
        return blocked
    }
}()

/// Variants: a scenario run again under a hostile condition. Not in `--list`; keyed `name+variant`.
let variantExpectations: [ScenarioExpectation] = [
    // process_vm_readv refused (seccomp EPERM): the plugin's build ID is read at crash time from the link
    // map, so it can only be there if the fallback memory reader works.
    ScenarioExpectation(name: "dlopen-plugin", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        faultAddress: 0, frameImage: pluginFileName, arguments: ["--deny-process-vm-readv"],
                        variant: "deny-process-vm-readv"),
    // Re-entrancy: the capture faults on purpose (test hook) right after the header (stage 1) or while
    // unwinding (stage 2), for a hardware fault, a re-sent signal (abort) and a background thread. Checked by
    // HardeningScenarioTests.checkFaultedCapture, not by checkScenario.
    ScenarioExpectation(name: "null-deref", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        arguments: ["--fault-in-handler", "1"], variant: "fault-stage-1"),
    ScenarioExpectation(name: "abort", signal: SIGABRT, signalName: "SIGABRT", codeNames: ["SI_TKILL"],
                        arguments: ["--fault-in-handler", "1"], variant: "fault-stage-1"),
    ScenarioExpectation(name: "abort", signal: SIGABRT, signalName: "SIGABRT", codeNames: ["SI_TKILL"],
                        arguments: ["--fault-in-handler", "2"], variant: "fault-stage-2"),
    ScenarioExpectation(name: "background-thread", signal: SIGSEGV, signalName: "SIGSEGV", codeNames: ["SEGV_MAPERR"],
                        arguments: ["--fault-in-handler", "2"], variant: "fault-stage-2"),
]

/// The dlopen plugin's file name in the products directory (SwiftPM product `VakaCrashmePlugin`).
let pluginFileName = "libVakaCrashmePlugin.so"
/// `VAKA_CRASHME_OVERFLOW_THREAD_NAME` in vaka_crashme.h.
let overflowThreadName = "crashme-so"
/// `VAKA_CRASHME_BLOCKED_THREAD_NAME` in vaka_crashme.h.
let blockedThreadName = "crashme-blk"

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
    /// Its stdout decoded as a JSON object (decoded on each use: the outcome itself holds only `Sendable`
    /// values, so that the tests can read it from several threads).
    var event: [String: Any]? { convert.flatMap { decodeJSONObject($0.stdout) } }
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
        for expectation in scenarioExpectations + variantExpectations + blockedSignalExpectations {
            queue.addOperation {
                let outcome = runScenario(expectation)
                outcomes.withLock { $0[expectation.key] = outcome }
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
        let work = Paths.freshDirectory(expectation.key)
        let environment = childEnvironment.merging(expectation.environment) { _, new in new }
        let storage = work.appendingPathComponent("storage", isDirectory: true)
        let storageWithout = work.appendingPathComponent("storage-no-vaka", isDirectory: true)
        var outcome = ScenarioOutcome(expectation: expectation, storage: storage)
        do {
            outcome.withVaka = try runChild(Paths.harness, [expectation.name, "--storage", storage.path] + expectation.arguments,
                                            label: "with-vaka", outputDirectory: work, environment: environment,
                                            blockAllSignals: expectation.blockAllSignals)
            outcome.reports = crashFiles(in: storage)
            outcome.withoutVaka = try runChild(Paths.harness,
                                               [expectation.name, "--storage", storageWithout.path, "--no-vaka"] + expectation.arguments,
                                               label: "without-vaka", outputDirectory: work,
                                               environment: environment, blockAllSignals: expectation.blockAllSignals)
            outcome.reportsWithoutVaka = crashFiles(in: storageWithout)
            if outcome.reports.count == 1 {
                let convert = try runChild(Paths.cli, ["report", "convert", outcome.reports[0].path],
                                           label: "convert", outputDirectory: work)
                outcome.convert = convert
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
