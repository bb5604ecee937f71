import CZlib
import Foundation

/// gzip (RFC 1952) compression of request bodies with zlib, and decompression (for tests and tools).
///
/// zlib is not linked: `libz.so.1` is opened with `dlopen` by the first call that needs it, on that thread
/// (`vaka_zlib()`, Sources/CZlib/shim.h), and called through function pointers. When it cannot be opened every
/// call throws a ``GzipError`` whose ``GzipError/isLibraryMissing`` is `true`.
public enum Gzip {
    /// The library opened by default: Debian's `zlib1g`, soname `libz.so.1`.
    public static let defaultLibrary = "libz.so.1"

    /// Compresses `data` into a gzip member (zlib `deflateInit2`, windowBits 15 + 16, memLevel 8).
    /// - Parameters:
    ///   - level: zlib level 0...9, or -1 (`Z_DEFAULT_COMPRESSION`, i.e. 6).
    ///   - library: the zlib to `dlopen` (default ``defaultLibrary``, opened once per process; another name or
    ///     path is opened at each call: tests pass a missing one).
    /// - Returns: the gzip bytes (header, deflate stream, CRC-32 and size trailer).
    /// - Throws: ``GzipError`` when zlib cannot be loaded (``GzipError/isLibraryMissing``), fails to initialise
    ///   or reports an error.
    public static func compress(_ data: Data, level: Int32 = -1, library: String = defaultLibrary) throws -> Data {
        var out = Data()
        try deflateGzip(data, level: level, library: library) { chunk in
            out.append(chunk)
            return true
        }
        return out
    }

    /// The size of `data` gzip-compressed (as ``compress(_:level:library:)`` makes it), or `nil` as soon as the
    /// output exceeds `limit` bytes: compression stops there, so asking whether a large body fits a small
    /// limit costs only the work up to the limit. No output is kept.
    /// - Throws: ``GzipError`` when zlib cannot be loaded (``GzipError/isLibraryMissing``), fails to initialise
    ///   or reports an error.
    public static func compressedSize(of data: Data, upTo limit: Int, level: Int32 = -1) throws -> Int? {
        var total = 0
        let finished = try deflateGzip(data, level: level, library: defaultLibrary) { chunk in
            total += chunk.count
            return total <= limit
        }
        return finished ? total : nil
    }

