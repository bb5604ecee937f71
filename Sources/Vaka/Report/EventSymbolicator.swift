import Foundation
import VakaSymbolication

/// Symbolicates (again) the native frames of a Sentry event given as JSON, using its `debug_meta.images`:
/// what `vaka symbolicate EVENT.json` does for an event that was made without the debug files.
///
/// Works on the typed ``Event``; the fields it does not model are carried through in the values' `other`
/// (``Event/other``, ``Frame/other``, ...), so every field it does not touch is kept as it was. For each
/// stack trace in `exception.values[].stacktrace` and `threads.values[].stacktrace`:
/// - inlined frames of an earlier symbolication (a frame with the same `instruction_addr` as the one before
///   it, a `function` and no `symbol_addr`) are merged back into the frame before them (the real function);
/// - each frame's address is looked up in the image of `debug_meta.images` that contains it
///   (`image_addr` ≤ address < `image_addr + image_size`), found by `code_id` (GNU build ID) or, for an
///   image without one, by its `code_file` whose text-hash `debug_id` must match. The crash site (the last
///   frame, or a frame with `trust` `"context"`) is looked up at its address, callers at address − 1;
/// - a resolved frame gets `function`, `symbol`, `symbol_addr`, `filename`, `lineno`, `colno` (old values
///   replaced) and `package`/`image_addr` when missing, and is expanded into its inlined frames
///   (``FatalEventBuilder/expand(_:with:)``); a frame resolved to linked-in support code
///   (``FatalEventBuilder/isLinkedSupportCode(symbol:)``, e.g. `_start`) gets `in_app` `false`. Frames that
///   cannot be resolved are left as they are.
/// - at most ``Symbolicator/maxImagesPerReport`` distinct images are looked at (the first in frame order);
///   frames in further images are left as they are and counted in ``Counts/imagesNotSymbolicated``.
public struct EventSymbolicator {
    /// Finds the images' files and looks addresses up.
    public var symbolicator: Symbolicator

    /// Creates an event symbolicator using `symbolicator` (and its debug directories).
    public init(symbolicator: Symbolicator) {
        self.symbolicator = symbolicator
    }

    /// How many frames a call to ``symbolicate(_:)`` looked at and how many it resolved.
    public struct Counts: Equatable, Sendable {
        /// Frames looked at (after merging inlined frames back), over all stack traces.
        public var frames = 0
        /// Of those, frames resolved to a function.
        public var resolved = 0
        /// Images frames point into that were not looked at: beyond the first
        /// ``Symbolicator/maxImagesPerReport`` distinct images (in frame order).
        public var imagesNotSymbolicated = 0
    }

    private struct Image {
        var base: UInt64
        var size: UInt64
        var codeFile: String?
        var codeID: String?
        var debugID: String?
    }

    /// The event with its frames symbolicated, and the counts. `event` is read as an ``Event`` (fields Vaka
    /// does not model are kept in the values' `other` and written back as they were, in the
    /// ``Event/Encoding/report`` encoding); JSON that is not an event object is returned unchanged with zero
    /// counts.
    public func symbolicate(_ event: JSONValue) -> (event: JSONValue, counts: Counts) {
        guard case .object = event, let data = try? JSONEncoder().encode(event),
              let typed = try? JSONDecoder().decode(Event.self, from: data) else { return (event, Counts()) }
        let (result, counts) = symbolicate(typed)
        guard let encoded = try? result.jsonData(encoding: .report),
              let json = try? JSONDecoder().decode(JSONValue.self, from: encoded) else { return (event, Counts()) }
        return (json, counts)
    }

