import Foundation
import XCTest
import VakaTestSupport

/// The libraries Vaka opens with `dlopen` instead of linking: libunwind (and liblzma, which only libunwind needs)
/// and libelf are not load-time dependencies of a program that links Vaka, so they cost nothing at process start;
/// libunwind is opened by the `vaka.start` thread (`vaka_crash_finish_install`), libelf on first use. A crash
/// still has libunwind's frames once it is loaded, and frame-pointer frames (with a `debug` line saying why) when
/// it cannot be opened.
final class LazyLibrariesTests: XCTestCase {
    /// Sonames a program linking Vaka must not have among its `NEEDED` entries.
    static let notNeeded = ["libunwind.so", "liblzma.so", "libelf.so"]

    /// The `NEEDED` entries of the dynamic section of `binary` (`readelf -d`), e.g. `libc.so.6`.
    func neededLibraries(_ binary: URL) throws -> [String] {
        let result = try runProcess("/usr/bin/readelf", ["-d", try Paths.built(binary)])
        XCTAssertEqual(result.status, 0, result.stderrText)
        // ` 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]`
        return result.stdoutText.split(separator: "\n").filter { $0.contains("(NEEDED)") }.compactMap { line in
            guard let open = line.firstIndex(of: "["), let close = line.lastIndex(of: "]") else { return nil }
            return String(line[line.index(after: open)..<close])
        }
    }

    /// The crash harness and the start benchmark's Vaka program need neither libunwind, liblzma nor libelf at
    /// load time (the list is read, and holds libc, so an unreadable section does not pass).
    func testProgramsLinkingVakaDoNotNeedLibunwindLzmaOrLibelf() throws {
        for product in [Paths.harness, Paths.productsDirectory.appendingPathComponent("bench-start-vaka")] {
            let needed = try neededLibraries(product)
            XCTAssertTrue(needed.contains { $0.hasPrefix("libc.so") }, "\(product.lastPathComponent): \(needed)")
            for soname in Self.notNeeded {
                XCTAssertFalse(needed.contains { $0.hasPrefix(soname) },
                               "\(product.lastPathComponent) needs \(soname) at load time: \(needed)")
            }
        }
    }

    /// A directory holding an empty file named `soname`: first on LD_LIBRARY_PATH, it makes dlopen of that
    /// library fail ("file too short") as on a machine without it.
    func brokenLibraryDirectory(_ soname: String) -> URL {
        let directory = Paths.freshDirectory("broken-\(soname)")
        XCTAssertTrue(FileManager.default.createFile(atPath: directory.appendingPathComponent(soname).path, contents: Data()))
        return directory
    }

    /// A C program with the crash runtime has no Swift runtime, so install looks the Swift fatal-error message
    /// buffer up in the executable's `.symtab` with libelf: libelf is opened then (mapped after install, not
    /// before), and when it cannot be opened install still succeeds, vaka_crash_libelf_error() gives the loader's
    /// reason, and the crash is reported (glibc's abort message still found with dlsym).
    func testInstallOpensLibelfOnlyForItsFallbackAndCopesWithoutIt() throws {
        let program = try RuntimeProgram.build("libelfload", """
        static int mapped(void) {
            FILE *f = fopen("/proc/self/maps", "r");
            char line[4096];
            int found = 0;
            while (f != NULL && fgets(line, sizeof line, f) != NULL) found |= strstr(line, "/libelf.so") != NULL || strstr(line, "/libelf-") != NULL;
            if (f != NULL) fclose(f);
            return found;
        }
        int main(void) {
            printf("before %d\\n", mapped());
            vk_start("libelfload");
            const char *why = vaka_crash_libelf_error();
            printf("after %d error %s\\n", mapped(), why != NULL ? why : "none");
            fflush(stdout);
            abort();
        }
        """)
        let loaded = try RuntimeProgram.run(program)
        XCTAssertEqual(loaded.result.outcome, "signal 6 (SIGABRT)", loaded.result.stderrTail())
        XCTAssertEqual(String(decoding: loaded.result.stdout, as: UTF8.self), "before 0\nafter 1 error none\n")
        XCTAssertEqual(loaded.reports, ["libelfload.crash"])

        let broken = brokenLibraryDirectory("libelf.so.1")
        let missing = try RuntimeProgram.run(program, environment: ["LD_LIBRARY_PATH": broken.path])
        XCTAssertEqual(missing.result.outcome, "signal 6 (SIGABRT)", missing.result.stderrTail())
        let stdout = String(decoding: missing.result.stdout, as: UTF8.self)
        XCTAssertTrue(stdout.hasPrefix("before 0\nafter 0 error \(broken.path)/libelf.so.1: file too short"), stdout)
        XCTAssertEqual(missing.reports, ["libelfload.crash"])
        XCTAssertEqual(reportValue(missing.onlyReport, "signal"), "6 SIGABRT", missing.onlyReport)
    }