    /// Runs `body` with zlib's function table (every member set): `vaka_zlib()`'s for ``defaultLibrary``,
    /// else one filled by `vaka_zlib_open` for this call.
    /// - Throws: ``GzipError`` with ``GzipError/isLibraryMissing`` when the library cannot be opened or lacks a
    ///   function; what `body` throws.
    private static func withZlib<Result>(_ library: String,
                                         _ body: (UnsafePointer<vaka_zlib_functions>) throws -> Result) throws -> Result {
        if library == defaultLibrary {
            guard let zlib = vaka_zlib() else {
                throw GzipError.libraryMissing(library, vaka_zlib_error().map { String(cString: $0) })
            }
            return try body(zlib)
        }
        var table = vaka_zlib_functions()
        var why = [CChar](repeating: 0, count: 512)
        guard vaka_zlib_open(library, &table, &why, why.count) != 0 else {
            throw GzipError.libraryMissing(library, String(decoding: why.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return try withUnsafePointer(to: &table) { try body($0) }
    }

    /// Deflates `data` into a gzip member, handing the output to `sink` in chunks of at most 64 KiB (each valid
    /// only during the call); stops early when `sink` returns `false`.
    /// - Returns: `true` when the whole member was produced, `false` when `sink` stopped it.
    /// - Throws: ``GzipError`` when zlib cannot be loaded, fails to initialise or reports an error.
    @discardableResult
    private static func deflateGzip(_ data: Data, level: Int32, library: String,
                                    _ sink: (UnsafeBufferPointer<UInt8>) -> Bool) throws -> Bool {
        try withZlib(library) { zlib in try deflateGzip(data, level: level, zlib: zlib, sink) }
    }

    /// ``deflateGzip(_:level:library:_:)`` with zlib's functions loaded.
    private static func deflateGzip(_ data: Data, level: Int32, zlib: UnsafePointer<vaka_zlib_functions>,
                                    _ sink: (UnsafeBufferPointer<UInt8>) -> Bool) throws -> Bool {
        var stream = z_stream()
        var rc = vaka_deflate_init_gzip(zlib, &stream, level)
        guard rc == Z_OK else { throw GzipError(operation: "deflateInit2", code: rc, message: nil) }
        defer { _ = zlib.pointee.deflateEnd!(&stream) }
        let chunk = 64 * 1024
        var buffer = [UInt8](repeating: 0, count: chunk)
        return try data.withUnsafeBytes { raw -> Bool in
            // zlib does not write through next_in; nil with avail_in 0 (empty input) is valid for Z_FINISH.
            stream.next_in = UnsafeMutablePointer(mutating: raw.bindMemory(to: Bytef.self).baseAddress)
            stream.avail_in = uInt(raw.count)
            repeat {
                let more = try buffer.withUnsafeMutableBufferPointer { outp -> Bool in
                    stream.next_out = outp.baseAddress
                    stream.avail_out = uInt(chunk)
                    rc = zlib.pointee.deflate!(&stream, Z_FINISH)
                    guard rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR else {
                        throw GzipError(operation: "deflate", code: rc, message: stream.msg.map { String(cString: $0) })
                    }
                    return sink(UnsafeBufferPointer(rebasing: outp[..<(chunk - Int(stream.avail_out))]))
                }
                if !more { return false }
            } while rc != Z_STREAM_END
            return true
        }
    }

    /// Decompresses gzip (or zlib-wrapped) bytes; concatenated gzip members are all decoded.
    /// - Throws: ``GzipError`` for corrupt or truncated input, or when zlib cannot be loaded
    ///   (``GzipError/isLibraryMissing``).
    public static func decompress(_ data: Data) throws -> Data {
        guard !data.isEmpty else { throw GzipError(operation: "inflate", code: Z_BUF_ERROR, message: "empty input") }
        return try withZlib(defaultLibrary) { try decompress(data, zlib: $0) }
    }

    /// ``decompress(_:)`` with zlib's functions loaded.
    private static func decompress(_ data: Data, zlib: UnsafePointer<vaka_zlib_functions>) throws -> Data {
        var input = [UInt8](data)
        var out = Data()
        let chunk = 64 * 1024
        var buffer = [UInt8](repeating: 0, count: chunk)
        try input.withUnsafeMutableBufferPointer { inp in
            var offset = 0
            repeat {
                var stream = z_stream()
                var rc = vaka_inflate_init_auto(zlib, &stream)
                guard rc == Z_OK else { throw GzipError(operation: "inflateInit2", code: rc, message: nil) }
                defer { _ = zlib.pointee.inflateEnd!(&stream) }
                stream.next_in = inp.baseAddress! + offset
                stream.avail_in = uInt(inp.count - offset)
                repeat {
                    try buffer.withUnsafeMutableBufferPointer { outp in
                        stream.next_out = outp.baseAddress
                        stream.avail_out = uInt(chunk)
                        rc = zlib.pointee.inflate!(&stream, Z_NO_FLUSH)
                        guard rc == Z_OK || rc == Z_STREAM_END else {
                            let why = rc == Z_BUF_ERROR ? "truncated input" : stream.msg.map { String(cString: $0) }
                            throw GzipError(operation: "inflate", code: rc, message: why)
                        }
                        out.append(outp.baseAddress!, count: chunk - Int(stream.avail_out))
                    }
                } while rc != Z_STREAM_END
                offset = inp.count - Int(stream.avail_in)
            } while offset < inp.count
        }
        return out
    }
}

/// A zlib failure: which call, its status code (`Z_*`), and zlib's message when it gave one; or zlib that could
/// not be loaded (``isLibraryMissing``: operation `dlopen`, code `Z_ERRNO`, the message naming the library and why).
public struct GzipError: Error, CustomStringConvertible {
    /// The zlib function that failed, e.g. `inflate`, or `dlopen` when zlib could not be loaded.
    public var operation: String
    /// zlib status code (negative `Z_*` constants, e.g. -3 `Z_DATA_ERROR`).
    public var code: Int32
    /// zlib's `msg`, or a short reason.
    public var message: String?

    /// A one-line explanation.
    public var description: String { "\(operation) failed (\(code))" + (message.map { ": \($0)" } ?? "") }

    /// `true` when zlib itself could not be loaded (`dlopen` of the library failed, or it lacks a function):
    /// nothing was compressed or decompressed, and no later call with the same library will do better.
    public var isLibraryMissing: Bool { operation == "dlopen" }

    /// The error for `library` that cannot be opened, `why` being dlerror's text or the missing function.
    static func libraryMissing(_ library: String, _ why: String?) -> GzipError {
        GzipError(operation: "dlopen", code: Z_ERRNO, message: "cannot load \(library)" + (why.map { " (\($0))" } ?? ""))
    }
}
