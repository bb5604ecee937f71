import Foundation
import XCTest
import VakaTestSupport
@testable import VakaSymbolication
import CLibdw

/// DWARF in zlib-compressed sections (`SHF_COMPRESSED`, as distro debug files such as `libc6-dbg`'s ship it),
/// which ``ElfFile/withDwarfSections(_:)`` inflates ahead of libdw: the same functions, files and lines as the
/// same DWARF uncompressed and as `eu-addr2line` (libdw inflating the file itself); libdw inflates nothing on its
/// own; a damaged section costs the file and line, never a crash or a wrong answer.
///
/// The fixture is a small C program built with `cc -g -O2` (GCC emits `.debug_aranges`, DWARF 5 location lists
/// and inlined functions), compressed with `objcopy --compress-debug-sections=zlib`.
final class CompressedDebugSectionsTests: XCTestCase {
    private var scratch = ScratchDirs()

    override func tearDown() {
        scratch.removeAll()
        super.tearDown()
    }

    private static let source = """
    #include <stdio.h>
    #include <stdlib.h>
    static inline __attribute__((always_inline)) int square(int x) { return x * x; }
    static inline __attribute__((always_inline)) int twice_square(int x) { return 2 * square(x) + 1; }
    __attribute__((noinline)) int sum_squares(int n) {
        int total = 0;
        for (int i = 0; i < n; i++) total += twice_square(i);
        return total;
    }
    __attribute__((noinline)) long parse_all(int argc, char **argv) {
        long sum = 0;
        for (int i = 1; i < argc; i++) {
            char *end;
            long value = strtol(argv[i], &end, 10);
            if (*end != 0) fprintf(stderr, "not a number: %s\\n", argv[i]);
            else sum += value * square((int)value);
        }
        return sum;
    }
    int main(int argc, char **argv) {
        printf("%d %ld\\n", sum_squares(argc * 10), parse_all(argc, argv));
        return 0;
    }
    """

    /// The fixture built: `plain` with uncompressed DWARF, `compressed` the same file with zlib-compressed
    /// sections.
    private func fixture() throws -> (plain: String, compressed: String, directory: URL) {
        let directory = scratch.make("compressed-dwarf")
        guard let cc = Peers.cCompiler else { throw XCTSkip("no C compiler in /usr/bin") }
        let objcopy = try Peers.tool("objcopy", install: "binutils: scripts/bootstrap")
        let source = directory.appendingPathComponent("fixture.c")
        try Data(Self.source.utf8).write(to: source)
        let plain = directory.appendingPathComponent("fixture").path
        let compressed = directory.appendingPathComponent("fixture-compressed").path
        let build = try runProcess(cc, ["-g", "-O2", "-gdwarf-5", "-Wl,--build-id", "-o", plain, source.path])
        XCTAssertEqual(build.status, 0, build.stderrText)
        let compress = try runProcess(objcopy, ["--compress-debug-sections=zlib", plain, compressed])
        XCTAssertEqual(compress.status, 0, compress.stderrText)
        return (plain, compressed, directory)
    }

    /// Every 3rd byte of `.text`, as ELF virtual addresses.
    private static func textAddresses(_ file: ElfFile) throws -> [UInt64] {
        let text = try XCTUnwrap(file.sectionHeaders.first { $0.name == ".text" })
        let start = try XCTUnwrap(sectionAddress(file, index: text.index))
        return Array(stride(from: start, to: start + text.size, by: 3))
    }

    private static func sectionAddress(_ file: ElfFile, index: Int) -> UInt64? {
        file.withHandle { elf -> UInt64? in
            var shdr = GElf_Shdr()
            guard let scn = elf_getscn(elf, index), gelf_getshdr(scn, &shdr) != nil else { return nil }
            return shdr.sh_addr
        }
    }

