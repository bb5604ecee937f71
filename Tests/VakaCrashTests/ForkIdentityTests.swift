import Foundation
import XCTest
import Vaka
import VakaSymbolication

/// Identity on real reports of the C runtime: a `fork()`ed child's crash gets its own event id, and the
/// C start-up glue (`_start`) in the frames of a real crash is not `in_app`.
final class ForkIdentityTests: XCTestCase {
    /// A parent (run id a UUID) forks two children that crash, then aborts: three reports, three event ids;
    /// converting a report again gives the same id; the parent keeps the run id as its event id.
    func testParentAndForkChildrenGetDistinctStableEventIDs() throws {
        let runID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
        let program = try RuntimeProgram.build("forkids", """
        #include <sys/wait.h>
        int main(void) {
            vk_start("\(runID)");
            for (int i = 0; i < 2; i++) {
                pid_t c = fork();
                if (c == 0) vk_null();
                int st; waitpid(c, &st, 0);
            }
            abort();
        }
        """, extraFlags: ["-g"])
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 6 (SIGABRT)", run.result.stderrTail())
        XCTAssertEqual(run.reports.count, 3, "\(run.reports)")
        var ids: [String: String] = [:]
        for name in run.reports {
            let path = run.directory.appendingPathComponent(name).path
            let report = try CrashReport(contentsOf: path)
            XCTAssertEqual(report.isForkChild, name != "\(runID).crash", name)
            let event = FatalEventBuilder(symbolicator: nil).event(from: report)
            XCTAssertEqual(event.eventID.count, 32)
            XCTAssertEqual(FatalEventBuilder(symbolicator: nil).event(from: try CrashReport(contentsOf: path)).eventID,
                           event.eventID, "\(name): a re-conversion keeps the id")
            // The same bytes with the file name given (what `vaka symbolicate` does) give the same id.
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            XCTAssertEqual(FatalEventBuilder(symbolicator: nil).event(from: try CrashReport(data: data, fileName: name)).eventID,
                           event.eventID, name)
            XCTAssertEqual(event.extra?["fork_child"], report.isForkChild ? .bool(true) : nil, name)
            ids[name] = event.eventID
        }
        XCTAssertEqual(Set(ids.values).count, 3, "\(ids)")
        XCTAssertEqual(ids["\(runID).crash"], runID.replacingOccurrences(of: "-", with: ""))
    }

    /// The parent's SIGABRT report of a real program: the oldest frames are `_start` (C start-up glue in the
    /// executable) and glibc's; `main` and the crashing function are the app's.
    func testStartupGlueInARealReportIsNotInApp() throws {
        let program = try RuntimeProgram.build("inapp", """
        __attribute__((noinline)) static void crash_here(void) { vk_null(); }
        int main(void) { vk_start("inapp"); crash_here(); return 0; }
        """, extraFlags: ["-g", "-fno-omit-frame-pointer"])
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.reports, ["inapp.crash"])
        let report = try CrashReport(contentsOf: run.directory.appendingPathComponent("inapp.crash").path)
        let event = FatalEventBuilder(symbolicator: Symbolicator(systemDebugDirectory: nil)).event(from: report)
        let frames = try XCTUnwrap(event.exception?.values.first?.stacktrace?.frames)
        let byFunction = Dictionary(frames.compactMap { f in f.function.map { ($0, f) } }, uniquingKeysWith: { a, _ in a })
        let start = try XCTUnwrap(byFunction["_start"], "no _start frame in \(frames.map { $0.function ?? "?" })")
        XCTAssertEqual(start.package, program.path, "_start lies in the executable")
        XCTAssertEqual(start.inApp, false, "_start is C start-up glue")
        XCTAssertEqual(byFunction["main"]?.inApp, true)
        XCTAssertEqual(byFunction["crash_here"]?.inApp, true)
        XCTAssertEqual(byFunction["vk_null"]?.inApp, true)
        // The same rule when an event made without names is symbolicated later (`vaka symbolicate EVENT.json`).
        let bare = FatalEventBuilder(symbolicator: nil).event(from: report)
        XCTAssertEqual(bare.exception?.values.first?.stacktrace?.frames.first?.inApp, true,
                       "without names the executable's _start frame is in-app by its image")
        let json = try JSONDecoder().decode(JSONValue.self, from: try bare.jsonData())
        let (resolved, _) = EventSymbolicator(symbolicator: Symbolicator(systemDebugDirectory: nil)).symbolicate(json)
        let resolvedFrames = try XCTUnwrap(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(resolved)) as? [String: Any])
        let list = (((resolvedFrames["exception"] as? [String: Any])?["values"] as? [[String: Any]])?.first?["stacktrace"]
                    as? [String: Any])?["frames"] as? [[String: Any]] ?? []
        let resolvedStart = try XCTUnwrap(list.first { $0["function"] as? String == "_start" }, "\(list)")
        XCTAssertEqual(resolvedStart["in_app"] as? Bool, false)
        XCTAssertEqual(list.first { $0["function"] as? String == "main" }?["in_app"] as? Bool, true)
    }
}
