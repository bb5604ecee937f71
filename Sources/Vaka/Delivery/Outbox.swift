import Foundation
import Synchronization

/// The embedded default when no DSN is configured: each envelope is written to `<storage>/outbox/` as
/// one file `<UTC timestamp>-<sequence>-<event_id>.envelope` (e.g.
/// `20240501T123456.789Z-000042-0123...cdef.envelope`; the sequence counts this process's writes, so
/// envelopes written in the same millisecond keep their order),
/// holding exactly the bytes that would have been POSTed before gzip (Sentry envelope wire format).
/// Directory mode 0700, files 0600, written atomically. Name order is time order. `vaka outbox list|show`
/// reads them with ``list()`` and ``read(_:)``.
///
/// Bounded like the send queue: at most ``maxFiles`` files (default 1,000) and ``maxBytes`` bytes (default
/// 64 MiB) across runs. A write that would go over either drops the oldest files (by name) first; the count
/// of files dropped by this value's writes is ``droppedFiles``.
public struct Outbox: Sendable {
    /// Writes numbered so far by this process (the `<sequence>` of the file names).
    private static let sequence = Atomic<Int>(0)

    /// `<storage>/outbox` (a file URL made at each use from ``directoryPath``).
    public var directory: URL { URL(fileURLWithPath: directoryPath, isDirectory: true) }
    /// `<storage>/outbox`'s path: what this value's own file work uses.
    let directoryPath: String
    /// Most files kept (default 1,000); at least 1.
    public let maxFiles: Int
    /// Most bytes kept over all files (default 64 MiB); the newest file is kept even when it alone is larger.
    public let maxBytes: Int

    /// Sizes of the files present, by name, read once at the first write and kept up to date after.
    private struct Usage {
        var files: [String: Int]? = nil  // name -> bytes; nil until scanned
        var bytes = 0
        var dropped = 0
    }
    /// Shared by copies of this value (a class holds the mutex, which cannot be copied).
    private final class SharedUsage: Sendable {
        let state = Mutex(Usage())
    }
    private let usage = SharedUsage()
    /// Told the bytes of the files removed to stay within the caps (at most 1 MiB each is read), after the
    /// write that removed them (``ClientReports``: `cache_overflow`). `nil`: not read.
    var dropSink: (@Sendable ([Data]) -> Void)? = nil

    /// An outbox in `<storageDirectory>/outbox` (created on first write).
    /// - Parameters:
    ///   - maxFiles: most files kept (clamped to at least 1).
    ///   - maxBytes: most bytes kept (clamped to at least 1).
    public init(storageDirectory: URL, maxFiles: Int = 1_000, maxBytes: Int = 64 << 20) {
        self.init(storagePath: storageDirectory.fileSystemPath, maxFiles: maxFiles, maxBytes: maxBytes)
    }

    /// ``init(storageDirectory:maxFiles:maxBytes:)`` for the storage directory at `storagePath` (absolute):
    /// what delivery makes at start (no `URL`).
    init(storagePath: String, maxFiles: Int = 1_000, maxBytes: Int = 64 << 20) {
        directoryPath = PrivateFiles.path(storagePath, "outbox")
        self.maxFiles = max(1, maxFiles)
        self.maxBytes = max(1, maxBytes)
    }

    /// Files removed by this outbox's writes to stay within ``maxFiles`` and ``maxBytes`` (oldest first).
    public var droppedFiles: Int {
        usage.state.withLock { $0.dropped }
    }

    /// Writes `envelope` as a new file, stamped with `date` (file name only; the envelope is unchanged).
    /// Envelopes without `event_id` are named with a random 32-hex id.
    /// - Returns: the file's URL.
    /// - Throws: ``DeliveryIOError`` when the directory or file cannot be written.
    @discardableResult
    public func write(_ envelope: Envelope, at date: Date = Date()) throws -> URL {
        let name = newFileName(for: envelope, at: date)
        try write(envelope, named: name)
        return directory.appendingFileComponent(name)
    }

    /// ``newFileName(for:at:)`` as a file URL in the outbox.
    func newFileURL(for envelope: Envelope, at date: Date) -> URL {
        directory.appendingFileComponent(newFileName(for: envelope, at: date))
    }

    /// The name of a new file for `envelope` stamped with `date`, numbered in this process's sequence (nothing
    /// is written): what ``write(_:named:)`` writes, so a caller can record the name before the file exists
    /// (``ClientReports``: the file a client report travels in).
    func newFileName(for envelope: Envelope, at date: Date) -> String {
        let id = envelope.header.eventID ?? RandomID.hex32()
        // Built as bytes: string filters and maps over characters cost their first use in a process more than
        // the name (callgrind).
        var name: [UInt8] = []
        name.reserveCapacity(64)
        for b in Timestamps.rfc3339(date).utf8 where b != UInt8(ascii: "-") && b != UInt8(ascii: ":") { name.append(b) }
        name.append(UInt8(ascii: "-"))
        let number = Outbox.sequence.wrappingAdd(1, ordering: .relaxed).newValue % 1_000_000
        var divisor = 100_000
        while divisor > 0 {
            name.append(UInt8(ascii: "0") + UInt8(number / divisor % 10))
            divisor /= 10
        }
        name.append(UInt8(ascii: "-"))
        // Letters and digits only (an event id from elsewhere never makes a path); ASCII ones need no table.
        if id.utf8.allSatisfy({ $0 < 0x80 }) {
            for b in id.utf8 where (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b) { name.append(b) }
        } else {
            for scalar in id.unicodeScalars where scalar.isASCII
                ? (0x30...0x39).contains(scalar.value) || (0x41...0x5A).contains(scalar.value) || (0x61...0x7A).contains(scalar.value)
                : CharacterSet.alphanumerics.contains(scalar) {
                name.append(contentsOf: Array(String(scalar).utf8))
            }
        }
        name.append(contentsOf: Array(".envelope".utf8))
        return String(decoding: name, as: UTF8.self)
    }

