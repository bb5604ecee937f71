import Foundation
import XCTest
import VakaTestSupport

/// A program linked with `-static-stdlib` carries the Swift runtime inside the
/// executable, whose symbols are not in the dynamic symbol table, so `dlsym` cannot find
/// `swift_getFatalErrorMessageBuffer`; the runtime then looks it up in the executable's own symbol table
/// (libelf) at install. A real Swift program is built here with `swiftc -static-stdlib`, linked against the
/// crash runtime's sources (``RuntimeProgram/library``), and dies in `fatalError("boom static")`. The same
/// fallback serves glibc's `__abort_msg` in a fully static C program.
final class StaticStdlibTests: XCTestCase {
    /// Debian's multiarch directory name for this machine.
    #if arch(x86_64)
    let archTriple = "x86_64-linux-gnu"
    #else
    let archTriple = "aarch64-linux-gnu"
    #endif

    /// swiftc next to the toolchain this test runs on, or on PATH; nil when absent.
    static let swiftc: String? = {
        var candidates = ["/opt/swift/usr/bin/swiftc"]
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            candidates.append("\(dir)/swiftc")
        }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    /// C part of the program: installs the runtime with reports in `$VK_DIR` (run id `static`) and prints
    /// whether dlsym sees the Swift runtime's message-buffer function.
    static let starter = """
    #define _GNU_SOURCE
    #include "vaka/vaka_crash.h"
    #include <dlfcn.h>
    #include <stdio.h>
    #include <stdlib.h>
    int vk_static_start(void) {
        printf("dlsym %s\\n", dlsym(RTLD_DEFAULT, "swift_getFatalErrorMessageBuffer") ? "found" : "missing");
        fflush(stdout);
        vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "static" };
        return vaka_crash_install(&c);
    }
    """

    static let main = """
    @_silgen_name("vk_static_start") func vkStaticStart() -> Int32
    @inline(never) func boomStatic(_ n: Int) -> Never { fatalError("boom static \\(n)") }
    let rc = vkStaticStart()
    if rc != 0 { print("install failed \\(rc)"); exit(99) }
    boomStatic(Int(CommandLine.arguments.count) + 6)
    """

    /// Builds the program (`static`: with -static-stdlib) in a fresh directory.
    func build(static linkStatic: Bool) throws -> URL {
        guard let swiftc = Self.swiftc else { throw Peers.missing("swiftc not found (the Swift toolchain)") }
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory(linkStatic ? "static-stdlib" : "dynamic-stdlib")
        let starter = dir.appendingPathComponent("starter.c")
        try Data(Self.starter.utf8).write(to: starter)
        let object = dir.appendingPathComponent("starter.o")
        let ccRun = try runChild(URL(fileURLWithPath: cc),
                                 ["-c", "-O0", "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                  starter.path, "-o", object.path],
                                 label: "cc", outputDirectory: dir, timeout: 60)
        XCTAssertEqual(ccRun.outcome, "exit 0", ccRun.stderrTail())
        let source = dir.appendingPathComponent("main.swift")
        try Data(("import Glibc\n" + Self.main).utf8).write(to: source)
        let executable = dir.appendingPathComponent("prog")
        let link = try runChild(URL(fileURLWithPath: swiftc),
                                (linkStatic ? ["-static-stdlib"] : []) +
                                ["-Onone", "-g", source.path, object.path, library.path,
                                 "-o", executable.path],
                                label: "swiftc", outputDirectory: dir, timeout: 240)
        guard link.outcome == "exit 0" else { throw ChildError(description: "swiftc: \(link.stderrTail())") }
        return executable
    }

    /// The plain case: -static-stdlib, fatalError("boom static 7"). dlsym cannot see the runtime's
    /// function there (checked, so the test exercises the fallback); the report carries the message.
    func testStaticStdlibFatalErrorMessage() throws {
        let program = try build(static: true)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 4 (SIGILL)", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "dlsym missing\n",
                       "dlsym found the symbol: the fallback is not exercised")
        XCTAssertEqual(run.reports, ["static.crash"])
        let message = reportValue(run.onlyReport, "fatal_message") ?? ""
        XCTAssertTrue(message.contains("boom static 7"), "fatal_message '\(message)' in:\n\(run.onlyReport)")
    }

    /// Control: the same program with the shared Swift runtime (dlsym finds the function).
    func testDynamicStdlibFatalErrorMessage() throws {
        let program = try build(static: false)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 4 (SIGILL)", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "dlsym found\n")
        let message = reportValue(run.onlyReport, "fatal_message") ?? ""
        XCTAssertTrue(message.contains("boom static 7"), "fatal_message '\(message)' in:\n\(run.onlyReport)")
    }

    /// The other symbol install resolves with dlsym: glibc's `__abort_msg`. In a fully static C program
    /// (`cc -static`) dlsym finds nothing; the failing assert()'s text still reaches the report through the
    /// executable's .symtab. Skipped when the static libraries (libunwind.a, libelf.a, libz.a, liblzma.a) are
    /// not installed.
    func testStaticGlibcAbortMessage() throws {
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        let libs = ["libunwind.a", "libelf.a", "libz.a", "liblzma.a"]
        let libDir = "/usr/lib/\(archTriple)"
        for lib in libs where !FileManager.default.fileExists(atPath: "\(libDir)/\(lib)") {
            throw XCTSkip("\(libDir)/\(lib) missing: cannot link a static program")
        }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("static-glibc")
        let source = dir.appendingPathComponent("sa.c")
        try Data("""
        #include "vaka/vaka_crash.h"
        #include <assert.h>
        #include <dlfcn.h>
        #include <stdio.h>
        #include <stdlib.h>
        int main(int argc, char **argv) {
            printf("dlsym %s\\n", dlsym(RTLD_DEFAULT, "__abort_msg") ? "found" : "missing");
            fflush(stdout);
            vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "sa" };
            if (vaka_crash_install(&c)) return 99;
            assert(argc == 42);
            return 0;
        }
        """.utf8).write(to: source)
        let executable = dir.appendingPathComponent("sa")
        let link = try runChild(URL(fileURLWithPath: cc),
                                ["-static", "-O0", "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                 source.path, library.path, "-lpthread",
                                 "-o", executable.path],
                                label: "cc-static", outputDirectory: dir, timeout: 120)
        guard link.outcome == "exit 0" else { throw ChildError(description: "cc -static: \(link.stderrTail())") }
        let run = try RuntimeProgram.run(executable, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "dlsym missing\n",
                       "dlsym found __abort_msg: the fallback is not exercised")
        XCTAssertTrue((reportValue(run.onlyReport, "abort_message") ?? "").contains("argc == 42"), run.onlyReport)
    }

    /// Control: glibc's abort message from a failing assert() in a dynamically linked C program, where
    /// `__abort_msg` comes from dlsym.
    func testAbortMessageStillFound() throws {
        let program = try RuntimeProgram.build("assertmsg", """
        #undef NDEBUG
        #include <assert.h>
        int main(int argc, char **argv) { vk_start("assertmsg"); assert(argc == 42); return 0; }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", run.result.stderrTail())
        XCTAssertTrue((reportValue(run.onlyReport, "abort_message") ?? "").contains("argc == 42"), run.onlyReport)
    }
}
