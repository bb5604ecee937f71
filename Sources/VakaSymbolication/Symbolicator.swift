import Foundation

/// The result of ``Symbolicator/lookup(address:imagePath:imageBase:buildID:)``: one frame with the symbol
/// table's name and start, and no file/line.
public typealias SymbolInfo = SymbolicatedFrame

/// One frame that an address resolves to: the function, and its file and line when DWARF is available.
/// An address inside inlined code resolves to several (see ``Symbolicator/symbolicate(address:imagePath:imageBase:buildID:)``).
public struct SymbolicatedFrame: Equatable, Sendable {
    /// The raw symbol: the DWARF linkage name, else the ELF symbol table's name (mangled for Swift and C++).
    public var symbol: String
    /// The readable name: ``symbol`` demangled by ``Demangler/demangle(_:)`` (C names unchanged).
    public var function: String
    /// Runtime address of the function's first byte in the crashed process; `nil` for inlined functions.
    public var symbolAddress: UInt64?
    /// Source file (absolute when DWARF gives the compile directory), from DWARF; `nil` without DWARF.
    public var file: String?
    /// Line number (1-based) from DWARF; `nil` when unknown.
    public var line: Int?
    /// Column (1-based) from DWARF; `nil` when unknown.
    public var column: Int?
    /// `true` for a function inlined at this address (no stack frame of its own).
    public var isInlined: Bool

    /// Creates a frame; every field is described on its property.
    public init(symbol: String, function: String, symbolAddress: UInt64?, file: String? = nil, line: Int? = nil,
                column: Int? = nil, isInlined: Bool = false) {
        self.symbol = symbol
        self.function = function
        self.symbolAddress = symbolAddress
        self.file = file
        self.line = line
        self.column = column
        self.isInlined = isInlined
    }
}

/// The files found for one image of a crash report: the image file itself when its build ID matches, and
/// debug files found by build ID; which one gives symbols, which one DWARF.
public struct ResolvedImage: Sendable {
    /// The image file on disk, when it exists and has the report's build ID.
    public var codeFile: ElfFile?
    /// Debug files with the report's build ID found in the debug directories, best first, then the file the
    /// image's `.gnu_debuglink` names (when its CRC matches).
    public var debugFiles: [ElfFile]
    /// The file whose symbol table is used: the first of code file and debug files with a `.symtab`, else
    /// the first with a `.dynsym`.
    public var symbolFile: ElfFile?
    /// DWARF of the first of code file and debug files that has `.debug_info`.
    public var dwarf: DwarfFile?
    /// The ELF virtual address of the image's first mapped byte (``ElfFile/firstLoadVaddr`` of the code
    /// file, else of the first debug file).
    public var firstLoadVaddr: UInt64
}

/// Symbolicates addresses of a (crashed) process from ELF files on disk, in another process (at report
/// conversion, never in the signal handler): `dladdr` cannot help there.
///
/// For each image it finds, by the image's GNU build ID, the image file itself (when its build ID still
/// matches the report's: a rebuilt or updated binary never yields wrong names) and debug files in the
/// ``DebugFileLocator``'s directories (and `/usr/lib/debug`), then the file the image's `.gnu_debuglink`
/// names (``DebugFileLocator/debugLinkCandidates(forImagePath:link:)``, CRC checked). Function names come
/// from the ELF symbol tables (`.symtab`, then `.dynsym`), file/line and inlined frames from DWARF (libdw)
/// when one of the files has it; DWARF's function name wins over the symbol table's when both exist.
///
/// One instance is a per-run cache: each path is opened at most once, successful or not, and each file
/// (by device and inode, so `//opt/x`, `/opt/./x` and a hard link are one file) is read once; each image
/// is resolved once per file and build ID. Opened files keep their mapping, not a descriptor. With a cache
/// directory (``init(debugDirectories:systemDebugDirectory:cacheDirectory:)``) the answers are also kept
/// between runs, per build ID, and an address answered before is not looked up in the files again.
/// Thread-safe: the cache is behind one lock; lookups in the resolved files run outside it (``ElfFile``
/// and ``DwarfFile`` lock themselves).
public final class Symbolicator: Sendable {
    /// Most distinct images of one report (or event) that ``FatalEventBuilder`` and ``EventSymbolicator``
    /// symbolicate (256; the crash runtime records at most 128 frames): frames in further images keep
    /// their addresses only, so a crafted report cannot make conversion open thousands of files.
    public static let maxImagesPerReport = 256

