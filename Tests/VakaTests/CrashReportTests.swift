import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka

/// The report reader on the documented example and on every kind of bad input.
final class CrashReportTests: XCTestCase {
    private func parse(_ text: String) throws -> CrashReport {
        try CrashReport(data: Data(text.utf8))
    }

    private func assertError(_ bytes: Data, _ expected: CrashReportError, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try CrashReport(data: bytes), file: file, line: line) { error in
            XCTAssertEqual(error as? CrashReportError, expected, file: file, line: line)
        }
    }

    private let minimal = "VAKA-CRASH 1\nsignal 11 SIGSEGV\nend\n"

    // MARK: - The documented example

    func testParsesTheExampleFromTheFormatDoc() throws {
        let report = try parse(try exampleCrashReport())
        XCTAssertEqual(report.version, 1)
        XCTAssertEqual(report.runID, "5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B")
        XCTAssertEqual(report.pid, 41872)
        XCTAssertEqual(report.tid, 41872)
        XCTAssertEqual(report.threadName, "vaka-crashme")
        XCTAssertEqual(report.timestampNs, 1_796_040_000_123_456_789)
        XCTAssertEqual(report.arch, "x86_64")
        XCTAssertEqual(report.executable, "/work/main/.build/debug/vaka-crashme")
        XCTAssertEqual(report.signal, CrashReport.Signal(number: 11, name: "SIGSEGV"))
        XCTAssertEqual(report.code, CrashReport.SignalCode(value: 1, name: "SEGV_MAPERR"))
        XCTAssertEqual(report.faultAddress, 0)
        XCTAssertEqual(report.registers.map(\.name), ["rax", "rbx", "rip", "eflags"])
        XCTAssertEqual(report.registers[2].value, 0x55d4c2a0b1c4)
        XCTAssertEqual(report.frames, [
            .init(address: 0x55d4c2a0b1c4, method: "context"),
            .init(address: 0x55d4c2a0b3a0, method: "cfi"),
            .init(address: 0x55d4c2a0c210, method: "cfi"),
            .init(address: 0x7f3b1a229d90, method: "cfi"),
        ])
        XCTAssertEqual(report.images.count, 3)
        XCTAssertEqual(report.images[0], .init(base: 0x55d4c2a00000, size: 0x3c000,
                                               buildID: "68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434",
                                               path: "/work/main/.build/debug/vaka-crashme"))
        XCTAssertEqual(report.images[2], .init(base: 0x7ffd3a1f6000, size: 0x2000, buildID: nil, path: "[vdso]"))
        XCTAssertEqual(report.captureNs, 183_211)
        XCTAssertEqual(report.journalSeq, 1042)
        XCTAssertFalse(report.isTruncated)
        XCTAssertEqual(report.diagnostics, CrashReport.Diagnostics())
    }

    func testUnescapesTextValuesAndKeepsSpacesInPaths() throws {
        let report = try parse("""
            VAKA-CRASH 1
            thread_name a\\tb\\x01c\\\\d\\ne\\q
            fatal_message main.swift:3: Fatal error: boom 42\\n
            signal 6 SIGABRT
            code -6 SI_TKILL
            sender 123 1000
            image 0x1000 0x2000 ABCDEF01 /opt/my app/lib foo.so
            image 0x4000 0x1000 - -
            end

            """)
        XCTAssertEqual(report.threadName, "a\tb\u{1}c\\d\ne\\q")
        XCTAssertEqual(report.fatalMessage, "main.swift:3: Fatal error: boom 42\n")
        XCTAssertEqual(report.code, .init(value: -6, name: "SI_TKILL"))
        XCTAssertEqual(report.sender, .init(pid: 123, uid: 1000))
        XCTAssertEqual(report.images[0].path, "/opt/my app/lib foo.so")
        XCTAssertEqual(report.images[0].buildID, "abcdef01")
        XCTAssertEqual(report.images[1], .init(base: 0x4000, size: 0x1000, buildID: nil, path: nil))
    }

    func testUnknownKeysAreIgnoredAndRepeatedKeysKeepTheFirst() throws {
        let report = try parse("VAKA-CRASH 1\nfuture_key whatever\nsignal 11 SIGSEGV\nsignal 4 SIGILL\npid 1\npid 2\nend\n")
        XCTAssertEqual(report.signal.name, "SIGSEGV")
        XCTAssertEqual(report.pid, 1)
        XCTAssertEqual(report.diagnostics.malformedLines, 2)
        XCTAssertFalse(report.isTruncated)
    }

    func testSignalWithoutNameGetsTheLinuxName() throws {
        XCTAssertEqual(try parse("VAKA-CRASH 1\nsignal 7\nend\n").signal, .init(number: 7, name: "SIGBUS"))
        XCTAssertEqual(try parse("VAKA-CRASH 1\nsignal 40\nend\n").signal, .init(number: 40, name: "SIG40"))
    }

    func testNothingAfterEndIsRead() throws {
        let report = try parse(minimal + "pid 5\nframe 0x1 cfi\n")
        XCTAssertNil(report.pid)
        XCTAssertTrue(report.frames.isEmpty)
        XCTAssertFalse(report.isTruncated)
    }

    // MARK: - Bad input

    func testEmptyInputIsAnError() {
        assertError(Data(), .empty)
    }

    func testWrongMagicIsNotAReport() {
        assertError(Data("VAKA-CRASX 1\nsignal 11 SIGSEGV\nend\n".utf8), .notAReport(firstLine: "VAKA-CRASX 1"))
        assertError(Data("\n".utf8), .notAReport(firstLine: ""))
        assertError(Data("VAKA-CRASHY 1\n".utf8), .notAReport(firstLine: "VAKA-CRASHY 1"))
        assertError(Data("{\"event_id\": 1}".utf8), .notAReport(firstLine: "{\"event_id\": 1}"))
    }

    func testOtherVersionsAreRefused() {
        assertError(Data("VAKA-CRASH 3\nsignal 11 SIGSEGV\nend\n".utf8), .unsupportedVersion("3"))
        assertError(Data("VAKA-CRASH\nsignal 11 SIGSEGV\nend\n".utf8), .unsupportedVersion(""))
        assertError(Data("VAKA-CRASH 01\n".utf8), .unsupportedVersion("01"))
        assertError(Data("VAKA-CRASH 99999999999999999999999\n".utf8), .unsupportedVersion("99999999999999999999999"))
    }

    func testMissingSignalIsAnError() {
        assertError(Data("VAKA-CRASH 1\npid 3\nend\n".utf8), .missingSignal(truncated: false, problem: nil))
        assertError(Data("VAKA-CRASH 1\npid 3\n".utf8), .missingSignal(truncated: true, problem: nil))
        XCTAssertThrowsError(try parse("VAKA-CRASH 1\nsignal 99999999999999 SIGSEGV\nend\n")) { error in
            guard case .missingSignal(false, let problem)? = error as? CrashReportError else {
                return XCTFail("unexpected \(error)")
            }
            XCTAssertEqual(problem, "line 2: bad signal \"99999999999999 SIGSEGV\"")
        }
        assertError(Data("VAKA-CRASH 1\nsignal 0 NONE\nend\n".utf8),
                    .missingSignal(truncated: false, problem: "line 2: bad signal \"0 NONE\""))
    }

    func testEveryPrefixOfTheExampleEitherFailsCleanlyOrIsMarkedTruncated() throws {
        let example = Data(try exampleCrashReport().utf8)
        let signalLineEnd = example.range(of: Data("signal 11 SIGSEGV\n".utf8))!.upperBound
        for length in 0..<example.count {
            let prefix = example.prefix(length)
            do {
                let report = try CrashReport(data: prefix)
                // No strict prefix is complete: even "…\nend" lacks the newline that ends its last line.
                XCTAssertTrue(report.isTruncated, "prefix of \(length) bytes")
                XCTAssertGreaterThanOrEqual(length, signalLineEnd, "prefix of \(length) bytes parsed without its signal line")
                XCTAssertEqual(report.signal.name, "SIGSEGV")
                let event = FatalEventBuilder(symbolicator: nil).event(from: report)
                XCTAssertEqual(event.extra?["report_truncated"], .bool(true))
                XCTAssertEqual(event.tags?["vaka.report_truncated"], "true")
                XCTAssertNoThrow(try event.jsonData())
            } catch let error as CrashReportError {
                XCTAssertLessThan(length, signalLineEnd, "prefix of \(length) bytes: \(error)")
            }
        }
        XCTAssertFalse(try CrashReport(data: example).isTruncated)
    }

    /// Every line ends in `\n` (docs/report-format.md); a last line without it was cut while
    /// being written, so it is ignored, `end` included: such a report is truncated.
    func testAnUnterminatedLastLineIsDroppedEndIncluded() throws {
        let cut = try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\nframe 0x1234 cfi\nframe 0x12")
        XCTAssertEqual(cut.frames.map(\.address), [0x1234], "half a frame line is not a frame")
        XCTAssertTrue(cut.isTruncated)
        let body = "VAKA-CRASH 1\nsignal 11 SIGSEGV\npid 42\nframe 0x1234 cfi\n"
        for tail in ["end", "en", "e", "end\r", "end \r"] {
            let report = try parse(body + tail)
            XCTAssertTrue(report.isTruncated, "\(tail.debugDescription) without its newline")
            XCTAssertEqual(report.frames.map(\.address), [0x1234], tail.debugDescription)
            XCTAssertEqual(report.pid, 42, tail.debugDescription)
            let event = FatalEventBuilder(symbolicator: nil).event(from: report)
            XCTAssertEqual(event.extra?["report_truncated"], .bool(true), tail.debugDescription)
            XCTAssertEqual(event.tags?["vaka.report_truncated"], "true", tail.debugDescription)
        }
        // A value cut mid-way is not taken: "pid 4" may be "pid 41872" cut short.
        let cutPid = try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\npid 4")
        XCTAssertNil(cutPid.pid)
        XCTAssertTrue(cutPid.isTruncated)
        // The signal line itself cut before its newline: no signal, so no event.
        assertError(Data("VAKA-CRASH 1\nsignal 11 SIGSEGV".utf8), .missingSignal(truncated: true, problem: nil))
        assertError(Data("VAKA-CRASH 1".utf8), .missingSignal(truncated: true, problem: nil))
        // With its newline (either line end) the report is complete.
        XCTAssertFalse(try parse(body + "end\n").isTruncated)
        XCTAssertFalse(try parse(body.replacingOccurrences(of: "\n", with: "\r\n") + "end\r\n").isTruncated)
        XCTAssertTrue(try parse(body + "end\n").diagnostics.problems.isEmpty)
        XCTAssertEqual(try parse(body + "end").diagnostics.problems, ["line 5: no line end (cut while written), ignored"])
    }

    func testRandomBytesNeverCrashTheReader() throws {
        var rng = SplitMix64(seed: 0x5eed)
        for round in 0..<200 {
            let count = Int.random(in: 0...4096, using: &rng)
            var bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if round % 2 == 1 {
                // Same garbage after a valid start: must parse as a truncated report.
                bytes = Array("VAKA-CRASH 1\nsignal 11 SIGSEGV\n".utf8) + bytes
                let report = try CrashReport(data: Data(bytes))
                XCTAssertTrue(report.isTruncated)
                XCTAssertNoThrow(try FatalEventBuilder(symbolicator: nil).event(from: report).jsonData())
            } else {
                XCTAssertThrowsError(try CrashReport(data: Data(bytes))) { error in
                    XCTAssertNotNil(error as? CrashReportError)
                }
            }
        }
    }

    func testAnOverlongLineIsSkippedAndCounted() throws {
        let huge = String(repeating: "A", count: 1024 * 1024)
        let report = try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\nthread_name \(huge)\nframe 0x10 context\nend\n")
        XCTAssertEqual(report.diagnostics.skippedLongLines, 1)
        XCTAssertNil(report.threadName)
        XCTAssertEqual(report.frames.map(\.address), [0x10])
        XCTAssertFalse(report.isTruncated)
        let event = FatalEventBuilder(symbolicator: nil).event(from: report)
        XCTAssertEqual(event.extra?["report_skipped_lines"], .int(1))
        // A line just at the cap is kept.
        let atCap = String(repeating: "b", count: CrashReport.maxLineLength - "thread_name ".utf8.count)
        XCTAssertEqual(try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\nthread_name \(atCap)\nend\n").threadName, atCap)
    }

    /// The cap exactly (the report contract's VAKA_REPORT_MAX_LINE, bytes without the newline): a line of that
    /// many bytes is read, a line one byte longer is skipped and counted, like any longer one; also when it is
    /// the first line after the header and when the next line is `end`.
    func testALineOneByteOverTheCapIsSkipped() throws {
        let key = "thread_name "
        let atCap = String(repeating: "b", count: CrashReport.maxLineLength - key.utf8.count)
        let overCap = atCap + "c"
        XCTAssertEqual((key + overCap).utf8.count, CrashReport.maxLineLength + 1)
        let kept = try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\n\(key)\(atCap)\nend\n")
        XCTAssertEqual(kept.threadName, atCap)
        XCTAssertEqual(kept.diagnostics.skippedLongLines, 0)
        let over = try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\n\(key)\(overCap)\nend\n")
        XCTAssertTrue(over.threadName == nil, "a line of maxLineLength + 1 bytes was read (thread_name of \(over.threadName?.utf8.count ?? 0) bytes)")
        XCTAssertEqual(over.diagnostics.skippedLongLines, 1)
        XCTAssertFalse(over.isTruncated)
        let twoOver = try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\n\(key)\(overCap)c\nend\n")
        XCTAssertTrue(twoOver.threadName == nil)
        XCTAssertEqual(twoOver.diagnostics.skippedLongLines, 1)
    }

    func testATenMegabyteLineCutsTheReportAtTheSizeCap() throws {
        // 10 MB is over the 8 MiB file cap: what comes before the line is kept, the rest is cut.
        let huge = String(repeating: "A", count: 10 * 1024 * 1024)
        let report = try parse("VAKA-CRASH 1\nsignal 11 SIGSEGV\nthread_name \(huge)\nframe 0x10 context\nend\n")
        XCTAssertTrue(report.isTruncated)
        XCTAssertEqual(report.diagnostics.skippedLongLines, 1)
        XCTAssertNil(report.threadName)
        XCTAssertEqual(report.signal.number, 11)
    }

    func testAHugeFirstLineIsNotAReport() {
        let huge = Data(repeating: 0x41, count: 10 * 1024 * 1024)
        XCTAssertThrowsError(try CrashReport(data: huge)) { error in
            guard case .notAReport(let line)? = error as? CrashReportError else { return XCTFail("\(error)") }
            XCTAssertEqual(line.count, 40)
        }
        XCTAssertThrowsError(try CrashReport(data: Data("VAKA-CRASH 1\n".utf8) + huge)) { error in
            XCTAssertEqual(error as? CrashReportError, .missingSignal(truncated: true, problem: nil))
        }
    }

    func testNulBytesMakeALineMalformed() throws {
        var bytes = Data("VAKA-CRASH 1\nsignal 11 SIGSEGV\nthread_name ab".utf8)
        bytes.append(0)
        bytes.append(contentsOf: Array("cd\nend\n".utf8))
        let report = try CrashReport(data: bytes)
        XCTAssertNil(report.threadName)
        XCTAssertEqual(report.diagnostics.malformedLines, 1)
        var badSignal = Data("VAKA-CRASH 1\nsignal 11".utf8)
        badSignal.append(0)
        badSignal.append(contentsOf: Array(" SIGSEGV\nend\n".utf8))
        XCTAssertThrowsError(try CrashReport(data: badSignal))
    }

    func testInvalidUTF8IsReplaced() throws {
        var bytes = Data("VAKA-CRASH 1\nsignal 11 SIGSEGV\nthread_name a".utf8)
        bytes.append(contentsOf: [0xFF, 0xFE, 0xC3])
        bytes.append(contentsOf: Array("b\nexecutable /tmp/\u{e9}t\u{e9}/app\nend\n".utf8))
        let report = try CrashReport(data: bytes)
        XCTAssertEqual(report.threadName, "a\u{FFFD}\u{FFFD}\u{FFFD}b")
        XCTAssertEqual(report.executable, "/tmp/\u{e9}t\u{e9}/app")
        let json = try FatalEventBuilder(symbolicator: nil).event(from: report).jsonData()
        XCTAssertNotNil(try JSONSerialization.jsonObject(with: json))
    }

    func testHugeNumbersAreRejectedPerLine() throws {
        let report = try parse("""
            VAKA-CRASH 1
            pid 99999999999999999999999
            tid -1
            timestamp_ns 18446744073709551615
            capture_ns 18446744073709551616
            signal 11 SIGSEGV
            code 4294967296 BIG
            fault_addr 0x1ffffffffffffffff
            register rip 0xffffffffffffffff
            register rsp 0x
            frame 0x10000000000000000 cfi
            frame 0xffffffffffffffff cfi
            image 0x1 0xfffffffffffffffff - /x
            frames_truncated 9999999999999999999999
            end

            """)
        XCTAssertNil(report.pid)
        XCTAssertNil(report.tid)  // negative: malformed
        XCTAssertEqual(report.timestampNs, UInt64.max)
        XCTAssertNil(report.captureNs)
        XCTAssertNil(report.code)
        XCTAssertNil(report.faultAddress)
        XCTAssertEqual(report.registers, [.init(name: "rip", value: UInt64.max)])
        XCTAssertEqual(report.frames.map(\.address), [UInt64.max])
        XCTAssertTrue(report.images.isEmpty)
        XCTAssertNil(report.framesTruncated)
        XCTAssertEqual(report.diagnostics.malformedLines, 9)
        let event = FatalEventBuilder(symbolicator: nil).event(from: report)
        XCTAssertNoThrow(try event.jsonData())
    }

    func testTooManyFramesAreCapped() throws {
        var text = "VAKA-CRASH 1\nsignal 11 SIGSEGV\n"
        for index in 0..<(CrashReport.maxFrames + 10) { text += "frame 0x\(String(index + 1, radix: 16)) cfi\n" }
        let report = try parse(text + "end\n")
        XCTAssertEqual(report.frames.count, CrashReport.maxFrames)
        XCTAssertEqual(report.diagnostics.malformedLines, 10)
    }

    // MARK: - Files

    func testReadsFilesAndRefusesNonFiles() throws {
        let dir = try ScratchDirs.directory(for: self)
        let file = dir.appendingPathComponent("r.crash")
        try Data(minimal.utf8).write(to: file)
        XCTAssertEqual(try CrashReport(contentsOf: file.path).signal.number, 11)
        XCTAssertThrowsError(try CrashReport(contentsOf: dir.path)) { error in
            XCTAssertEqual(error as? CrashReportError, .notARegularFile(path: dir.path))
        }
        let missing = dir.appendingPathComponent("missing.crash").path
        XCTAssertThrowsError(try CrashReport(contentsOf: missing)) { error in
            XCTAssertEqual(error as? CrashReportError, .cannotRead(path: missing, errno: ENOENT))
        }
    }

    func testAFileOverTheSizeCapIsReadUpToTheCapAndMarkedTruncated() throws {
        let dir = try ScratchDirs.directory(for: self)
        let file = dir.appendingPathComponent("big.crash")
        var bytes = Data("VAKA-CRASH 1\nsignal 11 SIGSEGV\n".utf8)
        let filler = Data("padding_key some value that readers ignore\n".utf8)
        while bytes.count <= CrashReport.maxFileSize { bytes.append(filler) }
        bytes.append(Data("end\n".utf8))
        try bytes.write(to: file)
        let report = try CrashReport(contentsOf: file.path)
        XCTAssertTrue(report.isTruncated)
        XCTAssertEqual(report.signal.number, 11)
    }
}
