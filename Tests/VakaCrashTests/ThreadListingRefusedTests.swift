import Foundation
import XCTest
import Vaka
import VakaTestSupport

/// A process that cannot list its threads at the crash (`getdents64` refused by a seccomp filter installed after
/// `start`, as a container policy may): the report is still complete, with the crashed thread, and says the other
/// threads are unknown instead of claiming the process had one thread (docs/report-format.md, `threads`). And one
/// that crashes with every descriptor in use still lists every thread (the directory is kept open from `start`).
final class ThreadListingRefusedTests: XCTestCase {
    func testCrashAtTheDescriptorLimitStillListsEveryThread() throws {
        let program = try RuntimeProgram.build("listing-emfile", """
        #include <fcntl.h>
        #include <sys/resource.h>
        static void *idle(void *a) { (void)a; for (;;) pause(); return NULL; }
        int main(void) {
            vk_start("emfile");
            pthread_t t;
            for (int i = 0; i < 3; i++) pthread_create(&t, NULL, idle, NULL);
            usleep(20000);
            struct rlimit rl = { 64, 64 };
            setrlimit(RLIMIT_NOFILE, &rl);
            while (open("/dev/null", O_RDONLY) >= 0) {}
            vk_null();
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let text = run.onlyReport
        XCTAssertTrue(text.hasSuffix("\nend\n"), text)
        XCTAssertEqual(reportValue(text, "threads")?.split(separator: " ").prefix(2), ["4", "4"], text)
        let threads = text.split(separator: "\n").filter { $0.hasPrefix("thread ") }
        XCTAssertEqual(threads.filter { $0.contains(" ok ") }.count, 3, text)
    }

    func testRefusedListingGivesTheCrashedThreadAndSaysTheOthersAreUnknown() throws {
        let program = try RuntimeProgram.build("listing-refused", """
        static void *idle(void *a) { (void)a; for (;;) pause(); return NULL; }
        int main(void) {
            vk_start("listing");
            pthread_t t;
            for (int i = 0; i < 2; i++) pthread_create(&t, NULL, idle, NULL);
            usleep(20000);
            if (vk_seccomp_one(SYS_getdents64, SECCOMP_RET_ERRNO | EPERM) != 0) { perror("seccomp"); return 98; }
            vk_null();
            return 0;
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        let text = run.onlyReport
        XCTAssertTrue(text.hasSuffix("\nend\n"), text)
        let threads = try XCTUnwrap(reportValue(text, "threads"), text).split(separator: " ")
        XCTAssertEqual(threads.prefix(2), ["0", "1"], text)
        XCTAssertEqual(text.split(separator: "\n").filter { $0.hasPrefix("thread ") }.count, 1, text)
        let event = FatalEventBuilder(symbolicator: nil).event(from: try CrashReport(data: Data(text.utf8)))
        XCTAssertEqual(event.threads?.values.count, 1)
        XCTAssertEqual(event.threads?.values.first?.crashed, true)
        guard case .string(let note)? = event.extra?["threads_unknown"] else {
            return XCTFail("no threads_unknown in \(String(describing: event.extra))")
        }
        XCTAssertTrue(note.contains("could not be listed"), note)
    }
}
