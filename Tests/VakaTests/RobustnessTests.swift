import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaSymbolication

/// Hostile inputs: crafted ELF files and crafted reports must neither crash
/// the converter nor make it spend memory or time in proportion to a size the input claims.
enum Crafted {
    /// A small shared library of the toolchain with a `.symtab` (and `.dynsym`) exporting `_Block_copy`.
    static let blocksRuntime = "/opt/swift/usr/lib/swift/linux/libBlocksRuntime.so"

    /// Copies `source` to `destination`, sets the `.symtab` section header's `sh_offset`, `sh_size` and
    /// `sh_entsize` (ELF64 little-endian), and makes the file `length` bytes long (sparse: a hole on disk).
    static func patchSymtab(_ source: String, to destination: URL, offset: UInt64, size: UInt64, entsize: UInt64,
                            length: UInt64) throws {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: source)))
        func u64(_ at: Int) -> UInt64 { (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[at + $1]) << (8 * UInt64($1)) } }
        func u16(_ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }
        func put(_ value: UInt64, _ at: Int) { for i in 0..<8 { bytes[at + i] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(i))) } }
        let shoff = Int(u64(0x28))
        var patched = false
        for index in 0..<u16(0x3c) {
            let header = shoff + index * 64
            if bytes[header + 4] == 2 && bytes[header + 5] == 0 && bytes[header + 6] == 0 && bytes[header + 7] == 0 {
                put(offset, header + 24); put(size, header + 32); put(entsize, header + 56)
                patched = true
            }
        }
        guard patched else { throw NSError(domain: "vaka-tests", code: 10, userInfo: [NSLocalizedDescriptionKey: "no .symtab"]) }
        try Data(bytes).write(to: destination)
        guard truncate(destination.path, off_t(length)) == 0 else {
            throw NSError(domain: "vaka-tests", code: 11, userInfo: [NSLocalizedDescriptionKey: "truncate failed"])
        }
    }
}

final class CraftedElfTests: XCTestCase {
    /// A `.symtab` whose `sh_entsize` is 1 over a 2.4 GB hole of a sparse file: the reader once reserved
    /// `sh_size / sh_entsize` entries (96 GB) and aborted. It must be ignored, and `.dynsym` still used.
    func testSymbolTableWithWrongEntrySizeIsIgnored() throws {
        let dir = try ScratchDirs.directory(for: self)
        let path = dir.appendingPathComponent("entsize1.so")
        try Crafted.patchSymtab(Crafted.blocksRuntime, to: path, offset: 1 << 30, size: 24 * 100_000_000, entsize: 1,
                                length: (1 << 30) + 24 * 100_000_000)
        let file = try ElfFile(path: path.path)
        XCTAssertNotNil(file.buildID)
        XCTAssertFalse(file.hasSymtab)
        XCTAssertTrue(file.hasDynsym)
        XCTAssertEqual(file.symbol(containing: 0xbb0 + 4)?.name, "_Block_copy")
    }

    /// A well-formed entry size but 100 million entries (over a hole): more than ``ElfFile/maxSymbolsPerTable``,
    /// so the table is ignored instead of read (the reader once took a minute and gigabytes on such a file).
    func testSymbolTableLargerThanTheCapIsIgnored() throws {
        let dir = try ScratchDirs.directory(for: self)
        let path = dir.appendingPathComponent("entsize24.so")
        try Crafted.patchSymtab(Crafted.blocksRuntime, to: path, offset: 1 << 30, size: 24 * 100_000_000, entsize: 24,
                                length: (1 << 30) + 24 * 100_000_000)
        let file = try ElfFile(path: path.path)
        XCTAssertFalse(file.hasSymtab)
        XCTAssertEqual(file.symbol(containing: 0xbb0)?.name, "_Block_copy")
    }

    /// A `.symtab` that claims to extend past the end of the file is ignored.
    func testSymbolTablePastTheEndOfTheFileIsIgnored() throws {
        let dir = try ScratchDirs.directory(for: self)
        let path = dir.appendingPathComponent("past-end.so")
        let length = UInt64(try FileManager.default.attributesOfItem(atPath: Crafted.blocksRuntime)[.size] as! Int)
        try Crafted.patchSymtab(Crafted.blocksRuntime, to: path, offset: length - 48, size: 24 * 1000, entsize: 24,
                                length: length)
        let file = try ElfFile(path: path.path)
        XCTAssertFalse(file.hasSymtab)
        XCTAssertTrue(file.hasDynsym)
    }

