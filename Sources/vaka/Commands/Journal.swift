// `vaka journal show`: reads a run's journal offline (docs/journal.md): what the program was doing before it
// died — its last breadcrumbs, the logs and events it had not sent yet.
import Foundation
import Vaka

let journalUsage = """
    Usage: vaka journal show RUN-DIR [--last N] [--json]
           vaka journal show [--storage DIR] [--last N] [--json]

    Prints the records of a run's journal (RUN-DIR/journal, and RUN-DIR/journal.spill when present), oldest
    first: breadcrumbs, logs and events, as the run appended them. RUN-DIR may also be the journal file itself.
    With --storage DIR, or without RUN-DIR and --storage when $VAKA_STORAGE is set (DIR = $VAKA_STORAGE), every
    run journal under DIR/runs/ (DIR is Vaka.Options.storageDirectory), oldest first, each after a
    `# run <run-id>` line. Journals of runs that ended normally are removed; those of runs that crashed or
    were killed stay until the next launch has reported them.

    Text: one line per record: sequence number, UTC time, kind, level, category (or -), body, attributes as
    key=value (the SDK's own marked with @), and `(sent)` for a log or event the SDK had already moved to its
    queue. Category, body, keys and values are written as ConsoleLogSink writes them: control characters
    escaped (\\n, \\t, \\u{1b}); a string value holding a space, =, ", \\ or a control character, or that is
    empty, in quotes with ", \\ and control characters escaped.

      --last N   Only the last N records of each journal.
      --json     A JSON array with one object per journal: {"run", "path", "skipped", "records": [{"seq",
                 "time", "time_ns", "kind", "level", "category", "body", "attributes": {key: {"type",
                 "value", "meta"}}, "consumed"}]}; "run" is the run id (the name of RUN-DIR, or of the
                 journal file's directory); "level" is the name (trace...fatal) or the number.

    Records torn by the process's death (at most the one being written) are skipped and counted on stderr.

    Exit status: 0 success (also when DIR/runs holds no journal, with a note on stderr); 1 a missing or
    unreadable directory or journal, or a file that is not a journal; 2 usage error.

    """

/// The syntax of `vaka journal show`.
let journalSyntax = ArgumentSyntax(command: "journal show", helpCommand: "vaka journal", usage: journalUsage,
                                   flags: ["--json"], options: ["--storage", "--last"],
                                   missingValueMessages: ["--storage": "--storage needs a directory",
                                                          "--last": "--last needs a number"])
/// `vaka journal show`.
let journalShowCommand = Command(syntax: journalSyntax, run: { journalShow($0) })

