// `vaka outbox list|show`: reads the envelopes Vaka wrote to <storage>/outbox/ (no DSN configured).
import Foundation
import Vaka

let outboxUsage = """
    Usage: vaka outbox list [--storage DIR]
           vaka outbox show ENVELOPE [--storage DIR]

    Without a DSN, Vaka writes every envelope to DIR/outbox/<UTC time>-<sequence>-<event_id>.envelope instead of sending
    it (DIR is Vaka.Options.storageDirectory; default $XDG_STATE_HOME/vaka/<app>-<hash>, or
    ~/.local/state/vaka/<app>-<hash> when XDG_STATE_HOME is unset). DIR is --storage, else $VAKA_STORAGE; one
    of them is needed.

      list            One line per envelope, oldest first: file name, size in bytes, item types, and the
                      first event's level and title (message, or exception type: value).
      show ENVELOPE   The envelope header, then per item a `# item N: TYPE (LENGTH bytes) {item header}` line
                      (content_type, filename, attachment_type, ... as JSON) and its payload as indented JSON
                      (as text when it is not JSON). ENVELOPE is a path, a file name in DIR/outbox, or the
                      envelope's line number in `list` (1 = oldest; -1 = newest).

    Exit status: 0 success (also for an empty outbox, with a note on stderr); 1 a missing or unreadable
    storage directory, outbox or envelope, or a file that is not an envelope; 2 usage error.

    """

/// The options of `vaka outbox list` and `show`: `--storage DIR` (else `$VAKA_STORAGE`); index operands such as
/// `-1` are not options.
let outboxSyntax = ArgumentSyntax(command: "outbox", helpCommand: "vaka outbox", usage: outboxUsage,
                                  options: ["--storage"],
                                  missingValueMessages: ["--storage": "--storage needs a directory"],
                                  endOfOptionsMarker: false, dashOperands: .integers)
/// `vaka outbox list`.
let outboxListCommand = Command(syntax: outboxSyntax, run: { outboxList($0) })
/// `vaka outbox show`.
let outboxShowCommand = Command(syntax: outboxSyntax, run: { outboxShow($0) })

/// The storage directory: the last `--storage`, else `$VAKA_STORAGE`, else `nil`.
private func storageDirectory(_ arguments: ParsedArguments) -> String? {
    arguments.values("--storage").last ?? ProcessInfo.processInfo.environment["VAKA_STORAGE"]
}

/// Runs `vaka outbox list --storage DIR`; never returns.
func outboxList(_ arguments: ParsedArguments) -> Never {
    guard arguments.operands.isEmpty else { fail("outbox list takes no arguments", status: 2) }
    guard let storage = storageDirectory(arguments) else { fail("outbox list needs --storage DIR (or $VAKA_STORAGE)", status: 2) }
    let outbox = Outbox(storageDirectory: URL(fileURLWithPath: storage, isDirectory: true))
    requireDirectory(storage)
    var info = stat()
    if stat(outbox.directory.path, &info) != 0 && errno == ENOENT {
        writeErr("vaka: no envelopes: \(outbox.directory.path) does not exist yet\n")
        exit(0)
    }
    requireDirectory(outbox.directory.path)
    let files = outbox.list()
    if files.isEmpty { writeErr("vaka: no envelopes in \(outbox.directory.path)\n") }
    for url in files {
        let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0
        guard let envelope = try? outbox.read(url) else {
            printOut("\(url.lastPathComponent)  \(size) bytes  (not an envelope)\n")
            continue
        }
        let types = envelope.items.map(\.type.rawValue).joined(separator: ",")
        printOut("\(url.lastPathComponent)  \(size) bytes  \(types)\(summary(envelope).map { "  " + $0 } ?? "")\n")
    }
    exit(0)
}

/// Runs `vaka outbox show ENVELOPE [--storage DIR]`; never returns.
func outboxShow(_ arguments: ParsedArguments) -> Never {
    guard arguments.operands.count == 1 else { fail("outbox show takes one ENVELOPE (see vaka outbox --help)", status: 2) }
    let outbox = storageDirectory(arguments).map { Outbox(storageDirectory: URL(fileURLWithPath: $0, isDirectory: true)) }
    let url = resolve(arguments.operands[0], outbox)
    let envelope: Envelope
    do {
        envelope = try Envelope(data: readInputFile(url.path))
    } catch EnvelopeError.invalidHeader {
        fail("\(url.path): not a Sentry envelope (the first line is not an envelope header)", status: 1)
    } catch {
        fail("\(url.path): not a Sentry envelope (\(error))", status: 1)
    }
    var header: [String: Any] = [:]
    header["event_id"] = envelope.header.eventID
    if let sdk = envelope.header.sdk { header["sdk"] = ["name": sdk.name, "version": sdk.version] }
    printOut("# envelope \(url.lastPathComponent)\n\(pretty(header))\n")
    for (index, item) in envelope.items.enumerated() {
        printOut("# item \(index + 1): \(item.type.rawValue) (\(item.payload.count) bytes) \(itemHeader(item))\n")
        if let object = try? JSONSerialization.jsonObject(with: item.payload) {
            printOut(pretty(object) + "\n")
        } else {
            printOut(String(decoding: item.payload, as: UTF8.self) + "\n")
        }
    }
    exit(0)
}

/// A path, a name in the outbox, or a 1-based index (negative from the end).
private func resolve(_ argument: String, _ outbox: Outbox?) -> URL {
    if let outbox, Int(argument) != nil || !argument.contains("/") {
        // An index or a bare name refers to the outbox, which must exist.
        requireDirectory(outbox.directory.deletingLastPathComponent().path)
        let files = outbox.list()
        if let index = Int(argument) {
            let i = index > 0 ? index - 1 : files.count + index
            guard files.indices.contains(i) else { fail("no envelope number \(argument) (\(files.count) in the outbox)", status: 1) }
            return files[i]
        }
        if !argument.contains("/") { return outbox.directory.appendingPathComponent(argument) }
    }
    return URL(fileURLWithPath: argument)
}

/// `level: title` of the envelope's event, or `session <status>`.
private func summary(_ envelope: Envelope) -> String? {
    for item in envelope.items {
        guard let object = try? JSONSerialization.jsonObject(with: item.payload) as? [String: Any] else { continue }
        if item.type.rawValue == "event" {
            let level = object["level"] as? String ?? "?"
            if let message = (object["logentry"] as? [String: Any])?["formatted"] as? String { return "\(level): \(message)" }
            if let values = (object["exception"] as? [String: Any])?["values"] as? [[String: Any]], let first = values.first {
                return "\(level): \(first["type"] as? String ?? "?"): \(first["value"] as? String ?? "")"
            }
            return level
        }
        if item.type.rawValue == "session" { return "session \(object["status"] as? String ?? "?")" }
    }
    return nil
}

/// The item header's fields as the envelope has them, one line of JSON (keys sorted): `type`, `length`, and
/// `content_type`, `item_count`, `filename`, `attachment_type` where given.
private func itemHeader(_ item: EnvelopeItem) -> String {
    var header: [String: Any] = ["type": item.type.rawValue, "length": item.payload.count]
    header["content_type"] = item.contentType
    header["item_count"] = item.itemCount
    header["filename"] = item.filename
    header["attachment_type"] = item.attachmentType
    guard let data = try? JSONSerialization.data(withJSONObject: header, options: [.sortedKeys, .withoutEscapingSlashes]) else { return "" }
    return String(decoding: data, as: UTF8.self)
}

private func pretty(_ object: Any) -> String {
    guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]) else { return "\(object)" }
    return String(decoding: data, as: UTF8.self)
}
