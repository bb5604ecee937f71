import Foundation

/// Keeps an event within the size a Sentry server accepts. Applied to every ``Event`` the SDK builds (handled
/// error, message, `track`, `screen`, and the fatal event of the crash join) as it is encoded for an envelope
/// (``EventFactory/finalize(_:budget:log:)``, ``fit(_:)``), and again with a smaller budget to a single stored
/// event a server answered 413 for, read back as an ``Event`` (``Uploader``): one trimming whatever the event's
/// origin, always on ``Event`` values. An event within every limit is encoded once and left as it is. Fields an
/// ``Event`` carries in its `other` members (a stored event's odd values) are bounded like the strings of the
/// field they stand for.
///
/// Why: Sentry rejects with `413 Payload Too Large` an event over 1 MB decompressed or 200 KB compressed
/// (docs.sentry.io, "Size Limits"; the envelope documentation lists 1 MB per `event` item). A rejected event
/// is lost, so the SDK trims before sending instead.
///
/// **Per-field limits** (always applied; lengths in Unicode scalars, the unit Relay counts; a cut string ends
/// in `...`), as Sentry documents them for SDKs ("Data Handling: Variable Size") and Relay enforces them:
/// - `logentry.formatted`/`logentry.message`/`message`, `exception.values[].value`, breadcrumb `message`:
///   8192 (``maxMessageChars``, Sentry's message limit);
/// - tag keys and tag values: 200 each (``maxTagChars``);
/// - breadcrumb `data` values: 1024 (``maxBreadcrumbDataChars``); at most the last 100 breadcrumbs;
/// - `extra`: a string value 16384 (``maxExtraValueChars``, Sentry's 16 kB per item); all of `extra` at most
///   256 KiB of JSON (Sentry's total), the largest entries dropped first;
/// - identity fields, which no trimming step changes (``limitIdentity(_:_:)``): `release` 200 UTF-8 bytes and
///   `environment` 64 (Relay's limits; control characters, `/` and `\` become `_`), `dist` 64, `server_name`
///   200, `sdk` strings 200; so an identity field can never keep an event over its budget;
/// - every other string: 8192;
/// - stack traces: at most 250 frames each (``maxFrames``, Relay's hard limit), keeping the oldest 125 and the
///   newest 125 (Relay alone would keep only the newest 250).
///
/// **Byte budget** (``maxEventBytes``, default 900 KiB of JSON, a safe margin under the 1 MB event limit; and
/// ``maxCompressedBytes``, default 180 KiB of gzip, under the 200 KB compressed limit: random text such as
/// hashes or encoded blobs compresses to about ¾ of its size, so 900 KiB of it would be ~670 KB gzipped). When
/// the encoded event is over either, it is reduced step by step, each step only as far as needed:
/// 1. breadcrumbs, oldest first (all of them if need be);
/// 2. long strings outside the crash itself (`logentry`, `tags`, `extra`, `contexts`, `user`, ...): cut to
///    4096, 1024, 256, then 64;
/// 3. entries of `extra`, then `tags`, then `contexts` (in key order, the last ones first);
/// 4. a thread's stack trace that repeats the exception's;
/// 5. frames of every stack trace, keeping the oldest and the newest halves of 128, 64, 32, then 16;
/// 6. last: `threads`, `debug_meta`, and every string (also the exception's) cut to 1024, then 256.
///
/// What was removed is said in the event's `extra`: `breadcrumbs_omitted`, `frames_omitted` (frames taken out of
/// the middle of the exception's stack trace, counting the 250-frame limit), `event_trimmed_from_bytes` (the
/// JSON size before the first trimming); a later trimming of the same event (a 413 retry) adds to the counts. The crash's signal, exception type and mechanism are never removed.
public struct EventBudget: Sendable, Equatable {
    /// Most bytes of the event's JSON. Default 900 KiB (921 600).
    public var maxEventBytes: Int
    /// Most bytes of the event's JSON after gzip (the request body compresses the whole envelope; the rest
    /// of a crash envelope, the header and a session update, is a few hundred bytes). Default 180 KiB.
    public var maxCompressedBytes: Int

    /// The budget every event is built within: 900 KiB of JSON, 180 KiB gzipped.
    public static let standard = EventBudget(maxEventBytes: 900 * 1024, maxCompressedBytes: 180 * 1024)
    /// The smallest budget a 413 retry goes down to (16 KiB); below it the event is given up.
    public static let floorBytes = 16 * 1024

