import Foundation
import XCTest
import VakaTestSupport

// Helpers for the crash tests: running a child process with a timeout, reading the build ID with readelf,
// deriving the debug_id, and digging into decoded JSON. Paths, peers and scratch directories: VakaTestSupport.

/// How a child process ended, and what it wrote.
struct ChildResult {
    /// The command line, for messages.
    var command: String
    /// `.exit` or `.uncaughtSignal`.
    var reason: Process.TerminationReason
    /// Exit status, or the signal number when `reason` is `.uncaughtSignal`.
    var status: Int32
    /// Whether the child was killed (SIGKILL) because it ran longer than the timeout.
    var timedOut: Bool
    /// Its standard output (written to a file, so a chatty child never blocks on a pipe).
    var stdout: Data
    /// Its standard error.
    var stderr: Data
    /// File holding its standard output.
    var stdoutFile: URL

    var stderrText: String { String(decoding: stderr, as: UTF8.self) }

    /// True when the child was ended by a signal (a crash, or our SIGKILL on timeout).
    var diedBySignal: Bool { reason == .uncaughtSignal }

    /// "exit 3" / "signal 11 (SIGSEGV)" / "timed out".
    var outcome: String {
        if timedOut { return "timed out (killed)" }
        return reason == .uncaughtSignal ? "signal \(status) (\(signalName(status)))" : "exit \(status)"
    }

    /// The last `bytes` bytes of stderr, for failure messages.
    func stderrTail(_ bytes: Int = 1500) -> String {
        String(decoding: stderr.suffix(bytes), as: UTF8.self)
    }
}

/// Errors setting up a child process.
struct ChildError: Error, CustomStringConvertible {
    var description: String
}

/// Runs `executable` with `arguments` and waits at most `timeout` seconds (then SIGKILLs it and marks the
/// result timed out). stdout/stderr go to files in `outputDirectory`, named after `label`; stdin is /dev/null.
/// The child starts with all signals at their default actions, and unblocked — or, with `blockAllSignals`, all
/// blocked (as when started by a parent that blocked every signal: the mask is inherited over exec).
///
/// Uses posix_spawn and reaps the child itself with waitpid: Foundation's `Process` occasionally missed a
/// child's exit when many children ran concurrently (the child stayed a zombie and the test hung).
/// - Throws: ``ChildError`` when the executable is missing or cannot be started.
func runChild(_ executable: URL, _ arguments: [String], label: String, outputDirectory: URL,
              environment: [String: String] = [:], timeout: TimeInterval = 30,
              blockAllSignals: Bool = false) throws -> ChildResult {
    let command = ([executable.path] + arguments).joined(separator: " ")
    guard FileManager.default.isExecutableFile(atPath: executable.path) else {
        throw ChildError(description: "\(executable.path) is missing or not executable (is the package built?)")
    }
    let outURL = outputDirectory.appendingPathComponent("\(label).stdout")
    let errURL = outputDirectory.appendingPathComponent("\(label).stderr")

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outURL.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_addopen(&actions, 2, errURL.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)

    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var noSignals = sigset_t()
    if blockAllSignals { sigfillset(&noSignals) } else { sigemptyset(&noSignals) }
    var allSignals = sigset_t()
    sigemptyset(&allSignals)
    for signal in 1..<32 where signal != SIGKILL && signal != SIGSTOP { sigaddset(&allSignals, Int32(signal)) }
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    posix_spawnattr_setsigdefault(&attributes, &allSignals)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

    let merged = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
    let argv: [UnsafeMutablePointer<CChar>?] = ([executable.path] + arguments).map { strdup($0) } + [nil]
    let envp: [UnsafeMutablePointer<CChar>?] = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        argv.forEach { free($0) }
        envp.forEach { free($0) }
    }
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, executable.path, &actions, &attributes, argv, envp)
    guard rc == 0 else {
        throw ChildError(description: "cannot start \(command): \(String(cString: strerror(rc)))")
    }

    // Poll for the exit (10 ms steps) until the deadline, then kill.
    var status: Int32 = 0
    var timedOut = false
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        let reaped = waitpid(pid, &status, WNOHANG)
        if reaped == pid { break }
        if reaped < 0 && errno != EINTR {
            throw ChildError(description: "waitpid \(command): \(String(cString: strerror(errno)))")
        }
        if Date() >= deadline {
            timedOut = true
            kill(pid, SIGKILL)
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            break
        }
        usleep(10_000)
    }
    // Decode the wait status (the WIFSIGNALED/WTERMSIG/WEXITSTATUS macros are not imported into Swift).
    let termSignal = status & 0x7f
    let reason: Process.TerminationReason = termSignal != 0 && termSignal != 0x7f ? .uncaughtSignal : .exit
    let code = reason == .uncaughtSignal ? termSignal : (status >> 8) & 0xff
    return ChildResult(command: command, reason: reason, status: code, timedOut: timedOut,
                       stdout: (try? Data(contentsOf: outURL)) ?? Data(),
                       stderr: (try? Data(contentsOf: errURL)) ?? Data(),
                       stdoutFile: outURL)
}

