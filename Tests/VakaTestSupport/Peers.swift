import Foundation
import XCTest

/// The real peers and tools the tests check Vaka against (Relay's normalizer, sentry_sdk's parser,
/// sentry-cli, Bugsink, python3, readelf, eu-addr2line, a C compiler...), and the one rule for a missing
/// one: the test is skipped with the reason, unless `VAKA_REQUIRE_PEERS=1` (set by scripts/test), which
/// makes it a failure. Peers named by the environment are set by scripts/test; tools are looked up on disk.
public enum Peers {
    /// Whether a missing peer fails the test (`VAKA_REQUIRE_PEERS=1`) instead of skipping it.
    public static var areRequired: Bool { ProcessInfo.processInfo.environment["VAKA_REQUIRE_PEERS"] == "1" }

    /// The error to throw for a missing peer: `XCTSkip(reason)`, or with `VAKA_REQUIRE_PEERS=1` a
    /// ``MissingPeer`` that fails the test.
    /// - Parameter reason: what is missing and how to get it, e.g. "VAKA_RELAY_PYTHON is not set".
    public static func missing(_ reason: String) -> Error {
        areRequired ? MissingPeer(reason: reason) : XCTSkip(reason)
    }

    /// The value of the environment variable `name` (a path set by scripts/test), or ``missing(_:)``.
    /// - Parameter purpose: what the peer is, for the message (e.g. "Relay's normalizer").
    /// - Throws: ``missing(_:)`` when the variable is unset or empty.
    public static func environment(_ name: String, _ purpose: String) throws -> String {
        if let value = ProcessInfo.processInfo.environment[name], !value.isEmpty { return value }
        throw missing("\(name) is not set: no \(purpose) (run scripts/test, which sets it)")
    }

    /// `$VAKA_RELAY_PYTHON`: a python with `sentry_relay` for scripts/relay-validate.py.
    public static func relayPython() throws -> String {
        try environment("VAKA_RELAY_PYTHON", "python with sentry_relay for Relay's normalizer")
    }

    /// `$VAKA_SENTRY_CLI`: the sentry-cli executable.
    public static func sentryCLI() throws -> String {
        try environment("VAKA_SENTRY_CLI", "sentry-cli")
    }

    /// A python that imports `sentry_sdk.envelope`: `$VAKA_SENTRY_PYTHON`, else this checkout's
    /// `.venv/bugsink/bin/python` (Bugsink depends on sentry-sdk).
    public static func sentryPython() throws -> String {
        let candidates: [String?] = [ProcessInfo.processInfo.environment["VAKA_SENTRY_PYTHON"],
                          Paths.repositoryRoot.appendingPathComponent(".venv/bugsink/bin/python").path]
        for candidate in candidates.compactMap({ $0 }) where !candidate.isEmpty {
            if FileManager.default.isExecutableFile(atPath: candidate),
               (try? runProcess(candidate, ["-c", "import sentry_sdk.envelope"]))?.status == 0 {
                return candidate
            }
        }
        throw missing("no python with sentry_sdk (set VAKA_SENTRY_PYTHON; scripts/test does)")
    }

    /// The executable `name` from `/usr/bin`, `/bin`, `/usr/local/bin` or `$PATH`, or ``missing(_:)``.
    /// - Parameter install: how to get it, for the message (e.g. "binutils: scripts/bootstrap").
    public static func tool(_ name: String, install: String = "scripts/bootstrap") throws -> String {
        if let path = findTool(name) { return path }
        throw missing("\(name) not found (\(install))")
    }

    /// The executable `name` from `/usr/bin`, `/bin`, `/usr/local/bin` or `$PATH`; `nil` when absent.
    public static func findTool(_ name: String) -> String? {
        var dirs = ["/usr/bin", "/bin", "/usr/local/bin"]
        dirs += (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        return dirs.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// A C compiler (`cc`, `gcc` or `clang` in `/usr/bin`); `nil` when none is installed.
    public static let cCompiler: String? = ["/usr/bin/cc", "/usr/bin/gcc", "/usr/bin/clang"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
}

/// A peer that `VAKA_REQUIRE_PEERS=1` requires is missing: thrown by ``Peers/missing(_:)``, it fails the test.
public struct MissingPeer: Error, CustomStringConvertible {
    /// What is missing.
    public var reason: String
    /// "VAKA_REQUIRE_PEERS=1 but ...".
    public var description: String { "VAKA_REQUIRE_PEERS=1 but \(reason)" }
}
