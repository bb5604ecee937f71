import Foundation
import VakaSymbolication
#if canImport(Glibc)
import Glibc
#endif

/// The on-disk format of one batch file in `<storage>/pending/` (see docs/ingest.md).
///
/// ```
/// VAKA-BATCH 1\n              magic line, format version 1
/// <decimal byte count>\n       record 1: length of the envelope in bytes, ASCII digits
/// <envelope bytes>\n           the serialized envelope (Sentry wire format), then one newline
/// <decimal byte count>\n       record 2 ...
/// <envelope bytes>\n
/// ```
/// Each record is one envelope, which is one POST. Records are length-prefixed because envelopes contain
/// newlines. Files are created whole (temporary file + rename); while a batch is open, durable envelopes are
/// appended to its file. A damaged tail (bad length line, short record, missing newline; e.g. an append cut
/// short by process death) is detected and the records before it are kept.
public enum BatchFile {
    /// The first line of every batch file, without its newline.
    public static let magic = "VAKA-BATCH 1"

    /// Encodes records (serialized envelopes) into batch-file bytes.
    public static func encode(_ records: [Data]) -> Data {
        var out = Data(capacity: records.reduce(16) { $0 + $1.count + 12 })
        out.append(contentsOf: Array((magic + "\n").utf8))
        out.append(encodeRecords(records[...]))
        return out
    }

    /// Encodes records without the magic line: the bytes appended to an existing batch file.
    public static func encodeRecords(_ records: ArraySlice<Data>) -> Data {
        var out = Data(capacity: records.reduce(0) { $0 + $1.count + 12 })
        for r in records {
            out.append(contentsOf: Array("\(r.count)\n".utf8))
            out.append(r)
            out.append(0x0A)
        }
        return out
    }

    /// Decodes batch-file bytes.
    /// - Returns: the intact records in order, and whether the file was damaged (wrong magic, or a bad or
    ///   short record; decoding stops at the first damage).
    public static func decode(_ data: Data) -> (records: [Data], damaged: Bool) {
        let bytes = [UInt8](data)
        let m = Array((magic + "\n").utf8)
        guard bytes.count >= m.count, Array(bytes[0..<m.count]) == m else { return ([], true) }
        var pos = m.count
        var records: [Data] = []
        while pos < bytes.count {
            var len = 0
            var digits = 0
            while pos < bytes.count, bytes[pos] >= 48, bytes[pos] <= 57, digits < 12 {
                len = len * 10 + Int(bytes[pos] - 48)
                pos += 1
                digits += 1
            }
            guard digits > 0, pos < bytes.count, bytes[pos] == 0x0A else { return (records, true) }
            pos += 1
            guard bytes.count - pos >= len + 1, bytes[pos + len] == 0x0A else { return (records, true) }
            records.append(Data(bytes[pos..<(pos + len)]))
            pos += len + 1
        }
        return (records, false)
    }
}

extension BatchFile {
    /// The header line (the envelope header JSON, up to `maxHeaderBytes`) of each record of the batch file at
    /// `path`, in order, read without reading the envelopes' bodies: one `pread` for each length line and one
    /// for each header, the bodies skipped by their length. Used to list the queued `event_id`s.
    /// - Returns: `nil` when the file cannot be opened or is not a regular file; the headers of the intact
    ///   records before the first damage otherwise (wrong magic: none).
    static func scanHeaders(path: String, maxHeaderBytes: Int = 8 * 1024) -> [Data]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let size = Int64(info.st_size)
        func read(at offset: Int64, _ count: Int) -> [UInt8] {
            var buffer = [UInt8](repeating: 0, count: max(0, count))
            var got = 0
            while got < count {
                let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + got, count - got, off_t(offset) + off_t(got)) }
                if n < 0, errno == EINTR { continue }
                if n <= 0 { break }
                got += n
            }
            return Array(buffer[0..<got])
        }
        let m = Array((magic + "\n").utf8)
        guard read(at: 0, m.count) == m else { return [] }
        var pos = Int64(m.count)
        var headers: [Data] = []
        while pos < size {
            let line = read(at: pos, 13)
            var len: Int64 = 0, digits = 0
            while digits < line.count, digits < 12, line[digits] >= 48, line[digits] <= 57 {
                len = len * 10 + Int64(line[digits] - 48)
                digits += 1
            }
            guard digits > 0, digits < line.count, line[digits] == 0x0A else { break }
            pos += Int64(digits) + 1
            guard size - pos >= len + 1, read(at: pos + len, 1) == [0x0A] else { break }
            let head = read(at: pos, Int(min(len, Int64(maxHeaderBytes))))
            headers.append(Data(head.prefix(while: { $0 != 0x0A })))
            pos += len + 1
        }
        return headers
    }

    /// The `event_id` in an envelope header line (`{"event_id":"…",…}`), or `nil` (found by a byte search:
    /// Vaka writes the header itself, compact, with this key once).
    static func eventID(inHeader header: Data) -> String? {
        let needle = Array("\"event_id\":\"".utf8)
        let bytes = [UInt8](header)
        guard bytes.count > needle.count else { return nil }
        for start in 0...(bytes.count - needle.count) where bytes[start] == needle[0] {
            guard bytes[start..<(start + needle.count)].elementsEqual(needle) else { continue }
            let from = start + needle.count
            guard let end = bytes[from...].firstIndex(of: 0x22) else { return nil }
            return String(decoding: bytes[from..<end], as: UTF8.self)
        }
        return nil
    }
}

