import Foundation
import XCTest
import VakaTestSupport

/// The `vaka` executable, run as a child process.
final class CommandLineTests: XCTestCase {
    private func write(_ data: Data, _ name: String) throws -> String {
        let file = try ScratchDirs.directory(for: self).appendingPathComponent(name)
        try data.write(to: file)
        return file.path
    }

    func testConvertPrintsTheEventJSON() throws {
        let file = try write(Data(try exampleCrashReport().utf8), "example.crash")
        let result = try vaka(["report", "convert", file])
        XCTAssertEqual(result.status, 0, result.stderrText)
        XCTAssertEqual(result.stderrText, "")
        XCTAssertFalse(result.stdoutText.dropLast().contains("\n"), "compact JSON is one line")
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        XCTAssertEqual(json["event_id"] as? String, "5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b")
        XCTAssertEqual(json["level"] as? String, "fatal")

        let pretty = try vaka(["report", "convert", "--pretty", file])
        XCTAssertEqual(pretty.status, 0)
        XCTAssertTrue(pretty.stdoutText.contains("\n  \"contexts\" : {"), pretty.stdoutText)
    }

    func testTruncatedReportGivesAPartialEventAndAWarning() throws {
        let example = try exampleCrashReport()
        let cut = String(example[..<example.range(of: "frame 0x55d4c2a0b3a0")!.lowerBound])
        let result = try vaka(["report", "convert", try write(Data(cut.utf8), "cut.crash")])
        XCTAssertEqual(result.status, 0)
        XCTAssertTrue(result.stderrText.contains("truncated"), result.stderrText)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any])
        XCTAssertEqual((json["extra"] as? [String: Any])?["report_truncated"] as? Bool, true)
        XCTAssertEqual((json["tags"] as? [String: String])?["vaka.report_truncated"], "true")
    }

    func testBadInputsExitNonZeroWithAMessage() throws {
        var rng = SplitMix64(seed: 42)
        let random = Data((0..<65536).map { _ in UInt8.random(in: 0...255, using: &rng) })
        let cases: [(String, Data, String)] = [
            ("empty.crash", Data(), "empty"),
            ("random.crash", random, "not a Vaka crash report"),
            ("line.crash", Data(repeating: 0x41, count: 10 * 1024 * 1024) + Data("\n".utf8), "not a Vaka crash report"),
            ("v3.crash", Data("VAKA-CRASH 3\nsignal 11 SIGSEGV\nend\n".utf8), "unsupported report format version"),
            ("nosignal.crash", Data("VAKA-CRASH 1\npid 1\n".utf8), "truncated before its signal line"),
        ]
        for (name, data, message) in cases {
            let path = try write(data, name)
            let result = try vaka(["report", "convert", path])
            XCTAssertEqual(result.status, 1, name)
            XCTAssertEqual(result.stdout, Data(), name)
            XCTAssertTrue(result.stderrText.hasPrefix("vaka: \(path): "), "\(name): \(result.stderrText)")
            XCTAssertTrue(result.stderrText.contains(message), "\(name): \(result.stderrText)")
        }
        let missing = try vaka(["report", "convert", "/nonexistent/x.crash"])
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderrText.contains("No such file"), missing.stderrText)
        let directory = try vaka(["report", "convert", "/tmp"])
        XCTAssertEqual(directory.status, 1)
    }

    func testHelpAndUsageErrors() throws {
        let help = try vaka(["--help"])
        XCTAssertEqual(help.status, 0)
        XCTAssertTrue(help.stdoutText.contains("report convert FILE [--pretty]"))
        let reportHelp = try vaka(["report", "--help"])
        XCTAssertEqual(reportHelp.status, 0)
        XCTAssertTrue(reportHelp.stdoutText.contains("Usage: vaka report convert FILE [--pretty]"))
        XCTAssertEqual(try vaka(["report", "convert", "--help"]).status, 0)
        for arguments in [[], ["frobnicate"], ["report"], ["report", "explode"], ["report", "convert"],
                          ["report", "convert", "a", "b"], ["report", "convert", "--bogus", "a"]] {
            let result = try vaka(arguments)
            XCTAssertEqual(result.status, 2, "\(arguments)")
            XCTAssertFalse(result.stderrText.isEmpty, "\(arguments)")
        }
    }

    // MARK: - Every command on bad inputs

    /// One `vaka: …` line on stderr, nothing on stdout, the documented status.
    private func assertOneLineFailure(_ arguments: [String], status: Int32, containing text: String? = nil,
                                      file: StaticString = #filePath, line: UInt = #line) throws {
        let result = try vaka(arguments)
        XCTAssertEqual(result.status, status, "\(arguments): \(result.stderrText)", file: file, line: line)
        XCTAssertEqual(result.stdout, Data(), "\(arguments)", file: file, line: line)
        let lines = result.stderrText.split(separator: "\n", omittingEmptySubsequences: false)
        XCTAssertEqual(lines.count, 2, "\(arguments): one line expected, got \(result.stderrText.debugDescription)", file: file, line: line)
        XCTAssertTrue(result.stderrText.hasPrefix("vaka: "), "\(arguments): \(result.stderrText)", file: file, line: line)
        XCTAssertFalse(result.stderrText.contains("couldn’t") || result.stderrText.contains("NSCocoaErrorDomain")
                       || result.stderrText.contains("Error Domain"), "raw Foundation error: \(result.stderrText)", file: file, line: line)
        if let text {
            XCTAssertTrue(result.stderrText.contains(text), "\(arguments): \(result.stderrText) lacks \(text)", file: file, line: line)
        }
    }

    /// Known bad inputs (`outbox list --storage MISSING` once exited 0 silently; `symbolicate DIR` printed a
    /// raw Foundation error) and every command × missing path, directory, unreadable file, empty file.
    func testEveryCommandGivesOneClearLineAndStatus1ForABadInputFile() throws {
        let dir = try ScratchDirs.directory(for: self)
        let missing = dir.appendingPathComponent("missing").path
        let empty = dir.appendingPathComponent("empty").path
        try Data().write(to: URL(fileURLWithPath: empty))
        let directory = dir.appendingPathComponent("subdir").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Open succeeds but read(2) fails with EIO, also for root (file modes do not stop root).
        let unreadable = "/proc/self/mem"
        let fileCommands: [[String]] = [["report", "convert"], ["symbolicate"], ["debug-files", "check"], ["outbox", "show"]]
        for command in fileCommands {
            try assertOneLineFailure(command + [missing], status: 1, containing: "No such file or directory")
            try assertOneLineFailure(command + [directory], status: 1, containing: "is a directory")
            try assertOneLineFailure(command + [unreadable], status: 1, containing: "cannot read")
            try assertOneLineFailure(command + [empty], status: 1, containing: "empty")
        }
        // symbolicate DIR: the message names the path, not a Foundation error.
        try assertOneLineFailure(["symbolicate", directory], status: 1, containing: "vaka: \(directory): is a directory")

        // outbox list --storage MISSING and its variants.
        try assertOneLineFailure(["outbox", "list", "--storage", missing], status: 1, containing: "vaka: \(missing): No such file")
        try assertOneLineFailure(["outbox", "list", "--storage=\(missing)"], status: 1, containing: "No such file")
        try assertOneLineFailure(["outbox", "list", "--storage", empty], status: 1, containing: "is not a directory")
        try assertOneLineFailure(["outbox", "show", "1", "--storage", missing], status: 1, containing: "No such file")
        // An existing storage without envelopes is not an error: nothing on stdout, a note, status 0.
        let fresh = try vaka(["outbox", "list", "--storage", directory])
        XCTAssertEqual(fresh.status, 0, fresh.stderrText)
        XCTAssertEqual(fresh.stdout, Data())
        XCTAssertTrue(fresh.stderrText.hasPrefix("vaka: no envelopes"), fresh.stderrText)

        // debug-files collect: a missing DIR, a non-ELF FILE, an --out that is a file.
        let out = dir.appendingPathComponent("out").path
        try assertOneLineFailure(["debug-files", "collect", missing, "--out", out], status: 1, containing: "No such file")
        try assertOneLineFailure(["debug-files", "collect", empty, "--out", out], status: 1, containing: "empty")
        try assertOneLineFailure(["debug-files", "collect", directory, "--out", empty], status: 1, containing: "is not a directory")
        try assertOneLineFailure(["debug-files", "collect", directory, "--out", empty + "/x"], status: 1, containing: "is not a directory")
        // symbolicate --debug-dir must be a directory.
        let report = try write(Data(try exampleCrashReport().utf8), "example.crash")
        try assertOneLineFailure(["symbolicate", report, "--debug-dir", missing], status: 1, containing: "No such file")
        try assertOneLineFailure(["symbolicate", report, "--debug-dir", empty], status: 1, containing: "is not a directory")
        // Content that is no input of that command.
        let text = try write(Data("hello\n".utf8), "hello.txt")
        try assertOneLineFailure(["symbolicate", text], status: 1, containing: "neither a Vaka crash report")
        try assertOneLineFailure(["outbox", "show", text], status: 1, containing: "not a Sentry envelope")
        try assertOneLineFailure(["debug-files", "check", text], status: 1, containing: "not a readable ELF file")
    }

    /// Bad arguments: status 2 and one line, for every command; help texts state the statuses.
    func testEveryCommandGivesOneClearLineAndStatus2ForBadArguments() throws {
        let cases: [[String]] = [
            ["frobnicate"], ["report"], ["report", "explode"], ["report", "convert"], ["report", "convert", "a", "b"],
            ["report", "convert", "--bogus", "a"], ["symbolicate"], ["symbolicate", "a", "b"], ["symbolicate", "--bogus", "a"],
            ["symbolicate", "a", "--debug-dir"], ["debug-files"], ["debug-files", "explode"], ["debug-files", "check"],
            ["debug-files", "check", "--bogus", "a"], ["debug-files", "collect", "a"], ["debug-files", "collect", "--out", "o"],
            ["debug-files", "collect", "a", "--out"], ["outbox"], ["outbox", "explode"], ["outbox", "list", "x", "--storage", "/"],
            ["outbox", "list", "--storage"], ["outbox", "list", "--bogus"], ["outbox", "show"], ["outbox", "show", "a", "b"],
        ]
        for arguments in cases {
            try assertOneLineFailure(arguments, status: 2)
        }
        for help in [["--help"], ["symbolicate", "--help"], ["debug-files", "--help"], ["outbox", "--help"]] {
            let result = try vaka(help)
            XCTAssertEqual(result.status, 0)
            XCTAssertTrue(result.stdoutText.contains("Exit status: 0 success"), "\(help): \(result.stdoutText)")
        }
    }

    /// `vaka --help` names every option each command's own `--help` shows in its `Usage:` lines (outbox's line
    /// there sends to `vaka outbox --help`).
    func testToolHelpListsEveryOptionOfEachCommand() throws {
        let tool = try vaka(["--help"])
        XCTAssertEqual(tool.status, 0)
        for command in [["report"], ["symbolicate"], ["debug-files"], ["journal"]] {
            let own = try vaka(command + ["--help"])
            XCTAssertEqual(own.status, 0, "\(command)")
            let usage = own.stdoutText.components(separatedBy: "\n\n").first ?? ""
            let options = usage.split(whereSeparator: { " []|.\n".contains($0) }).filter { $0.hasPrefix("--") }
            XCTAssertFalse(options.isEmpty, "\(command): \(own.stdoutText)")
            for option in options {
                XCTAssertTrue(tool.stdoutText.contains(option), "vaka --help lacks \(option) of \(command): \(tool.stdoutText)")
            }
        }
    }

    func testOutboxShowPrintsEachItemsHeader() throws {
        let payload = #"{"event_id":"5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b","message":"hello"}"#
        let text = "attachment body"
        let envelope = "{\"event_id\":\"5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b\"}\n"
            + "{\"type\":\"event\",\"length\":\(payload.utf8.count),\"content_type\":\"application/json\"}\n\(payload)\n"
            + "{\"type\":\"attachment\",\"length\":\(text.utf8.count),\"filename\":\"note.txt\",\"content_type\":\"text/plain\",\"attachment_type\":\"event.attachment\"}\n\(text)\n"
        let file = try write(Data(envelope.utf8), "items.envelope")
        let result = try vaka(["outbox", "show", file])
        XCTAssertEqual(result.status, 0, result.stderrText)
        let lines = result.stdoutText.components(separatedBy: "\n")
        XCTAssertTrue(lines.contains(#"# item 1: event (\#(payload.utf8.count) bytes) {"content_type":"application/json","length":\#(payload.utf8.count),"type":"event"}"#),
                      result.stdoutText)
        XCTAssertTrue(lines.contains(#"# item 2: attachment (15 bytes) {"attachment_type":"event.attachment","content_type":"text/plain","filename":"note.txt","length":15,"type":"attachment"}"#),
                      result.stdoutText)
        XCTAssertTrue(lines.contains(text), result.stdoutText)
    }

    /// The one argument parser: each usage error's exact line, for every command.
    func testUsageErrorsReadTheSameForEveryCommand() throws {
        let cases: [([String], String)] = [
            (["frobnicate"], "vaka: unknown command 'frobnicate' (see vaka --help)"),
            (["report"], "vaka: report needs a command: convert (see vaka report --help)"),
            (["report", "explode"], "vaka: unknown report command 'explode' (see vaka report --help)"),
            (["report", "convert"], "vaka: report convert needs a FILE (see vaka report --help)"),
            (["report", "convert", "a", "b"], "vaka: report convert takes one FILE, got 2"),
            (["report", "convert", "--bogus", "a"], "vaka: unknown option --bogus for 'report convert' (see vaka report --help)"),
            (["report", "convert", "--pretty=1", "a"], "vaka: unknown option --pretty=1 for 'report convert' (see vaka report --help)"),
            (["symbolicate"], "vaka: symbolicate needs a FILE (see vaka symbolicate --help)"),
            (["symbolicate", "a", "b"], "vaka: symbolicate takes one FILE, got 2"),
            (["symbolicate", "--bogus", "a"], "vaka: unknown option --bogus for 'vaka symbolicate' (see vaka symbolicate --help)"),
            (["symbolicate", "a", "--debug-dir"], "vaka: --debug-dir needs a value (see vaka symbolicate --help)"),
            (["debug-files"], "vaka: debug-files needs a command: check or collect (see vaka debug-files --help)"),
            (["debug-files", "explode"], "vaka: unknown debug-files command 'explode' (see vaka debug-files --help)"),
            (["debug-files", "check"], "vaka: debug-files check needs a FILE (see vaka debug-files --help)"),
            (["debug-files", "check", "--bogus", "a"],
             "vaka: unknown option --bogus for 'vaka debug-files check' (see vaka debug-files check --help)"),
            (["debug-files", "collect", "a"], "vaka: debug-files collect needs one --out OUTDIR (see vaka debug-files --help)"),
            (["debug-files", "collect", "--out", "o"], "vaka: debug-files collect needs a DIR (see vaka debug-files --help)"),
            (["debug-files", "collect", "a", "--out"], "vaka: --out needs a value (see vaka debug-files collect --help)"),
            (["debug-files", "collect", "a", "--out", "o", "--out", "p"],
             "vaka: debug-files collect needs one --out OUTDIR (see vaka debug-files --help)"),
            (["outbox"], "vaka: outbox needs a command: list or show (see vaka outbox --help)"),
            (["outbox", "explode"], "vaka: unknown outbox command 'explode' (see vaka outbox --help)"),
            // outbox reads its options before it checks the command's name.
            (["outbox", "explode", "--bogus"], "vaka: unknown option --bogus for 'outbox' (see vaka outbox --help)"),
            (["outbox", "--storage", "/", "list"], "vaka: unknown outbox command '--storage' (see vaka outbox --help)"),
            (["outbox", "list", "x", "--storage", "/"], "vaka: outbox list takes no arguments"),
            (["outbox", "list", "--storage"], "vaka: --storage needs a directory"),
            (["outbox", "list", "--bogus"], "vaka: unknown option --bogus for 'outbox' (see vaka outbox --help)"),
            (["outbox", "show"], "vaka: outbox show takes one ENVELOPE (see vaka outbox --help)"),
            (["outbox", "show", "a", "b"], "vaka: outbox show takes one ENVELOPE (see vaka outbox --help)"),
            // Negative numbers are outbox indexes, `-` and `--` are not.
            (["outbox", "show", "-1", "-2"], "vaka: outbox show takes one ENVELOPE (see vaka outbox --help)"),
            (["outbox", "show", "-"], "vaka: unknown option - for 'outbox' (see vaka outbox --help)"),
            (["outbox", "show", "--"], "vaka: unknown option -- for 'outbox' (see vaka outbox --help)"),
        ]
        for (arguments, message) in cases {
            let result = try vaka(arguments)
            XCTAssertEqual(result.status, 2, "\(arguments)")
            XCTAssertEqual(result.stderrText, message + "\n", "\(arguments)")
            XCTAssertEqual(result.stdout, Data(), "\(arguments)")
        }
        // `--` ends the options of the file commands: what follows is a file name.
        for arguments in [["report", "convert", "--", "--pretty"], ["symbolicate", "--", "--pretty"]] {
            let result = try vaka(arguments)
            XCTAssertEqual(result.status, 1, "\(arguments)")
            XCTAssertEqual(result.stderrText, "vaka: --pretty: No such file or directory\n", "\(arguments)")
        }
    }

    /// `-h`/`--help` anywhere in a command's arguments prints its group's usage, as `vaka GROUP --help` does.
    func testHelpOfEveryCommandIsItsGroupsUsage() throws {
        let pairs: [([String], [String])] = [
            (["report", "convert", "a", "--help"], ["report", "help"]),
            (["symbolicate", "-h", "--bogus"], ["symbolicate", "--help"]),
            (["debug-files", "check", "-h"], ["debug-files", "--help"]),
            (["debug-files", "collect", "--help"], ["debug-files", "-h"]),
            (["outbox", "show", "1", "--help"], ["outbox", "help"]),
            (["outbox", "explode", "--help"], ["outbox", "--help"]),
        ]
        for (command, group) in pairs {
            let asked = try vaka(command)
            let usage = try vaka(group)
            XCTAssertEqual(asked.status, 0, "\(command)")
            XCTAssertEqual(usage.status, 0, "\(group)")
            XCTAssertTrue(usage.stdoutText.hasPrefix("Usage: vaka "), "\(group): \(usage.stdoutText)")
            XCTAssertEqual(asked.stdoutText, usage.stdoutText, "\(command)")
        }
    }
}
