// SDK scenarios of vaka-crashme: they end normally (exit 0) after Vaka.flush(), and exercise the event API.
import Foundation
import VakaCrashmeC
@_spi(Testing) import Vaka

/// A scenario that uses the SDK API and exits normally.
struct SDKScenario: Sendable {
    /// The name on the command line.
    let name: String
    /// One line for `--help`.
    let summary: String
    /// Runs after `Vaka.start`; the harness then flushes and exits 0.
    let run: @Sendable (_ storage: URL) -> Void
}

/// An error type the handled-error scenarios throw, so the event's `exception.type` is
/// `vaka_crashme.CheckoutError` and its value names the case.
enum CheckoutError: Error, CustomStringConvertible {
    /// The card was declined, with the processor's code.
    case cardDeclined(code: Int)
    var description: String {
        switch self {
        case .cardDeclined(let code): return "card declined (code \(code))"
        }
    }
}

@inline(never)
func chargeCard(amount: Int) throws -> Int {
    if amount > 0 { throw CheckoutError.cardDeclined(code: 51) }
    return amount
}

/// Throws a `CheckoutError` two calls deep and captures it with Vaka (`handledErrorScenario` and
/// `chargeCard(amount:)` are on the captured stack).
@inline(never)
func handledErrorScenario() {
    do {
        _ = try chargeCard(amount: 42)
    } catch {
        Vaka.capture(error)
    }
}

/// A Swift error wrapping another (its `underlyingError`): the `scoped-error` scenario's chained exception.
struct PaymentFailed: WrappingError, CustomStringConvertible {
    /// The error it wraps.
    var underlyingError: (any Error)?
    var description: String { "payment failed" }
}

/// Captures `PaymentFailed` wrapping `CheckoutError.cardDeclined(code: 51)` with fingerprint
/// `["checkout", "card-declined"]` and a per-call scope (tag `payment=card`, context `payment {provider:
/// "acme", attempt: 2}`, extra `retry` true), then the message "after the scoped error" with none of it.
@inline(never)
func scopedErrorScenario() {
    Vaka.capture(PaymentFailed(underlyingError: CheckoutError.cardDeclined(code: 51)), fingerprint: ["checkout", "card-declined"]) { scope in
        scope.setTag("payment", "card")
        scope.setContext("payment", ["provider": "acme", "attempt": 2])
        scope.setExtra("retry", true)
    }
    Vaka.capture(message: "after the scoped error", level: .info)
}

/// What `--rich-scope FILE` sets right after start (also before a crash): user `user-123` with e-mail
/// `ana@example.com`, username `ana` and IP address `203.0.113.7`; context `order {id: 1042, total: 99.5,
/// items: ["book", "pen"]}`; extra `cart_size` 3; a breadcrumb of type `query`, category `db`, level
/// `warning`, message `SELECT orders`, data `{rows: 3, cached: false, tables: ["orders"]}`; and FILE attached
/// (`text/plain`, read when an event is sent).
func applyRichScope(attachment: String) {
    Vaka.setUser(User(id: "user-123", email: "ana@example.com", username: "ana", ipAddress: "203.0.113.7"))
    Vaka.setContext("order", ["id": 1042, "total": 99.5, "items": ["book", "pen"]])
    Vaka.setExtra("cart_size", 3)
    Vaka.addBreadcrumb(Breadcrumb(type: "query", category: "db", message: "SELECT orders", level: "warning",
                                  data: ["rows": 3, "cached": false, "tables": ["orders"]]))
    Vaka.addAttachment(path: attachment, contentType: "text/plain")
}

/// The tag, user and breadcrumbs `--scope` (and the `events` scenario) set: tag `flavor=free`, user
/// `user-123`, breadcrumbs `cart: Added item 42` and `cart: Opened checkout`.
func applyHarnessScope() {
    Vaka.setTag("flavor", "free")
    Vaka.identify("user-123")
    Vaka.addBreadcrumb(category: "cart", message: "Added item 42")
    Vaka.addBreadcrumb(category: "cart", message: "Opened checkout")
}

