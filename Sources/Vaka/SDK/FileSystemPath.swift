import Foundation
import VakaCrash
#if canImport(Glibc)
import Glibc
#endif

extension URL {
    /// The file-system path of this URL: what `path` gives (percent escapes decoded, no trailing `/` except for
    /// the root), read from `absoluteString` for a `file:///...` URL. `path` itself sets up Foundation's URL
    /// parsing the first time a process calls it (about 0.15 ms), which `Vaka.start` and the exit path have no
    /// other use for. Any other URL (a host, a query, a fragment, an escape that is not UTF-8, `%2F` or `%00`) goes to `path`;
    /// a relative one (`URL(string: "state")`) is made absolute against the working directory
    /// (``PrivateFiles/absolutePath(_:)``), as `URL(fileURLWithPath:)` makes a path from it: the storage
    /// directory's paths are absolute (the crash handler refuses a relative report directory).
    var fileSystemPath: String {
        let text = absoluteString
        guard text.hasPrefix("file:///") else { return PrivateFiles.absolutePath(path) }
        var bytes: [UInt8] = []
        let utf8 = Array(text.utf8.dropFirst(7))
        bytes.reserveCapacity(utf8.count)
        var i = 0
        func hexValue(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 65...70: return c - 55
            case 97...102: return c - 87
            default: return nil
            }
        }
        while i < utf8.count {
            let c = utf8[i]
            if c == UInt8(ascii: "?") || c == UInt8(ascii: "#") { return path }
            if c == UInt8(ascii: "%") {
                guard i + 2 < utf8.count, let high = hexValue(utf8[i + 1]), let low = hexValue(utf8[i + 2]) else { return path }
                // `path` keeps `%2F` and `%00` as they are (a `/` or NUL decoded there would change the path, or
                // cut it short at the C string's end): those go to `path` too.
                let byte = high << 4 | low
                if byte == 0 || byte == UInt8(ascii: "/") { return path }
                bytes.append(byte)
                i += 3
                continue
            }
            bytes.append(c)
            i += 1
        }
        while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        guard let decoded = String(validating: bytes, as: UTF8.self) else { return path }
        return decoded
    }
}

extension URL {
    /// This file URL with `component` appended below it: ``fileSystemPath``, a `/`, `component` (one name, or
    /// several joined by `/`), made a file URL again with `URL(fileURLWithPath:isDirectory:)`. The same file as
    /// `appendingPathComponent(component, isDirectory:)` gives (the same path, but that a base ending in `//` is
    /// joined by one `/`, where Foundation keeps both), without that call's first use in a process
    /// (~45 µs: Foundation sets up its path-component encoding; without the `isDirectory` hint it also looks the
    /// path up in the file system), which start, the crash join and the exit have no other use for.
    /// `isDirectory`: whether the URL ends in `/` (`hasDirectoryPath`), as with `appendingPathComponent`.
    func appendingFileComponent(_ component: String, isDirectory: Bool = false) -> URL {
        URL(fileURLWithPath: PrivateFiles.path(fileSystemPath, component), isDirectory: isDirectory)
    }
}

extension URL {
    /// The last component of ``fileSystemPath``: what `lastPathComponent` gives for a file URL (`/` for the
    /// root), without its first use in a process (about 0.35 M instructions, callgrind: it sets up the same URL
    /// parsing as `path`).
    var fileSystemName: String { PrivateFiles.lastComponent(fileSystemPath) }
}

extension PrivateFiles {
    /// `component` (one name, or several joined by `/`) below the directory `base`: joined by one `/`, none
    /// added when `base` ends in one. What ``URL/appendingFileComponent(_:isDirectory:)`` gives as a path, with
    /// no `URL` made: the start and exit paths name the storage directory's files this way (a `URL`'s first use
    /// in a process is about 450 KiB of Foundation's pages made resident, and its parsing).
    static func path(_ base: String, _ component: String) -> String {
        base.utf8.last == UInt8(ascii: "/") ? base + component : base + "/" + component
    }

    /// `path` made absolute against the working directory when it is relative: what `URL(fileURLWithPath:)`
    /// gives for it (`getcwd(3)` joined with `path`, its `.` and `..` resolved by name,
    /// ``lexicallyNormalised(_:)``). An absolute or empty `path` as it is, and `path` as it is when the
    /// working directory cannot be read (removed, or below a directory that cannot be searched).
    static func absolutePath(_ path: String) -> String {
        guard let first = path.utf8.first, first != UInt8(ascii: "/") else { return path }
        guard let cwd = getcwd(nil, 0) else { return path }
        defer { free(cwd) }
        return lexicallyNormalised(PrivateFiles.path(String(cString: cwd), path))
    }

    /// An absolute path with `.`, `..` and repeated `/` removed, without looking at the file system
    /// (`/a/b/../c` is `/a/c` even when `b` is a symbolic link): vaka_crash_normalised_path, the rule the default
    /// storage path uses too. `path` itself only when out of memory.
    static func lexicallyNormalised(_ path: String) -> String {
        guard let made = path.withCString({ vaka_crash_normalised_path($0) }) else { return path }
        defer { free(made) }
        return String(cString: made)
    }

    /// `path` without its trailing `/`s (the root `/` kept): the form ``URL/fileSystemPath`` gives.
    static func trimmingTrailingSlashes(_ path: String) -> String {
        var bytes = Array(path.utf8)
        guard bytes.count > 1 && bytes.last == UInt8(ascii: "/") else { return path }
        while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The last non-empty `/`-separated component of `path` (what `path.split(separator: "/").last` gives,
    /// with a byte loop instead of `split`'s generic code); `path` itself when it has none (`/`, empty).
    static func lastComponent(_ path: String) -> String {
        let bytes = Array(path.utf8)
        var end = bytes.count
        while end > 0 && bytes[end - 1] == UInt8(ascii: "/") { end -= 1 }
        var start = end
        while start > 0 && bytes[start - 1] != UInt8(ascii: "/") { start -= 1 }
        guard start < end else { return path }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    /// The names in directory `path` (without `.` and `..`, in the order `readdir(3)` gives them); empty when it
    /// cannot be opened. `FileManager.contentsOfDirectory(atPath:)` lists the same names, with generic code
    /// whose first use in a process costs more than the listing.
    static func directoryNames(_ path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw -> String in
                let bytes = raw.bindMemory(to: UInt8.self)
                var length = 0
                while length < bytes.count && bytes[length] != 0 { length += 1 }
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[0..<length]), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
