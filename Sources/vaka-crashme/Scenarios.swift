import Dispatch
import Foundation
import Synchronization
import VakaCrashmeC

/// One way to crash the process, as offered by `vaka-crashme SCENARIO`.
///
/// The function that crashes carries the scenario's name (ignoring case, `-` and `_`): `crashme_null_deref`
/// in C, `swiftForceUnwrap` in Swift, so a symbolicated report points at it.
struct Scenario: Sendable {
    /// The name on the command line, e.g. `null-deref`.
    let name: String
    /// One line for `--help`: what it does and which signal / si_code it is expected to die with.
    let summary: String
    /// Crashes the process. Returns only when the crash did not happen: 0 when the faulting operation
    /// completed (e.g. a handler swallowed the signal), else an errno value from setting the fault up.
    /// The argument is the storage directory (an existing, writable, absolute path).
    let trigger: @Sendable (_ storageDirectory: String) -> Int32
}

/// All scenarios, in the order `--list` prints them: the basic crashes (one per signal and language), then the
/// hardening scenarios (threads, tasks, plugins, corrupt state, faults inside the capture), then blocked signals.
let scenarios: [Scenario] = [
    Scenario(name: "null-deref", summary: "C read through NULL: SIGSEGV SEGV_MAPERR at 0x0",
             trigger: { _ in crashme_null_deref() }),
    Scenario(name: "wild-write", summary: "C write to 0xdeadbeef008 (unmapped): SIGSEGV SEGV_MAPERR at that address",
             trigger: { _ in crashme_wild_write() }),
    Scenario(name: "abort", summary: "abort(): SIGABRT SI_TKILL",
             trigger: { _ in crashme_abort() }),
    Scenario(name: "swift-fatal-error", summary: "fatalError(\"boom 42\"): SIGILL ILL_ILLOPN (x86_64), message \"boom 42\"",
             trigger: { _ in swiftFatalError() }),
    Scenario(name: "swift-force-unwrap", summary: "force-unwrap of nil: SIGILL, \"Unexpectedly found nil\" (debug builds)",
             trigger: { _ in swiftForceUnwrap() }),
    Scenario(name: "swift-index-out-of-range", summary: "array index out of range: SIGILL, \"Index out of range\" (debug builds)",
             trigger: { _ in swiftIndexOutOfRange() }),
    Scenario(name: "divide-by-zero", summary: "C integer division by zero: SIGFPE FPE_INTDIV",
             trigger: { _ in crashme_divide_by_zero() }),
    Scenario(name: "illegal-instruction", summary: "ud2 in C: SIGILL ILL_ILLOPN",
             trigger: { _ in crashme_illegal_instruction() }),
    Scenario(name: "breakpoint", summary: "int3 in C: SIGTRAP (si_code SI_KERNEL on x86_64 Linux)",
             trigger: { _ in crashme_breakpoint() }),
    Scenario(name: "bus-error", summary: "touch a mapped page past the end of a truncated file: SIGBUS BUS_ADRERR",
             trigger: { storage in crashme_bus_error(storage) }),
    Scenario(name: "bad-syscall", summary: "seccomp filter traps getppid(0x56414b41), then calls it: SIGSYS SYS_SECCOMP",
             trigger: { _ in crashme_bad_syscall() }),
    Scenario(name: "background-thread", summary: "NULL read on a pthread named \"crashme-bg\": SIGSEGV on that thread",
             trigger: { _ in crashme_background_thread() }),
    Scenario(name: "stack-overflow", summary: "unbounded C recursion on the main thread: SIGSEGV",
             trigger: { _ in crashme_stack_overflow(0) }),
    Scenario(name: "write-readonly", summary: "C write into a read-only mapping: SIGSEGV SEGV_ACCERR",
             trigger: { _ in crashme_write_readonly() }),
    Scenario(name: "c-assert", summary: "failing C assert(): SIGABRT, glibc's assertion text as abort message",
             trigger: { _ in crashme_c_assert(opaque(41)) }),
    Scenario(name: "swift-task", summary: "force-unwrap of nil inside a Swift Task: SIGILL on a cooperative-pool thread",
             trigger: { _ in swiftTask() }),
    Scenario(name: "dispatch-queue", summary: "NULL read inside a DispatchQueue block: SIGSEGV on the queue's worker",
             trigger: { _ in dispatchQueue() }),
    Scenario(name: "dlopen-plugin", summary: "NULL read inside libVakaCrashmePlugin.so, dlopen'ed after start: SIGSEGV",
             trigger: { _ in crashme_dlopen_plugin(pluginPath()) }),
    Scenario(name: "stack-overflow-thread", summary: "unbounded C recursion on a thread started after start: SIGSEGV",
             trigger: { _ in crashme_stack_overflow_thread() }),
    Scenario(name: "concurrent", summary: "8 threads read through NULL at the same instant: SIGSEGV, one report",
             trigger: { _ in crashme_concurrent() }),
    Scenario(name: "heap-corruption", summary: "double free (glibc aborts inside free): SIGABRT with abort message",
             trigger: { _ in crashme_heap_corruption() }),
    Scenario(name: "corrupt-frame-pointer", summary: "NULL read after overwriting rbp with garbage: SIGSEGV",
             trigger: { _ in crashme_corrupt_frame_pointer() }),
    Scenario(name: "crash-in-handler", summary: "test hook faults inside the capture, then NULL read: SIGSEGV, truncated report",
             trigger: { _ in crashme_crash_in_handler() }),
    Scenario(name: "locks-held", summary: "NULL read while holding stdout/stderr FILE locks and a mutex: SIGSEGV",
             trigger: { _ in crashme_locks_held() }),
    Scenario(name: "blocked-signals-thread",
             summary: "NULL read on a pthread \"crashme-blk\" that blocked every signal first: SIGSEGV SEGV_MAPERR",
             trigger: { _ in crashme_blocked_signals_thread() }),
    Scenario(name: "all-threads",
             summary: "9 named threads parked (read, mutex, spin, nanosleep, cond, all signals blocked, one named vaka.impostor, Dispatch, Task), then NULL read on main: SIGSEGV",
             trigger: { _ in allThreads() }),
    Scenario(name: "stack-overflow-early-thread",
             summary: "unbounded C recursion on a thread created before Vaka.start: SIGSEGV",
             trigger: { _ in crashme_stack_overflow_early_thread() }),
]

