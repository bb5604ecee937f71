import Foundation
import XCTest
import VakaTestSupport

/// The runtime's `pthread_create` interposer in programs built with AddressSanitizer or ThreadSanitizer (a static
/// sanitizer runtime linked into the executable) or linked fully static: such programs still create and join
/// their threads, with Vaka started or not. ``SanitizerStaticProgramTests`` checks the mask interposers there.
/// Each test is a small C program compiled against the runtime sources (``RuntimeProgram``), run with Vaka
/// and, where the comparison matters, without it (`$VK_NOVAKA`). The rule checked: one report where the docs
/// promise one, the same termination as without Vaka, no hang, and the app never dies because of Vaka.
final class InterposerCompatibilityTests: XCTestCase {
    /// A program built with AddressSanitizer (`swift build --sanitize=address` links clang's static ASan
    /// runtime into the executable, like this clang does) and the crash runtime: the runtime's strong
    /// `pthread_create` replaces ASan's interceptor (a weak definition), so ASan never learns about the thread
    /// and aborts in `pthread_join` ("Joining already joined thread") — even when Vaka is never started.
    /// Without the runtime the same program exits 0.
    func testAddressSanitizerProgramCanJoinItsThreads() throws {
        let clang = ["/opt/swift/usr/bin/clang"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let clang else { throw Peers.missing("no clang in the Swift toolchain (/opt/swift/usr/bin/clang)") }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("adv-asan")
        let source = dir.appendingPathComponent("asan.c")
        try Data((RuntimeProgram.prelude + """
        static void *work(void *a) { return a; }
        int main(void) {
            vk_start("advasan");
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL) != 0) { puts("create failed"); return 5; }
            pthread_join(t, NULL);
            puts("joined");
            return 0;
        }
        """).utf8).write(to: source)
        let executable = dir.appendingPathComponent("asan")
        let link = try runChild(URL(fileURLWithPath: clang),
                                ["-fsanitize=address", "-g", "-O0", "-I",
                                 Paths.repositoryRoot.appendingPathComponent("include").path, source.path,
                                 library.path, "-lpthread", "-ldl", "-o", executable.path],
                                label: "clang-asan", outputDirectory: dir, timeout: 180)
        guard link.outcome == "exit 0" else { throw ChildError(description: "clang: \(link.stderrTail())") }
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(executable, vaka: vaka, timeout: 60)
            XCTAssertEqual(run.result.outcome, "exit 0", "vaka=\(vaka): \(run.result.stderrTail())")
        }
    }

    /// Variant: ThreadSanitizer with its runtime linked statically (`gcc -fsanitize=thread -static-libtsan`; Swift's
    /// `--sanitize=thread` links clang's static TSan runtime the same way). TSan never sees the thread start and
    /// the thread dies of a SEGV inside TSan — with Vaka started or not.
    func testThreadSanitizerProgramCanRunItsThreads() throws {
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("adv-tsan")
        let source = dir.appendingPathComponent("tsan.c")
        try Data((RuntimeProgram.prelude + """
        static int shared;
        static void *work(void *a) { shared++; return a; }
        int main(void) {
            vk_start("advtsan");
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL) != 0) { puts("create failed"); return 5; }
            pthread_join(t, NULL);
            printf("joined %d\\n", shared);
            return 0;
        }
        """).utf8).write(to: source)
        let executable = dir.appendingPathComponent("tsan")
        let link = try runChild(URL(fileURLWithPath: cc),
                                ["-fsanitize=thread", "-static-libtsan", "-g", "-O0", "-I",
                                 Paths.repositoryRoot.appendingPathComponent("include").path, source.path,
                                 library.path, "-lpthread", "-ldl", "-o", executable.path],
                                label: "cc-tsan", outputDirectory: dir, timeout: 180)
        guard link.outcome == "exit 0" else { throw XCTSkip("cannot link with a static TSan runtime: \(link.stderrTail())") }
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(executable, vaka: vaka, timeout: 60)
            XCTAssertEqual(run.result.outcome, "exit 0", "vaka=\(vaka): \(run.result.stderrTail(600))")
        }
    }

    /// A fully static program (`cc -static`, as ``StaticStdlibTests`` builds one): `dlsym(RTLD_NEXT,
    /// "pthread_create")` finds nothing there, so the interposer returns EAGAIN for every thread — with Vaka
    /// installed or not. The app cannot create a single thread because it links Vaka.
    func testFullyStaticProgramCanCreateThreads() throws {
        guard let cc = RuntimeProgram.cc else { throw Peers.missing("no C compiler (cc, gcc or clang)") }
        #if arch(x86_64)
        let libDir = "/usr/lib/x86_64-linux-gnu"
        #else
        let libDir = "/usr/lib/aarch64-linux-gnu"
        #endif
        for lib in ["libunwind.a", "libelf.a", "libz.a", "liblzma.a"]
        where !FileManager.default.fileExists(atPath: "\(libDir)/\(lib)") {
            throw XCTSkip("\(libDir)/\(lib) missing: cannot link a static program")
        }
        let library = try RuntimeProgram.library.get()
        let dir = Paths.freshDirectory("adv-static-threads")
        let source = dir.appendingPathComponent("st.c")
        try Data((RuntimeProgram.prelude + """
        static void *work(void *a) { return a; }
        int main(void) {
            vk_start("advstatic");
            pthread_t t;
            int rc = pthread_create(&t, NULL, work, NULL);
            printf("pthread_create %d\\n", rc);
            if (rc != 0) return 5;
            pthread_join(t, NULL);
            return 0;
        }
        """).utf8).write(to: source)
        let executable = dir.appendingPathComponent("st")
        let link = try runChild(URL(fileURLWithPath: cc),
                                ["-static", "-O0", "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                 source.path, library.path, "-lpthread",
                                 "-o", executable.path],
                                label: "cc-static", outputDirectory: dir, timeout: 120)
        guard link.outcome == "exit 0" else { throw ChildError(description: "cc -static: \(link.stderrTail())") }
        for vaka in [false, true] {
            let run = try RuntimeProgram.run(executable, vaka: vaka, timeout: 30)
            XCTAssertEqual(run.result.outcome, "exit 0",
                           "vaka=\(vaka): " + String(decoding: run.result.stdout, as: UTF8.self))
        }
    }
}
