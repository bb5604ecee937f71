import Foundation

/// Rate limits announced by the server, per data category, as absolute deadlines.
///
/// Sources (Sentry "Rate Limiting"):
/// - `X-Sentry-Rate-Limits: retry_after:categories:scope[:reason[:namespaces]], ...` on any response:
///   `retry_after` in seconds (integer or decimal), `categories` `;`-separated (empty = every category).
///   When present it is authoritative and `Retry-After` is ignored.
/// - otherwise, on 429, `Retry-After`: delay in seconds or an HTTP date; it limits every category.
/// - 429 with neither header: every category for 60 s.
///
/// For each category the longest deadline wins (a shorter new limit never shortens a running one).
/// Item types map to categories with ``category(for:)``.
///
/// A recorded limit lasts at least ``minimumDelay`` (1 s): `Retry-After: 0.001`, `0`, a date in the past, or
/// `X-Sentry-Rate-Limits: 0.001:error` limit for one second, so a server answering every request so cannot
/// make the SDK resend in a tight loop (sentry-native reads whole seconds, so `0.001` is 0 there, and it drops
/// the envelope instead of retrying; Vaka keeps it, hence the floor).
///
/// Values from the server are never trusted: every delay is clamped to `0...Bounded.maxDelay` (one day); NaN,
/// infinity, negative numbers, HTTP dates outside years 0...9999 and garbage groups are ignored (a 429 then
/// falls back to 60 s). At most ``maxGroups`` groups and ``maxCategoriesPerGroup`` categories per group are
/// read from one `X-Sentry-Rate-Limits` header.
struct RateLimits: Equatable {
    /// The pseudo-category meaning "all categories".
    static let all = ""
    /// Delay for a 429 without usable headers, in seconds.
    static let default429Delay: TimeInterval = 60
    /// Shortest limit recorded from a server's answer, seconds: 1. Parsed delays below it (sub-second
    /// decimals, 0, dates in the past) are raised to it by ``update(status:headers:now:)``.
    static let minimumDelay: TimeInterval = 1
    /// Most `,`-separated groups read from one `X-Sentry-Rate-Limits` header (the rest is ignored).
    static let maxGroups = 64
    /// Most `;`-separated categories read from one group (the rest is ignored).
    static let maxCategoriesPerGroup = 64

    /// category → time until which it is limited (`""` = all).
    private(set) var deadlines: [String: Date] = [:]

    /// The rate-limit data category for an envelope item type: `event` → `error`, `session` → `session`,
    /// `log` → `log_item`; other types map to their own name (Sentry uses e.g. `attachment` for `attachment`).
    static func category(for type: EnvelopeItem.ItemType) -> String {
        switch type {
        case .event: return "error"
        case .session: return "session"
        case .log: return "log_item"
        default: return type.rawValue
        }
    }

    /// Records the limits carried by a response received at `now`; every delay lasts at least ``minimumDelay``.
    /// - Parameters:
    ///   - status: HTTP status code.
    ///   - headers: response headers with lower-cased names.
    /// - Returns: `true` when any limit was recorded.
    @discardableResult
    mutating func update(status: Int, headers: [String: String], now: Date) -> Bool {
        if let header = headers["x-sentry-rate-limits"], !header.trimmingCharacters(in: .whitespaces).isEmpty {
            var any = false
            for (delay, categories) in RateLimits.parseSentryHeader(header) {
                for c in categories { limit(c, until: now.addingTimeInterval(max(delay, RateLimits.minimumDelay))); any = true }
            }
            if any || status != 429 { return any }
        }
        guard status == 429 else { return false }
        let delay = headers["retry-after"].flatMap { RateLimits.parseRetryAfter($0, now: now) } ?? RateLimits.default429Delay
        limit(RateLimits.all, until: now.addingTimeInterval(max(delay, RateLimits.minimumDelay)))
        return true
    }

    /// Limits `category` (`""` = all) until `deadline`, unless it is already limited longer.
    mutating func limit(_ category: String, until deadline: Date) {
        if let existing = deadlines[category], existing >= deadline { return }
        deadlines[category] = deadline
    }

    /// Whether items of `category` must be held at time `at` (its own limit or the all-categories limit).
    func isLimited(_ category: String, at: Date) -> Bool {
        (limitedUntil(category, at: at) ?? .distantPast) > at
    }

    /// The time until which `category` is limited, or `nil` when it is not limited at `at`. Logs (`log_item`)
    /// are also limited by `log_byte`, Sentry's other category for them.
    func limitedUntil(_ category: String, at: Date) -> Date? {
        var d = max(deadlines[category] ?? .distantPast, deadlines[RateLimits.all] ?? .distantPast)
        if category == "log_item" { d = max(d, deadlines["log_byte"] ?? .distantPast) }
        return d > at ? d : nil
    }

    /// The earliest deadline still in the future at `at` (when the next held item may become sendable).
    func nextExpiry(after at: Date) -> Date? {
        deadlines.values.filter { $0 > at }.min()
    }

    /// Parses a `Retry-After` value: non-negative seconds (integer or decimal) or an HTTP date.
    /// - Returns: the delay in seconds from `now`, clamped to `0...Bounded.maxDelay` (one day: `1e300` gives a
    ///   day; `-0` and a date in the past give 0), or `nil` when the value is neither, or is negative, NaN,
    ///   infinite or longer than 64 bytes.
    static func parseRetryAfter(_ value: String, now: Date) -> TimeInterval? {
        let v = value.trimmingCharacters(in: .whitespaces)
        guard !v.isEmpty, v.utf8.count <= 64 else { return nil }  // an HTTP date is 29 bytes
        if let seconds = Double(v) {
            guard seconds.isFinite, seconds >= 0 else { return nil }
            return Bounded.delay(seconds)
        }
        if let date = Timestamps.parseHTTPDate(v) { return Bounded.delay(date.timeIntervalSince(now)) }
        return nil
    }

    /// Parses `X-Sentry-Rate-Limits` into (delay seconds, categories) groups; an empty category list becomes
    /// `[""]` (all). Groups with an unparsable, negative, NaN or infinite delay are skipped; delays are clamped
    /// to `Bounded.maxDelay` (so `99999999999999999999:error:key` limits `error` for one day). At most
    /// ``maxGroups`` groups and ``maxCategoriesPerGroup`` categories per group. Scope, reason and namespaces
    /// are ignored.
    static func parseSentryHeader(_ header: String) -> [(TimeInterval, [String])] {
        var out: [(TimeInterval, [String])] = []
        for group in header.split(separator: ",").prefix(maxGroups) {
            let fields = group.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
                .prefix(2).map { $0.trimmingCharacters(in: .whitespaces) }
            guard let first = fields.first, let parsed = Double(first), parsed.isFinite, parsed >= 0,
                  let delay = Bounded.delay(parsed) else { continue }
            let cats = fields.count > 1
                ? fields[1].split(separator: ";").prefix(maxCategoriesPerGroup)
                    .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
                : []
            out.append((delay, cats.isEmpty ? [RateLimits.all] : cats))
        }
        return out
    }
}
