import Foundation
import Synchronization
import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// A 32-hex event id derived from `n` (deterministic, so tests can look it up).
func eventID(_ n: Int) -> String { String(format: "%032x", n + 0xabc000) }

/// An envelope with one small event (`logentry` message "event n").
func eventEnvelope(_ n: Int, extra: [EnvelopeItem] = []) -> Envelope {
    let json = #"{"event_id":"\#(eventID(n))","platform":"native","level":"info","logentry":{"formatted":"event \#(n)"}}"#
    return Envelope.event(id: eventID(n), payload: Data(json.utf8), extraItems: extra)
}

/// An envelope with one session update.
func sessionEnvelope(_ n: Int) -> Envelope {
    let json = #"{"sid":"\#(eventID(n))","status":"ok","seq":\#(n),"attrs":{"release":"t@1"}}"#
    return Envelope(header: .init(), items: [.session(Data(json.utf8))])
}

/// The envelope a test server received (gunzipped and parsed).
func receivedEnvelope(_ r: TestHTTPServer.Request, file: StaticString = #filePath, line: UInt = #line) -> Envelope? {
    do {
        return try Envelope(data: try Gzip.decompress(r.body))
    } catch {
        XCTFail("request body is not a gzip envelope: \(error)", file: file, line: line)
        return nil
    }
}

/// The event ids (envelope header) of the received requests, in order.
func receivedEventIDs(_ server: TestHTTPServer) -> [String?] {
    server.requests.map { receivedEnvelope($0)?.header.eventID }
}

/// Names of the batch files in `<storage>/pending` (sorted).
func batchFiles(_ storage: URL) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("pending").path)) ?? [])
        .filter { $0.hasSuffix(".batch") }.sorted()
}

/// A logger that collects lines (and checks that the key never appears).
final class LogSink: Sendable {
    private let collected = Mutex<[String]>([])
    var lines: [String] { collected.withLock { $0 } }
    func callAsFunction(_ s: String) { collected.withLock { $0.append(s) } }
    var sink: @Sendable (String) -> Void { { [self] in self($0) } }
}

/// Runs a script and returns its exit status and stdout. Uses posix_spawn + waitpid rather than
/// Foundation's `Process`, whose exit monitoring never fires when the script leaves a server running
/// (the server inherits Process's internal descriptors); stdout goes through a temporary file for the
/// same reason.
func runTool(_ path: String, _ args: [String]) -> (Int32, String) {
    let out = NSTemporaryDirectory() + "vaka-tool-out-\(UUID().uuidString)"
    defer { unlink(out) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    let argv: [UnsafeMutablePointer<CChar>?] = ([path] + args).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var pid: pid_t = 0
    guard posix_spawn(&pid, path, &actions, nil, argv, environ) == 0 else { return (-1, "") }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0, errno == EINTR {}
    let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
    return (code, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "")
}

/// Relay's StoreNormalizer (scripts/relay-validate.py run by ``Peers/relayPython()``) on each event, written
/// to `scratch`: the problems, empty when every event is clean.
/// - Throws: ``Peers/missing(_:)`` without Relay (a skip, or a failure with `VAKA_REQUIRE_PEERS=1`).
func relayProblems(_ events: [Data], scratch: URL) throws -> [String] {
    let python = try Peers.relayPython()
    let files = events.enumerated().map { i, data -> String in
        let path = scratch.appendingPathComponent("event-\(i).json").path
        _ = FileManager.default.createFile(atPath: path, contents: data)
        return path
    }
    let script = Paths.repositoryRoot.appendingPathComponent("scripts/relay-validate.py").path
    let (status, output) = runTool(python, [script] + files)
    let problems = output.split(separator: "\n").filter { !$0.hasSuffix(": ok") }.map(String.init)
    return status == 0 ? problems : problems + ["relay-validate exit \(status)"]
}

/// Base of the test classes that run a real ``Delivery``/``Uploader`` against one loopback ``TestHTTPServer``:
/// a fresh server and debug log per test, scratch directories, and every ``Delivery`` a test appends to
/// `deliveries` closed at the end.
class LoopbackServerTestCase: XCTestCase {
    let dirs = ScratchDirs()
    var server: TestHTTPServer!
    var log: LogSink!
    var deliveries: [Delivery] = []

    override func setUpWithError() throws {
        server = try TestHTTPServer()
        log = LogSink()
    }

    override func tearDown() {
        for d in deliveries { d.close(timeout: 0) }
        server.stop()
        dirs.removeAll()
    }
}

