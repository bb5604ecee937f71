import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaSymbolication

/// Produced events must pass Sentry Relay's normalizer (`scripts/relay-validate.py`).
///
/// Needs `VAKA_RELAY_PYTHON`: a python with `sentry_relay` (pip install sentry-relay==0.10.1). Without it
/// the test is skipped, unless `VAKA_REQUIRE_PEERS=1`, which makes a missing peer a failure.
final class RelayValidationTests: XCTestCase {
    func testProducedEventsPassRelaysNormalizer() throws {
        let python = try Peers.relayPython()
        let dir = try ScratchDirs.directory(for: self)
        let example = try exampleCrashReport()
        let marker = markerFunctionAddress()
        let exe = try XCTUnwrap(try TestSupport.image(containing: marker))
        let exeFile = try ElfFile(path: exe.path)
        let hex = { (value: UInt64) in "0x" + String(value, radix: 16) }
        let reports: [String: String] = [
            "example": example,
            "truncated": String(example[..<example.range(of: "register rbx")!.lowerBound]),
            "symbolicated": """
                VAKA-CRASH 1
                run_id relay-check
                tid 1
                thread_name \\xff\\x01odd name
                executable \(exe.path)
                signal 4 SIGILL
                code 2 ILL_ILLOPN
                fault_addr \(hex(marker))
                fatal_message Fatal error: "quoted" \\t tab\\n
                register rip \(hex(marker))
                frame \(hex(marker)) context
                frame 0xffffffffffffffff fp
                image \(hex(exe.base)) \(hex(exeFile.loadSpan)) \(exeFile.buildID ?? "-") \(exe.path)
                capture_ns 5
                end

                """,
            "minimal": "VAKA-CRASH 1\nsignal 31 SIGSYS\nend\n",
        ]
        var files: [String] = []
        for (name, text) in reports.sorted(by: { $0.key < $1.key }) {
            let event = FatalEventBuilder(symbolicator: Symbolicator()).event(from: try CrashReport(data: Data(text.utf8)))
            let file = dir.appendingPathComponent("\(name).json")
            try event.jsonData().write(to: file)
            files.append(file.path)
        }
        let script = Paths.repositoryRoot.appendingPathComponent("scripts/relay-validate.py").path
        let result = try runProcess(python, [script] + files)
        XCTAssertEqual(result.status, 0, "relay-validate found problems:\n\(result.stdoutText)\(result.stderrText)")
        XCTAssertEqual(result.stdoutText.components(separatedBy: ": ok\n").count - 1, files.count, result.stdoutText)
    }
}
