import Foundation
import XCTest
import VakaTestSupport
import VakaSymbolication

/// The DWARF function index looks an address up among a unit's functions not nested in functions first: a
/// function nested in another (GCC's nested functions in C, Swift's local functions) is found when its code
/// lies outside its parent's (the unit's whole index), and when it lies inside it (the functions nested in
/// the one found), as the innermost function, as binutils `addr2line` finds it.
final class DwarfNestedFunctionTests: XCTestCase {
    static let source = """
        int vaka_nest_outer(int x) {
            int vaka_nest_inner(int y) {
                int z = y * x;
                return z + 1;
            }
            return vaka_nest_inner(x) + 2;
        }

        """

    /// Compiles ``source`` at -O0 to assembly, lets `edit` change it, and links it into a shared library.
    private func build(_ name: String, edit: (String) -> String? = { $0 }) throws -> (library: String, source: String) {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/gcc") else { throw XCTSkip("gcc is needed") }
        let dir = try ScratchDirs.directory(for: self)
        let source = dir.appendingPathComponent("nest.c")
        try DwarfNestedFunctionTests.source.write(to: source, atomically: true, encoding: .utf8)
        let assembly = dir.appendingPathComponent("\(name).s")
        let compiled = try runProcess("/usr/bin/gcc", ["-O0", "-g", "-S", "-dA", "-fPIC", source.path, "-o", assembly.path])
        XCTAssertEqual(compiled.status, 0, compiled.stderrText)
        guard let text = edit(try String(contentsOf: assembly, encoding: .utf8)) else {
            throw XCTSkip("gcc's assembly is not the expected layout")
        }
        try text.write(to: assembly, atomically: true, encoding: .utf8)
        let library = dir.appendingPathComponent("lib\(name).so").path
        let linked = try runProcess("/usr/bin/gcc", ["-shared", "-o", library, assembly.path])
        XCTAssertEqual(linked.status, 0, linked.stderrText)
        return (library, source.path)
    }

    private func frames(_ library: String, _ addresses: [UInt64]) throws -> [UInt64: [String]] {
        let file = try ElfFile(path: library)
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        var result: [UInt64: [String]] = [:]
        for address in addresses {
            result[address] = symbolicator.symbolicate(address: address, imagePath: library, imageBase: file.firstLoadVaddr,
                                                       buildID: try XCTUnwrap(file.buildID))
                .map { "\($0.symbol) \($0.file ?? "??"):\($0.line ?? 0)" }
        }
        return result
    }

    /// GCC places the nested function's code before its parent's: every 3rd byte of both gets addr2line's
    /// function, file and line.
    func testNestedFunctionOutsideItsParentAgreesWithAddr2line() throws {
        let (library, source) = try build("nest")
        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_nest_outer", in: library))
        let inner = try XCTUnwrap(try NativeFixture.symbol("vaka_nest_inner.0", in: library))
        XCTAssertFalse((outer.value..<outer.value + outer.size).contains(inner.value), "the nested function inside its parent")
        let addresses = Array(stride(from: outer.value, to: outer.value + outer.size, by: 3))
            + Array(stride(from: inner.value, to: inner.value + inner.size, by: 3))
        let expected = try NativeFixture.addr2line(library, addresses)
        let ours = try frames(library, addresses)
        for address in addresses { XCTAssertEqual(ours[address], expected[address], "0x\(String(address, radix: 16))") }
        XCTAssertEqual(ours[inner.value + 3]?.last?.hasPrefix("vaka_nest_inner \(source):"), true)
        XCTAssertEqual(ours[outer.value + 3]?.last?.hasPrefix("vaka_nest_outer \(source):"), true)
    }

    /// The parent's DW_AT_low_pc moved down to the nested function's start: the parent's range then holds the
    /// nested function's code, and the nested function (same start, ending first) is the innermost there.
    func testNestedFunctionInsideItsParentsRangeIsTheInnermost() throws {
        let (library, source) = try build("nest-inside") { text in
            // Outer is .LFB0 (the second function in .text), the nested one .LFB1 (the first).
            let low = "\t.quad\t.LFB0\t# DW_AT_low_pc\n\t.quad\t.LFE0-.LFB0\t# DW_AT_high_pc\n"
            guard text.contains(low), text.range(of: ".LFB1:")!.lowerBound < text.range(of: ".LFB0:")!.lowerBound else {
                return nil
            }
            return text.replacingOccurrences(of: low, with: "\t.quad\t.LFB1\n\t.quad\t.LFE0-.LFB1\n")
        }
        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_nest_outer", in: library))
        let inner = try XCTUnwrap(try NativeFixture.symbol("vaka_nest_inner.0", in: library))
        let ours = try frames(library, [inner.value + 4, outer.value + 4])
        XCTAssertEqual(ours[inner.value + 4]?.last?.hasPrefix("vaka_nest_inner \(source):"), true, "\(ours)")
        XCTAssertEqual(ours[outer.value + 4]?.last?.hasPrefix("vaka_nest_outer \(source):"), true, "\(ours)")
    }
}

/// ``ElfFile/symbols(containing:)`` (one pass over a symbol table for many addresses) gives what
/// ``ElfFile/symbol(containing:)`` gives for each, in the order asked, repeats and misses included.
final class BatchedSymbolLookupTests: XCTestCase {
    func testBatchedLookupsGiveTheSymbolsOfSingleLookups() throws {
        let getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        let libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        let single = try ElfFile(path: libc.path)
        let batched = try ElfFile(path: libc.path)
        let step = single.loadSpan / 211
        let getpidVaddr = single.vaddr(ofRuntimeAddress: getpid, imageBase: libc.base)
        // Spread over the image, shuffled, with repeats, an address below the image and one far above it.
        var addresses = (1...210).map { single.firstLoadVaddr + UInt64($0) * step } + [getpidVaddr, getpidVaddr]
        var generator = SystemRandomNumberGenerator()
        addresses.shuffle(using: &generator)
        addresses += [0, UInt64.max, getpidVaddr]
        let expected = addresses.map { single.symbol(containing: $0) }
        XCTAssertEqual(batched.symbols(containing: addresses), expected)
        XCTAssertGreaterThan(expected.compactMap { $0 }.count, 32, "addresses in functions")
        XCTAssertEqual(expected.last??.name, "__getpid", "GLOBAL __getpid over WEAK getpid")
        XCTAssertEqual(batched.symbols(containing: []), [])
        // Past its first 32 scans a table is sorted: the batch then gives the same symbols from binary searches.
        for _ in 0..<40 { _ = batched.symbols(containing: [getpidVaddr]) }
        XCTAssertEqual(batched.symbols(containing: addresses), expected)
    }
}
