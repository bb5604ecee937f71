import Foundation
import Synchronization

/// Sends the envelopes of a ``PersistentQueue``, one POST per envelope, and applies the server's answer.
///
/// One ``pump()`` seals the open batch, then walks the sealed batch files oldest first and their envelopes in
/// order. For each envelope:
/// - items whose rate-limit category is limited (``RateLimits``) are held: an envelope with only held items
///   is skipped; one with some is split, the rest sent now and the held items kept in its place;
/// - the rest is POSTed to ``DSN/envelopeURL`` with `Content-Type: application/x-sentry-envelope`,
///   `Content-Encoding: gzip`, `X-Sentry-Auth` and `User-Agent: vaka.swift/0.1.0`, its header's `sent_at` set
///   to the send time; when zlib cannot be loaded (``Gzip``: `libz.so.1` missing), the body goes uncompressed
///   without `Content-Encoding`, after one debug line saying so;
/// - the answer decides (`X-Sentry-Rate-Limits` is recorded from every answer):
///   - **2xx**: the envelope is removed from its batch file (the file is deleted when empty); backoff reset.
///   - **401** (the key is refused) and **3xx** (a redirect: Sentry SDKs do not follow redirects for
///     envelopes, so the DSN's scheme or host is wrong): sending stops for the life of this uploader (until
///     the next launch); files kept; one always-on `[vaka]` line (``warn``) names the status, the DSN's host and,
///     for a redirect, the `Location` host (never the key).
///   - **413**: the envelope's items are split into two halves which replace it and are sent in turn. A
///     single event that still gets 413 is trimmed again (``EventBudget``) to half its JSON size and half its
///     gzipped size, keeping its `event_id`, and sent again in its place; when half its size would be under
///     ``EventBudget/floorBytes`` (16 KiB), or trimming cannot make it smaller, it is given up (dropped,
///     ``Stats/droppedTooLarge``). Any other single item that gets 413 is dropped.
///   - **429**: limits from `X-Sentry-Rate-Limits`, else `Retry-After`, else 60 s for all categories, each at
///     least 1 s (``RateLimits/minimumDelay``); the envelope is held while its categories are limited (and
///     not sent again in the same pump) and other categories keep flowing. When the
///     answer does not limit the envelope's own categories, it counts as a failure (below).
///   - **407** (a proxy needs credentials; never the server's verdict on the event), and a proxy refusing
///     the `CONNECT` tunnel (``TransportError/proxyStatus``): a failure (backoff, below), files kept, plus one
///     always-on `[vaka]` line per process: the proxy may be fixed or its credentials renewed meanwhile.
///   - **other 4xx** (not 408): permanent rejection; the envelope is removed (``Stats/droppedRejected``);
///     the first rejection with each status prints one always-on `[vaka]` line (a 403 or 404 for every
///     envelope is a misconfiguration that must be visible without debug).
///   - **a permanent transport error** (``TransportError/isPermanent``: libcurl missing or broken, a URL or
///     scheme it can never send to): like 401, sending stops until the next launch; files kept; one
///     always-on `[vaka]` line.
///   - **5xx, 408, 1xx, no answer** (offline, refused, timed out, garbage): exponential ``Backoff``
///     (5, 10, 20, ... 300 s), nothing is sent before it passes; the pump stops.
///
/// Every envelope with an event that is accepted (2xx) or given up (413 at the floor, other 4xx) is reported
/// to ``onEventSettled`` with its `event_id` (the crash join deletes or sets aside the crash report then).
///
/// Thread-safe: calls to ``pump()`` are serialised; the state getters never wait for a pump in progress.
/// ``cancel()`` makes a running pump stop before its next request.
final class Uploader: Sendable {
    /// What a pump ended with.
    enum Outcome: Equatable {
        /// Everything queued when the pump ran was settled.
        case idle
        /// Some envelopes are held by rate limits; the earliest limit ends at `until`.
        case held(until: Date)
        /// A failure: no sending before `until` (backoff or a global rate limit).
        case waiting(until: Date)
        /// A 401, a 3xx or a permanent transport error stopped sending until the next launch.
        case stopped
    }