    /// Runs the harness in `scenario` with Vaka (`--settle`: the `vaka.start` thread has finished its work, the
    /// libunwind load included) and `VAKA_DEBUG=1`; returns its stderr, its one report and that report's event.
    func crash(_ scenario: String, label: String, environment: [String: String] = [:]) throws
        -> (stderr: String, report: String, event: [String: Any]) {
        let work = Paths.freshDirectory(label)
        let storage = work.appendingPathComponent("storage")
        let result = try runChild(Paths.harness, [scenario, "--storage", storage.path, "--settle"], label: label,
                                  outputDirectory: work,
                                  environment: ["SWIFT_BACKTRACE": "enable=no", "VAKA_DEBUG": "1"].merging(environment) { _, new in new })
        XCTAssertTrue(result.diedBySignal && !result.timedOut, "\(label): \(result.outcome) \(result.stderrTail())")
        let crashes = storage.appendingPathComponent("crashes")
        let reports = ((try? FileManager.default.contentsOfDirectory(atPath: crashes.path)) ?? []).filter { $0.hasSuffix(".crash") }
        guard reports.count == 1 else {
            XCTFail("\(label): expected one report, found \(reports): \(result.stderrTail())")
            return (result.stderrText, "", [:])
        }
        let path = crashes.appendingPathComponent(reports[0]).path
        let report = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        let convert = try runChild(Paths.cli, ["report", "convert", path], label: "\(label)-convert", outputDirectory: work)
        XCTAssertEqual(convert.outcome, "exit 0", convert.stderrTail())
        return (result.stderrText, report, decodeJSONObject(convert.stdout) ?? [:])
    }

