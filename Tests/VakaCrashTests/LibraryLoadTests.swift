import Foundation
import XCTest
import VakaTestSupport

/// Which shared libraries a program linking Vaka loads, seen through the dynamic loader's own log
/// (`LD_DEBUG=libs`, on the child's stderr): libdw only when something is symbolicated.
final class LibraryLoadTests: XCTestCase {
    /// The harness starts Vaka (fresh storage) and crashes: libunwind is loaded (opened with dlopen by the crash
    /// runtime's deferred install), libelf and libdw are not, neither at process start nor by `Vaka.start` nor by
    /// the crash (libelf is needed only to read symbol tables, and by install only when dlsym cannot find the
    /// Swift runtime's message buffer). Then `vaka symbolicate` on that report opens libelf and libdw (dlopen)
    /// and gives the crashing frame's file and line.
    func testLibdwIsLoadedOnlyToSymbolicate() throws {
        let directory = Paths.freshDirectory("library-load")
        let storage = directory.appendingPathComponent("storage")
        let crash = try runChild(Paths.harness, ["null-deref", "--storage", storage.path], label: "crash",
                                 outputDirectory: directory,
                                 environment: ["LD_DEBUG": "libs", "SWIFT_BACKTRACE": "enable=no"])
        XCTAssertTrue(crash.diedBySignal, crash.outcome)
        XCTAssertTrue(crash.stderrText.contains("find library=libunwind.so.8"), "LD_DEBUG=libs shows the loads: \(crash.stderrTail())")
        XCTAssertFalse(crash.stderrText.contains("libelf.so"), "libelf loaded without symbolicating: \(crash.stderrTail())")
        XCTAssertFalse(crash.stderrText.contains("libdw.so"), "libdw loaded without symbolicating: \(crash.stderrTail())")
        XCTAssertFalse(crash.stderrText.contains("libbz2.so"), crash.stderrTail())

        let reports = try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("crashes").path)
            .filter { $0.hasSuffix(".crash") }
        let report = storage.appendingPathComponent("crashes").appendingPathComponent(try XCTUnwrap(reports.first)).path
        let symbolicate = try runChild(Paths.cli, ["symbolicate", report], label: "symbolicate", outputDirectory: directory,
                                       environment: ["LD_DEBUG": "libs"])
        XCTAssertEqual(symbolicate.outcome, "exit 0", symbolicate.stderrTail())
        XCTAssertTrue(symbolicate.stderrText.contains("find library=libdw.so.1"), symbolicate.stderrTail())
        XCTAssertTrue(symbolicate.stderrText.contains("find library=libelf.so.1"), symbolicate.stderrTail())
        let event = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: symbolicate.stdoutFile)) as? [String: Any])
        let frames = try XCTUnwrap(dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        let crashing = try XCTUnwrap(frames.last)
        XCTAssertEqual(crashing["function"] as? String, "crashme_null_deref")
        XCTAssertEqual((crashing["filename"] as? String).map { URL(fileURLWithPath: $0).lastPathComponent }, "scenarios.c")
        XCTAssertNotNil(crashing["lineno"] as? Int, "file and line come from DWARF (libdw)")

        // A libdw.so.1 without libdw's functions first on the library path (as on a machine without libdw, but
        // libelf there): the frames keep their symbols from the symbol tables, and one line says why there are
        // no files and lines.
        let fakeDirectory = directory.appendingPathComponent("fake-libdw")
        try FileManager.default.createDirectory(at: fakeDirectory, withIntermediateDirectories: true)
        let source = fakeDirectory.appendingPathComponent("fake.c")
        try Data("int not_libdw;\n".utf8).write(to: source)
        let cc = try Peers.tool("cc")
        let build = try runChild(URL(fileURLWithPath: cc), ["-shared", "-fPIC", "-o", fakeDirectory.appendingPathComponent("libdw.so.1").path,
                                                            source.path], label: "cc", outputDirectory: directory)
        XCTAssertEqual(build.outcome, "exit 0", build.stderrTail())
        let without = try runChild(Paths.cli, ["symbolicate", report], label: "symbolicate-without-libdw",
                                   outputDirectory: directory, environment: ["LD_LIBRARY_PATH": fakeDirectory.path])
        XCTAssertEqual(without.outcome, "exit 0", without.stderrTail())
        XCTAssertEqual(without.stderrText, "vaka: warning: no file and line numbers: libdw cannot be loaded (libdw.so.1: no dwarf_addrdie)\n")
        let bare = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: without.stdoutFile)) as? [String: Any])
        let bareFrames = try XCTUnwrap(dig(bare, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]])
        XCTAssertEqual(bareFrames.last?["function"] as? String, "crashme_null_deref", "the symbol table still names the frame")
        XCTAssertNil(bareFrames.last?["lineno"], "no line without libdw")
    }
}