    /// How an envelope that carried an event ended (``onEventSettled``).
    enum EventSettlement: Equatable {
        /// The server accepted it (2xx).
        case accepted
        /// It will never be sent: the reason (e.g. `413 Payload Too Large at 12345 B JSON, under the floor`).
        case givenUp(String)
    }

    /// Counters for debug output and tests.
    struct Stats: Equatable {
        /// Envelopes (or split parts) answered with 2xx.
        var sent = 0
        /// Envelopes dropped because of a permanent 4xx.
        var droppedRejected = 0
        /// Single-item envelopes dropped because the server still answered 413.
        var droppedTooLarge = 0
        /// Events trimmed again after a 413 (each retry counts).
        var retrimmed = 0
        /// Records in batch files that were not parsable envelopes (dropped).
        var droppedUnreadable = 0
        /// Requests that failed (5xx, 408, no answer...).
        var failures = 0
        /// Requests sent.
        var requests = 0
    }

    let queue: PersistentQueue
    let dsn: DSN
    let transport: HTTPTransport
    let clock: DeliveryClock
    /// Bound on each request, seconds (15 in the SDK).
    let requestTimeout: TimeInterval
    /// Called on the sending thread with the `event_id` of each envelope with an event that was accepted or
    /// given up (see the type's documentation), after its batch file was rewritten without it.
    let onEventSettled: (@Sendable (String, EventSettlement) -> Void)?
    /// What was dropped: each POST carries the client report not sent yet (settled by the answer: only a 2xx
    /// makes it done), and envelopes given up here are counted (`send_error`).
    let clientReports: ClientReports?

    /// What the pump decides by and counts: written only by ``pump()`` (and ``cancel()``), read by anyone.
    private struct State {
        var cancelled = false
        var rateLimits = RateLimits()
        var backoff = Backoff()
        var stopped = false
        var notBefore: Date?  // a 5xx's Retry-After, when longer than the backoff
        var stats = Stats()
        var warned = Set<String>()  // keys of the ``warn`` lines printed
        var saidUncompressed = false  // the debug line that zlib is missing was logged
    }
    private let state = Mutex(State())
    private let pumpLock = Mutex(())  // serialises pump()
    private let log: @Sendable (String) -> Void
    /// The zlib library bodies are gzipped with (``Gzip/compress(_:level:library:)``).
    private let zlibLibrary: String
    /// Always-on sink for misconfigurations (one line each, without the `[vaka] ` prefix or newline).
    private let warn: @Sendable (String) -> Void

    /// Writes `[vaka] <line>` to standard error: the default ``warn`` sink.
    static func standardError(_ line: String) { PrivateFiles.writeStandardError("[vaka] \(line)\n") }

    /// - Parameters:
    ///   - queue: where the envelopes are.
    ///   - dsn: where to send them and with which key.
    ///   - transport: the HTTP client (``CurlTransport`` in the SDK, scripted in tests).
    ///   - clock: time source for backoff and rate limits.
    ///   - requestTimeout: bound on each request, seconds.
    ///   - log: debug sink; never given the key.
    ///   - warn: always-on sink for misconfigurations (401, 3xx, 407, a rejecting 4xx, libcurl missing), each
    ///     kind at most once per uploader (one per process in the SDK); never given the key. Default: standard
    ///     error with a `[vaka] ` prefix.
    ///   - onEventSettled: told when an event is accepted or given up (``onEventSettled``).
    ///   - clientReports: the drops counted and sent (``clientReports``); `nil`: none.
    ///   - zlibLibrary: the zlib that gzips the bodies (``Gzip/compress(_:level:library:)``; default
    ///     ``Gzip/defaultLibrary``; tests pass a missing name to see bodies go uncompressed).
    init(queue: PersistentQueue, dsn: DSN, transport: HTTPTransport, clock: DeliveryClock,
         requestTimeout: TimeInterval = 15, log: @escaping @Sendable (String) -> Void = { _ in },
         warn: @escaping @Sendable (String) -> Void = Uploader.standardError,
         onEventSettled: (@Sendable (String, EventSettlement) -> Void)? = nil,
         clientReports: ClientReports? = nil, zlibLibrary: String = Gzip.defaultLibrary) {
        self.zlibLibrary = zlibLibrary
        self.onEventSettled = onEventSettled
        self.clientReports = clientReports
        self.queue = queue
        self.dsn = dsn
        self.transport = transport
        self.clock = clock
        self.requestTimeout = requestTimeout
        self.log = log
        self.warn = warn
    }

