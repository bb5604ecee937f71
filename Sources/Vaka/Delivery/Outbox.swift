import Foundation

/// The embedded default when no DSN is configured: each envelope is written to `<storage>/outbox/` as
/// one file `<UTC timestamp>-<sequence>-<event_id>.envelope` (e.g.
/// `20240501T123456.789Z-000042-0123...cdef.envelope`; the sequence counts this process's writes, so
/// envelopes written in the same millisecond keep their order),
/// holding exactly the bytes that would have been POSTed before gzip (Sentry envelope wire format).
/// Directory mode 0700, files 0600, written atomically. Name order is time order. `vaka outbox list|show`
/// reads them with ``list()`` and ``read(_:)``.
public struct Outbox {
    private static let sequenceLock = NSLock()
    nonisolated(unsafe) private static var sequence = 0

    /// `<storage>/outbox`.
    public let directory: URL

    /// An outbox in `<storageDirectory>/outbox` (created on first write).
    public init(storageDirectory: URL) {
        directory = storageDirectory.appendingPathComponent("outbox", isDirectory: true)
    }

    /// Writes `envelope` as a new file, stamped with `date` (file name only; the envelope is unchanged).
    /// Envelopes without `event_id` are named with a random 32-hex id.
    /// - Returns: the file's URL.
    /// - Throws: ``DeliveryIOError`` or a `FileManager` error when the directory or file cannot be written.
    @discardableResult
    public func write(_ envelope: Envelope, at date: Date = Date()) throws -> URL {
        try PrivateFiles.makeDirectory(directory)
        let id = envelope.header.eventID ?? UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let stamp = Timestamps.rfc3339(date).replacingOccurrences(of: "-", with: "").replacingOccurrences(of: ":", with: "")
        let safeID = String(id.unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) }.map(Character.init))
        Outbox.sequenceLock.lock()
        Outbox.sequence += 1
        let number = Outbox.sequence
        Outbox.sequenceLock.unlock()
        let url = directory.appendingPathComponent("\(stamp)-\(String(format: "%06d", number % 1_000_000))-\(safeID).envelope")
        try PrivateFiles.writeAtomically(envelope.serialized(), to: url, sync: false)
        return url
    }

    /// The outbox files, oldest first (by name); empty when the directory does not exist.
    public func list() -> [URL] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.hasSuffix(".envelope") && !$0.hasPrefix(".") }.sorted()
            .map { directory.appendingPathComponent($0) }
    }

    /// Reads and parses one outbox file, at most ``PersistentQueue/maxEnvelopeBytes`` (1 MiB, the largest
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