    /// `sh_flags` and `sh_type` of the `.debug_*` sections in libelf's copy of the headers (what libdw reads).
    private static func debugSectionHeaders(_ file: ElfFile) -> [String: (flags: UInt64, type: UInt32)] {
        file.withHandle { elf -> [String: (flags: UInt64, type: UInt32)] in
            var result: [String: (flags: UInt64, type: UInt32)] = [:]
            for section in file.sectionHeaders where section.name.hasPrefix(".debug_") {
                var shdr = GElf_Shdr()
                if let scn = elf_getscn(elf, section.index), gelf_getshdr(scn, &shdr) != nil {
                    result[section.name] = (shdr.sh_flags, shdr.sh_type)
                }
            }
            return result
        }
    }

    /// Asserts that libdw inflated nothing itself: no `.debug_*` section of `file` is still `SHF_COMPRESSED`, and the
    /// location lists, which no lookup reads, were not inflated (`SHT_NOBITS` in libelf's copy of the header).
    private func assertInflatedAhead(_ file: ElfFile, line: UInt = #line) {
        let headers = Self.debugSectionHeaders(file)
        XCTAssertFalse(headers.isEmpty, line: line)
        for (name, header) in headers where header.type != UInt32(SHT_NOBITS) {
            XCTAssertEqual(header.flags & UInt64(SHF_COMPRESSED), 0, "\(name) is still compressed", line: line)
        }
        if let loclists = headers[".debug_loclists"] {
            XCTAssertEqual(loclists.type, UInt32(SHT_NOBITS), ".debug_loclists was inflated", line: line)
        }
        XCTAssertNotEqual(headers[".debug_info"]?.type, UInt32(SHT_NOBITS), line: line)
        XCTAssertNotEqual(headers[".debug_line"]?.type, UInt32(SHT_NOBITS), line: line)
    }

    func testCompressedSectionsGiveTheSameLocationsAsUncompressedAndEuAddr2line() throws {
        let (plainPath, compressedPath, _) = try fixture()
        let plain = try ElfFile(path: plainPath)
        let compressed = try ElfFile(path: compressedPath)
        let compressedSections = compressed.sectionHeaders.filter { $0.name.hasPrefix(".debug_") }
        XCTAssertTrue(compressedSections.contains { $0.name == ".debug_info" })
        XCTAssertTrue(compressedSections.contains { $0.name == ".debug_loclists" }, "the fixture has location lists")
        XCTAssertLessThan(compressedSections.first { $0.name == ".debug_info" }!.size,
                          plain.sectionHeaders.first { $0.name == ".debug_info" }!.size, "objcopy compressed .debug_info")

        // This process inflates with libdeflate when Debian's libdeflate0 is installed (testZlibInflatesWhenLibdeflateIsMissing
        // covers zlib).
        if FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/libdeflate.so.0") {
            XCTAssertEqual(vaka_dw_has_libdeflate(), 1)
        }
        let plainDwarf = try XCTUnwrap(DwarfFile(file: plain))
        let compressedDwarf = try XCTUnwrap(DwarfFile(file: compressed))
        assertInflatedAhead(compressed)
        // The uncompressed file keeps its headers as they are (nothing to inflate, nothing hidden).
        XCTAssertEqual(Self.debugSectionHeaders(plain)[".debug_loclists"]?.type, UInt32(SHT_PROGBITS))

        let addresses = try Self.textAddresses(compressed)
        var withLine = 0
        var inlined = 0
        for address in addresses {
            let ours = compressedDwarf.locations(at: address)
            XCTAssertEqual(ours, plainDwarf.locations(at: address), "0x\(String(address, radix: 16))")
            if ours.first?.line != nil { withLine += 1 }
            if ours.count > 1 { inlined += 1 }
        }
        XCTAssertGreaterThan(withLine, addresses.count / 2, "most of .text has a line")
        XCTAssertGreaterThan(inlined, 0, "some addresses are in inlined code")

