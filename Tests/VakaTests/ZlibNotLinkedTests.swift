import Foundation
import XCTest
import VakaTestSupport

/// zlib is opened with dlopen on first use (gzip on the delivery thread, CRC-32 and inflating when
/// symbolicating), so no product that links Vaka may ask the loader for it at process start: `libz.so.1` is not
/// among the NEEDED entries of their dynamic section (`readelf -d`, binutils).
final class ZlibNotLinkedTests: XCTestCase {
    /// The NEEDED entries (shared library names) of the ELF file at `path`, in order.
    private func needed(_ path: String) throws -> [String] {
        let readelf = try Peers.tool("readelf", install: "binutils: scripts/bootstrap")
        let result = try runProcess(readelf, ["-d", "-W", path])
        XCTAssertEqual(result.status, 0, result.stderrText)
        // e.g. " 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]"
        return result.stdoutText.split(separator: "\n").compactMap { line -> String? in
            guard line.contains("(NEEDED)"), let open = line.lastIndex(of: "["), let close = line.lastIndex(of: "]"),
                  open < close else { return nil }
            return String(line[line.index(after: open)..<close])
        }
    }

    func testProductsLinkingVakaDoNotNeedLibz() throws {
        for product in ["vaka", "vaka-crashme", "bench-start-vaka"] {
            let path = try Paths.built(Paths.productsDirectory.appendingPathComponent(product))
            let libraries = try needed(path)
            // The reading works: every one of them needs libc.
            XCTAssertTrue(libraries.contains("libc.so.6"), "\(product): NEEDED \(libraries)")
            XCTAssertFalse(libraries.contains("libz.so.1"), "\(product) links zlib: NEEDED \(libraries)")
        }
    }
}