/// The event id of message `index` of `capture-many`: fixed, so a message captured again after a kill has
/// the same `event_id` (`ca97` + index as 28 hex digits).
func captureManyEventID(_ index: Int) -> String {
    "ca97" + String(format: "%028x", index)
}

let sdkScenarios: [SDKScenario] = [
    SDKScenario(name: "handled-error", summary: "throws CheckoutError.cardDeclined and captures it (exit 0 after flush)",
                run: { _ in handledErrorScenario() }),
    SDKScenario(name: "scoped-error", summary: "captures PaymentFailed wrapping CheckoutError.cardDeclined with a fingerprint and a per-call scope, then a message without it (exit 0 after flush)",
                run: { _ in scopedErrorScenario() }),
    SDKScenario(name: "message", summary: "captures the warning message \"Cache rebuilt\" (exit 0 after flush)",
                run: { _ in Vaka.capture(message: "Cache rebuilt", level: .warning) }),
    SDKScenario(name: "events", summary: "screen, track, breadcrumbs, tag, identify, then a handled error (exit 0 after flush)",
                run: { _ in
                    Vaka.screen("Cart")
                    Vaka.track("purchase", ["plan": "pro"])
                    applyHarnessScope()
                    Vaka.screen("Checkout")
                    handledErrorScenario()
                }),
    SDKScenario(name: "capture-many", summary: "captures messages 0..<$VAKA_CAPTURE_COUNT (default 1000) with fixed event ids, resuming after <storage>/capture-many.progress (kill test)",
                run: { storage in captureMany(storage: storage) }),
    SDKScenario(name: "journal-flood", summary: "adds $VAKA_FLOOD_COUNT (default 10000) breadcrumbs \"crumb i\", capturing \"flood event j\" (fixed event ids) after every 25th; progress in <storage>/journal-flood.progress (kill test)",
                run: { storage in journalFlood(storage: storage) }),
    SDKScenario(name: "log-flood", summary: "logs $VAKA_FLOOD_COUNT (default 20000) info logs \"log i\" (attribute i); progress in <storage>/log-flood.progress (kill test)",
                run: { storage in logFlood(storage: storage) }),
    SDKScenario(name: "fsize-flood", summary: "captures 2 KiB messages \"fsize event i\" faster than the mover moves them, under an RLIMIT_FSIZE quota set after start ($VAKA_FSIZE_LIMIT bytes, or the journal spill's size once it holds 8 KiB), then $VAKA_FLOOD_COUNT (default 200) more; prints the quota and the count",
                run: { storage in fsizeFlood(storage: storage) }),
    SDKScenario(name: "start-probe", summary: "right after Vaka.start, then after Vaka.flush(timeout: 0), counts the earlier runs' crash reports and the outbox files; prints one JSON object",
                run: { storage in startProbe(storage: storage) }),
    SDKScenario(name: "start-storm", summary: "right after Vaka.start, 8 threads each add 200 breadcrumbs and logs \"t<k> log <i>\", set tags and the user, and capture \"storm t<k> <j>\" every 50th (fixed event ids); with $VAKA_STORM_FORK=1 the main thread first forks (right after start) a child that adds a breadcrumb, logs \"child log\", captures \"storm child\" and exits; with $VAKA_STORM_FORK=crash that child reads through NULL after its breadcrumb instead",
                run: { _ in startStorm() }),
    SDKScenario(name: "crash-at-start", summary: "reads through NULL right after Vaka.start (on a missing storage directory: before or after start's background thread made it); with $VAKA_CRASH_AFTER_FLUSH=1 after Vaka.flush(timeout: 0) instead (start's background part done), printing `crash handlers installed: 0|1` on stderr first",
                run: { _ in
                    if ProcessInfo.processInfo.environment["VAKA_CRASH_AFTER_FLUSH"] == "1" {
                        _ = Vaka.flush(timeout: 0)
                        writeErr("crash handlers installed: \(crashme_crash_handlers_installed())\n")
                    }
                    _ = crashme_null_deref()
                }),
    SDKScenario(name: "bench", summary: "measures Vaka.start, capture(message:) and addBreadcrumb; prints one JSON object",
                run: { _ in }),
]

