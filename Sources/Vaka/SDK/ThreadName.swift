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
    /// nothing happens without `/proc`. Called as the first statement of each of Vaka's thread bodies:
    /// Foundation's `Thread.name`, set before `start()`, does not reach the kernel on Linux. Also marks the thread
    /// as one of Vaka's own for the crash runtime (`vaka_crash_mark_own_thread`): a crash elsewhere describes it
    /// from `/proc` instead of waiting for it to unwind itself.
    static func setCurrent(_ name: String) {
        vaka_crash_mark_own_thread()
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        var bytes = Array(name.utf8.prefix(15))
        _ = write(fd, &bytes, bytes.count)
        close(fd)
    }
}