    /// Prints `line` through ``warn`` unless a line with the same `key` was printed already.
    private func warnOnce(_ key: String, _ line: String) {
        let first = state.withLock { $0.warned.insert(key).inserted }
        if first { warn(line) }
    }

    /// The DSN's host for messages (never the key).
    private var serverName: String { dsn.envelopeURL.host ?? "the server" }

    /// Current rate limits.
    var rateLimits: RateLimits { state.withLock { $0.rateLimits } }
    /// Current backoff state.
    var backoff: Backoff { state.withLock { $0.backoff } }
    /// Whether a 401 or a permanent transport error stopped sending.
    var isStopped: Bool { state.withLock { $0.stopped } }
    /// Counters.
    var stats: Stats { state.withLock { $0.stats } }

    /// Makes the pump in progress (if any) and all later ones return before sending anything more
    /// (used by `Delivery.close`). Envelopes not yet sent stay in their files.
    func cancel() {
        state.withLock { $0.cancelled = true }
    }

    private var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Runs `body` on the state with its mutex held (for writes from the pump).
    private func mutate(_ body: (inout State) -> Void) {
        state.withLock { body(&$0) }
    }

    /// Sends what may be sent now (see the type's documentation). Blocks for the network exchanges.
    /// One pump at a time: a second caller waits for the first to end.
    func pump() -> Outcome {
        pumpLock.withLock { _ in pumpSerialised() }
    }

