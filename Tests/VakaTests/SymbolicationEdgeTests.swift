import Foundation
import XCTest
import VakaTestSupport
import VakaSymbolication

/// ``Symbolicator/preload(addresses:)`` through one symbolicator that converts many reports.
final class PreloadedAnswerTests: XCTestCase {
    /// With a cache directory, a report of the same binary loaded at another base asks addresses this run
    /// already answered (kept for the cache file): they are answered from there, so frames looked up
    /// ahead for them would never be taken. Through 200 such reports (preload, then symbolicate, as
    /// ``FatalEventBuilder`` does) and two reports preloaded before either is symbolicated (two threads of
    /// a converter), no preloaded answer is left behind, and every report gets the frames of a lookup.
    func testPreloadedAnswersAreNotLeftBehindByCachedAnswers() throws {
        let marker = markerFunctionAddress()
        let own = try XCTUnwrap(try TestSupport.image(containing: marker))
        let ownID = try XCTUnwrap(try ElfFile(path: own.path).buildID)
        let dir = try ScratchDirs.directory(for: self)
        let symbolicator = Symbolicator(systemDebugDirectory: nil, cacheDirectory: dir.appendingPathComponent("cache").path)
        let direct = Symbolicator(systemDebugDirectory: nil)
        let expected = direct.symbolicate(address: marker + 2, imagePath: own.path, imageBase: own.base, buildID: ownID)
        XCTAssertEqual(expected.last?.symbol, "vaka_test_marker_function")
        func shifted(_ frames: [SymbolicatedFrame], by delta: UInt64) -> [SymbolicatedFrame] {
            frames.map { frame in
                var frame = frame
                frame.symbolAddress = frame.symbolAddress.map { $0 &+ delta }
                return frame
            }
        }
        // Two reports preloaded before either is symbolicated.
        let second: UInt64 = 1 << 32
        for delta in [0, second] {
            symbolicator.preload(addresses: [(imagePath: own.path, buildID: ownID, imageBase: own.base + delta,
                                              address: marker + 2 + delta)])
        }
        for delta in [0, second] {
            XCTAssertEqual(symbolicator.symbolicate(address: marker + 2 + delta, imagePath: own.path, imageBase: own.base + delta,
                                                    buildID: ownID), shifted(expected, by: delta))
        }
        XCTAssertEqual(symbolicator.preloadedAnswerCount, 0, "the second report's preloaded frames")
        // Reports one after the other.
        for report in 1...200 {
            let delta = UInt64(report) << 20
            symbolicator.preload(addresses: [(imagePath: own.path, buildID: ownID, imageBase: own.base + delta,
                                              address: marker + 2 + delta)])
            XCTAssertEqual(symbolicator.symbolicate(address: marker + 2 + delta, imagePath: own.path, imageBase: own.base + delta,
                                                    buildID: ownID), shifted(expected, by: delta))
        }
        XCTAssertEqual(symbolicator.preloadedAnswerCount, 0)
        XCTAssertGreaterThanOrEqual(symbolicator.cacheHitCount, 200)
    }

