import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaSymbolication

/// Identity and accuracy of what the crash join writes in outbox mode: fork children's
/// event ids and scopes, session error counts; and the in_app rule for handled-error stacks.
final class IdentityAccuracyTests: XCTestCase {
    private struct Written {
        var events: [[String: Any]]
        var sessions: [[String: Any]]
        var headerEventID: String?
    }

    private func json(_ data: Data) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
    }

    /// The envelopes in `<storage>/outbox`, oldest first.
    private func outbox(_ storage: URL) throws -> [Written] {
        let box = Outbox(storageDirectory: storage)
        return try box.list().map { url in
            let envelope = try box.read(url)
            return Written(events: envelope.items.filter { $0.type.rawValue == "event" }.map { json($0.payload) },
                           sessions: envelope.items.filter { $0.type.rawValue == "session" }.map { json($0.payload) },
                           headerEventID: envelope.header.eventID)
        }
    }

    /// A finished run (no lock holder) with a scope whose session is `status` with `errors` handled errors.
    private func deadRun(_ storage: URL, _ runID: String, status: SessionUpdate.Status, errors: Int) throws -> String {
        let url = RunDirectory.root(storage).appendingPathComponent(runID)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        var session = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_700_000_000))
        _ = session.update(.ok, now: Date(timeIntervalSince1970: 1_700_000_001), release: "app@1", environment: "prod")
        session.errors = errors
        session.status = status
        let scope = RunScope(runID: runID, release: "app@1", environment: "prod", tags: ["flavor": "free"],
                             userID: "u-1", session: session)
        try JSONEncoder().encode(scope).write(to: url.appendingPathComponent("scope.json"))
        return session.sid
    }

    private func writeReport(_ storage: URL, runID: String, pid: Int, fileName: String, signal: String = "11 SIGSEGV") throws {
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        let text = "VAKA-CRASH 1\nrun_id \(runID)\npid \(pid)\ntid \(pid)\ntimestamp_ns 1700000005000000000\n" +
            "arch x86_64\nsignal \(signal)\nframe 0x1000 context\nend\n"
        try Data(text.utf8).write(to: crashes.appendingPathComponent(fileName))
    }

    private func join(_ storage: URL) throws {
        let client = try Client(options: Vaka.Options(sessionTracking: true, storageDirectory: storage), storage: storage,
                                runID: "CURRENT-\(UUID().uuidString)", dsn: nil, log: nil)
        client.joinPreviousRuns()
    }

    /// Parent and fork child of one run both crashed. Two fatal events with distinct ids;
    /// both carry the parent run's scope; only the parent's carries the `crashed` session update, and its
    /// `errors` counts the fatal event (2 handled + 1).
    func testForkChildAndParentCrashesJoinWithDistinctIDsAndOneCrashedSession() throws {
        let storage = try ScratchDirs.directory(for: self)
        let runID = "5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B"
        let sid = try deadRun(storage, runID, status: .ok, errors: 2)
        try writeReport(storage, runID: runID, pid: 100, fileName: "\(runID).crash", signal: "6 SIGABRT")
        try writeReport(storage, runID: runID, pid: 101, fileName: "\(runID)-101.crash")
        try join(storage)
        let written = try outbox(storage)
        let fatal = written.filter { !$0.events.isEmpty }
        XCTAssertEqual(fatal.count, 2)
        let parent = try XCTUnwrap(fatal.first { ($0.events[0]["extra"] as? [String: Any])?["fork_child"] == nil })
        let child = try XCTUnwrap(fatal.first { ($0.events[0]["extra"] as? [String: Any])?["fork_child"] as? Bool == true })
        XCTAssertEqual(parent.events[0]["event_id"] as? String, "5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b")
        XCTAssertEqual(child.events[0]["event_id"] as? String, FatalEventBuilder.eventID(forRunID: runID, forkChildPID: 101))
        XCTAssertNotEqual(child.events[0]["event_id"] as? String, parent.events[0]["event_id"] as? String)
        XCTAssertEqual(child.headerEventID, child.events[0]["event_id"] as? String)
        for envelope in [parent, child] {
            XCTAssertEqual(envelope.events[0]["release"] as? String, "app@1", "the parent run's scope")
            XCTAssertEqual((envelope.events[0]["tags"] as? [String: Any])?["flavor"] as? String, "free")
        }
        XCTAssertEqual(child.sessions.count, 0, "the session is the parent's: a child's crash does not end it")
        XCTAssertEqual(parent.sessions.count, 1)
        XCTAssertEqual(parent.sessions.first?["sid"] as? String, sid)
        XCTAssertEqual(parent.sessions.first?["status"] as? String, "crashed")
        XCTAssertEqual(parent.sessions.first?["errors"] as? Int, 3, "2 handled errors + the fatal event")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("crashes").path), [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: RunDirectory.root(storage).appendingPathComponent(runID).path),
                       "the parent's crash consumed its run directory")
    }

    /// Variants: only a child crashed, the parent was killed (session still `ok`): the child's event has the
    /// parent's scope, the parent's session ends `abnormal` with its persisted handled-error count, not
    /// `crashed`. And a crashed run with no handled error: `errors` 1, never 0.
    func testForkChildOfAKilledParentAndCrashedSessionErrorCounts() throws {
        let storage = try ScratchDirs.directory(for: self)
        let killed = "run-killed"
        let killedSid = try deadRun(storage, killed, status: .ok, errors: 2)
        try writeReport(storage, runID: killed, pid: 7, fileName: "\(killed)-7.crash")
        try writeReport(storage, runID: killed, pid: 8, fileName: "\(killed)-8.crash")
        let clean = "run-clean"
        let cleanSid = try deadRun(storage, clean, status: .ok, errors: 0)
        try writeReport(storage, runID: clean, pid: 9, fileName: "\(clean).crash")
        try join(storage)
        let written = try outbox(storage)
        let childIDs = written.flatMap(\.events).filter { ($0["extra"] as? [String: Any])?["run_id"] as? String == killed }
            .compactMap { $0["event_id"] as? String }
        XCTAssertEqual(Set(childIDs), [FatalEventBuilder.eventID(forRunID: killed, forkChildPID: 7),
                                      FatalEventBuilder.eventID(forRunID: killed, forkChildPID: 8)])
        let sessions = written.flatMap(\.sessions)
        let killedUpdates = sessions.filter { $0["sid"] as? String == killedSid }
        XCTAssertEqual(killedUpdates.map { $0["status"] as? String }, ["abnormal"])
        XCTAssertEqual(killedUpdates.first?["errors"] as? Int, 2)
        let cleanUpdates = sessions.filter { $0["sid"] as? String == cleanSid }
        XCTAssertEqual(cleanUpdates.map { $0["status"] as? String }, ["crashed"])
        XCTAssertEqual(cleanUpdates.first?["errors"] as? Int, 1, "a crashed session has at least one error")
    }

    /// The count on every final status: `exited` and `abnormal` carry the handled errors, `crashed` one more;
    /// a second `crashed` update does not count the crash twice.
    func testSessionErrorCountsPerFinalStatus() {
        for (status, expected) in [(SessionUpdate.Status.exited, 2), (.abnormal, 2), (.crashed, 3), (.ok, 2)] {
            var session = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_700_000_000))
            session.errors = 2
            let update = session.update(status, now: Date(timeIntervalSince1970: 1_700_000_010), release: "r", environment: nil)
            XCTAssertEqual(update.errors, expected, "\(status)")
            if status == .crashed {
                XCTAssertEqual(session.update(.crashed, now: Date(), release: "r", environment: nil).errors, 3)
            }
        }
    }

    /// Event ids: the parent keeps the run id, a child's is hashed from run id and pid, stable and distinct;
    /// a run id that looks like "R-P" does not collide with the child P of run R.
    func testForkChildEventIDs() throws {
        let uuid = "5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B"
        let child = FatalEventBuilder.eventID(forRunID: uuid, forkChildPID: 42)
        XCTAssertEqual(child, FatalEventBuilder.eventID(forRunID: uuid, forkChildPID: 42))
        XCTAssertNotEqual(child, FatalEventBuilder.eventID(forRunID: uuid))
        XCTAssertNotEqual(child, FatalEventBuilder.eventID(forRunID: uuid, forkChildPID: 43))
        XCTAssertNotEqual(FatalEventBuilder.eventID(forRunID: "r", forkChildPID: 5), FatalEventBuilder.eventID(forRunID: "r-5"))
        XCTAssertEqual(child.count, 32)
        // The reader decides from the file name: only "<run_id>-<pid>.crash" with matching lines is a child.
        let text = Data("VAKA-CRASH 1\nrun_id r\npid 5\nsignal 11 SIGSEGV\nend\n".utf8)
        XCTAssertTrue(try CrashReport(data: text, fileName: "r-5.crash").isForkChild)
        XCTAssertFalse(try CrashReport(data: text, fileName: "r.crash").isForkChild)
        XCTAssertFalse(try CrashReport(data: text, fileName: "r-6.crash").isForkChild, "pid line disagrees")
        XCTAssertFalse(try CrashReport(data: text, fileName: "copy.crash").isForkChild)
        XCTAssertFalse(try CrashReport(data: text).isForkChild)
        let dir = try ScratchDirs.directory(for: self)
        try text.write(to: dir.appendingPathComponent("r-5.crash"))
        XCTAssertTrue(try CrashReport(contentsOf: dir.appendingPathComponent("r-5.crash").path).isForkChild)
    }

    // MARK: - in_app

    /// The rule itself: start-up glue and statically linked runtime symbols are not in-app; app symbols and
    /// Swift's `main` are.
    func testLinkedSupportCodeRule() {
        for symbol in ["_start", "_init", "_fini", "__libc_csu_init", "frame_dummy", "__do_global_dtors_aux",
                       "register_tm_clones", "deregister_tm_clones", "__libc_start_main", "swift_retain",
                       "$ss17_assertionFailure_4file4line5flagss5NeverOs12StaticStringV_A2HSus6UInt32VtF",
                       "$s10Foundation4DataV5countSivg", "_ZN5swift9fatalErrorEjPKcz", "_ZNSt6vectorIiSaIiEE9push_backERKi",
                       "$s4Vaka6ClientC7capture5error5stackys5Error_p_AA10StacktraceVSg10stacktrace_SayAA10DebugImageVG6imagestAJtF",
                       "vaka_sig_handler", "vaka_crash_capture_frames", "vaka_w_flush", "vaka_rt_safe_reader_init",
                       "vaka_rt_executable_path", "vaka_crash_copy_images", "vaka_sig_image_from_phdrs"] {
            XCTAssertTrue(FatalEventBuilder.isLinkedSupportCode(symbol: symbol), symbol)
        }
        for symbol in ["main", "$s4main8crashAppyyF", "$s12vaka_crashme6run_xyyF", "vaka_test_marker_function",
                       "start", "_startup_app", "$sSS4mainE5shoutSSyF", "crashme_null_deref", "vaka_crashme_main",
                       "$s8VakaDemo3runyyF"] {
            XCTAssertFalse(FatalEventBuilder.isLinkedSupportCode(symbol: symbol), symbol)
        }
    }

    /// Every function of the C crash runtime named `vaka_…` (global or file-local, as `nm` lists the
    /// VakaCrash objects of this build) is support code: a new prefix in the runtime must reach the rule.
    func testEveryCrashRuntimeFunctionIsSupportCode() throws {
        let objects = URL(fileURLWithPath: TestSupport.selfExecutable).deletingLastPathComponent()
            .appendingPathComponent("VakaCrash.build")
        let names = try FileManager.default.contentsOfDirectory(atPath: objects.path).filter { $0.hasSuffix(".o") }
        XCTAssertGreaterThan(names.count, 10, "VakaCrash objects beside the test executable: \(objects.path)")
        let nm = try Peers.tool("nm", install: "binutils: scripts/bootstrap")
        var functions = Set<String>()
        for name in names {
            let result = try runProcess(nm, ["--defined-only", objects.appendingPathComponent(name).path])
            for line in result.stdoutText.split(separator: "\n") {
                let fields = line.split(separator: " ")
                guard fields.count == 3, fields[1] == "T" || fields[1] == "t", fields[2].hasPrefix("vaka_") else { continue }
                functions.insert(String(fields[2]))
            }
        }
        XCTAssertTrue(functions.isSuperset(of: ["vaka_sig_handler", "vaka_rt_safe_reader_init", "vaka_crash_copy_images"]),
                      "\(functions.sorted())")
        for function in functions.sorted() {
            XCTAssertTrue(FatalEventBuilder.isLinkedSupportCode(symbol: function), function)
        }
    }

    /// Handled-error stacks (``StackCapture``) and fatal events use the same rule: a frame at this test
    /// executable's own `_start` is not in-app, one in its own code is.
    func testHandledStackFramesAtStartAreNotInApp() throws {
        let exe = TestSupport.selfExecutable
        let file = try ElfFile(path: exe)
        let marker = markerFunctionAddress()
        let image = try XCTUnwrap(try TestSupport.image(containing: marker))
        // _start's address in this process: find its vaddr from the symbol table through a lookup of every
        // address of .text would be slow; _start is the ELF entry point.
        let entry = try XCTUnwrap(elfEntry(exe))
        let startAddress = file.runtimeAddress(ofVaddr: entry, imageBase: image.base)
        XCTAssertEqual(file.symbol(containing: entry)?.name, "_start")
        let capture = StackCapture(arch: "x86_64")
        let (stacktrace, _) = capture.symbolicate([marker, startAddress + 4])
        let frames = try XCTUnwrap(stacktrace?.frames)
        XCTAssertEqual(frames.map(\.function), ["_start", "vaka_test_marker_function"])
        XCTAssertEqual(frames.map(\.inApp), [false, true])
    }

    /// `e_entry` of an ELF64 file.
    private func elfEntry(_ path: String) throws -> UInt64? {
        let data = try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
        guard data.count >= 32 else { return nil }
        return data[24..<32].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
    }
}
