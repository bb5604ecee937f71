// vaka-crashme: the crash harness. Starts Vaka (unless --no-vaka) and crashes in the named scenario.
// Exit statuses when it does not die by a signal: 0 --list/--help, 2 usage error, 3 the scenario returned
// without crashing, 4 the scenario could not set its fault up (errno printed).
import Foundation
import Vaka
import VakaCrashmeC

let usage = """
    usage: vaka-crashme SCENARIO --storage DIR [--no-vaka] [--deny-process-vm-readv] [--fault-in-handler STAGE]
                        [--dsn DSN] [--scope] [--rich-scope FILE] [--big-breadcrumbs N:BYTES] [--trail N:M] [--block-signals HOW]
                        [--threads N] [--settle]
           vaka-crashme --list
           vaka-crashme --help

    Crashes this process in the named way. Unless --no-vaka is given, Vaka is started first with storage
    directory DIR, so the crash report is written to DIR/crashes/<run-id>.crash (convert it with
    `vaka report convert FILE`). With --no-vaka the same crash happens without Vaka, for comparison: the
    process must end the same way in both cases. --storage is optional with --no-vaka (default: $TMPDIR or
    /tmp; only bus-error uses it then). Core dumps are turned off (RLIMIT_CORE 0).
    --deny-process-vm-readv installs a seccomp filter (before Vaka starts) under which process_vm_readv fails
    with EPERM, as under some container policies, so the crash runtime must use its fallback memory reader.
    --fault-in-handler STAGE arms the crash runtime's test hook after start: the capture faults on purpose at
    STAGE (1 = after the report header, 2 = while unwinding), to exercise the re-entrancy path.
    --block-signals HOW blocks every signal in the main thread's mask after start (with --no-vaka at the same
    point), before the scenario runs. HOW: pthread_sigmask-block, pthread_sigmask-setmask, sigprocmask-block,
    sigprocmask-setmask (the C library calls, which Vaka interposes so the synchronous crash signals stay
    unblocked), or raw-syscall (rt_sigprocmask directly: Vaka cannot see it; see docs/crash-handling.md).
    --threads N starts N more threads (1...1000) that sleep in nanosleep, after start and before the scenario
    (scripts/bench: the crash capture's cost with many threads). --settle calls Vaka.flush() after start and
    waits 200 ms more, so the SDK's start-up work (the crash join on its own thread, which ends a moment after
    flush returns) is over when the scenario runs, as in a program that crashes later in its life (the
    report-size test).

    Exit status: killed by the scenario's signal; 2 for a usage error or an unknown scenario; 3 when the
    scenario returned without crashing; 4 when it could not set its fault up.

    Scenarios:
    """

/// Writes `text` to stderr with write(2) (retrying `EINTR` and short writes), ignoring errors:
/// `FileHandle.write` traps on a write error (a full disk, a closed stderr).
func writeErr(_ text: String) {
    let data = Array(text.utf8)
    var done = 0
    while done < data.count {
        let n = data[done...].withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        done += n
    }
}

func fail(_ message: String, status: Int32) -> Never {
    writeErr("vaka-crashme: \(message)\n")
    exit(status)
}

var scenarioName: String?
var storagePath: String?
var startVaka = true
var denyProcessVMReadv = false
var faultStage: Int32 = 0
var blockSignals: String?
let blockSignalsWays = ["pthread_sigmask-block", "pthread_sigmask-setmask", "sigprocmask-block", "sigprocmask-setmask",
                        "raw-syscall"]