/// The kill test's child: captures messages with fixed event ids, recording after each one the next index
/// in `<storage>/capture-many.progress` (so a restart after SIGKILL resumes; the message that was being
/// captured is captured again with the same id). Prints `done N` when all are captured.
func captureMany(storage: URL) {
    let total = Int(ProcessInfo.processInfo.environment["VAKA_CAPTURE_COUNT"] ?? "") ?? 1000
    let progress = storage.appendingPathComponent("capture-many.progress").path
    var next = 0
    if let text = try? String(contentsOfFile: progress, encoding: .utf8), let n = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
        next = n
    }
    let fd = open(progress, O_WRONLY | O_CREAT, 0o600)
    while next < total {
        Vaka.capture(message: "capture-many \(next)", level: .info, eventID: captureManyEventID(next))
        next += 1
        // No truncation: `next` only grows, so its digits always cover the previous value's.
        _ = String(next).withCString { pwrite(fd, $0, strlen($0), 0) }
    }
    close(fd)
    print("done \(total)")
}

/// `options` with `journalSize` from `$VAKA_JOURNAL_SIZE` (bytes) when set: the size-limit tests need a
/// journal that holds 100 breadcrumbs of 8 KiB. `$VAKA_SAMPLE_RATE` sets `sampleRate`, `$VAKA_IN_APP_INCLUDE` and
/// `$VAKA_IN_APP_EXCLUDE` (comma-separated prefixes) `inAppInclude` and `inAppExclude`; `$VAKA_BEFORE_SEND`
/// sets a `beforeSend` hook: `drop` drops every event, `edit` adds the tag `before_send: edited` and
/// `extra.before_send_main_thread` (whether the hook ran on the main thread), `reenter` calls `setTag`,
/// `addBreadcrumb`, the logger, `capture(message: "from beforeSend")` and `flush` from
/// the hook and tags the event `before_send: reentered`, `close` calls `Vaka.close()` from the hook;
/// `$VAKA_BEFORE_BREADCRUMB=reenter` sets a `beforeBreadcrumb` hook that calls `setTag`, `addBreadcrumb` and the logger.
func harnessOptions(_ options: Vaka.Options) -> Vaka.Options {
    var options = options
    let environment = ProcessInfo.processInfo.environment
    if let size = Int(environment["VAKA_JOURNAL_SIZE"] ?? "") { options.journalSize = size }
    if let rate = Double(environment["VAKA_SAMPLE_RATE"] ?? "") { options.sampleRate = rate }
    if let list = environment["VAKA_IN_APP_INCLUDE"] { options.inAppInclude = list.split(separator: ",").map(String.init) }
    if let list = environment["VAKA_IN_APP_EXCLUDE"] { options.inAppExclude = list.split(separator: ",").map(String.init) }
    if environment["VAKA_BEFORE_BREADCRUMB"] == "reenter" {
        // Calls back into Vaka from the hook: a tag, a breadcrumb and a log (itself a breadcrumb) of its own.
        options.beforeBreadcrumb = { crumb in
            Vaka.setTag("seen_by_breadcrumb_hook", "yes")
            Vaka.addBreadcrumb(category: "hook", message: "in beforeBreadcrumb")
            Vaka.logger.info("beforeBreadcrumb ran")
            return crumb
        }
    }
    switch environment["VAKA_BEFORE_SEND"] {
    case "drop":
        options.beforeSend = { _ in nil }
    case "edit":
        options.beforeSend = { event in
            var event = event
            event.tags = (event.tags ?? [:]).merging(["before_send": "edited"]) { _, new in new }
            event.extra = (event.extra ?? [:]).merging(["before_send_main_thread": .bool(Thread.isMainThread)]) { _, new in new }
            return event
        }
    case "reenter":
        // Calls back into Vaka from the hook, as an app's scrubbing or bookkeeping code might.
        options.beforeSend = { event in
            Vaka.setTag("seen_by_hook", "yes")
            Vaka.addBreadcrumb(category: "hook", message: "in beforeSend")
            Vaka.logger.info("beforeSend ran")
            Vaka.capture(message: "from beforeSend")
            _ = Vaka.flush(timeout: 1)
            var event = event
            event.tags = (event.tags ?? [:]).merging(["before_send": "reentered"]) { _, new in new }
            return event
        }
    case "close":
        options.beforeSend = { event in
            Vaka.close()
            return event
        }
    default:
        break
    }
    return options
}

