import Foundation
import Synchronization

/// What the SDK dropped, counted per reason and data category, and sent to the server as Sentry client
/// reports: a `client_report` envelope item
/// `{"timestamp": <seconds since the epoch>, "discarded_events": [{"reason", "category", "quantity"}, ...]}`
/// (item header `{"content_type":"application/json","length":N,"type":"client_report"}`, as sentry_sdk writes
/// it), added to the next envelope that goes out: the next POST in queue mode (``Uploader``), the next outbox
/// file in outbox mode (``Delivery/submit(_:durable:)``).
///
/// Counting: a dropped envelope item counts 1 in its category (`event` → `error`, `session` → `session`,
/// `attachment` → `attachment` with its size in bytes, at least 1; `log` → `log_item` with its `item_count`,
/// plus `log_byte` with its size), as sentry_sdk's `record_lost_event` does; `client_report` items are never
/// counted.
///
/// Persistence: the counts live in `<storage>/client_reports.json` (mode 0600), so drops of a run that ends
/// before any envelope goes out are sent by a later one. The file is read and written under an exclusive
/// `flock` of `<storage>/client_reports.lock`, so processes sharing the storage directory add to it and
/// never send the same counts twice. It holds the counts not sent yet (`pending`) and the counts travelling
/// in an envelope right now, per sending process (`in_flight`, keyed by pid and a random token):
/// - taking a report (``take()``) moves `pending` to this process's `in_flight` entry; at most one report per
///   ``ClientReports`` value travels at a time (an envelope that goes out meanwhile carries none);
/// - the envelope accepted (2xx) or written to the outbox: ``commit(_:)`` removes the entry;
/// - the envelope not accepted (any other answer, no answer, a failed write): ``abort(_:)`` moves the counts
///   back to `pending`, so they go with a later envelope, neither lost nor counted twice;
/// - the process dying while a report travels leaves its entry; a later ``take()`` by a process whose pid is
///   another settles an entry of a pid that no longer exists. An entry taken for an outbox file names that
///   file (`carriers`: pid and token → file name in `<storage>/outbox/`): when the file is there, it was
///   written and the report went out in it, so the entry is removed; otherwise (the death came before the
///   write) its counts go back to `pending`. An entry taken for a POST goes back to `pending`: if the server
///   had accepted that envelope just before the death, those counts reach the server twice (the one window;
///   an envelope has the same window and is deduplicated by `event_id`, a client report cannot be). So does an
///   outbox file that something else removed between the death and the next take (a cap's trim: its items
///   were never read, so the counts rightly go again).
/// Drops are written to the file at once when the last write is at least 1 s old, otherwise held in memory
/// and written by the next ``record(_:category:quantity:)`` after that second, ``take()`` or ``persist()``
/// (called at close): a burst (sampling thousands of events) costs one write per second, and a process
/// killed by SIGKILL loses at most the last second's counts.
///
/// Storage that cannot be written (read-only, full): the counts stay in memory and still go out with the next
/// envelope (put back in memory when it fails); they do not outlive the process then.
///
/// Bounded: at most ``maxEntries`` reason/category pairs in `pending` and ``maxInFlight`` in-flight entries
/// (the oldest pid's merged back beyond that); a file over 64 KiB or not JSON is replaced. Quantities
/// saturate at `Int.max`.
///
/// Thread-safe: the in-memory state is one `Mutex`; the file is changed only under the lock file.
final class ClientReports: Sendable {
    /// Sentry's discard reasons that Vaka uses.
    enum Reason: String, Sendable, CaseIterable {
        /// Not kept by ``Vaka/Options/sampleRate``.
        case sampleRate = "sample_rate"
        /// Dropped by ``Vaka/Options/beforeSend``.
        case beforeSend = "before_send"
        /// Dropped because the server's rate limit was in force (not used today: limited items are kept
        /// until the limit ends).
        case ratelimitBackoff = "ratelimit_backoff"
        /// Dropped from memory while the storage could not be written (over 4 MiB held).
        case queueOverflow = "queue_overflow"
        /// Dropped from storage at a cap: the oldest batch files in `pending/` (200 files), the oldest outbox
        /// files (1,000 files / 64 MiB).
        case cacheOverflow = "cache_overflow"
        /// The server refused it for good (a 4xx other than 401/407/408/429, or 413 even at the smallest size).
        case sendError = "send_error"
        /// Lost inside the SDK: an outbox write that failed, a crash report that does not parse, a journalled
        /// event whose JSON does not decode.
        case internalSDKError = "internal_sdk_error"
        /// Not recorded: a log whose journal append failed (its spill file full, or a write error).
        case bufferOverflow = "buffer_overflow"
    }

