// The `vaka` command-line tool. Plain argument parsing (no outside packages).
//
// Exit status: 0 success; 1 the command failed (missing, unreadable, empty or invalid input, output that cannot
// be written, …); 2 usage error. Every failure prints one `vaka: ...` line on stderr. All output goes through
// Output.swift (write(2); never FileHandle.write, which traps on a write error).
import Foundation
import Vaka
import VakaSymbolication

let toolUsage = """
    Usage: vaka <command> [arguments]

    Vaka crash reporting for Swift programs on Linux.

    Commands:
      report convert FILE [--pretty]   Turn a crash report (<run-id>.crash) into a Sentry fatal event
                                       and print it as JSON to stdout.
      symbolicate FILE [--debug-dir DIR]... [--pretty]
                                       Print the event for a crash report or event JSON with every frame
                                       resolved that the files on this machine and DIR can resolve.
      debug-files check FILE... [--json]
                                       Show type, arch, code_id, debug_id and features of ELF files.
      debug-files collect DIR... --out OUTDIR
                                       Copy every ELF file under DIR into OUTDIR/.build-id/ab/cdef….debug.
      outbox list|show ...             Read the envelopes written without a DSN (vaka outbox --help).

    Options:
      -h, --help      Show this help (also: vaka report --help, vaka symbolicate --help, ...).
      --version       Print the version.

    Exit status: 0 success; 1 the command failed: a missing, unreadable or empty input file, a directory
    where a file is expected (or the reverse), an invalid report, event or envelope, output that cannot be
    written (a full disk, a closed stdout, a file over the size limit); 2 usage error (unknown command or
    option, missing or extra arguments). Every failure prints one `vaka: ...` line on stderr. A reader that
    goes away (`vaka ... | head -c1`) ends vaka by SIGPIPE, quietly, like other filters.

    """

let reportUsage = """
    Usage: vaka report convert FILE [--pretty]

    Reads a Vaka crash report (docs/report-format.md) and prints the Sentry fatal event for it as JSON on
    stdout: the signal, the crashed thread's frames (oldest first), registers, the images the frames point
    into (code_id, debug_id), and for each frame the function (ELF symbol tables or DWARF), file and line
    (DWARF) and inlined frames, when the files on this machine (or debug files in /usr/lib/debug) have the
    report's build IDs. For debug files kept elsewhere use `vaka symbolicate FILE --debug-dir DIR`.

    Arguments:
      FILE            The report file, e.g. ~/.local/state/vaka/<app>-<hash>/crashes/<run-id>.crash.

    Options:
      --pretty        Indent the JSON.
      -h, --help      Show this help.

    A report that was cut short (no `end` line) still converts when it has its signal line: the event then
    has extra.report_truncated = true and tag vaka.report_truncated = "true", and a warning goes to stderr.
    Errors go to stderr with exit status 1; usage errors exit with status 2.

    """

/// Prints `vaka: <message>` on stderr and exits with `status`.
func fail(_ message: String, status: Int32) -> Never {
    writeErr("vaka: \(message)\n")
    exit(status)
}

/// Why `path` cannot serve as an input file, as the text after `vaka: PATH: `, or `nil` when it is a
/// non-empty regular file that can be read. Every command checks its input files with this, so a missing
/// path, a directory, an unreadable or an empty file give the same one-line message everywhere.
func inputFileProblem(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { return String(cString: strerror(errno)) }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { return "cannot read: \(String(cString: strerror(errno)))" }
    switch info.st_mode & S_IFMT {
    case S_IFREG: break
    case S_IFDIR: return "is a directory, expected a file"
    default: return "is not a regular file (a device, FIFO or socket)"
    }
    // Read one byte: the size of /proc files is 0, and a file can be open but unreadable (EIO, EISDIR...).
    var byte: UInt8 = 0
    while true {
        let n = pread(fd, &byte, 1, 0)
        if n < 0 && errno == EINTR { continue }
        if n < 0 { return "cannot read: \(String(cString: strerror(errno)))" }
        return n == 0 ? "the file is empty" : nil
    }
}

/// Exits with status 1 and one `vaka: PATH: …` line when `path` is not a readable, non-empty regular file.
func requireInputFile(_ path: String) {
    if let problem = inputFileProblem(path) { fail("\(path): \(problem)", status: 1) }
}

/// The content of the input file at `path` (checked with ``requireInputFile(_:)``); exits with status 1 and
/// one `vaka: PATH: …` line when it cannot be read.
func readInputFile(_ path: String) -> Data {
    requireInputFile(path)
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { fail("\(path): \(String(cString: strerror(errno)))", status: 1) }
    defer { close(fd) }
    var data = Data()
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n < 0 { fail("\(path): cannot read: \(String(cString: strerror(errno)))", status: 1) }
        if n == 0 { return data }
        data.append(contentsOf: chunk[0..<n])
    }
}

