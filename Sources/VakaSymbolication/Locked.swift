import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A value behind a `Synchronization.Mutex`, shared by reference, that ThreadSanitizer can follow.
///
/// On Linux a contended `Mutex` waits and wakes in the kernel (a futex, inside the Swift runtime's
/// uninstrumented code), so ThreadSanitizer sees no ordering between two threads that took it in turn and
/// reports the guarded value as raced. Each critical section here therefore also tells ThreadSanitizer
/// about the lock (`__tsan_acquire` after taking it, `__tsan_release` before giving it back), as the Swift
/// runtime does for its own futex locks. In a process built without `-sanitize=thread` those functions do
/// not exist and nothing extra happens.
final class Locked<Value>: Sendable {
    private let mutex: Mutex<Value>

    /// Creates the lock holding `value`.
    init(_ value: sending Value) {
        mutex = Mutex(value)
    }

    /// Runs `body` with the value, holding the lock; returns what `body` returns.
    func withLock<Result>(_ body: (inout sending Value) -> sending Result) -> sending Result {
        let address = Unmanaged.passUnretained(self).toOpaque()
        return mutex.withLock { value -> sending Result in
            ThreadSanitizerAnnotations.acquire(address)
            defer { ThreadSanitizerAnnotations.release(address) }
            return body(&value)
        }
    }
}

/// ThreadSanitizer's happens-before annotations, looked up once with `dlsym`; `nil` (no-ops) in a process
/// not built with ThreadSanitizer.
enum ThreadSanitizerAnnotations {
    private typealias Annotation = @convention(c) (UnsafeMutableRawPointer?) -> Void
    /// The functions' addresses (`UInt`, 0 when absent), so the globals are plain `Sendable` values.
    private static let acquireAddress = lookup("__tsan_acquire")
    private static let releaseAddress = lookup("__tsan_release")

    private static func lookup(_ name: String) -> UInt {
        UInt(bitPattern: dlsym(UnsafeMutableRawPointer(bitPattern: 0), name))
    }

    /// `__tsan_acquire(address)`: what was released at `address` happens before what follows.
    static func acquire(_ address: UnsafeMutableRawPointer) {
        guard acquireAddress != 0, let function = UnsafeRawPointer(bitPattern: acquireAddress) else { return }
        unsafeBitCast(function, to: Annotation.self)(address)
    }

    /// `__tsan_release(address)`: what came before happens before a later acquire of `address`.
    static func release(_ address: UnsafeMutableRawPointer) {
        guard releaseAddress != 0, let function = UnsafeRawPointer(bitPattern: releaseAddress) else { return }
        unsafeBitCast(function, to: Annotation.self)(address)
    }
}
