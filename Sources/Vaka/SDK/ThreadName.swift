import Foundation
import VakaCrash
#if canImport(Glibc)
import Glibc
#endif

/// The names of Vaka's own threads (`vaka.start`, `vaka.journal`, `vaka.delivery`, `vaka.close`), as the kernel
/// shows them (`/proc/<pid>/task/<tid>/comm`, `top -H`, gdb) and a crash report lists them.
enum ThreadName {
    /// Names the calling thread `name` (at most 15 bytes are kept), at once, by writing
    /// `/proc/thread-self/comm` (what `pthread_setname_np` does, which Swift's Glibc module does not offer);
    /// nothing happens without `/proc`. Called as the first statement of each of Vaka's thread bodies
    /// (``OwnThread``, which the crash runtime has already marked as Vaka's under this name): Foundation's
    /// `Thread.name`, set before `start()`, does not reach the kernel on Linux.
    static func setCurrent(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        var bytes = Array(name.utf8.prefix(15))
        _ = write(fd, &bytes, bytes.count)
        close(fd)
    }

    /// ``setCurrent(_:)`` for one of Vaka's threads that takes on other work under another name (the `vaka.start`
    /// thread becoming the journal's mover): its entry in the crash runtime's table of Vaka's own threads is renamed
    /// too (`vaka_crash_mark_own_thread`), so a crash lists it under the new name.
    static func rename(_ name: String) {
        vaka_crash_mark_own_thread(name)
        setCurrent(name)
    }
}

/// One of Vaka's own threads (`vaka.start`, `vaka.journal`, `vaka.delivery`, `vaka.close`): a detached POSIX
/// thread created by `vaka_crash_create_own_thread` (`pthread_create` with the default attributes: the process's
/// default stack size, 8 MiB from `RLIMIT_STACK` on Debian, as Foundation's `Thread` has; `SCHED_BATCH` when the
/// creating thread has the default policy, so it never takes the CPU from the program's thread where it wakes up), marked as Vaka's for the
/// crash runtime from the moment it exists (by its id, as soon as `pthread_create` returns), then named with
/// ``ThreadName/setCurrent(_:)``, then running `body`, then unmarked. Not Foundation's `Thread`: its first use in a process (the `Thread`
/// object, its thread-local setup on both threads) cost `Vaka.start`'s caller more than the `clone` itself.
final class OwnThread: Sendable {
    /// The kernel name given to the thread (at most 15 bytes are kept).
    let name: String
    private let body: @Sendable () -> Void

    /// A thread named `name` that will run `body` once ``start()`` is called.
    init(name: String, _ body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }

    /// Creates the thread (detached: nothing joins it). When `pthread_create` fails (`EAGAIN`: no threads left)
    /// runs `body` nowhere and returns `false`.
    @discardableResult
    func start() -> Bool {
        let box = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        // Marked as Vaka's by the crash runtime from the moment it exists, unmarked when it ends
        // (vaka_crash_create_own_thread).
        let rc = vaka_crash_create_own_thread(&thread, name, { raw in
            guard let raw else { return nil }
            let own = Unmanaged<OwnThread>.fromOpaque(raw).takeRetainedValue()
            ThreadName.setCurrent(own.name)
            own.body()
            return nil
        }, box)
        guard rc == 0 else {
            Unmanaged<OwnThread>.fromOpaque(box).release()
            return false
        }
        pthread_detach(thread)
        return true
    }
}
