import Foundation
import Synchronization
import VakaCrash
#if canImport(Glibc)
import Glibc
#endif

/// A failed journal operation: `code` is the errno value (`ENOENT`, `EACCES`, `ENOSPC`, `EBADMSG` for a file
/// that is not a journal...), `operation` what was being done (`open`, `read`).
public struct JournalError: Error, Equatable, CustomStringConvertible {
    /// The errno value.
    public var code: Int32
    /// What failed: `open` (creating the journal) or `read` (the offline reader).
    public var operation: String
    /// `journal <operation>: <strerror> (errno <code>)`.
    public var description: String { "journal \(operation): \(String(cString: strerror(code))) (errno \(code))" }
}

/// The run's crash-safe journal (`<run directory>/journal`): a Swift face of the C journal
/// (`include/vaka/vaka_journal.h`, file format in docs/journal.md). Appending a record is a bounded copy into
/// a shared mapping of the file plus an atomic commit, so a record survives the process dying in any way
/// once `append` returned; the offline reader (``read(_:)``) gets them back at the next launch.
///
/// Three rings: breadcrumbs (overwrite oldest; ``breadcrumbs()`` is a consistent snapshot), events and logs
/// (gated: a record is never overwritten before the mover consumed it, ``next(_:after:)`` /
/// ``consume(through:)``; a full gated ring sends appends to `<journal>.spill`).
///
/// When `mmap` of the file is refused (or `allowMmap` is false, or the environment has
/// `VAKA_JOURNAL_NO_MMAP=1`, a test hook), the rings live in memory and ``sync()`` writes them to the file: the
/// owner calls it every ``fallbackSyncInterval`` while records arrive, the crash handler and ``close()`` call it
/// too. This is said once per process on stderr.
///
/// Thread-safe: every method may be called from any thread. ``close()`` waits for calls in progress, then
/// closes; calls after it do nothing (append returns nil with `EBADF`). Deinit closes.
///
/// Public: the offline reader (``read(_:)``) and the record types, for tools (`vaka journal show`). Writing is
/// the SDK's.
public final class Journal: Sendable {
    /// The record kinds, one ring each (raw value: `vaka_journal_kind`).
    public enum Kind: UInt8, Sendable {
        /// A breadcrumb (overwrite ring: the newest survive).
        case breadcrumb = 1
        /// A log record (gated ring).
        case log = 2
        /// An encoded event, JSON (gated ring).
        case event = 3
    }

    /// One typed attribute of a record (the C encoding: `vaka_journal_entry.attributes`).
    public struct Attribute: Sendable, Equatable {
        /// The attribute's name (UTF-8, at most 65,535 bytes).
        public var key: String
        /// Its typed value.
        public var value: LogAttribute
        /// The SDK's own attribute (a breadcrumb's `type`, an event's `event_id`), not user data.
        public var meta: Bool = false

        /// An attribute; every field is described on its property.
        public init(key: String, value: LogAttribute, meta: Bool = false) {
            self.key = key
            self.value = value
            self.meta = meta
        }
    }

    /// Where a record was in the journal (ring position after it, spill offset after it): what
    /// ``next(_:after:)`` continues from and ``consume(through:)`` frees up to. Zero for records from
    /// ``read(_:)`` and ``breadcrumbs()``.
    struct Cursor: Sendable, Equatable {
        var ring: UInt64 = 0
        var spill: UInt64 = 0
    }

    /// One record read back.
    public struct Record: Sendable, Equatable {
        /// Sequence number: 1, 2, 3... across all kinds, in append order.
        public var seq: UInt64
        /// CLOCK_REALTIME at the append (or the time given), nanoseconds since the epoch.
        public var timeNs: UInt64
        /// Which ring it was in.
        public var kind: Kind
        /// The level given at the append (journal levels are ``LogLevel`` raw values; 0: none).
        public var level: UInt8
        /// The category (a breadcrumb's; empty when none).
        public var category: String
        /// The body bytes (UTF-8 text for breadcrumbs and logs, JSON for events).
        public var body: [UInt8]
        /// The typed attributes, in append order.
        public var attributes: [Attribute]
        /// ``read(_:)`` only: a gated record (log, event) the SDK had already moved on (delivered or queued).
        public var consumed: Bool
        /// Where it was (``next(_:after:)`` records only); not part of equality.
        var cursor = Cursor()

        /// The body as text.
        public var text: String { String(decoding: body, as: UTF8.self) }
        /// ``timeNs`` in seconds since the epoch (``Journal/seconds(_:)``).
        public var timestamp: Double { Journal.seconds(timeNs) }