    /// Most frames looked up ahead by ``preload(addresses:)`` that wait for their lookup (4096: a stack has
    /// at most 128 frames, and a report's stacks are preloaded one at a time): when a call would leave more,
    /// the earlier calls' unasked frames are dropped (a later lookup of theirs reads the files).
    public static let maxPreloadedAnswers = 4096

    private struct FileIdentity: Hashable {
        var device: UInt64
        var inode: UInt64
    }

    /// What one lookup asks: the image (``imageKey(imagePath:buildID:)``), the address and the image base.
    private struct Answer: Hashable {
        var image: String
        var address: UInt64
        var imageBase: UInt64
    }

    /// What one instance has opened and resolved so far.
    private struct Cache {
        var paths: [String: Result<ElfFile, ElfError>] = [:]
        var filesByIdentity: [FileIdentity: ElfFile] = [:]
        var images: [String: ResolvedImage?] = [:]
        var dwarfByFile: [ObjectIdentifier: DwarfFile?] = [:]
        /// Frames looked up ahead by ``Symbolicator/preload(addresses:)``, until the lookup they answer asks.
        var answers: [Answer: [SymbolicatedFrame]] = [:]
        var opens = 0

        /// The file at `path`: from the cache by path, else by identity, else opened now.
        mutating func open(_ path: String) -> Result<ElfFile, ElfError> {
            if let cached = paths[path] { return cached }
            if let identity = Symbolicator.identity(ofPath: path), let file = filesByIdentity[identity] {
                paths[path] = .success(file)
                return .success(file)
            }
            opens += 1
            let result = Symbolicator.open(path)
            paths[path] = result
            if case .success(let file) = result { remember(file) }
            return result
        }

        mutating func remember(_ file: ElfFile) {
            let identity = FileIdentity(device: file.device, inode: file.inode)
            if filesByIdentity[identity] == nil { filesByIdentity[identity] = file }
        }

        mutating func dwarf(_ file: ElfFile) -> DwarfFile? {
            if let cached = dwarfByFile[ObjectIdentifier(file)] { return cached }
            let dwarf = DwarfFile(file: file)
            dwarfByFile[ObjectIdentifier(file)] = .some(dwarf)
            return dwarf
        }
    }

    private let cache = Locked(Cache())
    /// Where debug files are looked up by build ID and by `.gnu_debuglink`.
    public let locator: DebugFileLocator
    /// The symbol caches kept between runs, when a cache directory was given.
    private let symbolCache: SymbolCache?
    private let cacheHits = Locked(0)

    /// Creates an empty cache that looks for debug files in `debugDirectories` (GNU build-ID layout or plain
    /// trees of ELF files, see ``DebugFileLocator``) and then in `systemDebugDirectory` (default
    /// `/usr/lib/debug`, build-ID layout and `.gnu_debuglink` names; `nil` to skip it).
    /// - Parameter cacheDirectory: where results are kept between runs, one file per build ID
    ///   (`DIR/<build ID>.symcache`, created on first ``saveCache()``); `nil` (the default) keeps nothing.
    ///   A cached answer is used only while the image file and every debug file candidate are unchanged
    ///   (device, inode, size, modification time) and the debug directories are the same; a damaged
    ///   file is ignored and written again. See `docs/symbolication.md`.
    public init(debugDirectories: [String] = [], systemDebugDirectory: String? = "/usr/lib/debug",
                cacheDirectory: String? = nil) {
        locator = DebugFileLocator(directories: debugDirectories, systemDirectory: systemDebugDirectory)
        symbolCache = cacheDirectory.map(SymbolCache.init(directory:))
    }

    /// Creates an empty cache with the given locator; `cacheDirectory` as in
    /// ``init(debugDirectories:systemDebugDirectory:cacheDirectory:)``.
    public init(locator: DebugFileLocator, cacheDirectory: String? = nil) {
        self.locator = locator
        symbolCache = cacheDirectory.map(SymbolCache.init(directory:))
    }

    deinit {
        saveCache()
    }

    /// How many addresses ``symbolicate(address:imagePath:imageBase:buildID:debugID:)`` answered from the
    /// cache directory so far (0 without one).
    public var cacheHitCount: Int {
        cacheHits.withLock { $0 }
    }