/// The event id of `start-storm`'s capture `j` of thread `t`: `5707` + `t` and `j` as 14 hex digits each.
func startStormEventID(thread t: Int, _ j: Int) -> String {
    "5707" + String(format: "%014x%014x", t, j)
}

/// `start-storm`: 8 threads begin as soon as `Vaka.start` returned (start's background part then still makes the
/// run's files) and each adds 200 breadcrumbs and info logs, sets a tag and the user every 50th and captures a
/// message with a fixed event id (``startStormEventID(thread:_:)``); the main thread waits for them (at most
/// 60 s, then exits 3: a deadlock). With `$VAKA_STORM_FORK=1` the main thread first forks a child (right after
/// start) that adds a breadcrumb, logs "child log", captures "storm child" (event id `5707c417d` + 23 zeros) and ends with `_exit(0)`;
/// with `$VAKA_STORM_FORK=crash` the child dereferences NULL after its breadcrumb instead.
func startStorm() {
    let threads = 8, perThread = 200
    let forkMode = ProcessInfo.processInfo.environment["VAKA_STORM_FORK"]
    if forkMode == "1" || forkMode == "crash" {
        // Before the storm's threads exist (a child of a process whose other threads hold runtime locks may hang
        // in the Swift runtime, whatever it calls): only start's background part runs beside this thread.
        let pid = fork()
        if pid == 0 {
            Vaka.addBreadcrumb(category: "child", message: "in child")
            Vaka.logger.info("child log")
            if forkMode == "crash" { _ = crashme_null_deref() }
            Vaka.capture(message: "storm child", level: .info, eventID: "5707c417d" + String(repeating: "0", count: 23))
            _exit(0)
        }
        var status: Int32 = 0
        if pid > 0 { waitpid(pid, &status, 0) }
    }
    let done = DispatchGroup()
    for t in 0..<threads {
        done.enter()
        Thread {
            for i in 0..<perThread {
                Vaka.addBreadcrumb(category: "t\(t)", message: "\(i)")
                Vaka.logger.info("t\(t) log \(i)")
                if i % 50 == 0 {
                    Vaka.setTag("t\(t)", "\(i)")
                    Vaka.setUser(User(id: "user-\(t)"))
                    Vaka.capture(message: "storm t\(t) \(i / 50)", level: .info, eventID: startStormEventID(thread: t, i / 50))
                }
            }
            done.leave()
        }.start()
    }
    if done.wait(timeout: .now() + 60) == .timedOut {
        writeErr("vaka-crashme: start-storm threads did not finish within 60 s\n")
        _exit(3)
    }
}

/// The event id of event `index` of `journal-flood`: `f100d` + index as 27 hex digits.
func journalFloodEventID(_ index: Int) -> String {
    "f100d" + String(format: "%027x", index)
}