    /// ``pump()`` with `pumpLock` held.
    private func pumpSerialised() -> Outcome {
        if isStopped { return .stopped }
        if isCancelled { return .idle }
        if let until = blockedUntil(clock.now) { return .waiting(until: until) }
        do { try queue.seal() } catch { log("could not write the open batch: \(error)") }

        var heldUntil: Date? = nil  // earliest end of a limit that held an item in this pump
        for ref in queue.sealedBatches() {
            guard var records = queue.records(of: ref) else { continue }
            var i = 0
            fileLoop: while i < records.count {
                let now = clock.now
                if let until = blockedUntil(now) { return .waiting(until: until) }  // e.g. 429 limiting all
                if isCancelled { return .idle }
                let envelope: Envelope
                do {
                    envelope = try Envelope(data: records[i])
                } catch {
                    mutate { $0.stats.droppedUnreadable += 1 }
                    log("dropping unreadable envelope in \(ref.name): \(error)")
                    records.remove(at: i)
                    guard commit(ref, records) else { break fileLoop }
                    continue
                }
                let limitsNow = rateLimits
                let sendable = envelope.items.filter { !limitsNow.isLimited(RateLimits.category(for: $0.type), at: now) }
                let held = envelope.items.filter { limitsNow.isLimited(RateLimits.category(for: $0.type), at: now) }
                for item in held {
                    if let d = limitsNow.limitedUntil(RateLimits.category(for: item.type), at: now) {
                        heldUntil = min(heldUntil ?? d, d)
                    }
                }
                if sendable.isEmpty { i += 1; continue }  // held by rate limits
                let part = held.isEmpty ? envelope : envelope.with(items: sendable)
                let rest: [Data] = held.isEmpty ? [] : [envelope.with(items: held).serialized()]

                switch send(part, now: now) {
                case .delivered:
                    records.replaceSubrange(i...i, with: rest)
                    if !rest.isEmpty { i += 1 }
                    let committed = commit(ref, records)
                    settle(part, .accepted)
                    guard committed else { break fileLoop }
                case .rejected(let status):
                    records.replaceSubrange(i...i, with: rest)
                    if !rest.isEmpty { i += 1 }
                    let committed = commit(ref, records)
                    clientReports?.record(.sendError, envelope: part)
                    settle(part, .givenUp("permanently rejected with HTTP \(status)"))
                    guard committed else { break fileLoop }
                case .tooLarge:
                    if part.items.count <= 1 {
                        switch retrimmed(part) {
                        case .smaller(let smaller, let note):
                            mutate { $0.stats.retrimmed += 1 }
                            log("413 for event \(part.header.eventID ?? "-"): \(note); sending it again")
                            records.replaceSubrange(i...i, with: [smaller.serialized()] + rest)
                            guard commit(ref, records) else { break fileLoop }
                            continue  // the smaller envelope is next
                        case .givenUp(let reason):
                            mutate { $0.stats.droppedTooLarge += 1 }
                            log("dropping a single-item \(part.items.first?.type.rawValue ?? "empty") envelope (\(part.header.eventID ?? "-")): \(reason)")
                            records.replaceSubrange(i...i, with: rest)
                            if !rest.isEmpty { i += 1 }
                            let committed = commit(ref, records)
                            clientReports?.record(.sendError, envelope: part)
                            settle(part, .givenUp(reason))
                            guard committed else { break fileLoop }
                            continue
                        }
                    } else {
                        let half = part.items.count / 2
                        let halves = [part.with(items: Array(part.items[..<half])).serialized(),
                                      part.with(items: Array(part.items[half...])).serialized()]
                        log("413: splitting a \(part.items.count)-item envelope into \(half) + \(part.items.count - half)")
                        records.replaceSubrange(i...i, with: halves + rest)
                    }
                    guard commit(ref, records) else { break fileLoop }
                case .rateLimited:
                    // Held now: never sent again in this pump (even if the limit ended meanwhile), so a server
                    // answering 429 to everything gets at most one request per envelope per pump.
                    let after = clock.now
                    if let until = blockedUntil(after) { return .waiting(until: until) }  // all categories limited
                    let limits = part.items.compactMap { self.rateLimits.limitedUntil(RateLimits.category(for: $0.type), at: after) }
                    if let until = limits.max() {
                        heldUntil = min(heldUntil ?? until, until)
                        i += 1
                        continue
                    }
                    return fail(reason: "429 without a limit on this envelope's categories", retryAfter: nil)
                case .unauthorized:
                    mutate { $0.stopped = true }
                    log("401 Unauthorized: sending stopped until the next launch; \(queue.fileCount) batch file(s) kept")
                    warnOnce("401", "\(serverName) answered HTTP 401 Unauthorized: the DSN's key is refused; sending stopped until the next launch, envelopes kept in \(queue.directory.path)")
                    return .stopped
                case .redirected(let status, let location):
                    mutate { $0.stopped = true }
                    log("HTTP \(status) redirect to \(location): sending stopped until the next launch; \(queue.fileCount) batch file(s) kept")
                    warnOnce("3xx", "\(serverName) answered HTTP \(status), a redirect to \(location): envelopes are not sent to redirects, check the DSN's scheme and host; sending stopped until the next launch, envelopes kept in \(queue.directory.path)")
                    return .stopped
                case .retry(let reason, let retryAfter):
                    return fail(reason: reason, retryAfter: retryAfter)
                case .cannotSend(let reason):
                    mutate { $0.stopped = true }
                    log("cannot send (\(reason)): sending stopped until the next launch; \(queue.fileCount) batch file(s) kept")
                    warnOnce("cannotSend", "cannot send (\(reason)): sending stopped until the next launch, envelopes kept in \(queue.directory.path)")
                    return .stopped
                }
            }
        }
        // Limits on categories that nothing queued uses (Bugsink always limits `transaction;span` for a day)
        // do not count: only items actually held make the outcome `held`.
        return heldUntil.map { .held(until: $0) } ?? .idle
    }

