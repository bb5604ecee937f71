import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka

/// `vaka journal show`: a run's journal read offline, as text and JSON, one run directory or every run of a
/// storage directory, and its errors.
final class JournalCommandTests: XCTestCase {
    /// A run directory `runs/<run>` under `storage` whose journal holds a breadcrumb (with a meta and a user
    /// attribute, a tab and a newline in its body), an error log the mover consumed and an event.
    private func makeRun(_ storage: URL, _ run: String, time: UInt64 = 1_796_040_000_123_000_000) throws -> URL {
        let dir = storage.appendingPathComponent("runs/\(run)", isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let journal = try Journal(path: dir.appendingPathComponent("journal"))
        journal.append(.breadcrumb, level: LogLevel.info.rawValue, timeNs: time, category: "navigation",
                       body: "opened\tCart\n", attributes: [.init(key: "type", value: "navigation", meta: true),
                                                            .init(key: "items", value: .integer(3))])
        journal.append(.log, level: LogLevel.error.rawValue, timeNs: time + 1_000_000, body: "payment failed \(run)")
        if let log = journal.next(.log, after: nil) { journal.consume(through: log) }
        journal.append(.event, level: 0, timeNs: time + 2_000_000, body: "{\"event_id\":\"e1\"}")
        journal.close()
        return dir
    }

    func testShowPrintsEveryRecordOneLineEach() throws {
        let storage = try ScratchDirs.directory(for: self)
        let run = try makeRun(storage, "run-a")
        let result = try vaka(["journal", "show", run.path])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stderrText, "")
        XCTAssertEqual(result.stdoutText, """
            1  2026-11-30T12:00:00.123Z  breadcrumb  info  navigation  opened\\tCart\\n  @type=navigation  items=3
            2  2026-11-30T12:00:00.124Z  log  error  -  payment failed run-a  (sent)
            3  2026-11-30T12:00:00.125Z  event  -  -  {"event_id":"e1"}

            """)
        // The journal file itself, and --last.
        let tail = try vaka(["journal", "show", run.appendingPathComponent("journal").path, "--last", "1"])
        XCTAssertEqual(tail.status, 0, tail.stderrText)
        XCTAssertEqual(tail.stdoutText, "3  2026-11-30T12:00:00.125Z  event  -  -  {\"event_id\":\"e1\"}\n")
    }

