import Foundation
import XCTest
import VakaTestSupport
import VakaSymbolication

/// C++ puts function definitions in namespaces, declares methods in their class (a method defined in the class
/// body, a lambda's call operator, a local class's method get their definition DIE elsewhere), instantiates
/// templates and splits functions into hot and cold parts: every 2nd byte of every function of such a library
/// built by g++ -O0 gets elfutils `eu-addr2line`'s chain of file:line (inlined frames included) from the
/// symbolicator. (eu-addr2line finds units through `.debug_aranges`, which g++ emits. Names are not compared:
/// eu-addr2line prints `DW_AT_name` where the symbolicator gives the linkage name.)
final class CxxSymbolicationAgreementTests: XCTestCase {
    static let source = """
        #include <cstdlib>
        #include <vector>
        #include <algorithm>
        #define NOINLINE __attribute__((noinline))
        namespace vaka { namespace inner {
            NOINLINE int twice(int x) { return x * 2 + std::rand() % 3; }
            struct Box {
                int value;
                NOINLINE int get() const { return value + twice(value); }
                static NOINLINE int make(int v) { Box b{v}; return b.get(); }
                template <typename T> NOINLINE T scaled(T t) const { return t * static_cast<T>(value); }
            };
        } }
        template <typename T> NOINLINE T sum(const std::vector<T> &v) { T s{}; for (auto x : v) s += x; return s; }
        static inline int helper(int x) { return x > 3 ? x - 1 : x + 1; }
        __attribute__((cold)) NOINLINE void rare(int x) { if (x == 42) std::abort(); }
        extern "C" NOINLINE int vaka_cxx_entry(int n) {
            struct Local { NOINLINE static int bump(int y) { return y + vaka::inner::twice(y); } };
            auto lambda = [n](int y) NOINLINE { return y * n + helper(y); };
            std::vector<int> v(n);
            std::vector<double> d(n, 1.5);
            for (int i = 0; i < n; i++) v[i] = lambda(i) + Local::bump(i);
            std::sort(v.begin(), v.end());
            if (__builtin_expect(n == 7, 0)) { rare(n); v.push_back(helper(n)); }
            vaka::inner::Box box{n};
            return sum(v) + static_cast<int>(sum(d)) + vaka::inner::Box::make(n) + box.scaled(3) + static_cast<int>(box.scaled(2.5));
        }

        """

    func testCxxFunctionsAgreeWithEuAddr2line() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/g++") else { throw XCTSkip("g++ is needed") }
        let euAddr2line = try Peers.tool("eu-addr2line", install: "elfutils: scripts/bootstrap")
        let dir = try ScratchDirs.directory(for: self)
        let source = dir.appendingPathComponent("cxx.cpp")
        try CxxSymbolicationAgreementTests.source.write(to: source, atomically: true, encoding: .utf8)
        let library = dir.appendingPathComponent("libcxx.so").path
        let built = try runProcess("/usr/bin/g++", ["-O0", "-g", "-fPIC", "-shared", "-Wl,--build-id", source.path, "-o", library])
        XCTAssertEqual(built.status, 0, built.stderrText)
        let file = try ElfFile(path: library)
        let buildID = try XCTUnwrap(file.buildID)
        let nm = try runProcess("/usr/bin/nm", ["--defined-only", "-S", library])
        var addresses: [UInt64] = []
        var names: Set<String> = []
        for line in nm.stdoutText.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 4, ["T", "t", "W"].contains(parts[2]),
                  let value = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16), size > 0 else { continue }
            addresses += Array(stride(from: value, to: value + size, by: 2))
            names.insert(String(parts[3]))
        }
        // The kinds of definition this is about are in the library.
        for name in ["_ZN4vaka5inner5twiceEi", "_ZNK4vaka5inner3Box3getEv", "_ZN4vaka5inner3Box4makeEi",
                     "_ZZ14vaka_cxx_entryENKUliE_clEi", "_ZZ14vaka_cxx_entryEN5Local4bumpEi", "_Z4rarei", "vaka_cxx_entry"] {
            XCTAssertTrue(names.contains(name), "\(name) not in \(library)")
        }
        let expected = try NativeFixture.addr2line(library, addresses, tool: euAddr2line)
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        /// "file:line" of each frame, innermost first (line 0 and `?` alike: none).
        func locations(_ frames: [String]) -> [String] {
            frames.map { frame in
                let location = frame.split(separator: " ").last.map(String.init) ?? ""
                return location.hasSuffix(":?") ? String(location.dropLast(2)) + ":0" : location
            }
        }
        var disagreements: [String] = []
        for address in addresses {
            let ours = symbolicator.symbolicate(address: address, imagePath: library, imageBase: file.firstLoadVaddr, buildID: buildID)
                .map { "\($0.file ?? "??"):\($0.line ?? 0)" }
            let theirs = locations(expected[address] ?? [])
            if ours != theirs { disagreements.append("0x\(String(address, radix: 16)): ours \(ours) eu-addr2line \(theirs)") }
        }
        XCTAssertGreaterThan(addresses.count, 1000)
        XCTAssertEqual(disagreements.count, 0, "\(disagreements.count) of \(addresses.count):\n" + disagreements.prefix(8).joined(separator: "\n"))
    }
}