/// The journal kill test's child: adds breadcrumbs `crumb 0`, `crumb 1`, ... (category `flood`) and after every
/// 25th captures the message `flood event j` (event id ``journalFloodEventID(_:)``). After each call returns it
/// writes `<breadcrumbs added> <events captured>` at the start of `<storage>/journal-flood.progress` (one
/// pwrite, the digits only grow), so a test that SIGKILLs it knows what was recorded before the kill.
/// Prints `done N` at the end.
func journalFlood(storage: URL) {
    let total = Int(ProcessInfo.processInfo.environment["VAKA_FLOOD_COUNT"] ?? "") ?? 10_000
    let fd = open(storage.appendingPathComponent("journal-flood.progress").path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    var events = 0
    func progress(_ crumbs: Int) { _ = "\(crumbs) \(events)\n".withCString { pwrite(fd, $0, strlen($0), 0) } }
    for i in 0..<total {
        Vaka.addBreadcrumb(category: "flood", message: "crumb \(i)")
        progress(i + 1)
        if i % 25 == 24 {
            Vaka.capture(message: "flood event \(events)", level: .info, eventID: journalFloodEventID(events))
            events += 1
            progress(i + 1)
        }
    }
    close(fd)
    print("done \(total)")
}

/// The log kill test's child: `Vaka.logger.info("log i", attributes: ["i": i])` for i = 0, 1, ... $VAKA_FLOOD_COUNT
/// (default 20,000); after each call returns it writes the count logged so far at the start of
/// `<storage>/log-flood.progress` (one pwrite, the digits only grow), so a test that SIGKILLs it knows which logs
/// were recorded before the kill. Prints `done N` at the end.
func logFlood(storage: URL) {
    let total = Int(ProcessInfo.processInfo.environment["VAKA_FLOOD_COUNT"] ?? "") ?? 20_000
    let fd = open(storage.appendingPathComponent("log-flood.progress").path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    for i in 0..<total {
        Vaka.logger.info("log \(i)", attributes: ["i": .integer(Int64(i))])
        _ = "\(i + 1)\n".withCString { pwrite(fd, $0, strlen($0), 0) }
    }
    close(fd)
    print("done \(total)")
}

/// The event id of event `index` of `fsize-flood`: `f5125` + index as 27 hex digits.
func fsizeFloodEventID(_ index: Int) -> String {
    "f5125" + String(format: "%027x", index)
}

/// `fsize-flood`: the run's files under a file size quota. Captures messages `fsize event i` (padded to 2 KiB,
/// event id ``fsizeFloodEventID(_:)``) in a tight loop, so that the journal's event ring fills and records go
/// to its spill file. The soft `RLIMIT_FSIZE` is set after `Vaka.start` (the journal is already sized): to
/// $VAKA_FSIZE_LIMIT bytes at once when given, else to the spill file's size as soon as it holds 8 KiB (at most
/// 600 events), so that the next spill write starts at the quota. Then $VAKA_FLOOD_COUNT (default 200) more.
/// Prints `quota Q events N` (N captured in all) and exits 0 after the flush — unless SIGXFSZ ended it.
func fsizeFlood(storage: URL) {
    let env = ProcessInfo.processInfo.environment
    let more = Int(env["VAKA_FLOOD_COUNT"] ?? "") ?? 200
    let padding = String(repeating: "x", count: 2048)
    var captured = 0
    func capture() {
        Vaka.capture(message: "fsize event \(captured) \(padding)", level: .info, eventID: fsizeFloodEventID(captured))
        captured += 1
    }
    var quota = Int(env["VAKA_FSIZE_LIMIT"] ?? "") ?? 0
    if quota == 0 {
        let spill = storage.appendingPathComponent("runs/\(Vaka.runID ?? "")/journal.spill").path
        var info = stat()
        while captured < 600 {
            capture()
            if stat(spill, &info) == 0, info.st_size >= 8192 { quota = Int(info.st_size); break }
        }
        if quota == 0 {
            writeErr("vaka-crashme: the journal spill never reached 8 KiB\n")
            exit(3)
        }
    }
    var limit = rlimit()
    _ = getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit)
    limit.rlim_cur = rlim_t(quota)
    guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0 else {
        writeErr("vaka-crashme: setrlimit(RLIMIT_FSIZE) failed\n")
        exit(3)
    }
    for _ in 0..<more { capture() }
    print("quota \(quota) events \(captured)")
}

/// `--trail N:M` of the crash scenarios: N breadcrumbs `crumb 0` ... `crumb N-1` (category `trail`) added
/// right before the crash, with the messages `trail event 0` ... `trail event M-1` captured evenly among them,
/// event k right after breadcrumb k·(N-1)/M (so all come before the last breadcrumb, `crumb N-1`).
struct Trail {
    /// How many breadcrumbs (1...100 000).
    let breadcrumbs: Int
    /// How many messages (0...N-1).
    let events: Int

    /// Parses `N:M`; `nil` when malformed or out of range.
    init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let n = Int(parts[0]), let m = Int(parts[1]), (1...100_000).contains(n), (0..<n).contains(m) else { return nil }
        breadcrumbs = n
        events = m
    }

    /// Adds the breadcrumbs and captures the messages.
    func add() {
        var captured = 0
        for i in 0..<breadcrumbs {
            Vaka.addBreadcrumb(category: "trail", message: "crumb \(i)")
            while captured < events && captured * (breadcrumbs - 1) / events == i {
                Vaka.capture(message: "trail event \(captured)")
                captured += 1
            }
        }
    }
}