    /// Sentry's message limit, in Unicode scalars: messages, exception values, breadcrumb messages, and every
    /// string without a smaller limit.
    public static let maxMessageChars = 8192
    /// Tag key and tag value limit (Sentry/Relay: 200 characters each).
    public static let maxTagChars = 200
    /// Limit of each breadcrumb `data` value.
    public static let maxBreadcrumbDataChars = 1024
    /// Limit of a string in `extra` (Sentry: 16 kB per extra item).
    public static let maxExtraValueChars = 16384
    /// Most JSON bytes of all of `extra` (Sentry: 256 kB).
    public static let maxExtraBytes = 256 * 1024
    /// Most breadcrumbs on an event (the newest are kept).
    public static let maxBreadcrumbs = 100
    /// Most frames in one stack trace (Relay's hard limit); the oldest and the newest halves are kept.
    public static let maxFrames = 250

    /// A budget of `maxEventBytes` JSON bytes and `maxCompressedBytes` gzipped bytes (each at least 1 KiB).
    public init(maxEventBytes: Int, maxCompressedBytes: Int) {
        self.maxEventBytes = max(1024, maxEventBytes)
        self.maxCompressedBytes = max(1024, maxCompressedBytes)
    }

    /// The result of ``fit(_:)``.
    public struct Outcome: Sendable {
        /// The event's JSON (keys sorted, `/` not escaped), within the budget when ``fits``.
        public var data: Data
        /// JSON bytes before any trimming.
        public var originalBytes: Int
        /// Whether ``data`` is within both limits (`false` only when even the last step was not enough).
        public var fits: Bool
        /// Breadcrumbs removed (over the 100 cap or for the budget).
        public var breadcrumbsOmitted = 0
        /// Frames removed from the middle of the exception's stack traces.
        public var framesOmitted = 0
        /// Strings that were cut.
        public var stringsTruncated = 0
        /// `extra`/`tags`/`contexts` entries and whole fields (`threads`, `debug_meta`) removed.
        public var entriesDropped = 0
        /// Whether anything was changed.
        public var trimmed: Bool { breadcrumbsOmitted + framesOmitted + stringsTruncated + entriesDropped > 0 }
        /// One line for debug output.
        public var summary: String {
            "\(originalBytes) → \(data.count) B JSON; \(breadcrumbsOmitted) breadcrumb(s), \(framesOmitted) frame(s), \(entriesDropped) entr(ies) removed, \(stringsTruncated) string(s) cut\(fits ? "" : "; STILL OVER BUDGET")"
        }
    }