/// The result of ``PrivateFiles/readCapped(_:maxBytes:)``.
enum CappedRead {
    /// The whole file (at most the cap).
    case data(Data)
    /// The file holds more than the cap (its size in bytes); nothing was read.
    case tooLarge(Int64)
    /// A directory, FIFO, socket or device: nothing was read.
    case notRegular
    /// It could not be opened or read: the `errno` (`ENOENT` when it does not exist).
    case unreadable(Int32)
}

/// Small POSIX file helpers with explicit modes (directories 0700, files 0600).
///
/// Every SDK write runs inside ``withFileSizeSignalBlocked(_:)``: a write past `RLIMIT_FSIZE` then fails with
/// `EFBIG` instead of killing the app with `SIGXFSZ` (whose default action terminates the process).
enum PrivateFiles {
    /// Runs `body` with `SIGXFSZ` blocked on the calling thread, then discards a `SIGXFSZ` that `body`'s writes
    /// raised (the kernel sends it to the writing thread, so it stays pending there) and restores the mask
    /// (`VakaSymbolication.withFileSizeSignalBlocked`, which the symbol cache's writes run in too).
    ///
    /// Why block rather than check the limit first: the kernel decides per `write(2)` (a write that starts
    /// at or past the limit raises the signal, one that crosses it is cut short), and a limit can change at
    /// any time; blocking covers every case with two `pthread_sigmask` calls. A `SIGXFSZ` already pending on
    /// the thread before the call, or one the app sends itself meanwhile, is discarded too (an app that relies
    /// on it has it handled or ignored, and then the kernel's `EFBIG` is what our write sees anyway).
    /// - Parameter body: returns 0 or the `errno` of its failed write; only after `EFBIG` (the only failure that
    ///   comes with `SIGXFSZ`) is the pending set looked at, so a successful write costs two `pthread_sigmask`.
    static func withFileSizeSignalBlocked(_ body: () -> Int32) -> Int32 {
        VakaSymbolication.withFileSizeSignalBlocked(body)
    }

    /// Writes `text` to standard error (fd 2) with `write(2)`, `SIGXFSZ` blocked, ignoring errors: the SDK's
    /// stderr lines (debug output) never trap (`FileHandle.write` does on an error) and never kill the app
    /// when stderr is a file over `RLIMIT_FSIZE`, on a full disk or a closed descriptor.
    static func writeStandardError(_ text: String) {
        var text = text
        text.withUTF8 { bytes in _ = withFileSizeSignalBlocked { writeAll(2, UnsafeRawBufferPointer(bytes)) } }
    }

