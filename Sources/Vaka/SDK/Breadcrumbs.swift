import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One breadcrumb (`breadcrumbs.values[]` of a Sentry event): something that happened before an event.
public struct Breadcrumb: Codable, Equatable, Sendable {
    /// When it happened, seconds since the Unix epoch with a fraction (`timestamp`).
    public var timestamp: Double
    /// Sentry breadcrumb type: `"default"`, or `"navigation"` for ``Vaka/screen(_:)`` (`type`).
    public var type: String
    /// Dotted category, e.g. `"cart"`, `"navigation"` (`category`).
    public var category: String?
    /// Human-readable text (`message`).
    public var message: String?
    /// Severity, `"info"` by default (`level`).
    public var level: String?
    /// Extra key/value strings, e.g. `{"from": "Cart", "to": "Checkout"}` for navigation (`data`).
    public var data: [String: String]?

    /// Creates a breadcrumb; every field is described on its property.
    public init(timestamp: Double, type: String = "default", category: String? = nil, message: String? = nil,
                level: String? = "info", data: [String: String]? = nil) {
        self.timestamp = timestamp
        self.type = type
        self.category = category
        self.message = message
        self.level = level
        self.data = data
    }
}

/// The breadcrumbs of one run: the last ``capacity`` (100) in memory, and on disk so that they survive a
/// crash of the run (the crash join on the next launch reads them back with ``load(runDirectory:capacity:)``).
///
/// Storage: `<run directory>/breadcrumbs.jsonl`, one JSON breadcrumb per line, appended with one `write(2)`
/// per breadcrumb (file mode 0600); when the file holds 2 × capacity lines it is rewritten atomically with the
/// last `capacity`. A line cut short by process death is skipped when reading.
///
/// This is the only type that knows where breadcrumbs live: a crash-safe memory-mapped ring can replace it
/// without touching its callers (`add`, `snapshot`, `load`). Not thread-safe: the SDK calls it under its lock.
final class BreadcrumbStore {
    /// Most breadcrumbs kept (and put on an event): 100.
    static let defaultCapacity = 100
    /// Most breadcrumbs kept.
    let capacity: Int
    /// `<run directory>/breadcrumbs.jsonl`, or `nil` for a memory-only store.
    let fileURL: URL?

    private var ring: [Breadcrumb] = []
    private var lines: [Data] = []  // ring[i] encoded, newline-terminated (reused when compacting)
    private var linesInFile = 0
    private var fd: Int32 = -1
    private var appendFailed = false  // the file may end in a partial line: only a compaction writes again
    private var failedAdds = 0        // breadcrumbs added since the last failed write
    private let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// A store writing to `<runDirectory>/breadcrumbs.jsonl` (`nil`: memory only).
    init(runDirectory: URL?, capacity: Int = BreadcrumbStore.defaultCapacity) {
        self.capacity = max(1, capacity)
        fileURL = runDirectory?.appendingPathComponent("breadcrumbs.jsonl")
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// Adds one breadcrumb (dropping the oldest beyond ``capacity``) and appends it to the file.
    /// A failed write is not an error (the breadcrumb stays in memory, and on the next event): after one,
    /// the file is rewritten whole (from memory) only every ``capacity`` breadcrumbs until a write succeeds.
    func add(_ crumb: Breadcrumb) {
        ring.append(crumb)
        var line = fileURL == nil ? Data() : ((try? encoder.encode(crumb)) ?? Data())
        if !line.isEmpty { line.append(0x0A) }
        lines.append(line)
        if ring.count > capacity {
            ring.removeFirst(ring.count - capacity)
            lines.removeFirst(lines.count - capacity)
        }
        guard let fileURL, !line.isEmpty else { return }
        if linesInFile + 1 >= 2 * capacity || appendFailed {
            // After a failed append, retry by compaction only every `capacity` breadcrumbs (no write per call
            // on a full disk).
            if appendFailed {
                failedAdds += 1
                if failedAdds < capacity { return }
                failedAdds = 0
            }
            compact(fileURL)
            return
        }
        if fd < 0 {
            fd = open(fileURL.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            if fd < 0 { return }
        }
        // SIGXFSZ blocked: a quota (RLIMIT_FSIZE) fails the write instead of killing the app. A failed or short
        // write (full disk, quota) may leave a partial line: stop appending (the reader skips that line) and let
        // the next compaction rewrite the file whole; the breadcrumb stays in memory either way.
        if PrivateFiles.withFileSizeSignalBlocked({ PrivateFiles.writeAll(fd, line) }) == 0 {
            linesInFile += 1
        } else {
            Glibc.close(fd)
            fd = -1
            appendFailed = true
        }
    }

    /// The breadcrumbs held, oldest first (at most ``capacity``).
    func snapshot() -> [Breadcrumb] { ring }

    /// Rewrites the file with the ring only (atomic rename), and reopens it for appending.
    private func compact(_ url: URL) {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
        var data = Data()
        for line in lines { data.append(line) }
        do {
            try PrivateFiles.writeAtomically(data, to: url, sync: false)
            linesInFile = ring.count
            appendFailed = false
        } catch {
            linesInFile = 0
            appendFailed = true
        }
    }

    /// Most bytes read from the end of a breadcrumbs file by ``load(runDirectory:capacity:)``: 4 MiB, room for
    /// 100 breadcrumbs of 40 KiB each (more than an event keeps of one: ``EventBudget`` cuts a breadcrumb's
    /// message to 8192 characters and its data values to 1024). The file the SDK writes holds at most
    /// 2 × 100 lines; a bigger one (damaged, or grown by something else) is never read whole.
    static let maxLoadBytes = 4 << 20

    /// The last `capacity` breadcrumbs a run left in `runDirectory` (oldest first); empty when there is no file.
    /// Only the last ``maxLoadBytes`` of the file are read (a 1 GiB file costs one 4 MiB read); lines that are
    /// not a whole JSON breadcrumb (cut short by a crash, or by where that tail starts) are skipped.
    static func load(runDirectory: URL, capacity: Int = BreadcrumbStore.defaultCapacity) -> [Breadcrumb] {
        let path = runDirectory.appendingPathComponent("breadcrumbs.jsonl").path
        guard let data = PrivateFiles.readTail(path, maxBytes: maxLoadBytes) else { return [] }
        let decoder = JSONDecoder()
        // Lines found with memchr, newest last; only the last `capacity` lines that decode are kept, and
        // decoding walks back from the end so that older lines (up to 2 × capacity) are not decoded at all.
        var lines: [Range<Int>] = []
        data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            guard let base = raw.baseAddress else { return }
            var start = 0
            while start < raw.count {
                var end = raw.count
                if let hit = memchr(base + start, 0x0A, raw.count - start) {
                    end = UnsafeRawPointer(hit) - base
                }
                if end > start { lines.append(start..<end) }
                start = end + 1
            }
        }
        var crumbs: [Breadcrumb] = []
        for range in lines.reversed() where crumbs.count < max(0, capacity) {
            if let crumb = try? decoder.decode(Breadcrumb.self, from: data.subdata(in: range)) { crumbs.append(crumb) }
        }
        return crumbs.reversed()
    }
}
