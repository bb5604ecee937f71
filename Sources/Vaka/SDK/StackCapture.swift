import Foundation
import Synchronization
import VakaCrash
import VakaSymbolication

/// Stack traces of the calling thread for handled errors: the C runtime's unwinder
/// (`vaka_crash_capture_frames`) gives the return addresses, the loaded images come from `/proc/self/maps`
/// (GNU build IDs read with libelf), and symbolication is the crash path's own: the addresses and images are
/// turned into frames and `debug_meta.images` by ``FatalEventBuilder/map(_:)``, so handled and fatal frames
/// carry exactly the same fields.
///
/// Thread-safe: the image list and the symbolicator are used only inside one `Mutex`; the image list is read
/// once and re-read when an address lies in no known image.
final class StackCapture: Sendable {
    /// Most frames recorded (the C runtime's VAKA_MAX_FRAMES, 128).
    static let maxFrames = 128

    /// What captures share: the symbolicator (its files opened once) and the images found so far.
    private struct State: ~Copyable {
        // No /usr/lib/debug here: inflating a distro debug file (e.g. libc6-dbg) would cost the capturing
        // process hundreds of ms; names still come from the images' own symbol tables and DWARF.
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        var images: [CrashReport.Image] = []
        var withBuildID = Set<Int>()
    }

    private let state = Mutex(State())
    private let executable: String?
    private let arch: String

    /// Reads nothing yet: images are collected at the first capture.
    init(arch: String) {
        self.arch = arch
        executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    }

    /// The calling thread's stack, unwound now.
    /// - Parameter skip: frames to leave out above the caller of this method (0 = the caller is the newest frame).
    /// - Returns: the frames oldest first (the caller of the capturing API last) and the images they point into;
    ///   `nil` stack trace when the unwinder gave no frame.
    @inline(never)
    func capture(skip: Int) -> (stacktrace: Stacktrace?, images: [DebugImage]) {
        // A plain pointer, no closure: the only frame of ours between the unwinder and the caller is this method.
        let buffer = UnsafeMutablePointer<UInt>.allocate(capacity: StackCapture.maxFrames)
        defer { buffer.deallocate() }
        let count = vaka_crash_capture_frames(buffer, StackCapture.maxFrames, skip + 1)  // + 1: this method
        let addresses = (0..<count).map { UInt64(buffer[$0]) }
        return symbolicate(addresses)
    }

    /// Frames and images for return addresses `addresses` (newest first), as the fatal event builder makes them.
    func symbolicate(_ addresses: [UInt64]) -> (stacktrace: Stacktrace?, images: [DebugImage]) {
        guard !addresses.isEmpty else { return (nil, []) }
        return state.withLock { state in
            if state.images.isEmpty || addresses.contains(where: { a in !state.images.contains { $0.contains(a) } }) {
                state.images = StackCapture.loadedImages()
                state.withBuildID = []
            }
            // Build IDs only for the images the frames point into (opening every mapped library costs ~0.1 s).
            for (index, image) in state.images.enumerated()
            where !state.withBuildID.contains(index) && addresses.contains(where: image.contains) {
                state.withBuildID.insert(index)
                if let path = image.path, case .success(let file) = state.symbolicator.file(atPath: path) {
                    state.images[index].buildID = file.buildID
                }
            }
            let stack = FatalEventBuilder.NativeStack(frames: addresses.map { CrashReport.Frame(address: $0, method: "cfi") },
                                                      images: state.images, executable: executable ?? state.images.first?.path,
                                                      arch: arch)
            let mapped = FatalEventBuilder(symbolicator: state.symbolicator).map(stack)
            return (mapped.frames.isEmpty ? nil : Stacktrace(frames: mapped.frames), mapped.images)
        }
    }

    /// The file-backed images mapped into this process, from `/proc/self/maps`: for each path, the start of
    /// its first mapping is the base and the end of its last mapping bounds the size (build IDs not filled in).
    static func loadedImages() -> [CrashReport.Image] {
        guard let text = readProcFile("/proc/self/maps") else { return [] }
        var order: [String] = []
        var spans: [String: (lo: UInt64, hi: UInt64)] = [:]
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count == 6 else { continue }
            let path = fields[5].trimmingCharacters(in: .whitespaces)
            guard path.hasPrefix("/"), !path.hasSuffix(" (deleted)") else { continue }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let lo = UInt64(range[0], radix: 16), let hi = UInt64(range[1], radix: 16) else { continue }
            if let span = spans[path] {
                spans[path] = (min(span.lo, lo), max(span.hi, hi))
            } else {
                // Only a mapping at file offset 0 starts an image (skips data files mapped at an offset).
                guard UInt64(fields[2], radix: 16) == 0 else { continue }
                order.append(path)
                spans[path] = (lo, hi)
            }
        }
        return order.compactMap { path in
            guard let span = spans[path] else { return nil }
            return CrashReport.Image(base: span.lo, size: span.hi > span.lo ? span.hi - span.lo : 0, buildID: nil, path: path)
        }
    }

    /// The whole content of a `/proc` file (they report size 0, so read until EOF), or `nil`.
    static func readProcFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var data = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { break }
            data.append(contentsOf: chunk[0..<n])
        }
        return String(decoding: data, as: UTF8.self)
    }
}
