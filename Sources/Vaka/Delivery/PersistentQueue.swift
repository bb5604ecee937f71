import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The envelopes waiting to be sent, kept in `<storage>/pending/` so that nothing is lost when the network,
/// the server or the process fails.
///
/// Life of an envelope:
/// 1. ``enqueue(_:durable:)`` appends it to the *open batch* in memory (at most `maxBatchSize` envelopes).
///    With `durable: true` the open batch is written to its file before the call returns.
/// 2. The open batch is written to its batch file (format: ``BatchFile``; written whole as temporary
///    file + rename, mode 0600, directory 0700) by ``seal()``, which the uploader calls before each send,
///    or as soon as it holds `maxBatchSize` envelopes; a sealed batch is never appended to again.
/// 3. The uploader reads sealed batches oldest first (``sealedBatches()``, ``records(of:)``) and, after each
///    envelope is settled, rewrites the file without it (``commit(_:records:)``; the file is deleted when
///    nothing is left).
///
/// At most `maxBatchFiles` (default 200) batch files are kept: when writing a new file would exceed it, the
/// oldest sealed files are deleted first; ``stats`` counts the files and envelopes dropped.
/// Files left by a previous run are found at init and are sealed batches; leftover temporary files are removed.
///
/// Damaged files never block the queue: a batch file with no intact envelope (0 bytes after a power loss,
/// a wrong magic line), a directory, FIFO or other non-regular file with a batch file's name, or a file over
/// ``Settings/maxFileBytes`` (not read at all) is **set aside** when the uploader reaches it: renamed to
/// `<name>.bad` (no longer a batch name; at most ``maxBadFiles`` are kept, the oldest deleted), counted in
/// ``Stats/setAsideFiles`` and logged. A file whose magic line is right but holds no record is deleted.
/// Batch files are read with the size cap ``Settings/maxFileBytes``; the crash join reads only the envelope
/// headers (``queuedEventIDs()``).
///
/// File names are `<sequence, 16 digits>-<8 random hex>.batch`; the sequence continues after the highest one
/// found in the directory, so name order is age order across runs. One process per storage directory at a time.
///
/// Storage that cannot be written (full file system, read-only directory, `RLIMIT_FSIZE` quota, missing
/// directory): nothing is lost quietly and nothing spins.
/// - A batch whose write fails is kept **in memory** as a sealed batch (``BatchRef/inMemory``) and is sent like
///   a file; at most ``Settings/maxMemoryBytes`` (4 MiB) of serialized envelopes are held this way: beyond it the
///   oldest held envelopes are dropped, each drop counted in ``Stats/droppedUnwritable`` and logged.
/// - A rewrite of a sealed file that fails (after an envelope of it was sent) keeps the remaining envelopes in
///   memory for this process; the file stays, so a later launch may send its settled envelopes again (a
///   server keeps one event per `event_id`).
/// - After a failed write, writes are not tried again for a backoff (5 s, doubling to 300 s, reset by a
///   successful write): batches go to memory at once. ``persist(final:)`` with `final: true` (close) tries
///   once more regardless.
/// - Writes run with `SIGXFSZ` blocked on the writing thread (see `PrivateFiles.withFileSizeSignalBlocked`),
///   so exceeding `RLIMIT_FSIZE` fails the write with `EFBIG` instead of killing the process.
///
/// Thread-safe: every method may be called from any thread.
final class PersistentQueue: Sendable {
    /// A batch file, ordered by age (sequence number).
    struct BatchRef: Hashable, Comparable, CustomStringConvertible {
        /// The file name inside ``PersistentQueue/directory``.
        let name: String
        /// The sequence number parsed from the name.
        let sequence: UInt64
        /// `true` for a batch held only in memory because its file could not be written.
        var inMemory = false
        static func < (a: BatchRef, b: BatchRef) -> Bool { (a.sequence, a.name) < (b.sequence, b.name) }
        var description: String { name }
    }