    /// Writes what this instance resolved since the last save to the cache directory (atomically, one
    /// file per build ID; at most 256 files of at most 16 MiB together are kept, the least recently written
    /// removed). Does nothing without a cache directory; failures to write are ignored (the cache only
    /// saves time). Also run when the instance is released.
    public func saveCache() {
        symbolCache?.save()
    }

    /// How many times a file was opened so far (each path and each file counts once: the cache keeps
    /// failures too, and a second path to an already opened file reuses it).
    public var openedFileCount: Int {
        cache.withLock { $0.opens }
    }

    /// How many frames looked up ahead by ``preload(addresses:)`` wait for the lookup they answer (each is
    /// kept until ``symbolicate(address:imagePath:imageBase:buildID:debugID:)`` asks for it, or a cached
    /// answer replaces it, or a later preload would leave more than ``maxPreloadedAnswers``).
    public var preloadedAnswerCount: Int {
        cache.withLock { $0.answers.count }
    }

    /// The function containing `address`, from the ELF symbol tables only (no DWARF).
    ///
    /// - Parameters:
    ///   - address: the runtime address to look up, in the crashed process. For a caller frame pass the
    ///     return address minus 1, so the call instruction is looked up rather than the one after it.
    ///   - imagePath: path of the image file the address lies in (from the report).
    ///   - imageBase: runtime address of that image's first byte (from the report).
    ///   - buildID: the image's GNU build ID in hex as the report recorded it (either case).
    /// - Returns: one frame with `symbol`, `function` and `symbolAddress` (runtime) set, or `nil` when no file
    ///   with that build ID is found (the image file nor a debug file), or no `STT_FUNC`/sized `STT_NOTYPE`
    ///   symbol of `.symtab`/`.dynsym` contains the address.
    public func lookup(address: UInt64, imagePath: String, imageBase: UInt64, buildID: String) -> SymbolInfo? {
        guard let image = resolve(imagePath: imagePath, buildID: buildID), let file = image.symbolFile else { return nil }
        let vaddr = address &- imageBase &+ image.firstLoadVaddr
        guard let symbol = file.symbol(containing: vaddr) else { return nil }
        return SymbolicatedFrame(symbol: symbol.name, function: Demangler.demangle(symbol.name),
                                 symbolAddress: symbol.address &- image.firstLoadVaddr &+ imageBase)
    }

    /// The frames `address` resolves to, innermost first: for inlined code the inlined functions (each with
    /// the file/line inside it), then the real function, last, with the file/line of `address` or of the
    /// inlined call. Without DWARF a single frame with the symbol table's name and no file/line.
    ///
    /// - Parameters: as ``lookup(address:imagePath:imageBase:buildID:)``; `buildID` may be `nil` for an image
    ///   without one, then `debugID` (the text-hash `debug_id`) must match the image file's.
    /// - Returns: an empty array when no file for the image is found or neither symbols nor DWARF cover the
    ///   address. With a cache directory and a build ID, the frames kept for this address (relative to
    ///   `imageBase`) when the cache file is intact and the files it came from are unchanged; otherwise
    ///   the frames from the files, then kept for ``saveCache()``. Both give the same frames.
    public func symbolicate(address: UInt64, imagePath: String?, imageBase: UInt64, buildID: String?,
                            debugID: String? = nil) -> [SymbolicatedFrame] {
        guard let symbolCache, let buildID = buildID?.lowercased(), SymbolCache.isUsableBuildID(buildID) else {
            return symbolicateFromFiles(address: address, imagePath: imagePath, imageBase: imageBase, buildID: buildID,
                                        debugID: debugID)
        }
        prepareCache(imagePath: imagePath, buildID: buildID)
        let offset = address &- imageBase
        if let cached = symbolCache.frames(buildID: buildID, imagePath: imagePath, offset: offset) {
            cacheHits.withLock { $0 += 1 }
            // Frames another thread preloaded for this lookup before the cache had them are not needed.
            if !cache.withLock({ $0.answers.isEmpty }) {
                let answer = Answer(image: Symbolicator.imageKey(imagePath: imagePath, buildID: buildID), address: address,
                                    imageBase: imageBase)
                _ = cache.withLock { $0.answers.removeValue(forKey: answer) }
            }
            return cached.map {
                SymbolicatedFrame(symbol: $0.symbol, function: $0.function, symbolAddress: $0.symbolOffset.map { $0 &+ imageBase },
                                  file: $0.file, line: $0.line, column: $0.column, isInlined: $0.inlined)
            }
        }
        let frames = symbolicateFromFiles(address: address, imagePath: imagePath, imageBase: imageBase, buildID: buildID,
                                          debugID: debugID)
        symbolCache.record(buildID: buildID, imagePath: imagePath, offset: offset, frames: frames.map {
            SymbolCache.CachedFrame(symbol: $0.symbol, function: $0.function, symbolOffset: $0.symbolAddress.map { $0 &- imageBase },
                                    file: $0.file, line: $0.line, column: $0.column, inlined: $0.isInlined)
        })
        return frames
    }