    /// Odd lists: a wrong image base, addresses below and past the image, duplicates, entries without an
    /// address or without a path, an image whose build ID is not its file's, one library under two paths
    /// (a symbolic link) and under two bases, asked in reverse order and some twice: every answer is the
    /// one a symbolicator that preloaded nothing gives, and nothing preloaded is left once all were asked.
    func testOddPreloadListsGiveTheFramesOfALookup() throws {
        let images = try MarkerAndLibc()
        let (marker, getpid, own, libc, ownID, libcID) = (images.marker, images.getpid, images.own, images.libc, images.ownID, images.libcID)
        let dir = try ScratchDirs.directory(for: self)
        let link = dir.appendingPathComponent("libc-link.so").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: libc.path)
        typealias Item = (imagePath: String?, buildID: String, imageBase: UInt64, address: UInt64?)
        let list: [Item] = [
            (own.path, ownID, own.base, marker + 2), (own.path, ownID, own.base, marker + 2),
            (own.path, ownID, own.base + 0x1000, marker + 2), (own.path, ownID, own.base, own.base - 1),
            (own.path, ownID, own.base, UInt64.max), (own.path, ownID, own.base, 0), (own.path, ownID, own.base, nil),
            (nil, ownID, own.base, marker), (libc.path, ownID, libc.base, getpid), (libc.path, libcID, libc.base, getpid + 1),
            (link, libcID, libc.base, getpid + 1), (link, libcID, libc.base, getpid + 3),
            (libc.path, libcID.uppercased(), libc.base - 0x10, getpid + 1), ("/nonexistent/lib.so", libcID, libc.base, getpid),
        ]
        let ahead = Symbolicator(systemDebugDirectory: nil)
        let direct = Symbolicator(systemDebugDirectory: nil)
        ahead.preload(addresses: list)
        XCTAssertGreaterThan(ahead.preloadedAnswerCount, 0)
        var found = 0
        for item in list.reversed() + list where item.imagePath != nil {
            let address = item.address ?? item.imageBase
            let expected = direct.symbolicate(address: address, imagePath: item.imagePath, imageBase: item.imageBase,
                                              buildID: item.buildID)
            XCTAssertEqual(ahead.symbolicate(address: address, imagePath: item.imagePath, imageBase: item.imageBase,
                                             buildID: item.buildID), expected, "\(item)")
            if !expected.isEmpty { found += 1 }
        }
        XCTAssertGreaterThan(found, 8)
        XCTAssertEqual(ahead.preloadedAnswerCount, 0)
    }

    /// Frames preloaded and never asked for (a caller that gave up on a report) are not kept for the
    /// symbolicator's life: a later call that would leave more than ``Symbolicator/maxPreloadedAnswers``
    /// drops them, and asking for one of them afterwards looks it up in the files.
    func testUnaskedPreloadedAnswersAreBounded() throws {
        let getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        let libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        let buildID = try XCTUnwrap(try ElfFile(path: libc.path).buildID)
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        let many = Symbolicator.maxPreloadedAnswers + 100
        symbolicator.preload(addresses: (0..<UInt64(many)).map {
            (imagePath: libc.path, buildID: buildID, imageBase: libc.base, address: getpid + $0)
        })
        XCTAssertEqual(symbolicator.preloadedAnswerCount, many, "one call's frames are all kept")
        symbolicator.preload(addresses: (0..<UInt64(10)).map {
            (imagePath: libc.path, buildID: buildID, imageBase: libc.base + 1 << 32, address: getpid + 1 << 32 + $0)
        })
        XCTAssertEqual(symbolicator.preloadedAnswerCount, 10)
        let direct = Symbolicator(systemDebugDirectory: nil)
        for address in [getpid, getpid + 1, getpid + UInt64(many) - 1] {
            let frames = symbolicator.symbolicate(address: address, imagePath: libc.path, imageBase: libc.base, buildID: buildID)
            XCTAssertEqual(frames, direct.symbolicate(address: address, imagePath: libc.path, imageBase: libc.base, buildID: buildID))
        }
        XCTAssertEqual(symbolicator.symbolicate(address: getpid + 1 << 32, imagePath: libc.path, imageBase: libc.base + 1 << 32,
                                                buildID: buildID).first?.symbolAddress, getpid + 1 << 32)
        XCTAssertEqual(symbolicator.preloadedAnswerCount, 9)
    }
}

