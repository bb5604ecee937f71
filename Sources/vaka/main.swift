// The `vaka` command-line tool. Plain argument parsing (no outside packages).
//
// Exit status: 0 success; 1 the command failed (unreadable or invalid report, …); 2 usage error.
import Foundation
import Vaka

let toolUsage = """
    Usage: vaka <command> [arguments]

    Vaka crash reporting for Swift programs on Linux.

    Commands:
      report convert FILE [--pretty]   Turn a crash report (<run-id>.crash) into a Sentry fatal event
                                       and print it as JSON to stdout.
      outbox list|show ...             Read the envelopes written without a DSN (vaka outbox --help).

    Options:
      -h, --help      Show this help (also: vaka report --help).
      --version       Print the version.

    """

let reportUsage = """
    Usage: vaka report convert FILE [--pretty]

    Reads a Vaka crash report (docs/report-format.md) and prints the Sentry fatal event for it as JSON on
    stdout: the signal, the crashed thread's frames (oldest first), registers, the images the frames point
    into (code_id, debug_id), and function names from the images' ELF symbol tables when the files on this
    machine still have the report's build IDs.

    Arguments:
      FILE            The report file, e.g. ~/.local/state/vaka/<app>/crashes/<run-id>.crash.

    Options:
      --pretty        Indent the JSON.
      -h, --help      Show this help.

    A report that was cut short (no `end` line) still converts when it has its signal line: the event then
    has extra.report_truncated = true and tag vaka.report_truncated = "true", and a warning goes to stderr.
    Errors go to stderr with exit status 1; usage errors exit with status 2.

    """

func fail(_ message: String, status: Int32) -> Never {
    FileHandle.standardError.write(Data("vaka: \(message)\n".utf8))
    exit(status)
}

func printOut(_ text: String) {
    FileHandle.standardOutput.write(Data(text.utf8))
}

func convert(_ arguments: ArraySlice<String>) -> Never {
    var pretty = false
    var files: [String] = []
    var onlyFiles = false
    for argument in arguments {
        if onlyFiles { files.append(argument); continue }
        switch argument {
        case "--pretty": pretty = true
        case "-h", "--help": printOut(reportUsage); exit(0)
        case "--": onlyFiles = true
        default:
            if argument.hasPrefix("-") && argument != "-" {
                fail("unknown option \(argument) for 'report convert' (see vaka report --help)", status: 2)
            }
            files.append(argument)
        }
    }
    guard files.count == 1 else {
        fail(files.isEmpty ? "report convert needs a FILE (see vaka report --help)"
                           : "report convert takes one FILE, got \(files.count)", status: 2)
    }
    let path = files[0]
    let report: CrashReport
    do {
        report = try CrashReport(contentsOf: path)
    } catch let error as CrashReportError {
        fail("\(path): \(error)", status: 1)
    } catch {
        fail("\(path): \(error)", status: 1)
    }
    let event = FatalEventBuilder().event(from: report)
    let json: Data
    do {
        json = try event.jsonData(pretty: pretty)
    } catch {
        fail("\(path): cannot encode the event: \(error)", status: 1)
    }
    if report.isTruncated {
        FileHandle.standardError.write(Data("vaka: warning: \(path): the report is truncated; the event is partial\n".utf8))
    }
    let skipped = report.diagnostics.skippedLongLines + report.diagnostics.malformedLines
    if skipped > 0 {
        let first = report.diagnostics.problems.first.map { " (first: \($0))" } ?? ""
        FileHandle.standardError.write(Data("vaka: warning: \(path): skipped \(skipped) bad line(s)\(first)\n".utf8))
    }
    FileHandle.standardOutput.write(json)
    FileHandle.standardOutput.write(Data("\n".utf8))
    exit(0)
}

func report(_ arguments: ArraySlice<String>) -> Never {
    guard let command = arguments.first else {
        FileHandle.standardError.write(Data(reportUsage.utf8))
        exit(2)
    }
    switch command {
    case "-h", "--help", "help": printOut(reportUsage); exit(0)
    case "convert": convert(arguments.dropFirst())
    default: fail("unknown report command '\(command)' (see vaka report --help)", status: 2)
    }
}

let arguments = CommandLine.arguments.dropFirst()
guard let command = arguments.first else {
    FileHandle.standardError.write(Data(toolUsage.utf8))
    exit(2)
}
switch command {
case "-h", "--help", "help": printOut(toolUsage); exit(0)
case "--version": printOut("vaka \(FatalEventBuilder.sdk.version)\n"); exit(0)
case "report": report(arguments.dropFirst())
case "outbox": outboxCommand(arguments.dropFirst())
default: fail("unknown command '\(command)' (see vaka --help)", status: 2)
}
