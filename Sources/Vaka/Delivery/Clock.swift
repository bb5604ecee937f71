import Foundation

/// A source of the current time for delivery decisions (backoff, rate limits, outbox file names).
/// Injected so tests can move time by hand instead of sleeping. Read from the delivery thread and the callers'.
protocol DeliveryClock: AnyObject, Sendable {
    /// The current wall-clock time.
    var now: Date { get }
}

/// The real clock (`Date()`).
final class SystemDeliveryClock: DeliveryClock {
    /// Creates the system clock.
    init() {}
    /// `Date()`.
    var now: Date { Date() }
}

/// Clamps for durations and instants that come from outside the process (server headers, options, files on
/// disk), so that none reaches a trapping conversion: Foundation's `NSCondition.wait(until:)` traps for a
/// deadline more than ~292 years away (its nanosecond count overflows `Int`), `Int(Double)` traps for NaN,
/// ±infinity and anything beyond ±9.2e18, and the `Int32` fields of `struct tm` trap beyond ±2.1e9.
enum Bounded {
    /// The longest wait the SDK ever schedules, seconds: one day. A longer `Retry-After`, rate limit or
    /// backoff is cut to this (Sentry's longest usual limit, a day for a category, still fits).
    static let maxDelay: TimeInterval = 86_400

    /// `seconds` clamped to `0...maxDelay`; NaN gives `nil` (the caller ignores the value).
    static func delay(_ seconds: Double) -> TimeInterval? {
        guard !seconds.isNaN else { return nil }
        return min(max(seconds, 0), maxDelay)  // -0 → 0, +inf → maxDelay, -inf → 0
    }

    /// `seconds` clamped to `0...maxDelay`, NaN as 0 (for timeouts given by the caller).
    static func timeout(_ seconds: Double) -> TimeInterval { delay(seconds) ?? 0 }

    /// A deadline safe for `NSCondition.wait(until:)`: `date`, moved into `[now, now + maxDelay]`
    /// (NaN or infinite dates become `now + maxDelay`, so a wait on them ends and is looked at again).
    static func waitDeadline(_ date: Date, now: Date = Date()) -> Date {
        let d = date.timeIntervalSince(now)
        guard d.isFinite else { return now.addingTimeInterval(d == -.infinity ? 0 : maxDelay) }
        return now.addingTimeInterval(min(max(d, 0), maxDelay))
    }

    /// Whole seconds of `seconds` for log lines: rounded, clamped to `Int`'s range, NaN as 0.
    static func wholeSeconds(_ seconds: Double) -> Int {
        guard !seconds.isNaN else { return 0 }
        let r = seconds.rounded()
        if r >= 9.0e18 { return Int.max }
        if r <= -9.0e18 { return Int.min }
        return Int(r)
    }

    /// `value` as `Int64` (clamped; NaN as 0): for milliseconds and the like computed from outside numbers.
    static func int64(_ value: Double) -> Int64 {
        guard !value.isNaN else { return 0 }
        if value >= 9.2e18 { return .max }
        if value <= -9.2e18 { return .min }
        return Int64(value)
    }
}