/// Symbol tables with ties and overlaps: the first ``ElfFile/symbol(containing:)`` lookups of a table scan
/// it, later ones search it sorted; both give the same symbol for every address, in 64-bit and 32-bit,
/// little- and big-endian files, and in a stripped file's `.dynsym`.
final class SymbolTableTieTests: XCTestCase {
    /// Assembled by the toolchain's clang and linked by its ld.lld with `.text` at 0x10000 (offsets below
    /// are from there): aliases (LOCAL, then WEAK before GLOBAL in the table), two sizes at one address, a
    /// symbol reaching into the next, one nested in another, a size 0 function, a sized `STT_NOTYPE` symbol,
    /// an `STT_GNU_IFUNC` (not a function symbol: skipped), a label without size, a LOCAL whose size
    /// covers the symbols after it, and a sized `SHN_ABS` symbol at 0x40.
    static let source = """
            .text
            .p2align 4
            .type t_local,@function
        t_local:
            .type t_weak,@function
            .weak t_weak
        t_weak:
            .type t_global,@function
            .globl t_global
        t_global:
            .fill 16,1,0
            .size t_local,16
            .size t_weak,16
            .size t_global,16
            .globl g_big
            .type g_big,@function
            .globl g_small
            .type g_small,@function
        g_big:
        g_small:
            .fill 64,1,0
            .size g_big,64
            .size g_small,8
            .globl o1
            .type o1,@function
        o1:
            .fill 16,1,0
            .globl o2
            .type o2,@function
        o2:
            .fill 32,1,0
            .size o1,32
            .size o2,32
            .globl outer
            .type outer,@function
        outer:
            .fill 10,1,0
            .type inner,@function
        inner:
            .fill 5,1,0
            .size inner,5
            .fill 85,1,0
            .size outer,100
            .globl zero
            .type zero,@function
        zero:
            .size zero,0
            .globl notype
        notype:
            .fill 16,1,0
            .size notype,16
            .globl ifn
            .type ifn,@gnu_indirect_function
        ifn:
            .fill 16,1,0
            .size ifn,16
        plain_label:
            .fill 16,1,0
            .type huge,@function
        huge:
            .fill 32,1,0
            .size huge,0x100000
            .type after_huge,@function
        after_huge:
            .fill 16,1,0
            .size after_huge,16
            .globl abs_sym
            .set abs_sym, 0x40
            .size abs_sym, 0x10

        """

    /// The expected symbol (name, offset of its start) at offsets from `.text`, with `.symtab`. ld.lld lists
    /// g_big before g_small (both GLOBAL, one address): table order picks g_big where both contain.
    static let expected: [(offset: UInt64, name: String?, start: UInt64)] = [
        (0x0, "t_global", 0), (0xf, "t_global", 0), (0x10, "g_big", 0x10), (0x17, "g_big", 0x10),
        (0x18, "g_big", 0x10), (0x4f, "g_big", 0x10), (0x50, "o1", 0x50), (0x5f, "o1", 0x50), (0x60, "o2", 0x60),
        (0x7f, "o2", 0x60), (0x80, "outer", 0x80), (0x8a, "inner", 0x8a), (0x8e, "inner", 0x8a), (0x8f, "outer", 0x80),
        (0xe3, "outer", 0x80), (0xe4, "notype", 0xe4), (0xf3, "notype", 0xe4), (0xf4, nil, 0), (0x104, nil, 0),
        (0x114, "huge", 0x114), (0x134, "after_huge", 0x134), (0x144, "huge", 0x114), (0x114 + 0xfffff, "huge", 0x114),
        (0x114 + 0x100000, nil, 0),
    ]

    private func build(target: String, stripped: Bool, in dir: URL) throws -> String {
        let clang = "/opt/swift/usr/bin/clang", lld = "/opt/swift/usr/bin/ld.lld"
        guard FileManager.default.isExecutableFile(atPath: clang), FileManager.default.isExecutableFile(atPath: lld) else {
            throw XCTSkip("the toolchain's clang and ld.lld are needed")
        }
        let source = dir.appendingPathComponent("ties.s")
        try SymbolTableTieTests.source.write(to: source, atomically: true, encoding: .utf8)
        let object = dir.appendingPathComponent("\(target).o").path
        let library = dir.appendingPathComponent("lib\(target)\(stripped ? "-stripped" : "").so").path
        let compiled = try runProcess(clang, ["--target=\(target)", "-c", source.path, "-o", object])
        XCTAssertEqual(compiled.status, 0, compiled.stderrText)
        let linked = try runProcess(lld, ["-shared", "--build-id=sha1", "-Ttext=0x10000", "-o", library, object]
                                    + (stripped ? ["--strip-all"] : []))
        XCTAssertEqual(linked.status, 0, linked.stderrText)
        return library
    }

