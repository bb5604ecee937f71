import Foundation
import XCTest
import VakaTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Helpers for the SDK tests: the built harness, child processes, outbox envelopes, and the real peers
// (sentry_sdk's envelope parser, Relay's normalizer, Bugsink) named by scripts/test's environment.

/// How a child ended.
struct Child {
    var status: Int32
    var signaled: Bool
    var stdout: String
    var stderr: String
    var outcome: String { signaled ? "signal \(status)" : "exit \(status)" }
}

/// A started child process (for the kill test: killed from outside).
final class RunningChild {
    let process = Process()
    private let done = DispatchSemaphore(value: 0)
    let outURL: URL, errURL: URL

    init(_ executable: URL, _ arguments: [String], environment: [String: String] = [:], logDirectory: URL) throws {
        let id = UUID().uuidString.prefix(8)
        outURL = logDirectory.appendingPathComponent("child-\(id).out")
        errURL = logDirectory.appendingPathComponent("child-\(id).err")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        process.executableURL = executable
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        env["SWIFT_BACKTRACE"] = "enable=no"
        // The SDK reads these when the code does not give the values: a test's harness runs only what it sets.
        for key in ["SENTRY_DSN", "SENTRY_RELEASE", "SENTRY_ENVIRONMENT"] where environment[key] == nil { env[key] = nil }
        process.environment = env
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: outURL)
        process.standardError = try FileHandle(forWritingTo: errURL)
        process.terminationHandler = { [done] _ in done.signal() }
        try process.run()
    }

    /// Waits at most `timeout` s; SIGKILLs the child when it is still running. `nil` when it had to be killed.
    @discardableResult
    func wait(timeout: TimeInterval) -> Child? {
        var killed = false
        if done.wait(timeout: .now() + timeout) == .timedOut {
            kill(process.processIdentifier, SIGKILL)
            done.wait()
            killed = true
        }
        process.waitUntilExit()
        let child = Child(status: process.terminationStatus, signaled: process.terminationReason == .uncaughtSignal,
                          stdout: (try? String(contentsOf: outURL, encoding: .utf8)) ?? "",
                          stderr: (try? String(contentsOf: errURL, encoding: .utf8)) ?? "")
        return killed ? nil : child
    }

    func sigkill() { kill(process.processIdentifier, SIGKILL) }
}

/// Runs the harness and waits (at most `timeout` s).
func runHarness(_ arguments: [String], environment: [String: String] = [:], logDirectory: URL,
                timeout: TimeInterval = 60, file: StaticString = #filePath, line: UInt = #line) throws -> Child {
    let child = try RunningChild(Paths.harness, arguments, environment: environment, logDirectory: logDirectory)
    guard let result = child.wait(timeout: timeout) else {
        XCTFail("vaka-crashme \(arguments.joined(separator: " ")) ran longer than \(timeout) s (killed)", file: file, line: line)
        return Child(status: -1, signaled: true, stdout: "", stderr: "")
    }
    return result
}

/// The kill tests' child: starts the harness with `arguments`, waits (at most 60 s) until its progress file
/// `progress` is not empty, sleeps a random 0...`maxDelay` µs and SIGKILLs it. How it ended (`signaled`: killed;
/// exit 0: it finished first), or `nil` when it hung.
func runHarnessKilledAtRandomMoment(_ arguments: [String], progress: URL, maxDelay: UInt32, logDirectory: URL,
                                    using generator: inout some RandomNumberGenerator) throws -> Child? {
    let child = try RunningChild(Paths.harness, arguments, logDirectory: logDirectory)
    let deadline = Date().addingTimeInterval(60)
    while ((try? Data(contentsOf: progress))?.isEmpty ?? true) && Date() < deadline { usleep(1000) }
    usleep(UInt32.random(in: 0...maxDelay, using: &generator))
    child.sigkill()
    return child.wait(timeout: 60)
}

/// The number `i` of a text `prefix + "i"` (e.g. `crumb 12` after `crumb `), or `nil`.
func numbered(_ text: String?, after prefix: String) -> Int? {
    guard let text, text.hasPrefix(prefix) else { return nil }
    return Int(text.dropFirst(prefix.count))
}

/// Checks `numbers` — the numbered records (`0, 1, 2...`) a SIGKILLed run and the next launch delivered, in
/// delivery order — against `recorded`, how many calls the killed child saw return: every number before it is
/// there (the newest is `recorded - 1`, or `recorded` when the call in progress at the kill had appended its
/// record), in order, with no gap; the sequence may restart once and never jump ahead (the mover's batch in
/// flight at the kill, written again by the next launch). Returns how many were delivered twice.
@discardableResult
func assertEveryNumberBeforeTheKill(_ numbers: [Int], recorded: Int, _ label: String,
                                    file: StaticString = #filePath, line: UInt = #line) -> Int {
    let distinct = Set(numbers)
    let top = numbers.max() ?? -1
    XCTAssertTrue(top == recorded - 1 || top == recorded, "\(label): newest \(top), the child had recorded \(recorded)", file: file, line: line)
    XCTAssertEqual(distinct, Set(0..<(top + 1)), "\(label): every one before the kill, none missing", file: file, line: line)
    var restarts = 0
    for (a, b) in zip(numbers, numbers.dropFirst()) where b != a + 1 {
        restarts += 1
        XCTAssertLessThanOrEqual(b, a, "\(label): a gap between \(a) and \(b)", file: file, line: line)
    }
    XCTAssertLessThanOrEqual(restarts, 1, "\(label): \(numbers)", file: file, line: line)
    return numbers.count - distinct.count
}

