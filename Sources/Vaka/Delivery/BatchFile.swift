import Foundation
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

/// Small POSIX file helpers with explicit modes (directories 0700, files 0600).
enum PrivateFiles {
    /// Creates `url` and missing parents with mode 0700 and makes sure `url` itself is 0700.
    /// - Throws: `POSIXError`-carrying `NSError` from `FileManager`, or ``DeliveryIOError``.
    static func makeDirectory(_ url: URL) throws {
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        if chmod(url.path, 0o700) != 0 { throw DeliveryIOError(operation: "chmod", path: url.path, code: errno) }
    }

    /// Appends `data` to the existing file at `path` with one `write(2)` loop (`O_APPEND`).
    /// - Returns: `false` when the file cannot be opened or a write fails (the caller rewrites the file whole).
    static func append(_ data: Data, to path: String) -> Bool {
        let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return data.withUnsafeBytes { raw -> Bool in
            var off = 0
            while off < raw.count {
                let n = write(fd, raw.baseAddress! + off, raw.count - off)
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                off += n
            }
            return true
        }
    }

    /// Writes `data` to `url` atomically: a temporary file `.tmp-<uuid>` in the same directory, mode 0600,
    /// optionally `fsync`ed, then `rename`d over `url`.
    /// - Throws: ``DeliveryIOError`` naming the failed call; the temporary file is removed.
    static func writeAtomically(_ data: Data, to url: URL, sync: Bool) throws {
        let dir = url.deletingLastPathComponent()
        let tmp = dir.appendingPathComponent(".tmp-\(UUID().uuidString)").path
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DeliveryIOError(operation: "open", path: tmp, code: errno) }
        var failure: DeliveryIOError? = nil
        if fchmod(fd, 0o600) != 0 { failure = DeliveryIOError(operation: "fchmod", path: tmp, code: errno) }
        if failure == nil {
            data.withUnsafeBytes { raw in
                var off = 0
                while off < raw.count {
                    let n = write(fd, raw.baseAddress! + off, raw.count - off)
                    if n < 0 {
                        if errno == EINTR { continue }
                        failure = DeliveryIOError(operation: "write", path: tmp, code: errno)
                        return
                    }
                    off += n
                }
            }
        }
        if failure == nil, sync, fsync(fd) != 0 { failure = DeliveryIOError(operation: "fsync", path: tmp, code: errno) }
        close(fd)
        if failure == nil, rename(tmp, url.path) != 0 { failure = DeliveryIOError(operation: "rename", path: url.path, code: errno) }
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
