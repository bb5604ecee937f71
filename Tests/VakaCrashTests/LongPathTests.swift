import Foundation
import XCTest
import VakaTestSupport

/// Long paths and silent failures to install. Any storage path the kernel accepts gets the
/// crash report (the report directory is opened once at install and the report created relative to it with
/// openat), and a failure to install the crash handlers always prints one `[vaka] ...` line on stderr, with or
/// without `debug`.
final class LongPathTests: XCTestCase {
    /// A directory path under `base` whose total length is exactly `length` bytes (UTF-8), made of nested
    /// components of at most 200 bytes (NAME_MAX is 255). Not created.
    static func nestedPath(under base: URL, length: Int) -> String {
        var path = base.path
        precondition(path.utf8.count + 2 < length)
        var index = 0
        while path.utf8.count < length {
            let room = length - path.utf8.count - 1 // bytes left for this component after its '/'
            // Never leave a remainder too short for a component of its own.
            let size = room > 200 ? min(200, room - 2) : room
            let letter = Character(UnicodeScalar(UInt8(ascii: "a") + UInt8(index % 26)))
            path += "/" + String(repeating: letter, count: size)
            index += 1
        }
        precondition(path.utf8.count == length)
        return path
    }

    /// Runs the harness with Vaka in `scenario` with `--storage storage` (and `extra` arguments); returns the
    /// result and the `*.crash` files in `storage/crashes`.
    func runHarness(_ scenario: String, storage: String, label: String, extra: [String] = [],
                    environment: [String: String] = [:]) throws -> (ChildResult, [String]) {
        let work = Paths.freshDirectory(label)
        let result = try runChild(Paths.harness, [scenario, "--storage", storage] + extra, label: label,
                                  outputDirectory: work,
                                  environment: ["SWIFT_BACKTRACE": "enable=no"].merging(environment) { _, new in new })
        let crashes = (storage as NSString).appendingPathComponent("crashes")
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: crashes)) ?? [])
            .filter { $0.hasSuffix(".crash") }.map { (crashes as NSString).appendingPathComponent($0) }
        return (result, names)
    }

    /// Converts `report` with `vaka report convert` and checks the event's signal and the scenario frame.
    func assertConverts(_ report: String, signal: String, function: String, file: StaticString = #filePath,
                        line: UInt = #line) throws {
        let convert = try runChild(Paths.cli, ["report", "convert", report], label: "convert",
                                   outputDirectory: Paths.freshDirectory("convert"))
        XCTAssertEqual(convert.outcome, "exit 0", convert.stderrTail(), file: file, line: line)
        let event = decodeJSONObject(convert.stdout)
        XCTAssertEqual(dig(event, "exception", "values", 0, "type") as? String, signal, file: file, line: line)
        let frames = dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]] ?? []
        XCTAssertTrue(frames.suffix(6).contains { ($0["function"] as? String ?? "").contains(function) },
                      "no \(function) frame: \(frames.suffix(6).map { $0["function"] ?? "?" })", file: file, line: line)
    }

    /// `--storage` with a 3,900-byte path (under PATH_MAX) gets a report. A runtime that refuses report
    /// directories over 3,800 bytes (and a `Vaka.start` that says so only with `debug`) leaves no report and
    /// nothing on stderr.
    func testStoragePathOf3900Bytes() throws {
        let storage = Self.nestedPath(under: Paths.freshDirectory("long3900"), length: 3900)
        let (result, reports) = try runHarness("null-deref", storage: storage, label: "long3900")
        XCTAssertEqual(result.outcome, "signal 11 (SIGSEGV)", result.stderrTail())
        XCTAssertFalse(result.stderrText.contains("[vaka]"), "unexpected warning: \(result.stderrTail())")
        XCTAssertEqual(reports.count, 1, "expected one report under the 3,900-byte storage path")
        if let report = reports.first { try assertConverts(report, signal: "SIGSEGV", function: "crashme_null_deref") }
    }

    /// Variant: the report's whole path is 4,095 bytes, the longest the kernel accepts (storage 4,044 bytes +
    /// `/crashes/<36-character run id>.crash`), for a Swift fatal error with its message.
    func testReportPathOfPathMaxMinusOne() throws {
        let storage = Self.nestedPath(under: Paths.freshDirectory("long4095"), length: 4095 - 51)
        let (result, reports) = try runHarness("swift-fatal-error", storage: storage, label: "long4095")
        XCTAssertEqual(result.outcome, "signal 4 (SIGILL)", result.stderrTail())
        XCTAssertEqual(reports.count, 1)
        guard let report = reports.first else { return }
        XCTAssertEqual(report.utf8.count, 4095)
        let text = (try? String(contentsOfFile: report, encoding: .utf8)) ?? ""
        XCTAssertTrue(reportValue(text, "fatal_message")?.contains("boom 42") ?? false, text)
        try assertConverts(report, signal: "SIGILL", function: "swiftFatalError")
    }

    /// Variant: a storage path with spaces and non-ASCII characters (UTF-8 in the path, the report written
    /// there and read back).
    func testStoragePathWithSpacesAndNonASCII() throws {
        let storage = Paths.freshDirectory("unicode").appendingPathComponent("stör age/日本 語/ünï cødé").path
        let (result, reports) = try runHarness("abort", storage: storage, label: "unicode")
        XCTAssertEqual(result.outcome, "signal 6 (SIGABRT)", result.stderrTail())
        XCTAssertEqual(reports.count, 1)
        if let report = reports.first { try assertConverts(report, signal: "SIGABRT", function: "crashme_abort") }
    }

    /// Variant: a relative `--storage` path, resolved against the working directory at start.
    func testRelativeStoragePath() throws {
        let work = Paths.freshDirectory("relative")
        let result = try runChild(URL(fileURLWithPath: "/bin/sh"),
                                  ["-c", "cd \"$1\" && exec \"$2\" null-deref --storage rel/store", "sh", work.path,
                                   Paths.harness.path],
                                  label: "relative", outputDirectory: work, environment: ["SWIFT_BACKTRACE": "enable=no"])
        XCTAssertEqual(result.outcome, "signal 11 (SIGSEGV)", result.stderrTail())
        let crashes = work.appendingPathComponent("rel/store/crashes")
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: crashes.path)) ?? []).filter { $0.hasSuffix(".crash") }
        XCTAssertEqual(names.count, 1, "no report in \(crashes.path)")
    }

    /// Variant: `crashes/` cannot be created (a regular file is in the way): the process still crashes as
    /// without Vaka, and stderr says, in one line and without `debug`, that the crash handlers are not installed.
    func testCrashesDirectoryThatCannotBeCreatedSaysSo() throws {
        let storage = Paths.freshDirectory("blocked-crashes")
        try Data("not a directory".utf8).write(to: storage.appendingPathComponent("crashes"))
        let (result, _) = try runHarness("null-deref", storage: storage.path, label: "blocked-crashes")
        XCTAssertEqual(result.outcome, "signal 11 (SIGSEGV)", result.stderrTail())
        let lines = result.stderrText.split(separator: "\n").filter { $0.hasPrefix("[vaka]") }
        XCTAssertEqual(lines.count, 1, "expected exactly one [vaka] line: \(result.stderrTail())")
        XCTAssertTrue(lines.first?.contains("crash reporting is off") ?? false, "\(lines)")
        XCTAssertTrue(lines.first?.contains(storage.appendingPathComponent("crashes").path) ?? false, "\(lines)")
    }

    /// Variant: a storage path so long that `crashes/` would pass PATH_MAX (4,090-byte storage): the kernel
    /// refuses it, and stderr says so in one line.
    func testCrashesDirectoryOverPathMaxSaysSo() throws {
        let storage = Self.nestedPath(under: Paths.freshDirectory("over-max"), length: 4090)
        let (result, _) = try runHarness("null-deref", storage: storage, label: "over-max")
        XCTAssertEqual(result.outcome, "signal 11 (SIGSEGV)", result.stderrTail())
        let lines = result.stderrText.split(separator: "\n").filter { $0.hasPrefix("[vaka]") }
        XCTAssertEqual(lines.count, 1, "expected exactly one [vaka] line: \(result.stderrTail())")
        XCTAssertTrue(lines.first?.contains("crash reporting is off") ?? false, "\(lines)")
    }

    // MARK: - The C runtime alone

    /// Reads the file at `path`, which may be longer than PATH_MAX, by opening each directory with openat.
    static func readLongPath(_ path: String) -> String? {
        var components = path.split(separator: "/").map(String.init)
        guard let name = components.popLast() else { return nil }
        var dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        for component in components {
            let next = openat(dir, component, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(dir)
            guard next >= 0 else { return nil }
            dir = next
        }
        let fd = openat(dir, name, O_RDONLY | O_CLOEXEC)
        close(dir)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            data.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Variant: a report directory of 4,095 bytes (the longest the kernel accepts), so the report's own path
    /// (4,095 + `/longdir.crash`) is longer than PATH_MAX: only a report created relative to the directory can
    /// exist there.
    func testReportPathLongerThanPathMax() throws {
        let program = try RuntimeProgram.build("longdir", """
        int main(int argc, char **argv) {
            const char *dir = argv[1];
            vaka_crash_config c = { .report_dir = dir, .run_id = "longdir" };
            int rc = vaka_crash_install(&c);
            if (rc) { fprintf(stderr, "install failed %d\\n", rc); return 99; }
            printf("%zu\\n", strlen(vaka_crash_report_path()));
            fflush(stdout);
            vk_null();
        }
        """)
        let dir = Self.nestedPath(under: Paths.freshDirectory("longdir"), length: 4095)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let result = try runChild(program, [dir], label: "longdir", outputDirectory: Paths.freshDirectory("longdir-run"),
                                  timeout: 30)
        XCTAssertEqual(result.outcome, "signal 11 (SIGSEGV)", result.stderrTail())
        XCTAssertEqual(String(decoding: result.stdout, as: UTF8.self), "\(4095 + "/longdir.crash".utf8.count)\n")
        let report = Self.readLongPath(dir + "/longdir.crash") ?? ""
        XCTAssertEqual(reportValue(report, "signal"), "11 SIGSEGV", "no report in the 4,095-byte directory")
        XCTAssertTrue(report.hasSuffix("\nend\n"), report)
    }

    /// Variant: the program closes every descriptor after install (as daemons and `closefrom` do), so the
    /// directory descriptor is gone: the report is still written, by its absolute path.
    func testReportWrittenAfterDirectoryDescriptorWasClosed() throws {
        let program = try RuntimeProgram.build("closefds", """
        #include <fcntl.h>
        int main(void) {
            vk_start("closefds");
            for (int fd = 3; fd < 1024; fd++) close(fd);
            /* and reuse the lowest numbers for something else */
            for (int i = 0; i < 8; i++) if (open("/", O_RDONLY) < 0) return 98;
            vk_null();
        }
        """)
        let run = try RuntimeProgram.run(program, timeout: 30)
        XCTAssertEqual(run.result.outcome, "signal 11 (SIGSEGV)", run.result.stderrTail())
        XCTAssertEqual(run.reports, ["closefds.crash"])
        XCTAssertTrue(run.onlyReport.hasSuffix("\nend\n"), run.onlyReport)
    }

    /// A report directory that does not exist or is not a directory: vaka_crash_install says why (the errno of
    /// opening it), instead of a bare EINVAL.
    func testInstallReportsWhyTheDirectoryIsRefused() throws {
        let program = try RuntimeProgram.build("baddir", """
        int main(int argc, char **argv) {
            vaka_crash_config c = { .report_dir = argv[1], .run_id = "baddir" };
            printf("%d\\n", vaka_crash_install(&c));
            return 0;
        }
        """)
        let work = Paths.freshDirectory("baddir")
        let file = work.appendingPathComponent("file")
        try Data().write(to: file)
        for (path, errno) in [(work.appendingPathComponent("missing").path, ENOENT), (file.path, ENOTDIR),
                              ("relative/dir", EINVAL)] {
            let result = try runChild(program, [path], label: "baddir", outputDirectory: work)
            XCTAssertEqual(String(decoding: result.stdout, as: UTF8.self), "\(errno)\n", path)
        }
    }
}