    /// Every address from 16 bytes before `.text` to past its end, and the far end of `huge`: the scanning
    /// lookups (a fresh file every ``scansBeforeSorting`` lookups) equal the sorted table's, and the
    /// listed offsets give the expected symbol.
    private func check(target: String, stripped: Bool = false) throws {
        let dir = try ScratchDirs.directory(for: self)
        let path = try build(target: target, stripped: stripped, in: dir)
        let text: UInt64 = 0x10000
        let addresses = Array((text - 0x10)...(text + 0x150)) + SymbolTableTieTests.expected.map { text + $0.offset } + [0x40, 0x4f, 0x50]
        let sortedFile = try ElfFile(path: path)
        XCTAssertEqual(sortedFile.hasSymtab, !stripped)
        for _ in 0...32 { _ = sortedFile.symbol(containing: text) }  // the 33rd lookup sorts the table
        var scannedFile = try ElfFile(path: path)
        for (number, address) in addresses.enumerated() {
            if number % 32 == 0 { scannedFile = try ElfFile(path: path) }  // every lookup a scan
            XCTAssertEqual(scannedFile.symbol(containing: address), sortedFile.symbol(containing: address),
                           "\(target) 0x\(String(address, radix: 16))")
        }
        let onlyDynamic: Set<String> = ["inner", "huge", "after_huge"]
        for item in SymbolTableTieTests.expected {
            var name = item.name, start = item.start
            if stripped, let found = name, onlyDynamic.contains(found) {
                // Without .symtab: outer contains inner's addresses, nothing covers huge's.
                (name, start) = found == "inner" ? ("outer", 0x80) : (nil, 0)
            } else if stripped, name == "g_big", item.offset < 0x18 {
                name = "g_small"  // listed before g_big in .dynsym
            }
            let symbol = sortedFile.symbol(containing: text + item.offset)
            XCTAssertEqual(symbol?.name, name, "\(target) +0x\(String(item.offset, radix: 16))")
            if name != nil { XCTAssertEqual(symbol?.address, text + start, "\(target) +0x\(String(item.offset, radix: 16))") }
        }
        // A sized SHN_ABS symbol is kept: it covers its (non-code) addresses.
        XCTAssertEqual(sortedFile.symbol(containing: 0x45)?.name, "abs_sym")
    }

    func testX86_64() throws { try check(target: "x86_64-linux-gnu") }
    func testX86_64DynamicSymbolsOnly() throws { try check(target: "x86_64-linux-gnu", stripped: true) }
    func testI386() throws { try check(target: "i386-linux-gnu") }
    func testBigEndian64() throws { try check(target: "powerpc64-linux-gnu") }
    func testBigEndian32() throws { try check(target: "powerpc-linux-gnu") }
}

/// The DWARF function index skips subprogram declarations (methods listed in their type): C++ member
/// functions defined in the class, out of line, in a local class, constructors, lambdas and template
/// instances still resolve to the function/file/line binutils `addr2line` gives, and the real function's
/// raw symbol is the one it gives: the symbol table's mangled name where DWARF has no linkage name (a
/// local class's methods and a lambda at -O0), not DW_AT_name.
final class DwarfDeclarationTests: XCTestCase {
    static let source = """
        namespace space {
        struct Shape {
            int sides;
            explicit Shape(int s) : sides(s) {}
            virtual ~Shape() {}
            virtual int area(int scale) const { return sides * scale + 1; }
            int outOfLine(int x) const;
            static int twice(int x);
        };
        int Shape::outOfLine(int x) const { return x * sides - 3; }
        int Shape::twice(int x) { return x * 2; }
        template <typename T> T addAll(T a, T b) { return a + b + T(1); }
        }

        extern "C" __attribute__((noinline)) int vaka_cpp_entry(int value) {
            struct Local {
                static int helper(int v) { return v * 7 + 2; }
                int method(int v) const { return helper(v) - 1; }
            };
            auto lambda = [value](int w) { return w + value * 5; };
            space::Shape shape(value);
            Local local;
            int sum = shape.area(value) + shape.outOfLine(value) + space::Shape::twice(value);
            sum += local.method(value) + lambda(value);
            sum += space::addAll<int>(value, sum) + int(space::addAll<long>(value, 2));
            return sum;
        }

        """

