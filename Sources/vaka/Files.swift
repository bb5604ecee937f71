// Checks of the files and directories the commands read and create. Every command checks its input files with
// these, so a missing path, a directory, an unreadable or an empty file give the same one-line message everywhere
// (exit status 1).
import Foundation

/// Why `path` cannot serve as an input file, as the text after `vaka: PATH: `, or `nil` when it is a
/// non-empty regular file that can be read. Every command checks its input files with this, so a missing
/// path, a directory, an unreadable or an empty file give the same one-line message everywhere.
func inputFileProblem(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { return String(cString: strerror(errno)) }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { return "cannot read: \(String(cString: strerror(errno)))" }
    switch info.st_mode & S_IFMT {
    case S_IFREG: break
    case S_IFDIR: return "is a directory, expected a file"
    default: return "is not a regular file (a device, FIFO or socket)"
    }
    // Read one byte: the size of /proc files is 0, and a file can be open but unreadable (EIO, EISDIR...).
    var byte: UInt8 = 0
    while true {
        let n = pread(fd, &byte, 1, 0)
        if n < 0 && errno == EINTR { continue }
        if n < 0 { return "cannot read: \(String(cString: strerror(errno)))" }
        return n == 0 ? "the file is empty" : nil
    }
}

/// Exits with status 1 and one `vaka: PATH: …` line when `path` is not a readable, non-empty regular file.
func requireInputFile(_ path: String) {
    if let problem = inputFileProblem(path) { fail("\(path): \(problem)", status: 1) }
}

/// The content of the input file at `path` (checked with ``requireInputFile(_:)``); exits with status 1 and
/// one `vaka: PATH: …` line when it cannot be read.
func readInputFile(_ path: String) -> Data {
    requireInputFile(path)
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { fail("\(path): \(String(cString: strerror(errno)))", status: 1) }
    defer { close(fd) }
    var data = Data()
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n < 0 { fail("\(path): cannot read: \(String(cString: strerror(errno)))", status: 1) }
        if n == 0 { return data }
        data.append(contentsOf: chunk[0..<n])
    }
}

/// Creates `path` and its missing parents (mode 0755 less the umask); exits with status 1 and one
/// `vaka: PATH: …` line when a part cannot be created or is not a directory.
func makeDirectories(_ path: String) {
    var partial = path.hasPrefix("/") ? "" : "."
    for component in path.split(separator: "/") {
        partial += "/" + component
        if mkdir(partial, 0o755) != 0 && errno != EEXIST {
            fail("\(path): cannot create the directory \(partial): \(String(cString: strerror(errno)))", status: 1)
        }
        var info = stat()
        guard stat(partial, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            fail("\(partial.hasPrefix("./") ? String(partial.dropFirst(2)) : partial): is not a directory", status: 1)
        }
    }
}

/// Exits with status 1 and one `vaka: DIR: …` line unless `path` is an existing directory that can be listed.
func requireDirectory(_ path: String) {
    var info = stat()
    guard stat(path, &info) == 0 else { fail("\(path): \(String(cString: strerror(errno)))", status: 1) }
    guard info.st_mode & S_IFMT == S_IFDIR else { fail("\(path): is not a directory", status: 1) }
    guard let dir = opendir(path) else { fail("\(path): cannot list: \(String(cString: strerror(errno)))", status: 1) }
    closedir(dir)
}