    /// The time before which nothing may be sent (backoff, or a rate limit on all categories), if any.
    private func blockedUntil(_ now: Date) -> Date? {
        state.withLock { state in
            let b = state.backoff.isWaiting(at: now) ? state.backoff.nextAttempt : nil
            let r = state.rateLimits.deadlines[RateLimits.all].flatMap { $0 > now ? $0 : nil }
            let n = state.notBefore.flatMap { $0 > now ? $0 : nil }
            return [b, r, n].compactMap { $0 }.max()
        }
    }

    private func fail(reason: String, retryAfter: TimeInterval?) -> Outcome {
        let now = clock.now
        var until = now
        mutate { state in
            state.stats.failures += 1
            until = state.backoff.recordFailure(now: now)
            if let r = retryAfter { until = max(until, now.addingTimeInterval(r)) }
            state.notBefore = until
        }
        until = max(until, blockedUntil(now) ?? until)
        log("send failed (\(reason)); next attempt in \(Bounded.wholeSeconds(until.timeIntervalSince(now))) s")
        return .waiting(until: until)
    }

    /// Reports an envelope's end to ``onEventSettled`` when it carried an event.
    private func settle(_ envelope: Envelope, _ outcome: EventSettlement) {
        guard let id = envelope.header.eventID, envelope.items.contains(where: { $0.type == .event }) else { return }
        onEventSettled?(id, outcome)
    }

    private enum Retrim {
        case smaller(Envelope, note: String)
        case givenUp(String)
    }

    /// A single-event envelope that got 413, trimmed again to half its JSON size and half its gzipped size
    /// (same header, same `event_id`); given up when half would be under ``EventBudget/floorBytes``, when the
    /// item is not a JSON event, or when trimming cannot make it smaller.
    private func retrimmed(_ envelope: Envelope) -> Retrim {
        guard envelope.items.count == 1, let item = envelope.items.first, item.type == .event else {
            return .givenUp("413 Payload Too Large even alone (\(envelope.items.first.map { "\($0.payload.count) B" } ?? "empty"), not an event: cannot be trimmed)")
        }
        let size = item.payload.count
        guard size / 2 >= EventBudget.floorBytes else {
            return .givenUp("413 Payload Too Large at \(size) B JSON; half of it is under the \(EventBudget.floorBytes) B floor")
        }
        guard let event = try? JSONDecoder().decode(Event.self, from: item.payload) else {
            return .givenUp("413 Payload Too Large at \(size) B and the event is not a JSON object")
        }
        let gzipped = (try? Gzip.compress(item.payload))?.count ?? size
        let budget = EventBudget(maxEventBytes: size / 2,
                                 maxCompressedBytes: max(EventBudget.floorBytes, min(EventBudget.standard.maxCompressedBytes, gzipped / 2)))
        let outcome = budget.fit(event)
        guard outcome.data.count < size else {
            return .givenUp("413 Payload Too Large at \(size) B JSON and trimming cannot make it smaller")
        }
        var trimmed = item
        trimmed.payload = outcome.data
        return .smaller(envelope.with(items: [trimmed]),
                        note: "trimmed again from \(size) B (\(gzipped) B gzip) to \(outcome.data.count) B (budget \(budget.maxEventBytes) B, \(budget.maxCompressedBytes) B gzip)")
    }

    private func commit(_ ref: PersistentQueue.BatchRef, _ records: [Data]) -> Bool {
        do {
            return try queue.commit(ref, records: records)
        } catch {
            log("could not rewrite \(ref.name): \(error)")
            return false
        }
    }

    private enum Verdict {
        case delivered, tooLarge, rateLimited, unauthorized
        case redirected(Int, location: String)  // 3xx and the Location's host
        case rejected(Int)
        case retry(String, retryAfter: TimeInterval?)
        case cannotSend(String)  // a permanent transport error
    }

    /// POSTs `envelope` with the pending client report added (``ClientReports/take(now:)``): done with a 2xx,
    /// put back for a later envelope with any other outcome.
    private func send(_ envelope: Envelope, now: Date) -> Verdict {
        guard let ticket = clientReports?.take(now: now) else { return post(envelope, now: now) }
        var carrying = envelope
        carrying.items.append(ticket.item)
        let verdict = post(carrying, now: now)
        if case .delivered = verdict { clientReports?.commit(ticket) } else { clientReports?.abort(ticket) }
        return verdict
    }