    private func check(optimization: String) throws {
        let dir = try ScratchDirs.directory(for: self)
        let sourceFile = dir.appendingPathComponent("fixture.cc")
        try DwarfDeclarationTests.source.write(to: sourceFile, atomically: true, encoding: .utf8)
        let library = dir.appendingPathComponent("libcpp\(optimization).so").path
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/g++") else { throw XCTSkip("g++ is needed") }
        let compiled = try runProcess("/usr/bin/g++", ["-shared", "-fPIC", optimization, "-g", "-o", library, sourceFile.path])
        XCTAssertEqual(compiled.status, 0, compiled.stderrText)
        // Every function symbol of the fixture, every 3rd byte.
        let nm = try runProcess("/usr/bin/nm", ["--defined-only", "-S", library])
        var addresses: [UInt64] = []
        for line in nm.stdoutText.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 4, ["T", "t", "W"].contains(parts[2]), let value = UInt64(parts[0], radix: 16),
                  let size = UInt64(parts[1], radix: 16), size > 0 else { continue }
            addresses += stride(from: value, to: value + size, by: 3)
        }
        XCTAssertGreaterThan(addresses.count, 30)
        let expected = try NativeFixture.addr2line(library, addresses)
        let file = try ElfFile(path: library)
        let buildID = try XCTUnwrap(file.buildID)
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        var agreed = 0
        for address in addresses {
            let frames = symbolicator.symbolicate(address: address, imagePath: library, imageBase: file.firstLoadVaddr,
                                                  buildID: buildID)
            // binutils names a function inlined from a local class (helper, the lambda) by the function the
            // class is in: inlined frames are compared by file and line, the real function by name too.
            var ours = frames.map { "\($0.isInlined ? "" : $0.symbol) \($0.file ?? "??")" + ($0.line.map { ":\($0)" } ?? ":0") }
            var theirs = expected[address] ?? []
            guard !theirs.contains(where: { $0.hasPrefix("??") || $0.hasSuffix("??:0") || $0.hasSuffix(":?") }) else { continue }
            theirs = theirs.enumerated().map { $0.offset == theirs.count - 1 ? $0.element : " " + $0.element.split(separator: " ").dropFirst().joined(separator: " ") }
            if ours.count != theirs.count { ours.append("(\(frames.count) frames)") }
            XCTAssertEqual(ours, theirs, "\(optimization) 0x\(String(address, radix: 16))")
            agreed += 1
        }
        XCTAssertGreaterThan(agreed, addresses.count / 2)
        if optimization == "-O0" {
            // No DW_AT_linkage_name for a local class's method: the symbol table's name, demangled.
            let helper = try XCTUnwrap(try NativeFixture.symbol("_ZZ14vaka_cpp_entryEN5Local6helperEi", in: library))
            let frame = try XCTUnwrap(symbolicator.symbolicate(address: helper.value + 4, imagePath: library,
                                                               imageBase: file.firstLoadVaddr, buildID: buildID).last)
            XCTAssertEqual(frame.function, "vaka_cpp_entry::Local::helper(int)")
            XCTAssertEqual(frame.symbolAddress, helper.value)
            XCTAssertEqual(frame.line, 17)
        }
    }

    func testOptimizedCppMembersAgreeWithAddr2line() throws { try check(optimization: "-O2") }
    func testUnoptimizedCppMembersAgreeWithAddr2line() throws { try check(optimization: "-O0") }
}