    /// `event` with the frames of its exceptions' and threads' stack traces symbolicated (see the type's
    /// documentation), and the counts.
    public func symbolicate(_ event: Event) -> (event: Event, counts: Counts) {
        var event = event
        var counts = Counts()
        let images = EventSymbolicator.images(in: event.debugMeta)
        // Open the images' files (symbol tables, DWARF) several at a time before the lookups.
        symbolicator.preload(images.prefix(Symbolicator.maxImagesPerReport).compactMap { image in
            image.codeID.map { (image.codeFile, $0) }
        })
        var admission = ImageAdmission()
        for index in (event.exception?.values ?? []).indices {
            guard let frames = event.exception!.values[index].stacktrace?.frames else { continue }
            event.exception!.values[index].stacktrace!.frames = symbolicateFrames(frames, images: images,
                                                                                  admission: &admission, counts: &counts)
        }
        for index in (event.threads?.values ?? []).indices {
            guard let frames = event.threads!.values[index].stacktrace?.frames else { continue }
            event.threads!.values[index].stacktrace!.frames = symbolicateFrames(frames, images: images,
                                                                                admission: &admission, counts: &counts)
        }
        counts.imagesNotSymbolicated = admission.skipped.count
        return (event, counts)
    }

    private func symbolicateFrames(_ frames: [Frame], images: [Image], admission: inout ImageAdmission,
                                   counts: inout Counts) -> [Frame] {
        // Merge runs of frames with the same instruction_addr (inlined frames) back into their first frame.
        var merged: [Frame] = []
        for frame in frames {
            // Inlined frames follow their caller with the same address, a function and no symbol_addr (real frames
            // of a recursion repeat addresses too, but have their symbol_addr).
            if let last = merged.last, frame.hasInstructionAddr, last.hasInstructionAddr,
               frame.instructionAddr == last.instructionAddr, frame.function != nil,
               frame.symbolAddr == nil {
                continue
            }
            merged.append(frame)
        }
        var result: [Frame] = []
        for (index, var frame) in merged.enumerated() {
            counts.frames += 1
            guard frame.hasInstructionAddr else {
                result.append(frame)
                continue
            }
            let address = frame.instructionAddr.value
            let isCrashSite = frame.trust == "context" || (frame.trust == nil && index == merged.count - 1)
            let lookup = isCrashSite || address == 0 ? address : address - 1
            guard let imageIndex = images.firstIndex(where: { lookup >= $0.base && lookup - $0.base < $0.size }) else {
                result.append(frame)
                continue
            }
            let image = images[imageIndex]
            guard admission.admits(imageIndex) else {
                result.append(frame)
                continue
            }
            let symbolicated = symbolicator.symbolicate(address: lookup, imagePath: image.codeFile, imageBase: image.base,
                                                        buildID: image.codeID, debugID: image.debugID)
            guard !symbolicated.isEmpty else {
                result.append(frame)
                continue
            }
            counts.resolved += 1
            if frame.package == nil { frame.package = image.codeFile }
            if frame.imageAddr == nil { frame.imageAddr = HexAddress(image.base) }
            frame.absPath = nil
            frame.forgetOddSymbolFields()
            // The crash path's expansion (oldest first: the real function, then the inlined ones), written into a
            // copy of the frame so that its other fields stay. Seeded in-app: a `false` out of it is the function
            // half of the in_app rule (linked-in support code such as `_start` is never the app's, whatever the
            // event said).
            for typed in FatalEventBuilder.expand(Frame(instructionAddr: HexAddress(address), inApp: true), with: symbolicated) {
                var expanded = frame
                expanded.function = typed.function
                expanded.symbol = typed.symbol
                if typed.inApp == false { expanded.inApp = false }
                expanded.symbolAddr = typed.symbolAddr
                expanded.filename = typed.filename
                expanded.lineno = typed.lineno
                expanded.colno = typed.colno
                result.append(expanded)
            }
        }
        return result
    }

    private static func images(in debugMeta: DebugMeta?) -> [Image] {
        (debugMeta?.images ?? []).compactMap { image in
            guard let size = image.imageSize, size > 0 else { return nil }
            let codeID = image.codeID.flatMap { $0.isEmpty ? nil : $0.lowercased() }
            return Image(base: image.imageAddr.value, size: size, codeFile: image.codeFile, codeID: codeID,
                         debugID: image.debugID?.lowercased())
        }
    }
}
