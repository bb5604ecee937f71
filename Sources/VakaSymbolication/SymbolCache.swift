import Foundation

/// A directory of symbol caches, one file per GNU build ID: what ``Symbolicator`` resolved for the
/// addresses of an image (function, symbol, file, line, column and inlined frames), so that a later
/// process symbolicating the same addresses opens no ELF or DWARF file for them (inflating a distro debug
/// file's compressed DWARF on open is the slow part of a cold symbolication).
///
/// File: `DIR/<build ID in lower-case hex>.symcache`, a header line
/// `VAKA-SYMCACHE <format version> <CRC-32 of the rest, 8 hex digits> <byte count of the rest>\n`, then a
/// JSON object (``Contents``). A file is used only when the header, CRC and length check out, it decodes,
/// its build ID is the file's, and its sources (``Symbolicator``'s fingerprint: the image file and every
/// debug file candidate with device, inode, size and modification time, and the debug directories) equal
/// those of this run; otherwise it is ignored and written again at ``save()``.
/// Bounded: files above ``maxFileBytes`` are neither read nor written, at most ``maxAddressesPerFile``
/// addresses are kept per build ID, and at most ``maxFiles`` cache files of at most ``maxDirectoryBytes``
/// together stay in the directory (the least recently written are removed). Written atomically (a temporary
/// file in the directory, then `rename(2)`). The CRC is zlib's (`vaka_zlib()`, `libz.so.1` opened with `dlopen`
/// at the first use): without zlib no cache file is read or written.
/// Thread-safe (one lock).
final class SymbolCache: Sendable {
    /// The format version in the header; a file of another version is ignored (and replaced). Raised whenever
    /// the answers symbolication gives change (2: C++ functions DWARF names only by `DW_AT_name` answer with the
    /// symbol table's mangled name, and functions with a false `DW_AT_declaration` are found), so that a cache
    /// written by an earlier Vaka does not keep its answers.
    static let formatVersion = 2
    /// Largest cache file read (and written), in bytes (1 MiB).
    static let maxFileBytes = 1 << 20
    /// Most addresses kept per build ID.
    static let maxAddressesPerFile = 4096
    /// Most `*.symcache` files kept in the directory.
    static let maxFiles = 256
    /// Most bytes of `*.symcache` files kept in the directory (16 MiB).
    static let maxDirectoryBytes = 16 << 20

    /// One resolved frame, addresses relative to the image base (the report's `image` base address).
    struct CachedFrame: Codable, Equatable {
        var symbol: String
        var function: String
        /// ``SymbolicatedFrame/symbolAddress`` minus the image base (wrapping), `nil` when it is `nil`.
        var symbolOffset: UInt64?
        var file: String?
        var line: Int?
        var column: Int?
        var inlined: Bool
    }

    /// The JSON body of one cache file.
    struct Contents: Codable {
        /// The image's GNU build ID, lower-case hex (the file's name).
        var buildID: String
        /// The fingerprint of the files the results came from (see the type's documentation).
        var sources: [String]
        /// Address offset from the image base (hex, no prefix) → frames, innermost first (as
        /// ``Symbolicator/symbolicate(address:imagePath:imageBase:buildID:debugID:)`` returns them); an empty
        /// list when nothing resolved the address.
        var frames: [String: [CachedFrame]]
    }

    private struct Entry {
        var contents: Contents
        /// The image path the entry serves (a second path with the same build ID bypasses the cache).
        var imagePath: String?
        /// `true` when the file on disk was intact and made from this run's sources.
        var loaded: Bool
        /// `true` when the file on disk is missing, damaged, stale or lacks frames added since.
        var dirty: Bool
    }

    /// The directory holding the files.
    let directory: String
    private let entries = Locked<[String: Entry]>([:])  // build ID → entry

    init(directory: String) {
        self.directory = directory
    }

