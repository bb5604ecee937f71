import Foundation
import XCTest

/// The `vaka` executable, run as a child process.
final class CommandLineTests: XCTestCase {
    private func vaka(_ arguments: [String]) throws -> TestSupport.ProcessResult {
        let path = TestSupport.productsDirectory.appendingPathComponent("vaka").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            XCTFail("vaka is not built at \(path)")
            throw XCTSkip("vaka missing")
        }
        let result = try TestSupport.run(path, arguments)
        XCTAssertEqual(result.reason, .exit, "vaka died from signal \(result.status): \(result.stderrText)")
        return result
    }

    private func write(_ data: Data, _ name: String) throws -> String {
        let file = try TestSupport.temporaryDirectory(self).appendingPathComponent(name)
        try data.write(to: file)
        return file.path
    }

    func testConvertPrintsTheEventJSON() throws {
        let file = try write(Data(try TestSupport.exampleReport().utf8), "example.crash")
        let result = try vaka(["report", "convert", file])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stderrText, "")
        XCTAssertFalse(result.stdoutText.dropLast().contains("\n"), "compact JSON is one line")
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        XCTAssertEqual(json["event_id"] as? String, "5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b")
        XCTAssertEqual(json["level"] as? String, "fatal")

        let pretty = try vaka(["report", "convert", "--pretty", file])
        XCTAssertEqual(pretty.status, 0)
        XCTAssertTrue(pretty.stdoutText.contains("\n  \"contexts\" : {"), pretty.stdoutText)
    }

    func testTruncatedReportGivesAPartialEventAndAWarning() throws {
        let example = try TestSupport.exampleReport()
        let cut = String(example[..<example.range(of: "frame 0x55d4c2a0b3a0")!.lowerBound])
        let result = try vaka(["report", "convert", try write(Data(cut.utf8), "cut.crash")])
        XCTAssertEqual(result.status, 0)
        XCTAssertTrue(result.stderrText.contains("truncated"), result.stderrText)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        XCTAssertEqual((json["extra"] as? [String: Any])?["report_truncated"] as? Bool, true)
        XCTAssertEqual((json["tags"] as? [String: String])?["vaka.report_truncated"], "true")
    }

    func testBadInputsExitNonZeroWithAMessage() throws {
        var rng = SplitMix64(seed: 42)
        let random = Data((0..<65536).map { _ in UInt8.random(in: 0...255, using: &rng) })
        let cases: [(String, Data, String)] = [
            ("empty.crash", Data(), "empty"),
            ("random.crash", random, "not a Vaka crash report"),
            ("line.crash", Data(repeating: 0x41, count: 10 * 1024 * 1024) + Data("\n".utf8), "not a Vaka crash report"),
            ("v2.crash", Data("VAKA-CRASH 2\nsignal 11 SIGSEGV\nend\n".utf8), "unsupported report format version"),
            ("nosignal.crash", Data("VAKA-CRASH 1\npid 1\n".utf8), "truncated before its signal line"),
        ]
        for (name, data, message) in cases {
            let path = try write(data, name)
            let result = try vaka(["report", "convert", path])
            XCTAssertEqual(result.status, 1, name)
            XCTAssertEqual(result.stdout, Data(), name)
            XCTAssertTrue(result.stderrText.hasPrefix("vaka: \(path): "), "\(name): \(result.stderrText)")
            XCTAssertTrue(result.stderrText.contains(message), "\(name): \(result.stderrText)")
        }
        let missing = try vaka(["report", "convert", "/nonexistent/x.crash"])
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderrText.contains("No such file"), missing.stderrText)
        let directory = try vaka(["report", "convert", "/tmp"])
        XCTAssertEqual(directory.status, 1)
    }

    func testHelpAndUsageErrors() throws {
        let help = try vaka(["--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdoutText.contains("report convert FILE [--pretty]"))
        let reportHelp = try vaka(["report", "--help"])
        XCTAssertEqual(reportHelp.status, 0)
        XCTAssertTrue(reportHelp.stdoutText.contains("Usage: vaka report convert FILE [--pretty]"))
        XCTAssertEqual(try vaka(["report", "convert", "--help"]).status, 0)
        for arguments in [[], ["frobnicate"], ["report"], ["report", "explode"], ["report", "convert"],
                          ["report", "convert", "a", "b"], ["report", "convert", "--bogus", "a"]] {
            let result = try vaka(arguments)
            XCTAssertEqual(result.status, 2, "\(arguments)")
            XCTAssertFalse(result.stderrText.isEmpty, "\(arguments)")
        }
    }
}
