import Foundation

/// Exponential backoff after failed sends (5xx, timeouts, connection failures, garbage responses):
/// 5 s after the first failure, doubling each further failure, at most 300 s; ``reset()`` on success.
struct Backoff: Equatable {
    /// First delay, seconds.
    var initial: TimeInterval = 5
    /// Largest delay, seconds.
    var maximum: TimeInterval = 300
    /// Consecutive failures since the last success.
    private(set) var failures = 0
    /// No send before this time; `nil` when not backing off.
    private(set) var nextAttempt: Date?

    /// The delay that the next ``recordFailure(now:)`` will impose, seconds: `min(initial · 2^failures, maximum)`.
    var nextDelay: TimeInterval {
        let exp = min(failures, 30)
        return min(initial * pow(2, Double(exp)), maximum)
    }

    /// Records a failure at `now`; returns the time of the next allowed attempt.
    @discardableResult
    mutating func recordFailure(now: Date) -> Date {
        let d = now.addingTimeInterval(nextDelay)
        failures += 1
        nextAttempt = d
        return d
    }

    /// Records a success: the next failure waits `initial` again.
    mutating func reset() {
        failures = 0
        nextAttempt = nil
    }

    /// Whether sending must wait at time `at`.
    func isWaiting(at: Date) -> Bool { (nextAttempt ?? .distantPast) > at }
}