    /// A counter key.
    struct Key: Hashable, Sendable, Comparable {
        var reason: String
        var category: String
        static func < (a: Key, b: Key) -> Bool { (a.reason, a.category) < (b.reason, b.category) }
    }

    /// A report taken for one envelope: its item, and what ``commit(_:)``/``abort(_:)`` settle.
    struct Ticket: Sendable {
        /// The `client_report` item to add to the envelope.
        let item: EnvelopeItem
        /// The counts it carries.
        let counts: [Key: Int]
        /// `true`: the file could not be used (storage not writable), the counts were only in memory.
        var inMemory = false
    }

    /// Most reason/category pairs kept.
    static let maxEntries = 64
    /// Most in-flight entries kept in the file.
    static let maxInFlight = 16
    /// Most bytes of the file read.
    static let maxFileBytes = 64 * 1024

    /// The path of the storage directory the file is kept in (absolute). Paths, not URLs: `Vaka.start` makes
    /// this value, and a `URL`'s first use in a process costs pages of Foundation made resident and its parsing.
    let storagePath: String
    /// The storage directory as a file URL (made at each use).
    var storageDirectory: URL { URL(fileURLWithPath: storagePath, isDirectory: true) }
    /// `<storage>/client_reports.json`.
    var path: String { PrivateFiles.path(storagePath, "client_reports.json") }
    /// `<storage>/client_reports.json` as a file URL.
    var url: URL { URL(fileURLWithPath: path) }
    /// `<storage>/client_reports.lock`.
    var lockPath: String { PrivateFiles.path(storagePath, "client_reports.lock") }
    /// `<storage>/outbox` as a path: where the carrier files of in-flight entries are looked for.
    var outboxDirectory: String { PrivateFiles.path(storagePath, "outbox") }
    /// This value's in-flight key in the file: `<pid>:<random token>`.
    let owner: String
    /// `false`: nothing is counted, nothing is sent (``Vaka/Options/sendClientReports``).
    let enabled: Bool
    private let logSink: (@Sendable (String) -> Void)?

    private struct State {
        /// Counts not written to the file yet.
        var unsaved: [Key: Int] = [:]
        /// When the file was last written by ``record(_:category:quantity:)``.
        var lastWrite: UInt64 = 0
        /// Whether a report of this value is travelling.
        var inFlight = false
        /// Whether the file may hold counts to send (true at first: an earlier run may have left some).
        var fileMayHoldCounts = true
        /// Drops recorded so far (a take that found nothing clears ``fileMayHoldCounts`` only when none came meanwhile).
        var recorded: UInt64 = 0
    }
    private let state = Mutex(State())

    /// Client reports kept in `storageDirectory`.
    convenience init(storageDirectory: URL, enabled: Bool = true, log: (@Sendable (String) -> Void)? = nil) {
        self.init(storagePath: storageDirectory.fileSystemPath, enabled: enabled, log: log)
    }

    /// Client reports kept in the storage directory at `storagePath` (absolute).
    init(storagePath: String, enabled: Bool = true, log: (@Sendable (String) -> Void)? = nil) {
        self.storagePath = storagePath
        owner = NumberText.decimal(Int(getpid())) + ":" + RandomID.hex8()
        self.enabled = enabled
        logSink = log
    }

    // MARK: - Counting

    /// Counts `quantity` (at least 1) dropped in `category` for `reason`.
    func record(_ reason: Reason, category: String, quantity: Int = 1) {
        record([Key(reason: reason.rawValue, category: category): max(1, quantity)])
    }

    /// Counts a dropped envelope item (see the type's documentation for the categories and quantities).
    func record(_ reason: Reason, item: EnvelopeItem) {
        record(ClientReports.counts(reason, item: item))
    }

