import Synchronization

/// A value shared between threads, behind a `Synchronization.Mutex`; a class, so that escaping closures
/// (threads, `DispatchQueue` blocks, `URLSession` completions) can share it.
public final class Locked<Value>: Sendable {
    private let mutex: Mutex<Value>

    /// Creates the lock holding `value`.
    public init(_ value: sending Value) { mutex = Mutex(value) }

    /// Runs `body` with exclusive access to the value; returns what `body` returns.
    public func withLock<R>(_ body: (inout sending Value) -> sending R) -> sending R {
        mutex.withLock { body(&$0) }
    }
}