/// Creates `path` and its missing parents (mode 0755 less the umask); exits with status 1 and one
/// `vaka: PATH: …` line when a part cannot be created or is not a directory.
func makeDirectories(_ path: String) {
    var partial = path.hasPrefix("/") ? "" : "."
    for component in path.split(separator: "/") {
        partial += "/" + component
        if mkdir(partial, 0o755) != 0 && errno != EEXIST {
            fail("\(path): cannot create the directory \(partial): \(String(cString: strerror(errno)))", status: 1)
        }
        var info = stat()
        guard stat(partial, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            fail("\(partial.hasPrefix("./") ? String(partial.dropFirst(2)) : partial): is not a directory", status: 1)
        }
    }
}

/// Exits with status 1 and one `vaka: DIR: …` line unless `path` is an existing directory that can be listed.
func requireDirectory(_ path: String) {
    var info = stat()
    guard stat(path, &info) == 0 else { fail("\(path): \(String(cString: strerror(errno)))", status: 1) }
    guard info.st_mode & S_IFMT == S_IFDIR else { fail("\(path): is not a directory", status: 1) }
    guard let dir = opendir(path) else { fail("\(path): cannot list: \(String(cString: strerror(errno)))", status: 1) }
    closedir(dir)
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
        json = try event.jsonData(pretty: pretty)
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

let symbolicateUsage = """
    Usage: vaka symbolicate FILE [--debug-dir DIR]... [--no-system-debug-dir] [--pretty] [--stats]

    Prints the Sentry event for FILE with every frame resolved that can be: function (demangled), symbol,
    file, line and inlined frames. FILE is a Vaka crash report (<run-id>.crash, converted as by
    `vaka report convert`) or a Sentry event JSON (frames re-resolved with its debug_meta.images).

    Each image is found by its GNU build ID: the image file itself when its build ID still matches, else
    a debug file in a --debug-dir (GNU layout DIR/.build-id/ab/cdef….debug, as written by
    `vaka debug-files collect`, or any tree of ELF files) or in /usr/lib/debug. A stripped image's
    .gnu_debuglink is followed too (beside it, in .debug/, below each --debug-dir and /usr/lib/debug; the
    CRC must match), and a .gnu_debugdata section (MiniDebugInfo) gives its function names.

    Options:
      --debug-dir DIR   Also look for debug files in DIR (repeatable; searched in order).
      --no-system-debug-dir
                        Do not look in /usr/lib/debug (distro debug packages such as libc6-dbg; their
                        compressed DWARF is the slowest part of a symbolication).
      --pretty          Indent the JSON.
      --stats           Print one JSON line to stderr: {"frames","resolved_frames","files_opened","symbolicate_ms",
                        "cpu_ms"}: wall and CPU (user + system, all threads) milliseconds spent reading,
                        converting and resolving, files opened included.
      -h, --help        Show this help.

    Exit status: 0 success; 1 FILE or a --debug-dir is missing, unreadable or of the wrong kind, FILE is
    empty or neither a crash report nor an event JSON object; 2 usage error.

    """

let debugFilesUsage = """
    Usage: vaka debug-files check FILE... [--json]
           vaka debug-files collect DIR... --out OUTDIR

    check     For each ELF file: type, arch, code_id (GNU build ID), debug_id (from the build ID, or the
              hash of the first page of .text for files without one) and features (symtab, debug, unwind).
              --json prints the object sentry-cli debug-files check --json prints (plus "path"); an array
              of them for several files. Exit status 1 when a file is not a readable ELF file.
    collect   Copies every ELF file with a build ID found under each DIR (recursively; a FILE is taken as
              is) into OUTDIR/.build-id/ab/cdef….debug, whole, so `vaka symbolicate --debug-dir OUTDIR`
              finds it after the shipped binaries are stripped. Prints one line per file.
              Exit status 1 when a DIR is missing or cannot be listed, a FILE given is not a readable ELF
              file, OUTDIR cannot be created (or is a file), or a copy failed.

    Exit status: 0 success; 1 as above; 2 usage error.

    """

/// Options shared by the commands: positional arguments and flags; `--opt VALUE` pairs for `valued`.
func parseOptions(_ arguments: ArraySlice<String>, flags: Set<String>, valued: Set<String>, command: String,
                  usage: String) -> (files: [String], flags: Set<String>, values: [String: [String]]) {
    var files: [String] = []
    var seenFlags = Set<String>()
    var values: [String: [String]] = [:]
    var onlyFiles = false
    var iterator = arguments.makeIterator()
    while let argument = iterator.next() {
        if onlyFiles { files.append(argument); continue }
        if argument == "-h" || argument == "--help" { printOut(usage); exit(0) }
        if argument == "--" { onlyFiles = true; continue }
        if flags.contains(argument) { seenFlags.insert(argument); continue }
        if let equals = argument.firstIndex(of: "="), valued.contains(String(argument[..<equals])) {
            values[String(argument[..<equals]), default: []].append(String(argument[argument.index(after: equals)...]))
            continue
        }
        if valued.contains(argument) {
            guard let value = iterator.next() else { fail("\(argument) needs a value (see \(command) --help)", status: 2) }
            values[argument, default: []].append(value)
            continue
        }
        if argument.hasPrefix("-") && argument != "-" {
            fail("unknown option \(argument) for '\(command)' (see \(command) --help)", status: 2)
        }
        files.append(argument)
    }
    return (files, seenFlags, values)
}

/// CPU time (user + system, all threads) this process has used so far, in milliseconds.
func cpuMilliseconds() -> Double {
    var usage = rusage()
    guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
    let user = Double(usage.ru_utime.tv_sec) * 1000 + Double(usage.ru_utime.tv_usec) / 1000
    let system = Double(usage.ru_stime.tv_sec) * 1000 + Double(usage.ru_stime.tv_usec) / 1000
    return user + system
}

func symbolicate(_ arguments: ArraySlice<String>) -> Never {
    let options = parseOptions(arguments, flags: ["--pretty", "--stats", "--no-system-debug-dir"], valued: ["--debug-dir"],
                               command: "vaka symbolicate", usage: symbolicateUsage)
    guard options.files.count == 1 else {
        fail(options.files.isEmpty ? "symbolicate needs a FILE (see vaka symbolicate --help)"
                                   : "symbolicate takes one FILE, got \(options.files.count)", status: 2)
    }
    let path = options.files[0]
    let pretty = options.flags.contains("--pretty")
    let started = DispatchTime.now().uptimeNanoseconds
    let startedCPU = cpuMilliseconds()
    let symbolicator = Symbolicator(debugDirectories: options.values["--debug-dir"] ?? [],
                                    systemDebugDirectory: options.flags.contains("--no-system-debug-dir") ? nil : "/usr/lib/debug")
    for directory in options.values["--debug-dir"] ?? [] { requireDirectory(directory) }
    let data = readInputFile(path)
    let json: Data
    var frames = 0
    var resolved = 0
    if data.starts(with: Array("VAKA-CRASH".utf8)) {
        let report: CrashReport
        do {
            report = try CrashReport(data: data, fileName: (path as NSString).lastPathComponent)
        } catch {
            fail("\(path): \(error)", status: 1)
        }
        let event = FatalEventBuilder(symbolicator: symbolicator).event(from: report)
        let stackFrames = event.exception?.values.first?.stacktrace?.frames ?? []
        frames = report.frames.count
        resolved = Set(stackFrames.filter { $0.function != nil }.map(\.instructionAddr)).count
        do {
            json = try event.jsonData(pretty: pretty)
        } catch {
            fail("\(path): cannot encode the event: \(error)", status: 1)
        }
        if report.isTruncated {
            writeErr("vaka: warning: \(path): the report is truncated; the event is partial\n")
        }
    } else {
        let event: JSONValue
        do {
            event = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            fail("\(path): neither a Vaka crash report (no VAKA-CRASH line) nor JSON", status: 1)
        }
        guard case .object = event else { fail("\(path): the JSON is not an event object", status: 1) }
        let (result, counts) = EventSymbolicator(symbolicator: symbolicator).symbolicate(event)
        frames = counts.frames
        resolved = counts.resolved
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
            json = try encoder.encode(result)
        } catch {
            fail("\(path): cannot encode the event: \(error)", status: 1)
        }
    }
    let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started) / 1_000_000
    let cpu = cpuMilliseconds() - startedCPU
    writeOut(json + Data("\n".utf8))
    if options.flags.contains("--stats") {
        let stats = String(format: "{\"frames\":%d,\"resolved_frames\":%d,\"files_opened\":%d,\"symbolicate_ms\":%.3f,\"cpu_ms\":%.3f}\n",
                           frames, resolved, symbolicator.openedFileCount, elapsed, cpu)
        writeErr(stats)
    }
    exit(0)
}