    /// Counts every item of a dropped envelope.
    func record(_ reason: Reason, envelope: Envelope) {
        var all: [Key: Int] = [:]
        for item in envelope.items { all.merge(ClientReports.counts(reason, item: item), uniquingKeysWith: ClientReports.add) }
        record(all)
    }

    /// Counts every item of dropped serialized envelopes (a batch file or records held in memory); records that
    /// do not parse are not counted.
    func record(_ reason: Reason, serialized records: [Data]) {
        var all: [Key: Int] = [:]
        for record in records {
            guard let envelope = try? Envelope(data: record) else { continue }
            for item in envelope.items { all.merge(ClientReports.counts(reason, item: item), uniquingKeysWith: ClientReports.add) }
        }
        record(all)
    }

    /// The counts one dropped item makes.
    static func counts(_ reason: Reason, item: EnvelopeItem) -> [Key: Int] {
        let r = reason.rawValue
        switch item.type.rawValue {
        case "client_report": return [:]
        case "log":
            return [Key(reason: r, category: "log_item"): max(1, item.itemCount ?? 1),
                    Key(reason: r, category: "log_byte"): max(1, item.payload.count)]
        case "attachment":
            return [Key(reason: r, category: "attachment"): max(1, item.payload.count)]
        default:
            return [Key(reason: r, category: RateLimits.category(for: item.type)): 1]
        }
    }

    private static func add(_ a: Int, _ b: Int) -> Int {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? Int.max : sum
    }

    private func record(_ counts: [Key: Int]) {
        guard enabled, !counts.isEmpty else { return }
        let now = DispatchTime.now().uptimeNanoseconds
        let due = state.withLock { state -> Bool in
            state.unsaved.merge(counts, uniquingKeysWith: ClientReports.add)
            state.fileMayHoldCounts = true
            state.recorded &+= 1
            guard state.lastWrite == 0 || now &- state.lastWrite >= 1_000_000_000 else { return false }
            state.lastWrite = now
            return true
        }
        if due { persist() }
    }

    /// Writes the counts held in memory to the file (at close, and by the calls above).
    func persist() {
        guard enabled else { return }
        let unsaved = state.withLock { state -> [Key: Int] in
            defer { state.unsaved = [:] }
            return state.unsaved
        }
        guard !unsaved.isEmpty else { return }
        let ok = withFile { file in file.pending.merge(unsaved, uniquingKeysWith: ClientReports.add) }
        if !ok { state.withLock { $0.unsaved.merge(unsaved, uniquingKeysWith: ClientReports.add) } }
    }

    /// The counts not sent yet, written or not (tests and debug output).
    func pendingCounts() -> [Key: Int] {
        var counts = state.withLock { $0.unsaved }
        _ = withFile(write: false) { file in counts.merge(file.pending, uniquingKeysWith: ClientReports.add) }
        return counts
    }

    // MARK: - Sending