    func testJSONHasTypedFields() throws {
        let storage = try ScratchDirs.directory(for: self)
        let run = try makeRun(storage, "run-a")
        let result = try vaka(["journal", "show", run.path, "--json"])
        XCTAssertEqual(result.status, 0, result.stderrText)
        let journals = try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [[String: Any]])
        XCTAssertEqual(journals.count, 1)
        XCTAssertEqual(journals[0]["run"] as? String, "run-a")
        XCTAssertEqual(journals[0]["skipped"] as? Int, 0)
        let records = try XCTUnwrap(journals[0]["records"] as? [[String: Any]])
        XCTAssertEqual(records.map { $0["seq"] as? Int }, [1, 2, 3])
        XCTAssertEqual(records.map { $0["kind"] as? String }, ["breadcrumb", "log", "event"])
        XCTAssertEqual(records[0]["level"] as? String, "info")
        XCTAssertEqual(records[2]["level"] as? Int, 0)
        XCTAssertEqual(records[0]["body"] as? String, "opened\tCart\n")
        XCTAssertEqual(records[0]["time_ns"] as? UInt64, 1_796_040_000_123_000_000)
        XCTAssertEqual(records[0]["time"] as? String, "2026-11-30T12:00:00.123Z")
        let attributes = try XCTUnwrap(records[0]["attributes"] as? [String: [String: Any]])
        XCTAssertEqual(attributes["items"]?["type"] as? String, "integer")
        XCTAssertEqual(attributes["items"]?["value"] as? Int, 3)
        XCTAssertEqual(attributes["items"]?["meta"] as? Bool, false)
        XCTAssertEqual(attributes["type"]?["value"] as? String, "navigation")
        XCTAssertEqual(attributes["type"]?["meta"] as? Bool, true)
        XCTAssertEqual(records.map { $0["consumed"] as? Bool }, [false, true, false])
    }

    func testStorageShowsEveryRunOldestFirst() throws {
        let storage = try ScratchDirs.directory(for: self)
        let older = try makeRun(storage, "run-z")
        let newer = try makeRun(storage, "run-a")
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -60)],
                                              ofItemAtPath: older.appendingPathComponent("journal").path)
        try FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: newer.appendingPathComponent("journal").path)
        let result = try vaka(["journal", "show", "--storage", storage.path, "--last", "1"])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stdoutText.split(separator: "\n").filter { $0.hasPrefix("# run ") }, ["# run run-z", "# run run-a"])
        XCTAssertEqual(result.stdoutText.split(separator: "\n").count, 4, result.stdoutText)

        let empty = try ScratchDirs.directory(for: self, "empty")
        let none = try vaka(["journal", "show", "--storage", empty.path])
        XCTAssertEqual(none.status, 0)
        XCTAssertEqual(none.stdoutText, "")
        XCTAssertTrue(none.stderrText.contains("no run journals"), none.stderrText)
    }

    func testTornRecordsAreCountedAndErrorsExitNonZero() throws {
        let storage = try ScratchDirs.directory(for: self)
        let run = try makeRun(storage, "run-a")
        // Damage the log record's body: it is skipped and counted, the others are printed.
        let file = run.appendingPathComponent("journal")
        var bytes = try Data(contentsOf: file)
        let range = try XCTUnwrap(bytes.range(of: Data("payment failed".utf8)))
        bytes[range.lowerBound] ^= 0x20
        try bytes.write(to: file)
        let result = try vaka(["journal", "show", run.path])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stdoutText.split(separator: "\n").map { $0.split(separator: " ")[0] }, ["1", "3"])
        XCTAssertTrue(result.stderrText.contains("1 torn or damaged record skipped"), result.stderrText)

        let junk = try ScratchDirs.directory(for: self, "junk").appendingPathComponent("journal")
        try Data(repeating: 0x41, count: 8192).write(to: junk)
        let notJournal = try vaka(["journal", "show", junk.path])
        XCTAssertEqual(notJournal.status, 1)
        XCTAssertEqual(notJournal.stderrText, "vaka: \(junk.path): not a Vaka journal\n")
        let missing = try vaka(["journal", "show", storage.appendingPathComponent("nothing").path])
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderrText.contains("No such file"), missing.stderrText)
        for arguments in [["journal"], ["journal", "show"], ["journal", "show", "a", "b"], ["journal", "list"],
                          ["journal", "show", run.path, "--last", "-1"], ["journal", "show", run.path, "--storage", storage.path]] {
            let usage = try vaka(arguments)
            XCTAssertEqual(usage.status, 2, "\(arguments): \(usage.stderrText)")
            XCTAssertTrue(usage.stderrText.hasPrefix("vaka: "), "\(arguments): \(usage.stderrText)")
        }
        let help = try vaka(["journal", "--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdoutText.hasPrefix("Usage: vaka journal show RUN-DIR"), help.stdoutText)
    }
    func testVakaStorageIsTheStorageDirectoryWithoutRunDirOrStorageOption() throws {
        let storage = try ScratchDirs.directory(for: self)
        let run = try makeRun(storage, "run-a")
        let cli = try Paths.built(Paths.cli)
        let result = try runProcess("/usr/bin/env", ["VAKA_STORAGE=\(storage.path)", cli, "journal", "show", "--last", "1"])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stdoutText, "# run run-a\n3  2026-11-30T12:00:00.125Z  event  -  -  {\"event_id\":\"e1\"}\n")
        // --storage wins over $VAKA_STORAGE; a RUN-DIR is read as one run (no `# run` line).
        let empty = try ScratchDirs.directory(for: self, "empty")
        let option = try runProcess("/usr/bin/env", ["VAKA_STORAGE=\(storage.path)", cli, "journal", "show", "--storage", empty.path])
        XCTAssertEqual(option.status, 0, option.stderrText)
        XCTAssertEqual(option.stdoutText, "")
        let one = try runProcess("/usr/bin/env", ["VAKA_STORAGE=\(empty.path)", cli, "journal", "show", run.path, "--last", "1"])
        XCTAssertEqual(one.status, 0, one.stderrText)
        XCTAssertEqual(one.stdoutText, "3  2026-11-30T12:00:00.125Z  event  -  -  {\"event_id\":\"e1\"}\n")
        let help = try vaka(["journal", "--help"])
        XCTAssertTrue(help.stdoutText.contains("$VAKA_STORAGE"), help.stdoutText)
    }

    func testStorageDirectoryGivenAsRunDirGetsAHint() throws {
        let storage = try ScratchDirs.directory(for: self)
        _ = try makeRun(storage, "run-a")
        let result = try vaka(["journal", "show", storage.path])
        XCTAssertEqual(result.status, 1)
        XCTAssertEqual(result.stderrText, "vaka: \(storage.path)/journal: No such file or directory (a storage directory? use --storage \(storage.path))\n")
        // A directory without runs/ gets no hint.
        let plain = try ScratchDirs.directory(for: self, "plain")
        let other = try vaka(["journal", "show", plain.path])
        XCTAssertEqual(other.status, 1)
        XCTAssertEqual(other.stderrText, "vaka: \(plain.path)/journal: No such file or directory\n")
    }

    func testJSONOfTheJournalFileNamesItsRun() throws {
        let storage = try ScratchDirs.directory(for: self)
        let run = try makeRun(storage, "run-a")
        let result = try vaka(["journal", "show", run.appendingPathComponent("journal").path, "--json"])
        XCTAssertEqual(result.status, 0, result.stderrText)
        let journals = try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [[String: Any]])
        XCTAssertEqual(journals.first?["run"] as? String, "run-a")
    }

    /// Category, body, keys and values are written as ``ConsoleLogSink`` writes them (values with a space, `=`,
    /// `"`, `\`, a control character or empty are quoted).
    func testTextQuotesValuesAsTheConsoleSinkDoes() throws {
        let storage = try ScratchDirs.directory(for: self)
        let dir = storage.appendingPathComponent("runs/run-q", isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let journal = try Journal(path: dir.appendingPathComponent("journal"))
        let attributes: [String: LogAttribute] = ["a": "two words", "b": "k=v", "c": "say \"hi\"", "d": "", "e": "back\\slash",
                                                  "f": "tab\there", "g": "plain", "h": 0.5, "i": false]
        journal.append(.log, level: LogLevel.warn.rawValue, timeNs: 1_796_040_000_123_000_000, body: "esc \u{1b} \\ \"q\"",
                       attributes: attributes.keys.sorted().map { .init(key: $0, value: attributes[$0]!) })
        journal.close()
        let result = try vaka(["journal", "show", dir.path])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stdoutText, #"""
            1  2026-11-30T12:00:00.123Z  log  warn  -  esc \u{1b} \ "q"  a="two words"  b="k=v"  c="say \"hi\""  d=""  e="back\\slash"  f="tab\there"  g=plain  h=0.5  i=false

            """#)
        // The same body and attributes as the console sink writes them.
        let console = ConsoleLogSink.line(LogRecord(timestamp: 1_796_040_000.123, level: .warn, body: "esc \u{1b} \\ \"q\"",
                                                    attributes: attributes))
        let tail = result.stdoutText.components(separatedBy: "  -  ")[1].replacingOccurrences(of: "  ", with: " ")
        XCTAssertTrue(console.hasSuffix(" warn  " + tail), "\(console)\(tail)")
    }
}