        /// Equal when everything but the journal position is.
        public static func == (a: Record, b: Record) -> Bool {
            a.seq == b.seq && a.timeNs == b.timeNs && a.kind == b.kind && a.level == b.level
                && a.category == b.category && a.body == b.body && a.attributes == b.attributes
                && a.consumed == b.consumed
        }
    }

    /// `seconds` since the epoch as journal time (ns); 0 (the journal's "now") when negative or not finite.
    /// Whole seconds and the fraction are converted apart, so that ``seconds(_:)`` gives back the same `Double`
    /// (a product `seconds * 1e9` is not exact at today's times: 1700000000.25 would come back as 1700000000.2499998).
    static func nanoseconds(_ seconds: Double) -> UInt64 {
        guard seconds.isFinite, seconds > 0, seconds < 1.8e10 else { return 0 }
        let whole = seconds.rounded(.down)
        return UInt64(whole) * 1_000_000_000 + UInt64(((seconds - whole) * 1e9).rounded())
    }

    /// Journal time `ns` as seconds since the epoch (the inverse of ``nanoseconds(_:)``).
    public static func seconds(_ ns: UInt64) -> Double {
        Double(ns / 1_000_000_000) + Double(ns % 1_000_000_000) / 1e9
    }

    /// Default file size: 256 KiB (`VAKA_JOURNAL_DEFAULT_SIZE`).
    static let defaultSize = 256 * 1024
    /// How often the owner should call ``sync()`` in the fallback while records arrive: 0.2 s (what a SIGKILL
    /// can lose there).
    static let fallbackSyncInterval: TimeInterval = 0.2

    /// The journal file (made at each use from ``path``).
    public var url: URL { URL(fileURLWithPath: path) }
    /// The journal file's path.
    let path: String
    /// True when the rings are a shared mapping of the file; false in the write(2) fallback.
    let isMapped: Bool
    /// The errno of the refused `mmap` that selected the fallback, or 0.
    let mmapError: Int32

    // The vaka_journal pointer as an integer (a pointer is not Sendable; the C journal is thread-safe and
    // `state` keeps it alive while any call uses it).
    private let handleBits: UInt
    // Calls in progress (low bits) and the closed flag (closedBit).
    private let state = Atomic<Int>(0)
    private static let closedBit = 1 << 62
    private let failed: (@Sendable (Int32) -> Void)?
    private static let warnedFallback = Atomic<Bool>(false)

    /// Creates (or truncates) the journal file at `path` (its directory must exist; mode 0600), `size` bytes
    /// (clamped to 16 KiB...64 MiB, rounded to pages). `failed` is told the errno of each append that fails
    /// (a full spill, a record over 4 MiB).
    /// - Throws: ``JournalError`` (`open`) when the file cannot be created or sized; a refused mmap is not an
    ///   error (``isMapped`` is false).
    convenience init(path: URL, size: Int = Journal.defaultSize, allowMmap: Bool = true,
                     failed: (@Sendable (Int32) -> Void)? = nil) throws {
        try self.init(filePath: path.fileSystemPath, size: size, allowMmap: allowMmap, failed: failed)
    }

