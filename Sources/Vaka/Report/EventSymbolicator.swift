import Foundation
import VakaSymbolication

/// Symbolicates (again) the native frames of a Sentry event given as JSON, using its `debug_meta.images`:
/// what `vaka symbolicate EVENT.json` does for an event that was made without the debug files.
///
/// Works on the JSON tree (``JSONValue``), so every field it does not touch is kept as it was. For each
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

    /// The event with its frames symbolicated, and the counts. `event` must be a JSON object; anything else
    /// is returned unchanged with zero counts.
    public func symbolicate(_ event: JSONValue) -> (event: JSONValue, counts: Counts) {
        guard case .object(var root) = event else { return (event, Counts()) }
        var counts = Counts()
        let images = EventSymbolicator.images(in: root)
        // Open the images' files (symbol tables, DWARF) several at a time before the lookups.
        symbolicator.preload(images.prefix(Symbolicator.maxImagesPerReport).compactMap { image in
            image.codeID.map { (image.codeFile, $0) }
        })
        var admission = ImageAdmission()
        for key in ["exception", "threads"] {
            guard case .object(var container)? = root[key], case .array(var values)? = container["values"] else { continue }
            for index in values.indices {
                guard case .object(var value) = values[index], case .object(var stacktrace)? = value["stacktrace"],
                      case .array(let frames)? = stacktrace["frames"] else { continue }
                stacktrace["frames"] = .array(symbolicateFrames(frames, images: images, admission: &admission,
                                                                counts: &counts))
                value["stacktrace"] = .object(stacktrace)
                values[index] = .object(value)
            }
            container["values"] = .array(values)
            root[key] = .object(container)
        }
        counts.imagesNotSymbolicated = admission.skipped.count
        return (.object(root), counts)
    }

    private func symbolicateFrames(_ frames: [JSONValue], images: [Image], admission: inout ImageAdmission,
                                   counts: inout Counts) -> [JSONValue] {
        // Merge runs of frames with the same instruction_addr (inlined frames) back into their first frame.
        var merged: [[String: JSONValue]] = []
        var lastAddress: UInt64?
        for value in frames {
            guard case .object(let frame) = value else { continue }
            let address = EventSymbolicator.address(frame["instruction_addr"])
            // Inlined frames follow their caller with the same address, a function and no symbol_addr (real frames
            // of a recursion repeat addresses too, but have their symbol_addr).
            if let address, address == lastAddress, !merged.isEmpty, frame["function"] != nil, frame["symbol_addr"] == nil {
                continue
            }
            merged.append(frame)
            lastAddress = address
        }
        var result: [JSONValue] = []
        for (index, var frame) in merged.enumerated() {
            counts.frames += 1
            guard let address = EventSymbolicator.address(frame["instruction_addr"]) else {
                result.append(.object(frame))
                continue
            }
            let trust = frame["trust"]?.stringValue
            let isCrashSite = trust == "context" || (trust == nil && index == merged.count - 1)
            let lookup = isCrashSite || address == 0 ? address : address - 1
            guard let imageIndex = images.firstIndex(where: { lookup >= $0.base && lookup - $0.base < $0.size }) else {
                result.append(.object(frame))
                continue
            }
            let image = images[imageIndex]
            guard admission.admits(imageIndex) else {
                result.append(.object(frame))
                continue
            }
            let symbolicated = symbolicator.symbolicate(address: lookup, imagePath: image.codeFile, imageBase: image.base,
                                                        buildID: image.codeID, debugID: image.debugID)
            guard !symbolicated.isEmpty else {
                result.append(.object(frame))
                continue
            }
            counts.resolved += 1
            if frame["package"] == nil, let file = image.codeFile { frame["package"] = .string(file) }
            if frame["image_addr"] == nil { frame["image_addr"] = .string(HexAddress(image.base).description) }
            for key in ["function", "symbol", "symbol_addr", "filename", "lineno", "colno", "abs_path"] {
                frame[key] = nil
            }
            // The crash path's expansion (oldest first: the real function, then the inlined ones), written into the
            // JSON frame so that its other fields stay. Seeded in-app: a `false` out of it is the function half of
            // the in_app rule (linked-in support code such as `_start` is never the app's, whatever the event said).
            for typed in FatalEventBuilder.expand(Frame(instructionAddr: HexAddress(address), inApp: true), with: symbolicated) {
                var expanded = frame
                expanded["function"] = typed.function.map(JSONValue.string)
                expanded["symbol"] = typed.symbol.map(JSONValue.string)
                if typed.inApp == false { expanded["in_app"] = .bool(false) }
                expanded["symbol_addr"] = typed.symbolAddr.map { .string($0.description) }
                expanded["filename"] = typed.filename.map(JSONValue.string)
                expanded["lineno"] = typed.lineno.map { .int(Int64($0)) }
                expanded["colno"] = typed.colno.map { .int(Int64($0)) }
                result.append(.object(expanded))
            }
        }
        return result
    }

    private static func images(in root: [String: JSONValue]) -> [Image] {
        guard case .object(let meta)? = root["debug_meta"], case .array(let values)? = meta["images"] else { return [] }
        var result: [Image] = []
        for value in values {
            guard case .object(let image) = value, let base = address(image["image_addr"]) else { continue }
            let size = image["image_size"]?.intValue.map { UInt64(clamping: $0) } ?? address(image["image_size"]) ?? 0
            guard size > 0 else { continue }
            let codeID = image["code_id"]?.stringValue.flatMap { $0.isEmpty ? nil : $0.lowercased() }
            result.append(Image(base: base, size: size, codeFile: image["code_file"]?.stringValue, codeID: codeID,
                                debugID: image["debug_id"]?.stringValue?.lowercased()))
        }
        return result
    }

    /// An address from JSON: a `"0x…"` hex string, a decimal string, or a number.
    private static func address(_ value: JSONValue?) -> UInt64? {
        switch value {
        case .string(let text)?:
            if text.hasPrefix("0x") || text.hasPrefix("0X") { return UInt64(text.dropFirst(2), radix: 16) }
            return UInt64(text)
        case .int(let number)?:
            return number >= 0 ? UInt64(number) : nil
        default:
            return nil
        }
    }
}
