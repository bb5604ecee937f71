import Foundation
import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Storage that cannot be written, with REAL file systems. The harness (`vaka-crashme`) runs
/// in a private mount namespace (`unshare -m`) on a 512 KiB tmpfs that is full, or remounted read-only, or
/// under an `RLIMIT_FSIZE` quota, against a loopback envelope sink (scripts/envelope-sink.py). Each test
/// asserts on what the sink received, what the harness printed (its debug lines, and "flush returned false: ..."
/// when `Vaka.flush` returned `false`), how it ended, and the child's CPU time (getrusage of the
/// reaped children: a write-retry loop shows up there; bounds are generous, never wall-clock speed).
/// Needs root (mount); skipped otherwise.
final class StorageFailureTests: XCTestCase {
    let dirs = ScratchDirs()
    var sink: EnvelopeSink!

    override func setUpWithError() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else {
            throw XCTSkip("needs root and unshare(1) for a private tmpfs mount")
        }
        sink = try EnvelopeSink(logDirectory: dirs.make("sink"))
    }

    override func tearDown() {
        sink?.stop()
        dirs.removeAll()
    }

    /// Runs the harness as `bash -c SETUP; exec vaka-crashme ARGS` in a new mount namespace, where SETUP may
    /// mount on `$MNT` (an empty directory) and the storage is `$MNT/s`. Returns the child and its CPU seconds.
    /// With `fileSizeLimit` (bytes), the harness alone runs under that `RLIMIT_FSIZE` (prlimit(1)) and its
    /// stderr goes through a pipe to `cat` (so the test's own log file is not under the quota).
    private func runInNamespace(setup: String, _ arguments: [String], environment: [String: String] = [:],
                                fileSizeLimit: Int? = nil, timeout: TimeInterval = 90) throws -> (Child, cpu: Double) {
        let mnt = dirs.make("mnt")
        let logs = dirs.make("logs")
        let quoted = arguments.map { "'\($0)'" }.joined(separator: " ")
        let harness = "'\(Paths.harness.path)' \(quoted) --storage \"$MNT/s\""
        let run = fileSizeLimit.map { "{ prlimit --fsize=\($0) -- \(harness); } 2>&1 | cat >&2" } ?? "exec \(harness)"
        let script = "set -e -o pipefail; MNT='\(mnt.path)'; \(setup); \(run)"
        var env = environment
        env["VAKA_DEBUG"] = "1"
        let before = childCPUSeconds()
        let child = try RunningChild(URL(fileURLWithPath: "/usr/bin/unshare"),
                                     ["-m", "--propagation", "private", "/bin/bash", "-c", script],
                                     environment: env, logDirectory: logs)
        guard let result = child.wait(timeout: timeout) else {
            XCTFail("harness ran longer than \(timeout) s (killed)")
            return (Child(status: -1, signaled: true, stdout: "", stderr: ""), childCPUSeconds() - before)
        }
        return (result, childCPUSeconds() - before)
    }

    /// User + system CPU seconds of this process's reaped children.
    private func childCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    /// A 512 KiB tmpfs on $MNT with an empty storage directory, then filled to the last byte.
    private let fullTmpfs = "mount -t tmpfs -o size=512k tmpfs \"$MNT\"; mkdir \"$MNT/s\"; dd if=/dev/zero of=\"$MNT/fill\" bs=4k 2>/dev/null || true"

    /// The event ids the harness logged as captured (`captured ... as <id>`).
    private func capturedIDs(_ stderr: String) -> [String] {
        stderr.split(separator: "\n").compactMap { line in
            guard line.contains("] captured "), let r = line.range(of: " as ") else { return nil }
            return String(line[r.upperBound...]).trimmingCharacters(in: .whitespaces)
        }
    }

    // A full file system, a healthy server. What must not happen: nothing sent, ~80 % CPU
    // for the whole flush timeout, "flush returned false".
    func testFullFileSystemStillDeliversTheEventWithoutSpinning() throws {
        let (child, cpu) = try runInNamespace(setup: fullTmpfs, ["message", "--dsn", sink.dsn],
                                              environment: ["VAKA_FLUSH_TIMEOUT": "10"])
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        XCTAssertTrue(child.stderr.contains("No space left on device"), "the storage really was full:\n\(child.stderr)")
        let ids = capturedIDs(child.stderr)
        XCTAssertEqual(ids.count, 1, child.stderr)
        XCTAssertEqual(sink.waitForEvents(ids), Set(ids), "the event reached the server:\n\(child.stderr)")
        XCTAssertFalse(child.stderr.contains("flush returned false"), "flush returned true:\n\(child.stderr)")
        XCTAssertTrue(child.stderr.contains("holding 1 envelope(s) in memory"), child.stderr)
        XCTAssertLessThan(cpu, 3, "no write-retry loop (child CPU seconds)")
    }

    // Variant: several events, breadcrumbs, tags and a handled error on a full file system: all delivered.
    func testFullFileSystemDeliversEveryEventOfTheEventsScenario() throws {
        let (child, cpu) = try runInNamespace(setup: fullTmpfs, ["events", "--dsn", sink.dsn],
                                              environment: ["VAKA_FLUSH_TIMEOUT": "10"])
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        let ids = capturedIDs(child.stderr)
        XCTAssertEqual(ids.count, 4, "screen, purchase, screen, handled error:\n\(child.stderr)")
        XCTAssertEqual(sink.waitForEvents(ids), Set(ids), child.stderr)
        XCTAssertFalse(child.stderr.contains("flush returned false"), child.stderr)
        XCTAssertLessThan(cpu, 3)
    }

    // Variant: full file system AND no server (connection refused): flush returns false within its bound,
    // a debug line says what was lost at close, the process exits 0 without spinning.
    func testFullFileSystemWithoutServerFlushReturnsFalseAndTheLossIsLogged() throws {
        let started = Date()
        let (child, cpu) = try runInNamespace(setup: fullTmpfs, ["message", "--dsn", "http://k@127.0.0.1:1/1"],
                                              environment: ["VAKA_FLUSH_TIMEOUT": "3"])
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        XCTAssertTrue(child.stderr.contains("flush returned false"), "flush returned false:\n\(child.stderr)")
        XCTAssertTrue(child.stderr.contains("held in memory are lost"), "the drop is logged:\n\(child.stderr)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 60, "flush 3 s + close 2 s + request timeouts")
        XCTAssertLessThan(cpu, 3)
    }

    // A read-only storage directory (tmpfs remounted read-only): crash reporting off with one stderr line,
    // the event still delivered.
    func testReadOnlyStorageStillDeliversTheEvent() throws {
        let setup = "mount -t tmpfs -o size=512k tmpfs \"$MNT\"; mkdir -m 700 \"$MNT/s\"; mount -o remount,ro \"$MNT\""
        let (child, cpu) = try runInNamespace(setup: setup, ["message", "--dsn", sink.dsn],
                                              environment: ["VAKA_FLUSH_TIMEOUT": "10"])
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        XCTAssertTrue(child.stderr.contains("Read-only file system"), child.stderr)
        XCTAssertTrue(child.stderr.contains("crash reporting is off"), child.stderr)
        let ids = capturedIDs(child.stderr)
        XCTAssertEqual(ids.count, 1, child.stderr)
        XCTAssertEqual(sink.waitForEvents(ids), Set(ids), child.stderr)
        XCTAssertFalse(child.stderr.contains("flush returned false"), child.stderr)
        XCTAssertLessThan(cpu, 3)
    }

    // A first run on a read-only file system (the storage directory `$MNT/s` missing): `Vaka.start` installs the
    // crash handlers without making it, start's background thread cannot make it and says so in the one
    // `cannot create` line, then takes the handlers out: a crash after that ends the process as without Vaka
    // (SIGSEGV, no report), and nothing was made.
    func testReadOnlyFirstRunSaysSoAndTakesTheCrashHandlersOut() throws {
        let setup = "mount -t tmpfs -o size=512k,mode=700 tmpfs \"$MNT\"; mount -o remount,ro \"$MNT\""
        let (child, _) = try runInNamespace(setup: setup, ["crash-at-start"],
                                            environment: ["VAKA_CRASH_AFTER_FLUSH": "1", "SWIFT_BACKTRACE": "enable=no"])
        XCTAssertEqual(child.outcome, "signal 11", child.stderr)
        let lines = child.stderr.split(separator: "\n").filter { $0.hasPrefix("[vaka] cannot create ") && $0.contains("/s/crashes ") }
        XCTAssertEqual(lines.count, 1, child.stderr)
        XCTAssertTrue(lines.first?.contains("Read-only file system") ?? false, child.stderr)
        XCTAssertTrue(lines.first?.contains("crash reporting is off") ?? false, child.stderr)
        XCTAssertTrue(child.stderr.contains("crash handlers installed: 0"), child.stderr)
    }

    // A file size quota (RLIMIT_FSIZE 1 KiB): a write past it raises SIGXFSZ, whose default action kills the
    // process. The SDK's writes must fail instead (EFBIG), and the event still goes out.
    func testFileSizeLimitDoesNotKillTheAppAndTheEventIsDelivered() throws {
        let (child, cpu) = try runInNamespace(setup: "mkdir \"$MNT/s\"", ["events", "--dsn", sink.dsn],
                                              environment: ["VAKA_FLUSH_TIMEOUT": "10"], fileSizeLimit: 1024)
        XCTAssertEqual(child.outcome, "exit 0", "not killed by SIGXFSZ (bash: exit 153):\n\(child.stderr)")
        XCTAssertTrue(child.stderr.contains("File too large"), "the quota was hit:\n\(child.stderr)")
        let ids = capturedIDs(child.stderr)
        XCTAssertEqual(ids.count, 4, child.stderr)
        XCTAssertEqual(sink.waitForEvents(ids), Set(ids), child.stderr)
        XCTAssertFalse(child.stderr.contains("flush returned false"), child.stderr)
        XCTAssertLessThan(cpu, 3)
    }
}

