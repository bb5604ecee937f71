import Foundation
import XCTest

/// Where the tests find the built products, the repository, and their scratch space.
public enum Paths {
    /// The build products directory (`.build/<triple>/debug`): the test bundle `VakaPackageTests.xctest`
    /// is an executable there, next to `vaka-crashme` and `vaka`. Taken from `/proc/self/exe` (resolved),
    /// or from `$VAKA_PRODUCTS_DIR` when set (scripts/test points it at a `-c release` build).
    public static let productsDirectory: URL = {
        if let dir = ProcessInfo.processInfo.environment["VAKA_PRODUCTS_DIR"], !dir.isEmpty {
            return URL(fileURLWithPath: dir, isDirectory: true)
        }
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            return URL(fileURLWithPath: exe).deletingLastPathComponent()
        }
        return Bundle.main.bundleURL.deletingLastPathComponent()
    }()

    /// The crash harness executable (`vaka-crashme`).
    public static let harness = productsDirectory.appendingPathComponent("vaka-crashme")
    /// The `vaka` command-line tool.
    public static let cli = productsDirectory.appendingPathComponent("vaka")

    /// The repository root (three levels above this source file), or `$VAKA_REPO_ROOT`.
    public static let repositoryRoot: URL = {
        if let dir = ProcessInfo.processInfo.environment["VAKA_REPO_ROOT"], !dir.isEmpty {
            return URL(fileURLWithPath: dir, isDirectory: true)
        }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }()

    /// The path of a built product (e.g. ``cli``), or a failure when it is not built.
    /// - Throws: ``MissingProduct`` (never a skip: the package is built before the tests run).
    public static func built(_ product: URL) throws -> String {
        guard FileManager.default.isExecutableFile(atPath: product.path) else {
            throw MissingProduct(path: product.path)
        }
        return product.path
    }

    /// A fresh directory for this test process, removed at exit unless `VAKA_KEEP_TEST_FILES=1`.
    public static let scratchRoot: URL = {
        let root = URL(fileURLWithPath: scratchRootPath, isDirectory: true)
        try? FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        if ProcessInfo.processInfo.environment["VAKA_KEEP_TEST_FILES"] != "1" {
            atexit { try? FileManager.default.removeItem(atPath: scratchRootPath) }
        }
        return root
    }()

    /// A new empty directory under ``scratchRoot``, named after `label`.
    public static func freshDirectory(_ label: String) -> URL {
        let dir = scratchRoot.appendingPathComponent("\(label)-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    /// `path` with symbolic links resolved, for comparing paths from reports with ours.
    public static func resolved(_ path: String) -> String {
        URL(fileURLWithPath: path).resolvingSymlinksInPath().path
    }
}

/// The path of ``Paths/scratchRoot`` (a constant, so the `atexit` hook can name it without capturing).
private let scratchRootPath = FileManager.default.temporaryDirectory
    .appendingPathComponent("vaka-tests-\(getpid())-\(UUID().uuidString.prefix(8))", isDirectory: true).path

/// A build product the tests run is missing (the package was not built with `swift build --build-tests`).
public struct MissingProduct: Error, CustomStringConvertible {
    /// The path looked at.
    public var path: String
    /// The message.
    public var description: String { "\(path) is missing or not executable (run swift build --build-tests)" }
}

/// Temporary directories made for one test and removed by ``removeAll()`` (usually in `tearDown`); kept with
/// `VAKA_KEEP_TEST_FILES=1`.
public final class ScratchDirs {
    private var dirs: [URL] = []

    /// Creates an empty set.
    public init() {}

    /// A new empty directory `vaka-<label>-<random>` under the system temporary directory.
    public func make(_ label: String = "test") -> URL {
        let dir = FileManager.default.temporaryDirectory
            .appendingPathComponent("vaka-\(label)-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        dirs.append(dir)
        return dir
    }

    /// Removes every directory made (unless `VAKA_KEEP_TEST_FILES=1`).
    public func removeAll() {
        if ProcessInfo.processInfo.environment["VAKA_KEEP_TEST_FILES"] != "1" {
            for dir in dirs { try? FileManager.default.removeItem(at: dir) }
        }
        dirs = []
    }

    /// A new empty directory removed when `test` ends (a teardown block), for tests without a `ScratchDirs`.
    public static func directory(for test: XCTestCase, _ label: String = "test") throws -> URL {
        let dir = FileManager.default.temporaryDirectory
            .appendingPathComponent("vaka-\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        test.addTeardownBlock { try? FileManager.default.removeItem(at: dir) }
        return dir
    }
}