    /// Writes `envelope` to the outbox file `name` (from ``newFileName(for:at:)``) atomically, then trims the
    /// outbox. By path: no `URL` on the write path.
    /// - Throws: ``DeliveryIOError`` when the directory or file cannot be written.
    func write(_ envelope: Envelope, named name: String) throws {
        try PrivateFiles.makeDirectory(path: directoryPath)
        let bytes = envelope.serialized()
        // The first write of the process lists the directory before its file is there, not after: the caller's
        // step that follows a durable write (deleting an ended run's `scope.json`) then comes at once.
        usage.state.withLock { usage in if usage.files == nil { listFiles(&usage) } }
        try bytes.withUnsafeBytes { try PrivateFiles.writeAtomically($0, toPath: PrivateFiles.path(directoryPath, name), sync: false) }
        let removed = trim(adding: name, size: bytes.count)
        if let dropSink, !removed.isEmpty { dropSink(removed) }
    }

    /// Fills `usage` from a listing of the directory (once per process): the names as `list()` takes them, sized
    /// with stat(2) on string paths (FileManager's attributes look up the owner's user and group names; a URL per
    /// file costs more than its stat). Temporary files of writes killed an hour or more ago are removed
    /// (``PrivateFiles/removeIfStaleTemporary(_:in:now:)``).
    private func listFiles(_ usage: inout Usage) {
        var files: [String: Int] = [:]
        let root = directoryPath
        let now = Int64(time(nil))
        for name in PrivateFiles.directoryNames(root) {
            if name.hasPrefix(".tmp-") { _ = PrivateFiles.removeIfStaleTemporary(name, in: root, now: now) }
            guard name.hasSuffix(".envelope") && !name.hasPrefix(".") else { continue }
            var st = stat()
            files[name] = stat(root + "/" + name, &st) == 0 ? Int(st.st_size) : 0
        }
        usage.files = files
        usage.bytes = files.values.reduce(0, +)
    }

    /// Records the file just written and removes the oldest files while over ``maxFiles`` or ``maxBytes``
    /// (never the one just written). The directory is listed once per process, at the first write.
    /// Returns the removed files' bytes when ``dropSink`` is set.
    private func trim(adding name: String, size: Int) -> [Data] {
        var removed: [Data] = []
        usage.state.withLock { usage in
            if usage.files == nil {
                listFiles(&usage)
            } else {
                usage.bytes += size - (usage.files?[name] ?? 0)
                usage.files?[name] = size
            }
            guard var files = usage.files, files.count > maxFiles || usage.bytes > maxBytes else { return }
            let keep = dropSink != nil
            for old in files.keys.sorted() where old != name {
                guard files.count > maxFiles || usage.bytes > maxBytes else { break }
                let path = directoryPath + "/" + old
                var content: Data?
                if keep, case .data(let data) = PrivateFiles.readCapped(path, maxBytes: PersistentQueue.maxEnvelopeBytes) { content = data }
                if unlink(path) != 0 && errno != ENOENT { continue }
                if let content { removed.append(content) }
                usage.bytes -= files.removeValue(forKey: old) ?? 0
                usage.dropped += 1
            }
            usage.files = files
        }
        return removed
    }

    /// The outbox files, oldest first (by name); empty when the directory does not exist.
    public func list() -> [URL] {
        let names = PrivateFiles.directoryNames(directoryPath)
        return names.filter { $0.hasSuffix(".envelope") && !$0.hasPrefix(".") }.sorted()
            .map { directory.appendingFileComponent($0) }
    }

    /// Reads and parses one outbox file, at most ``PersistentQueue/maxEnvelopeBytes`` (2 MiB, the largest
    /// envelope the SDK writes): a bigger file or a non-regular one is not read.
    /// - Throws: ``DeliveryIOError`` when it cannot be read, is over the cap (`EFBIG`) or is not a regular
    ///   file (`EISDIR`), or ``EnvelopeError`` when the bytes are not an envelope.
    public func read(_ url: URL) throws -> Envelope {
        switch PrivateFiles.readCapped(url.path, maxBytes: PersistentQueue.maxEnvelopeBytes) {
        case .data(let data): return try Envelope(data: data)
        case .tooLarge: throw DeliveryIOError(operation: "read (over \(PersistentQueue.maxEnvelopeBytes) B)", path: url.path, code: EFBIG)
        case .notRegular: throw DeliveryIOError(operation: "read (not a regular file)", path: url.path, code: EISDIR)
        case .unreadable(let code): throw DeliveryIOError(operation: "read", path: url.path, code: code)
        }
    }
}