    /// `event`'s ``Event/Encoding/wire`` JSON within the per-field limits and the budget (see the type's
    /// documentation): an event the SDK built, or a stored event read back for a 413 retry (``Uploader``). The
    /// common event (no field over a limit, within the budget) is encoded once and left as it is. Never fails;
    /// ``Outcome/fits`` says whether the budget was met.
    public func fit(_ event: Event) -> Outcome {
        let encoder = Event.encoder(encoding: .wire)
        func encode(_ e: Event) -> Data { (try? encoder.encode(e)) ?? Data("{}".utf8) }
        func within(_ e: Event) -> Bool { self.within(encode(e)) }
        let original = encode(event)
        var e = event
        var outcome = Outcome(data: original, originalBytes: original.count, fits: false)
        var trace = Trace()
        EventBudget.applyFieldLimits(&e, eventBytes: original.count, &trace)
        if trace.isEmpty, self.within(original) {
            outcome.fits = true
            return outcome  // the common case: one encoding, nothing changed
        }
        func finish(_ fits: Bool) -> Outcome {
            if trace.isEmpty {
                outcome.fits = fits
                return outcome  // untouched: the original bytes
            }
            // Added to what an earlier trimming of the same event (before a 413 retry) recorded.
            var extra = e.extra ?? [:]
            func add(_ key: String, _ count: Int) {
                guard count > 0 else { return }
                extra[key] = .int((extra[key]?.intValue ?? 0) + Int64(count))
            }
            add(EventBudget.breadcrumbsOmittedKey, trace.breadcrumbs)
            add(EventBudget.framesOmittedKey, trace.frames)
            if extra[EventBudget.trimmedFromBytesKey]?.intValue == nil {
                extra[EventBudget.trimmedFromBytesKey] = .int(Int64(original.count))
            }
            e.extra = extra
            outcome.data = encode(e)
            outcome.fits = fits
            outcome.breadcrumbsOmitted = trace.breadcrumbs
            outcome.framesOmitted = trace.frames
            outcome.stringsTruncated = trace.strings
            outcome.entriesDropped = trace.entries
            return outcome
        }
        // Unchanged by the field limits: it was just measured (and did not fit).
        if !trace.isEmpty, within(e) { return finish(true) }
        // Frame trust is not on the wire: a thread's stack trace repeats the exception's whatever the trust.
        e.forEachStacktrace { stacktrace, _ in
            guard stacktrace.frames.contains(where: { $0.trust != nil }) else { return }
            for i in stacktrace.frames.indices { stacktrace.frames[i].trust = nil }
        }

        // 1. Breadcrumbs, oldest first.
        if let crumbs = e.breadcrumbs?.values, !crumbs.isEmpty {
            let keep = largestFitting(upTo: crumbs.count, guess: breadcrumbGuess(e, crumbs, encoder)) { k in
                var t = e
                t.breadcrumbs = k == 0 ? nil : ValueList(Array(crumbs.suffix(k)))
                return within(t)
            }
            trace.breadcrumbs += crumbs.count - keep
            e.breadcrumbs = keep == 0 ? nil : ValueList(Array(crumbs.suffix(keep)))
            if within(e) { return finish(true) }
        }

        // 2. Long strings outside the crash and the identity fields.
        for cap in [4096, 1024, 256, 64] {
            e.capUnprotectedStrings(cap, &trace)
            if within(e) { return finish(true) }
        }

        // 3. Entries of extra, tags, contexts (in key order, the last ones first).
        if let extra = e.extra, !extra.isEmpty {
            let keys = extra.keys.sorted()
            func kept(_ k: Int) -> [String: JSONValue]? {
                let names = Set(keys.prefix(k))
                return k == 0 ? nil : extra.filter { names.contains($0.key) }
            }
            let keep = largestFitting(upTo: keys.count) { k in
                var t = e
                t.extra = kept(k)
                return within(t)
            }
            trace.entries += keys.count - keep
            e.extra = kept(keep)
            if within(e) { return finish(true) }
        }
        if let tags = e.tags, !tags.isEmpty {
            let keys = tags.keys.sorted()
            func kept(_ k: Int) -> [String: String]? {
                let names = Set(keys.prefix(k))
                return k == 0 ? nil : tags.filter { names.contains($0.key) }
            }
            let keep = largestFitting(upTo: keys.count) { k in
                var t = e
                t.tags = kept(k)
                return within(t)
            }
            trace.entries += keys.count - keep
            e.tags = kept(keep)
            if within(e) { return finish(true) }
        }
        if let contexts = e.contexts, case let keys = contexts.names, !keys.isEmpty {
            func kept(_ k: Int) -> Contexts? { k == 0 ? nil : contexts.keeping(Set(keys.prefix(k))) }
            let keep = largestFitting(upTo: keys.count) { k in
                var t = e
                t.contexts = kept(k)
                return within(t)
            }
            trace.entries += keys.count - keep
            e.contexts = kept(keep)
            if within(e) { return finish(true) }
        }

        // 4. A thread stack trace that repeats the exception's.
        if EventBudget.dropDuplicateThreadStacks(&e, &trace), within(e) { return finish(true) }

        // 5. Frames, keeping the oldest and the newest.
        for frames in [128, 64, 32, 16] {
            EventBudget.limitFrames(&e, to: frames, &trace)
            if within(e) { return finish(true) }
        }

        // 6. Last resort.
        if e.threads != nil {
            e.threads = nil
            trace.entries += 1
            if within(e) { return finish(true) }
        }
        if e.debugMeta != nil {
            e.debugMeta = nil
            trace.entries += 1
            if within(e) { return finish(true) }
        }
        for cap in [1024, 256] {
            e.capAllButIdentity(cap, &trace)
            if within(e) { return finish(true) }
        }
        return finish(false)
    }

    /// The `extra` key counting the breadcrumbs the budget removed.
    static let breadcrumbsOmittedKey = "breadcrumbs_omitted"
    /// The `extra` key counting the frames the budget removed from the exception's stack traces.
    static let framesOmittedKey = "frames_omitted"
    /// The `extra` key holding the event's JSON size before its first trimming.
    static let trimmedFromBytesKey = "event_trimmed_from_bytes"

    // MARK: - Measuring

    /// Bytes kept free for the `extra` notes added after trimming.
    private static let reserve = 512

    /// Whether the encoded event `data` is within both limits (gzip is run only when the JSON alone could be
    /// over the compressed limit).
    func within(_ data: Data) -> Bool {
        if data.count > maxEventBytes - EventBudget.reserve { return false }
        // gzip never grows data by more than a few bytes per 16 KiB block plus its 18-byte frame.
        if data.count + data.count / 1024 + 64 <= maxCompressedBytes - EventBudget.reserve { return true }
        // Compression stops as soon as the output is over the limit (most failing checks cost a fraction).
        let limit = maxCompressedBytes - EventBudget.reserve
        do { return try Gzip.compressedSize(of: data, upTo: limit) != nil } catch { return data.count <= limit }
    }