/// "SIGSEGV" for 11 and so on (Linux numbers), "signal N" otherwise.
func signalName(_ number: Int32) -> String {
    let names: [Int32: String] = [
        SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
        SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGSEGV: "SIGSEGV",
        SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM", SIGTERM: "SIGTERM", SIGSYS: "SIGSYS",
    ]
    return names[number] ?? "signal \(number)"
}

/// The GNU build ID of the ELF file at `path` as lower-case hex, read from `readelf -n` (binutils).
/// - Throws: ``ChildError`` when readelf fails or prints no `Build ID:` line; ``Peers/missing(_:)`` without readelf.
func readelfBuildID(_ path: URL, scratch: URL) throws -> String {
    let readelf = try Peers.tool("readelf", install: "binutils: scripts/bootstrap")
    let result = try runChild(URL(fileURLWithPath: readelf), ["-n", path.path], label: "readelf-\(UUID().uuidString.prefix(8))",
                              outputDirectory: scratch)
    guard result.reason == .exit, result.status == 0 else {
        throw ChildError(description: "readelf -n \(path.path): \(result.outcome): \(result.stderrTail())")
    }
    for line in String(decoding: result.stdout, as: UTF8.self).split(separator: "\n") {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("Build ID:") {
            return trimmed.dropFirst("Build ID:".count).trimmingCharacters(in: .whitespaces).lowercased()
        }
    }
    throw ChildError(description: "readelf -n \(path.path) shows no Build ID")
}

/// Sentry's debug_id for an ELF build ID, derived here independently of the code under test: the first
/// 16 bytes of the build ID (zero-padded when shorter) read as a little-endian GUID, i.e. bytes 0-3, 4-5
/// and 6-7 reversed, printed 8-4-4-4-12 in lower-case hex. `nil` for an empty or malformed hex string.
func debugID(fromBuildID hex: String) -> String? {
    let digits = Array(hex.lowercased())
    guard !digits.isEmpty, digits.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    for index in stride(from: 0, to: digits.count, by: 2) {
        guard let byte = UInt8(String(digits[index...index + 1]), radix: 16) else { return nil }
        bytes.append(byte)
    }
    bytes = Array((bytes + [UInt8](repeating: 0, count: 16)).prefix(16))
    bytes[0..<4].reverse()
    bytes[4..<6].reverse()
    bytes[6..<8].reverse()
    let text = bytes.map { String(format: "%02x", $0) }.joined()
    let groups = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { range in
        String(Array(text)[range])
    }
    return groups.joined(separator: "-")
}

/// Lower-cases and removes `-` and `_`, for matching function names against scenario names.
func normalizedName(_ text: String) -> String {
    String(text.lowercased().filter { $0 != "-" && $0 != "_" })
}

/// Parses a `0x`-prefixed hex string (as Sentry addresses are written).
func parseHexAddress(_ value: Any?) -> UInt64? {
    guard let text = value as? String, text.lowercased().hasPrefix("0x") else { return nil }
    return UInt64(text.dropFirst(2), radix: 16)
}

/// Decodes `data` as a JSON object, or returns `nil`.
func decodeJSONObject(_ data: Data) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
}