    /// A report of everything counted and not sent yet (also by earlier runs and other processes), moved to
    /// this value's in-flight entry; `nil` when there is nothing to send, a report of this value is already
    /// travelling, or the file cannot be used. Settle it with ``commit(_:)`` or ``abort(_:)``.
    /// - Parameter name: the name of the outbox file (from ``Outbox/newFileName(for:at:)``) the report will be
    ///   written in, recorded with the entry so that a death between that write and ``commit(_:)`` does not
    ///   send the counts again; `nil` for a POST.
    func take(now: Date = Date(), carrierName name: String? = nil) -> Ticket? {
        guard enabled else { return nil }
        let started: (unsaved: [Key: Int], recorded: UInt64)? = state.withLock { state in
            guard !state.inFlight, state.fileMayHoldCounts || !state.unsaved.isEmpty else { return nil }
            state.inFlight = true
            defer { state.unsaved = [:] }
            return (state.unsaved, state.recorded)
        }
        guard let (unsaved, recorded) = started else { return nil }
        if unsaved.isEmpty, access(path, F_OK) != 0 {
            // Nothing counted anywhere: no lock file is created, and no later envelope looks again until a drop.
            state.withLock { state in
                state.inFlight = false
                if state.recorded == recorded { state.fileMayHoldCounts = false }
            }
            return nil
        }
        var taken: [Key: Int] = [:]
        let owner = self.owner
        let outbox = outboxDirectory
        let carrierName = name.flatMap { File.isCarrierName($0) ? $0 : nil }
        let ok = withFile { file in
            file.pending.merge(unsaved, uniquingKeysWith: ClientReports.add)
            file.reclaimDeadOwners(except: owner, outbox: outbox)
            taken = file.pending
            file.pending = [:]
            if !taken.isEmpty {
                file.inFlight[owner] = taken
                file.carriers[owner] = carrierName
            }
        }
        if !ok {
            // Storage that cannot be written: what this process counted still goes out, from memory.
            guard !unsaved.isEmpty else {
                state.withLock { $0.inFlight = false }
                return nil
            }
            return Ticket(item: ClientReports.item(unsaved, timestamp: now.timeIntervalSince1970), counts: unsaved, inMemory: true)
        }
        guard !taken.isEmpty else {
            state.withLock { state in
                state.inFlight = false
                if state.recorded == recorded { state.fileMayHoldCounts = false }
            }
            return nil
        }
        return Ticket(item: ClientReports.item(taken, timestamp: now.timeIntervalSince1970), counts: taken)
    }

    /// The envelope that carried `ticket` was accepted (or written to the outbox): its counts are done.
    func commit(_ ticket: Ticket) {
        let owner = self.owner
        if !ticket.inMemory, !withFile(body: { file in
            file.inFlight[owner] = nil
            file.carriers[owner] = nil
        }) {
            logSink?("client reports: could not update client_reports.json after a report was sent; its counts may be sent again")
        }
        state.withLock { $0.inFlight = false }
    }

    /// The envelope that carried `ticket` did not go out: its counts go back to `pending` for a later one.
    func abort(_ ticket: Ticket) {
        let owner = self.owner
        if ticket.inMemory {
            state.withLock { state in
                state.unsaved.merge(ticket.counts, uniquingKeysWith: ClientReports.add)
                state.inFlight = false
            }
            return
        }
        if !withFile(body: { file in
            if let counts = file.inFlight.removeValue(forKey: owner) { file.pending.merge(counts, uniquingKeysWith: ClientReports.add) }
            file.carriers[owner] = nil
        }) {
            // The file still names the counts as in flight for this pid: a later process reclaims them.
            logSink?("client reports: could not put back a report that was not sent")
        }
        state.withLock { state in
            state.inFlight = false
            state.fileMayHoldCounts = true
        }
    }

    /// The `client_report` item for `counts` (sorted by reason, then category).
    static func item(_ counts: [Key: Int], timestamp: Double) -> EnvelopeItem {
        let payload: [String: Any] = ["timestamp": timestamp, "discarded_events": list(counts)]
        return EnvelopeItem(type: .clientReport, payload: json(payload), contentType: "application/json")
    }

    /// `counts` as `[{"category", "quantity", "reason"}]`, sorted by reason, then category.
    static func list(_ counts: [Key: Int]) -> [[String: Any]] {
        counts.sorted { $0.key < $1.key }.prefix(maxEntries).map { key, quantity in
            ["reason": key.reason, "category": key.category, "quantity": quantity]
        }
    }