        // eu-addr2line reads the compressed file with libdw inflating it itself.
        let euAddr2line = try Peers.tool("eu-addr2line", install: "elfutils: scripts/bootstrap")
        let sample = stride(from: 0, to: addresses.count, by: max(1, addresses.count / 200)).map { addresses[$0] }
        let eu = try Self.euAddr2line(euAddr2line, binary: compressedPath, addresses: sample)
        var compared = 0
        for address in sample {
            let ours = compressedDwarf.locations(at: address)
            guard let theirs = eu[address], theirs.contains(where: { $0.line != nil }) else { continue }
            XCTAssertEqual(ours.map { EuLocation(symbol: $0.symbol, file: $0.file, line: $0.line) }, theirs,
                           "0x\(String(address, radix: 16))")
            compared += 1
        }
        XCTAssertGreaterThan(compared, sample.count / 2)
    }

    /// libc's debug file from `libc6-dbg` (zlib-compressed DWARF 5, 10 MB inflated): the same function, file and line
    /// as eu-addr2line for 64 of its functions, with libdw inflating nothing itself. Names may be aliases of one
    /// address: glibc's assembly functions have two subprogram DIEs over one range (`mincore` and `__GI_mincore`),
    /// of which eu-addr2line names the first and Vaka the last, with or without compression.
    func testDistroDebugFileOfLibcAgreesWithEuAddr2line() throws {
        let libc = try ElfFile(path: "/lib/x86_64-linux-gnu/libc.so.6")
        let buildID = try XCTUnwrap(libc.buildID)
        let path = "/usr/lib/debug/.build-id/\(buildID.prefix(2))/\(buildID.dropFirst(2)).debug"
        guard FileManager.default.fileExists(atPath: path) else {
            throw Peers.missing("libc6-dbg is not installed, no \(path) (scripts/bootstrap)")
        }
        let debug = try ElfFile(path: path)
        let dwarf = try XCTUnwrap(DwarfFile(file: debug))
        assertInflatedAhead(debug)

        let nm = try Peers.tool("nm", install: "binutils: scripts/bootstrap")
        let symbols = try runProcess(nm, ["--defined-only", "-S", path])
        XCTAssertEqual(symbols.status, 0, symbols.stderrText)
        var functions: [UInt64] = []
        var aliasAddress: [String: UInt64] = [:]
        for row in symbols.stdoutText.split(separator: "\n") {
            let parts = row.split(separator: " ")
            guard parts.count == 4, parts[2] == "T" || parts[2] == "t" || parts[2] == "W" || parts[2] == "i",
                  let value = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16) else { continue }
            aliasAddress[String(parts[3])] = value
            if size >= 16 { functions.append(value + size / 2) }
        }
        functions = Array(Set(functions)).sorted()
        XCTAssertGreaterThan(functions.count, 1000)
        let sample = stride(from: 0, to: functions.count, by: functions.count / 64).map { functions[$0] }
        let eu = try Self.euAddr2line(try Peers.tool("eu-addr2line", install: "elfutils: scripts/bootstrap"),
                                      binary: path, addresses: sample)
        var compared = 0
        for address in sample {
            guard let theirs = eu[address], theirs.contains(where: { $0.line != nil }) else { continue }
            let ours = dwarf.locations(at: address).map { EuLocation(symbol: $0.symbol, file: $0.file, line: $0.line) }
            let same = ours.count == theirs.count && zip(ours, theirs).allSatisfy { ours, theirs in
                ours.file == theirs.file && ours.line == theirs.line
                    && (ours.symbol == theirs.symbol
                        || (ours.symbol.flatMap { aliasAddress[$0] } != nil
                            && ours.symbol.flatMap { aliasAddress[$0] } == theirs.symbol.flatMap { aliasAddress[$0] }))
            }
            XCTAssertTrue(same, "0x\(String(address, radix: 16)): ours \(ours), eu-addr2line \(theirs)")
            compared += 1
        }
        XCTAssertGreaterThan(compared, 48, "eu-addr2line gave a line for most of the sample")
    }

    /// The compressed fixture, and a copy of it named `name` whose bytes `damage` changed, given the copy's bytes
    /// and the `.debug_info` section header; with the fixture's build ID and its `sum_squares` symbol.
    private func damagedFixture(_ name: String, _ damage: (inout Data, ElfSection) throws -> Void) throws
        -> (original: ElfFile, compressedPath: String, damagedPath: String, buildID: String, target: ElfSymbol) {
        let (_, compressedPath, directory) = try fixture()
        let original = try ElfFile(path: compressedPath)
        let info = try XCTUnwrap(original.sectionHeaders.first { $0.name == ".debug_info" })
        let buildID = try XCTUnwrap(original.buildID)
        let target = try XCTUnwrap(original.symbol(containing: Self.symbolAddress(original, "sum_squares")))
        var bytes = try Data(contentsOf: URL(fileURLWithPath: compressedPath))
        try damage(&bytes, info)
        let damagedPath = directory.appendingPathComponent(name).path
        try bytes.write(to: URL(fileURLWithPath: damagedPath))
        return (original, compressedPath, damagedPath, buildID, target)
    }

    func testDamagedCompressedDebugInfoGivesSymbolsOnly() throws {
        // Garbage in the middle of the zlib stream (after the 24-byte compression header): it no longer inflates
        // to ch_size bytes with a matching checksum.
        let (original, compressedPath, damagedPath, buildID, target) = try damagedFixture("fixture-damaged") { bytes, info in
            let middle = Int(info.offset) + 24 + Int(info.size - 24) / 2
            for index in middle..<min(middle + 64, Int(info.offset + info.size)) { bytes[index] ^= 0x5a }
        }

        let damaged = try ElfFile(path: damagedPath)
        let dwarf = DwarfFile(file: damaged)
        // The damaged section is left out, as libdw leaves out one it fails to inflate.
        XCTAssertEqual(Self.debugSectionHeaders(damaged)[".debug_info"]?.type, UInt32(SHT_NOBITS))
        XCTAssertEqual(dwarf?.locations(at: target.address + 4) ?? [], [])

        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        let frames = symbolicator.symbolicate(address: target.address + 4, imagePath: damagedPath,
                                              imageBase: damaged.firstLoadVaddr, buildID: buildID)
        XCTAssertEqual(frames.map(\.symbol), ["sum_squares"])
        XCTAssertEqual(frames.first?.symbolAddress, target.address)
        XCTAssertNil(frames.first?.file)
        XCTAssertNil(frames.first?.line)

        // The undamaged file gives the line.
        let good = Symbolicator(systemDebugDirectory: nil).symbolicate(
            address: target.address + 4, imagePath: compressedPath, imageBase: original.firstLoadVaddr, buildID: buildID)
        XCTAssertEqual(good.last?.symbol, "sum_squares")
        XCTAssertNotNil(good.first?.line)
    }

    func testCompressionHeaderClaimingAnImpossibleSizeIsLeftToLibdw() throws {
        let (_, compressedPath, directory) = try fixture()
        let original = try ElfFile(path: compressedPath)
        let line = try XCTUnwrap(original.sectionHeaders.first { $0.name == ".debug_line" })
        let target = try XCTUnwrap(original.symbol(containing: Self.symbolAddress(original, "parse_all")))
        // Elf64_Chdr: ch_type (4), ch_reserved (4), ch_size (8), ch_addralign (8): claim 2^40 bytes.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: compressedPath))
        withUnsafeBytes(of: UInt64(1 << 40).littleEndian) { size in
            bytes.replaceSubrange(Int(line.offset) + 8..<Int(line.offset) + 16, with: size)
        }
        let damagedPath = directory.appendingPathComponent("fixture-bad-size").path
        try bytes.write(to: URL(fileURLWithPath: damagedPath))

        let damaged = try ElfFile(path: damagedPath)
        let dwarf = try XCTUnwrap(DwarfFile(file: damaged), ".debug_info is intact")
        // Not inflated ahead (libdw tries and fails, and leaves it out): functions still come from .debug_info,
        // lines do not.
        XCTAssertEqual(Self.debugSectionHeaders(damaged)[".debug_line"]?.type, UInt32(SHT_PROGBITS))
        let locations = dwarf.locations(at: target.address + 4)
        XCTAssertEqual(locations.last?.symbol, "parse_all")
        XCTAssertNil(locations.first?.line, "\(locations)")
        XCTAssertTrue(locations.allSatisfy { $0.file == nil }, "\(locations)")
    }

    /// Two compressed `.debug_line` sections libelf refuses to inflate: one whose section is a byte longer than
    /// its zlib stream (the stream ends before the section does), one whose `ch_addralign` is 3 (not a power of
    /// two). Both are left out, as libdw leaves them out: the function still comes from `.debug_info`, there is no
    /// line, as eu-addr2line says.
    func testSectionsLibelfRefusesToInflateAreLeftOutAsLibdwLeavesThemOut() throws {
        let (_, compressedPath, directory) = try fixture()
        let original = try ElfFile(path: compressedPath)
        let line = try XCTUnwrap(original.sectionHeaders.first { $0.name == ".debug_line" })
        let target = try XCTUnwrap(original.symbol(containing: Self.symbolAddress(original, "parse_all")))
        let bytes = try Data(contentsOf: URL(fileURLWithPath: compressedPath))

        // Elf64_Shdr's sh_size (at 32) one byte longer; Elf64_Chdr's ch_addralign (at 16) 3.
        var longer = bytes
        try Self.setSectionHeaderField(&longer, index: line.index, offset: 32, to: line.size + 1)
        var oddAlignment = bytes
        withUnsafeBytes(of: UInt64(3).littleEndian) {
            oddAlignment.replaceSubrange(Int(line.offset) + 16..<Int(line.offset) + 24, with: $0)
        }
        let euAddr2line = try Peers.tool("eu-addr2line", install: "elfutils: scripts/bootstrap")
        for (name, damaged) in [("fixture-line-longer", longer), ("fixture-line-align3", oddAlignment)] {
            let path = directory.appendingPathComponent(name).path
            try damaged.write(to: URL(fileURLWithPath: path))
            let file = try ElfFile(path: path)
            let dwarf = try XCTUnwrap(DwarfFile(file: file), "\(name): .debug_info is intact")
            let locations = dwarf.locations(at: target.address + 4)
            XCTAssertEqual(locations.last?.symbol, "parse_all", name)
            XCTAssertTrue(locations.allSatisfy { $0.file == nil && $0.line == nil }, "\(name): \(locations)")
            let eu = try Self.euAddr2line(euAddr2line, binary: path, addresses: [target.address + 4])
            XCTAssertEqual(eu[target.address + 4]?.map(\.line), [nil], "\(name): eu-addr2line \(eu)")
        }
    }

    /// Every section ``ElfFile/withDwarfSections(_:)`` inflates holds the bytes libelf's own
    /// `elf_compress(scn, 0, 0)` gives it, and every section it leaves out as damaged libelf fails on. Files: the
    /// fixture, a big-endian PowerPC object (the toolchain's clang, `-gz=zlib`), and each with one compressed
    /// section's `sh_type` made `SHT_GROUP` (libelf converts a group's words to the host's byte order, so that section is
    /// left to libdw).
    func testInflatedSectionsHoldWhatLibelfInflates() throws {
        let (_, compressedPath, directory) = try fixture()
        var paths = [compressedPath]
        if let clang = Self.toolchainClang() {
            let source = directory.appendingPathComponent("freestanding.c")
            try Data("""
            static inline __attribute__((always_inline)) int square(int x) { return x * x; }
            __attribute__((noinline)) int sum_squares(int n) { int t = 0; for (int i = 0; i < n; i++) t += 2 * square(i) + 1; return t; }
            int entry(int n) { return sum_squares(n) + 3; }

            """.utf8).write(to: source)
            let object = directory.appendingPathComponent("big-endian.o").path
            let build = try runProcess(clang, ["--target=powerpc64-linux-gnu", "-g", "-O2", "-gz=zlib", "-c", source.path, "-o", object])
            XCTAssertEqual(build.status, 0, build.stderrText)
            paths.append(object)
        }
        for path in paths {
            var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            let original = try ElfFile(path: path)
            let headers = Self.debugSectionHeaders(original)
            let name = try XCTUnwrap([".debug_line", ".debug_info", ".debug_abbrev"].first {
                (headers[$0]?.flags ?? 0) & UInt64(SHF_COMPRESSED) != 0
            }, "\(path): no compressed .debug_line, .debug_info or .debug_abbrev")
            let section = try XCTUnwrap(original.sectionHeaders.first { $0.name == name })
            try Self.setSectionType(&bytes, index: section.index, type: UInt32(SHT_GROUP))
            let retyped = path + "-group"
            try bytes.write(to: URL(fileURLWithPath: retyped))

            let (inflated, _) = try Self.compareWithLibelf(path)
            XCTAssertGreaterThanOrEqual(inflated, 2, path)
            let (inflatedRetyped, _) = try Self.compareWithLibelf(retyped)
            XCTAssertEqual(inflatedRetyped, inflated - 1, retyped)
            let file = try ElfFile(path: retyped)
            _ = file.withDwarfSections { _ in 0 }
            XCTAssertNotEqual((Self.debugSectionHeaders(file)[name]?.flags ?? 0) & UInt64(SHF_COMPRESSED), 0,
                              "\(retyped): \(name) is left to libdw")
        }
    }

    /// Inflates `path`'s sections (``ElfFile/withDwarfSections(_:)``) and compares each compressed `.debug_*` section
    /// with libelf's `elf_compress(scn, 0, 0)` of a second ``ElfFile`` of it. Returns how many were inflated and how
    /// many left out as damaged.
    private static func compareWithLibelf(_ path: String, line: UInt = #line) throws -> (inflated: Int, leftOut: Int) {
        let ours = try ElfFile(path: path)
        _ = ours.withDwarfSections { _ in 0 }
        let theirs = try ElfFile(path: path)
        let unread: Set = [".debug_loc", ".debug_loclists", ".debug_macro", ".debug_macinfo", ".debug_pubnames", ".debug_pubtypes"]
        var inflated = 0
        var leftOut = 0
        for section in theirs.sectionHeaders where section.name.hasPrefix(".debug_") && !unread.contains(section.name) {
            ours.withHandle { oursElf in
                theirs.withHandle { theirsElf in
                    var before = GElf_Shdr()
                    var after = GElf_Shdr()
                    guard let mine = elf_getscn(oursElf, section.index), let reference = elf_getscn(theirsElf, section.index),
                          gelf_getshdr(mine, &after) != nil, gelf_getshdr(reference, &before) != nil,
                          before.sh_flags & UInt64(SHF_COMPRESSED) != 0 else { return }
                    if after.sh_type == UInt32(SHT_NOBITS) {
                        leftOut += 1
                        XCTAssertNotEqual(elf_compress(reference, 0, 0), 1, "\(path) \(section.name): left out, libelf inflates it", line: line)
                    } else if after.sh_flags & UInt64(SHF_COMPRESSED) == 0 {
                        inflated += 1
                        XCTAssertEqual(elf_compress(reference, 0, 0), 1, "\(path) \(section.name): libelf fails", line: line)
                        guard let a = elf_getdata(mine, nil)?.pointee, let b = elf_getdata(reference, nil)?.pointee else {
                            return XCTFail("\(path) \(section.name): no data", line: line)
                        }
                        let same = a.d_size == b.d_size && (a.d_size == 0 || memcmp(a.d_buf, b.d_buf, a.d_size) == 0)
                        XCTAssertTrue(same, "\(path) \(section.name): \(a.d_size) bytes, libelf's \(b.d_size) differ", line: line)
                    }
                }
            }
        }
        return (inflated, leftOut)
    }

    /// Sets section `index`'s `sh_type` in the bytes of a 64-bit ELF file of either byte order.
    private static func setSectionType(_ bytes: inout Data, index: Int, type: UInt32) throws {
        try setSectionHeaderField(&bytes, index: index, offset: 4, to: type)
    }

    /// Writes `value` (in the file's byte order) at `offset` bytes into section `index`'s Elf64_Shdr in `bytes`
    /// (an ELFCLASS64 file): `sh_type` at 4, `sh_size` at 32.
    private static func setSectionHeaderField<T: FixedWidthInteger>(_ bytes: inout Data, index: Int, offset: Int, to value: T) throws {
        XCTAssertEqual(bytes[4], 2, "ELFCLASS64")
        let bigEndian = bytes[5] == 2
        func read<U: FixedWidthInteger>(_ at: Int, as: U.Type) -> U {
            let raw = bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: U.self) }
            return bigEndian ? U(bigEndian: raw) : U(littleEndian: raw)
        }
        let field = Int(read(0x28, as: UInt64.self)) + index * Int(read(0x3a, as: UInt16.self)) + offset
        withUnsafeBytes(of: bigEndian ? value.bigEndian : value.littleEndian) {
            bytes.replaceSubrange(field..<field + MemoryLayout<T>.size, with: $0)
        }
    }

    /// The clang beside the Swift toolchain in `PATH` (it targets other architectures, as `/usr/bin/cc` does not),
    /// or `nil`.
    private static func toolchainClang() -> String? {
        let directories = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/opt/swift/usr/bin"]
        return directories.map { $0 + "/clang" }.first { path in
            FileManager.default.isExecutableFile(atPath: path)
                && FileManager.default.isExecutableFile(atPath: (path as NSString).deletingLastPathComponent + "/swift")
        }
    }

    /// A section header claiming `.debug_info` is 2^64 - 1 bytes long (what `Symbolicator.preload` orders images
    /// by): the image is preloaded and its frames keep their function names, nothing traps.
    func testDebugInfoHeaderClaimingTheLargestSizeIsPreloaded() throws {
        // Elf64_Shdr: sh_name (4), sh_type (4), sh_flags (8), sh_addr (8), sh_offset (8), sh_size (8).
        let (original, compressedPath, damagedPath, buildID, target) = try damagedFixture("fixture-huge-info") { bytes, info in
            try Self.setSectionHeaderField(&bytes, index: info.index, offset: 32, to: UInt64.max)
        }
        XCTAssertEqual(try ElfFile(path: damagedPath).sectionHeaders.first { $0.name == ".debug_info" }?.size, UInt64.max)

        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        symbolicator.preload([(imagePath: damagedPath, buildID: buildID), (imagePath: compressedPath, buildID: buildID)])
        let frames = symbolicator.symbolicate(address: target.address + 4, imagePath: damagedPath,
                                              imageBase: original.firstLoadVaddr, buildID: buildID)
        XCTAssertEqual(frames.last?.symbol, "sum_squares")
    }

    /// Without libdeflate (a `libdeflate.so.0` without its functions first on the library path), the sections
    /// are inflated with zlib: `vaka symbolicate` gives byte for byte the event it gives with libdeflate.
    func testZlibInflatesWhenLibdeflateIsMissing() throws {
        let (_, compressedPath, directory) = try fixture()
        guard let cc = Peers.cCompiler else { throw XCTSkip("no C compiler in /usr/bin") }
        let file = try ElfFile(path: compressedPath)
        let base: UInt64 = 0x5555_0000_0000
        let frames = try ["main", "parse_all", "sum_squares"].map { name -> String in
            let address = base + (try Self.symbolAddress(file, name)) - file.firstLoadVaddr + 6
            return "{\"instruction_addr\":\"0x\(String(address, radix: 16))\"}"
        }
        let event = """
        {"event_id":"6f1c2d3e4f5a4b6c8d9e0f1a2b3c4d5e","platform":"native",
         "exception":{"values":[{"type":"SIGSEGV","stacktrace":{"frames":[\(frames.joined(separator: ","))]}}]},
         "debug_meta":{"images":[{"type":"elf","code_file":"\(compressedPath)","image_addr":"0x\(String(base, radix: 16))",
                                  "image_size":\(file.loadSpan),"code_id":"\(try XCTUnwrap(file.buildID))"}]}}
        """
        let eventPath = directory.appendingPathComponent("event.json").path
        try Data(event.utf8).write(to: URL(fileURLWithPath: eventPath))

        let fakeDirectory = directory.appendingPathComponent("fake-libdeflate")
        try FileManager.default.createDirectory(at: fakeDirectory, withIntermediateDirectories: true)
        let fakeSource = fakeDirectory.appendingPathComponent("fake.c")
        try Data("int not_libdeflate;\n".utf8).write(to: fakeSource)
        let build = try runProcess(cc, ["-shared", "-fPIC", "-o", fakeDirectory.appendingPathComponent("libdeflate.so.0").path,
                                        fakeSource.path])
        XCTAssertEqual(build.status, 0, build.stderrText)

        let withLibdeflate = try runProcess(Paths.cli.path, ["symbolicate", eventPath, "--no-system-debug-dir"])
        XCTAssertEqual(withLibdeflate.status, 0, withLibdeflate.stderrText)
        let withZlib = try runProcess("/usr/bin/env", ["LD_LIBRARY_PATH=\(fakeDirectory.path)", Paths.cli.path,
                                                       "symbolicate", eventPath, "--no-system-debug-dir"])
        XCTAssertEqual(withZlib.status, 0, withZlib.stderrText)
        XCTAssertEqual(withZlib.stdoutText, withLibdeflate.stdoutText)
        let symbolicated = try XCTUnwrap(try JSONSerialization.jsonObject(with: withZlib.stdout) as? [String: Any])
        let resolved = try XCTUnwrap(dig(symbolicated, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        let lines = resolved.filter { ($0["filename"] as? String)?.hasSuffix("fixture.c") == true && $0["lineno"] is Int }
        XCTAssertEqual(Set(lines.compactMap { $0["function"] as? String }).intersection(["main", "parse_all", "sum_squares"]).count, 3,
                       withZlib.stdoutText)
    }

    // MARK: - Helpers

    /// The `st_value` of the function symbol `name` in `file`'s `.symtab`, found through ``ElfFile/symbol(containing:)``
    /// over `.text`.
    private static func symbolAddress(_ file: ElfFile, _ name: String) throws -> UInt64 {
        for address in try textAddresses(file) {
            if let symbol = file.symbol(containing: address), symbol.name == name { return symbol.address }
        }
        throw XCTSkip("no \(name) in the fixture")
    }

    /// One location as eu-addr2line prints it (function, file, line; `nil` for `??` / 0).
    typealias EuLocation = Addr2lineLocation

    /// `eu-addr2line -f -i -a -e BINARY ADDR…`: per address, the locations innermost first.
    static func euAddr2line(_ tool: String, binary: String, addresses: [UInt64]) throws -> [UInt64: [EuLocation]] {
        let arguments = ["-f", "-i", "-a", "-e", binary] + addresses.map { "0x" + String($0, radix: 16) }
        let result = try runProcess(tool, arguments)
        // Status 1 when some address had no source location; the answer still counts.
        guard result.status == 0 || (result.status == 1 && !result.stdout.isEmpty) else {
            XCTFail("\(tool): status \(result.status): \(result.stderrText)")
            return [:]
        }
        return parseAddr2line(result.stdout)
    }
}