    /// Reads the whole regular file at `path` if it holds at most `maxBytes` bytes, without reading more than
    /// `maxBytes + 1` bytes whatever the file holds (a 1 GiB or sparse file costs one `fstat`). Opened with
    /// `O_NONBLOCK`, so a FIFO with a file's name never blocks. Every file the SDK reads back from its
    /// storage directory goes through this, ``readCappedBytes(_:maxBytes:)`` or ``readTail(_:maxBytes:)``.
    static func readCapped(_ path: String, maxBytes: Int) -> CappedRead {
        // Read into the `Data` itself, not into an array copied into one: a file near the cap would be held twice.
        var data = Data()
        if let failure = readCapped(path, maxBytes: maxBytes, append: { chunk in
            data.append(chunk.baseAddress!.assumingMemoryBound(to: UInt8.self), count: chunk.count)
        }) {
            return failure.read
        }
        return .data(data)
    }

    /// Why ``readCappedBytes(_:maxBytes:)`` read nothing: the ``CappedRead`` case other than `data`.
    struct UnreadFile: Error {
        /// `tooLarge`, `notRegular` or `unreadable`.
        var read: CappedRead
    }

    /// ``readCapped(_:maxBytes:)`` giving the bytes as an array: what the start and exit paths read (the anon id),
    /// which then use no `Data` (its code's first use in a process is pages of Foundation that a program using
    /// Vaka would otherwise not have resident).
    static func readCappedBytes(_ path: String, maxBytes: Int) -> Result<[UInt8], UnreadFile> {
        var bytes: [UInt8] = []
        if let failure = readCapped(path, maxBytes: maxBytes, append: { bytes.append(contentsOf: $0) }) {
            return .failure(failure)
        }
        return .success(bytes)
    }

    /// The reading of ``readCapped(_:maxBytes:)``: the file's bytes, in order, given to `append` (never more than
    /// `maxBytes + 1` in all); `nil`, or why nothing (or not all) could be read.
    private static func readCapped(_ path: String, maxBytes: Int, append: (UnsafeRawBufferPointer) -> Void) -> UnreadFile? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return UnreadFile(read: .unreadable(errno)) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return UnreadFile(read: .unreadable(errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { return UnreadFile(read: .notRegular) }
        let cap = max(0, maxBytes)
        if Int64(info.st_size) > Int64(cap) { return UnreadFile(read: .tooLarge(Int64(info.st_size))) }
        var code: Int32 = 0
        guard let count = readAll(fd, from: 0, upTo: cap + 1, errorCode: &code, append: append) else {
            return UnreadFile(read: .unreadable(code))
        }
        // It grew meanwhile.
        return count > cap ? UnreadFile(read: .tooLarge(Int64(count))) : nil
    }

    /// The last `maxBytes` bytes of the regular file at `path` (all of it when smaller), reading nothing
    /// before them; `nil` when it cannot be opened or read or is not a regular file.
    static func readTail(_ path: String, maxBytes: Int) -> Data? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        let cap = Int64(max(0, maxBytes))
        let start = max(0, Int64(info.st_size) - cap)
        var code: Int32 = 0
        var data = Data()
        let count = readAll(fd, from: start, upTo: Int(cap), errorCode: &code) { chunk in
            data.append(chunk.baseAddress!.assumingMemoryBound(to: UInt8.self), count: chunk.count)
        }
        return count == nil ? nil : data
    }