    /// Files above ``ElfFile/maxFileSize`` (here a sparse 16 GiB + 1 byte copy of a real library) are refused.
    func testFilesLargerThanTheCapAreRefused() throws {
        let dir = try ScratchDirs.directory(for: self)
        let path = dir.appendingPathComponent("huge.so")
        try FileManager.default.copyItem(atPath: Crafted.blocksRuntime, toPath: path.path)
        XCTAssertEqual(truncate(path.path, off_t(ElfFile.maxFileSize + 1)), 0)
        XCTAssertThrowsError(try ElfFile(path: path.path)) { error in
            XCTAssertEqual(error as? ElfError, .tooLarge(path: path.path, size: ElfFile.maxFileSize + 1))
        }
    }
}

final class ManyImagesTests: XCTestCase {
    private func openDescriptorCount() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
    }

    /// An open ``ElfFile`` keeps its mapping, not its descriptor: 64 of them alive at once add no descriptors.
    func testOpenElfFilesDoNotKeepDescriptors() throws {
        let before = try openDescriptorCount()
        let files = try (0..<64).map { _ in try ElfFile(path: Crafted.blocksRuntime) }
        XCTAssertLessThan(try openDescriptorCount(), before + 8)
        XCTAssertEqual(files.last?.symbol(containing: 0xbb0)?.name, "_Block_copy")
    }

    /// 300 frames, each in its own image, the image paths being different spellings of one file
    /// (`//opt/…`, `///opt/…`, `/opt/./…`): the file is opened once, at most
    /// ``Symbolicator/maxImagesPerReport`` images are symbolicated and the rest are counted in `extra`.
    func testImagesThatAreOneFileAreOpenedOnceAndImagesPerReportAreCapped() throws {
        let file = try ElfFile(path: Crafted.blocksRuntime)
        let buildID = try XCTUnwrap(file.buildID)
        let count = 300
        var frames = ""
        var images = ""
        for index in 0..<count {
            let base: UInt64 = 0x1000_0000_0000 + UInt64(index) << 24
            // The crash site is looked up at its address, callers at address - 1: both land in _Block_copy.
            frames += "frame 0x\(String(base + 0xbb0 + (index == 0 ? 0 : 1), radix: 16)) cfi\n"
            let relative = String(Crafted.blocksRuntime.dropFirst())
            let spelling = index % 2 == 0 ? String(repeating: "/", count: 1 + index / 2) + relative
                                          : "/" + String(repeating: "./", count: 1 + index / 2) + relative
            images += "image 0x\(String(base, radix: 16)) 0x\(String(file.loadSpan, radix: 16)) \(buildID) \(spelling)\n"
        }
        let text = "VAKA-CRASH 1\nsignal 11 SIGSEGV\n" + frames + images + "end\n"
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        let event = FatalEventBuilder(symbolicator: symbolicator).event(from: try CrashReport(data: Data(text.utf8)))
        XCTAssertEqual(symbolicator.openedFileCount, 1)
        let eventFrames = try XCTUnwrap(event.exception?.values.first?.stacktrace?.frames)
        XCTAssertEqual(eventFrames.count, count)
        // Oldest first: the last 256 event frames are the first 256 report frames.
        XCTAssertEqual(eventFrames.suffix(Symbolicator.maxImagesPerReport).filter { $0.function == "_Block_copy" }.count,
                       Symbolicator.maxImagesPerReport)
        XCTAssertTrue(eventFrames.prefix(count - Symbolicator.maxImagesPerReport).allSatisfy { $0.function == nil })
        XCTAssertEqual(event.extra?["images_not_symbolicated"], .int(Int64(count - Symbolicator.maxImagesPerReport)))

        // The same cap when an event JSON is symbolicated again.
        var unsymbolicated = FatalEventBuilder(symbolicator: nil).event(from: try CrashReport(data: Data(text.utf8)))
        unsymbolicated.threads = nil
        let json = try JSONDecoder().decode(JSONValue.self, from: try unsymbolicated.jsonData())
        let again = Symbolicator(systemDebugDirectory: nil)
        let (_, counts) = EventSymbolicator(symbolicator: again).symbolicate(json)
        XCTAssertEqual(counts.resolved, Symbolicator.maxImagesPerReport)
        XCTAssertEqual(counts.imagesNotSymbolicated, count - Symbolicator.maxImagesPerReport)
        XCTAssertEqual(again.openedFileCount, 1)
    }
}

