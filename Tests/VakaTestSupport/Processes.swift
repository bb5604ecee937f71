import Foundation
import XCTest

/// How a child process ended and what it wrote.
public struct ProcessResult {
    /// Exit status, or the signal number when `reason` is `.uncaughtSignal`.
    public var status: Int32
    /// `.exit` or `.uncaughtSignal`.
    public var reason: Process.TerminationReason
    /// Its standard output.
    public var stdout: Data
    /// Its standard error.
    public var stderr: Data
    /// Standard output as UTF-8 text.
    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    /// Standard error as UTF-8 text.
    public var stderrText: String { String(decoding: stderr, as: UTF8.self) }
}

/// Runs `executable` with `arguments` (stdin `/dev/null`) and waits, collecting stdout and stderr (read
/// concurrently, so large outputs do not block the child).
/// - Throws: when the executable cannot be started.
public func runProcess(_ executable: String, _ arguments: [String]) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let errData = Locked(Data())
    let group = DispatchGroup()
    group.enter()
    DispatchQueue.global().async {
        let data = err.fileHandleForReading.readDataToEndOfFile()
        errData.withLock { $0 = data }
        group.leave()
    }
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitUntilExit()
    return ProcessResult(status: process.terminationStatus, reason: process.terminationReason,
                         stdout: outData, stderr: errData.withLock { $0 })
}

/// Runs the built `vaka` command-line tool (``Paths/cli``) with `arguments` and waits; a death by signal
/// is a test failure (reported at the caller's `file`/`line`).
/// - Throws: ``MissingProduct`` when `vaka` is not built, or when it cannot be started.
public func vaka(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult {
    let result = try runProcess(try Paths.built(Paths.cli), arguments)
    XCTAssertEqual(result.reason, .exit, "vaka \(arguments.joined(separator: " ")) died from signal \(result.status): \(result.stderrText)",
                   file: file, line: line)
    return result
}

/// Waits for the `fork()`ed child `pid`, polling every `interval` µs up to `seconds`; SIGKILLs and reaps it when
/// it has not exited by then. Returns whether it exited in time and its `waitpid` status.
public func waitForForkedChild(_ pid: pid_t, seconds: Double, interval: UInt32 = 50_000) -> (exited: Bool, status: Int32) {
    var status: Int32 = 0
    let polls = max(1, Int(seconds * 1_000_000 / Double(interval)))
    for _ in 0..<polls {
        if waitpid(pid, &status, WNOHANG) == pid { return (true, status) }
        usleep(interval)
    }
    kill(pid, SIGKILL)
    waitpid(pid, &status, 0)
    return (false, status)
}