/// Scenarios that need something done before `Vaka.start` (the harness calls this first): a thread that exists
/// before install. Returns 0 or an errno value.
func prepareBeforeStart(_ name: String) -> Int32 {
    name == "stack-overflow-early-thread" ? crashme_early_thread_create() : 0
}

// MARK: - Every thread

/// Names of the Swift-made threads of `all-threads` (15 bytes at most).
let allThreadsQueueName = "crashme-queue"
let allThreadsTaskName = "crashme-task"

/// `all-threads`: parks seven C threads (``crashme_all_threads_park()``), a Dispatch worker in
/// ``allThreadsDispatchWork(_:_:)`` and a Swift `Task` that suspends on a continuation nobody resumes
/// (``allThreadsTaskBody(_:)``; its cooperative thread, named first, goes back to the pool), then reads through
/// NULL on the main thread (``crashme_all_threads()``).
@inline(never)
func allThreads() -> Int32 {
    let rc = crashme_all_threads_park()
    if rc != 0 { return rc }
    let ready = DispatchSemaphore(value: 0)
    let never = DispatchSemaphore(value: 0)
    DispatchQueue(label: "vaka.crashme.all-threads").async { allThreadsDispatchWork(ready, never) }
    ready.wait()
    let taskReady = DispatchSemaphore(value: 0)
    Task.detached { await allThreadsTaskBody(taskReady) }
    taskReady.wait()
    usleep(100_000)  // the task suspends right after it signals; its thread goes idle in the pool
    return crashme_all_threads()
}

/// The Dispatch worker of `all-threads`: names its thread and waits on a semaphore nobody signals.
@inline(never)
func allThreadsDispatchWork(_ ready: DispatchSemaphore, _ never: DispatchSemaphore) {
    crashme_name_thread(allThreadsQueueName)
    ready.signal()
    never.wait()
}

/// The Swift `Task` of `all-threads`: names the cooperative thread it runs on, then suspends on a continuation
/// nobody resumes (the task then has no thread: the thread waits in the pool for work).
@inline(never)
func allThreadsTaskBody(_ ready: DispatchSemaphore) async {
    crashme_name_thread(allThreadsTaskName)
    let _: Int = await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
        ready.signal()
        allThreadsKeep.withLock { $0.append(continuation) }
    }
}

/// Keeps the suspended task's continuation alive (never resumed).
let allThreadsKeep = Mutex<[CheckedContinuation<Int, Never>]>([])

/// Path of the dlopen plugin: `$VAKA_CRASHME_PLUGIN`, else `libVakaCrashmePlugin.so` next to this executable
/// (SwiftPM builds both into the same products directory).
func pluginPath() -> String {
    if let path = ProcessInfo.processInfo.environment["VAKA_CRASHME_PLUGIN"], !path.isEmpty { return path }
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("libVakaCrashmePlugin.so").path
}

// MARK: - Swift concurrency and Dispatch scenarios

/// Starts a detached `Task` whose body force-unwraps nil (``swiftTaskBody()``) and blocks until it ends
/// (it never does: the process dies with SIGILL on a cooperative-pool thread).
@inline(never)
func swiftTask() -> Int32 {
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        _ = swiftTaskBody()
        done.signal()
    }
    done.wait()
    return 0
}

/// Force-unwraps a nil `Int?` (runs inside a Task): SIGILL.
@inline(never)
func swiftTaskBody() -> Int32 {
    let value: Int? = opaque(nil)
    return Int32(truncatingIfNeeded: value!)
}

/// Runs ``dispatchQueueWork()`` on a serial `DispatchQueue` and blocks until it ends (it never does).
@inline(never)
func dispatchQueue() -> Int32 {
    let queue = DispatchQueue(label: "vaka.crashme.queue")
    let done = DispatchSemaphore(value: 0)
    queue.async {
        _ = dispatchQueueWork()
        done.signal()
    }
    done.wait()
    return 0
}

/// Reads through NULL (in C) from a queue's worker thread: SIGSEGV.
@inline(never)
func dispatchQueueWork() -> Int32 {
    crashme_null_deref()
}

// MARK: - Swift scenarios (debug builds: the runtime checks give their messages)

/// Returns its argument through a call the optimiser cannot see into, so checks are not folded away.
@inline(never)
func opaque<T>(_ value: T) -> T { value }

/// `fatalError("boom 42")`: SIGILL (ud2) on x86_64; the runtime's fatal message ends in "Fatal error: boom 42".
@inline(never)
func swiftFatalError() -> Int32 {
    fatalError("boom \(opaque(42))")
}

/// Force-unwraps a nil `Int?`: SIGILL; message "Unexpectedly found nil while unwrapping an Optional value".
@inline(never)
func swiftForceUnwrap() -> Int32 {
    let value: Int? = opaque(nil)
    return Int32(truncatingIfNeeded: value!)
}

/// Reads index 3 of a 3-element array: SIGILL; message "Index out of range".
@inline(never)
func swiftIndexOutOfRange() -> Int32 {
    let numbers = opaque([1, 2, 3])
    return Int32(truncatingIfNeeded: numbers[opaque(numbers.count)])
}