    /// Counters for debug output.
    struct Stats: Equatable {
        /// Batch files deleted unsent because of the `maxBatchFiles` cap.
        var droppedBatchFiles = 0
        /// Envelopes inside those files.
        var droppedEnvelopes = 0
        /// Batch files found damaged (their intact records are kept).
        var damagedFiles = 0
        /// Batch files set aside as `<name>.bad`: no intact envelope, not a regular file, or over
        /// ``PersistentQueue/Settings/maxFileBytes``.
        var setAsideFiles = 0
        /// Batch-file writes (new files and rewrites) that failed.
        var writeFailures = 0
        /// Envelopes neither written nor sent: dropped from memory over ``PersistentQueue/Settings/maxMemoryBytes``, or
        /// still only in memory when the queue was closed.
        var droppedUnwritable = 0
    }

    /// Most bytes of serialized envelopes held only in memory (batches whose file could not be written):
    /// 4 MiB. The oldest held envelopes are dropped first beyond it.
    static let defaultMaxMemoryBytes = 4 << 20

    /// Largest envelope the SDK writes, bytes: 2 MiB, the event budget (``EventBudget/standard``, 900 KiB of
    /// event JSON) plus 124 KiB for the envelope and item headers and a session update, plus the attachments
    /// (``Attachment/maxEnvelopeBytes``, 1 MiB).
    static let maxEnvelopeBytes = (1 << 20) + Attachment.maxEnvelopeBytes

    /// Most `.bad` files (set-aside batch files) kept in `pending/`; older ones are deleted.
    static let maxBadFiles = 8

    /// The queue's settings, clamped once at init; the state behind the mutex reads the same value.
    struct Settings: Sendable {
        /// `<storage>/pending`'s path, mode 0700.
        let directoryPath: String
        /// `<storage>/pending` as a file URL (made at each use from ``directoryPath``).
        var directory: URL { URL(fileURLWithPath: directoryPath, isDirectory: true) }
        /// Most envelopes per batch (file); `Options.maxBatchSize`, default 50. At least 1.
        let maxBatchSize: Int
        /// Most batch files kept; default 200. At least 1.
        let maxBatchFiles: Int
        /// Whether batch files are `fsync`ed before being renamed into place (survives power loss, not just
        /// process death). Default `false`.
        let syncWrites: Bool
        /// Most bytes held only in memory (``PersistentQueue/defaultMaxMemoryBytes`` unless given).
        let maxMemoryBytes: Int
        /// Largest batch file read, bytes: the largest the SDK can write, `maxBatchSize` ×
        /// (``PersistentQueue/maxEnvelopeBytes`` + 16 bytes of length line) + the magic line (100 MiB + 816 B
        /// with the default 50). A bigger file is set aside without being read.
        let maxFileBytes: Int
    }

    /// The settings given at init, clamped.
    let settings: Settings
    /// `<storage>/pending`, mode 0700 (``Settings/directory``).
    var directory: URL { settings.directory }

    /// The state, behind the mutex that makes the queue thread-safe.
    private let core: Mutex<Core>
    /// The debug sink; given the lines the state logged once its mutex is released.
    private let log: @Sendable (String) -> Void
    /// Told the envelopes (serialized) dropped unsent and why, once the mutex is released (``ClientReports``).
    private let dropSink: (@Sendable (ClientReports.Reason, [Data]) -> Void)?

