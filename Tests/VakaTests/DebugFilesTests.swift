import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaSymbolication

/// A small C library compiled for a test with `cc`, and the tools the tests compare against.
enum NativeFixture {
    /// C source with a function inlined into another (`always_inline`), for inlined frames.
    static let source = """
        int vaka_fixture_global = 3;

        static inline __attribute__((always_inline)) int vaka_fixture_inner(int x) {
            int y = x * 7;
            return y + vaka_fixture_global;
        }

        __attribute__((noinline)) int vaka_fixture_outer(int value) {
            int r = vaka_fixture_inner(value);
            if (r > 100) {
                r -= vaka_fixture_inner(r);
            }
            return r + 1;
        }

        """

    /// Compiles `source` into `directory/name` as a shared library with `-O2 -g` and `extraFlags`.
    static func compile(_ name: String, in directory: URL, extraFlags: [String] = []) throws -> String {
        let sourceFile = directory.appendingPathComponent("fixture.c")
        try source.write(to: sourceFile, atomically: true, encoding: .utf8)
        let output = directory.appendingPathComponent(name).path
        let result = try runProcess("/usr/bin/cc", ["-shared", "-fPIC", "-O2", "-g", "-o", output, sourceFile.path] + extraFlags)
        guard result.status == 0 else {
            throw NSError(domain: "vaka-tests", code: 10, userInfo: [NSLocalizedDescriptionKey: "cc failed: \(result.stderrText)"])
        }
        return output
    }

    /// `nm` value and size of a defined symbol.
    static func symbol(_ name: String, in path: String) throws -> (value: UInt64, size: UInt64)? {
        let result = try runProcess("/usr/bin/nm", ["--defined-only", "-S", path])
        for line in result.stdoutText.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 4, parts[3] == name, let value = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16) {
                return (value, size)
            }
        }
        return nil
    }

    /// binutils `addr2line -f -i -a -e path ADDR…` (or `tool`, e.g. elfutils' `eu-addr2line`): per address,
    /// "name file:line" innermost first (a column is dropped; eu-addr2line's "inner inlined at … in outer"
    /// first line counts as "inner").
    static func addr2line(_ path: String, _ addresses: [UInt64], tool: String = "/usr/bin/addr2line") throws -> [UInt64: [String]] {
        let result = try runProcess(tool, ["-f", "-i", "-a", "-e", path] + addresses.map { "0x" + String($0, radix: 16) })
        var answers: [UInt64: [String]] = [:]
        var current: UInt64?
        var name: String?
        for line in result.stdoutText.split(separator: "\n").map(String.init) {
            if name == nil, line.hasPrefix("0x"), let address = UInt64(line.dropFirst(2), radix: 16) {
                current = address
                answers[address] = []
                continue
            }
            guard let address = current else { continue }
            if name == nil { name = line.components(separatedBy: " inlined at ").first!; continue }
            var location = line
            if let range = location.range(of: " (discriminator") { location = String(location[..<range.lowerBound]) }
            let parts = location.split(separator: ":", omittingEmptySubsequences: false)
            if parts.count >= 3, Int(parts[parts.count - 1]) != nil, Int(parts[parts.count - 2]) != nil {
                location = parts.dropLast().joined(separator: ":")
            }
            answers[address, default: []].append("\(name!) \(location)")
            name = nil
        }
        return answers
    }

    /// `$VAKA_SENTRY_CLI`, or a skip (a failure when `VAKA_REQUIRE_PEERS=1`).
    static func sentryCLI() throws -> String { try Peers.sentryCLI() }
}

