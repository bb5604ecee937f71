import Foundation
import XCTest
import VakaTestSupport

/// Facts of Package.swift that users of the package depend on, read from `swift package dump-package` (the
/// manifest as SwiftPM evaluated it, JSON).
///
/// SwiftPM refuses a package depended on by version (`.package(url:from:)`) when a target that a product the user
/// asks for builds has unsafe flags (`.unsafeFlags`, any tool): `the target 'VakaCrash' in product 'Vaka' contains
/// unsafe build flags`. So no target the `Vaka` library product builds, itself or through its dependencies, may
/// have them. Targets outside it (the crash harness's C scenarios, scripts/bench's programs) may.
final class PackageManifestTests: XCTestCase {
    /// One target of the dumped manifest: its name, the names of the targets it depends on (`byName` and
    /// `target` dependencies; other packages' products have none here), and the flags of its `unsafeFlags`
    /// settings, each as `tool: flag`.
    private struct Target {
        var name: String
        var dependencies: [String]
        var unsafeFlags: [String]
    }

    /// The manifest's products (name -> its targets) and targets (name -> ``Target``), from `swift package
    /// dump-package` run on the repository with a scratch directory of its own (the test's own `.build` may be
    /// locked by the running `swift test`).
    /// - Throws: when `swift` is missing (``Peers/missing(_:)``), exits non-zero, or prints no JSON object.
    private func dumpedManifest() throws -> (products: [String: [String]], targets: [String: Target]) {
        let candidates = ["/opt/swift/usr/bin/swift"]
            + (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/swift" }
        guard let swift = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw Peers.missing("swift not found (the Swift toolchain)")
        }
        let scratch = Paths.freshDirectory("dump-package")
        let result = try runProcess(swift, ["package", "--package-path", Paths.repositoryRoot.path,
                                            "--scratch-path", scratch.path, "dump-package"])
        XCTAssertEqual(result.status, 0, result.stderrText)
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdoutText.utf8)) as? [String: Any],
                                 result.stdoutText)

        var products: [String: [String]] = [:]
        for product in json["products"] as? [[String: Any]] ?? [] {
            if let name = product["name"] as? String { products[name] = product["targets"] as? [String] ?? [] }
        }
        var targets: [String: Target] = [:]
        for target in json["targets"] as? [[String: Any]] ?? [] {
            guard let name = target["name"] as? String else { continue }
            // e.g. {"byName": ["VakaCrash", null]} or {"target": ["VakaCrash", null]}
            let dependencies = (target["dependencies"] as? [[String: Any]] ?? []).compactMap { dependency in
                ((dependency["byName"] ?? dependency["target"]) as? [Any])?.first as? String
            }
            // e.g. {"kind": {"unsafeFlags": {"_0": ["-O0"]}}, "tool": "c"}
            let unsafeFlags = (target["settings"] as? [[String: Any]] ?? []).flatMap { setting -> [String] in
                guard let kind = setting["kind"] as? [String: Any], let unsafe = kind["unsafeFlags"] as? [String: Any]
                else { return [] }
                let tool = setting["tool"] as? String ?? "?"
                return (unsafe["_0"] as? [String] ?? ["(unreadable)"]).map { "\(tool): \($0)" }
            }
            targets[name] = Target(name: name, dependencies: dependencies, unsafeFlags: unsafeFlags)
        }
        return (products, targets)
    }

    /// No target of the `Vaka` product, nor any package target it depends on, has unsafe flags.
    func testVakaProductBuildsNoTargetWithUnsafeFlags() throws {
        let (products, targets) = try dumpedManifest()
        // Every target the product builds: its own and, transitively, the package targets they depend on.
        var built: Set<String> = []
        var pending = try XCTUnwrap(products["Vaka"], "no product Vaka among \(products.keys.sorted())")
        while let name = pending.popLast() {
            guard let target = targets[name], built.insert(name).inserted else { continue }
            pending += target.dependencies
        }
        // The walk reaches the crash runtime and the symbolication library through the Swift SDK.
        XCTAssertTrue(built.isSuperset(of: ["Vaka", "VakaCrash", "VakaSymbolication", "CVakaElf"]), "\(built.sorted())")
        for name in built.sorted() {
            XCTAssertEqual(targets[name]?.unsafeFlags, [], "target \(name) of product Vaka has unsafe flags: SwiftPM "
                           + "refuses the package as a versioned dependency")
        }
        // The reading finds unsafe flags where the manifest has them: the harness's C scenarios (-O0, frame
        // pointers), a target outside the product.
        XCTAssertFalse(built.contains("VakaCrashmeC"))
        XCTAssertFalse(targets["VakaCrashmeC"]?.unsafeFlags.isEmpty ?? true,
                       "VakaCrashmeC: \(String(describing: targets["VakaCrashmeC"]))")
    }

    /// scripts/check-dependency commits the work tree to a scratch repository tagged 0.0.1 (its `snapshot DIR`
    /// mode makes only that). A developer's global git configuration must not break it: here commits and tags are
    /// to be signed (no key exists) and a hooks directory whose pre-commit hook fails, with DIR's path holding a
    /// space. The snapshot must still be made: a commit tagged 0.0.1 with the manifest, and no `.venv`.
    func testCheckDependencySnapshotIgnoresTheUsersGitConfiguration() throws {
        let scratch = Paths.freshDirectory("check-dependency")
        let hooks = scratch.appendingPathComponent("hooks")
        try FileManager.default.createDirectory(at: hooks, withIntermediateDirectories: true)
        let hook = hooks.appendingPathComponent("pre-commit")
        try Data("#!/bin/sh\necho pre-commit hook refuses >&2\nexit 1\n".utf8).write(to: hook)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: hook.path)
        let config = scratch.appendingPathComponent("gitconfig")
        try Data("""
            [commit]
            \tgpgsign = true
            [tag]
            \tgpgSign = true
            [core]
            \thooksPath = \(hooks.path)

            """.utf8).write(to: config)
        let target = scratch.appendingPathComponent("with space")
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        let script = Paths.repositoryRoot.appendingPathComponent("scripts/check-dependency").path
        let result = try runProcess("/usr/bin/env", ["GIT_CONFIG_GLOBAL=\(config.path)", "bash", script, "snapshot",
                                                     target.path])
        XCTAssertEqual(result.status, 0, result.stderrText)
        let snapshot = target.appendingPathComponent("vaka")
        XCTAssertTrue(FileManager.default.fileExists(atPath: snapshot.appendingPathComponent("Package.swift").path))
        XCTAssertFalse(FileManager.default.fileExists(atPath: snapshot.appendingPathComponent(".venv").path))
        let tags = try runProcess("/usr/bin/env", ["GIT_CONFIG_GLOBAL=/dev/null", "git", "-C", snapshot.path,
                                                   "tag", "--contains", "HEAD"])
        XCTAssertEqual(tags.stdoutText, "0.0.1\n", tags.stderrText)
    }
}
