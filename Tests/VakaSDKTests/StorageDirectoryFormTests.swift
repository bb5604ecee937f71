import XCTest
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import VakaTestSupport
@testable import Vaka

/// Storage directories given in forms other than an absolute `URL(fileURLWithPath:)`: a relative URL
/// (`URL(string: "state")`), whose paths are made absolute against the working directory as
/// `URL(fileURLWithPath:)` makes them, and ``Vaka/storageDirectory`` giving back the URL as it was given.
final class StorageDirectoryFormTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() {
        Vaka.close(timeout: 1)
        dirs.removeAll()
    }

    /// Runs `body` with `directory` as the working directory, then goes back to the one before.
    private func inWorkingDirectory<T>(_ directory: URL, _ body: () throws -> T) throws -> T {
        let before = FileManager.default.currentDirectoryPath
        XCTAssertEqual(chdir(directory.path), 0)
        defer { chdir(before) }
        return try body()
    }

    /// Runs `body` with file descriptor 2 sent to `file`; returns what was written there.
    private func capturingStandardError(in file: String, _ body: () -> Void) -> String {
        let saved = dup(2)
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        dup2(fd, 2)
        close(fd)
        body()
        dup2(saved, 2)
        close(saved)
        return (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
    }

    /// A relative URL's file-system path (and the paths made below it) is the one `URL(fileURLWithPath:)`
    /// gives for the same relative path: absolute, against the working directory.
    func testRelativeURLGivesTheAbsolutePathOfTheWorkingDirectory() throws {
        let scratch = dirs.make("relative-path")
        try inWorkingDirectory(scratch) {
            let cwd = FileManager.default.currentDirectoryPath
            for relative in ["state", "state/app", "./state", "state/", "a/../state", "../up"] {
                let given = try XCTUnwrap(URL(string: relative))
                let expected = URL(fileURLWithPath: relative, isDirectory: true).fileSystemPath
                XCTAssertTrue(expected.hasPrefix(relative.hasPrefix("..") ? "/" : cwd + "/"), expected)
                XCTAssertEqual(given.fileSystemPath, expected, relative)
                XCTAssertEqual(Outbox(storageDirectory: given).directory.path, expected + "/outbox", relative)
                XCTAssertEqual(given.appendingFileComponent("crashes").fileSystemPath, expected + "/crashes", relative)
            }
            // No path at all (a URL with only a host) stays empty, as before.
            XCTAssertEqual(try XCTUnwrap(URL(string: "https://example.com")).fileSystemPath, "")
        }
    }

    /// `Vaka.start` on a relative storage URL installs the crash handlers with the report directory below the
    /// working directory (the crash runtime refuses a relative one: crash reporting would be off), and the
    /// run's files go there; ``Vaka/storageDirectory`` is the URL as given.
    func testStartOnRelativeStorageURLInstallsCrashHandlers() throws {
        let scratch = dirs.make("relative-start")
        let log = scratch.path + "/stderr.txt"
        let given = try XCTUnwrap(URL(string: "relstore"))
        var inUse: URL?
        var runID: String?
        let errors = try inWorkingDirectory(scratch) {
            capturingStandardError(in: log) {
                Vaka.start(Vaka.Options(release: "app@1", sessionTracking: false, debug: true, storageDirectory: given))
                inUse = Vaka.storageDirectory
                runID = Vaka.runID
                Vaka.capture(message: "relative storage")
                Vaka.close(timeout: 5)
            }
        }
        let storage = scratch.resolvingSymlinksInPath().path + "/relstore"
        XCTAssertFalse(errors.contains("crash handlers not installed"), errors)
        let id = try XCTUnwrap(runID)
        XCTAssertTrue(errors.contains("crash handlers installed; reports go to \(storage)/crashes/\(id).crash"), errors)
        XCTAssertEqual(inUse, given)
        let outbox = try FileManager.default.contentsOfDirectory(atPath: storage + "/outbox")
        XCTAssertFalse(outbox.isEmpty)
        let events = try readOutbox(URL(fileURLWithPath: storage)).flatMap(\.events)
        XCTAssertEqual(events.compactMap { ($0["logentry"] as? [String: Any])?["formatted"] as? String }, ["relative storage"])
    }

    /// ``Vaka/storageDirectory`` is the `storageDirectory` option as given (not a URL remade from its path: a
    /// given URL without a trailing `/` compares equal to itself only), and the default directory without one.
    func testStorageDirectoryIsTheGivenURL() throws {
        let given = URL(fileURLWithPath: dirs.make("given").path + "/not-yet")
        Vaka.start(Vaka.Options(release: "app@1", sessionTracking: false, storageDirectory: given))
        XCTAssertEqual(Vaka.storageDirectory, given)
        Vaka.close(timeout: 5)
    }
}