/// The envelopes in `<storage>/outbox`, oldest first, as (file, parsed JSON items).
struct OutboxEnvelope {
    var file: URL
    var header: [String: Any]
    var items: [(type: String, payload: [String: Any])]
    /// Every item's header and payload bytes, in order (attachments' payloads are not JSON).
    var raw: [(header: [String: Any], payload: Data)] = []
    var events: [[String: Any]] { items.filter { $0.type == "event" }.map(\.payload) }
    var attachments: [(header: [String: Any], payload: Data)] { raw.filter { $0.header["type"] as? String == "attachment" } }
    var sessions: [[String: Any]] { items.filter { $0.type == "session" }.map(\.payload) }
}

/// Reads the outbox with an independent reader (header line, then item header + `length` bytes).
func readOutbox(_ storage: URL) throws -> [OutboxEnvelope] {
    let dir = storage.appendingPathComponent("outbox")
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.hasSuffix(".envelope") }.sorted()
    return try names.map { name in
        let url = dir.appendingPathComponent(name)
        return try parseEnvelope(Data(contentsOf: url), file: url)
    }
}

struct EnvelopeParseError: Error, CustomStringConvertible { var description: String }

func parseEnvelope(_ data: Data, file: URL) throws -> OutboxEnvelope {
    let bytes = [UInt8](data)
    var pos = 0
    func line() -> Data {
        let start = pos
        while pos < bytes.count, bytes[pos] != 0x0A { pos += 1 }
        let d = Data(bytes[start..<pos])
        if pos < bytes.count { pos += 1 }
        return d
    }
    guard let header = try JSONSerialization.jsonObject(with: line()) as? [String: Any] else {
        throw EnvelopeParseError(description: "\(file.lastPathComponent): header is not an object")
    }
    var items: [(String, [String: Any])] = []
    var raw: [(header: [String: Any], payload: Data)] = []
    while pos < bytes.count {
        guard let ih = try JSONSerialization.jsonObject(with: line()) as? [String: Any],
              let type = ih["type"] as? String, let length = ih["length"] as? Int, pos + length <= bytes.count else {
            throw EnvelopeParseError(description: "\(file.lastPathComponent): bad item header")
        }
        let payload = Data(bytes[pos..<(pos + length)])
        pos += length
        if pos < bytes.count, bytes[pos] == 0x0A { pos += 1 }
        raw.append((ih, payload))
        let json = type == "attachment" ? nil : try JSONSerialization.jsonObject(with: payload) as? [String: Any]
        items.append((type, json ?? [:]))
    }
    return OutboxEnvelope(file: file, header: header, items: items.map { (type: $0.0, payload: $0.1) }, raw: raw)
}