    /// ``init(path:size:allowMmap:failed:)`` for the file at `filePath`: what the SDK's start path calls (no `URL`).
    init(filePath: String, size: Int = Journal.defaultSize, allowMmap: Bool = true,
         failed: (@Sendable (Int32) -> Void)? = nil) throws {
        var flags: Int32 = 0
        if !allowMmap || getenv("VAKA_JOURNAL_NO_MMAP").map({ String(cString: $0) }) == "1" {
            flags |= VAKA_JOURNAL_NO_MMAP
        }
        var handle: OpaquePointer?
        let rc = filePath.withCString { p -> Int32 in
            var options = vaka_journal_options(path: p, size: max(0, size), flags: flags)
            return vaka_journal_open(&options, &handle)
        }
        guard rc == 0, let handle else { throw JournalError(code: rc == 0 ? EINVAL : rc, operation: "open") }
        path = filePath
        handleBits = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle)))
        isMapped = vaka_journal_is_mapped(handle) != 0
        mmapError = vaka_journal_mmap_error(handle)
        self.failed = failed
        if !isMapped, !Self.warnedFallback.exchange(true, ordering: .relaxed) {
            let ms = Int(Self.fallbackSyncInterval * 1000)
            let line = "[vaka] journal: mmap refused (\(String(cString: strerror(mmapError)))): records are written "
                + "every \(ms) ms; a SIGKILL loses the last \(ms) ms\n"
            PrivateFiles.writeStandardError(line)
        }
    }

    deinit { close() }

    private var handle: OpaquePointer { OpaquePointer(bitPattern: handleBits)! }

    /// Runs `body` with the C journal unless closed (then returns nil).
    @inline(__always)
    private func using<T>(_ body: (OpaquePointer) -> T) -> T? {
        let old = state.wrappingAdd(1, ordering: .acquiring).oldValue
        defer { state.wrappingSubtract(1, ordering: .releasing) }
        if old & Self.closedBit != 0 { return nil }
        return body(handle)
    }

    /// Appends a record with a text body; returns its sequence number, or nil (the errno goes to `failed`).
    /// `timeNs` 0 means now. Never throws, never traps.
    @discardableResult
    func append(_ kind: Kind, level: UInt8, timeNs: UInt64 = 0, category: String = "", body: String,
                attributes: [Attribute] = []) -> UInt64? {
        var body = body
        return body.withUTF8 { b in
            appendRaw(kind, level: level, timeNs: timeNs, category: category, body: UnsafeRawBufferPointer(b),
                      attributes: attributes)
        }
    }

    /// Appends a record with a byte body (e.g. an encoded event); as ``append(_:level:timeNs:category:body:attributes:)``.
    @discardableResult
    func append(_ kind: Kind, level: UInt8, timeNs: UInt64 = 0, category: String = "",
                bodyBytes: some ContiguousBytes, attributes: [Attribute] = []) -> UInt64? {
        bodyBytes.withUnsafeBytes { b in
            appendRaw(kind, level: level, timeNs: timeNs, category: category, body: b, attributes: attributes)
        }
    }

    private func appendRaw(_ kind: Kind, level: UInt8, timeNs: UInt64, category: String,
                           body: UnsafeRawBufferPointer, attributes: [Attribute]) -> UInt64? {
        var category = category
        let result: (Int32, UInt64) = category.withUTF8 { c in
            if attributes.isEmpty {
                return call(kind, level, timeNs, UnsafeRawBufferPointer(c), body, UnsafeRawBufferPointer(start: nil, count: 0))
            }
            guard let size = Self.encodedSize(attributes) else { return (EINVAL, 0) }
            return withUnsafeTemporaryAllocation(byteCount: size, alignment: 8) { buffer in
                Self.encode(attributes, into: buffer)
                return call(kind, level, timeNs, UnsafeRawBufferPointer(c), body, UnsafeRawBufferPointer(buffer))
            }
        }
        if result.0 != 0 {
            failed?(result.0)
            return nil
        }
        return result.1
    }

    @inline(__always)
    private func call(_ kind: Kind, _ level: UInt8, _ timeNs: UInt64, _ category: UnsafeRawBufferPointer,
                      _ body: UnsafeRawBufferPointer, _ attributes: UnsafeRawBufferPointer) -> (Int32, UInt64) {
        guard category.count <= UInt32.max, body.count <= UInt32.max, attributes.count <= UInt32.max else {
            return (EFBIG, 0)
        }
        var entry = vaka_journal_entry(kind: kind.rawValue, level: level, time_ns: timeNs,
                                       category: category.baseAddress, category_len: UInt32(category.count),
                                       body: body.baseAddress, body_len: UInt32(body.count),
                                       attributes: attributes.baseAddress, attributes_len: UInt32(attributes.count))
        var seq: UInt64 = 0
        let rc = using { vaka_journal_append($0, &entry, &seq) } ?? EBADF
        return (rc, seq)
    }

    /// The last sequence number handed out (0 before the first append or after close).
    var lastSeq: UInt64 { using { vaka_journal_last_seq($0) } ?? 0 }

    /// The next committed record of a gated kind (`.log`, `.event`) after `after` (nil: the first one not
    /// consumed), ring and spill merged by sequence number; nil when there is none yet (a record still being
    /// written stops the walk, so order is kept). Does not consume. One caller per kind (the mover).
    func next(_ kind: Kind, after: Record?) -> Record? {
        guard kind != .breadcrumb else { return nil }
        var afterC = vaka_journal_record()
        if let after {
            afterC.kind = after.kind.rawValue
            afterC.cursor = (after.cursor.ring, after.cursor.spill)
        }
        var capacity = 4096
        while true {
            var buffer = [UInt8](repeating: 0, count: capacity)
            var record = vaka_journal_record()
            var needed = 0
            let rc: Int32? = buffer.withUnsafeMutableBytes { b in
                using { j in
                    after == nil
                        ? vaka_journal_next(j, kind.rawValue, nil, b.baseAddress, b.count, &record, &needed)
                        : vaka_journal_next(j, kind.rawValue, &afterC, b.baseAddress, b.count, &record, &needed)
                }
            }
            guard let rc else { return nil }
            if rc == -1 && needed > capacity { capacity = needed; continue }
            guard rc == 1 else { return nil }
            var out = Self.convert(record)
            out?.cursor = Cursor(ring: record.cursor.0, spill: record.cursor.1)
            return out
        }
    }

    /// Marks `record` (from ``next(_:after:)``) and every record of its kind before it consumed: their space
    /// is reused. Call once what they carried is durable elsewhere.
    func consume(through record: Record) {
        var c = vaka_journal_record()
        c.kind = record.kind.rawValue
        c.cursor = (record.cursor.ring, record.cursor.spill)
        _ = using { vaka_journal_consume($0, &c) }
    }

    /// How full the ring of `kind` is, 0...1000 (gated: unconsumed bytes; breadcrumbs: bytes used).
    func fillPermille(_ kind: Kind) -> Int { using { Int(vaka_journal_fill_permille($0, kind.rawValue)) } ?? 0 }

    /// A snapshot of the breadcrumb ring, consistent against concurrent appends, in sequence order (oldest
    /// first); empty after close.
    func breadcrumbs() -> [Record] {
        var needed = 0
        _ = using { vaka_journal_snapshot_breadcrumbs($0, nil, 0, &needed) }
        guard needed > 0 else { return [] }
        var buffer = [UInt8](repeating: 0, count: needed)
        let used = buffer.withUnsafeMutableBytes { b in
            using { vaka_journal_snapshot_breadcrumbs($0, b.baseAddress, b.count, &needed) } ?? -1
        }
        guard used > 0 else { return [] }
        var reader: OpaquePointer?
        let rc = buffer.withUnsafeBytes { vaka_journal_reader_open_memory($0.baseAddress, used, &reader) }
        guard rc == 0, let reader else { return [] }
        defer { vaka_journal_reader_close(reader) }
        var records: [Record] = []
        var r = vaka_journal_record()
        while vaka_journal_reader_next(reader, &r) == 1 {
            if let record = Self.convert(r) { records.append(record) }
        }
        return records
    }

    /// In the fallback, writes the rings to the file now (no-op when mapped).
    func sync() { _ = using { vaka_journal_sync($0) } }

    /// Waits for calls in progress, then closes the journal (syncing in the fallback; unregistering it from
    /// the crash handler if still registered). The file stays. Idempotent.
    func close() {
        let old = state.bitwiseOr(Self.closedBit, ordering: .acquiringAndReleasing).oldValue
        if old & Self.closedBit != 0 { return }
        while state.load(ordering: .acquiring) & ~Self.closedBit != 0 { sched_yield() }
        vaka_journal_close(handle)
    }

    /// Registers this journal with the crash handler (`vaka_crash_set_journal`): a crash report then carries
    /// `journal_seq`, and in the fallback the handler writes the rings to the file. ``close()`` unregisters.
    func registerWithCrashHandler() { _ = using { vaka_crash_set_journal($0) } }

    /// Unregisters any journal from the crash handler (`vaka_crash_set_journal(NULL)`).
    static func unregisterFromCrashHandler() { vaka_crash_set_journal(nil) }

    /// Every valid record of the journal file at `url` and its spill (`<url>.spill`), in sequence order, and
    /// the count of records skipped as torn (a writer that died mid-copy) or damaged.
    /// - Throws: ``JournalError`` (`read`): ENOENT, EBADMSG for a file that is not a journal, EFBIG.
    public static func read(_ url: URL) throws -> (records: [Record], skipped: Int) {
        var reader: OpaquePointer?
        let rc = url.path.withCString { vaka_journal_reader_open($0, &reader) }
        guard rc == 0, let reader else { throw JournalError(code: rc == 0 ? EINVAL : rc, operation: "read") }
        defer { vaka_journal_reader_close(reader) }
        var records: [Record] = []
        var r = vaka_journal_record()
        while vaka_journal_reader_next(reader, &r) == 1 {
            if let record = convert(r) { records.append(record) }
        }
        return (records, Int(vaka_journal_reader_skipped(reader)))
    }

    // MARK: - attribute encoding (vaka_journal_entry.attributes)

    private static func valueSize(_ v: LogAttribute) -> Int {
        switch v {
        case .string(let s): return s.utf8.count
        case .integer, .double: return 8
        case .boolean: return 1
        }
    }

    /// Bytes the encoded attributes take, or nil when a key is over 65,535 bytes.
    static func encodedSize(_ attributes: [Attribute]) -> Int? {
        var total = 0
        for a in attributes {
            let k = a.key.utf8.count
            if k > Int(UInt16.max) { return nil }
            total += 8 + k + valueSize(a.value)
        }
        return total
    }

    /// Encodes `attributes` into `buffer` (exactly ``encodedSize(_:)`` bytes).
    static func encode(_ attributes: [Attribute], into buffer: UnsafeMutableRawBufferPointer) {
        var o = 0
        func put<T: FixedWidthInteger>(_ v: T) {
            withUnsafeBytes(of: v.littleEndian) { buffer.baseAddress!.advanced(by: o).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            o += MemoryLayout<T>.size
        }
        func putBytes(_ s: String) {
            var s = s
            s.withUTF8 { u in
                if u.count > 0 { buffer.baseAddress!.advanced(by: o).copyMemory(from: u.baseAddress!, byteCount: u.count) }
                o += u.count
            }
        }
        for a in attributes {
            let type: UInt32
            switch a.value {
            case .string: type = VAKA_JOURNAL_STRING.rawValue
            case .integer: type = VAKA_JOURNAL_INTEGER.rawValue
            case .double: type = VAKA_JOURNAL_DOUBLE.rawValue
            case .boolean: type = VAKA_JOURNAL_BOOLEAN.rawValue
            }
            put(UInt8(type))
            put(UInt8(a.meta ? VAKA_JOURNAL_ATTRIBUTE_META : 0))
            put(UInt16(a.key.utf8.count))
            put(UInt32(valueSize(a.value)))
            putBytes(a.key)
            switch a.value {
            case .string(let s): putBytes(s)
            case .integer(let i): put(i)
            case .double(let d): put(d.bitPattern)
            case .boolean(let b): put(UInt8(b ? 1 : 0))
            }
        }
    }

    /// Decodes encoded attributes; nil when they are malformed.
    static func decodeAttributes(_ bytes: UnsafeRawBufferPointer) -> [Attribute]? {
        var out: [Attribute] = []
        var o = 0
        func u<T: FixedWidthInteger>(_: T.Type, at i: Int) -> T {
            var v: T = 0
            withUnsafeMutableBytes(of: &v) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[i ..< i + MemoryLayout<T>.size])) }
            return T(littleEndian: v)
        }
        while o < bytes.count {
            guard bytes.count - o >= 8 else { return nil }
            let type = UInt32(bytes[o]), flags = bytes[o + 1]
            let keyLen = Int(u(UInt16.self, at: o + 2)), valueLen = Int(u(UInt32.self, at: o + 4))
            o += 8
            guard bytes.count - o >= keyLen, bytes.count - o - keyLen >= valueLen else { return nil }
            let key = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[o ..< o + keyLen]), as: UTF8.self)
            o += keyLen
            let value: LogAttribute
            switch type {
            case VAKA_JOURNAL_STRING.rawValue:
                value = .string(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[o ..< o + valueLen]), as: UTF8.self))
            case VAKA_JOURNAL_INTEGER.rawValue where valueLen == 8: value = .integer(u(Int64.self, at: o))
            case VAKA_JOURNAL_DOUBLE.rawValue where valueLen == 8: value = .double(Double(bitPattern: u(UInt64.self, at: o)))
            case VAKA_JOURNAL_BOOLEAN.rawValue where valueLen == 1: value = .boolean(bytes[o] != 0)
            default: return nil
            }
            o += valueLen
            out.append(Attribute(key: key, value: value, meta: flags & UInt8(VAKA_JOURNAL_ATTRIBUTE_META) != 0))
        }
        return out
    }

    /// A Swift record from a C one (pointers valid during the call); nil for an unknown kind.
    static func convert(_ r: vaka_journal_record) -> Record? {
        guard let kind = Kind(rawValue: r.kind) else { return nil }
        func bytes(_ p: UnsafePointer<UInt8>?, _ n: UInt32) -> UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(start: n > 0 ? p : nil, count: n > 0 ? Int(n) : 0)
        }
        let attributes = decodeAttributes(bytes(r.attributes, r.attributes_len)) ?? []
        return Record(seq: r.seq, timeNs: r.time_ns, kind: kind, level: r.level,
                      category: String(decoding: bytes(r.category, r.category_len), as: UTF8.self),
                      body: [UInt8](bytes(r.body, r.body_len)), attributes: attributes, consumed: r.consumed != 0)
    }
}