    /// `true` for a build ID that can name a cache file: 2 to 128 lower-case hex digits.
    static func isUsableBuildID(_ buildID: String) -> Bool {
        (2...128).contains(buildID.utf8.count) && buildID.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    private func path(of buildID: String) -> String {
        (directory as NSString).appendingPathComponent(buildID + ".symcache")
    }

    /// Loads the entry for `buildID` (once per instance, for the first `imagePath` asked) and checks it
    /// against `sources`: a file that is missing, damaged or made from other sources gives an empty entry,
    /// written at ``save()``.
    /// - Returns: `true` when the file was intact and made from `sources` (its frames are answers).
    @discardableResult
    func prepare(buildID: String, imagePath: String?, sources: () -> [String]) -> Bool {
        if let known = entries.withLock({ $0[buildID] }) { return known.loaded && known.imagePath == imagePath }
        let sources = sources()
        let loaded = read(buildID: buildID).flatMap { $0.sources == sources ? $0 : nil }
        return entries.withLock { entries -> Bool in
            if let known = entries[buildID] { return known.loaded && known.imagePath == imagePath }
            entries[buildID] = Entry(contents: loaded ?? Contents(buildID: buildID, sources: sources, frames: [:]),
                                     imagePath: imagePath, loaded: loaded != nil, dirty: loaded == nil)
            return loaded != nil
        }
    }

    /// The cached frames for `offset` (an address minus the image base) of `buildID` at `imagePath`; `nil`
    /// on a miss, before ``prepare(buildID:imagePath:sources:)``, or for another path.
    func frames(buildID: String, imagePath: String?, offset: UInt64) -> [CachedFrame]? {
        let key = String(offset, radix: 16)
        return entries.withLock { entries -> [CachedFrame]? in
            guard let entry = entries[buildID], entry.imagePath == imagePath else { return nil }
            return entry.contents.frames[key]
        }
    }

    /// Records `frames` for `offset` of `buildID` at `imagePath` (after ``prepare(buildID:imagePath:sources:)``;
    /// ignored before and for another path).
    func record(buildID: String, imagePath: String?, offset: UInt64, frames: [CachedFrame]) {
        let key = String(offset, radix: 16)
        entries.withLock { entries in
            guard var entry = entries[buildID], entry.imagePath == imagePath, entry.contents.frames[key] != frames else { return }
            if entry.contents.frames.count >= SymbolCache.maxAddressesPerFile { entry.contents.frames.removeAll() }
            entry.contents.frames[key] = frames
            entry.dirty = true
            entries[buildID] = entry
        }
    }

    /// Writes every changed entry (atomically, one file per build ID), then removes the least recently
    /// written files above ``maxFiles``. Failures (a read-only or missing directory) are ignored: the
    /// cache only saves time.
    func save() {
        let dirty = entries.withLock { entries -> [Contents] in
            var result: [Contents] = []
            for (key, entry) in entries where entry.dirty {
                result.append(entry.contents)
                entries[key]?.dirty = false
            }
            return result
        }
        guard !dirty.isEmpty else { return }
        // Private, as every file of the storage directory it usually sits in (0700 directory, 0600 files).
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for var contents in dirty {
            guard var body = try? encoder.encode(contents) else { continue }
            // Long names can make even a bounded number of addresses too large to be read back: halve.
            while body.count > SymbolCache.maxFileBytes - 128, !contents.frames.isEmpty {
                for key in contents.frames.keys.sorted().prefix((contents.frames.count + 1) / 2) { contents.frames[key] = nil }
                guard let smaller = try? encoder.encode(contents) else { break }
                body = smaller
            }
            guard body.count <= SymbolCache.maxFileBytes - 128 else { continue }
            guard let crc = SymbolCache.crcHex(body) else { continue }
            let header = "VAKA-SYMCACHE \(SymbolCache.formatVersion) \(crc) \(body.count)\n"
            let target = path(of: contents.buildID)
            let temporary = (directory as NSString).appendingPathComponent(".\(contents.buildID).\(getpid()).tmp")
            guard SymbolCache.write(Data(header.utf8) + body, toNewFile: temporary) else { continue }
            if rename(temporary, target) != 0 { unlink(temporary) }
        }
        trim()
    }

    /// Writes `bytes` to `path` with `open(2)` (created, or truncated when a temporary file of that name was
    /// left by a process that died; mode 0600), `write(2)` and `close(2)`: a fraction of what
    /// `FileManager.createFile`, which writes atomically through a temporary file of its own, takes.
    /// - Returns: `false` when a call fails (`EFBIG` past `RLIMIT_FSIZE` included); the partial file is then removed.
    private static func write(_ bytes: Data, toNewFile path: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        // 0600 whatever the umask (under umask 0777 it was made mode 0: no later launch could read it).
        // SIGXFSZ blocked: past an RLIMIT_FSIZE quota the write fails (EFBIG) instead of killing the app.
        var written = fchmod(fd, 0o600) == 0 && withFileSizeSignalBlocked { writeAll(fd, bytes) } == 0
        if close(fd) != 0 { written = false }
        if !written { unlink(path) }
        return written
    }

    /// The contents of the file for `buildID` when it is intact (see the type's documentation), else `nil`.
    private func read(buildID: String) -> Contents? {
        let path = path(of: buildID)
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_size <= SymbolCache.maxFileBytes,
              let data = FileManager.default.contents(atPath: path),
              let newline = data.firstIndex(of: 0x0a) else { return nil }
        let fields = String(decoding: data[data.startIndex..<newline], as: UTF8.self).split(separator: " ")
        let body = data[(newline + 1)...]
        guard fields.count == 4, fields[0] == "VAKA-SYMCACHE", fields[1] == "\(SymbolCache.formatVersion)",
              let crc = SymbolCache.crcHex(body), fields[2] == crc, fields[3] == "\(body.count)",
              let contents = try? JSONDecoder().decode(Contents.self, from: body),
              contents.buildID == buildID, contents.frames.count <= SymbolCache.maxAddressesPerFile else { return nil }
        return contents
    }

    /// zlib's CRC-32 of `bytes` as 8 lower-case hex digits; `nil` when zlib cannot be loaded.
    private static func crcHex<Bytes: DataProtocol>(_ bytes: Bytes) -> String? {
        guard var crc = CRC32() else { return nil }
        for region in bytes.regions { region.withUnsafeBytes { crc.add($0) } }
        let text = String(crc.value, radix: 16)
        return String(repeating: "0", count: 8 - text.count) + text
    }

    /// Removes the least recently written `*.symcache` files above ``maxFiles`` or ``maxDirectoryBytes``,
    /// and temporary files older
    /// than ten minutes (left by a process that died while writing).
    private func trim() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        func modified(_ path: String) -> Int {
            var info = stat()
            return stat(path, &info) == 0 ? info.st_mtim.tv_sec : 0
        }
        let now = time(nil)
        for name in names where name.hasPrefix(".") && name.hasSuffix(".tmp") {
            let path = (directory as NSString).appendingPathComponent(name)
            if now - modified(path) > 600 { unlink(path) }
        }
        var files = names.filter { $0.hasSuffix(".symcache") }.map { name -> (path: String, modified: Int, size: Int) in
            let path = (directory as NSString).appendingPathComponent(name)
            var info = stat()
            guard stat(path, &info) == 0 else { return (path, 0, 0) }
            return (path, info.st_mtim.tv_sec &* 1_000_000_000 &+ info.st_mtim.tv_nsec, Int(info.st_size))
        }.sorted { $0.modified < $1.modified }
        var total = files.reduce(0) { $0 + $1.size }
        while !files.isEmpty, files.count > SymbolCache.maxFiles || total > SymbolCache.maxDirectoryBytes {
            let oldest = files.removeFirst()
            unlink(oldest.path)
            total -= oldest.size
        }
    }
}