    /// Opens (creating if needed) `<storageDirectory>/pending`, and picks up batch files of previous runs.
    /// - Parameters:
    ///   - storageDirectory: the SDK's storage directory (`Options.storageDirectory`).
    ///   - maxBatchSize: envelopes per batch, ≥ 1 (`Options.maxBatchSize`).
    ///   - maxBatchFiles: batch files kept, ≥ 1 (200 in the SDK).
    ///   - syncWrites: `fsync` each batch file before renaming it into place.
    ///   - log: debug sink (one line per call, no trailing newline); never given secrets.
    ///   - maxMemoryBytes: bytes of envelopes held in memory when writes fail (default 4 MiB).
    ///   - dropSink: told each envelope dropped unsent (`cache_overflow`: a batch file over the cap;
    ///     `queue_overflow`: held in memory and lost), outside the queue's lock.
    ///   - openNow: create and list `pending/` here; with `false` that is done by the first call that uses the
    ///     queue (any method or property), or by ``open()`` (`Delivery` leaves it to its thread, off
    ///     `Vaka.start`'s caller).
    /// - Throws: nothing today: a directory that cannot be created or listed is logged and the queue starts
    ///   empty, holding batches in memory until writes succeed (kept `throws` for API stability).
    convenience init(storageDirectory: URL, maxBatchSize: Int = 50, maxBatchFiles: Int = 200, syncWrites: Bool = false,
                     maxMemoryBytes: Int = PersistentQueue.defaultMaxMemoryBytes,
                     log: @escaping @Sendable (String) -> Void = { _ in },
                     dropSink: (@Sendable (ClientReports.Reason, [Data]) -> Void)? = nil, openNow: Bool = true) throws {
        try self.init(storagePath: storageDirectory.fileSystemPath, maxBatchSize: maxBatchSize, maxBatchFiles: maxBatchFiles,
                      syncWrites: syncWrites, maxMemoryBytes: maxMemoryBytes, log: log, dropSink: dropSink, openNow: openNow)
    }

    /// ``init(storageDirectory:maxBatchSize:maxBatchFiles:syncWrites:maxMemoryBytes:log:dropSink:openNow:)`` for
    /// the storage directory at `storagePath` (absolute): what ``Delivery`` calls (no `URL` on the start path).
    init(storagePath: String, maxBatchSize: Int = 50, maxBatchFiles: Int = 200, syncWrites: Bool = false,
         maxMemoryBytes: Int = PersistentQueue.defaultMaxMemoryBytes,
         log: @escaping @Sendable (String) -> Void = { _ in },
         dropSink: (@Sendable (ClientReports.Reason, [Data]) -> Void)? = nil, openNow: Bool = true) throws {
        let batchSize = max(1, maxBatchSize)
        settings = Settings(directoryPath: PrivateFiles.path(storagePath, "pending"),
                            maxBatchSize: batchSize, maxBatchFiles: max(1, maxBatchFiles), syncWrites: syncWrites,
                            maxMemoryBytes: max(0, maxMemoryBytes),
                            maxFileBytes: batchSize * (PersistentQueue.maxEnvelopeBytes + 16) + 16)
        self.log = log
        self.dropSink = dropSink
        self.core = Mutex(Core(settings: settings))
        if openNow { open() }
    }

    /// Creates `<storage>/pending` if needed and picks up the batch files of previous runs, once (every other
    /// call does it first when it was not done yet).
    func open() {
        locked { _ in }
    }

    /// Runs `body` on the state with the mutex held, then hands the lines it logged to ``log``.
    private func locked<R: Sendable, E: Error>(_ body: (inout Core) throws(E) -> R) throws(E) -> R {
        let (result, notes, dropped) = core.withLock { core -> (Result<R, E>, [String], [(ClientReports.Reason, Data)]) in
            if !core.loaded { core.load() }
            let result: Result<R, E>
            do throws(E) { result = .success(try body(&core)) } catch { result = .failure(error) }
            defer { core.notes = []; core.dropped = [] }
            return (result, core.notes, core.dropped)
        }
        for line in notes { log(line) }
        if let dropSink, !dropped.isEmpty {
            for reason in ClientReports.Reason.allCases {
                let records = dropped.filter { $0.0 == reason }.map(\.1)
                if !records.isEmpty { dropSink(reason, records) }
            }
        }
        return try result.get()
    }

