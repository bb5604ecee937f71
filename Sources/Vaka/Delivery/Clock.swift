import Foundation

/// A source of the current time for delivery decisions (backoff, rate limits, outbox file names).
/// Injected so tests can move time by hand instead of sleeping.
protocol DeliveryClock: AnyObject {
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
