// `vaka symbolicate`: a crash report or an event JSON with every frame resolved that the debug files can resolve.
import Foundation
import Vaka
import VakaCrash
import VakaSymbolication

let symbolicateUsage = """
    Usage: vaka symbolicate FILE [--debug-dir DIR]... [--no-system-debug-dir] [--cache DIR] [--pretty] [--stats]

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
      --cache DIR       Keep what was resolved in DIR, one file per build ID (DIR/<build ID>.symcache),
                        and answer addresses found there without opening the image's files. An answer is
                        used only while the image file, its debug files and the --debug-dir list are
                        unchanged; a damaged file is ignored and rewritten. The output is the same.
      --pretty          Indent the JSON.
      --stats           Print one JSON line to stderr: {"frames","resolved_frames","files_opened","cache_hits",
                        "symbolicate_ms","cpu_ms"}: the frames counted and how many got a function (the
                        crashed thread's for a report, whose other threads are resolved but not counted;
                        every stack trace's for an event JSON), files opened, addresses answered from
                        --cache, and wall and CPU (user + system, all threads) milliseconds spent reading,
                        converting and resolving, files opened and the cache written included.
      -h, --help        Show this help.

    Exit status: 0 success; 1 FILE or a --debug-dir is missing, unreadable or of the wrong kind, FILE is
    empty or neither a crash report nor an event JSON object; 2 usage error.

    """

/// `vaka symbolicate`.
let symbolicateCommand = Command(syntax: ArgumentSyntax(command: "vaka symbolicate", helpCommand: "vaka symbolicate",
                                                        usage: symbolicateUsage,
                                                        flags: ["--pretty", "--stats", "--no-system-debug-dir"],
                                                        options: ["--debug-dir", "--cache"]),
                                 run: { symbolicate($0) })

/// CPU time (user + system, all threads) this process has used so far, in milliseconds.
func cpuMilliseconds() -> Double {
    var usage = rusage()
    guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
    let user = Double(usage.ru_utime.tv_sec) * 1000 + Double(usage.ru_utime.tv_usec) / 1000
    let system = Double(usage.ru_stime.tv_sec) * 1000 + Double(usage.ru_stime.tv_usec) / 1000
    return user + system
}

/// Runs `vaka symbolicate FILE ...`; never returns.
func symbolicate(_ options: ParsedArguments) -> Never {
    guard options.operands.count == 1 else {
        fail(options.operands.isEmpty ? "symbolicate needs a FILE (see vaka symbolicate --help)"
                                      : "symbolicate takes one FILE, got \(options.operands.count)", status: 2)
    }
    let path = options.operands[0]
    let pretty = options.has("--pretty")
    let started = DispatchTime.now().uptimeNanoseconds
    let startedCPU = cpuMilliseconds()
    let symbolicator = Symbolicator(debugDirectories: options.values("--debug-dir"),
                                    systemDebugDirectory: options.has("--no-system-debug-dir") ? nil : "/usr/lib/debug",
                                    cacheDirectory: options.values("--cache").last)
    for directory in options.values("--debug-dir") { requireDirectory(directory) }
    let data = readInputFile(path)
    if let reason = ElfFile.unavailableReason {
        writeErr("vaka: warning: no function names, files or line numbers: libelf cannot be loaded (\(reason))\n")
    } else if let reason = DwarfFile.unavailableReason {
        writeErr("vaka: warning: no file and line numbers: libdw cannot be loaded (\(reason))\n")
    }
    let json: Data
    var frames = 0
    var resolved = 0
    if data.starts(with: Array(VAKA_REPORT_MAGIC.utf8)) {
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
    symbolicator.saveCache()
    let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started) / 1_000_000
    let cpu = cpuMilliseconds() - startedCPU
    writeOut(json + Data("\n".utf8))
    if options.has("--stats") {
        let stats = String(format: "{\"frames\":%d,\"resolved_frames\":%d,\"files_opened\":%d,\"cache_hits\":%d,\"symbolicate_ms\":%.3f,\"cpu_ms\":%.3f}\n",
                           frames, resolved, symbolicator.openedFileCount, symbolicator.cacheHitCount, elapsed, cpu)
        writeErr(stats)
    }
    exit(0)
}