    /// How many of the newest `crumbs` probably fit, estimated without encoding the event for each count: the
    /// event's JSON without breadcrumbs, plus each breadcrumb's own JSON size (one pass), and for the
    /// compressed limit the gzip ratio of the newest breadcrumbs (compressed once, at most 64 KiB). Only a
    /// starting point for ``largestFitting(upTo:guess:_:)``, which checks for real.
    private func breadcrumbGuess(_ event: Event, _ crumbs: [Breadcrumb], _ encoder: JSONEncoder) -> Int {
        var base = event
        base.breadcrumbs = nil
        let baseBytes = ((try? encoder.encode(base))?.count ?? 0) + 32  // + `"breadcrumbs":{"values":[]},`
        let encoded = crumbs.map { (try? encoder.encode($0)) ?? Data() }
        var sample = Data()
        for data in encoded.reversed() where sample.count < 64 * 1024 { sample.append(data) }
        let ratio = sample.isEmpty ? 1 : Double((try? Gzip.compress(sample))?.count ?? sample.count) / Double(sample.count)
        let jsonLimit = maxEventBytes - EventBudget.reserve
        let gzipLimit = Double(maxCompressedBytes - EventBudget.reserve)
        var json = baseBytes, k = 0
        for data in encoded.reversed() {
            let next = json + data.count + 1  // + comma
            // The base compresses at least as well as breadcrumbs do, usually better: counted at the same ratio.
            guard next <= jsonLimit, Double(next) * ratio <= gzipLimit else { break }
            json = next
            k += 1
        }
        return k
    }

