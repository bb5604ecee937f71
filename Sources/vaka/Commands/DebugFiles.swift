// `vaka debug-files check|collect`: what an ELF file holds for symbolication, and a build-ID tree of debug files.
import Foundation
import Vaka
import VakaSymbolication

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

/// `vaka debug-files check`.
let debugFilesCheckCommand = Command(syntax: ArgumentSyntax(command: "vaka debug-files check",
                                                            helpCommand: "vaka debug-files check",
                                                            usage: debugFilesUsage, flags: ["--json"]),
                                     run: { debugFilesCheck($0) })

/// `vaka debug-files collect`.
let debugFilesCollectCommand = Command(syntax: ArgumentSyntax(command: "vaka debug-files collect",
                                                              helpCommand: "vaka debug-files collect",
                                                              usage: debugFilesUsage, options: ["--out"]),
                                       run: { debugFilesCollect($0) })

/// Runs `vaka debug-files check FILE... [--json]`; never returns.
func debugFilesCheck(_ options: ParsedArguments) -> Never {
    guard !options.operands.isEmpty else { fail("debug-files check needs a FILE (see vaka debug-files --help)", status: 2) }
    var checks: [DebugFileCheck] = []
    var failed = false
    for path in options.operands {
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
    if options.has("--json") {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = try? (options.operands.count == 1 ? checks.first.map { try encoder.encode($0) } : encoder.encode(checks))
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

/// Runs `vaka debug-files collect DIR... --out OUTDIR`; never returns.
func debugFilesCollect(_ options: ParsedArguments) -> Never {
    let outputs = options.values("--out")
    guard outputs.count == 1 else {
        fail("debug-files collect needs one --out OUTDIR (see vaka debug-files --help)", status: 2)
    }
    guard !options.operands.isEmpty else { fail("debug-files collect needs a DIR (see vaka debug-files --help)", status: 2) }
    for input in options.operands {
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
        entries = try DebugFileCollector.collect(options.operands, into: outputs[0])
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
