import Foundation
import XCTest
import VakaTestSupport

/// Inputs found by `scripts/fuzz` that once crashed the report reader. Each must convert (exit 0) now.
final class FuzzRegressionTests: XCTestCase {
    /// Converts `text` written to a file with `vaka report convert` and expects exit 0 and a JSON event.
    func assertConverts(_ text: String, label: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let dir = Paths.freshDirectory("fuzz-\(label)")
        let report = dir.appendingPathComponent("\(label).crash")
        try Data(text.utf8).write(to: report)
        let result = try runChild(Paths.cli, ["report", "convert", report.path], label: "convert", outputDirectory: dir,
                                  environment: ["SWIFT_BACKTRACE": "enable=no"])
        XCTAssertEqual(result.outcome, "exit 0", "\(label): \(result.stderrTail())", file: file, line: line)
        XCTAssertNotNil(decodeJSONObject(result.stdout), "\(label): no JSON event", file: file, line: line)
    }

    /// A one-character image path ("1"): `NSString.deletingLastPathComponent` trapped (SIGILL) in
    /// swift-corelibs-foundation while computing `in_app`. Found by scripts/fuzz (mutated real report).
    func testOneCharacterImagePath() throws {
        try assertConverts("""
            VAKA-CRASH 1
            run_id fuzz-1
            executable /x/vaka-crashme
            signal 11 SIGSEGV
            code 1 SEGV_MAPERR
            frame 0x1010 context
            image 0x1000 0x1000 - 1
            end

            """, label: "one-char-image-path")
    }

    /// The same with a one-character executable path.
    func testOneCharacterExecutablePath() throws {
        try assertConverts("""
            VAKA-CRASH 1
            run_id fuzz-2
            executable 1
            signal 11 SIGSEGV
            code 1 SEGV_MAPERR
            frame 0x1010 context
            image 0x1000 0x1000 - /a/b
            end

            """, label: "one-char-executable")
    }
}