    /// The largest `k` in `0...n` for which `fits(k)` holds, assuming fitting shrinks as `k` grows; `0` when
    /// none does. Starts at `guess` (when given) and gallops from there (1, 2, 4... steps) before a binary
    /// search, so a good guess costs about two calls of `fits` instead of log2(n).
    private func largestFitting(upTo n: Int, guess: Int? = nil, _ fits: (Int) -> Bool) -> Int {
        var lo = 0, hi = n  // answer in lo...hi; fits(lo) assumed or 0
        if let guess, n > 0 {
            let g = min(max(guess, 0), n)
            if g > 0, fits(g) {
                lo = g
                var step = 1
                while lo < hi {
                    let c = min(hi, lo + step)
                    if fits(c) { lo = c; step *= 2 } else { hi = c - 1; break }
                }
            } else if g > 0 {
                hi = g - 1
                var step = 1
                while lo < hi {
                    let c = max(lo + 1, hi - step + 1)
                    if fits(c) { lo = c; break }
                    hi = c - 1
                    step *= 2
                }
            }
        }
        while lo < hi {
            let mid = (lo + hi + 1) / 2
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        return lo
    }

    // MARK: - Field limits

    /// What trimming removed, for the `extra` notes and debug output.
    struct Trace: Equatable {
        var breadcrumbs = 0, frames = 0, strings = 0, entries = 0
        /// Whether nothing was changed.
        var isEmpty: Bool { breadcrumbs + frames + strings + entries == 0 }
    }

    /// Names of the members of ``Event/other`` that step 2 leaves alone: identity and routing fields, the
    /// crash itself (an odd value of a modeled field is kept in ``Event/other`` under its name).
    static let protectedNames: Set<String> = ["event_id", "timestamp", "platform", "level", "release", "environment",
                                              "dist", "sdk", "exception", "threads", "debug_meta", "breadcrumbs",
                                              "fingerprint", "type"]
    /// Names of the members of ``Event/other`` that no step changes (the identity fields).
    static let identityNames: Set<String> = ["event_id", "timestamp", "platform", "level", "release", "environment",
                                             "dist", "sdk", "type"]

    /// Most entries of `fingerprint` (each at most ``maxTagChars`` scalars): 50.
    static let maxFingerprintEntries = 50

    /// Most Unicode scalars of `dist` (Relay drops a longer one).
    static let maxDistChars = 64
    /// Most entries of each list of `sdk` (`packages`, `integrations`).
    static let maxSDKListEntries = 100

    /// The per-field limits of the identity fields, which no trimming step touches, so that they can never keep
    /// an event over its budget (an option set by mistake to a whole file, a tampered `scope.json`):
    /// `release` and `environment` as ``Vaka/Options/boundedRelease(_:)`` and
    /// ``Vaka/Options/boundedEnvironment(_:)`` make them (200 and 64 UTF-8 bytes, Relay's limits); `dist` 64
    /// scalars; `server_name` 200 (Sentry turns it into a tag); `sdk` strings 200 and its lists (`packages`,
    /// `integrations`) 100 entries; any other string of `event_id`, `timestamp`, `platform`, `level`, `type`
    /// 200. Each value is only read unless it is over its limit.
    static func limitIdentity(_ e: inout Event, _ trace: inout Trace) {
        if let r = e.release, case let b = Vaka.Options.boundedRelease(r), b != r { e.release = b; trace.strings += 1 }
        if let v = e.environment, case let b = Vaka.Options.boundedEnvironment(v), b != v { e.environment = b; trace.strings += 1 }
        cap(&e.dist, maxDistChars, &trace)
        cap(&e.eventID, maxTagChars, &trace)
        cap(&e.platform, maxTagChars, &trace)
        cap(&e.type, maxTagChars, &trace)
        cap(&e.serverName, maxTagChars, &trace)
        cap(&e.release, maxTagChars, &trace)
        cap(&e.environment, maxTagChars, &trace)
        e.capOther(maxTagChars, &trace) { identityNames.contains($0) }
        if var sdk = e.sdk {
            let before = trace
            if let p = sdk.packages, p.count > maxSDKListEntries {
                sdk.packages = Array(p.prefix(maxSDKListEntries))
                trace.entries += p.count - maxSDKListEntries
            }
            if let i = sdk.integrations, i.count > maxSDKListEntries {
                sdk.integrations = Array(i.prefix(maxSDKListEntries))
                trace.entries += i.count - maxSDKListEntries
            }
            cap(&sdk.name, maxTagChars, &trace)
            cap(&sdk.version, maxTagChars, &trace)
            for i in (sdk.packages ?? []).indices where exceeds(sdk.packages![i], maxTagChars) {
                cap(&sdk.packages![i].name, maxTagChars, &trace)
                cap(&sdk.packages![i].version, maxTagChars, &trace)
            }
            if let names = sdk.integrations, names.contains(where: { $0.utf8.count > maxTagChars }) {
                for i in names.indices { cap(&sdk.integrations![i], maxTagChars, &trace) }
            }
            cap(&sdk.other, maxTagChars, &trace)
            if trace != before { e.sdk = sdk }
        }
    }

    /// Applies the per-field limits. Each field is first only read; it is rebuilt only when over a limit (the
    /// common event is not copied). `eventBytes`: the encoded event's size, a bound on `extra`'s.
    static func applyFieldLimits(_ e: inout Event, eventBytes: Int, _ trace: inout Trace) {
        limitIdentity(&e, &trace)
        if let tags = e.tags, tags.contains(where: { $0.key.utf8.count > maxTagChars || $0.value.utf8.count > maxTagChars }) {
            var out: [String: String] = [:]
            for (k, v) in tags {
                var key = k, value = v
                cap(&key, maxTagChars, &trace)
                cap(&value, maxTagChars, &trace)
                out[key] = value
            }
            e.tags = out
        }
        if let extra = e.extra, eventBytes > maxExtraBytes || exceeds(.object(extra), maxExtraValueChars) {
            var value = JSONValue.object(extra)
            limitExtra(&value, &trace)
            if case .object(let limited) = value { e.extra = limited }
        }
        if let crumbs = e.breadcrumbs?.values, crumbs.count > maxBreadcrumbs || crumbs.contains(where: { exceeds($0, maxBreadcrumbDataChars) }) {
            var values = crumbs
            if values.count > maxBreadcrumbs {
                trace.breadcrumbs += values.count - maxBreadcrumbs
                values = Array(values.suffix(maxBreadcrumbs))
            }
            for i in values.indices { values[i].capStrings(maxMessageChars, data: maxBreadcrumbDataChars, &trace) }
            e.breadcrumbs = ValueList(values)
        }
        if let exceptions = e.exception?.values, exceptions.contains(where: { exceeds($0, maxMessageChars) }) {
            e.exception = ValueList(exceptions.map { var x = $0; x.capStrings(maxMessageChars, &trace); return x })
        }
        if let threads = e.threads?.values, threads.contains(where: { exceeds($0, maxMessageChars) }) {
            e.threads = ValueList(threads.map { var x = $0; x.capStrings(maxMessageChars, &trace); return x })
        }
        e.forEachStacktrace { stacktrace, counted in
            let frames = stacktrace.frames
            guard frames.count > maxFrames else { return }
            if counted { trace.frames += frames.count - maxFrames }
            stacktrace.frames = Array(frames.prefix(maxFrames / 2) + frames.suffix(maxFrames - maxFrames / 2))
        }
        if let f = e.fingerprint, f.count > maxFingerprintEntries || f.contains(where: { $0.utf8.count > maxTagChars }) {
            if f.count > maxFingerprintEntries { trace.entries += f.count - maxFingerprintEntries }
            e.fingerprint = f.prefix(maxFingerprintEntries).map { entry in
                var s = entry
                cap(&s, maxTagChars, &trace)
                return s
            }
        }
        if let v = e.logentry, exceeds(v, maxMessageChars) { e.logentry?.capStrings(maxMessageChars, &trace) }
        if let v = e.user, exceeds(v, maxMessageChars) { e.user?.capStrings(maxMessageChars, &trace) }
        if let v = e.contexts, exceeds(v, maxMessageChars) { e.contexts?.capStrings(maxMessageChars, &trace) }
        if let v = e.debugMeta, exceeds(v, maxMessageChars) { e.debugMeta?.capStrings(maxMessageChars, &trace) }
        e.capOther(maxMessageChars, &trace) { !identityNames.contains($0) }
    }

    /// Whether a string of `value` is longer than `cap` Unicode scalars: `value` is left as it is (the strings
    /// are cut on a copy, which is written only where one is over).
    static func exceeds<T: BudgetStrings>(_ value: T, _ cap: Int) -> Bool {
        var probe = value
        var trace = Trace()
        probe.capStrings(cap, &trace)
        return !trace.isEmpty
    }

    /// Whether a string inside `value` (or, with `keys`, an object key) may be longer than `cap` scalars
    /// (judged by UTF-8 bytes, an upper bound). Read only.
    static func exceeds(_ value: JSONValue, _ cap: Int, keys: Bool = false) -> Bool {
        switch value {
        case .string(let s): return s.utf8.count > cap
        case .array(let items): return items.contains { exceeds($0, cap, keys: keys) }
        case .object(let object):
            return object.contains { (keys && $0.key.utf8.count > cap) || exceeds($0.value, cap, keys: keys) }
        default: return false
        }
    }

    /// Strings in `extra` at most 16384 scalars; all of `extra` at most 256 KiB, each entry counted as its key
    /// and value encoded (`"key":value,`). Over that, the largest entries are dropped (ties: the later key
    /// first) in one pass: every entry is measured once and sorted once (n log n, not a rescan per removal).
    static func limitExtra(_ value: inout JSONValue, _ trace: inout Trace) {
        capStrings(&value, cap: maxExtraValueChars, &trace)
        guard case .object(var extra) = value else { return }
        let encoder = Event.encoder(encoding: .wire)
        // {"key":value} minus the braces, plus a comma: what the entry adds to the encoded object.
        var sizes = extra.map { (key: $0.key, bytes: ((try? encoder.encode([$0.key: $0.value]))?.count ?? 2) - 1) }
        var total = sizes.reduce(2) { $0 + $1.bytes }
        guard total > maxExtraBytes else { return }
        sizes.sort { ($0.bytes, $0.key) > ($1.bytes, $1.key) }
        for entry in sizes {
            if total <= maxExtraBytes { break }
            extra[entry.key] = nil
            total -= entry.bytes
            trace.entries += 1
        }
        value = .object(extra)
    }

    /// Keeps at most `limit` frames in every stack trace of the exceptions and the threads (oldest and newest
    /// halves); frames removed from an exception's are counted.
    static func limitFrames(_ e: inout Event, to limit: Int, _ trace: inout Trace) {
        func cut(_ stacktrace: inout Stacktrace?, counted: Bool) {
            guard let frames = stacktrace?.frames, frames.count > limit else { return }
            if counted { trace.frames += frames.count - limit }
            stacktrace?.frames = Array(frames.prefix(limit / 2) + frames.suffix(limit - limit / 2))
        }
        for i in (e.exception?.values ?? []).indices { cut(&e.exception!.values[i].stacktrace, counted: true) }
        for i in (e.threads?.values ?? []).indices { cut(&e.threads!.values[i].stacktrace, counted: false) }
    }

    /// Removes each thread's stack trace that equals an exception's; `true` when any was.
    static func dropDuplicateThreadStacks(_ e: inout Event, _ trace: inout Trace) -> Bool {
        let stacks = (e.exception?.values ?? []).compactMap(\.stacktrace)
        guard !stacks.isEmpty, let threads = e.threads?.values else { return false }
        var dropped = false
        for i in threads.indices {
            guard let stack = threads[i].stacktrace, stacks.contains(stack) else { continue }
            e.threads!.values[i].stacktrace = nil
            trace.entries += 1
            dropped = true
        }
        return dropped
    }

    /// Cuts `s` to `limit` Unicode scalars (counted in `trace`) when it is longer.
    static func cap(_ s: inout String, _ limit: Int, _ trace: inout Trace) {
        if let cut = truncated(s, limit) { s = cut; trace.strings += 1 }
    }

    /// Cuts `s` to `limit` Unicode scalars (counted in `trace`) when it is longer.
    static func cap(_ s: inout String?, _ limit: Int, _ trace: inout Trace) {
        if let v = s, let cut = truncated(v, limit) { s = cut; trace.strings += 1 }
    }

    /// Cuts every string of the free-form map `map` (keys excepted) to `limit` Unicode scalars; rebuilt only
    /// when one is longer.
    static func cap(_ map: inout [String: JSONValue]?, _ limit: Int, _ trace: inout Trace) {
        guard let m = map, exceeds(.object(m), limit) else { return }
        var value = JSONValue.object(m)
        capStrings(&value, cap: limit, &trace)
        if case .object(let capped) = value { map = capped }
    }

    /// Cuts every string inside `value` (object keys excepted) to `cap` Unicode scalars.
    static func capStrings(_ value: inout JSONValue, cap: Int, _ trace: inout Trace) {
        switch value {
        case .string(let s):
            if let cut = truncated(s, cap) { value = .string(cut); trace.strings += 1 }
        case .array(var items):
            guard !items.isEmpty else { return }
            for i in items.indices { capStrings(&items[i], cap: cap, &trace) }
            value = .array(items)
        case .object(var object):
            guard !object.isEmpty else { return }
            for key in object.keys { capStrings(&object[key]!, cap: cap, &trace) }
            value = .object(object)
        default:
            return
        }
    }

    /// `crumb` with the per-field limits applied: `message` and `category` at most 8192 Unicode scalars,
    /// each `data` value at most 1024. Applied when a breadcrumb is added, so the breadcrumbs kept in memory and
    /// in the run directory are never larger than what an event may carry.
    public static func limited(_ crumb: Breadcrumb) -> Breadcrumb {
        var c = crumb
        if let m = c.message, let cut = truncated(m, maxMessageChars) { c.message = cut }
        if let m = c.category, let cut = truncated(m, maxMessageChars) { c.category = cut }
        if let data = c.data, data.values.contains(where: { exceeds($0, maxBreadcrumbDataChars) }) {
            var trace = Trace()
            c.data = data.mapValues { value in
                var v = value
                capStrings(&v, cap: maxBreadcrumbDataChars, &trace)
                return v
            }
        }
        return c
    }

    /// `s` cut to `cap` Unicode scalars, the last three being `...`; `nil` when it is not longer than `cap`.
    static func truncated(_ s: String, _ cap: Int) -> String? {
        if s.utf8.count <= cap { return nil }  // at least one byte per scalar
        let scalars = s.unicodeScalars
        guard scalars.count > cap else { return nil }
        var out = String.UnicodeScalarView()
        out.append(contentsOf: scalars.prefix(max(0, cap - 3)))
        return String(out) + "..."
    }
}

/// A protocol value whose strings the size budget cuts (``EventBudget``).
protocol BudgetStrings {
    /// Cuts every string of the value (free-form map keys excepted) to `cap` Unicode scalars, counting each
    /// cut in `trace`; a field is written only when it is cut.
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace)
}