/// `vaka-crashme bench --storage DIR [--dsn DSN]`: one JSON object on stdout with `start_ms` (wall time of
/// Vaka.start), `breadcrumb_ns` (addBreadcrumb ns/op: one journal append), `capture_message_per_s`
/// (capture(message:) calls per second, each appended to the journal before returning, with at least 100
/// breadcrumbs in the journal before each; the mover moves them to `pending/` with a DSN, `outbox/` without,
/// on its thread meanwhile) and `capture_message_moved_per_s` (the same calls per second of the captures plus
/// the `Vaka.flush(timeout: 0)` after them, which waits until the mover has written every event to disk).
/// Counts: $VAKA_BENCH_CAPTURES (default 2000), $VAKA_BENCH_BREADCRUMBS (default 20000, at least 100).
func runBench(storage: URL, dsn: String?) -> Never {
    let env = ProcessInfo.processInfo.environment
    let captures = Int(env["VAKA_BENCH_CAPTURES"] ?? "") ?? 2000
    let crumbs = max(100, Int(env["VAKA_BENCH_BREADCRUMBS"] ?? "") ?? 20000)
    func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
    let t0 = now()
    // A long flush interval: the measured loop is the capture path, not the network.
    Vaka.start(Vaka.Options(dsn: dsn, flushInterval: 3600, storageDirectory: storage))
    let t1 = now()
    for i in 0..<crumbs { Vaka.addBreadcrumb(category: "bench", message: "crumb \(i)") }
    let t2 = now()
    for i in 0..<captures { Vaka.capture(message: "bench \(i)", level: .info) }
    let t3 = now()
    Vaka.flush(timeout: 0)
    let t4 = now()
    let result: [String: Double] = [
        "start_ms": Double(t1 - t0) / 1e6,
        "breadcrumb_ns": Double(t2 - t1) / Double(max(crumbs, 1)),
        "capture_message_per_s": Double(captures) / (Double(t3 - t2) / 1e9),
        "capture_message_moved_per_s": Double(captures) / (Double(t4 - t2) / 1e9),
    ]
    let data = try! JSONSerialization.data(withJSONObject: result.merging(benchLogger()) { a, _ in a }, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
    Vaka.close(timeout: 0)
    exit(0)
}

/// Runs SDK scenario `name` (`nil`: none — just start, which sends last run's crash and pending files) with
/// Vaka started on `storage` and `dsn`, flushes (at most $VAKA_FLUSH_TIMEOUT s, default 30; not at all with
/// $VAKA_NO_FLUSH=1) and exits 0. `withScope` applies
/// ``applyHarnessScope()`` first. `VAKA_DEBUG=1` turns on the SDK's debug output.
func runSDKScenario(_ scenario: SDKScenario?, storage: URL, dsn: String?, withScope: Bool,
                    bigBreadcrumbs: BigBreadcrumbs? = nil, richScope: String? = nil) -> Never {
    if scenario?.name == "bench" { runBench(storage: storage, dsn: dsn) }
    let debug = ProcessInfo.processInfo.environment["VAKA_DEBUG"] == "1"
    Vaka.start(harnessOptions(Vaka.Options(dsn: dsn, debug: debug, storageDirectory: storage)))
    if withScope { applyHarnessScope() }
    if let richScope { applyRichScope(attachment: richScope) }
    bigBreadcrumbs?.add()
    scenario?.run(storage)
    // $VAKA_NO_FLUSH=1: exit at once, so the exit hook (Vaka.end) moves what the journal holds (the exit test).
    if ProcessInfo.processInfo.environment["VAKA_NO_FLUSH"] == "1" { exit(0) }
    let flushTimeout = Double(ProcessInfo.processInfo.environment["VAKA_FLUSH_TIMEOUT"] ?? "") ?? 30
    let sent = Vaka.flush(timeout: flushTimeout)
    if !sent {
        // `Vaka.flush` returns false for a loss as well as for what is still queued (its documentation).
        // Outbox mode or not as the SDK decided it (a DSN from --dsn, or from $SENTRY_DSN).
        writeErr(!Vaka.hasDSN
            ? "vaka-crashme: flush returned false: an outbox file could not be written, or older outbox files were dropped at the outbox cap (1,000 files / 64 MiB)\n"
            : "vaka-crashme: flush returned false: envelopes still queued (server unreachable, backing off, rate limited or refusing), or dropped unwritten and unsent (storage full, read-only or over RLIMIT_FSIZE)\n")
    }
    exit(0)
}

/// The SDK part of `--help`.
func printSDKHelp() {
    print("""

        SDK scenarios (exit 0 after Vaka.flush(); no scenario at all = just start, flush, exit 0):
        """)
    let width = sdkScenarios.map(\.name.count).max() ?? 0
    for scenario in sdkScenarios {
        print("  \(scenario.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(scenario.summary)")
    }
    print("""

        SDK options: --dsn DSN (or $VAKA_DSN; none = envelopes go to DIR/outbox), --scope (set tag flavor=free,
        user user-123 and two cart breadcrumbs right after start, also before a crash), --rich-scope FILE (right
        after start, also before a crash: user user-123 with e-mail, username and IP address, context "order",
        extra cart_size, a "db" breadcrumb with data, and FILE attached), --big-breadcrumbs N:BYTES
        (after --scope, add N breadcrumbs of category "big" whose message is BYTES random letters and digits,
        text that compresses badly: e.g. 100:20000 makes a crash event of about 2 MB before the SDK trims it),
        --trail N:M (crash scenarios: right before the crash, add N breadcrumbs "crumb 0".."crumb N-1" of category
        "trail" and capture M messages "trail event k" evenly among them, all before the last breadcrumb),
        $VAKA_DEBUG=1 (SDK debug output on stderr), $VAKA_JOURNAL_NO_MMAP=1 (the journal's write(2) fallback),
        $VAKA_JOURNAL_SIZE=BYTES (Options.journalSize), $VAKA_FLUSH_TIMEOUT=S (the flush before exit, default 30),
        $VAKA_NO_FLUSH=1 (exit without that flush: the exit hook moves and ends everything),
        $VAKA_SAMPLE_RATE=R (Options.sampleRate), $VAKA_IN_APP_INCLUDE / $VAKA_IN_APP_EXCLUDE=P1,P2 (image name or
        path prefixes: Options.inAppInclude / inAppExclude), $VAKA_BEFORE_SEND=drop|edit|reenter|close (a beforeSend hook that drops every
        event, or tags it before_send=edited with extra.before_send_main_thread false/true, or calls setTag,
        addBreadcrumb, the logger, capture(message:) and flush from the hook and tags it before_send=reentered,
        or calls Vaka.close()), $VAKA_BEFORE_BREADCRUMB=reenter (a beforeBreadcrumb hook that calls setTag,
        addBreadcrumb and the logger). Without
        --dsn and $VAKA_DSN, Vaka itself reads $SENTRY_DSN (and $SENTRY_RELEASE, $SENTRY_ENVIRONMENT).
        """)
}

/// `--big-breadcrumbs N:BYTES`: N breadcrumbs (1...10 000) of category `big`, message `#<i> ` followed by
/// random letters and digits up to BYTES bytes (1...10 000 000), for the size-limit tests.
struct BigBreadcrumbs {
    /// How many breadcrumbs.
    let count: Int
    /// Bytes of each message.
    let bytes: Int

    /// Parses `N:BYTES`; `nil` when malformed or out of range.
    init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let n = Int(parts[0]), let b = Int(parts[1]),
              (1...10_000).contains(n), (1...10_000_000).contains(b) else { return nil }
        count = n
        bytes = b
    }

    /// Adds the breadcrumbs with Vaka.
    func add() {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
        var generator = SystemRandomNumberGenerator()
        for i in 0..<count {
            var message = Array("#\(i) ".utf8.prefix(bytes))
            message.reserveCapacity(bytes)
            while message.count < bytes { message.append(alphabet[Int(generator.next() % UInt64(alphabet.count))]) }
            Vaka.addBreadcrumb(category: "big", message: String(decoding: message, as: UTF8.self))
        }
    }
}

