import CZlib
import Foundation

/// gzip (RFC 1952) compression of request bodies with zlib, and decompression (for tests and tools).
public enum Gzip {
    /// Compresses `data` into a gzip member (zlib `deflateInit2`, windowBits 15 + 16, memLevel 8).
    /// - Parameter level: zlib level 0...9, or -1 (`Z_DEFAULT_COMPRESSION`, i.e. 6).
    /// - Returns: the gzip bytes (header, deflate stream, CRC-32 and size trailer).
    /// - Throws: ``GzipError`` when zlib fails to initialise or reports an error.
    public static func compress(_ data: Data, level: Int32 = -1) throws -> Data {
        var out = Data()
        try deflateGzip(data, level: level) { chunk in
            out.append(chunk)
            return true
        }
        return out
    }

    /// The size of `data` gzip-compressed (as ``compress(_:level:)`` makes it), or `nil` as soon as the
    /// output exceeds `limit` bytes: compression stops there, so asking whether a large body fits a small
    /// limit costs only the work up to the limit. No output is kept.
    /// - Throws: ``GzipError`` when zlib fails to initialise or reports an error.
    public static func compressedSize(of data: Data, upTo limit: Int, level: Int32 = -1) throws -> Int? {
        var total = 0
        let finished = try deflateGzip(data, level: level) { chunk in
            total += chunk.count
            return total <= limit
        }
        return finished ? total : nil
    }

    /// Deflates `data` into a gzip member, handing the output to `sink` in chunks of at most 64 KiB (each valid
    /// only during the call); stops early when `sink` returns `false`.
    /// - Returns: `true` when the whole member was produced, `false` when `sink` stopped it.
    /// - Throws: ``GzipError`` when zlib fails to initialise or reports an error.
    @discardableResult
    private static func deflateGzip(_ data: Data, level: Int32, _ sink: (UnsafeBufferPointer<UInt8>) -> Bool) throws -> Bool {
        var stream = z_stream()
        var rc = vaka_deflate_init_gzip(&stream, level)
        guard rc == Z_OK else { throw GzipError(operation: "deflateInit2", code: rc, message: nil) }
        defer { deflateEnd(&stream) }
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
                    rc = deflate(&stream, Z_FINISH)
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
    /// - Throws: ``GzipError`` for corrupt or truncated input.
    public static func decompress(_ data: Data) throws -> Data {
        guard !data.isEmpty else { throw GzipError(operation: "inflate", code: Z_BUF_ERROR, message: "empty input") }
        var input = [UInt8](data)
        var out = Data()
        let chunk = 64 * 1024
        var buffer = [UInt8](repeating: 0, count: chunk)
        try input.withUnsafeMutableBufferPointer { inp in
            var offset = 0
            repeat {
                var stream = z_stream()
                var rc = vaka_inflate_init_auto(&stream)
                guard rc == Z_OK else { throw GzipError(operation: "inflateInit2", code: rc, message: nil) }
                defer { inflateEnd(&stream) }
                stream.next_in = inp.baseAddress! + offset
                stream.avail_in = uInt(inp.count - offset)
                repeat {
                    try buffer.withUnsafeMutableBufferPointer { outp in
                        stream.next_out = outp.baseAddress
                        stream.avail_out = uInt(chunk)
                        rc = inflate(&stream, Z_NO_FLUSH)
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

/// A zlib failure: which call, its status code (`Z_*`), and zlib's message when it gave one.
public struct GzipError: Error, CustomStringConvertible {
    /// The zlib function that failed, e.g. `inflate`.
    public var operation: String
    /// zlib status code (negative `Z_*` constants, e.g. -3 `Z_DATA_ERROR`).
    public var code: Int32
    /// zlib's `msg`, or a short reason.
    public var message: String?

    /// A one-line explanation.
    public var description: String { "\(operation) failed (\(code))" + (message.map { ": \($0)" } ?? "") }
}