extension Array: BudgetStrings where Element: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        for i in indices where EventBudget.exceeds(self[i], cap) { self[i].capStrings(cap, &trace) }
    }
}

extension Optional: BudgetStrings where Wrapped: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        guard let value = self, EventBudget.exceeds(value, cap) else { return }
        var capped = value
        capped.capStrings(cap, &trace)
        self = capped
    }
}

extension Breadcrumb: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) { capStrings(cap, data: cap, &trace) }

    /// Cuts `type`, `category`, `message` and `level` to `cap` scalars and each `data` value to `data`.
    mutating func capStrings(_ cap: Int, data dataCap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&type, cap, &trace)
        EventBudget.cap(&category, cap, &trace)
        EventBudget.cap(&message, cap, &trace)
        EventBudget.cap(&level, cap, &trace)
        if let values = data, values.values.contains(where: { EventBudget.exceeds($0, dataCap) }) {
            data = values.mapValues { v in
                var value = v
                EventBudget.capStrings(&value, cap: dataCap, &trace)
                return value
            }
        }
    }
}

extension Exception: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&type, cap, &trace)
        EventBudget.cap(&value, cap, &trace)
        mechanism.capStrings(cap, &trace)
        stacktrace.capStrings(cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension Mechanism: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&type, cap, &trace)
        EventBudget.cap(&meta, cap, &trace)
        EventBudget.cap(&data, cap, &trace)
        EventBudget.cap(&source, cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension EventBudget {
    /// Cuts the strings of `meta` (the signal's names, the members neither models) to `limit` scalars.
    static func cap(_ meta: inout MechanismMeta?, _ limit: Int, _ trace: inout Trace) {
        guard var m = meta else { return }
        let before = trace
        cap(&m.other, limit, &trace)
        if var signal = m.signal {
            cap(&signal.name, limit, &trace)
            cap(&signal.codeName, limit, &trace)
            cap(&signal.other, limit, &trace)
            m.signal = signal
        }
        if var ns = m.nsError {
            cap(&ns.domain, limit, &trace)
            cap(&ns.other, limit, &trace)
            m.nsError = ns
        }
        if trace != before { meta = m }
    }
}

extension Stacktrace: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        frames.capStrings(cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension Frame: BudgetStrings {
    /// Cuts the frame's strings; `trust` is left as it is (not on the wire).
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&package, cap, &trace)
        EventBudget.cap(&function, cap, &trace)
        EventBudget.cap(&symbol, cap, &trace)
        EventBudget.cap(&filename, cap, &trace)
        EventBudget.cap(&absPath, cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension SentryThread: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&name, cap, &trace)
        EventBudget.cap(&state, cap, &trace)
        stacktrace.capStrings(cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension DebugMeta: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        images.capStrings(cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension DebugImage: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&type, cap, &trace)
        EventBudget.cap(&codeFile, cap, &trace)
        EventBudget.cap(&codeID, cap, &trace)
        EventBudget.cap(&debugID, cap, &trace)
        EventBudget.cap(&arch, cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension LogEntry: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&formatted, cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension User: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&id, cap, &trace)
        EventBudget.cap(&email, cap, &trace)
        EventBudget.cap(&username, cap, &trace)
        EventBudget.cap(&ipAddress, cap, &trace)
        EventBudget.cap(&other, cap, &trace)
    }
}

extension SDKPackage: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        EventBudget.cap(&name, cap, &trace)
        EventBudget.cap(&version, cap, &trace)
    }
}

