import Foundation
import XCTest
import VakaCrash
@testable import Vaka
import VakaSymbolication

/// The images of handled errors' stacks come from the C runtime's one collector (`vaka_crash_copy_images`):
/// their build IDs are the files' own (`readelf -n`), every mapped ELF file is listed, and a handled error's
/// `debug_meta` names the images its frames point into.
final class StackCaptureImageTests: XCTestCase {
    /// The loaded-image list: the test executable first, libswiftCore present, each build ID what `readelf -n`
    /// prints for its file, and every file mapped at offset 0 (per /proc/self/maps) inside a listed image of
    /// the same file.
    func testLoadedImagesMatchReadelfAndTheKernelsMappings() throws {
        let images = StackCapture.loadedImages()
        let exe = TestSupport.selfExecutable
        XCTAssertEqual(images.first?.path, exe, "the main executable first")
        XCTAssertTrue(images.contains { ($0.path ?? "").hasSuffix("/libswiftCore.so") }, "\(images.map(\.path))")
        var checked = 0
        for image in images {
            guard let path = image.path, path.hasPrefix("/") else { continue }
            XCTAssertGreaterThan(image.size, 0, path)
            XCTAssertEqual(image.base % 4096, 0, path)
            XCTAssertEqual(image.buildID, try TestSupport.readelfBuildID(path), path)
            checked += 1
        }
        XCTAssertGreaterThan(checked, 3)

        let listed = images.compactMap { image in image.path.map { (realpath: resolved($0), image: image) } }
        for mapping in try TestSupport.mappings() where mapping.offset == 0 && isELF(mapping.path) {
            let real = resolved(mapping.path)
            XCTAssertTrue(listed.contains { $0.realpath == real && $0.image.contains(mapping.start) },
                          "\(mapping.path) at \(HexAddress(mapping.start)) is in no listed image")
        }
    }

    /// A handled error's stack, captured in a closure that libswiftCore's generic `sort` calls: its
    /// `debug_meta` holds the test executable and libswiftCore, each with `code_id` = `readelf -n`'s build ID,
    /// the matching `debug_id`, and `image_addr`/`image_size` of the runtime's list.
    func testHandledErrorImagesAreTheFilesBuildIDs() throws {
        let capture = StackCapture(arch: "x86_64")
        // The comparator runs inside libswiftCore's generic sort (a type of its own: no prespecialised copy).
        var captured: (stacktrace: Stacktrace?, images: [DebugImage])?
        _ = [Box(value: 1), Box(value: 0)].sorted { a, b in
            if captured == nil { captured = capture.capture(skip: 0) }
            return a.value < b.value
        }
        let images = try XCTUnwrap(captured).images
        let exe = TestSupport.selfExecutable
        let paths = images.compactMap(\.codeFile)
        XCTAssertTrue(paths.contains(exe), "\(paths)")
        XCTAssertTrue(paths.contains { $0.hasSuffix("/libswiftCore.so") }, "\(paths)")
        let loaded = StackCapture.loadedImages()
        for image in images {
            let path = try XCTUnwrap(image.codeFile)
            let expected = try XCTUnwrap(try TestSupport.readelfBuildID(path), path)
            XCTAssertEqual(image.codeID, expected, path)
            XCTAssertEqual(image.debugID, DebugID.fromBuildID(expected), path)
            let same = try XCTUnwrap(loaded.first { $0.path == path }, path)
            XCTAssertEqual(image.imageAddr, HexAddress(same.base), path)
            XCTAssertEqual(image.imageSize, same.size, path)
        }
    }

    private struct Box { var value: Int }

    /// `path` with symbolic links resolved (`/lib` is a link to `/usr/lib` on merged-/usr systems).
    private func resolved(_ path: String) -> String {
        guard let real = realpath(path, nil) else { return path }
        defer { free(real) }
        return String(cString: real)
    }

    /// Whether the file at `path` starts with the ELF magic (locale archives and other data files are mapped too).
    private func isELF(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        return (try? handle.read(upToCount: 4)) == Data([0x7f, 0x45, 0x4c, 0x46])
    }
}