/// Runs `scripts/relay-validate.py` over `events` (Relay's normalizer); skipped without `VAKA_RELAY_PYTHON`
/// unless `VAKA_REQUIRE_PEERS=1`, as in ``RelayValidationTests``.
func assertRelayAccepts(_ events: [String: Event], in test: XCTestCase, file: StaticString = #filePath,
                        line: UInt = #line) throws {
    let python = try Peers.relayPython()
    let dir = try ScratchDirs.directory(for: test)
    var files: [String] = []
    for (name, event) in events.sorted(by: { $0.key < $1.key }) {
        let url = dir.appendingPathComponent("\(name).json")
        try event.jsonData().write(to: url)
        files.append(url.path)
    }
    let script = Paths.repositoryRoot.appendingPathComponent("scripts/relay-validate.py").path
    let result = try runProcess(python, [script] + files)
    XCTAssertEqual(result.status, 0, "relay-validate found problems:\n\(result.stdoutText)\(result.stderrText)",
                   file: file, line: line)
    XCTAssertEqual(result.stdoutText.components(separatedBy: ": ok\n").count - 1, files.count, result.stdoutText,
                   file: file, line: line)
}

final class UnknownImagePathTests: XCTestCase {
    /// `executable -` and images with path `-`: the first image is still the main executable (in_app), and
    /// images with a build ID stay in debug_meta with code_file `<unknown>` (Relay rejected the event with
    /// `debug_meta.images.N.code_file: missing_attribute`); frames keep their instruction_addr.
    func testImagesWithUnknownPathsGiveAnEventRelayAccepts() throws {
        let text = """
            VAKA-CRASH 1
            run_id unknown-paths
            executable -
            signal 11 SIGSEGV
            code 1 SEGV_MAPERR
            fault_addr 0x0
            frame 0x55d4c2a0b1c4 context
            frame 0x7f3b1a229d90 cfi
            image 0x55d4c2a00000 0x3c000 68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434 -
            image 0x7f3b1a200000 0x1e8000 6e4250d99632b8031d64f7107b94ff9c4737db1a -
            end

            """
        let event = FatalEventBuilder(symbolicator: Symbolicator(systemDebugDirectory: nil))
            .event(from: try CrashReport(data: Data(text.utf8)))
        let frames = try XCTUnwrap(event.exception?.values.first?.stacktrace?.frames)
        XCTAssertEqual(frames.map(\.instructionAddr.value), [0x7f3b1a229d90, 0x55d4c2a0b1c4])
        XCTAssertEqual(frames.map(\.inApp), [false, true])
        XCTAssertEqual(frames.map(\.package), [nil, nil])
        let images = try XCTUnwrap(event.debugMeta?.images)
        XCTAssertEqual(images.map(\.codeFile), ["<unknown>", "<unknown>"])
        XCTAssertEqual(images.map(\.codeID), ["68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434", "6e4250d99632b8031d64f7107b94ff9c4737db1a"])
        try assertRelayAccepts(["unknown-paths": event], in: self)
    }
}

final class ReportInputTests: XCTestCase {
    /// A report with CRLF line ends reads like the original (it was refused with the misleading
    /// `unsupported report format version "1\x0d"`); lines ended by `\r` alone get a clear error.
    func testCRLFReportsAreReadAndCROnlyReportsGetAClearError() throws {
        let example = try exampleCrashReport()
        let crlf = try CrashReport(data: Data(example.replacingOccurrences(of: "\n", with: "\r\n").utf8))
        XCTAssertEqual(crlf, try CrashReport(data: Data(example.utf8)))
        XCTAssertFalse(crlf.isTruncated)
        XCTAssertEqual(crlf.images.last?.path, "[vdso]")
        XCTAssertThrowsError(try CrashReport(data: Data(example.replacingOccurrences(of: "\n", with: "\r").utf8))) { error in
            XCTAssertEqual(error as? CrashReportError, .carriageReturnLineEnds)
            XCTAssertTrue("\(error)".contains("carriage return"), "\(error)")
        }
    }