extension Contexts: BudgetStrings {
    mutating func capStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        if device != nil {
            EventBudget.cap(&device!.arch, cap, &trace)
            EventBudget.cap(&device!.other, cap, &trace)
        }
        if os != nil {
            EventBudget.cap(&os!.name, cap, &trace)
            EventBudget.cap(&os!.version, cap, &trace)
            EventBudget.cap(&os!.kernelVersion, cap, &trace)
            EventBudget.cap(&os!.build, cap, &trace)
            EventBudget.cap(&os!.distributionName, cap, &trace)
            EventBudget.cap(&os!.distributionVersion, cap, &trace)
            EventBudget.cap(&os!.distributionPrettyName, cap, &trace)
            EventBudget.cap(&os!.other, cap, &trace)
        }
        if app != nil {
            EventBudget.cap(&app!.appName, cap, &trace)
            EventBudget.cap(&app!.appVersion, cap, &trace)
            EventBudget.cap(&app!.appStartTime, cap, &trace)
            EventBudget.cap(&app!.appIdentifier, cap, &trace)
            EventBudget.cap(&app!.other, cap, &trace)
        }
        EventBudget.cap(&other, cap, &trace)
    }

    /// The names of the contexts present, sorted (step 3 of the budget drops the last ones first).
    var names: [String] {
        var names = Array((other ?? [:]).keys)
        if device != nil { names.append("device") }
        if os != nil { names.append("os") }
        if app != nil { names.append("app") }
        return names.sorted()
    }

    /// The contexts named in `names` only.
    func keeping(_ names: Set<String>) -> Contexts {
        var kept = Contexts(device: names.contains("device") ? device : nil, os: names.contains("os") ? os : nil,
                            app: names.contains("app") ? app : nil)
        let other = (self.other ?? [:]).filter { names.contains($0.key) }
        kept.other = other.isEmpty ? nil : other
        return kept
    }
}