/// The logger keys of `vaka-crashme bench` (Vaka started with the default options):
/// - `log_paced_ns`, `log_paced_spill_bytes`: $VAKA_BENCH_LOGS_PACED (default 5,000) `Vaka.logger.info` calls
///   one every 20 µs (a steady 50,000 logs/s, far more than the log ring holds between two of the mover's
///   1 s passes): ns per call (the calls only, not the pauses), and the bytes that went to the journal's spill
///   file meanwhile (0 when the mover, woken as the ring fills, kept up);
/// - after a flush, `log_ns`: $VAKA_BENCH_LOGS (default 20,000) `Vaka.logger.info` calls with one attribute in a
///   tight loop (recorded: journal, breadcrumb; ns/op; a burst this long outruns the mover and spills);
/// - `log_below_threshold_ns`: $VAKA_BENCH_LOGS_BELOW (default 10,000,000) `Vaka.logger.debug` calls, below the
///   minimum level `info`: nothing evaluated; ns/op.
func benchLogger() -> [String: Double] {
    let env = ProcessInfo.processInfo.environment
    let paced = max(1, Int(env["VAKA_BENCH_LOGS_PACED"] ?? "") ?? 5000)
    let logs = max(1, Int(env["VAKA_BENCH_LOGS"] ?? "") ?? 20000)
    let below = max(1, Int(env["VAKA_BENCH_LOGS_BELOW"] ?? "") ?? 10_000_000)
    func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
    let spill = Vaka.storageDirectory.map { $0.appendingPathComponent("runs/\(Vaka.runID ?? "")/journal.spill").path } ?? ""
    func spillBytes() -> Int {
        var info = stat()
        return stat(spill, &info) == 0 ? Int(info.st_size) : 0
    }
    let spillBefore = spillBytes()
    var inCalls: UInt64 = 0
    var next = now()
    for i in 0..<paced {
        while now() < next {}
        let t = now()
        Vaka.logger.info("bench log \(i)", attributes: ["i": .integer(Int64(i))])
        inCalls += now() - t
        next = t + 20_000
    }
    let spilled = spillBytes() - spillBefore
    Vaka.flush(timeout: 0)
    let t0 = now()
    for i in 0..<logs { Vaka.logger.info("bench log \(i)", attributes: ["i": .integer(Int64(i))]) }
    let t1 = now()
    for i in 0..<below { Vaka.logger.debug("bench log \(i)", attributes: ["i": .integer(Int64(i))]) }
    let t2 = now()
    return ["log_paced_ns": Double(inCalls) / Double(paced), "log_paced_spill_bytes": Double(spilled),
            "log_ns": Double(t1 - t0) / Double(logs), "log_below_threshold_ns": Double(t2 - t1) / Double(below)]
}

/// `start-probe`: prints `{"reports_after_start", "outbox_after_start", "reports_after_flush",
/// "outbox_after_flush"}` — the `*.crash` files in `<storage>/crashes/` other than this run's, and the files in
/// `<storage>/outbox/`, counted first as soon as `Vaka.start` has returned (the crash join of earlier runs
/// runs in the background then), then after `Vaka.flush(timeout: 0)` (which waits for it).
func startProbe(storage: URL) {
    func count(_ directory: String, _ keep: (String) -> Bool) -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent(directory).path)) ?? []).filter(keep).count
    }
    let own = (Vaka.runID ?? "") + ".crash"
    func reports() -> Int { count("crashes") { $0.hasSuffix(".crash") && $0 != own } }
    let reportsAfterStart = reports(), outboxAfterStart = count("outbox") { !$0.hasPrefix(".") }
    Vaka.flush(timeout: 0)
    let result = ["reports_after_start": reportsAfterStart, "outbox_after_start": outboxAfterStart,
                  "reports_after_flush": reports(), "outbox_after_flush": count("outbox") { !$0.hasPrefix(".") }]
    let data = try! JSONSerialization.data(withJSONObject: result, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}