/// Runs a tool, returning status and stdout+stderr.
func runTool(_ path: String, _ args: [String]) -> (Int32, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = args
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    do { try process.run() } catch { return (-1, "\(error)") }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// Checks every file with sentry_sdk's `Envelope.deserialize` and every event item with Relay's normalizer.
/// Returns the problems (empty = all good) and how many envelopes/events were checked.
func validateWithPeers(_ files: [URL], scratch: URL) throws -> (problems: [String], envelopes: Int, events: Int) {
    let sentryPython = try Peers.sentryPython()
    let relayPython = try Peers.relayPython()
    let list = scratch.appendingPathComponent("envelopes.txt")
    try files.map(\.path).joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
    let eventsDir = scratch.appendingPathComponent("events")
    try FileManager.default.createDirectory(at: eventsDir, withIntermediateDirectories: true)
    let script = """
        import json, os, sys, sysconfig
        from sentry_sdk.envelope import Envelope
        # Bugsink's own event schema (strict validation drops events that fail it), when this venv has Bugsink.
        schema_path = os.path.join(sysconfig.get_paths()["purelib"], "api", "event.schema.altered.json")
        validator = None
        if os.path.exists(schema_path):
            import jsonschema
            validator = jsonschema.Draft7Validator(json.load(open(schema_path)))
        def lengths(data):
            # The item lengths as written, walked in the raw bytes (sentry_sdk's get_bytes() re-serializes a
            # parsed JSON payload with ASCII escapes, so its length differs for non-ASCII text).
            pos = data.index(b"\\n") + 1; out = []
            while pos < len(data):
                end = data.find(b"\\n", pos)
                if end == pos: pos += 1; continue
                header = json.loads(data[pos:end if end >= 0 else len(data)])
                n = header.get("length"); pos = (end if end >= 0 else len(data)) + 1
                out.append((n, data[pos:pos + n] if n is not None else None)); pos += (n or 0)
                if pos < len(data) and data[pos:pos + 1] != b"\\n": out.append(("bad", None)); break
                pos += 1
            return out
        files = [l for l in open(sys.argv[1]).read().split("\\n") if l]
        out = sys.argv[2]; n = 0; events = 0
        for i, path in enumerate(files):
            data = open(path, "rb").read()
            env = Envelope.deserialize(data)
            if not env.items: print("PROBLEM %s: no items" % path); continue
            n += 1
            raw = lengths(data)
            if len(raw) != len(env.items) or any(r[0] == "bad" for r in raw): print("PROBLEM %s: item lengths do not frame the items" % path); continue
            for j, item in enumerate(env.items):
                if item.type not in ("event", "session", "log", "client_report", "attachment"): print("PROBLEM %s: item type %s" % (path, item.type))
                if item.type == "attachment":
                    if raw[j][1] != item.payload.get_bytes(): print("PROBLEM %s: item %d payload" % (path, j))
                    if not item.headers.get("filename"): print("PROBLEM %s: attachment %d without filename" % (path, j))
                    continue
                try:
                    payload = json.loads(item.payload.get_bytes())
                except ValueError:
                    print("PROBLEM %s: item %d is not JSON" % (path, j)); continue
                if json.loads(raw[j][1]) != payload: print("PROBLEM %s: item %d length" % (path, j))
                if item.type == "event":
                    if item.get_event() is None: print("PROBLEM %s: get_event() is None" % path)
                    if env.headers.get("event_id") != payload.get("event_id"): print("PROBLEM %s: header event_id differs" % path)
                    events += 1
                    if validator is not None:
                        for e in validator.iter_errors(payload):
                            best = jsonschema.exceptions.best_match([e])
                            print("PROBLEM %s: Bugsink schema: %s %s" % (path, best.json_path, best.message[-300:]))
                    json.dump(payload, open(os.path.join(out, "e%05d-%d.json" % (i, j)), "w"))
        print("CHECKED %d %d" % (n, events))
        """
    let (status, output) = runTool(sentryPython, ["-c", script, list.path, eventsDir.path])
    var problems = output.split(separator: "\n").filter { $0.hasPrefix("PROBLEM") }.map(String.init)
    if status != 0 { problems.append("sentry_sdk check failed (\(status)): \(output.suffix(2000))") }
    var envelopes = 0, events = 0
    if let checked = output.split(separator: "\n").first(where: { $0.hasPrefix("CHECKED") }) {
        let parts = checked.split(separator: " ")
        envelopes = Int(parts[1]) ?? 0
        events = Int(parts[2]) ?? 0
    }
    let eventFiles = ((try? FileManager.default.contentsOfDirectory(atPath: eventsDir.path)) ?? []).sorted()
        .map { eventsDir.appendingPathComponent($0).path }
    if !eventFiles.isEmpty {
        let (rs, ro) = runTool(relayPython, [Paths.repositoryRoot.appendingPathComponent("scripts/relay-validate.py").path] + eventFiles)
        if rs != 0 { problems.append("Relay: " + ro.split(separator: "\n").filter { !$0.hasSuffix(": ok") }.prefix(20).joined(separator: "\n")) }
    }
    return (problems, envelopes, events)
}

/// Bugsink from scripts/test's environment.
struct BugsinkPeer {
    var url: String, dsn: String, token: String, project: String

    static func fromEnvironment() throws -> BugsinkPeer {
        let server = "Bugsink server (scripts/bugsink start prints it)"
        return BugsinkPeer(url: try Peers.environment("BUGSINK_URL", server), dsn: try Peers.environment("BUGSINK_DSN", server),
                           token: try Peers.environment("BUGSINK_TOKEN", server),
                           project: try Peers.environment("BUGSINK_PROJECT_ID", server))
    }

    /// GET /api/canonical/0/events/lookup/?project=ID&event_id=HEX: the stored event's `data`, or `nil` (404).
    func storedEvent(_ eventID: String) -> [String: Any]? {
        var request = URLRequest(url: URL(string: "\(url)/api/canonical/0/events/lookup/?project=\(project)&event_id=\(eventID)")!)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.timeoutInterval = 15
        let answer = Locked<(Int, Data)>((-1, Data()))
        let done = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: request) { data, response, _ in
            let value = ((response as? HTTPURLResponse)?.statusCode ?? -1, data ?? Data())
            answer.withLock { $0 = value }
            done.signal()
        }.resume()
        done.wait()
        let (status, body) = answer.withLock { $0 }
        guard status == 200, let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else { return nil }
        if let data = object["data"] as? [String: Any] { return data }
        if let text = object["data"] as? String, let d = text.data(using: .utf8) {
            return (try? JSONSerialization.jsonObject(with: d)) as? [String: Any]
        }
        return object
    }

    /// Polls ``storedEvent(_:)`` until found or `timeout` s pass (storage happens after the HTTP reply).
    func waitForEvent(_ eventID: String, timeout: TimeInterval = 30) -> [String: Any]? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let event = storedEvent(eventID) { return event }
            if Date() > deadline { return nil }
            usleep(200_000)
        }
    }
}