extension Event {
    /// Calls `body` with each stack trace of the exceptions (`counted` `true`: frames removed from them are
    /// counted in `frames_omitted`) and of the threads.
    mutating func forEachStacktrace(_ body: (inout Stacktrace, _ counted: Bool) -> Void) {
        for i in (exception?.values ?? []).indices where exception!.values[i].stacktrace != nil {
            body(&exception!.values[i].stacktrace!, true)
        }
        for i in (threads?.values ?? []).indices where threads!.values[i].stacktrace != nil {
            body(&threads!.values[i].stacktrace!, false)
        }
    }

    /// Cuts the strings of the members of ``other`` whose names `selected` accepts.
    mutating func capOther(_ cap: Int, _ trace: inout EventBudget.Trace, _ selected: (String) -> Bool) {
        guard let members = other, members.contains(where: { selected($0.key) && EventBudget.exceeds($0.value, cap) })
        else { return }
        var capped = members
        for (name, value) in members where selected(name) {
            var v = value
            EventBudget.capStrings(&v, cap: cap, &trace)
            capped[name] = v
        }
        other = capped
    }

    /// Step 2 of the budget: the strings outside the crash and the identity fields cut to `cap`.
    mutating func capUnprotectedStrings(_ cap: Int, _ trace: inout EventBudget.Trace) {
        logentry.capStrings(cap, &trace)
        user.capStrings(cap, &trace)
        contexts.capStrings(cap, &trace)
        EventBudget.cap(&extra, cap, &trace)
        EventBudget.cap(&serverName, cap, &trace)
        if let values = tags, values.values.contains(where: { $0.utf8.count > cap }) {
            tags = values.mapValues { v in
                var s = v
                EventBudget.cap(&s, cap, &trace)
                return s
            }
        }
        capOther(cap, &trace) { !EventBudget.protectedNames.contains($0) }
    }

    /// The last step of the budget: every string but the identity fields' cut to `cap`.
    mutating func capAllButIdentity(_ cap: Int, _ trace: inout EventBudget.Trace) {
        capUnprotectedStrings(cap, &trace)
        breadcrumbs?.values.capStrings(cap, &trace)
        exception?.values.capStrings(cap, &trace)
        threads?.values.capStrings(cap, &trace)
        debugMeta.capStrings(cap, &trace)
        capOther(cap, &trace) { EventBudget.protectedNames.contains($0) && !EventBudget.identityNames.contains($0) }
    }
}