/// scripts/envelope-sink.py on a loopback port: records the `event_id` of every event item it accepts.
final class EnvelopeSink {
    let process = Process()
    let eventsFile: URL
    let port: String

    init(logDirectory: URL) throws {
        eventsFile = logDirectory.appendingPathComponent("events.txt")
        let portFile = logDirectory.appendingPathComponent("port")
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", Paths.repositoryRoot.appendingPathComponent("scripts/envelope-sink.py").path,
                             eventsFile.path, portFile.path]
        try process.run()
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: portFile.path), Date() < deadline, process.isRunning { usleep(20_000) }
        guard let text = try? String(contentsOf: portFile, encoding: .utf8) else {
            throw NSError(domain: "EnvelopeSink", code: 1, userInfo: [NSLocalizedDescriptionKey: "envelope sink did not start"])
        }
        port = text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A DSN pointing at the sink.
    var dsn: String { "http://storagetestkey@127.0.0.1:\(port)/1" }

    /// The event ids received so far.
    var events: Set<String> {
        let text = (try? String(contentsOf: eventsFile, encoding: .utf8)) ?? ""
        return Set(text.split(separator: "\n").map(String.init))
    }

    /// Waits (at most `timeout` s) until all of `ids` arrived; returns those of `ids` that did.
    func waitForEvents(_ ids: [String], timeout: TimeInterval = 10) -> Set<String> {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline, !Set(ids).isSubset(of: events) { usleep(50_000) }
        return Set(ids).intersection(events)
    }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
