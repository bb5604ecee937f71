import Foundation

/// Keeps an event within the size a Sentry server accepts. Applied to every ``Event`` the SDK builds (handled
/// error, message, `track`, `screen`, and the fatal event of the crash join) as it is encoded for an envelope
/// (``EventFactory/finalize(_:budget:log:)``, ``fit(_:)-(Event)``), and again with a smaller budget to the stored
/// JSON of a single event a server answered 413 for (``Uploader``, ``fit(_:)-([String:JSONValue])``). An event
/// within every limit is encoded once and left as it is; one over a limit is trimmed as its JSON object, the
/// same trimming a stored event gets, so there is one trimming whatever the event's origin.
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
    /// documentation). The common event (no field over a limit, within the budget) is encoded once and nothing
    /// else is done; an event over a limit is trimmed as its JSON object (``fit(_:)-([String:JSONValue])``, the
    /// trimming a stored event gets when a server answers 413). Never fails; ``Outcome/fits`` says whether the
    /// budget was met.
    public func fit(_ event: Event) -> Outcome {
        let data = (try? Event.encoder(encoding: .wire).encode(event)) ?? Data("{}".utf8)
        if !EventBudget.overFieldLimits(event, eventBytes: data.count), within(data) {
            return Outcome(data: data, originalBytes: data.count, fits: true)
        }
        guard let object = try? JSONDecoder().decode([String: JSONValue].self, from: data) else {
            return Outcome(data: data, originalBytes: data.count, fits: within(data))
        }
        return fit(object)
    }

    /// Whether a per-field limit may change `event` (read only; `eventBytes`: the size of its JSON). `false` only
    /// when no limit applies: release and environment as ``Vaka/Options/boundedRelease(_:)`` and
    /// ``Vaka/Options/boundedEnvironment(_:)`` leave them, identity strings at most 200 UTF-8 bytes, tags 200,
    /// `extra` strings 16384 and the event at most 256 KiB (a bound on `extra`), at most 100 breadcrumbs with
    /// strings of at most 1024, stack traces of at most 250 frames, every other string at most 8192.
    static func overFieldLimits(_ event: Event, eventBytes: Int) -> Bool {
        func over(_ s: String?, _ cap: Int) -> Bool { (s?.utf8.count ?? 0) > cap }
        func over(_ frames: [Frame]?) -> Bool {
            guard let frames else { return false }
            return frames.count > maxFrames || frames.contains {
                over($0.package, maxMessageChars) || over($0.function, maxMessageChars) || over($0.symbol, maxMessageChars)
                    || over($0.filename, maxMessageChars)
            }
        }
        if let r = event.release, Vaka.Options.boundedRelease(r) != r || over(r, maxTagChars) { return true }
        if let e = event.environment, Vaka.Options.boundedEnvironment(e) != e || over(e, maxTagChars) { return true }
        if over(event.eventID, maxTagChars) || over(event.platform, maxTagChars)
            || over(event.sdk?.name, maxTagChars) || over(event.sdk?.version, maxTagChars) { return true }
        if let tags = event.tags, tags.contains(where: { over($0.key, maxTagChars) || over($0.value, maxTagChars) }) { return true }
        if let extra = event.extra, eventBytes > maxExtraBytes || exceeds(.object(extra), maxExtraValueChars) { return true }
        if let crumbs = event.breadcrumbs?.values, crumbs.count > maxBreadcrumbs || crumbs.contains(where: { c in
            over(c.type, maxBreadcrumbDataChars) || over(c.category, maxBreadcrumbDataChars) || over(c.message, maxBreadcrumbDataChars)
                || over(c.level, maxBreadcrumbDataChars) || (c.data ?? [:]).values.contains { over($0, maxBreadcrumbDataChars) }
        }) { return true }
        for exception in event.exception?.values ?? [] {
            let m = exception.mechanism
            if over(exception.type, maxMessageChars) || over(exception.value, maxMessageChars) || over(m?.type, maxMessageChars)
                || over(m?.meta?.signal?.name, maxMessageChars) || over(m?.meta?.signal?.codeName, maxMessageChars)
                || exceeds(.object(m?.data ?? [:]), maxMessageChars) || over(exception.stacktrace?.frames) { return true }
        }
        for thread in event.threads?.values ?? [] where over(thread.name, maxMessageChars) || over(thread.stacktrace?.frames) {
            return true
        }
        if over(event.logentry?.formatted, maxMessageChars) || over(event.user?.id, maxMessageChars) { return true }
        let contexts = event.contexts
        for s in [contexts?.device?.arch, contexts?.os?.name, contexts?.os?.version, contexts?.os?.kernelVersion,
                  contexts?.os?.build, contexts?.os?.distributionName, contexts?.os?.distributionVersion,
                  contexts?.os?.distributionPrettyName, contexts?.app?.appName, contexts?.app?.appVersion,
                  contexts?.app?.appStartTime, contexts?.app?.appIdentifier] where over(s, maxMessageChars) {
            return true
        }
        return (event.debugMeta?.images ?? []).contains {
            over($0.type, maxMessageChars) || over($0.codeFile, maxMessageChars) || over($0.codeID, maxMessageChars)
                || over($0.debugID, maxMessageChars) || over($0.arch, maxMessageChars)
        }
    }

    /// Applies the per-field limits, then trims `event`, the JSON object of an event (built by the SDK, or read
    /// back from a stored envelope for a 413 retry), until it is within the budget (see the type's documentation),
    /// and encodes it. Never fails; ``Outcome/fits`` says whether the budget was met.
    public func fit(_ event: [String: JSONValue]) -> Outcome {
        let original = EventFactory.encode(event)
        var e = event
        var outcome = Outcome(data: original, originalBytes: original.count, fits: false)
        var trace = Trace()
        EventBudget.applyFieldLimits(&e, eventBytes: original.count, &trace)
        if trace.breadcrumbs + trace.frames + trace.strings + trace.entries == 0, within(original) {
            outcome.fits = true
            return outcome  // the common case: one encoding, nothing changed
        }
        func finish(_ fits: Bool) -> Outcome {
            if trace.breadcrumbs + trace.frames + trace.strings + trace.entries == 0 {
                outcome.fits = fits
                return outcome  // untouched: the original bytes
            }
            do {
                // Added to what an earlier trimming of the same event (before a 413 retry) recorded.
                var extra = e["extra"]?.objectValue ?? [:]
                func add(_ key: String, _ count: Int) {
                    guard count > 0 else { return }
                    extra[key] = .int((extra[key]?.intValue ?? 0) + Int64(count))
                }
                add("breadcrumbs_omitted", trace.breadcrumbs)
                add("frames_omitted", trace.frames)
                if extra["event_trimmed_from_bytes"]?.intValue == nil {
                    extra["event_trimmed_from_bytes"] = .int(Int64(original.count))
                }
                e["extra"] = .object(extra)
            }
            outcome.data = EventFactory.encode(e)
            outcome.fits = fits
            outcome.breadcrumbsOmitted = trace.breadcrumbs
            outcome.framesOmitted = trace.frames
            outcome.stringsTruncated = trace.strings
            outcome.entriesDropped = trace.entries
            return outcome
        }
        // Unchanged by the field limits: it was just measured (and did not fit).
        if trace.breadcrumbs + trace.frames + trace.strings + trace.entries > 0, within(e) { return finish(true) }

        // 1. Breadcrumbs, oldest first.
        if case .object(var crumbs)? = e["breadcrumbs"], case .array(let values)? = crumbs["values"], !values.isEmpty {
            let keep = largestFitting(upTo: values.count, guess: breadcrumbGuess(e, values)) { k in
                var t = e
                crumbs["values"] = .array(Array(values.suffix(k)))
                t["breadcrumbs"] = k == 0 ? nil : .object(crumbs)
                return within(t)
            }
            trace.breadcrumbs += values.count - keep
            crumbs["values"] = .array(Array(values.suffix(keep)))
            e["breadcrumbs"] = keep == 0 ? nil : .object(crumbs)
            if within(e) { return finish(true) }
        }

        // 2. Long strings outside the crash itself.
        for cap in [4096, 1024, 256, 64] {
            for key in e.keys.sorted() where !EventBudget.protectedKeys.contains(key) {
                EventBudget.capStrings(&e[key]!, cap: cap, &trace)
            }
            if within(e) { return finish(true) }
        }

        // 3. Entries of extra, tags, contexts.
        for key in ["extra", "tags", "contexts"] {
            guard case .object(let object)? = e[key], !object.isEmpty else { continue }
            let keys = object.keys.sorted()
            let keep = largestFitting(upTo: keys.count) { k in
                var t = e
                let kept = Set(keys.prefix(k))
                t[key] = .object(object.filter { kept.contains($0.key) })
                return within(t)
            }
            let kept = Set(keys.prefix(keep))
            trace.entries += keys.count - keep
            e[key] = keep == 0 ? nil : .object(object.filter { kept.contains($0.key) })
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
        for key in ["threads", "debug_meta"] where e[key] != nil {
            e[key] = nil
            trace.entries += 1
            if within(e) { return finish(true) }
        }
        for cap in [1024, 256] {
            for key in e.keys.sorted() where !EventBudget.identityKeys.contains(key) {
                EventBudget.capStrings(&e[key]!, cap: cap, &trace)
            }
            if within(e) { return finish(true) }
        }
        return finish(false)
    }

    // MARK: - Measuring

    /// Bytes kept free for the `extra` notes added after trimming.
    private static let reserve = 512

    /// Whether `event` encodes within both limits (gzip is run only when the JSON alone could be over the
    /// compressed limit).
    func within(_ event: [String: JSONValue]) -> Bool {
        within(EventFactory.encode(event))
    }

    /// Whether the encoded event `data` is within both limits.
    func within(_ data: Data) -> Bool {
        if data.count > maxEventBytes - EventBudget.reserve { return false }
        // gzip never grows data by more than a few bytes per 16 KiB block plus its 18-byte frame.
        if data.count + data.count / 1024 + 64 <= maxCompressedBytes - EventBudget.reserve { return true }
        // Compression stops as soon as the output is over the limit (most failing checks cost a fraction).
        let limit = maxCompressedBytes - EventBudget.reserve
        do { return try Gzip.compressedSize(of: data, upTo: limit) != nil } catch { return data.count <= limit }
    }

    /// How many of the newest `values` (breadcrumbs) probably fit, estimated without encoding the event
    /// for each count: the event's JSON without breadcrumbs, plus each breadcrumb's own JSON size (one pass),
    /// and for the compressed limit the gzip ratio of the newest breadcrumbs (compressed once, at most
    /// 64 KiB). Only a starting point for ``largestFitting(upTo:guess:_:)``, which checks for real.
    private func breadcrumbGuess(_ event: [String: JSONValue], _ values: [JSONValue]) -> Int {
        var base = event
        base["breadcrumbs"] = nil
        let baseBytes = EventFactory.encode(base).count + 32  // + `"breadcrumbs":{"values":[]},`
        let sizes = values.map { EventFactory.encode(["v": $0]).count - 6 + 1 }  // without `{"v":}`, + comma
        var sample = Data()
        for v in values.reversed() where sample.count < 64 * 1024 { sample.append(EventFactory.encode(["v": v])) }
        let ratio = sample.isEmpty ? 1 : Double((try? Gzip.compress(sample))?.count ?? sample.count) / Double(sample.count)
        let jsonLimit = maxEventBytes - EventBudget.reserve
        let gzipLimit = Double(maxCompressedBytes - EventBudget.reserve)
        var json = baseBytes, k = 0
        for size in sizes.reversed() {
            let next = json + size
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
    struct Trace {
        var breadcrumbs = 0, frames = 0, strings = 0, entries = 0
    }

    /// Top-level keys step 2 leaves alone: identity and routing fields, and the crash itself.
    static let protectedKeys: Set<String> = ["event_id", "timestamp", "platform", "level", "release", "environment",
                                             "dist", "sdk", "exception", "threads", "debug_meta", "breadcrumbs",
                                             "fingerprint", "type"]
    /// Top-level keys no step changes.
    static let identityKeys: Set<String> = ["event_id", "timestamp", "platform", "level", "release", "environment",
                                            "dist", "sdk", "type"]

    /// Most Unicode scalars of `dist` (Relay drops a longer one).
    static let maxDistChars = 64

    /// The per-field limits of the identity keys, which no trimming step touches, so that they can never keep
    /// an event over its budget (an option set by mistake to a whole file, a tampered `scope.json`):
    /// `release` and `environment` as ``Vaka/Options/boundedRelease(_:)`` and
    /// ``Vaka/Options/boundedEnvironment(_:)`` make them (200 and 64 UTF-8 bytes, Relay's limits); `dist` 64
    /// scalars; `server_name` 200 (Sentry turns it into a tag); `sdk` strings 200 and its lists (`packages`,
    /// `integrations`) 100 entries; any other string of `event_id`, `timestamp`, `platform`, `level`, `type`
    /// 200. Each value is only read unless it is over its limit.
    static func limitIdentity(_ e: inout [String: JSONValue], _ trace: inout Trace) {
        for (key, bound) in [("release", Vaka.Options.boundedRelease), ("environment", Vaka.Options.boundedEnvironment)] {
            if case .string(let s)? = e[key], case let b = bound(s), b != s { e[key] = .string(b); trace.strings += 1 }
        }
        if case .string(let s)? = e["dist"], let cut = truncated(s, maxDistChars) { e["dist"] = .string(cut); trace.strings += 1 }
        for key in ["event_id", "timestamp", "platform", "level", "type", "server_name", "release", "environment", "dist"] {
            if let value = e[key], exceeds(value, maxTagChars) { capStrings(&e[key]!, cap: maxTagChars, &trace) }
        }
        if case .object(var sdk)? = e["sdk"], exceeds(.object(sdk), maxTagChars) || sdk.values.contains(where: {
            if case .array(let a) = $0 { return a.count > 100 }
            return false
        }) {
            for (k, v) in sdk {
                if case .array(let a) = v, a.count > 100 { sdk[k] = .array(Array(a.prefix(100))); trace.entries += a.count - 100 }
            }
            var value = JSONValue.object(sdk)
            capStrings(&value, cap: maxTagChars, &trace)
            e["sdk"] = value
        }
    }

    /// Applies the per-field limits. Each field is first only read; it is rebuilt only when over a limit (the
    /// common event is not copied). `eventBytes`: the encoded event's size, a bound on `extra`'s.
    static func applyFieldLimits(_ e: inout [String: JSONValue], eventBytes: Int, _ trace: inout Trace) {
        limitIdentity(&e, &trace)
        for key in e.keys.sorted() where !identityKeys.contains(key) {
            let value = e[key]!
            switch key {
            case "tags":
                if exceeds(value, maxTagChars, keys: true) { limitTags(&e[key]!, &trace) }
            case "extra":
                if eventBytes > maxExtraBytes || exceeds(value, maxExtraValueChars) { limitExtra(&e[key]!, &trace) }
            case "breadcrumbs":
                let count = value.objectValue?["values"].flatMap { v -> Int? in
                    if case .array(let a) = v { return a.count }
                    return nil
                } ?? 0
                if count > maxBreadcrumbs || exceeds(value, maxBreadcrumbDataChars) { limitBreadcrumbs(&e[key]!, &trace) }
            case "exception", "threads":
                if exceeds(value, maxMessageChars) || hasLongStack(value) { limitStacks(&e[key]!, &trace) }
            default:
                if exceeds(value, maxMessageChars) { capStrings(&e[key]!, cap: maxMessageChars, &trace) }
            }
        }
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

    /// Whether a `{values: [{stacktrace: {frames}}]}` list has a stack trace over ``maxFrames``. Read only.
    static func hasLongStack(_ list: JSONValue) -> Bool {
        guard case .array(let values)? = list.objectValue?["values"] else { return false }
        return values.contains { value in
            if case .array(let frames)? = value.objectValue?["stacktrace"]?.objectValue?["frames"] { return frames.count > maxFrames }
            return false
        }
    }

    /// Tag keys and values at most 200 scalars; a tag whose value is not a string is left as it is.
    static func limitTags(_ value: inout JSONValue, _ trace: inout Trace) {
        if case .object(let tags) = value {
            var out: [String: JSONValue] = [:]
            for (k, v) in tags {
                var key = k
                if let cut = truncated(k, maxTagChars) { key = cut; trace.strings += 1 }
                var val = v
                capStrings(&val, cap: maxTagChars, &trace)
                out[key] = val
            }
            value = .object(out)
        } else {
            capStrings(&value, cap: maxTagChars, &trace)
        }
    }

    /// Strings in `extra` at most 16384 scalars; all of `extra` at most 256 KiB, each entry counted as its key
    /// and value encoded (`"key":value,`). Over that, the largest entries are dropped (ties: the later key
    /// first) in one pass: every entry is measured once and sorted once (n log n, not a rescan per removal).
    static func limitExtra(_ value: inout JSONValue, _ trace: inout Trace) {
        capStrings(&value, cap: maxExtraValueChars, &trace)
        guard case .object(var extra) = value else { return }
        // {"key":value} minus the braces, plus a comma: what the entry adds to the encoded object.
        var sizes = extra.map { (key: $0.key, bytes: EventFactory.encode([$0.key: $0.value]).count - 1) }
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

    /// The newest 100 breadcrumbs; `message` 8192 scalars, `data` values 1024, other strings 8192.
    static func limitBreadcrumbs(_ value: inout JSONValue, _ trace: inout Trace) {
        guard case .object(var crumbs) = value, case .array(var values)? = crumbs["values"] else {
            capStrings(&value, cap: maxMessageChars, &trace)
            return
        }
        if values.count > maxBreadcrumbs {
            trace.breadcrumbs += values.count - maxBreadcrumbs
            values = Array(values.suffix(maxBreadcrumbs))
        }
        for i in values.indices {
            guard case .object(var crumb) = values[i] else { continue }
            for key in crumb.keys {
                capStrings(&crumb[key]!, cap: key == "data" ? maxBreadcrumbDataChars : maxMessageChars, &trace)
            }
            values[i] = .object(crumb)
        }
        crumbs["values"] = .array(values)
        value = .object(crumbs)
    }

    /// Strings at most 8192 scalars and each stack trace at most 250 frames (oldest and newest halves).
    static func limitStacks(_ value: inout JSONValue, _ trace: inout Trace) {
        capStrings(&value, cap: maxMessageChars, &trace)
        forEachStacktrace(&value) { frames, counts in
            if frames.count > maxFrames {
                if counts { trace.frames += frames.count - maxFrames }
                frames = Array(frames.prefix(maxFrames / 2) + frames.suffix(maxFrames - maxFrames / 2))
            }
        }
    }

    /// Keeps at most `limit` frames in every stack trace of `exception` and `threads`.
    static func limitFrames(_ e: inout [String: JSONValue], to limit: Int, _ trace: inout Trace) {
        for key in ["exception", "threads"] where e[key] != nil {
            forEachStacktrace(&e[key]!) { frames, _ in
                if frames.count > limit {
                    if key == "exception" { trace.frames += frames.count - limit }
                    frames = Array(frames.prefix(limit / 2) + frames.suffix(limit - limit / 2))
                }
            }
        }
    }

    /// Calls `body` with the frames of each `values[].stacktrace` of a `{values: [...]}` list (`counts` is
    /// `false` for thread stack traces, which are not counted in `frames_omitted`).
    private static func forEachStacktrace(_ list: inout JSONValue, _ body: (inout [JSONValue], Bool) -> Void) {
        guard case .object(var object) = list, case .array(var values)? = object["values"] else { return }
        for i in values.indices {
            guard case .object(var value) = values[i], case .object(var stacktrace)? = value["stacktrace"],
                  case .array(var frames)? = stacktrace["frames"] else { continue }
            body(&frames, value["crashed"] == nil)  // thread entries carry `crashed`, exceptions do not
            stacktrace["frames"] = .array(frames)
            value["stacktrace"] = .object(stacktrace)
            values[i] = .object(value)
        }
        object["values"] = .array(values)
        list = .object(object)
    }

    /// Removes `threads.values[].stacktrace` when it equals an exception's stack trace; `true` when any was.
    static func dropDuplicateThreadStacks(_ e: inout [String: JSONValue], _ trace: inout Trace) -> Bool {
        guard case .object(let exception)? = e["exception"], case .array(let exceptions)? = exception["values"],
              case .object(var threads)? = e["threads"], case .array(var values)? = threads["values"] else { return false }
        let stacks = exceptions.compactMap { $0.objectValue?["stacktrace"] }
        var dropped = false
        for i in values.indices {
            guard case .object(var thread) = values[i], let stack = thread["stacktrace"], stacks.contains(stack) else { continue }
            thread["stacktrace"] = nil
            values[i] = .object(thread)
            trace.entries += 1
            dropped = true
        }
        threads["values"] = .array(values)
        e["threads"] = .object(threads)
        return dropped
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
        if let data = c.data, data.values.contains(where: { $0.utf8.count > maxBreadcrumbDataChars }) {
            c.data = data.mapValues { truncated($0, maxBreadcrumbDataChars) ?? $0 }
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

extension EventFactory {
    /// The JSON bytes of an event's JSON object (sorted keys, `/` unescaped).
    static func encode(_ event: [String: JSONValue]) -> Data {
        (try? payloadEncoder.encode(event)) ?? Data("{}".utf8)
    }

    /// The JSON bytes of an event's JSON object within the per-field limits and `budget` (a stored or hand-made
    /// event; the SDK's own events are ``Event`` values, see ``finalize(_:budget:log:)``).
    static func finalize(_ event: [String: JSONValue], budget: EventBudget = .standard) -> Data {
        budget.fit(event).data
    }

    private static let payloadEncoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()
}

extension JSONValue {
    /// The members, when this is ``object(_:)``; otherwise `nil`.
    var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }
}
