// `vaka report convert`: a crash report to its Sentry fatal event.
import Foundation
import Vaka

let reportUsage = """
    Usage: vaka report convert FILE [--pretty]

    Reads a Vaka crash report (docs/report-format.md) and prints the Sentry fatal event for it as JSON on
    stdout: the signal, the crashed thread's frames (oldest first), registers, every other thread the report
    lists (threads.values: name, frames, and a state saying why one was described from /proc), the images
    the frames point into (code_id, debug_id), and for each frame the function (ELF symbol tables or
    DWARF), file and line (DWARF) and inlined frames, when the files on this machine (or debug files in
    /usr/lib/debug) have the report's build IDs. For debug files kept elsewhere use
    `vaka symbolicate FILE --debug-dir DIR`.

    Arguments:
      FILE            The report file, e.g. ~/.local/state/vaka/<app>-<hash>/crashes/<run-id>.crash.

    Options:
      --pretty        Indent the JSON.
      -h, --help      Show this help.

    A report that was cut short (no `end` line) still converts when it has its signal line: the event then
    has extra.report_truncated = true and tag vaka.report_truncated = "true", and a warning goes to stderr.
    Errors go to stderr with exit status 1; usage errors exit with status 2.

    """

/// `vaka report convert`.
let convertCommand = Command(syntax: ArgumentSyntax(command: "report convert", helpCommand: "vaka report",
                                                    usage: reportUsage, flags: ["--pretty"]),
                             run: { convert($0) })

/// Runs `vaka report convert FILE [--pretty]`; never returns.
func convert(_ arguments: ParsedArguments) -> Never {
    guard arguments.operands.count == 1 else {
        fail(arguments.operands.isEmpty ? "report convert needs a FILE (see vaka report --help)"
                                        : "report convert takes one FILE, got \(arguments.operands.count)", status: 2)
    }
    let path = arguments.operands[0]
    requireInputFile(path)
    let report: CrashReport
    do {
        report = try CrashReport(contentsOf: path)
    } catch {
        fail("\(path): \(error)", status: 1)
    }
    let event = FatalEventBuilder().event(from: report)
    let json: Data
    do {
        json = try event.jsonData(pretty: arguments.has("--pretty"))
    } catch {
        fail("\(path): cannot encode the event: \(error)", status: 1)
    }
    if report.isTruncated {
        writeErr("vaka: warning: \(path): the report is truncated; the event is partial\n")
    }
    let skipped = report.diagnostics.skippedLongLines + report.diagnostics.malformedLines
    if skipped > 0 {
        let first = report.diagnostics.problems.first.map { " (first: \($0))" } ?? ""
        writeErr("vaka: warning: \(path): skipped \(skipped) bad line(s)\(first)\n")
    }
    writeOut(json + Data("\n".utf8))
    exit(0)
}
