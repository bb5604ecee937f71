import Foundation
import XCTest
import VakaTestSupport
import VakaSymbolication

/// ``Symbolicator/preload(addresses:)`` through one symbolicator that converts many reports.
final class PreloadedAnswerTests: XCTestCase {
    /// With a cache directory, a report of the same binary loaded at another base asks addresses this run
    /// already answered (kept for the cache file): they are answered from there, so frames looked up
    /// ahead for them would never be taken. Through 200 such reports (preload, then symbolicate, as
    /// ``FatalEventBuilder`` does) and two reports preloaded before either is symbolicated (two threads of
    /// a converter), no preloaded answer is left behind, and every report gets the frames of a lookup.
    func testPreloadedAnswersAreNotLeftBehindByCachedAnswers() throws {
        let marker = markerFunctionAddress()
        let own = try XCTUnwrap(try TestSupport.image(containing: marker))
        let ownID = try XCTUnwrap(try ElfFile(path: own.path).buildID)
        let dir = try ScratchDirs.directory(for: self)
        let symbolicator = Symbolicator(systemDebugDirectory: nil, cacheDirectory: dir.appendingPathComponent("cache").path)
        let direct = Symbolicator(systemDebugDirectory: nil)
        let expected = direct.symbolicate(address: marker + 2, imagePath: own.path, imageBase: own.base, buildID: ownID)
        XCTAssertEqual(expected.last?.symbol, "vaka_test_marker_function")
        func shifted(_ frames: [SymbolicatedFrame], by delta: UInt64) -> [SymbolicatedFrame] {
            frames.map { frame in
                var frame = frame
                frame.symbolAddress = frame.symbolAddress.map { $0 &+ delta }
                return frame
            }
        }
        // Two reports preloaded before either is symbolicated.
        let second: UInt64 = 1 << 32
        for delta in [0, second] {
            symbolicator.preload(addresses: [(imagePath: own.path, buildID: ownID, imageBase: own.base + delta,
                                              address: marker + 2 + delta)])
        }
        for delta in [0, second] {
            XCTAssertEqual(symbolicator.symbolicate(address: marker + 2 + delta, imagePath: own.path, imageBase: own.base + delta,
                                                    buildID: ownID), shifted(expected, by: delta))
        }
        XCTAssertEqual(symbolicator.preloadedAnswerCount, 0, "the second report's preloaded frames")
        // Reports one after the other.
        for report in 1...200 {
            let delta = UInt64(report) << 20
            symbolicator.preload(addresses: [(imagePath: own.path, buildID: ownID, imageBase: own.base + delta,
                                              address: marker + 2 + delta)])
            XCTAssertEqual(symbolicator.symbolicate(address: marker + 2 + delta, imagePath: own.path, imageBase: own.base + delta,
                                                    buildID: ownID), shifted(expected, by: delta))
        }
        XCTAssertEqual(symbolicator.preloadedAnswerCount, 0)
        XCTAssertGreaterThanOrEqual(symbolicator.cacheHitCount, 200)
    }
}