/// A subprogram whose `DW_AT_declaration` is present but false (`DW_FORM_flag` 0) is a definition: the
/// function index keeps it, as binutils and elfutils do.
final class DwarfDeclarationFlagTests: XCTestCase {
    func testFalseDeclarationFlagIsADefinition() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/gcc") else { throw XCTSkip("gcc is needed") }
        let dir = try ScratchDirs.directory(for: self)
        let source = dir.appendingPathComponent("flag.c")
        try "__attribute__((visibility(\"hidden\"))) int vaka_flag_fn(int x) { return x * 3 + 1; }\n".write(to: source, atomically: true, encoding: .utf8)
        let assembly = dir.appendingPathComponent("flag.s")
        let compiled = try runProcess("/usr/bin/gcc", ["-O1", "-g", "-gdwarf-4", "-S", "-dA", "-fPIC", source.path, "-o", assembly.path])
        XCTAssertEqual(compiled.status, 0, compiled.stderrText)
        // The function's DIE gets DW_AT_declaration (DW_FORM_flag) 0 after DW_AT_external: one byte more, so
        // the unit's length and the references to the DIEs after it (all at 0x5c) move by one.
        var text = try String(contentsOf: assembly, encoding: .utf8)
        let die = "\t.uleb128 0x2\t# (DIE (0x2d) DW_TAG_subprogram)\n\t\t\t# DW_AT_external\n"
        let abbrev = "\t.uleb128 0x2e\t# (TAG: DW_TAG_subprogram)\n\t.byte\t0x1\t# DW_children_yes\n\t.uleb128 0x3f\t# (DW_AT_external)\n\t.uleb128 0x19\t# (DW_FORM_flag_present)\n"
        let length = "\t.long\t0x60\t# Length of Compilation Unit Info"
        guard text.contains(die), text.contains(abbrev), text.contains(length) else {
            return XCTFail("gcc's assembly is not the expected layout:\n\(text)")
        }
        text = text.replacingOccurrences(of: die, with: die + "\t.byte\t0\n")
            .replacingOccurrences(of: abbrev, with: abbrev + "\t.uleb128 0x3c\n\t.uleb128 0xc\n")
            .replacingOccurrences(of: length, with: "\t.long\t0x61")
            .replacingOccurrences(of: "\t.long\t0x5c\t#", with: "\t.long\t0x5d\t#")
        try text.write(to: assembly, atomically: true, encoding: .utf8)
        let library = dir.appendingPathComponent("libflag.so").path
        let linked = try runProcess("/usr/bin/gcc", ["-shared", "-o", library, assembly.path])
        XCTAssertEqual(linked.status, 0, linked.stderrText)
        let dump = try runProcess("/usr/bin/readelf", ["--debug-dump=info", library])
        XCTAssertTrue(dump.stdoutText.contains("DW_AT_declaration : 0"), dump.stdoutText)
        let function = try XCTUnwrap(try NativeFixture.symbol("vaka_flag_fn", in: library))
        let expected = try NativeFixture.addr2line(library, [function.value + 1])[function.value + 1]
        XCTAssertEqual(expected, ["vaka_flag_fn \(source.path):1"])
        // Out of the symbol table (hidden, so not in .dynsym either): the name can only come from DWARF.
        let stripped = dir.appendingPathComponent("libflag-nosym.so").path
        let objcopy = try runProcess("/usr/bin/objcopy", ["--strip-symbol=vaka_flag_fn", library, stripped])
        XCTAssertEqual(objcopy.status, 0, objcopy.stderrText)
        let file = try ElfFile(path: stripped)
        XCTAssertNil(file.symbol(containing: function.value + 1))
        let frames = Symbolicator(systemDebugDirectory: nil).symbolicate(
            address: function.value + 1, imagePath: stripped, imageBase: file.firstLoadVaddr, buildID: try XCTUnwrap(file.buildID))
        XCTAssertEqual(frames.map { "\($0.symbol) \($0.file ?? "??"):\($0.line ?? 0)" }, expected)
    }
}
