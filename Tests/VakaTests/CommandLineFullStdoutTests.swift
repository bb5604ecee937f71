import Foundation
import XCTest
import VakaTestSupport

/// The `vaka` CLI with a full standard output: its help promises "Every failure prints one `vaka: ...` line on
/// stderr" with exit status 1. Writing the result to a full or closed standard output must be such a failure,
/// not a trap.
final class CommandLineFullStdoutTests: XCTestCase {
    /// Runs `vaka` with stdout on `/dev/full` (every write fails with ENOSPC); stderr collected.
    private func vakaToFullStdout(_ arguments: [String]) throws -> (Process.TerminationReason, Int32, String) {
        let path = try Paths.built(Paths.cli)
        let full = try XCTUnwrap(FileHandle(forWritingAtPath: "/dev/full"))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let err = Pipe()
        process.standardOutput = full
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationReason, process.terminationStatus, String(decoding: errData, as: UTF8.self))
    }

    /// `vaka report convert FILE > /dev/full` and `vaka symbolicate FILE > /dev/full` die with SIGILL today:
    /// `printOut`/`FileHandle.standardOutput.write` (Sources/vaka/main.swift) is Foundation's trapping
    /// `write(_:)` ("'try!' expression unexpectedly raised an error ... No space left on device") and print a
    /// Swift crash backtrace. Expected: one `vaka: ...` line and exit status 1.
    func testWritingTheEventToAFullStdoutIsAnErrorNotATrap() throws {
        let dir = try ScratchDirs.directory(for: self)
        let report = dir.appendingPathComponent("example.crash")
        try Data(try exampleCrashReport().utf8).write(to: report)
        for arguments in [["report", "convert", report.path], ["symbolicate", report.path]] {
            let (reason, status, stderr) = try vakaToFullStdout(arguments)
            XCTAssertEqual(reason, .exit, "vaka \(arguments[0]) died from signal \(status) writing to a full stdout: \(stderr.prefix(300))")
            XCTAssertEqual(status, 1, "vaka \(arguments[0])")
            XCTAssertTrue(stderr.hasPrefix("vaka: "), "vaka \(arguments[0]): \(stderr.prefix(300))")
        }
    }
}