    /// Adds an envelope to the open batch.
    /// - Parameter durable: write the open batch to disk before returning (the envelope then survives a
    ///   crash or SIGKILL of the process).
    /// - Returns: `true` when this filled the batch to `maxBatchSize` (it was then written and sealed: time to send).
    /// - Throws: ``DeliveryIOError`` when a required write fails (or is skipped during the write backoff); the
    ///   envelope is then held in memory (bounded by ``Settings/maxMemoryBytes``) and still sent.
    @discardableResult
    func enqueue(_ envelope: Envelope, durable: Bool = false) throws -> Bool {
        let record = envelope.serialized()
        return try locked { try $0.enqueue(record, durable: durable) }
    }

    /// Writes the open batch (if it has unwritten envelopes) and seals it: later envelopes go to a new batch.
    /// Called before each send. - Throws: ``DeliveryIOError`` when the write fails; the batch is then sealed in
    /// memory (``BatchRef/inMemory``) and sent from there.
    func seal() throws {
        try locked { try $0.seal() }
    }

    /// Writes the open batch to its file without sealing it (used by `flush`, `close()` and durable captures),
    /// and tries to write the batches held in memory (and stale rewrites) to their files.
    /// - Parameter final: the last chance (close): write even during the write backoff, and count what stays
    ///   only in memory as dropped (``Stats/droppedUnwritable``).
    /// - Throws: ``DeliveryIOError`` when a write fails (the envelopes stay in memory).
    func persist(final: Bool = false) throws {
        try locked { try $0.persist(final: final) }
    }

    /// Sealed batches (files and batches held in memory), oldest first.
    func sealedBatches() -> [BatchRef] {
        locked { $0.sealedBatches() }
    }

    /// The envelopes (serialized) in a batch file, in order; `nil` when the file no longer exists (it was
    /// dropped by the cap) or cannot be read now. A damaged file yields its intact records and is counted in
    /// ``stats``; one with none, a non-regular file or one over ``Settings/maxFileBytes`` is set aside (`.bad`, see
    /// the type's documentation) and gives `nil`; an intact file without records is deleted and gives `nil`.
    func records(of ref: BatchRef) -> [Data]? {
        locked { $0.records(of: ref) }
    }

    /// Replaces a sealed batch's content with `records` (deleting the file when empty), atomically.
    /// A rewrite that fails (or is skipped during the write backoff) keeps `records` in memory as the batch's
    /// content for this process (the old file stays on disk); a batch held in memory is simply replaced.
    /// - Returns: `false` when the batch no longer exists (dropped by the cap meanwhile); nothing is written.
    /// - Throws: nothing today (kept `throws` for API stability): write failures are absorbed as described.
    @discardableResult
    func commit(_ ref: BatchRef, records: [Data]) throws -> Bool {
        try locked { try $0.commit(ref, records: records) }
    }

    /// The `event_id`s of the envelopes waiting (open batch, batches held in memory, batch files): one pass
    /// over `pending/` reading only the header line of each stored envelope (``BatchFile/scanHeaders(path:maxHeaderBytes:)``,
    /// the bodies skipped). Used by the crash join, once per launch, so that a crash queued by an earlier
    /// launch and not yet sent is not queued twice; a file that cannot be read counts as holding none.
    func queuedEventIDs() -> Set<String> {
        locked { $0.queuedEventIDs() }
    }

    /// Whether an envelope with this `event_id` is waiting (``queuedEventIDs()``; for many ids, call that once).
    func containsEvent(_ eventID: String) -> Bool {
        queuedEventIDs().contains(eventID)
    }

    /// `true` when no envelope is waiting: the open batch is empty, no batch file exists and none is held in memory.
    var isEmpty: Bool { locked { $0.isEmpty } }

    /// Envelopes held only in memory because their file could not be written (the open batch not counted).
    var memoryCount: Int { locked { $0.memoryCount } }

    /// Envelopes in the open batch (in memory, possibly also written).
    var openCount: Int { locked { $0.openCount } }

    /// Number of batch files on disk (sealed and open).
    var fileCount: Int { locked { $0.fileCount } }

    /// Drop counters (cap, damage).
    var stats: Stats { locked { $0.stats } }

