import Foundation

/// Finds debug files by GNU build ID in debug directories.
///
/// Each directory is searched in two ways, in this order:
/// 1. the GNU build-ID layout: `DIR/.build-id/ab/cdef….debug` (the first byte of the build ID in hex
///    names the subdirectory, the rest the file), also what `vaka debug-files collect` writes and where
///    Debian's `-dbgsym` packages install (under `/usr/lib/debug`); `DIR/.build-id/ab/cdef…` without
///    `.debug` (the layout's link to the binary itself) is tried after it;
/// 2. a plain tree of ELF files: every regular file under `DIR` (recursively, symbolic links to files
///    followed) that starts with the ELF magic is opened once and indexed by its build ID, on the first
///    build ID the layout does not answer.
///
/// `/usr/lib/debug` is always searched last, in the build-ID layout only (it is too large to index).
///
/// A stripped file's `.gnu_debuglink` is followed separately (``debugLinkCandidates(forImagePath:link:)``),
/// in the places `gdb` looks. Thread-safe (the plain-tree index is behind a lock).
public final class DebugFileLocator: Sendable {
    /// The directories searched, in order, as given (without the implicit `/usr/lib/debug`).
    public let directories: [String]
    /// The system debug directory searched after ``directories`` (build-ID layout only): `/usr/lib/debug`.
    public let systemDirectory: String?
    private let treeIndex = Locked<[String: [String: [String]]]>([:])  // directory → build ID → paths

    /// Creates a locator for `directories`; `systemDirectory` (default `/usr/lib/debug`, `nil` for none) is
    /// searched last. Nothing is read until the first lookup.
    public init(directories: [String], systemDirectory: String? = "/usr/lib/debug") {
        self.directories = directories
        self.systemDirectory = systemDirectory
    }

    /// The build-ID layout paths for `buildID` under `directory`: `directory/.build-id/ab/cdef….debug`,
    /// then the same without `.debug`. Empty for a build ID shorter than 2 bytes or not hex.
    public static func buildIDPaths(for buildID: String, in directory: String) -> [String] {
        let id = buildID.lowercased()
        guard id.utf8.count >= 4, DebugID.hexBytes(id) != nil else { return [] }
        let base = (directory as NSString).appendingPathComponent(".build-id/\(id.prefix(2))/\(id.dropFirst(2))")
        return [base + ".debug", base]
    }

    /// Existing files that may be the debug file for `buildID` (lower- or upper-case hex), best first:
    /// build-ID layout hits of each directory in order, then files of the plain trees whose build ID is
    /// `buildID`, then `/usr/lib/debug`'s layout. Callers still check each file's build ID (a layout entry
    /// may be stale).
    public func candidates(forBuildID buildID: String) -> [String] {
        let id = buildID.lowercased()
        var result: [String] = []
        for directory in directories {
            for path in DebugFileLocator.buildIDPaths(for: id, in: directory) where DebugFileLocator.isRegularFile(path) {
                result.append(path)
            }
        }
        if let systemDirectory {
            for path in DebugFileLocator.buildIDPaths(for: id, in: systemDirectory) where DebugFileLocator.isRegularFile(path) {
                result.append(path)
            }
        }
        if result.isEmpty {
            for directory in directories {
                result.append(contentsOf: index(of: directory)[id] ?? [])
            }
        }
        var seen = Set<String>()
        return result.filter { seen.insert($0).inserted }
    }

    /// Every ELF file under `directory` (recursively; symbolic links to files followed, to directories below it
    /// not; `directory` itself may be a symbolic link to a directory, as SwiftPM's `.build/release` is), in a
    /// stable (sorted) order, each path starting with `directory` as given. Unreadable entries are skipped.
    public static func elfFiles(under directory: String) -> [String] {
        var result: [String] = []
        if isRegularFile(directory) {
            return hasELFMagic(directory) ? [directory] : []
        }
        // The enumerator does not descend into a root that is a symbolic link: walk the directory it names.
        let root = realpath(directory, nil).map { resolved in
            defer { free(resolved) }
            return String(cString: resolved)
        } ?? directory
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        while let relative = enumerator.nextObject() as? String {
            let path = (directory as NSString).appendingPathComponent(relative)
            if isRegularFile(path) && hasELFMagic(path) { result.append(path) }
        }
        return result.sorted()
    }

    /// `true` when the first four bytes of the file are `\u{7f}ELF`.
    public static func hasELFMagic(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var magic = [UInt8](repeating: 0, count: 4)
        let count = magic.withUnsafeMutableBytes { read(fd, $0.baseAddress, 4) }
        return count == 4 && magic == [0x7f, 0x45, 0x4c, 0x46]
    }

    /// `true` when `path` is (or links to) a regular file.
    static func isRegularFile(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }

    /// Existing files that may be the debug file `link` (an image's `.gnu_debuglink`) names for the image
    /// at `imagePath`, in `gdb`'s order: `DIR/NAME` (DIR is the directory of `imagePath` with symbolic links
    /// resolved), `DIR/.debug/NAME`, then `D/DIR/NAME` for each debug directory D (``directories`` in order,
    /// then ``systemDirectory``, e.g. `/usr/lib/debug/usr/bin/app.debug`). Empty when the name contains a
    /// `/` or `imagePath` is relative. Callers check each file's CRC-32 against ``DebugLink/crc``.
    public func debugLinkCandidates(forImagePath imagePath: String, link: DebugLink) -> [String] {
        guard imagePath.hasPrefix("/"), !link.name.isEmpty, !link.name.contains("/") else { return [] }
        let real = URL(fileURLWithPath: imagePath).resolvingSymlinksInPath().path
        let directory = (real as NSString).deletingLastPathComponent
        var paths = [(directory as NSString).appendingPathComponent(link.name),
                     (directory as NSString).appendingPathComponent(".debug/" + link.name)]
        for root in directories + (systemDirectory.map { [$0] } ?? []) {
            let below = (root as NSString).appendingPathComponent(String(directory.drop(while: { $0 == "/" })))
            paths.append((below as NSString).appendingPathComponent(link.name))
        }
        var seen = Set<String>()
        return paths.filter { $0 != real && DebugFileLocator.isRegularFile($0) && seen.insert($0).inserted }
    }

    private func index(of directory: String) -> [String: [String]] {
        if let cached = treeIndex.withLock({ $0[directory] }) { return cached }
        var index: [String: [String]] = [:]
        for path in DebugFileLocator.elfFiles(under: directory) {
            guard let file = try? ElfFile(path: path), let buildID = file.buildID else { continue }
            index[buildID, default: []].append(path)
        }
        return treeIndex.withLock { cache in
            if let cached = cache[directory] { return cached }
            cache[directory] = index
            return index
        }
    }
}
