import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A file or bytes sent with events as a Sentry attachment (an `attachment` envelope item with `filename`,
/// `content_type` and `attachment_type: "event.attachment"`), added with ``Vaka/addAttachment(path:filename:contentType:)``,
/// ``Vaka/addAttachment(data:filename:contentType:)`` or on a per-call ``Scope``.
///
/// A file is read when the event is sent (by the journal mover, or by the crash join at the next launch for a
/// crash), not when it is added: a log file attached at start explains the crash with what it held at the
/// crash. Bytes are copied when the event is captured. Limits (``Attachment/maxBytes``,
/// ``Attachment/maxEnvelopeBytes``): an attachment over 1 MiB, or one that would take the envelope's
/// attachments over 1 MiB together, is left out (a debug line), as is a file that cannot be read then.
public struct Attachment: Equatable, Sendable {
    /// Where the bytes come from.
    public enum Content: Equatable, Sendable {
        /// The file at this path, read when the event is sent.
        case file(path: String)
        /// These bytes.
        case data(Data)
    }

    /// The bytes or the file.
    public var content: Content
    /// The file name shown on the server (`filename`): the path's last component by default; an empty one is
    /// sent as `attachment`.
    public var filename: String
    /// The MIME type (`content_type`); by default (also when empty) `text/plain` for `.txt` and `.log`,
    /// `application/json` for `.json`, else `application/octet-stream`.
    public var contentType: String

    /// The attachment of the file at `path` (read when the event is sent); `filename` defaults to its last
    /// path component, `contentType` to the type of its extension (see ``contentType``).
    public init(path: String, filename: String? = nil, contentType: String? = nil) {
        let name = filename ?? (path as NSString).lastPathComponent
        self.content = .file(path: path)
        self.filename = name
        self.contentType = contentType ?? Attachment.defaultContentType(name)
    }

    /// The attachment of `data` named `filename`; `contentType` defaults to the type of its extension.
    public init(data: Data, filename: String, contentType: String? = nil) {
        self.content = .data(data)
        self.filename = filename
        self.contentType = contentType ?? Attachment.defaultContentType(filename)
    }

    /// Largest attachment sent, bytes: 1 MiB. A bigger one is left out (a debug line).
    public static let maxBytes = 1 << 20
    /// Most bytes of attachments in one envelope: 1 MiB. Attachments are taken in the order they were added; one
    /// that would go over is left out (a debug line), later smaller ones may still fit.
    public static let maxEnvelopeBytes = 1 << 20
    /// Most attachments registered on the global scope at a time: 8 (files are persisted in `scope.json` for the
    /// crash join, which bounds it). A further one is left out (a debug line).
    public static let maxRegistered = 8
    /// Longest path or file name kept, bytes: 4096 (`PATH_MAX`). A longer one is left out (a debug line).
    public static let maxPathBytes = 4096

    /// The `filename` sent for an attachment whose name is empty: `attachment`.
    static let defaultFilename = "attachment"

    /// The default content type of a file named `name`.
    static func defaultContentType(_ name: String) -> String {
        switch (name as NSString).pathExtension.lowercased() {
        case "txt", "log": return "text/plain"
        case "json": return "application/json"
        default: return "application/octet-stream"
        }
    }
}

/// An attachment of a captured event or of a run's scope, as recorded: the file to read when the event is sent
/// (a file attachment's own path, or for bytes a side file the client wrote), its name and type. Kept in the
/// journal record of an event (meta attribute `attachments`, a JSON array) and in `scope.json` (file
/// attachments only, for the crash).
struct AttachmentRef: Codable, Equatable, Sendable {
    /// The file read when the event is sent.
    var path: String
    /// `filename`.
    var filename: String
    /// `content_type`.
    var contentType: String
    /// Whether `path` is a side file holding an attachment's bytes (`runs/<run-id>/attachments/`), deleted once
    /// its envelope is on disk.
    var sideFile: Bool = false

    enum CodingKeys: String, CodingKey {
        case path, filename
        case contentType = "content_type"
        case sideFile = "side_file"
    }
}

/// Building `attachment` envelope items within the limits of ``Attachment``.
enum AttachmentItems {
    /// The meta attribute of an event record listing its attachments.
    static let journalKey = "attachments"

    /// The directory of the side files of run directory `runDirectory`: `attachments/`.
    static func sideDirectory(_ runDirectory: URL) -> URL {
        runDirectory.appendingFileComponent("attachments", isDirectory: true)
    }

    /// The `attachment` items of `refs` and `inMemory` (bytes given when there is no journal), in order, within
    /// the limits; every attachment left out (too big, over the envelope's share, unreadable) gets one line to
    /// `log` naming the event (``leftOut(_:eventID:reason:log:)``).
    static func items(_ refs: [AttachmentRef], inMemory: [Attachment] = [], eventID: String,
                      log: ((String) -> Void)?) -> [EnvelopeItem] {
        var out: [EnvelopeItem] = []
        var total = 0
        func add(_ data: Data, filename: String, contentType: String) {
            if data.count > Attachment.maxBytes {
                leftOut(filename, eventID: eventID, reason: "\(data.count) B, over \(Attachment.maxBytes) B", log: log)
            } else if total + data.count > Attachment.maxEnvelopeBytes {
                leftOut(filename, eventID: eventID, reason: "the envelope's attachments would pass \(Attachment.maxEnvelopeBytes) B", log: log)
            } else {
                total += data.count
                // Relay refuses an attachment item without a file name.
                out.append(.attachment(data, filename: filename.isEmpty ? Attachment.defaultFilename : filename,
                                       contentType: contentType.isEmpty ? Attachment.defaultContentType(filename) : contentType))
            }
        }
        for ref in refs {
            switch PrivateFiles.readCapped(ref.path, maxBytes: Attachment.maxBytes) {
            case .data(let data): add(data, filename: ref.filename, contentType: ref.contentType)
            case .tooLarge(let size):
                leftOut(ref.filename, eventID: eventID, reason: "\(size) B, over \(Attachment.maxBytes) B", log: log)
            case .notRegular: leftOut(ref.filename, eventID: eventID, reason: "\(ref.path) is not a regular file", log: log)
            case .unreadable: leftOut(ref.filename, eventID: eventID, reason: "\(ref.path) cannot be read", log: log)
            }
        }
        for attachment in inMemory {
            switch attachment.content {
            case .data(let data): add(data, filename: attachment.filename, contentType: attachment.contentType)
            case .file(let path):
                out += items([AttachmentRef(path: path, filename: attachment.filename, contentType: attachment.contentType)],
                             eventID: eventID, log: log)
            }
        }
        return out
    }

    /// The one place an attachment is left out of an event: a debug line. Not counted in client reports
    /// (``ClientReports`` counts an attachment only when its whole event or envelope is dropped).
    static func leftOut(_ filename: String, eventID: String, reason: String, log: ((String) -> Void)?) {
        log?("attachment \(filename.prefix(200).debugDescription) of event \(eventID) left out: \(reason)")
    }

    /// The attachments listed by an event record's meta attribute (none when it has none or it does not decode).
    static func refs(of record: Journal.Record) -> [AttachmentRef] {
        guard let text = record.meta(journalKey) else { return [] }
        return (try? JSONDecoder().decode([AttachmentRef].self, from: Data(text.utf8))) ?? []
    }

    /// Deletes the side files among `refs` (their envelope is on disk).
    static func removeSideFiles(_ refs: [AttachmentRef]) {
        for ref in refs where ref.sideFile { unlink(ref.path) }
    }

    /// Writes the bytes of the data attachments of event `eventID` to side files in `directory` (mode 0600,
    /// named `<event-id>-<n>`), returning every attachment as a ref: files by their absolute path, bytes as
    /// their side file.
    /// Bytes over ``Attachment/maxBytes`` or that cannot be written are left out (``leftOut(_:eventID:reason:log:)``).
    static func record(_ attachments: [Attachment], eventID: String, directory: URL?, log: ((String) -> Void)?) -> [AttachmentRef] {
        var refs: [AttachmentRef] = []
        var made = false
        for (n, attachment) in attachments.enumerated() {
            switch attachment.content {
            case .file(let path):
                // Absolute now: the journal record may be read by the next launch, from another directory.
                refs.append(AttachmentRef(path: URL(fileURLWithPath: path).path, filename: attachment.filename,
                                          contentType: attachment.contentType))
            case .data(let data):
                guard data.count <= Attachment.maxBytes else {
                    leftOut(attachment.filename, eventID: eventID, reason: "\(data.count) B, over \(Attachment.maxBytes) B", log: log)
                    continue
                }
                guard let directory else {
                    leftOut(attachment.filename, eventID: eventID, reason: "no run directory to keep it in", log: log)
                    continue
                }
                do {
                    if !made { try PrivateFiles.makeDirectory(directory); made = true }
                    let file = directory.appendingFileComponent("\(eventID)-\(n)")
                    try PrivateFiles.writeAtomically(data, to: file, sync: false)
                    refs.append(AttachmentRef(path: file.path, filename: attachment.filename, contentType: attachment.contentType,
                                              sideFile: true))
                } catch {
                    leftOut(attachment.filename, eventID: eventID, reason: "cannot be written to \(directory.path) (\(error))", log: log)
                }
            }
        }
        return refs
    }
}