    /// Reads up to `limit` bytes of `fd` from `offset` (`pread`, retrying `EINTR`), stopping at end of file,
    /// giving each chunk read (never empty) to `append` as it comes.
    /// - Returns: the number of bytes read; `nil` with `errorCode` set to `errno` when a read fails.
    private static func readAll(_ fd: Int32, from offset: Int64, upTo limit: Int, errorCode: inout Int32,
                                append: (UnsafeRawBufferPointer) -> Void) -> Int? {
        var total = 0
        var chunk = [UInt8](repeating: 0, count: min(64 * 1024, max(1, limit)))
        var position = offset
        while total < limit {
            let want = min(chunk.count, limit - total)
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, want, off_t(position)) }
            if n < 0 {
                if errno == EINTR { continue }
                errorCode = errno
                return nil
            }
            if n == 0 { break }
            chunk.withUnsafeBytes { append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            total += n
            position += Int64(n)
        }
        return total
    }

    /// Frees the disk blocks a file holds past its end (space reserved with `fallocate(FALLOC_FL_KEEP_SIZE)`, as
    /// the crash handler's report reserve): `truncate(2)` to its own size, then its access and modification
    /// times put back as they were. Does nothing when the file holds no more than its size rounded up to 4 KiB,
    /// or cannot be read; failures are ignored (the blocks stay until the file is removed).
    static func releaseBlocksPastEnd(_ path: String) {
        var before = stat()
        guard stat(path, &before) == 0, before.st_mode & S_IFMT == S_IFREG,
              Int64(before.st_blocks) * 512 > (Int64(before.st_size) + 4095) / 4096 * 4096 else { return }
        guard truncate(path, before.st_size) == 0 else { return }
        var times = [before.st_atim, before.st_mtim]
        _ = utimensat(AT_FDCWD, path, &times, 0)
    }

    /// Creates `url` and missing parents with mode 0700 and makes sure `url` itself is 0700, with `stat(2)`,
    /// `mkdir(2)` and `chmod(2)` only: a directory there already at 0700 is one `stat`; a missing one, one `stat`,
    /// one `mkdir` and one `stat`. Missing parents are made first, found from the first `ENOENT` upwards, as
    /// `mkdir -p` makes them: mode 0700 less the umask, plus the owner's write and search bits when the umask
    /// took them (under a umask such as 0277 a parent would otherwise be made that its own child cannot be made
    /// in). (`FileManager.createDirectory`'s first use in a process costs more than these calls: about 0.9 M
    /// instructions, callgrind.)
    /// - Throws: ``DeliveryIOError`` naming the failed call (`mkdir`, `chmod`, `stat`) and the path it was
    ///   called on: e.g. `mkdir` with `EEXIST` when a file that is not a directory is in the way, `EROFS` on a
    ///   read-only file system, `stat` with `ENAMETOOLONG` past `PATH_MAX` or `ELOOP` for a symlink loop.
    static func makeDirectory(_ url: URL) throws {
        try makeDirectory(path: url.fileSystemPath)
    }

    /// ``makeDirectory(_:)`` for the directory at `path` (absolute): the start and exit paths name their
    /// directories by path, without a `URL` (whose first use in a process is pages of Foundation that a program
    /// using Vaka would otherwise not have resident, and ~45 µs of its set-up).
    static func makeDirectory(path: String) throws {
        var existing = stat()
        if stat(path, &existing) != 0 {
            // Only a missing path is made: any other failure (ELOOP, EACCES, ENOTDIR...) is the one to name.
            let code = errno
            guard code == ENOENT else { throw DeliveryIOError(operation: "stat", path: path, code: code) }
            _ = try makeDirectoryAndParents(path)
            if stat(path, &existing) != 0 { throw DeliveryIOError(operation: "stat", path: path, code: errno) }
        }
        guard existing.st_mode & S_IFMT == S_IFDIR else { throw DeliveryIOError(operation: "mkdir", path: path, code: EEXIST) }
        // chmod only when needed: an existing 0700 directory on a read-only file system is fine as it is.
        if existing.st_mode & 0o7777 == 0o700 { return }
        if chmod(path, 0o700) != 0 { throw DeliveryIOError(operation: "chmod", path: path, code: errno) }
    }

    /// `mkdir(path, 0700)`; when a parent is missing (`ENOENT`), the parents first (recursively), each given
    /// the owner's write and search bits when the umask took them (`mkdir -p`'s `u+wx`). A directory made
    /// meanwhile by another thread or process (`EEXIST` on a directory) is success.
    /// - Returns: `true` when this call made `path`, `false` when it was there (made meanwhile by another thread or process).
    /// - Throws: ``DeliveryIOError`` for the first call that failed.
    private static func makeDirectoryAndParents(_ path: String) throws -> Bool {
        if mkdir(path, 0o700) == 0 { return true }
        var code = errno
        if code == ENOENT, let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")), slash != path.startIndex {
            let parent = String(path[..<slash])
            var made = stat()
            if try makeDirectoryAndParents(parent), stat(parent, &made) == 0, made.st_mode & 0o300 != 0o300,
               chmod(parent, (made.st_mode & 0o7777) | 0o300) != 0 {
                throw DeliveryIOError(operation: "chmod", path: parent, code: errno)
            }
            if mkdir(path, 0o700) == 0 { return true }
            code = errno
        }
        if code == EEXIST {
            var info = stat()
            if stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { return false }
        }
        throw DeliveryIOError(operation: "mkdir", path: path, code: code)
    }

    /// Appends `data` to the existing file at `path` with one `write(2)` loop (`O_APPEND`).
    /// - Returns: `false` when the file cannot be opened or a write fails (the caller rewrites the file whole).
    static func append(_ data: Data, to path: String) -> Bool {
        let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return withFileSizeSignalBlocked { writeAll(fd, data) } == 0
    }

    /// Writes all of `data` to `fd` (retrying `EINTR` and short writes).
    /// - Returns: 0, or the `errno` of the first failed `write(2)` (`EIO` for a write of 0 bytes).
    /// Call it inside ``withFileSizeSignalBlocked(_:)``.
    static func writeAll(_ fd: Int32, _ data: Data) -> Int32 {
        VakaSymbolication.writeAll(fd, data)
    }

    /// Writes all of `bytes` to `fd`, as the `Data` one does.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32 {
        VakaSymbolication.writeAll(fd, bytes)
    }

    /// Opens the lock file at `path` read-write, creating it, mode 0600 whatever the umask (every process that
    /// uses the lock opens it read-write: under umask 0777 it would be made mode 0). No lock is taken.
    /// - Returns: the descriptor, or -1 (`errno` set) when it cannot be opened.
    static func openLockFile(_ path: String) -> Int32 {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { _ = fchmod(fd, 0o600) }
        return fd
    }

    /// Writes `data` to `url` atomically: ``writeAtomically(_:toPath:sync:)`` on its file-system path.
    /// - Throws: ``DeliveryIOError`` naming the failed call; the temporary file is removed.
    static func writeAtomically(_ data: Data, to url: URL, sync: Bool) throws {
        try data.withUnsafeBytes { try writeAtomically($0, toPath: url.fileSystemPath, sync: sync) }
    }

    /// Writes `text`'s UTF-8 bytes to the file at `path` atomically (``writeAtomically(_:toPath:sync:)``): the
    /// start and exit paths' small files (the anon id, a session record), written without `Data` or `URL`.
    /// - Throws: ``DeliveryIOError`` naming the failed call; the temporary file is removed.
    static func writeAtomically(text: String, toPath path: String, sync: Bool) throws {
        var text = text
        try text.withUTF8 { try writeAtomically(UnsafeRawBufferPointer($0), toPath: path, sync: sync) }
    }

    /// Writes `bytes` to the file at `target` atomically: a temporary file `.tmp-<uuid>` in the same directory,
    /// mode 0600, optionally `fsync`ed, then `rename`d over `target`.
    /// - Throws: ``DeliveryIOError`` naming the failed call; the temporary file is removed.
    static func writeAtomically(_ bytes: UnsafeRawBufferPointer, toPath target: String, sync: Bool) throws {
        // Searched as bytes: a `Character` search walks grapheme clusters (30 k instructions at its first use).
        let dir = target.utf8.lastIndex(of: UInt8(ascii: "/")).map { String(decoding: target.utf8[..<$0], as: UTF8.self) } ?? "."
        let tmp = dir + "/.tmp-\(RandomID.uuid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DeliveryIOError(operation: "open", path: tmp, code: errno) }
        var failure: DeliveryIOError? = nil
        if fchmod(fd, 0o600) != 0 { failure = DeliveryIOError(operation: "fchmod", path: tmp, code: errno) }
        if failure == nil {
            let code = withFileSizeSignalBlocked { writeAll(fd, bytes) }
            if code != 0 { failure = DeliveryIOError(operation: "write", path: tmp, code: code) }
        }
        if failure == nil, sync, fsync(fd) != 0 { failure = DeliveryIOError(operation: "fsync", path: tmp, code: errno) }
        close(fd)
        if failure == nil, rename(tmp, target) != 0 { failure = DeliveryIOError(operation: "rename", path: target, code: errno) }
        if let f = failure {
            unlink(tmp)
            throw f
        }
    }
}

/// A failed file-system call in the delivery code: the call, the path and `errno`.
struct DeliveryIOError: Error, CustomStringConvertible {
    /// The POSIX call that failed, e.g. `rename`.
    var operation: String
    /// The path it was called on.
    var path: String
    /// `errno` after the call.
    var code: Int32
    /// `operation path: strerror`.
    var description: String { "\(operation) \(path): \(String(cString: strerror(code)))" }
}