/// Runs `vaka journal show`; never returns.
func journalShow(_ arguments: ParsedArguments) -> Never {
    var last: Int?
    if let value = arguments.values("--last").last {
        guard let n = Int(value), n >= 0 else { fail("--last needs a number of records, not '\(value)'", status: 2) }
        last = n
    }
    var journals: [(run: String, url: URL)] = []
    // --storage DIR, else $VAKA_STORAGE when no RUN-DIR is given (as `vaka outbox`).
    let storageOption = arguments.values("--storage").last
    let storageMode = storageOption ?? (arguments.operands.isEmpty ? ProcessInfo.processInfo.environment["VAKA_STORAGE"] : nil)
    var runDirectory: String?
    if let storage = storageMode {
        guard arguments.operands.isEmpty else { fail("journal show takes RUN-DIR or --storage DIR, not both", status: 2) }
        requireDirectory(storage)
        let runs = URL(fileURLWithPath: storage, isDirectory: true).appendingPathComponent("runs", isDirectory: true)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: runs.path)) ?? []
        var found: [(run: String, url: URL, time: Date)] = []
        for name in names {
            let url = runs.appendingPathComponent(name).appendingPathComponent("journal")
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
                  attributes[.type] as? FileAttributeType == .typeRegular else { continue }
            found.append((name, url, attributes[.modificationDate] as? Date ?? .distantPast))
        }
        if found.isEmpty { writeErr("vaka: no run journals in \(runs.path)\n") }
        journals = found.sorted { ($0.time, $0.run) < ($1.time, $1.run) }.map { ($0.run, $0.url) }
    } else {
        guard arguments.operands.count == 1 else {
            fail("journal show takes one RUN-DIR, or --storage DIR (or $VAKA_STORAGE); see vaka journal --help", status: 2)
        }
        let path = arguments.operands[0]
        var info = stat()
        guard stat(path, &info) == 0 else { fail("\(path): \(String(cString: strerror(errno)))", status: 1) }
        let isDirectory = info.st_mode & S_IFMT == S_IFDIR
        let url = isDirectory ? URL(fileURLWithPath: path, isDirectory: true).appendingPathComponent("journal")
                              : URL(fileURLWithPath: path)
        if isDirectory { runDirectory = path }
        // The run id is the run directory's name, also when the journal file itself is given.
        journals = [(url.deletingLastPathComponent().standardizedFileURL.lastPathComponent, url)]
    }

    var json: [[String: Any]] = []
    for (run, url) in journals {
        let records: [Journal.Record]
        let skipped: Int
        do {
            (records, skipped) = try Journal.read(url)
        } catch let error as JournalError where error.code == EBADMSG {
            fail("\(url.path): not a Vaka journal", status: 1)
        } catch let error as JournalError {
            // A storage directory given as RUN-DIR: its runs are one level down.
            var hint = ""
            if error.code == ENOENT, let dir = runDirectory {
                var isDir: ObjCBool = false
                let runs = URL(fileURLWithPath: dir, isDirectory: true).appendingPathComponent("runs").path
                if FileManager.default.fileExists(atPath: runs, isDirectory: &isDir), isDir.boolValue {
                    hint = " (a storage directory? use --storage \(dir))"
                }
            }
            fail("\(url.path): \(String(cString: strerror(error.code)))\(hint)", status: 1)
        } catch {
            fail("\(url.path): \(error)", status: 1)
        }
        let shown = last.map { Array(records.suffix($0)) } ?? records
        if skipped > 0 { writeErr("vaka: \(url.path): \(skipped) torn or damaged record\(skipped == 1 ? "" : "s") skipped\n") }
        if arguments.has("--json") {
            json.append(["run": run, "path": url.path, "skipped": skipped, "records": shown.map(recordJSON)])
        } else {
            if storageMode != nil { printOut("# run \(run)\n") }
            var text = ""
            for record in shown { text += recordLine(record) + "\n" }
            printOut(text)
        }
    }
    if arguments.has("--json") {
        let data = (try? JSONSerialization.data(withJSONObject: json, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])) ?? Data("[]".utf8)
        printOut(String(decoding: data, as: UTF8.self) + "\n")
    }
    exit(0)
}

/// `trace`...`fatal` for the journal's levels (``LogLevel`` raw values), else the number.
private func levelName(_ level: UInt8) -> String {
    LogLevel(rawValue: level).map(\.description) ?? String(level)
}

private func kindName(_ kind: Journal.Kind) -> String {
    switch kind {
    case .breadcrumb: "breadcrumb"
    case .log: "log"
    case .event: "event"
    }
}

/// ISO 8601 UTC with milliseconds, e.g. `2026-11-30T16:04:57.123Z`.
private func utcTime(_ timeNs: UInt64) -> String {
    var seconds = time_t(timeNs / 1_000_000_000)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                  Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec),
                  Int(timeNs / 1_000_000 % 1000))
}

private func recordLine(_ r: Journal.Record) -> String {
    var line = "\(r.seq)  \(utcTime(r.timeNs))  \(kindName(r.kind))  \(r.level == 0 ? "-" : levelName(r.level))  "
    line += (r.category.isEmpty ? "-" : ConsoleLogSink.escapedText(r.category)) + "  " + ConsoleLogSink.escapedText(r.text)
    for a in r.attributes {
        line += "  \(a.meta ? "@" : "")\(ConsoleLogSink.escapedText(a.key))=\(ConsoleLogSink.valueText(a.value))"
    }
    if r.consumed { line += "  (sent)" }
    return line
}

private func recordJSON(_ r: Journal.Record) -> [String: Any] {
    var attributes: [String: Any] = [:]
    for a in r.attributes {
        let value: Any
        switch a.value {
        case .string(let s): value = s
        case .integer(let i): value = i
        case .double(let d): value = d
        case .boolean(let b): value = b
        }
        attributes[a.key] = ["type": a.value.typeName, "value": value, "meta": a.meta]
    }
    return ["seq": r.seq, "time": utcTime(r.timeNs), "time_ns": r.timeNs, "kind": kindName(r.kind),
            "level": LogLevel(rawValue: r.level).map { $0.description as Any } ?? Int(r.level),
            "category": r.category, "body": r.text, "attributes": attributes, "consumed": r.consumed]
}
