import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension PrivateFiles {
    /// How long, seconds, a temporary file (`.tmp-*`, made by ``writeAtomically(_:toPath:sync:)`` before its
    /// `rename`) must have gone unmodified before a cleaning pass deletes it as left by a writer that was killed:
    /// one hour. A younger one may be a write in progress, of this process or of another one sharing the storage
    /// directory (several processes of one program, or a program and its fork children); deleting it would make
    /// that write's `rename` fail.
    static let staleTemporaryAge: Int64 = 3_600

    /// Deletes `directory/name` when it is a regular file (not followed if a symbolic link) last modified
    /// ``staleTemporaryAge`` seconds or more before `now` (seconds since the Unix epoch).
    /// - Returns: whether it was deleted.
    static func removeIfStaleTemporary(_ name: String, in directory: String, now: Int64) -> Bool {
        let path = directory + "/" + name
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
              now - Int64(info.st_mtim.tv_sec) >= staleTemporaryAge else { return false }
        return unlink(path) == 0
    }
}