final class DebugFilesTests: XCTestCase {
    /// The text-hash debug_id of a library without build ID, recomputed here from `.text` extracted by objcopy.
    func testTextHashDebugIDOfALibraryWithoutBuildID() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libnobuildid.so", in: dir, extraFlags: ["-Wl,--build-id=none"])
        let file = try ElfFile(path: library)
        XCTAssertNil(file.buildID)
        let textFile = dir.appendingPathComponent("text.bin").path
        let objcopy = try runProcess("/usr/bin/objcopy", ["-O", "binary", "--only-section=.text", library, textFile])
        XCTAssertEqual(objcopy.status, 0, objcopy.stderrText)
        let text = [UInt8](try Data(contentsOf: URL(fileURLWithPath: textFile)))
        XCTAssertFalse(text.isEmpty)
        var hash = [UInt8](repeating: 0, count: 16)
        for (index, byte) in text.prefix(4096).enumerated() { hash[index % 16] ^= byte }
        hash[0..<4].reverse(); hash[4..<6].reverse(); hash[6..<8].reverse()
        let hex = hash.map { String(format: "%02x", $0) }.joined()
        let expected = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(Array(hex)[$0]) }.joined(separator: "-")
        XCTAssertEqual(file.debugID, expected)
        let check = try DebugFileCheck(path: library)
        XCTAssertEqual(check.variants, [.init(debugID: expected, codeID: nil, arch: "x86_64")])
        XCTAssertEqual(check.features, "symtab, debug, unwind")
        XCTAssertNotNil(check.note)
    }

    /// `vaka debug-files check --json` agrees with `sentry-cli debug-files check --json` on debug_id, code_id,
    /// arch and features for the harness, a library without build ID, libswiftCore and libc.
    func testDebugFilesCheckAgreesWithSentryCLI() throws {
        let sentryCLI = try NativeFixture.sentryCLI()
        let dir = try ScratchDirs.directory(for: self)
        let noBuildID = try NativeFixture.compile("libnobuildid.so", in: dir, extraFlags: ["-Wl,--build-id=none"])
        let swiftCore = try XCTUnwrap(try exportedSymbolAddress("swift_demangle").flatMap { try TestSupport.image(containing: $0) })
        let libc = try XCTUnwrap(try exportedSymbolAddress("getpid").flatMap { try TestSupport.image(containing: $0) })
        let harness = Paths.productsDirectory.appendingPathComponent("vaka-crashme").path
        XCTAssertTrue(swiftCore.path.contains("libswiftCore"), swiftCore.path)
        XCTAssertTrue(libc.path.contains("libc.so"), libc.path)
        for path in [harness, noBuildID, swiftCore.path, libc.path] {
            let ours = try vaka(["debug-files", "check", "--json", path])
            XCTAssertEqual(ours.status, 0, ours.stderrText)
            let theirs = try runProcess("/usr/bin/env", ["SENTRY_DISABLE_UPDATE_CHECK=1", sentryCLI, "debug-files", "check", "--json", path])
            XCTAssertEqual(theirs.status, 0, "sentry-cli: \(theirs.stderrText)")
            let a = try XCTUnwrap(try JSONSerialization.jsonObject(with: ours.stdout) as? [String: Any], ours.stdoutText)
            let b = try XCTUnwrap(try JSONSerialization.jsonObject(with: theirs.stdout) as? [String: Any], theirs.stdoutText)
            let va = try XCTUnwrap((a["variants"] as? [[String: Any]])?.first)
            let vb = try XCTUnwrap((b["variants"] as? [[String: Any]])?.first)
            XCTAssertEqual(va["debug_id"] as? String, vb["debug_id"] as? String, "debug_id of \(path)")
            XCTAssertEqual(va["code_id"] as? String, vb["code_id"] as? String, "code_id of \(path)")
            XCTAssertEqual(va["code_id"] is NSNull, vb["code_id"] is NSNull, "code_id null of \(path)")
            XCTAssertEqual(va["arch"] as? String, vb["arch"] as? String, "arch of \(path)")
            XCTAssertEqual(a["features"] as? String, b["features"] as? String, "features of \(path)")
            XCTAssertEqual(a["type"] as? String, b["type"] as? String)
        }
    }

    /// Every address of a function with inlined code: our frames (inlined ones included) equal binutils
    /// addr2line's and elfutils eu-addr2line's, and some addresses do have inlined frames.
    func testDwarfFileLineAndInlinedFramesAgreeWithAddr2line() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libinline.so", in: dir)
        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_fixture_outer", in: library))
        let file = try ElfFile(path: library)
        let buildID = try XCTUnwrap(file.buildID)
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        let imageBase: UInt64 = 0x7f00_0000_0000
        let addresses = Array(outer.value..<(outer.value + outer.size))
        let expected = try NativeFixture.addr2line(library, addresses)
        // GCC emits .debug_aranges, so elfutils' eu-addr2line resolves this library too.
        let elfutils = try NativeFixture.addr2line(library, addresses, tool: "/usr/bin/eu-addr2line")
        var inlined = 0
        for address in addresses {
            let frames = symbolicator.symbolicate(address: imageBase + address - file.firstLoadVaddr, imagePath: library,
                                                  imageBase: imageBase, buildID: buildID)
            let ours = frames.map { "\($0.symbol) \($0.file ?? "??"):\($0.line.map(String.init) ?? "?")" }
            XCTAssertEqual(ours, expected[address] ?? [], "address 0x\(String(address, radix: 16))")
            XCTAssertEqual(ours, elfutils[address] ?? [], "eu-addr2line, address 0x\(String(address, radix: 16))")
            XCTAssertEqual(frames.last?.symbolAddress, imageBase + outer.value - file.firstLoadVaddr)
            XCTAssertEqual(frames.last?.isInlined, false)
            if frames.count > 1 {
                inlined += 1
                XCTAssertEqual(frames.first?.symbol, "vaka_fixture_inner")
                XCTAssertTrue(frames.dropLast().allSatisfy { $0.isInlined && $0.symbolAddress == nil })
            }
        }
        XCTAssertGreaterThan(inlined, 0, "no address had inlined frames")
    }

    /// collect → build-ID layout; the locator finds files there and in plain trees; a stripped image is
    /// symbolicated from its debug file, and not without it.
    func testCollectLocateAndSymbolicateAStrippedLibrary() throws {
        let dir = try ScratchDirs.directory(for: self)
        let build = dir.appendingPathComponent("build/lib")
        try FileManager.default.createDirectory(at: build, withIntermediateDirectories: true)
        let library = try NativeFixture.compile("libinline.so", in: build)
        try Data("not ELF".utf8).write(to: build.appendingPathComponent("notes.txt"))
        let buildID = try XCTUnwrap(try ElfFile(path: library).buildID)
        let out = dir.appendingPathComponent("debug").path
        let entries = try DebugFileCollector.collect([dir.appendingPathComponent("build").path], into: out)
        let destination = "\(out)/.build-id/\(buildID.prefix(2))/\(buildID.dropFirst(2)).debug"
        XCTAssertEqual(entries, [.init(source: library, destination: destination, skipped: nil)])
        XCTAssertEqual(try ElfFile(path: destination).buildID, buildID)

        XCTAssertEqual(DebugFileLocator(directories: [out], systemDirectory: nil).candidates(forBuildID: buildID.uppercased()),
                       [destination])
        XCTAssertEqual(DebugFileLocator(directories: [dir.appendingPathComponent("build").path], systemDirectory: nil)
                        .candidates(forBuildID: buildID), [library])
        XCTAssertEqual(DebugFileLocator(directories: [out], systemDirectory: nil).candidates(forBuildID: "00" + buildID.dropFirst(2)), [])

        // A directory given as a symbolic link to it (SwiftPM's `.build/release`): collected and searched the same,
        // with and without a trailing slash, the paths starting with the link.
        let link = dir.appendingPathComponent("release").path
        XCTAssertEqual(symlink(dir.appendingPathComponent("build").path, link), 0)
        for given in [link, link + "/"] {
            let linkedOut = dir.appendingPathComponent("debug-linked-\(given.count)").path
            let linked = try DebugFileCollector.collect([given], into: linkedOut)
            XCTAssertEqual(linked.map(\.destination), ["\(linkedOut)/.build-id/\(buildID.prefix(2))/\(buildID.dropFirst(2)).debug"], given)
            XCTAssertEqual(DebugFileLocator(directories: [given], systemDirectory: nil).candidates(forBuildID: buildID).count, 1, given)
            XCTAssertTrue(DebugFileLocator.elfFiles(under: given).allSatisfy { $0.hasPrefix(link) }, given)
        }

        let stripped = dir.appendingPathComponent("libinline-stripped.so").path
        let strip = try runProcess("/usr/bin/objcopy", ["--strip-all", library, stripped])
        XCTAssertEqual(strip.status, 0, strip.stderrText)
        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_fixture_outer", in: library))
        let base: UInt64 = 0x7f10_0000_0000
        let withoutDebug = Symbolicator(systemDebugDirectory: nil)
            .symbolicate(address: base + outer.value + 4, imagePath: stripped, imageBase: base, buildID: buildID)
        XCTAssertTrue(withoutDebug.allSatisfy { $0.file == nil && $0.line == nil }, "\(withoutDebug)")
        let withDebug = Symbolicator(debugDirectories: [out], systemDebugDirectory: nil)
            .symbolicate(address: base + outer.value + 4, imagePath: stripped, imageBase: base, buildID: buildID)
        let reference = Symbolicator(systemDebugDirectory: nil)
            .symbolicate(address: base + outer.value + 4, imagePath: library, imageBase: base, buildID: buildID)
        XCTAssertEqual(withDebug, reference)
        XCTAssertNotNil(withDebug.last?.line)
        XCTAssertEqual(withDebug.last?.symbol, "vaka_fixture_outer")
    }

    /// A library stripped with a `.gnu_debuglink` to a debug-only file (`objcopy --only-keep-debug`, then
    /// `--strip-all --add-gnu-debuglink`), as distributions ship them: with no debug directory at all, the
    /// link is followed to `.debug/NAME` beside the library and then to `NAME` beside it, giving the names
    /// and lines of the unstripped library; a debug file whose CRC-32 differs from the link's is refused.
    func testFollowsTheGnuDebuglinkAndChecksItsCRC() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libinline.so", in: dir)
        let app = dir.appendingPathComponent("app")
        try FileManager.default.createDirectory(at: app.appendingPathComponent(".debug"), withIntermediateDirectories: true)
        let debugFile = app.appendingPathComponent(".debug/libinline.so.debug").path
        let stripped = app.appendingPathComponent("libinline.so").path
        let keep = try runProcess("/usr/bin/objcopy", ["--only-keep-debug", library, debugFile])
        XCTAssertEqual(keep.status, 0, keep.stderrText)
        let strip = try runProcess("/usr/bin/objcopy", ["--strip-all", "--add-gnu-debuglink=\(debugFile)", library, stripped])
        XCTAssertEqual(strip.status, 0, strip.stderrText)

        // The link as elfutils reads it; its CRC is the one objcopy computed over the debug file, and ours.
        let link = try XCTUnwrap(try ElfFile(path: stripped).debugLink)
        XCTAssertEqual(link.name, "libinline.so.debug")
        XCTAssertEqual(try ElfFile(path: debugFile).crc32(), link.crc)
        XCTAssertTrue(try ElfFile(path: stripped).sections.hasDebugLink)
        XCTAssertEqual(DebugFileLocator(directories: ["/srv/debug"], systemDirectory: "/usr/lib/debug")
                        .debugLinkCandidates(forImagePath: stripped, link: link), [debugFile])

        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_fixture_outer", in: library))
        let buildID = try XCTUnwrap(try ElfFile(path: library).buildID)
        XCTAssertEqual(try ElfFile(path: stripped).buildID, buildID)
        let base: UInt64 = 0x7f30_0000_0000
        let addresses = (0..<outer.size).map { base + outer.value + $0 }
        func frames(_ path: String) -> [[SymbolicatedFrame]] {
            let symbolicator = Symbolicator(systemDebugDirectory: nil)
            return addresses.map { symbolicator.symbolicate(address: $0, imagePath: path, imageBase: base, buildID: buildID) }
        }
        let reference = frames(library)
        XCTAssertEqual(reference.first?.last?.symbol, "vaka_fixture_outer")
        XCTAssertNotNil(reference.first?.last?.line)
        XCTAssertEqual(frames(stripped), reference, "through .debug/\(link.name)")

        // Beside the library instead of in .debug/.
        let beside = app.appendingPathComponent(link.name).path
        try FileManager.default.moveItem(atPath: debugFile, toPath: beside)
        XCTAssertEqual(frames(stripped), reference, "through \(link.name) beside the library")

        // Same build ID, different bytes: the CRC no longer matches, so only .dynsym's names remain, no lines.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: beside))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([0]))
        try handle.close()
        XCTAssertEqual(try ElfFile(path: beside).buildID, buildID)
        XCTAssertNotEqual(try ElfFile(path: beside).crc32(), link.crc)
        let refused = frames(stripped)
        XCTAssertEqual(refused.first?.map(\.symbol), ["vaka_fixture_outer"])
        XCTAssertTrue(refused.allSatisfy { $0.allSatisfy { $0.file == nil && $0.line == nil } }, "\(refused)")
    }

    /// MiniDebugInfo as Fedora builds it (the functions missing from `.dynsym` kept in a `.symtab`-only
    /// copy, xz-compressed into a `.gnu_debugdata` section of the stripped file): a static function, absent
    /// from `.dynsym`, is found by name in the stripped library, and is not without the section.
    func testResolvesALocalFunctionFromGnuDebugdata() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/xz") else {
            throw XCTSkip("/usr/bin/xz is not installed: cannot build a .gnu_debugdata section")
        }
        let dir = try ScratchDirs.directory(for: self)
        let source = dir.appendingPathComponent("mini.c")
        try """
            static __attribute__((noinline)) int vaka_mini_local(int x) { return x * 5 + 1; }
            int vaka_mini_exported(int x) { return vaka_mini_local(x) + vaka_mini_local(x + 1); }
            """.write(to: source, atomically: true, encoding: .utf8)
        let library = dir.appendingPathComponent("libmini.so").path
        func run(_ tool: String, _ arguments: [String]) throws -> String {
            let result = try runProcess(tool, arguments)
            XCTAssertEqual(result.status, 0, "\(tool) \(arguments): \(result.stderrText)")
            return result.stdoutText
        }
        _ = try run("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-g", "-o", library, source.path])
        let local = try XCTUnwrap(try NativeFixture.symbol("vaka_mini_local", in: library))
        // Fedora's find-debuginfo: keep the functions .dynsym lacks, in a .symtab-only copy, xz-compressed.
        func names(_ arguments: [String]) throws -> Set<String> {
            Set(try run("/usr/bin/nm", arguments + ["--format=posix", "--defined-only", library]).split(separator: "\n")
                .map { $0.split(separator: " ") }.filter { $0.count >= 2 && ["T", "t"].contains($0[1]) }.map { String($0[0]) })
        }
        let keep = try names([]).subtracting(names(["-D"]))
        XCTAssertTrue(keep.contains("vaka_mini_local"), "\(keep)")
        let keepFile = dir.appendingPathComponent("keep_symbols").path
        try keep.sorted().joined(separator: "\n").appending("\n").write(toFile: keepFile, atomically: true, encoding: .utf8)
        let debug = dir.appendingPathComponent("mini_debuginfo").path
        _ = try run("/usr/bin/objcopy", ["--only-keep-debug", library, debug])
        _ = try run("/usr/bin/objcopy", ["-S", "--remove-section", ".gdb_index", "--remove-section", ".comment",
                                         "--keep-symbols=\(keepFile)", debug])
        _ = try run("/usr/bin/xz", ["-f", debug])
        let stripped = dir.appendingPathComponent("libmini-stripped.so").path
        let withData = dir.appendingPathComponent("libmini-minidebuginfo.so").path
        _ = try run("/usr/bin/objcopy", ["--strip-all", library, stripped])
        _ = try run("/usr/bin/objcopy", ["--add-section", ".gnu_debugdata=\(debug).xz", stripped, withData])

        let file = try ElfFile(path: withData)
        XCTAssertTrue(file.sections.hasDebugData)
        XCTAssertFalse(file.hasSymtab)
        XCTAssertEqual(file.symbol(containing: local.value + 1)?.name, "vaka_mini_local")
        XCTAssertEqual(file.symbol(containing: local.value + 1)?.address, local.value)
        XCTAssertNotNil(file.symbol(containing: try XCTUnwrap(try NativeFixture.symbol("vaka_mini_exported", in: library)).value))
        XCTAssertNotEqual(try ElfFile(path: stripped).symbol(containing: local.value + 1)?.name, "vaka_mini_local")
        let buildID = try XCTUnwrap(file.buildID)
        let base: UInt64 = 0x7f40_0000_0000
        let frames = Symbolicator(systemDebugDirectory: nil)
            .symbolicate(address: base + local.value + 1 - file.firstLoadVaddr, imagePath: withData, imageBase: base, buildID: buildID)
        XCTAssertEqual(frames.map(\.symbol), ["vaka_mini_local"])
    }

    /// A stripped library's `.gnu_debuglink` is looked up under each debug directory too, at the library's
    /// own directory below it (`DIR/<library directory>/NAME`), as under `/usr/lib/debug`.
    func testDebuglinkCandidatesUnderDebugDirectories() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libinline.so", in: dir)
        let debugRoot = dir.appendingPathComponent("debug-root")
        let real = URL(fileURLWithPath: library).resolvingSymlinksInPath().deletingLastPathComponent().path
        let nested = debugRoot.appendingPathComponent(String(real.dropFirst())).appendingPathComponent("libinline.so.debug")
        try FileManager.default.createDirectory(at: nested.deletingLastPathComponent(), withIntermediateDirectories: true)
        let keep = try runProcess("/usr/bin/objcopy", ["--only-keep-debug", library, nested.path])
        XCTAssertEqual(keep.status, 0, keep.stderrText)
        let link = DebugLink(name: "libinline.so.debug", crc: 0)
        XCTAssertEqual(DebugFileLocator(directories: [debugRoot.path], systemDirectory: nil)
                        .debugLinkCandidates(forImagePath: library, link: link), [nested.path])
        XCTAssertEqual(DebugFileLocator(directories: [debugRoot.path], systemDirectory: nil)
                        .debugLinkCandidates(forImagePath: library, link: DebugLink(name: "../x", crc: 0)), [])
    }

    /// The CLI: collect, then check (text and JSON), and the usage errors.
    func testDebugFilesCommandLine() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libinline.so", in: dir)
        let out = dir.appendingPathComponent("out").path
        let collect = try vaka(["debug-files", "collect", library, "--out", out])
        XCTAssertEqual(collect.status, 0, collect.stderrText)
        XCTAssertTrue(collect.stdoutText.contains("/.build-id/"), collect.stdoutText)
        let check = try vaka(["debug-files", "check", library])
        XCTAssertEqual(check.status, 0, check.stderrText)
        XCTAssertTrue(check.stdoutText.contains("debug_id:"), check.stdoutText)
        let json = try vaka(["debug-files", "check", "--json", library, library])
        XCTAssertEqual((try JSONSerialization.jsonObject(with: json.stdout) as? [Any])?.count, 2, json.stdoutText)
        let notELF = dir.appendingPathComponent("x.txt").path
        try Data("text".utf8).write(to: URL(fileURLWithPath: notELF))
        XCTAssertEqual(try vaka(["debug-files", "check", notELF]).status, 1)
        XCTAssertEqual(try vaka(["debug-files", "collect", dir.path]).status, 2)
        XCTAssertEqual(try vaka(["debug-files", "check"]).status, 2)
        XCTAssertEqual(try vaka(["debug-files", "frobnicate"]).status, 2)
        XCTAssertEqual(try vaka(["symbolicate"]).status, 2)
        XCTAssertEqual(try vaka(["symbolicate", notELF, "--bogus"]).status, 2)
        XCTAssertEqual(try vaka(["symbolicate", notELF]).status, 1)
    }
}