var dsn = ProcessInfo.processInfo.environment["VAKA_DSN"]  // SDK: --dsn DSN or VAKA_DSN (see SDKScenarios.swift)
var withScope = false
var richScope: String?
var bigBreadcrumbs: BigBreadcrumbs?
var trail: Trail?
var extraThreads: Int32 = 0
var settle = false
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--list":
        print(scenarios.map(\.name).joined(separator: "\n"))
        exit(0)
    case "--help", "-h":
        let width = scenarios.map(\.name.count).max() ?? 0
        print(usage)
        for scenario in scenarios {
            print("  \(scenario.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(scenario.summary)")
        }
        printSDKHelp()
        exit(0)
    case "--no-vaka":
        startVaka = false
    case "--deny-process-vm-readv":
        denyProcessVMReadv = true
    case "--fault-in-handler":
        guard let value = arguments.popFirst(), let stage = Int32(value), stage == 1 || stage == 2 else {
            fail("--fault-in-handler needs a stage: 1 or 2", status: 2)
        }
        faultStage = stage
    case "--block-signals":
        guard let value = arguments.popFirst(), blockSignalsWays.contains(value) else {
            fail("--block-signals needs one of: \(blockSignalsWays.joined(separator: ", "))", status: 2)
        }
        blockSignals = value
    case "--storage":
        guard let value = arguments.popFirst() else { fail("--storage needs a directory", status: 2) }
        storagePath = value
    case _ where argument.hasPrefix("--storage="):
        storagePath = String(argument.dropFirst("--storage=".count))
    case "--dsn":
        guard let value = arguments.popFirst() else { fail("--dsn needs a DSN", status: 2) }
        dsn = value
    case "--scope":
        withScope = true
    case "--rich-scope":
        guard let value = arguments.popFirst() else { fail("--rich-scope needs a file to attach", status: 2) }
        richScope = value
    case "--big-breadcrumbs":
        guard let value = arguments.popFirst(), let big = BigBreadcrumbs(value) else {
            fail("--big-breadcrumbs needs N:BYTES (e.g. 100:20000; N 1...10000, BYTES 1...10000000)", status: 2)
        }
        bigBreadcrumbs = big
    case "--trail":
        guard let value = arguments.popFirst(), let parsed = Trail(value) else {
            fail("--trail needs N:M (N breadcrumbs 1...100000, M messages 0...N-1)", status: 2)
        }
        trail = parsed
    case "--settle":
        settle = true
    case "--threads":
        guard let value = arguments.popFirst(), let count = Int32(value), (1...1000).contains(count) else {
            fail("--threads needs a count (1...1000)", status: 2)
        }
        extraThreads = count
    case _ where argument.hasPrefix("-"):
        fail("unknown option \(argument) (see --help)", status: 2)
    default:
        guard scenarioName == nil else { fail("only one scenario at a time (see --help)", status: 2) }
        scenarioName = argument
    }
}

let sdkScenario = sdkScenarios.first { $0.name == scenarioName }
if scenarioName == nil || sdkScenario != nil {
    guard let storagePath else { fail("--storage DIR is required (see --help)", status: 2) }
    runSDKScenario(sdkScenario, storage: URL(fileURLWithPath: storagePath, isDirectory: true), dsn: dsn, withScope: withScope,
                   bigBreadcrumbs: bigBreadcrumbs, richScope: richScope)
}
guard let scenarioName else { fail("no scenario given (see --help, --list)", status: 2) }
guard let scenario = scenarios.first(where: { $0.name == scenarioName }) else {
    fail("unknown scenario '\(scenarioName)' (see --list)", status: 2)
}
if startVaka && storagePath == nil { fail("--storage DIR is required unless --no-vaka is given", status: 2) }
let storage = URL(fileURLWithPath: storagePath ?? ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp",
                  isDirectory: true)
do {
    try FileManager.default.createDirectory(at: storage, withIntermediateDirectories: true)
} catch {
    fail("cannot create storage directory \(storage.path): \(error)", status: 4)
}

var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
_ = getrlimit(Int32(RLIMIT_CORE.rawValue), &noCore)
noCore.rlim_cur = 0
_ = setrlimit(Int32(RLIMIT_CORE.rawValue), &noCore)

if denyProcessVMReadv {
    let rc = crashme_deny_process_vm_readv()
    if rc != 0 { fail("cannot install the process_vm_readv filter: \(String(cString: strerror(rc)))", status: 4) }
}

let prepared = prepareBeforeStart(scenario.name)
if prepared != 0 { fail("\(scenario.name): could not set up the fault: \(String(cString: strerror(prepared)))", status: 4) }

if startVaka {
    let debug = ProcessInfo.processInfo.environment["VAKA_DEBUG"] == "1"
    Vaka.start(harnessOptions(Vaka.Options(dsn: dsn, debug: debug, storageDirectory: storage)))
    // The scenarios are about the report of a prepared runtime, not about which thread ran first (a crash before
    // start's background thread prepared it unwinds by frame pointers: DeferredPreparationTests).
    crashme_finish_crash_preparation()
    if withScope { applyHarnessScope() }
    if let richScope { applyRichScope(attachment: richScope) }
    bigBreadcrumbs?.add()
    trail?.add()
    if faultStage != 0 { crashme_arm_fault_in_handler(faultStage) }
    if settle {
        _ = Vaka.flush()
        // flush returns once start's thread has opened its gate, a moment before that thread ends.
        usleep(200_000)
    }
}

if let blockSignals {
    let rc = crashme_block_signals(blockSignals)
    if rc != 0 { fail("cannot block signals (\(blockSignals)): \(String(cString: strerror(rc)))", status: 4) }
}

if extraThreads > 0 {
    let rc = crashme_park_sleepers(extraThreads)
    if rc != 0 { fail("cannot start \(extraThreads) threads: \(String(cString: strerror(rc)))", status: 4) }
}

let result = scenario.trigger(storage.path)

// Only reached when the scenario did not kill the process.
if result != 0 {
    fail("\(scenario.name): could not set up the fault: \(String(cString: strerror(result)))", status: 4)
}
fail("\(scenario.name): returned without crashing", status: 3)
