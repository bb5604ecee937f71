import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Writes all of `data` to the file descriptor `fd` with write(2), retrying `EINTR` and short writes. The one
/// write loop of the package: the SDK's files (`PrivateFiles.writeAll`), the `vaka` tool's output and the
/// symbol cache use it (it lives here, the module all of them import).
/// - Returns: 0, or the `errno` of the first failed write (`EIO` for a write that wrote nothing).
public func writeAll(_ fd: Int32, _ data: Data) -> Int32 {
    data.withUnsafeBytes { writeAll(fd, $0) }
}

/// Writes all of `bytes` to the file descriptor `fd`, as the `Data` one does (for callers that
/// have the bytes without a `Data`).
/// - Returns: 0, or the `errno` of the first failed write (`EIO` for a write that wrote nothing).
public func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32 {
    guard let base = bytes.baseAddress else { return 0 }
    var offset = 0
    while offset < bytes.count {
        let n = write(fd, base + offset, bytes.count - offset)
        if n < 0 {
            if errno == EINTR { continue }
            return errno
        }
        if n == 0 { return EIO }
        offset += n
    }
    return 0
}

/// Runs `body` with `SIGXFSZ` blocked on the calling thread, then discards a `SIGXFSZ` that `body`'s writes
/// raised (the kernel sends it to the writing thread, so it stays pending there) and restores the mask: a
/// write past `RLIMIT_FSIZE` then fails with `EFBIG` instead of killing the process (the signal's default
/// action). What every file write of the SDK runs in (`PrivateFiles.withFileSizeSignalBlocked` in Vaka, the
/// symbol cache here); see there for why blocking rather than checking the limit first.
/// - Parameter body: returns 0 or the `errno` of its failed write; only after `EFBIG` (the only failure that
///   comes with `SIGXFSZ`) is the pending set looked at, so a successful write costs two `pthread_sigmask`.
/// - Returns: what `body` returned.
public func withFileSizeSignalBlocked(_ body: () -> Int32) -> Int32 {
    var block = sigset_t(), old = sigset_t()
    sigemptyset(&block)
    sigaddset(&block, SIGXFSZ)
    guard pthread_sigmask(SIG_BLOCK, &block, &old) == 0 else { return body() }
    let code = body()
    var pending = sigset_t()
    if code == EFBIG, sigismember(&old, SIGXFSZ) == 0, sigpending(&pending) == 0, sigismember(&pending, SIGXFSZ) == 1 {
        var zero = timespec(tv_sec: 0, tv_nsec: 0)
        while sigtimedwait(&block, nil, &zero) < 0 && errno == EINTR {}
    }
    pthread_sigmask(SIG_SETMASK, &old, nil)
    return code
}
