import Foundation
import Synchronization
import VakaCrash
import VakaSymbolication

/// Stack traces of the calling thread for handled errors: the C runtime's unwinder
/// (`vaka_crash_capture_frames`) gives the return addresses, the C runtime's image list
/// (`vaka_crash_copy_images`: base, size, GNU build ID and path computed by the code that makes a crash
/// report's `image` lines) the loaded images, and symbolication is the crash path's own: the addresses and
/// images are turned into frames and `debug_meta.images` by ``FatalEventBuilder/map(_:)``, so handled and fatal
/// frames carry exactly the same fields.
///
/// Thread-safe: the image list and the symbolicator are used only inside one `Mutex`; the image list is read
/// once and re-read when an address lies in no known image.
final class StackCapture: Sendable {
    /// Most frames recorded: the report contract's `VAKA_REPORT_MAX_FRAMES` (128), as many as a crash report
    /// keeps for the crashed thread.
    static let maxFrames = Int(VAKA_REPORT_MAX_FRAMES)

    /// What captures share: the symbolicator (its files opened once) and the images loaded at the last look.
    private struct State: ~Copyable {
        // No /usr/lib/debug here: inflating a distro debug file (e.g. libc6-dbg) would cost the capturing
        // process hundreds of ms; names still come from the images' own symbol tables and DWARF. Made at the
        // first capture, not at `Vaka.start`.
        var symbolicator: Symbolicator?
        var images: [CrashReport.Image] = []
    }

    private let state = Mutex(State())
    private let arch: String

    /// The executable's path (`/proc/self/exe` as the crash runtime read it at install), read at the first capture.
    private static let executable: String? = EventFactory.runtimeExecutablePath()

    /// Reads nothing yet: images (and the executable's path) are collected at the first capture.
    init(arch: String) {
        self.arch = arch
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
            }
            let stack = FatalEventBuilder.NativeStack(frames: addresses.map { CrashReport.Frame(address: $0, method: VAKA_REPORT_FRAME_METHOD_CFI) },
                                                      images: state.images, executable: StackCapture.executable ?? state.images.first?.path,
                                                      arch: arch)
            let symbolicator = state.symbolicator ?? Symbolicator(systemDebugDirectory: nil)
            state.symbolicator = symbolicator
            let mapped = FatalEventBuilder(symbolicator: symbolicator).map(stack)
            return (mapped.frames.isEmpty ? nil : Stacktrace(frames: mapped.frames), mapped.images)
        }
    }

    /// The images loaded now, from the C runtime (`vaka_crash_copy_images`, dl_iterate_phdr): the main
    /// executable first, then the libraries and the vDSO (`[vdso]`) in load order; for each, the runtime address
    /// of its first byte, the page-rounded span of its `PT_LOAD` segments in bytes, its GNU build ID in
    /// lower-case hex (`nil` when it has none) and its path (`nil` when unknown). The same values a crash
    /// report's `image` lines hold.
    static func loadedImages() -> [CrashReport.Image] {
        var capacity = 64
        while true {
            let buffer = UnsafeMutablePointer<vaka_crash_image>.allocate(capacity: capacity)
            defer { buffer.deallocate() }
            let total = vaka_crash_copy_images(buffer, capacity)
            if total > capacity {
                capacity = total + 16  // more images than room (or a dlopen meanwhile): again with room to spare
                continue
            }
            return (0..<total).map { StackCapture.image(buffer[$0]) }
        }
    }

    /// `image` as the report reader's type.
    private static func image(_ image: vaka_crash_image) -> CrashReport.Image {
        var image = image
        let buildIDLength = min(image.build_id_len, Int(VAKA_REPORT_BUILD_ID_MAX))
        let buildID = withUnsafeBytes(of: &image.build_id) { DebugID.hexString($0.prefix(buildIDLength)) }
        let pathLength = min(image.path_len, Int(VAKA_REPORT_PATH_MAX))
        let path = withUnsafeBytes(of: &image.path) { String(decoding: $0.prefix(pathLength), as: UTF8.self) }
        return CrashReport.Image(base: UInt64(image.base), size: UInt64(image.size),
                                 buildID: buildID.isEmpty ? nil : buildID, path: path.isEmpty ? nil : path)
    }
}