final class InAppAndEventSymbolicationTests: XCTestCase {
    func testInAppRule() {
        let exe = "/srv/app/bin/server"
        XCTAssertTrue(FatalEventBuilder.isInApp(imagePath: exe, executable: exe))
        XCTAssertTrue(FatalEventBuilder.isInApp(imagePath: "/srv/app/bin/libModels.so", executable: exe))
        XCTAssertTrue(FatalEventBuilder.isInApp(imagePath: "/srv/app/bin/plugins/libPlugin.so", executable: exe))
        XCTAssertFalse(FatalEventBuilder.isInApp(imagePath: "/srv/app/bin/libswiftCore.so", executable: exe))
        XCTAssertFalse(FatalEventBuilder.isInApp(imagePath: "/srv/app/bin/libFoundation.so", executable: exe))
        XCTAssertFalse(FatalEventBuilder.isInApp(imagePath: "/srv/app/lib/libOther.so", executable: exe))
        XCTAssertFalse(FatalEventBuilder.isInApp(imagePath: "/lib/x86_64-linux-gnu/libc.so.6", executable: exe))
        XCTAssertFalse(FatalEventBuilder.isInApp(imagePath: "/usr/lib/x86_64-linux-gnu/libz.so.1", executable: "/usr/tool"))
        XCTAssertFalse(FatalEventBuilder.isInApp(imagePath: "[vdso]", executable: exe))
        XCTAssertFalse(FatalEventBuilder.isInApp(imagePath: exe, executable: nil))
    }

