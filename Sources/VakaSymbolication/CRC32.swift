import CZlib

/// zlib's CRC-32 (the checksum `.gnu_debuglink` records, and the one of symbol cache files), fed buffer by
/// buffer. zlib is not linked: `vaka_zlib()` opens `libz.so.1` with `dlopen` at its first use in the process.
struct CRC32 {
    private let update: @convention(c) (uLong, UnsafePointer<Bytef>?, uInt) -> uLong
    private var crc: uLong

    /// A CRC over no bytes yet; `nil` when zlib cannot be loaded (`vaka_zlib_error()` says why).
    init?() {
        guard let update = vaka_zlib()?.pointee.crc32 else { return nil }
        self.update = update
        crc = update(0, nil, 0)
    }

    /// The CRC so far, 32 bits.
    var value: UInt32 { UInt32(truncatingIfNeeded: crc) }

    /// Continues the CRC over `bytes` (in parts of at most 1 GiB: zlib takes a 32-bit length).
    mutating func add(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let count = min(bytes.count - offset, 1 << 30)
            crc = (base + offset).withMemoryRebound(to: Bytef.self, capacity: count) { update(crc, $0, uInt(count)) }
            offset += count
        }
    }
}
