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