    /// Loads (once) the cache file of `buildID` and checks it against this run's files; `true` when its
    /// answers can be used.
    @discardableResult
    private func prepareCache(imagePath: String?, buildID: String) -> Bool {
        guard let symbolCache else { return false }
        return symbolCache.prepare(buildID: buildID, imagePath: imagePath) { cacheSources(imagePath: imagePath, buildID: buildID) }
    }

    /// What cached answers for an image depend on: the debug directories, the image file, the files its
    /// `.gnu_debuglink` may name and the build-ID candidates, each as path, device, inode, size and
    /// modification time (or `-` when missing). Stat calls only, plus opening the image file's headers.
    private func cacheSources(imagePath: String?, buildID: String) -> [String] {
        func signature(_ path: String) -> String {
            var info = stat()
            guard stat(path, &info) == 0 else { return "\(path) -" }
            return "\(path) \(info.st_dev):\(info.st_ino) \(info.st_size) \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }
        var sources = ["format 1", "directories " + locator.directories.joined(separator: "\u{1}"),
                       "system " + (locator.systemDirectory ?? "-"), "image " + (imagePath ?? "-")]
        if let imagePath, imagePath.hasPrefix("/") {
            sources.append(signature(imagePath))
            if case .success(let file) = self.file(atPath: imagePath), file.buildID == buildID, let link = file.debugLink {
                sources.append("debuglink \(link.name) \(link.crc)")
                sources += locator.debugLinkCandidates(forImagePath: imagePath, link: link).map(signature)
            }
        }
        sources += locator.candidates(forBuildID: buildID).map(signature)
        return sources
    }

    /// ``symbolicate(address:imagePath:imageBase:buildID:debugID:)`` from the files, without the cache directory.
    private func symbolicateFromFiles(address: UInt64, imagePath: String?, imageBase: UInt64, buildID: String?,
                                      debugID: String?) -> [SymbolicatedFrame] {
        let resolved: ResolvedImage?
        if let buildID {
            let answer = Answer(image: Symbolicator.imageKey(imagePath: imagePath, buildID: buildID.lowercased()),
                                address: address, imageBase: imageBase)
            if let frames = cache.withLock({ $0.answers.removeValue(forKey: answer) }) { return frames }
            resolved = resolve(imagePath: imagePath, buildID: buildID)
        } else if let imagePath, let debugID {
            resolved = resolveWithoutBuildID(imagePath: imagePath, debugID: debugID.lowercased())
        } else {
            resolved = nil
        }
        guard let image = resolved else { return [] }
        return Symbolicator.frames(at: address, in: image, imageBase: imageBase)
    }

    /// The frames of `address` (runtime) in `image`, loaded at `imageBase`: the body of
    /// ``symbolicate(address:imagePath:imageBase:buildID:debugID:)`` once the image's files are found.
    /// `known` is the symbol table's answer for the address when the caller looked it up already
    /// (`.some(nil)`: no symbol contains it); `nil` looks it up here.
    private static func frames(at address: UInt64, in image: ResolvedImage, imageBase: UInt64,
                               symbol known: ElfSymbol?? = nil) -> [SymbolicatedFrame] {
        let vaddr = address &- imageBase &+ image.firstLoadVaddr
        let runtime = { (value: UInt64) in value &- image.firstLoadVaddr &+ imageBase }
        let symbol = known ?? image.symbolFile?.symbol(containing: vaddr)
        let locations = image.dwarf?.locations(at: vaddr) ?? []
        guard let outer = locations.last else {
            guard let symbol else { return [] }
            return [SymbolicatedFrame(symbol: symbol.name, function: Demangler.demangle(symbol.name),
                                      symbolAddress: runtime(symbol.address))]
        }
        var frames: [SymbolicatedFrame] = []
        for location in locations.dropLast() {
            let name = location.symbol ?? "??"
            frames.append(SymbolicatedFrame(symbol: name, function: Demangler.demangle(name), symbolAddress: nil,
                                            file: location.file, line: location.line, column: location.column,
                                            isInlined: true))
        }
        // The real function: DWARF's linkage name when it has one, else the symbol table's, else DW_AT_name.
        // The symbol table's name is taken over DW_AT_name when it is mangled: a Swift name, or a C++ name
        // of the function DWARF found (GCC gives a local class's methods and lambdas no linkage name).
        let dwarfName = outer.symbol
        let name: String?
        let start: UInt64?
        let mangledSymbol = symbol.map {
            $0.name.hasPrefix("$s") || ($0.name.hasPrefix("_Z") && outer.functionStart == $0.address)
        } ?? false
        if let dwarfName, symbol == nil || dwarfName == symbol?.name || Demangler.demangle(dwarfName) != dwarfName
            || !mangledSymbol {
            name = dwarfName
            start = outer.functionStart ?? symbol.map(\.address)
        } else {
            name = symbol?.name ?? dwarfName
            start = symbol?.address ?? outer.functionStart
        }
        guard let name else { return frames }
        frames.append(SymbolicatedFrame(symbol: name, function: Demangler.demangle(name), symbolAddress: start.map(runtime),
                                        file: outer.file, line: outer.line, column: outer.column))
        return frames
    }

    /// The files found for the image at `imagePath` with GNU build ID `buildID` (see ``ResolvedImage``);
    /// `nil` when neither the image file nor any debug file has that build ID.
    public func resolve(imagePath: String?, buildID: String) -> ResolvedImage? {
        let buildID = buildID.lowercased()
        let key = Symbolicator.imageKey(imagePath: imagePath, buildID: buildID)
        let locator = locator
        return cache.withLock { cache -> ResolvedImage? in
            if let cached = cache.images[key] { return cached }
            let resolved = Symbolicator.resolve(imagePath: imagePath, buildID: buildID, locator: locator,
                                                candidates: { locator.candidates(forBuildID: buildID) },
                                                open: { cache.open($0) }, dwarf: { cache.dwarf($0) })
            cache.images[key] = .some(resolved)
            return resolved
        }
    }

    /// The `debug_id` of the image file at `path` when it has no build ID: the hash of the first page of
    /// its `.text` section (``DebugID/fromTextSection(_:)``). `nil` when the file cannot be read, has a
    /// build ID (use ``DebugID/fromBuildID(_:)``), or has no `.text`, and for a relative `imagePath` (a
    /// report's path is never opened relative to the converter's working directory).
    public func textHashDebugID(imagePath: String) -> String? {
        guard imagePath.hasPrefix("/"), case .success(let file) = self.file(atPath: imagePath), file.buildID == nil else {
            return nil
        }
        return DebugID.fromTextSection(file.firstTextPage())
    }

    /// The opened file for `path` (from the cache), or the error that opening it gave.
    public func file(atPath path: String) -> Result<ElfFile, ElfError> {
        cache.withLock { $0.open(path) }
    }

    /// The cache key of an image: the file's device and inode when the path names an existing file (so
    /// different spellings of one path share one entry), else the path; then the build ID.
    private static func imageKey(imagePath: String?, buildID: String) -> String {
        if let imagePath, imagePath.hasPrefix("/"), let identity = identity(ofPath: imagePath) {
            return "file:\(identity.device):\(identity.inode)\u{0}\(buildID)"
        }
        return "path:\(imagePath ?? "")\u{0}\(buildID)"
    }

    private static func identity(ofPath path: String) -> FileIdentity? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Resolves the images of a report ahead of the lookups, several at a time (one task per image on
    /// the machine's cores): opening the files, reading their symbol tables and opening their DWARF
    /// (decompressing compressed debug sections) are the slow part of symbolicating a report, and
    /// independent per image. Images already resolved are skipped; lookups afterwards use the results.
    /// Files opened before are shared between the tasks (``ElfFile`` and ``DwarfFile`` are thread-safe).
    /// - Parameter list: the images as (path from the report, GNU build ID in hex).
    public func preload(_ list: [(imagePath: String?, buildID: String)]) {
        preload(addresses: list.map { (imagePath: $0.imagePath, buildID: $0.buildID, imageBase: 0, address: nil) })
    }

    /// ``preload(_:)``, and the lookups of the given addresses too, each in its image's task: the frames of
    /// an address are then looked up (symbol table and DWARF) on the core that opened its image, while the
    /// other images are opened and looked up on the other cores, and
    /// ``symbolicate(address:imagePath:imageBase:buildID:debugID:)`` with that address, image path, image
    /// base and build ID answers with them once (the same frames it would look up itself). Addresses in an
    /// image resolved by an earlier call (another thread of the same report) are looked up here too, in a
    /// task of their own.
    /// Frames never asked for are kept until a later call would leave more than ``maxPreloadedAnswers``.
    /// - Parameter list: per frame, the image's path from the report (entries without one resolve the
    ///   image but look nothing up), its GNU build ID in hex, its runtime base and the lookup address in the
    ///   crashed process (return address minus 1 for a caller frame), or `nil` to only open the image.
    public func preload(addresses list: [(imagePath: String?, buildID: String, imageBase: UInt64, address: UInt64?)]) {
        struct Work: Sendable {
            var key: String
            var imagePath: String?
            var buildID: String
            var candidates: [String]
            /// (address, image base) pairs to look up once the image is resolved.
            var lookups: [(address: UInt64, imageBase: UInt64)] = []
            /// The image's files when an earlier call resolved them (then the task only looks up).
            var known: ResolvedImage?
        }
        struct Outcome: Sendable {
            var resolved: ResolvedImage?
            var opened: [String: Result<ElfFile, ElfError>] = [:]
            var dwarf: [ObjectIdentifier: DwarfFile?] = [:]
            var answers: [Answer: [SymbolicatedFrame]] = [:]
        }
        let locator = locator
        // Images whose cache file is valid are not opened ahead: their addresses are answered from it
        // (an address it lacks opens the files then). Addresses this run answered and kept for the cache
        // (another report of the same binary) are answered from there too: only their image is opened.
        let symbolCache = symbolCache
        let list = list.compactMap { item -> (imagePath: String?, buildID: String, imageBase: UInt64, address: UInt64?)? in
            let buildID = item.buildID.lowercased()
            guard let symbolCache, SymbolCache.isUsableBuildID(buildID) else { return item }
            if prepareCache(imagePath: item.imagePath, buildID: buildID) { return nil }
            if let address = item.address,
               symbolCache.frames(buildID: buildID, imagePath: item.imagePath, offset: address &- item.imageBase) != nil {
                return (item.imagePath, item.buildID, item.imageBase, nil)
            }
            return item
        }
        let (pending, knownPaths, knownFiles) = cache.withLock { cache in
            var work: [Work] = []
            var slots: [String: Int] = [:]
            var asked = Set<Answer>()
            for item in list {
                let buildID = item.buildID.lowercased()
                let key = Symbolicator.imageKey(imagePath: item.imagePath, buildID: buildID)
                // An image resolved before (a second thread of a report) still gets its lookups done here.
                let known = cache.images[key]
                guard known == nil || (known! != nil && item.address != nil && item.imagePath != nil) else { continue }
                let slot: Int
                if let known = slots[key] {
                    slot = known
                } else {
                    slot = work.count
                    slots[key] = slot
                    work.append(Work(key: key, imagePath: item.imagePath, buildID: buildID,
                                     candidates: known == nil ? locator.candidates(forBuildID: buildID) : [],
                                     known: known ?? nil))
                }
                if let address = item.address, item.imagePath != nil,
                   asked.insert(Answer(image: key, address: address, imageBase: item.imageBase)).inserted {
                    work[slot].lookups.append((address, item.imageBase))
                }
            }
            return (work.filter { $0.known == nil || !$0.lookups.isEmpty }, cache.paths, cache.filesByIdentity)
        }
        guard !pending.isEmpty else { return }
        // The image files are opened here, one after the other (headers only: a fraction of a millisecond
        // each, and the tasks use them), to see which carry DWARF.
        var opened: [String: Result<ElfFile, ElfError>] = [:]
        for item in pending where item.known == nil {
            guard let path = item.imagePath, path.hasPrefix("/"), opened[path] == nil, knownPaths[path] == nil else { continue }
            if let identity = Symbolicator.identity(ofPath: path), knownFiles[identity] != nil { continue }
            opened[path] = Symbolicator.open(path)
        }
        let preopened = opened
        // Longest first, so the slowest image does not start last: images with debug files (DWARF to open,
        // often zlib-compressed) before those whose own file has DWARF (its compile units are walked when it
        // has no .debug_aranges, as Swift and clang emit none), then the others; by size within each.
        func size(_ path: String?) -> Int64 {
            var info = stat()
            guard let path, stat(path, &info) == 0 else { return 0 }
            return Int64(info.st_size)
        }
        // Sizes come from stat and from section headers, so a hostile or sparse file can make them anything:
        // each is capped below 2^40 (1 TiB) so the sums and class offsets cannot overflow.
        func capped(_ size: Int64) -> Int64 { min(max(size, 0), (1 << 40) - 1) }
        func cost(_ item: Work) -> Int64 {
            if item.known != nil { return 0 }  // lookups only, in files opened before
            if !item.candidates.isEmpty {
                let files = [capped(size(item.imagePath))] + item.candidates.prefix(64).map { capped(size($0)) }
                return (1 << 48) + files.reduce(0, +)
            }
            if let path = item.imagePath, case .success(let file)? = preopened[path] ?? knownPaths[path],
               file.sections.hasDebugInfo {
                return (1 << 47) + capped(Int64(clamping: file.sectionHeaders.first { $0.name == ".debug_info" }?.size ?? 0))
            }
            return capped(size(item.imagePath))
        }
        let work = pending.map { ($0, cost($0)) }.sorted { $0.1 > $1.1 }.map(\.0)

        let outcomes = Locked([Outcome](repeating: Outcome(), count: work.count))
        DispatchQueue.concurrentPerform(iterations: work.count) { index in
            let item = work[index]
            var outcome = Outcome()
            if let path = item.imagePath, let opened = preopened[path] { outcome.opened[path] = opened }
            let open = { (path: String) -> Result<ElfFile, ElfError> in
                if let cached = outcome.opened[path] ?? knownPaths[path] { return cached }
                if let identity = Symbolicator.identity(ofPath: path), let file = knownFiles[identity] { return .success(file) }
                let result = Symbolicator.open(path)
                outcome.opened[path] = result
                return result
            }
            let dwarf = { (file: ElfFile) -> DwarfFile? in
                let dwarf = DwarfFile(file: file)
                dwarf?.prepare()
                outcome.dwarf[ObjectIdentifier(file)] = .some(dwarf)
                return dwarf
            }
            outcome.resolved = item.known
                ?? Symbolicator.resolve(imagePath: item.imagePath, buildID: item.buildID, locator: locator,
                                        candidates: { item.candidates }, open: open, dwarf: dwarf)
            if let image = outcome.resolved, !item.lookups.isEmpty {
                // The symbol table is searched once for all the image's addresses.
                let symbols = image.symbolFile?.symbols(containing: item.lookups.map {
                    $0.address &- $0.imageBase &+ image.firstLoadVaddr
                })
                for (index, lookup) in item.lookups.enumerated() {
                    outcome.answers[Answer(image: item.key, address: lookup.address, imageBase: lookup.imageBase)] =
                        Symbolicator.frames(at: lookup.address, in: image, imageBase: lookup.imageBase,
                                            symbol: .some(symbols?[index] ?? nil))
                }
            }
            let result = outcome
            outcomes.withLock { $0[index] = result }
        }
        let results = outcomes.withLock { $0 }
        cache.withLock { cache in
            // Frames preloaded by earlier calls and never asked for are dropped once this call's would make
            // more than maxPreloadedAnswers: they are then looked up again if asked.
            if cache.answers.count + results.reduce(0, { $0 + $1.answers.count }) > Symbolicator.maxPreloadedAnswers {
                cache.answers.removeAll()
            }
            for (item, outcome) in zip(work, results) {
                if cache.images[item.key] == nil { cache.images[item.key] = .some(outcome.resolved) }
                for (path, result) in outcome.opened where cache.paths[path] == nil {
                    cache.paths[path] = result
                    cache.opens += 1
                    if case .success(let file) = result { cache.remember(file) }
                }
                for (file, dwarf) in outcome.dwarf where cache.dwarfByFile[file] == nil { cache.dwarfByFile[file] = .some(dwarf) }
                cache.answers.merge(outcome.answers) { old, _ in old }
            }
        }
    }

    /// The files for one image: the image file when its build ID is `buildID`, then (when it lacks a symbol
    /// table or DWARF) the `candidates` with that build ID, then the file its `.gnu_debuglink` names when
    /// the CRC matches (and the build ID, when the debug file has one).
    private static func resolve(imagePath: String?, buildID: String, locator: DebugFileLocator,
                                candidates: () -> [String], open: (String) -> Result<ElfFile, ElfError>,
                                dwarf: (ElfFile) -> DwarfFile?) -> ResolvedImage? {
        var codeFile: ElfFile?
        if let imagePath, imagePath.hasPrefix("/"), case .success(let file) = open(imagePath), file.buildID == buildID {
            codeFile = file
        }
        var debugFiles: [ElfFile] = []
        // Debug files are needed only when the image file lacks a symbol table or DWARF.
        if codeFile == nil || !(codeFile!.hasSymtab && codeFile!.sections.hasDebugInfo) {
            for path in candidates() where path != imagePath {
                if case .success(let file) = open(path), file.buildID == buildID { debugFiles.append(file) }
            }
            if let codeFile, let imagePath, !debugFiles.contains(where: { $0.hasSymtab && $0.sections.hasDebugInfo }),
               let linked = debugLinkFile(of: codeFile, at: imagePath, locator: locator, open: open),
               !debugFiles.contains(where: { $0 === linked }) {
                debugFiles.append(linked)
            }
        }
        let all = (codeFile.map { [$0] } ?? []) + debugFiles
        guard !all.isEmpty else { return nil }
        let symbolFile = all.first(where: \.hasSymtab) ?? all.first(where: \.hasDynsym)
        let dwarfFile = all.first(where: \.sections.hasDebugInfo).flatMap(dwarf)
        return ResolvedImage(codeFile: codeFile, debugFiles: debugFiles, symbolFile: symbolFile, dwarf: dwarfFile,
                             firstLoadVaddr: (codeFile ?? all[0]).firstLoadVaddr)
    }

    /// The debug file `file`'s `.gnu_debuglink` names (found by ``DebugFileLocator/debugLinkCandidates(forImagePath:link:)``):
    /// the first candidate whose CRC-32 is the link's and whose build ID, when it has one, is `file`'s.
    /// `nil` when `file` has no link or no candidate passes.
    private static func debugLinkFile(of file: ElfFile, at imagePath: String, locator: DebugFileLocator,
                                      open: (String) -> Result<ElfFile, ElfError>) -> ElfFile? {
        guard let link = file.debugLink else { return nil }
        for path in locator.debugLinkCandidates(forImagePath: imagePath, link: link) {
            guard case .success(let candidate) = open(path), candidate !== file,
                  candidate.buildID == nil || candidate.buildID == file.buildID,
                  candidate.crc32() == link.crc else { continue }
            return candidate
        }
        return nil
    }

    private func resolveWithoutBuildID(imagePath: String, debugID: String) -> ResolvedImage? {
        let key = Symbolicator.imageKey(imagePath: imagePath, buildID: "debug-id:\(debugID)")
        let locator = locator
        return cache.withLock { cache -> ResolvedImage? in
            if let cached = cache.images[key] { return cached }
            var resolved: ResolvedImage?
            if imagePath.hasPrefix("/"), case .success(let file) = cache.open(imagePath), file.buildID == nil,
               file.debugID == debugID {
                var debugFiles: [ElfFile] = []
                if !(file.hasSymtab && file.sections.hasDebugInfo),
                   let linked = Symbolicator.debugLinkFile(of: file, at: imagePath, locator: locator, open: { cache.open($0) }) {
                    debugFiles.append(linked)
                }
                let all = [file] + debugFiles
                resolved = ResolvedImage(codeFile: file, debugFiles: debugFiles,
                                         symbolFile: all.first(where: \.hasSymtab) ?? all.first(where: \.hasDynsym),
                                         dwarf: all.first(where: \.sections.hasDebugInfo).flatMap { cache.dwarf($0) },
                                         firstLoadVaddr: file.firstLoadVaddr)
            }
            cache.images[key] = .some(resolved)
            return resolved
        }
    }

    private static func open(_ path: String) -> Result<ElfFile, ElfError> {
        do {
            return .success(try ElfFile(path: path))
        } catch let error as ElfError {
            return .failure(error)
        } catch {
            return .failure(.notELF(path: path, reason: "\(error)"))
        }
    }
}
