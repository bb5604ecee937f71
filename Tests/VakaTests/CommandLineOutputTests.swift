import Foundation
import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The `vaka` CLI when standard output cannot be written (a full disk, a closed
/// descriptor, a file over RLIMIT_FSIZE, a pipe without a reader while SIGPIPE is ignored) is a failure with
/// one `vaka: cannot write to standard output: ...` line and status 1 for every command, never a trap; a
/// reader that goes away with SIGPIPE at its default ends vaka by SIGPIPE quietly (like `cat`).
final class CommandLineOutputTests: XCTestCase {
    private var vakaPath: String { Paths.cli.path }

    /// How a run ended and what it wrote on stderr.
    private struct Ending {
        var reason: Process.TerminationReason
        var status: Int32
        var stderr: String
    }

    /// Runs `executable arguments` with stdout on `stdout` (a descriptor owned by the caller) and stderr
    /// collected; gives up after 60 s (a generous bound).
    private func run(_ executable: String, _ arguments: [String], stdout: FileHandle) throws -> Ending {
        _ = try Paths.built(Paths.cli)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let err = Pipe()
        process.standardOutput = stdout
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        let deadline = Date().addingTimeInterval(60)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { process.terminate(); XCTFail("\(arguments) did not end within 60 s") }
        process.waitUntilExit()
        return Ending(reason: process.terminationReason, status: process.terminationStatus,
                      stderr: String(decoding: errData, as: UTF8.self))
    }

    /// Inputs for every command that prints something: a report, an event JSON, an ELF file, an envelope.
    private func inputs() throws -> [[String]] {
        let dir = try ScratchDirs.directory(for: self)
        let report = dir.appendingPathComponent("example.crash")
        try Data(try exampleCrashReport().utf8).write(to: report)
        let event = dir.appendingPathComponent("event.json")
        try Data(#"{"event_id":"5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b","level":"error","platform":"native"}"#.utf8).write(to: event)
        let payload = #"{"event_id":"5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b","message":"hello"}"#
        let envelope = dir.appendingPathComponent("1.envelope")
        try Data("{\"event_id\":\"5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b\"}\n{\"type\":\"event\",\"length\":\(payload.utf8.count)}\n\(payload)\n".utf8)
            .write(to: envelope)
        return [["report", "convert", report.path], ["symbolicate", report.path], ["symbolicate", event.path, "--pretty"],
                ["debug-files", "check", vakaPath, "--json"], ["debug-files", "check", vakaPath],
                ["outbox", "show", envelope.path], ["--help"], ["--version"]]
    }

    private func assertOutputError(_ ending: Ending, _ arguments: [String], _ reason: String,
                                   file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(ending.reason, .exit, "vaka \(arguments) died from signal \(ending.status): \(ending.stderr.prefix(300))", file: file, line: line)
        XCTAssertEqual(ending.status, 1, "vaka \(arguments): \(ending.stderr.prefix(300))", file: file, line: line)
        XCTAssertEqual(ending.stderr, "vaka: cannot write to standard output: \(reason)\n", "vaka \(arguments)", file: file, line: line)
    }

    /// `> /dev/full` (ENOSPC) for every command that prints: one line, status 1.
    func testEveryCommandToAFullStdoutFailsWithOneLine() throws {
        for arguments in try inputs() {
            let full = try XCTUnwrap(FileHandle(forWritingAtPath: "/dev/full"))
            let ending = try run(vakaPath, arguments, stdout: full)
            try full.close()
            assertOutputError(ending, arguments, "No space left on device")
        }
    }

    /// `>&-` (a closed stdout): the descriptor is taken by a read-only /dev/null at start, so the write fails
    /// with EBADF, and no file vaka opens becomes its stdout.
    func testEveryCommandWithAClosedStdoutFailsWithOneLine() throws {
        for arguments in try inputs() {
            let script = "exec \"$0\" \"$@\" >&-"
            let ending = try run("/bin/sh", ["-c", script, vakaPath] + arguments, stdout: FileHandle.nullDevice)
            assertOutputError(ending, arguments, "Bad file descriptor")
        }
    }

    /// A pipe whose reader is gone. With SIGPIPE ignored (inherited from the parent): EPIPE, one line,
    /// status 1. With SIGPIPE at its default: killed by SIGPIPE, nothing on stderr, as other filters
    /// (`vaka report convert FILE | head -c1`).
    func testAPipeWithoutReaderIsAnErrorWhenSIGPIPEIsIgnoredAndQuietOtherwise() throws {
        let report = try inputs()[0]
        for ignored in [true, false] {
            var fds: [Int32] = [0, 0]
            XCTAssertEqual(pipe(&fds), 0)
            close(fds[0])  // no reader: every write gets EPIPE (and SIGPIPE)
            let writer = FileHandle(fileDescriptor: fds[1], closeOnDealloc: true)
            let ending = try run("/usr/bin/env", [ignored ? "--ignore-signal=PIPE" : "--default-signal=PIPE", vakaPath] + report,
                                 stdout: writer)
            try writer.close()
            if ignored {
                assertOutputError(ending, report, "Broken pipe")
            } else {
                XCTAssertEqual(ending.reason, .uncaughtSignal, "\(ending)")
                XCTAssertEqual(ending.status, SIGPIPE, "\(ending)")
                XCTAssertEqual(ending.stderr, "", "a closed pipe ends vaka quietly")
            }
        }
    }

    /// Standard output a file over RLIMIT_FSIZE (`ulimit -f 1` = 1 KiB): EFBIG, one line, status 1 — not
    /// SIGXFSZ and a core dump.
    func testStdoutOverTheFileSizeLimitFailsWithOneLine() throws {
        let dir = try ScratchDirs.directory(for: self)
        let out = dir.appendingPathComponent("out.json").path
        for arguments in try inputs().prefix(2) {
            let script = "ulimit -f 1 && exec \"$0\" \"$@\" > '\(out)'"
            let ending = try run("/bin/sh", ["-c", script, vakaPath] + arguments + ["--pretty"], stdout: FileHandle.nullDevice)
            assertOutputError(ending, arguments, "File too large")
        }
    }
}
