import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaCrash

/// The report contract between the C writer and the Swift reader: the reader knows exactly the keys of
/// `include/vaka/vaka_report_format.h`, takes every one of them into its field, and uses the header's magic,
/// version, limits and signal-name table. (Reports written by the real handler: ReportContractProcessTests.)
final class ReportContractTests: XCTestCase {
    /// `VAKA_REPORT_KEY_<NAME> "<key>"` definitions in the header's text, as (macro suffix, key).
    private func headerKeys() throws -> [(macro: String, key: String)] {
        let header = Paths.repositoryRoot.appendingPathComponent("include/vaka/vaka_report_format.h")
        let text = try String(contentsOf: header, encoding: .utf8)
        let pattern = try NSRegularExpression(pattern: #"^#define VAKA_REPORT_KEY_([A-Z0-9_]+) "([^"]*)""#,
                                              options: .anchorsMatchLines)
        return pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)).map { match in
            (String(text[Range(match.range(at: 1), in: text)!]), String(text[Range(match.range(at: 2), in: text)!]))
        }
    }

    func testTheReaderKnowsExactlyTheKeysOfTheHeader() throws {
        let header = try headerKeys()
        XCTAssertGreaterThanOrEqual(header.count, 20, "the header's key macros were not found: \(header)")
        let readerKeys = ReportKey.allCases.map(\.name)
        XCTAssertEqual(Set(readerKeys).count, readerKeys.count, "two reader keys share a name: \(readerKeys)")
        XCTAssertEqual(Set(readerKeys), Set(header.map(\.key)),
                       "keys only in the header (the reader would ignore them): \(Set(header.map(\.key)).subtracting(readerKeys)); "
                       + "keys only in the reader: \(Set(readerKeys).subtracting(header.map(\.key)))")
        for (macro, key) in header {
            XCTAssertEqual(macro, key.uppercased(), "VAKA_REPORT_KEY_\(macro) is \"\(key)\": the macro is not the key in upper snake case")
        }
    }

    func testEveryKeyFillsItsField() throws {
        let line: [ReportKey: String] = [
            .runID: "r-1", .pid: "41", .tid: "42", .threadName: "worker", .timestampNs: "1796040000123456789",
            .arch: VAKA_REPORT_ARCH_X86_64, .executable: "/bin/app", .signal: "11 SIGSEGV", .code: "1 SEGV_MAPERR",
            .faultAddress: "0x10", .sender: "7 1000", .fatalMessage: "boom", .abortMessage: "assert", .journalSeq: "1234",
            .register: "rip 0x1234", .frame: "0x1234 \(VAKA_REPORT_FRAME_METHOD_CONTEXT)", .framesTruncated: "128",
            .image: "0x1000 0x2000 abcd /lib/x.so", .threads: "3 2 1000", .thread: "43 \(VAKA_REPORT_THREAD_BLOCKED) w 2",
            .threadProc: "43 S 202 0x7ff0 0x1010", .threadFrames: "43 \(VAKA_REPORT_FRAME_METHOD_SCAN) 0:10 1234", .memoryRead: VAKA_REPORT_MEMORY_READ_PVR, .captureNs: "183211",
            .pad: "....",
        ]
        var text = "\(VAKA_REPORT_MAGIC) \(VAKA_REPORT_VERSION)\n"
        for key in ReportKey.allCases where key != .end {
            let value = try XCTUnwrap(line[key], "no test value for \(key.name)")
            text += "\(key.name) \(value)\n"
        }
        text += "\(VAKA_REPORT_KEY_END)\n"
        let report = try CrashReport(data: Data(text.utf8))
        XCTAssertEqual(report.diagnostics, CrashReport.Diagnostics(), text)
        for key in ReportKey.allCases {
            XCTAssertTrue(key.isFilled(in: report), "\(key.name): its field is empty after\n\(text)")
        }
        XCTAssertEqual(report.executable, "/bin/app")
        XCTAssertEqual(report.frames, [.init(address: 0x1234, method: "context")])
        XCTAssertEqual(report.images, [.init(base: 0x1000, size: 0x2000, buildID: "abcd", path: "/lib/x.so")])
    }

    func testMagicVersionAndLimitsAreTheHeaders() throws {
        // The reader states the version it understands; the writer's must be that one.
        XCTAssertEqual(CrashReport.supportedVersion, Int(VAKA_REPORT_VERSION))
        XCTAssertNoThrow(try CrashReport(data: Data("\(VAKA_REPORT_MAGIC) \(VAKA_REPORT_VERSION)\nsignal 6\nend\n".utf8)))
        XCTAssertEqual(CrashReport.maxLineLength, Int(VAKA_REPORT_MAX_LINE))
        XCTAssertGreaterThanOrEqual(CrashReport.maxFrames, Int(VAKA_REPORT_MAX_FRAMES))
        XCTAssertGreaterThanOrEqual(CrashReport.maxImages, Int(VAKA_MAX_IMAGES))
        XCTAssertGreaterThanOrEqual(CrashReport.maxBuildIDDigits, 2 * Int(VAKA_REPORT_BUILD_ID_MAX))
        XCTAssertEqual(CrashReport.fileName(runID: "r", forkChildPID: 7), "r-7\(VAKA_REPORT_FILE_SUFFIX)")
        // The longest line the writer can write (an image whose longest path is escaped byte by byte) is read.
        let path = String(repeating: "\\x01", count: Int(VAKA_REPORT_PATH_MAX))
        let buildID = String(repeating: "ab", count: Int(VAKA_REPORT_BUILD_ID_MAX))
        let image = "\(VAKA_REPORT_KEY_IMAGE) 0xffffffffffffffff 0xffffffffffffffff \(buildID) \(path)"
        XCTAssertLessThanOrEqual(image.utf8.count, CrashReport.maxLineLength)
        let report = try CrashReport(data: Data("VAKA-CRASH 1\nsignal 11\n\(image)\nend\n".utf8))
        XCTAssertEqual(report.images.first?.path?.utf8.count, Int(VAKA_REPORT_PATH_MAX))
        XCTAssertEqual(report.images.first?.buildID, buildID)
    }

    func testSignalNamesComeFromTheRuntimesTable() throws {
        for number: Int32 in 1...64 {
            let report = try CrashReport(data: Data("VAKA-CRASH 1\nsignal \(number)\nend\n".utf8))
            let expected = vaka_signal_name(number).map { String(cString: $0) } ?? "SIG\(number)"
            XCTAssertEqual(report.signal.name, expected)
        }
        XCTAssertEqual(signalName(SIGSEGV), "SIGSEGV")
        XCTAssertEqual(signalName(SIGSYS), "SIGSYS")
        XCTAssertEqual(signalName(40), "SIG40")
    }
}