    private func post(_ envelope: Envelope, now: Date) -> Verdict {
        var e = envelope
        e.header.sentAt = now
        let raw = e.serialized()
        var headers: [(name: String, value: String)] = [("Content-Type", "application/x-sentry-envelope")]
        let body: Data
        do {
            body = try Gzip.compress(raw, library: zlibLibrary)
            headers.append(("Content-Encoding", "gzip"))
        } catch let error as GzipError where error.isLibraryMissing {
            // The server takes an envelope without Content-Encoding as it is: sent uncompressed, never lost.
            let first = state.withLock { state in
                defer { state.saidUncompressed = true }
                return !state.saidUncompressed
            }
            if first { log("gzip: \(error.message ?? "zlib missing"): envelopes are sent uncompressed") }
            body = raw
        } catch {
            return .retry("gzip: \(error)", retryAfter: nil)
        }
        headers += [("X-Sentry-Auth", dsn.authHeader), ("User-Agent", DSN.clientName)]
        let request = HTTPRequest(url: dsn.envelopeURL, headers: headers, body: body, timeout: requestTimeout)
        mutate { $0.stats.requests += 1 }
        let encoding = headers.contains { $0.name == "Content-Encoding" } ? "\(body.count) B gzip" : "uncompressed"
        let what = "\(e.items.map(\.type.rawValue).joined(separator: "+")) envelope \(e.header.eventID ?? "-") (\(raw.count) B, \(encoding))"
        switch transport.sendSynchronously(request) {
        case .failure(let error):
            if error.isPermanent { return .cannotSend("\(error)") }
            log("\(what): no answer: \(error)")
            if let proxy = error.proxyStatus {
                warnOnce("proxy\(proxy)", "the proxy refused the tunnel to \(serverName) with HTTP \(proxy)\(proxy == 407 ? " (it needs credentials: user:password in https_proxy/all_proxy)" : ""): envelopes stay queued and are retried with backoff")
            }
            return .retry("no answer: \(error)", retryAfter: nil)
        case .success(let response):
            let after = clock.now
            mutate { $0.rateLimits.update(status: response.status, headers: response.headers, now: after) }
            log("\(what) → \(response.status)")
            // Retry-After on a 5xx/408 (standard HTTP) lengthens the backoff; on 429 it is a rate limit.
            let retryAfter = response.headers["retry-after"].flatMap { RateLimits.parseRetryAfter($0, now: after) }
            switch response.status {
            case 200..<300:
                mutate { state in
                    state.backoff.reset()
                    state.notBefore = nil
                    state.stats.sent += 1
                }
                return .delivered
            case 401: return .unauthorized
            case 413: return .tooLarge
            case 429: return .rateLimited
            case 408: return .retry("HTTP 408", retryAfter: retryAfter)
            case 407:
                // Only a proxy answers 407: it says nothing about the event.
                warnOnce("proxy407", "a proxy answered HTTP 407 Proxy Authentication Required (it needs credentials: user:password in http_proxy/all_proxy): envelopes stay queued and are retried with backoff")
                return .retry("HTTP 407 from a proxy", retryAfter: retryAfter)
            case 300..<400:
                // Not followed (Sentry SDKs never follow redirects for envelopes): the DSN is wrong, and it
                // will not fix itself. Only the Location's host is named: its query could carry the key.
                let target = response.headers["location"].flatMap { URL(string: $0)?.host } ?? "(no Location host)"
                return .redirected(response.status, location: target)
            case 400..<500:
                mutate { $0.stats.droppedRejected += 1 }
                log("dropping \(what): permanent \(response.status)")
                warnOnce("\(response.status)", "\(serverName) rejected an envelope with HTTP \(response.status): it is dropped (later ones with the same status are dropped silently; debug shows each)")
                return .rejected(response.status)
            default: return .retry("HTTP \(response.status)", retryAfter: retryAfter)
            }
        }
    }
}