func debugFilesCheck(_ arguments: ArraySlice<String>) -> Never {
    let options = parseOptions(arguments, flags: ["--json"], valued: [], command: "vaka debug-files check",
                               usage: debugFilesUsage)
    guard !options.files.isEmpty else { fail("debug-files check needs a FILE (see vaka debug-files --help)", status: 2) }
    var checks: [DebugFileCheck] = []
    var failed = false
    for path in options.files {
        if let problem = inputFileProblem(path) {
            writeErr("vaka: \(path): \(problem)\n")
            failed = true
            continue
        }
        do {
            checks.append(try DebugFileCheck(path: path))
        } catch {
            writeErr("vaka: \(error)\n")
            failed = true
        }
    }
    if options.flags.contains("--json") {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = try? (options.files.count == 1 ? checks.first.map { try encoder.encode($0) } : encoder.encode(checks))
        if let data { writeOut(data + Data("\n".utf8)) }
    } else {
        for check in checks {
            let variant = check.variants.first
            printOut("""
                \(check.path)
                  type:     \(check.type)
                  arch:     \(variant?.arch ?? "unknown")
                  code_id:  \(variant?.codeID ?? "-")
                  debug_id: \(variant?.debugID ?? "-")
                  features: \(check.features.isEmpty ? "none" : check.features)\(check.note.map { "\n  note:     \($0)" } ?? "")\(check.problem.map { "\n  problem:  \($0)" } ?? "")

                """)
        }
    }
    exit(failed ? 1 : 0)
}