    /// JSON bytes of `object`, keys sorted, `/` not escaped (only strings, numbers, arrays and objects: cannot fail).
    static func json(_ object: [String: Any]) -> Data {
        (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
    }

    // MARK: - The file

    /// The file's content.
    struct File {
        var pending: [Key: Int] = [:]
        var inFlight: [String: [Key: Int]] = [:]
        /// The outbox file (name in `<storage>/outbox/`) an in-flight entry travels in, by entry key; no entry
        /// here for a report taken for a POST.
        var carriers: [String: String] = [:]

        /// Whether `name` can be an outbox file's name (no path, not hidden, `.envelope`, at most 128 bytes).
        static func isCarrierName(_ name: String) -> Bool {
            name.utf8.count <= 128 && name.hasSuffix(".envelope") && !name.hasPrefix(".") && !name.contains("/")
        }

        /// Settles the in-flight entries of processes that no longer exist (not `owner`), and the oldest
        /// entries beyond ``ClientReports/maxInFlight``: one whose carrier file is in `outbox` went out in it
        /// and is removed; the others' counts move back to `pending`.
        mutating func reclaimDeadOwners(except owner: String, outbox: String) {
            for key in inFlight.keys where key != owner {
                let pid = key.split(separator: ":").first.flatMap { Int32($0) } ?? 0
                // An entry of this process under another token belongs to another live value: kept.
                let alive = pid > 0 && (pid == getpid() || kill(pid, 0) == 0 || errno == EPERM)
                if !alive { settle(key, outbox: outbox) }
            }
            while inFlight.count > ClientReports.maxInFlight, let oldest = inFlight.keys.sorted().first {
                settle(oldest, outbox: outbox)
            }
        }

        /// Removes the entry `key`: its counts go back to `pending` unless its carrier file exists in `outbox`.
        private mutating func settle(_ key: String, outbox: String) {
            let counts = inFlight.removeValue(forKey: key) ?? [:]
            if let carrier = carriers.removeValue(forKey: key), access(outbox + "/" + carrier, F_OK) == 0 { return }
            pending.merge(counts, uniquingKeysWith: ClientReports.add)
        }

        /// Parses the file's JSON; unknown or malformed entries are skipped.
        init(data: Data) {
            guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }
            func counts(_ value: Any?) -> [Key: Int] {
                var out: [Key: Int] = [:]
                for entry in (value as? [[String: Any]] ?? []).prefix(ClientReports.maxEntries) {
                    guard let reason = entry["reason"] as? String, let category = entry["category"] as? String,
                          reason.utf8.count <= 64, category.utf8.count <= 64,
                          let quantity = (entry["quantity"] as? NSNumber)?.int64Value, quantity > 0 else { continue }
                    let key = Key(reason: reason, category: category)
                    out[key] = ClientReports.add(out[key] ?? 0, Int(clamping: quantity))
                }
                return out
            }
            pending = counts(object["pending"])
            for (key, value) in (object["in_flight"] as? [String: Any] ?? [:]).prefix(ClientReports.maxInFlight * 2) where key.utf8.count <= 64 {
                let c = counts(value)
                if !c.isEmpty { inFlight[key] = c }
            }
            for (key, value) in object["carriers"] as? [String: Any] ?? [:] {
                if inFlight[key] != nil, let name = value as? String, File.isCarrierName(name) { carriers[key] = name }
            }
        }

        init() {}

        /// The file's JSON (keys sorted).
        func encoded() -> Data {
            var flight: [String: Any] = [:]
            for (key, counts) in inFlight { flight[key] = ClientReports.list(counts) }
            var object: [String: Any] = ["pending": ClientReports.list(pending), "in_flight": flight]
            if !carriers.isEmpty { object["carriers"] = carriers }
            return ClientReports.json(object)
        }
    }

    /// Runs `body` on the file's content under the lock file, then writes it back (when `write`). `false` when
    /// the lock or the write failed (the storage cannot be written).
    @discardableResult
    private func withFile(write: Bool = true, body: (inout File) -> Void) -> Bool {
        let fd = PrivateFiles.openLockFile(lockPath)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 { if errno != EINTR { return false } }
        var file = File()
        if case .data(let data) = PrivateFiles.readCapped(path, maxBytes: ClientReports.maxFileBytes) { file = File(data: data) }
        let before = file.encoded()
        body(&file)
        guard write else { return true }
        let after = file.encoded()
        if after == before { return true }
        if file.pending.isEmpty && file.inFlight.isEmpty {
            return unlink(path) == 0 || errno == ENOENT
        }
        do {
            try after.withUnsafeBytes { try PrivateFiles.writeAtomically($0, toPath: path, sync: false) }
            return true
        } catch {
            logSink?("client reports: cannot write \(path) (\(error))")
            return false
        }
    }
}

extension EnvelopeItem.ItemType {
    /// `client_report`: what the SDK dropped, per reason and category (``ClientReports``). Never rate limited,
    /// never counted as dropped itself.
    public static let clientReport = EnvelopeItem.ItemType(rawValue: "client_report")
}
