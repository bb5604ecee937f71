import Foundation
import XCTest
import Vaka
import VakaSymbolication

/// Threads whose own unwinding falls back to a stack scan at the same time (code without CFI and without a frame
/// pointer: JIT code, hand-written assembly) each scan into a buffer of their own: every thread's frames are its
/// own callers, never another thread's (before, the threads shared one static buffer and a thread could show
/// another's caller, or lose its own).
final class ConcurrentStackScanTests: XCTestCase {
    static let workers = 32

    func testThreadsScanningAtOnceEachGetTheirOwnCallers() throws {
        let count = Self.workers
        let program = try RuntimeProgram.build("scan-at-once", """
        __asm__(".text\\n.globl nocfi_spin\\n.type nocfi_spin,@function\\nnocfi_spin:\\n xor %rbp, %rbp\\n1: pause\\n jmp 1b\\n.size nocfi_spin, .-nocfi_spin\\n");
        void nocfi_spin(void);
        #define WORKER(n) __attribute__((noinline)) void *worker_##n(void *a) { (void)a; volatile long pad[64]; pad[0] = n; nocfi_spin(); return (void *)pad[0]; }
        \((0..<count).map { "WORKER(\($0))" }.joined(separator: " "))
        static void *(*workers[])(void *) = { \((0..<count).map { "worker_\($0)" }.joined(separator: ", ")) };
        int main(void) {
            vk_start("scan");
            for (int i = 0; i < \(count); i++) {
                pthread_t t;
                pthread_create(&t, NULL, workers[i], NULL);
                char name[16];
                snprintf(name, sizeof name, "w%d", i);
                pthread_setname_np(t, name);
            }
            usleep(100000);
            vk_null();
        }
        """)
        var checked = 0
        for round in 0..<4 {
            let run = try RuntimeProgram.run(program, timeout: 60)
            XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
            let text = run.onlyReport
            guard text.hasSuffix("\nend\n") else { return XCTFail("round \(round): \(text)") }
            let report = try CrashReport(data: Data(text.utf8))
            let event = FatalEventBuilder(symbolicator: Symbolicator(systemDebugDirectory: nil)).event(from: report)
            for thread in event.threads?.values ?? [] {
                guard let name = thread.name, name.hasPrefix("w"), let index = Int(name.dropFirst()) else { continue }
                let functions = (thread.stacktrace?.frames ?? []).compactMap(\.function)
                // Only the threads already spinning (a starved one may still be starting): their PC is nocfi_spin.
                guard functions.last == "nocfi_spin" else { continue }
                // Nor one that was still scanning at the round's deadline (32 spinning threads on a loaded machine):
                // the deadline is guaranteed, not that every thread finishes by it, so such a thread honestly has
                // only the frames it had (its PC) and says so in its state.
                if thread.state?.contains("before the deadline") == true { continue }
                checked += 1
                let workers = Set(functions.filter { $0.hasPrefix("worker_") })
                XCTAssertEqual(workers, ["worker_\(index)"], "round \(round), \(name): \(functions)")
            }
        }
        XCTAssertGreaterThan(checked, Self.workers, "too few threads were spinning to check")
    }
}