    /// Parses `<16 digits>-<hex>.batch`.
    private static func ref(_ name: String) -> BatchRef? {
        guard name.hasSuffix(".batch"), name.count > 23 else { return nil }
        let digits = name.prefix(16)
        guard digits.allSatisfy({ $0.isASCII && $0.isNumber }), let seq = UInt64(digits),
              name.dropFirst(16).first == "-" else { return nil }
        return BatchRef(name: name, sequence: seq)
    }
}

extension PersistentQueue {
    /// The queue's state and the code that reads and changes it, always run with the queue's mutex held.
    /// The public methods of ``PersistentQueue`` are documented on the class.
    fileprivate struct Core {
        let settings: Settings
        var memoryBatches: [BatchRef: [Data]] = [:]  // sealed batches whose file could not be written
        var overlays: [BatchRef: [Data]] = [:]       // files whose rewrite failed: the content that counts
        var memoryBytes = 0                          // bytes in memoryBatches
        var writeBackoff = Backoff()                  // after a failed write, no write before it passes
        var files: [BatchRef] = []  // on disk, sorted oldest first (includes the open batch once written)
        // `persisted`: how many of `records` the file already holds (appends add only the rest).
        var open: (ref: BatchRef, records: [Data], written: Bool, persisted: Int)?
        var nextSequence: UInt64 = 1
        var stats = Stats()
        /// Lines to log, handed to the debug sink once the mutex is released.
        var notes: [String] = []
        /// Envelopes dropped unsent, handed to the drop sink once the mutex is released.
        var dropped: [(ClientReports.Reason, Data)] = []

        /// Queues a debug line (see ``notes``).
        mutating func log(_ line: String) { notes.append(line) }

        /// Whether ``load()`` ran (``PersistentQueue/open()``).
        var loaded = false

        /// Picks up the batch files of previous runs, and removes the temporary files of writes interrupted an hour
        /// or more ago (``PrivateFiles/removeIfStaleTemporary(_:in:now:)``: a younger one may be another process's
        /// write in progress, whose `rename` would fail without it).
        mutating func load() {
            loaded = true
            do {
                try PrivateFiles.makeDirectory(path: settings.directoryPath)
            } catch {
                log("cannot create \(settings.directoryPath) (\(error)); envelopes are held in memory (at most \(settings.maxMemoryBytes) bytes) until it can be written")
                writeBackoff.recordFailure(now: Date())
            }
            // readdir(3) and string paths: `FileManager`'s listing and `URL.path` cost `Vaka.start` more, on their
            // first use in a process, than the listing itself.
            let directory = settings.directoryPath
            let now = Int64(time(nil))
            for name in PrivateFiles.directoryNames(directory) {
                if name.hasPrefix(".tmp-") {
                    if PrivateFiles.removeIfStaleTemporary(name, in: directory, now: now) {
                        log("removed \(name), a batch file's temporary file left by a killed writer")
                    }
                } else if let ref = PersistentQueue.ref(name) {
                    files.append(ref)
                }
            }
            pruneBadFiles()
            files.sort()
            nextSequence = min(files.last?.sequence ?? 0, 9_000_000_000_000_000) + 1  // 16 digits: cannot overflow
            if !files.isEmpty { log("found \(files.count) pending batch file(s) from a previous run") }
        }

        @discardableResult
        mutating func enqueue(_ record: Data, durable: Bool) throws -> Bool {
            if open == nil {
                let ref = BatchRef(name: String(format: "%016llu-%08x.batch", nextSequence, UInt32.random(in: .min ... .max)),
                                   sequence: nextSequence)
                nextSequence += 1
                open = (ref, [], false, 0)
            }
            open!.records.append(record)
            if open!.records.count >= settings.maxBatchSize {
                try sealLocked()
                return true
            }
            if durable {
                do { try writeOpenLocked() } catch { spillOpenLocked(); throw error }
            }
            return false
        }

        mutating func seal() throws {
            try sealLocked()
        }

        mutating func persist(final: Bool = false) throws {
            if final { writeBackoff.reset() }
            var failure: Error?
            do { try writeOpenLocked() } catch { spillOpenLocked(); failure = error }
            if failure == nil {
                for (ref, records) in overlays.sorted(by: { $0.key < $1.key }) {
                    do { try writeLocked(records, to: ref); overlays[ref] = nil } catch { failure = error; break }
                }
            }
            if failure == nil {
                for ref in memoryBatches.keys.sorted() {
                    guard let records = memoryBatches[ref] else { continue }
                    let fileRef = BatchRef(name: String(format: "%016llu-%08x.batch", ref.sequence, UInt32.random(in: .min ... .max)),
                                           sequence: ref.sequence)
                    do {
                        try writeLocked(records, to: fileRef)
                    } catch { failure = error; break }
                    memoryBatches[ref] = nil
                    memoryBytes -= records.reduce(0) { $0 + $1.count }
                    files.append(fileRef)
                    files.sort()
                    log("wrote \(records.count) envelope(s) held in memory to \(fileRef.name)")
                }
                enforceCapLocked()
            }
            if final {
                let lost = memoryBatches.values.reduce(0) { $0 + $1.count }
                if lost > 0 {
                    for ref in memoryBatches.keys.sorted() { dropped += (memoryBatches[ref] ?? []).map { (.queueOverflow, $0) } }
                    stats.droppedUnwritable += lost
                    log("storage not writable: \(lost) envelope(s) held in memory are lost (neither written nor sent)")
                    memoryBatches = [:]
                    memoryBytes = 0
                }
            }
            if let failure { throw failure }
        }

        func sealedBatches() -> [BatchRef] {
            return (files.filter { $0 != open?.ref } + memoryBatches.keys).sorted()
        }

        mutating func records(of ref: BatchRef) -> [Data]? {
            if ref.inMemory { return memoryBatches[ref] }
            if let overlay = overlays[ref] { return files.contains(ref) ? overlay : nil }
            guard files.contains(ref) else { return nil }
            let data: Data
            switch PrivateFiles.readCapped(path(ref), maxBytes: settings.maxFileBytes) {
            case .data(let d): data = d
            case .tooLarge(let size):
                setAsideLocked(ref, because: "\(size) B, over the \(settings.maxFileBytes) B a batch file can hold; not read")
                return nil
            case .notRegular:
                setAsideLocked(ref, because: "not a regular file")
                return nil
            case .unreadable(let code):
                if code == ENOENT {
                    files.removeAll { $0 == ref }
                    overlays[ref] = nil
                } else if code == EMFILE || code == ENFILE || code == ENOMEM {
                    log("cannot read batch file \(ref.name) now: \(String(cString: strerror(code)))")  // may pass
                } else {
                    setAsideLocked(ref, because: "unreadable: \(String(cString: strerror(code)))")
                }
                return nil
            }
            let (records, damaged) = BatchFile.decode(data)
            if records.isEmpty {
                if damaged {
                    stats.damagedFiles += 1
                    setAsideLocked(ref, because: "damaged, no intact envelope (\(data.count) B)")
                } else {
                    unlink(path(ref))
                    files.removeAll { $0 == ref }
                    log("batch file \(ref.name) holds no envelope; deleted")
                }
                return nil
            }
            if damaged {
                stats.damagedFiles += 1
                log("batch file \(ref.name) is damaged; keeping its \(records.count) intact envelope(s)")
            }
            return records
        }

        @discardableResult
        mutating func commit(_ ref: BatchRef, records: [Data]) throws -> Bool {
            if ref.inMemory {
                guard let old = memoryBatches[ref] else { return false }
                memoryBytes -= old.reduce(0) { $0 + $1.count }
                if records.isEmpty {
                    memoryBatches[ref] = nil
                } else {
                    memoryBatches[ref] = records
                    memoryBytes += records.reduce(0) { $0 + $1.count }
                }
                return true
            }
            guard files.contains(ref), ref != open?.ref else { return false }
            if records.isEmpty {
                unlink(path(ref))
                files.removeAll { $0 == ref }
                overlays[ref] = nil
            } else {
                do {
                    try writeLocked(records, to: ref)
                    overlays[ref] = nil
                } catch {
                    if overlays[ref] == nil { log("could not rewrite \(ref.name) (\(error)); its remaining \(records.count) envelope(s) are kept in memory") }
                    overlays[ref] = records
                }
            }
            return true
        }

        mutating func queuedEventIDs() -> Set<String> {
            func header(_ record: Data) -> Data { record.prefix(while: { $0 != 0x0A }).prefix(8 * 1024) }
            var ids = Set<String>()
            func add(_ headers: [Data]) {
                for h in headers { if let id = BatchFile.eventID(inHeader: h) { ids.insert(id) } }
            }
            if let o = open { add(o.records.map(header)) }
            for records in memoryBatches.values { add(records.map(header)) }
            for ref in files where ref != open?.ref {
                if let overlay = overlays[ref] { add(overlay.map(header)); continue }
                add(BatchFile.scanHeaders(path: path(ref)) ?? [])
            }
            return ids
        }

        var isEmpty: Bool {
            return (open?.records.isEmpty ?? true) && files.filter { $0 != open?.ref }.isEmpty && memoryBatches.isEmpty
        }

        var memoryCount: Int {
            return memoryBatches.values.reduce(0) { $0 + $1.count }
        }

        var openCount: Int {
            return open?.records.count ?? 0
        }

        var fileCount: Int {
            return files.count
        }

        // MARK: - Private (lock held)

        mutating func sealLocked() throws {
            guard open != nil else { return }
            if !open!.records.isEmpty {
                do { try writeOpenLocked() } catch { spillOpenLocked(); throw error }
            }
            open = nil
        }

        /// Seals the open batch in memory: its envelopes not yet in its file become a batch held in memory; a file
        /// already written with the first ones stays as a sealed batch.
        mutating func spillOpenLocked() {
            guard let o = open else { return }
            open = nil
            let unsaved = Array(o.records[min(o.persisted, o.records.count)...])
            guard !unsaved.isEmpty else { return }
            let ref = BatchRef(name: "memory-\(o.ref.sequence)", sequence: o.ref.sequence, inMemory: true)
            memoryBatches[ref] = unsaved
            memoryBytes += unsaved.reduce(0) { $0 + $1.count }
            log("storage not writable: holding \(unsaved.count) envelope(s) in memory (\(memoryBytes) of at most \(settings.maxMemoryBytes) bytes)")
            enforceMemoryCapLocked()
        }

        /// Drops the oldest envelopes held in memory until at most ``Settings/maxMemoryBytes`` are.
        mutating func enforceMemoryCapLocked() {
            var dropped = 0
            while memoryBytes > settings.maxMemoryBytes, let oldest = memoryBatches.keys.min() {
                var records = memoryBatches[oldest] ?? []
                if records.isEmpty { memoryBatches[oldest] = nil; continue }
                let record = records.removeFirst()
                memoryBytes -= record.count
                self.dropped.append((.queueOverflow, record))
                dropped += 1
                memoryBatches[oldest] = records.isEmpty ? nil : records
            }
            if dropped > 0 {
                stats.droppedUnwritable += dropped
                log("storage not writable and \(settings.maxMemoryBytes) bytes held in memory: dropped the \(dropped) oldest envelope(s) (neither written nor sent; total \(stats.droppedUnwritable))")
            }
        }

        /// Writes `records` as the whole file of `ref`, unless writes are backing off after a failure.
        /// Records the failure (starting or lengthening the write backoff) or the success (resetting it).
        mutating func writeLocked(_ records: [Data], to ref: BatchRef) throws {
            let now = Date()
            if writeBackoff.isWaiting(at: now) {
                throw DeliveryIOError(operation: "write (backing off after a failed write)", path: path(ref), code: EAGAIN)
            }
            do {
                try BatchFile.encode(records).withUnsafeBytes { try PrivateFiles.writeAtomically($0, toPath: path(ref), sync: settings.syncWrites) }
                writeBackoff.reset()
            } catch {
                stats.writeFailures += 1
                let until = writeBackoff.recordFailure(now: now)
                log("write failed (\(error)); no batch write for \(Bounded.wholeSeconds(until.timeIntervalSince(now))) s")
                throw error
            }
        }

        mutating func writeOpenLocked() throws {
            guard let o = open, !o.records.isEmpty, o.persisted < o.records.count else { return }
            // The open batch's file only grows while open: append the new records (one write(2)) instead of
            // rewriting the whole file for every durable envelope. A failed or short append falls back to the
            // whole-file rewrite; a tail torn by process death is cut off by the reader (BatchFile.decode) and
            // the file is never appended to again (it is a sealed batch for the next process).
            if o.written, o.persisted > 0, !settings.syncWrites, !writeBackoff.isWaiting(at: Date()),
               PrivateFiles.append(BatchFile.encodeRecords(o.records[o.persisted...]), to: path(o.ref)) {
                open!.persisted = o.records.count
                return
            }
            try writeLocked(o.records, to: o.ref)
            open!.persisted = o.records.count
            if !o.written {
                open!.written = true
                files.append(o.ref)  // newest sequence: stays sorted
                enforceCapLocked()
            }
        }

        mutating func enforceCapLocked() {
            var droppedFiles = 0, droppedEnvelopes = 0
            while files.count > settings.maxBatchFiles, let oldest = files.first(where: { $0 != open?.ref }) {
                droppedEnvelopes += BatchFile.scanHeaders(path: path(oldest))?.count ?? 0
                if let records = overlays[oldest] {
                    dropped += records.map { (.cacheOverflow, $0) }
                } else if case .data(let data) = PrivateFiles.readCapped(path(oldest), maxBytes: settings.maxFileBytes) {
                    dropped += BatchFile.decode(data).records.map { (.cacheOverflow, $0) }
                }
                unlink(path(oldest))
                files.removeAll { $0 == oldest }
                overlays[oldest] = nil
                droppedFiles += 1
            }
            if droppedFiles > 0 {
                stats.droppedBatchFiles += droppedFiles
                stats.droppedEnvelopes += droppedEnvelopes
                log("batch file cap \(settings.maxBatchFiles) reached: dropped \(droppedFiles) oldest file(s) holding \(droppedEnvelopes) envelope(s) (total dropped: \(stats.droppedBatchFiles) file(s), \(stats.droppedEnvelopes) envelope(s))")
            }
        }

        func path(_ ref: BatchRef) -> String { PrivateFiles.path(settings.directoryPath, ref.name) }

        /// Renames a batch file that can never be sent to `<name>.bad` (deleted when the rename fails), forgets it
        /// and keeps at most ``maxBadFiles`` set-aside files.
        mutating func setAsideLocked(_ ref: BatchRef, because reason: String) {
            let from = path(ref)
            if rename(from, from + ".bad") != 0 { try? FileManager.default.removeItem(atPath: from) }
            files.removeAll { $0 == ref }
            overlays[ref] = nil
            stats.setAsideFiles += 1
            log("batch file \(ref.name) set aside as \(ref.name).bad: \(reason)")
            pruneBadFiles()
        }

        /// Deletes the oldest `.bad` files beyond ``maxBadFiles``.
        func pruneBadFiles() {
            let bad = PrivateFiles.directoryNames(settings.directoryPath)
                .filter { $0.hasSuffix(".batch.bad") }.sorted()
            for name in bad.dropLast(PersistentQueue.maxBadFiles) {
                try? FileManager.default.removeItem(atPath: PrivateFiles.path(settings.directoryPath, name))
            }
        }
    }
}