    /// Re-symbolicating an event JSON: frames resolved through debug_meta, unknown fields kept, inlined
    /// frames merged back (not duplicated on a second pass), recursion frames kept apart.
    func testEventSymbolicatorResolvesThroughDebugMeta() throws {
        let address = markerFunctionAddress()
        let image = try XCTUnwrap(try TestSupport.image(containing: address))
        let file = try ElfFile(path: image.path)
        let hex = { (value: UInt64) in "0x" + String(value, radix: 16) }
        let frame: JSONValue = .object(["instruction_addr": .string(hex(address + 5)), "trust": .string("cfi"),
                                        "vendor_field": .string("kept")])
        let event: JSONValue = .object([
            "event_id": .string(String(repeating: "a", count: 32)),
            "custom": .array([.int(1)]),
            "exception": .object(["values": .array([.object(["type": .string("SIGSEGV"),
                "stacktrace": .object(["frames": .array([frame, frame,
                    .object(["instruction_addr": .string(hex(address + 2)), "trust": .string("context")])])])])])]),
            "debug_meta": .object(["images": .array([.object([
                "type": .string("elf"), "code_file": .string(image.path), "image_addr": .string(hex(image.base)),
                "image_size": .int(Int64(file.loadSpan)), "code_id": .string(try XCTUnwrap(file.buildID)),
            ])])]),
        ])
        let symbolicator = EventSymbolicator(symbolicator: Symbolicator(systemDebugDirectory: nil))
        let (once, counts) = symbolicator.symbolicate(event)
        XCTAssertEqual(counts, .init(frames: 3, resolved: 3))
        let (twice, _) = symbolicator.symbolicate(once)
        XCTAssertEqual(once, twice)
        guard case .object(let root) = once, case .object(let exception)? = root["exception"],
              case .array(let values)? = exception["values"], case .object(let value)? = values.first,
              case .object(let stacktrace)? = value["stacktrace"], case .array(let frames)? = stacktrace["frames"] else {
            return XCTFail("shape changed: \(once)")
        }
        XCTAssertEqual(root["custom"], .array([.int(1)]))
        XCTAssertEqual(frames.count, 3, "recursion frames must stay apart: \(frames)")
        for case .object(let resolved) in frames {
            XCTAssertEqual(resolved["function"]?.stringValue, "vaka_test_marker_function")
            XCTAssertEqual(resolved["symbol_addr"]?.stringValue, hex(address))
            // The @_cdecl thunk is compiler-generated: DWARF (and addr2line) give "//<compiler-generated>", no line.
            XCTAssertNotNil(resolved["filename"]?.stringValue, "\(resolved)")
            XCTAssertEqual(resolved["package"]?.stringValue, image.path)
        }
        if case .object(let first) = frames[0] { XCTAssertEqual(first["vendor_field"], .string("kept")) }
    }
}
