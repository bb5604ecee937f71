import Foundation

/// The result of looking up one address: which function it lies in.
public struct SymbolInfo: Equatable, Sendable {
    /// The raw symbol name from the ELF symbol table (mangled for Swift and C++).
    public var symbol: String
    /// The readable name: ``symbol`` demangled by ``Demangler/demangle(_:)`` (C names unchanged).
    public var function: String
    /// Runtime address of the symbol's first byte in the process the address came from.
    public var symbolAddress: UInt64

    /// Creates a lookup result; every field is described on its property.
    public init(symbol: String, function: String, symbolAddress: UInt64) {
        self.symbol = symbol
        self.function = function
        self.symbolAddress = symbolAddress
    }
}

/// Symbolicates addresses of a (crashed) process from the ELF files on disk, in another process:
/// `dladdr` cannot help there, so each image file is opened with libelf (``ElfFile``).
///
/// One instance is a per-run cache: each image path is opened at most once, successful or not.
/// A file is used only when its GNU build ID equals the build ID the crash report recorded for the image,
/// so a rebuilt or updated binary never yields wrong names. Thread-safe (one lock around the cache and
/// lookups).
public final class Symbolicator: @unchecked Sendable {
    private let lock = NSLock()
    private var cache: [String: Result<ElfFile, ElfError>] = [:]
    private var opens = 0

    /// Creates an empty cache.
    public init() {}

    /// How many times an image file was opened so far (each path counts once: the cache keeps failures too).
    public var openedFileCount: Int {
        lock.lock(); defer { lock.unlock() }
        return opens
    }

    /// The function containing `address`.
    ///
    /// - Parameters:
    ///   - address: the runtime address to look up, in the crashed process. For a caller frame pass the
    ///     return address minus 1, so the call instruction is looked up rather than the one after it.
    ///   - imagePath: path of the image file the address lies in (from the report).
    ///   - imageBase: runtime address of that image's first byte (from the report).
    ///   - buildID: the image's GNU build ID in hex as the report recorded it (either case).
    /// - Returns: the symbol, or `nil` when the file cannot be read, its build ID differs from `buildID`,
    ///   or no `STT_FUNC`/sized `STT_NOTYPE` symbol of `.symtab`/`.dynsym` contains the address.
    public func lookup(address: UInt64, imagePath: String, imageBase: UInt64, buildID: String) -> SymbolInfo? {
        lock.lock(); defer { lock.unlock() }
        guard case .success(let file) = openLocked(imagePath),
              let fileBuildID = file.buildID, fileBuildID == buildID.lowercased() else { return nil }
        let vaddr = file.vaddr(ofRuntimeAddress: address, imageBase: imageBase)
        guard let symbol = file.symbol(containing: vaddr) else { return nil }
        return SymbolInfo(symbol: symbol.name, function: Demangler.demangle(symbol.name),
                          symbolAddress: file.runtimeAddress(ofVaddr: symbol.address, imageBase: imageBase))
    }

    /// The `debug_id` of the image file at `path` when it has no build ID: the hash of the first page of
    /// its `.text` section (``DebugID/fromTextSection(_:)``). `nil` when the file cannot be read, has a
    /// build ID (use ``DebugID/fromBuildID(_:)``), or has no `.text`.
    public func textHashDebugID(imagePath: String) -> String? {
        lock.lock(); defer { lock.unlock() }
        guard case .success(let file) = openLocked(imagePath), file.buildID == nil else { return nil }
        return DebugID.fromTextSection(file.firstTextPage())
    }

    /// The opened file for `path` (from the cache), or the error that opening it gave.
    public func file(atPath path: String) -> Result<ElfFile, ElfError> {
        lock.lock(); defer { lock.unlock() }
        return openLocked(path)
    }

    private func openLocked(_ path: String) -> Result<ElfFile, ElfError> {
        if let cached = cache[path] { return cached }
        opens += 1
        let result: Result<ElfFile, ElfError>
        do {
            result = .success(try ElfFile(path: path))
        } catch let error as ElfError {
            result = .failure(error)
        } catch {
            result = .failure(.notELF(path: path, reason: "\(error)"))
        }
        cache[path] = result
        return result
    }
}