    /// Negative `pid`, `tid` and `frames_truncated` are malformed, not values.
    func testNegativeCountsAndIdsAreMalformed() throws {
        let report = try CrashReport(data: Data("VAKA-CRASH 1\npid -5\ntid -1\nsignal 11 SIGSEGV\nframes_truncated -3\nend\n".utf8))
        XCTAssertNil(report.pid)
        XCTAssertNil(report.tid)
        XCTAssertNil(report.framesTruncated)
        XCTAssertEqual(report.diagnostics.malformedLines, 3)
        let event = FatalEventBuilder(symbolicator: nil).event(from: report)
        XCTAssertNil(event.extra?["pid"])
        XCTAssertNil(event.extra?["frames_truncated"])
    }

    /// A path with an escaped NUL (`\x00`) is unknown: opening it would open the file named by its first
    /// part (here a real library, which was then used to symbolicate the frame).
    func testPathsWithANULAreUnknown() throws {
        let file = try ElfFile(path: Crafted.blocksRuntime)
        let buildID = try XCTUnwrap(file.buildID)
        let text = """
            VAKA-CRASH 1
            executable \(Crafted.blocksRuntime)\\x00/elsewhere
            signal 11 SIGSEGV
            frame 0x7f0000000bb0 context
            image 0x7f0000000000 0x\(String(file.loadSpan, radix: 16)) \(buildID) \(Crafted.blocksRuntime)\\x00/elsewhere
            end

            """
        let report = try CrashReport(data: Data(text.utf8))
        XCTAssertNil(report.executable)
        XCTAssertNil(report.images.first?.path)
        let event = FatalEventBuilder(symbolicator: Symbolicator(systemDebugDirectory: nil)).event(from: report)
        let frame = try XCTUnwrap(event.exception?.values.first?.stacktrace?.frames.last)
        XCTAssertNil(frame.function)
        XCTAssertNil(frame.package)
        XCTAssertEqual(event.debugMeta?.images.first?.codeFile, "<unknown>")
    }

    /// A relative image path is never opened relative to the converter's working directory, not even to
    /// compute the text-hash debug_id of an image without a build ID.
    func testRelativeImagePathsAreNotOpened() throws {
        let dir = try ScratchDirs.directory(for: self)
        // A copy of a real library whose build-ID note type is changed, so it has no build ID.
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: Crafted.blocksRuntime)))
        let gnu: [UInt8] = [0x47, 0x4e, 0x55, 0x00]
        var patched = false
        for at in 12..<(bytes.count - 4) where Array(bytes[at..<(at + 4)]) == gnu && bytes[at - 4] == 3 && bytes[at - 12] == 4 {
            bytes[at - 4] = 0x99
            patched = true
        }
        XCTAssertTrue(patched)
        try Data(bytes).write(to: dir.appendingPathComponent("nobuildid.so"))
        XCTAssertNil(try ElfFile(path: dir.appendingPathComponent("nobuildid.so").path).buildID)

        let previous = FileManager.default.currentDirectoryPath
        XCTAssertTrue(FileManager.default.changeCurrentDirectoryPath(dir.path))
        defer { _ = FileManager.default.changeCurrentDirectoryPath(previous) }
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        XCTAssertNil(symbolicator.textHashDebugID(imagePath: "nobuildid.so"))
        XCTAssertNotNil(symbolicator.textHashDebugID(imagePath: dir.appendingPathComponent("nobuildid.so").path))
        let text = "VAKA-CRASH 1\nsignal 11 SIGSEGV\nframe 0x7f0000000bb0 context\nimage 0x7f0000000000 0x10000 - nobuildid.so\nend\n"
        let event = FatalEventBuilder(symbolicator: Symbolicator(systemDebugDirectory: nil))
            .event(from: try CrashReport(data: Data(text.utf8)))
        XCTAssertNil(event.exception?.values.first?.stacktrace?.frames.last?.function)
        XCTAssertNil(event.debugMeta)
    }
}