    /// The functions of the event's crashed-thread frames, newest first.
    func functions(_ event: [String: Any]) -> [String] {
        let frames = dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]] ?? []
        return frames.reversed().map { $0["function"] as? String ?? "?" }
    }

    /// With libunwind loaded by the `vaka.start` thread, an abort (abort → raise → pthread_kill in libc, which
    /// keep no frame pointer) is unwound by CFI through libc to the scenario's function and `main`, and no
    /// `debug` line says libunwind is missing.
    func testCrashAfterStartUnwindsWithLibunwind() throws {
        let (stderr, report, event) = try crash("abort", label: "lazy-abort")
        XCTAssertFalse(stderr.contains("libunwind not loaded"), stderr)
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertEqual(Set(methods.dropFirst()), ["cfi"], report)
        let names = functions(event)
        XCTAssertTrue(names.prefix(6).contains("crashme_abort"), "through libc to the scenario: \(names)")
        XCTAssertTrue(names.contains("vaka_crashme_main"), "CFI reaches main: \(names)")
    }

    /// When `libunwind.so.8` cannot be opened (an empty file of that name first on LD_LIBRARY_PATH: "file too
    /// short"), Vaka still starts, says so in one `debug` line, and the crash report's frames come from the
    /// frame-pointer walk: the scenario's function and `main` are there.
    func testCrashWithoutLibunwindUnwindsByFramePointers() throws {
        let libraries = brokenLibraryDirectory("libunwind.so.8")
        let (stderr, report, event) = try crash("null-deref", label: "lazy-no-libunwind",
                                                environment: ["LD_LIBRARY_PATH": libraries.path])
        let debugLines = stderr.split(separator: "\n").filter { $0.contains("libunwind not loaded") }
        XCTAssertEqual(debugLines.count, 1, stderr)
        XCTAssertTrue(debugLines.first?.contains("libunwind.so.8") ?? false, "the loader's reason: \(debugLines)")
        let methods = frameMethods(report)
        XCTAssertEqual(methods.first, "context", report)
        XCTAssertGreaterThanOrEqual(methods.count, 3, report)
        XCTAssertEqual(Set(methods.dropFirst()), ["fp"], report)
        let names = functions(event)
        XCTAssertEqual(names.first, "crashme_null_deref", "\(names)")
        XCTAssertTrue(names.contains("vaka_crashme_main"), "frame pointers reach main: \(names)")
    }

    /// When `libelf.so.1` cannot be opened (an empty file of that name first on LD_LIBRARY_PATH), the command-line
    /// tool says that libelf is what is missing: `debug-files check` fails naming the loader's reason rather than
    /// calling a good file unreadable ELF, and `symbolicate` warns that no function names (not only no lines) can
    /// be given, then still prints the event.
    func testCommandLineSaysLibelfIsMissing() throws {
        let (_, report, _) = try crash("null-deref", label: "lazy-no-libelf-cli")
        let work = Paths.freshDirectory("no-libelf-cli")
        let reportFile = work.appendingPathComponent("run.crash")
        try Data(report.utf8).write(to: reportFile)
        let broken = brokenLibraryDirectory("libelf.so.1")
        let environment = ["LD_LIBRARY_PATH": broken.path]
        let cli = try Paths.built(Paths.cli)

        let check = try runChild(URL(fileURLWithPath: cli), ["debug-files", "check", cli], label: "check",
                                 outputDirectory: work, environment: environment)
        XCTAssertEqual(check.outcome, "exit 1", check.stderrTail())
        XCTAssertTrue(check.stderrText.contains("cannot read \(cli): libelf cannot be loaded (\(broken.path)/libelf.so.1: file too short)"),
                      check.stderrText)
        XCTAssertFalse(check.stderrText.contains("not a readable ELF file"), check.stderrText)

        let symbolicate = try runChild(URL(fileURLWithPath: cli), ["symbolicate", reportFile.path], label: "symbolicate",
                                       outputDirectory: work, environment: environment)
        XCTAssertEqual(symbolicate.outcome, "exit 0", symbolicate.stderrTail())
        let warnings = symbolicate.stderrText.split(separator: "\n").filter { $0.hasPrefix("vaka: warning:") }
        XCTAssertEqual(warnings, ["vaka: warning: no function names, files or line numbers: libelf cannot be loaded (\(broken.path)/libelf.so.1: file too short)"],
                       symbolicate.stderrText)
        let event = try XCTUnwrap(decodeJSONObject(symbolicate.stdout))
        XCTAssertNotNil(dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]], "\(event)")
    }

    /// A fully static C program (`cc -static`): `dlopen` still opens libunwind there, but brings it a C library of
    /// its own whose `dl_iterate_phdr` does not list the executable, so libunwind finds no unwind table for the
    /// program's frames. The report is still whole: the context frame, then frames found by the frame-pointer walk
    /// and the stack scan, through to the leaf and `main` (docs/crash-handling.md). Fails if such a program gets
    /// no report, or loses its own functions from it.
    func testFullyStaticProgramIsReportedByFramePointersAndScan() throws {
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("static-unwind")
        let source = dir.appendingPathComponent("su.c")
        try Data("""
        #include "vaka/vaka_crash.h"
        #include <stdio.h>
        #include <stdlib.h>
        __attribute__((noinline)) void static_unwind_leaf(void) { abort(); }
        int main(void) {
            vaka_crash_config c = { .report_dir = getenv("VK_DIR"), .run_id = "su" };
            if (vaka_crash_install(&c)) return 99;
            static_unwind_leaf();
            return 0;
        }
        """.utf8).write(to: source)
        let executable = dir.appendingPathComponent("su")
        let link = try runChild(URL(fileURLWithPath: cc),
                                ["-static", "-O0", "-g", "-fno-omit-frame-pointer",
                                 "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                 source.path, library.path, "-lpthread", "-o", executable.path],
                                label: "cc-static", outputDirectory: dir, timeout: 120)
        guard link.outcome == "exit 0" else { throw XCTSkip("cc -static failed (no static C library?): \(link.stderrTail())") }
        let run = try RuntimeProgram.run(executable, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["su.crash"])
        let methods = frameMethods(run.onlyReport)
        XCTAssertEqual(methods.first, "context", run.onlyReport)
        XCTAssertTrue(Set(methods.dropFirst()).isSubset(of: ["fp", "scan"]), run.onlyReport)
        let convert = try runChild(Paths.cli, ["report", "convert", run.directory.appendingPathComponent("su.crash").path],
                                   label: "convert", outputDirectory: dir)
        XCTAssertEqual(convert.outcome, "exit 0", convert.stderrTail())
        let names = functions(decodeJSONObject(convert.stdout) ?? [:])
        XCTAssertTrue(names.contains("static_unwind_leaf") && names.contains("main"), "\(names)")
    }
}