func debugFilesCollect(_ arguments: ArraySlice<String>) -> Never {
    let options = parseOptions(arguments, flags: [], valued: ["--out"], command: "vaka debug-files collect",
                               usage: debugFilesUsage)
    guard let outputs = options.values["--out"], outputs.count == 1 else {
        fail("debug-files collect needs one --out OUTDIR (see vaka debug-files --help)", status: 2)
    }
    guard !options.files.isEmpty else { fail("debug-files collect needs a DIR (see vaka debug-files --help)", status: 2) }
    for input in options.files {
        var info = stat()
        guard stat(input, &info) == 0 else { fail("\(input): \(String(cString: strerror(errno)))", status: 1) }
        if info.st_mode & S_IFMT == S_IFDIR {
            requireDirectory(input)
        } else {
            // A FILE is taken as is, so it must be an ELF file.
            requireInputFile(input)
            do { _ = try ElfFile(path: input) } catch { fail("\(error)", status: 1) }
        }
    }
    makeDirectories(outputs[0])
    let entries: [DebugFileCollector.Entry]
    do {
        entries = try DebugFileCollector.collect(options.files, into: outputs[0])
    } catch {
        fail("\(outputs[0]): cannot create the directory (\(error.localizedDescription))", status: 1)
    }
    var copied = 0
    var failed = false
    for entry in entries {
        if let destination = entry.destination {
            copied += 1
            printOut("\(destination) <- \(entry.source)\n")
        } else {
            let reason = entry.skipped ?? "skipped"
            if reason.hasPrefix("copy failed") { failed = true }
            printOut("skipped \(entry.source): \(reason)\n")
        }
    }
    writeErr("vaka: collected \(copied) file(s) into \(outputs[0])\n")
    exit(failed ? 1 : 0)
}

func debugFiles(_ arguments: ArraySlice<String>) -> Never {
    guard let command = arguments.first else { fail("debug-files needs a command: check or collect (see vaka debug-files --help)", status: 2) }
    switch command {
    case "-h", "--help", "help": printOut(debugFilesUsage); exit(0)
    case "check": debugFilesCheck(arguments.dropFirst())
    case "collect": debugFilesCollect(arguments.dropFirst())
    default: fail("unknown debug-files command '\(command)' (see vaka debug-files --help)", status: 2)
    }
}

func report(_ arguments: ArraySlice<String>) -> Never {
    guard let command = arguments.first else { fail("report needs a command: convert (see vaka report --help)", status: 2) }
    switch command {
    case "-h", "--help", "help": printOut(reportUsage); exit(0)
    case "convert": convert(arguments.dropFirst())
    default: fail("unknown report command '\(command)' (see vaka report --help)", status: 2)
    }
}

prepareOutput()
let arguments = CommandLine.arguments.dropFirst()
guard let command = arguments.first else {
    writeErr(toolUsage)
    exit(2)
}
switch command {
case "-h", "--help", "help": printOut(toolUsage); exit(0)
case "--version": printOut("vaka \(FatalEventBuilder.sdk.version)\n"); exit(0)
case "report": report(arguments.dropFirst())
case "symbolicate": symbolicate(arguments.dropFirst())
case "debug-files": debugFiles(arguments.dropFirst())
case "outbox": outboxCommand(arguments.dropFirst())
default: fail("unknown command '\(command)' (see vaka --help)", status: 2)
}
