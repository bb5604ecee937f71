import XCTest
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import VakaTestSupport
@testable import Vaka

/// What reading a file back from the storage directory costs in resident memory: a file read whole
/// (``PrivateFiles/readCapped(_:maxBytes:)``: pending batches, outbox files, `scope.json`) or by its tail
/// (``PrivateFiles/readTail(_:maxBytes:)``) is held once while it is read, not once more for a copy.
final class CappedReadMemoryTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// A `/proc/self/status` field in KiB (`VmRSS`, `VmHWM`), or nil.
    private func status(_ field: String) -> Int? {
        guard case .data(let data) = PrivateFiles.readCapped("/proc/self/status", maxBytes: 1 << 16) else { return nil }
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where line.hasPrefix(field + ":") {
            return line.split(separator: " ").compactMap { Int($0) }.first
        }
        return nil
    }

    /// The growth of the peak resident set (KiB) while `body` runs: the peak is reset first
    /// (`/proc/self/clear_refs` 5); skipped where that cannot be done.
    private func peakGrowth(_ body: () -> Void) throws -> Int {
        let fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC)
        guard fd >= 0, write(fd, "5", 1) == 1 else { if fd >= 0 { close(fd) }; throw XCTSkip("cannot reset the peak resident set") }
        close(fd)
        let before = try XCTUnwrap(status("VmRSS"))
        body()
        return try XCTUnwrap(status("VmHWM")) - before
    }

    /// Reading a 48 MiB file whole, or its last 48 MiB, raises the peak resident set by about the file's size
    /// (held once), not twice that (read into an array, then copied into a `Data`). The bound is 1.5 times the
    /// size: noise from other threads is far below 24 MiB.
    func testReadingAFileBackHoldsItOnce() throws {
        let path = dirs.make("capped-memory").path + "/big.batch"
        let size = 48 << 20
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let block = [UInt8](repeating: 0x5a, count: 1 << 20)
        for _ in 0..<(size >> 20) { XCTAssertEqual(block.withUnsafeBytes { PrivateFiles.writeAll(fd, $0) }, 0) }
        close(fd)
        let sizeKiB = size >> 10
        var whole = 0
        let wholeGrowth = try peakGrowth {
            if case .data(let data) = PrivateFiles.readCapped(path, maxBytes: size) { whole = data.count }
        }
        XCTAssertEqual(whole, size)
        XCTAssertLessThan(wholeGrowth, sizeKiB * 3 / 2, "readCapped of \(sizeKiB) KiB raised the peak by \(wholeGrowth) KiB")
        var tail = 0
        let tailGrowth = try peakGrowth { tail = PrivateFiles.readTail(path, maxBytes: size)?.count ?? -1 }
        XCTAssertEqual(tail, size)
        XCTAssertLessThan(tailGrowth, sizeKiB * 3 / 2, "readTail of \(sizeKiB) KiB raised the peak by \(tailGrowth) KiB")
    }
}
