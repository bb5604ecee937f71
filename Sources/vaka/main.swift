// The `vaka` command-line tool: the command tree. Each command lives in Commands/ with its usage and syntax;
// Arguments.swift parses every command's arguments. Plain argument parsing (no outside packages).
//
// Exit status: 0 success; 1 the command failed (missing, unreadable, empty or invalid input, output that cannot
// be written, …); 2 usage error. Every failure prints one `vaka: ...` line on stderr. All output goes through
// Output.swift (write(2); never FileHandle.write, which traps on a write error).
import Foundation
import Vaka

let toolUsage = """
    Usage: vaka <command> [arguments]

    Vaka crash reporting for Swift programs on Linux.

    Commands:
      report convert FILE [--pretty]   Turn a crash report (<run-id>.crash) into a Sentry fatal event
                                       and print it as JSON to stdout.
      symbolicate FILE [--debug-dir DIR]... [--no-system-debug-dir] [--cache DIR] [--pretty] [--stats]
                                       Print the event for a crash report or event JSON with every frame
                                       resolved that the files on this machine and DIR can resolve
                                       (vaka symbolicate --help).
      debug-files check FILE... [--json]
                                       Show type, arch, code_id, debug_id and features of ELF files.
      debug-files collect DIR... --out OUTDIR
                                       Copy every ELF file under DIR into OUTDIR/.build-id/ab/cdef….debug.
      outbox list|show ...             Read the envelopes written without a DSN (vaka outbox --help).
      journal show RUN-DIR|--storage DIR [--last N] [--json]
                                       Print a run's journal: its last breadcrumbs, logs and events
                                       (what it was doing before it died; vaka journal --help).

    Options:
      -h, --help      Show this help (also: vaka report --help, vaka symbolicate --help, ...).
      --version       Print the version.

    Exit status: 0 success; 1 the command failed: a missing, unreadable or empty input file, a directory
    where a file is expected (or the reverse), an invalid report, event or envelope, output that cannot be
    written (a full disk, a closed stdout, a file over the size limit); 2 usage error (unknown command or
    option, missing or extra arguments). Every failure prints one `vaka: ...` line on stderr. A reader that
    goes away (`vaka ... | head -c1`) ends vaka by SIGPIPE, quietly, like other filters.

    """

/// `vaka report convert`.
let reportGroup = CommandGroup(name: "report", usage: reportUsage, commandList: "convert",
                               commands: ["convert": convertCommand])
/// `vaka debug-files check|collect`.
let debugFilesGroup = CommandGroup(name: "debug-files", usage: debugFilesUsage, commandList: "check or collect",
                                   commands: ["check": debugFilesCheckCommand, "collect": debugFilesCollectCommand])
/// `vaka journal show`.
let journalGroup = CommandGroup(name: "journal", usage: journalUsage, commandList: "show",
                                commands: ["show": journalShowCommand])
/// `vaka outbox list|show`: both take the same options, read before the command's name is checked.
let outboxGroup = CommandGroup(name: "outbox", usage: outboxUsage, commandList: "list or show",
                               commands: ["list": outboxListCommand, "show": outboxShowCommand],
                               sharedSyntax: outboxSyntax)

prepareOutput()
let arguments = CommandLine.arguments.dropFirst()
guard let command = arguments.first else {
    writeErr(toolUsage)
    exit(2)
}
switch command {
case _ where helpWords.contains(command): printOut(toolUsage); exit(0)
case "--version": printOut("vaka \(FatalEventBuilder.sdk.version)\n"); exit(0)
case "report": reportGroup.run(arguments.dropFirst())
case "symbolicate": symbolicateCommand.execute(arguments.dropFirst())
case "debug-files": debugFilesGroup.run(arguments.dropFirst())
case "outbox": outboxGroup.run(arguments.dropFirst())
case "journal": journalGroup.run(arguments.dropFirst())
default: fail("unknown command '\(command)' (see vaka --help)", status: 2)
}
