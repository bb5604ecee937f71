import Foundation
import XCTest
import VakaTestSupport

/// The crash runtime's interposers (`pthread_create`, `pthread_sigmask`, `sigprocmask`) in programs where the
/// next definition is not a shared C library: a static sanitizer runtime linked into the executable (as
/// `swiftc -sanitize=address|thread` does with clang's runtime), and a fully static program (`cc -static`).
/// Complements the sanitizer and static checks in ``InterposerCompatibilityTests``: here the mask interposers, clang's
/// TSan runtime, and that a crash is still reported with Vaka started.
final class SanitizerStaticProgramTests: XCTestCase {
    static let clang = ["/opt/swift/usr/bin/clang"].first { FileManager.default.isExecutableFile(atPath: $0) }

    #if arch(x86_64)
    static let libDir = "/usr/lib/x86_64-linux-gnu"
    #else
    static let libDir = "/usr/lib/aarch64-linux-gnu"
    #endif

    /// The Swift toolchain's shared libraries (libdispatch, BlocksRuntime).
    static let swiftLibDir = "/opt/swift/usr/lib/swift/linux"

    /// Compiles `body` (after ``RuntimeProgram/prelude``) with `compiler` and `flags` against the runtime
    /// library into an executable named `name`.
    /// - Throws: ``ChildError`` when the compiler fails.
    func link(_ name: String, _ body: String, compiler: String, flags: [String],
              libraries: [String] = ["-lpthread", "-ldl"]) throws -> URL {
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("san-\(name)")
        let source = dir.appendingPathComponent("\(name).c")
        try Data((RuntimeProgram.prelude + body).utf8).write(to: source)
        let executable = dir.appendingPathComponent(name)
        let result = try runChild(URL(fileURLWithPath: compiler),
                                  flags + ["-g", "-O0", "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                           source.path, library.path] + libraries + ["-o", executable.path],
                                  label: "cc-\(name)", outputDirectory: dir, timeout: 180)
        guard result.outcome == "exit 0" else { throw ChildError(description: "\(compiler) \(name): \(result.stderrTail())") }
        return executable
    }

    /// clang's static ThreadSanitizer runtime (the one `swiftc -sanitize=thread` links): a thread created through
    /// the interposer is registered with TSan, with Vaka started and without.
    func testClangThreadSanitizerProgramCanRunItsThreads() throws {
        guard let clang = Self.clang else { throw Peers.missing("no clang in the Swift toolchain (/opt/swift/usr/bin/clang)") }
        let executable = try link("ctsan", """
        static int shared;
        static void *work(void *a) { shared++; return a; }
        int main(void) {
            vk_start("advctsan");
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL) != 0) { puts("create failed"); return 5; }
            pthread_join(t, NULL);
            printf("joined %d\\n", shared);
            return 0;
        }
        """, compiler: clang, flags: ["-fsanitize=thread"],
            // clang's TSan runtime has libdispatch interceptors; Swift programs link these two anyway.
            libraries: ["-lpthread", "-ldl", "-L", Self.swiftLibDir, "-Wl,-rpath," + Self.swiftLibDir,
                        "-ldispatch", "-lBlocksRuntime"])
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(executable, vaka: vaka, timeout: 60)
            XCTAssertEqual(run.result.outcome, "exit 0", "vaka=\(vaka): \(run.result.stderrTail(600))")
            XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "joined 1\n")
        }
    }

    /// The mask interposers reach ASan's interceptors: a signal set cut short (an 8-byte heap block passed as a
    /// 128-byte sigset_t) is a heap-buffer-overflow that ASan's interceptor reports (exit 1) — only it can, so
    /// without the forwarding the program exits 0. With Vaka started and without. (The set holds no crash
    /// signal: one that does is copied whole by the interposer, and ASan then checks the copy.)
    func testAddressSanitizerSeesTheSetsPassedToTheMaskFunctions() throws {
        guard let clang = Self.clang else { throw Peers.missing("no clang in the Swift toolchain (/opt/swift/usr/bin/clang)") }
        let executable = try link("asanmask", """
        int main(int argc, char **argv) {
            vk_start("advasanmask");
            /* Only the first word of a set: enough for the kernel (which reads 8 bytes), for the interposer's
             * filter (word 0) and for the signal it names, but ASan's interceptor checks all of sizeof(sigset_t). */
            unsigned long *word = malloc(sizeof *word);
            *word = 1UL << (SIGUSR1 - 1);
            sigset_t *set = (sigset_t *)(void *)word;
            int rc = argv[1][0] == 'p' ? pthread_sigmask(SIG_BLOCK, set, NULL) : sigprocmask(SIG_BLOCK, set, NULL);
            printf("returned %d\\n", rc);
            return 0;
        }
        """, compiler: clang, flags: ["-fsanitize=address"])
        for (mode, function) in [("p", "pthread_sigmask"), ("s", "sigprocmask")] {
            for vaka in [false, true] {
                let run = try RuntimeProgram.run(executable, [mode], vaka: vaka, timeout: 60)
                let stderr = String(decoding: run.result.stderr, as: UTF8.self)
                XCTAssertEqual(run.result.outcome, "exit 1", "\(function) vaka=\(vaka): \(run.result.stderrTail(600))")
                XCTAssertTrue(stderr.contains("heap-buffer-overflow"), "\(function) vaka=\(vaka): \(run.result.stderrTail(600))")
                XCTAssertTrue(stderr.contains(function), "\(function) vaka=\(vaka): \(run.result.stderrTail(600))")
                XCTAssertEqual(run.reports, [], "\(function) vaka=\(vaka)")
            }
        }
    }

    /// An ASan program with Vaka started still gets its crash report for a fault on a thread created after start
    /// (ASan's own SEGV handler, installed before Vaka, runs after the report as the previous handler), and ends
    /// the way it ends without Vaka.
    func testAddressSanitizerProgramWithVakaStartedReportsACrash() throws {
        guard let clang = Self.clang else { throw Peers.missing("no clang in the Swift toolchain (/opt/swift/usr/bin/clang)") }
        let executable = try link("asancrash", """
        static void *work(void *a) { vk_null(); return a; }
        int main(void) {
            vk_start("advasancrash");
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL) != 0) { puts("create failed"); return 5; }
            pthread_join(t, NULL);
            return 0;
        }
        """, compiler: clang, flags: ["-fsanitize=address"])
        let without = try RuntimeProgram.run(executable, vaka: false, timeout: 60)
        XCTAssertTrue(String(decoding: without.result.stderr, as: UTF8.self).contains("AddressSanitizer: SEGV"),
                      without.result.stderrTail(600))
        let run = try RuntimeProgram.run(executable, timeout: 60)
        XCTAssertEqual(run.result.outcome, without.result.outcome, run.result.stderrTail(600))
        XCTAssertEqual(run.reports, ["advasancrash.crash"], run.result.stderrTail(600))
        XCTAssertEqual(reportValue(run.onlyReport, "signal"), "11 SIGSEGV")
        XCTAssertTrue(String(decoding: run.result.stderr, as: UTF8.self).contains("AddressSanitizer: SEGV"),
                      "ASan's handler still runs after the report: \(run.result.stderrTail(600))")
    }

    /// A fully static program: the mask interposers forward to glibc's own entries (there is no RTLD_NEXT), so
    /// a mask set and read back through pthread_sigmask/sigprocmask is exact; with Vaka started SIGSEGV stays
    /// unblocked (a thread blocks it, then faults) and the crash is reported; without Vaka the blocked fault kills
    /// the process the same way, without a report.
    func testFullyStaticProgramMasksWorkAndCrashIsReported() throws {
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        for lib in ["libunwind.a", "libelf.a", "libz.a", "liblzma.a"]
        where !FileManager.default.fileExists(atPath: "\(Self.libDir)/\(lib)") {
            throw XCTSkip("\(Self.libDir)/\(lib) missing: cannot link a static program")
        }
        let executable = try link("staticmask", """
        static void *work(void *a) {
            sigset_t set, cur; sigemptyset(&set); sigaddset(&set, SIGUSR1); sigaddset(&set, SIGSEGV);
            if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) { puts("sigprocmask failed"); exit(6); }
            if (pthread_sigmask(SIG_BLOCK, NULL, &cur) != 0) { puts("pthread_sigmask failed"); exit(7); }
            printf("usr1 %d segv %d\\n", sigismember(&cur, SIGUSR1), sigismember(&cur, SIGSEGV));
            fflush(stdout);
            vk_null();
            return a;
        }
        int main(void) {
            vk_start("advstaticmask");
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL) != 0) { puts("create failed"); return 5; }
            pthread_join(t, NULL);
            return 0;
        }
        """, compiler: cc, flags: ["-static"], libraries: ["-lpthread"])
        let without = try RuntimeProgram.run(executable, vaka: false, timeout: 30)
        XCTAssertEqual(without.result.outcome, "signal 11 (SIGSEGV)", without.result.stderrTail())
        XCTAssertEqual(String(decoding: without.result.stdout, as: UTF8.self), "usr1 1 segv 1\n")
        XCTAssertEqual(without.reports, [])
        let run = try RuntimeProgram.run(executable, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self), "usr1 1 segv 0\n")
        XCTAssertEqual(run.reports, ["advstaticmask.crash"])
        XCTAssertEqual(reportValue(run.onlyReport, "signal"), "11 SIGSEGV")
    }
}
