import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A crash report file (`docs/report-format.md`, version 1) parsed into typed values.
///
/// Reports come from a process that was dying, so the reader is lenient where it can be and strict
/// where it must be:
/// - Required: the header line `VAKA-CRASH 1` and a valid `signal` line. Without them parsing throws
///   a ``CrashReportError``.
/// - A report without the `end` line, or cut at ``maxFileSize``, is **truncated**: every complete line
///   before the cut is used and ``isTruncated`` is `true`. A last line without its `\n` is dropped (it may
///   have been cut mid-way), `end` included: a report whose `end` lacks its `\n` is truncated too.
/// - Lines longer than ``maxLineLength`` bytes are skipped (never buffered beyond the file cap) and counted
///   in ``Diagnostics/skippedLongLines``; so are lines with a NUL byte, unparsable values (bad numbers,
///   numbers out of range) and repeated single-value keys (the first one wins), in
///   ``Diagnostics/malformedLines``. Unknown keys are ignored, as the format asks. Nothing after `end`
///   is read.
/// - Invalid UTF-8 in text values is replaced with U+FFFD.
/// - Lines ending in `\r\n` (a report that went through a Windows editor or transfer) are read like `\n`
///   lines: the runtime never writes a raw `\r` (it is escaped as `\x0d`).
/// - Negative `pid`, `tid` and `frames_truncated` values are malformed. A path (image or executable) that
///   holds a NUL byte after unescaping is treated as unknown, as `-`.
public struct CrashReport: Equatable, Sendable {
    /// The report format version this reader understands (`VAKA-CRASH 1`).
    public static let supportedVersion = 1
    /// Longest line accepted, in bytes without the `\n` (64 KiB). A valid report line is at most about
    /// 8 KiB (paths and messages are capped at 4096 bytes before escaping).
    public static let maxLineLength = 64 * 1024
    /// Most bytes read from a report file (8 MiB). A valid report is far smaller (≤ 512 images with
    /// ≤ 4 KiB paths); a longer file is read up to this size and treated as truncated.
    public static let maxFileSize = 8 * 1024 * 1024
    /// Most `frame` lines kept (the writer records at most 128); later ones count as malformed.
    public static let maxFrames = 1024
    /// Most `image` lines kept (the writer records at most 512); later ones count as malformed.
    public static let maxImages = 4096
    /// Most `register` lines kept; later ones count as malformed.
    public static let maxRegisters = 256

    /// The fatal signal (`signal <number> <name>`).
    public struct Signal: Equatable, Sendable {
        /// Signal number, e.g. 11. Always in 1...64.
        public var number: Int32
        /// Signal name, e.g. `SIGSEGV`; derived from the number (`SIG<number>` if unknown) when the line
        /// has no name.
        public var name: String
    }

    /// The `si_code` of the signal (`code <si_code> <name>`).
    public struct SignalCode: Equatable, Sendable {
        /// The `si_code` value, e.g. 1, -6 or 128.
        public var value: Int32
        /// Its name, e.g. `SEGV_MAPERR`; `UNKNOWN` when the handler did not know it or the line had none.
        public var name: String
    }

    /// Who sent the signal (`sender <pid> <uid>`), for signals sent by a process (`si_code <= 0`).
    public struct Sender: Equatable, Sendable {
        /// `si_pid` of the sender.
        public var pid: Int64
        /// `si_uid` of the sender.
        public var uid: UInt32
    }

    /// One general register of the crashed thread at the fault (`register <name> <hex>`).
    public struct Register: Equatable, Sendable {
        /// Register name as the format lists it (`rip`, `rsp`, … or `pc`, `sp`, `x0`, …).
        public var name: String
        /// Its value.
        public var value: UInt64
    }

    /// One frame of the crashed thread (`frame <hex> <method>`).
    public struct Frame: Equatable, Sendable {
        /// Instruction address: the faulting PC for the first frame, the return address for the others.
        public var address: UInt64
        /// How the frame was found: `context`, `cfi`, `fp` (or a later method name; `nil` if the line had none).
        public var method: String?
    }

    /// One loaded ELF image (`image <base> <size> <build-id> <path>`).
    public struct Image: Equatable, Sendable {
        /// Runtime address of the image's first byte.
        public var base: UInt64
        /// Span of its `PT_LOAD` segments in bytes.
        public var size: UInt64
        /// GNU build ID in lower-case hex, or `nil` when the report says `-` (or the value was not hex).
        public var buildID: String?
        /// Path of the image file (`[vdso]` for the vDSO), or `nil` when the report says `-`.
        public var path: String?

        /// `true` when `address` lies in `[base, base + size)`.
        public func contains(_ address: UInt64) -> Bool {
            address >= base && address - base < size
        }
    }

    /// What the reader skipped while parsing (all zero for a well-formed report).
    public struct Diagnostics: Equatable, Sendable {
        /// Lines longer than ``CrashReport/maxLineLength`` that were skipped.
        public var skippedLongLines = 0
        /// Lines skipped because they held a NUL byte, a value that did not parse, a repeated single-value key,
        /// or exceeded the frame/image/register caps.
        public var malformedLines = 0
        /// The first few problems, as `line N: …` sentences, for logs and error messages (at most 20).
        public var problems: [String] = []

        /// Creates empty diagnostics.
        public init() {}
    }

    /// Format version from the header line; always ``supportedVersion`` after a successful parse.
    public var version: Int
    /// The run id given at install (`run_id`), also the report's file name.
    public var runID: String?
    /// `getpid()` of the crashed process.
    public var pid: Int64?
    /// Kernel thread id (`gettid()`) of the crashed thread.
    public var tid: Int64?
    /// Name of the crashed thread (`prctl(PR_GET_NAME)`).
    public var threadName: String?
    /// `CLOCK_REALTIME` at handler entry, in nanoseconds since the Unix epoch.
    public var timestampNs: UInt64?
    /// CPU architecture: `x86_64` or `aarch64`.
    public var arch: String?
    /// Path of the main executable (`/proc/self/exe` at install); `nil` when missing or `-` (unknown).
    public var executable: String?
    /// The fatal signal. Required.
    public var signal: Signal
    /// The signal's `si_code`.
    public var code: SignalCode?
    /// The fault address (`si_addr`), for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP.
    public var faultAddress: UInt64?
    /// The sending process, when a process sent the signal.
    public var sender: Sender?
    /// The Swift runtime's fatal-error message, e.g. `main.swift:15: Fatal error: Unexpectedly found nil…`.
    public var fatalMessage: String?
    /// glibc's abort message (failed `assert`, malloc corruption).
    public var abortMessage: String?
    /// General registers at the fault, in report order.
    public var registers: [Register] = []
    /// Frames of the crashed thread, **newest first** as in the report (the first is the crash site).
    public var frames: [Frame] = []
    /// Set when the unwinder stopped at its frame limit: the count of frames it wrote.
    public var framesTruncated: Int?
    /// Loaded images, in report order.
    public var images: [Image] = []
    /// Nanoseconds (`CLOCK_MONOTONIC`) the handler took until just before the `capture_ns` line.
    public var captureNs: UInt64?
    /// `true` when the `end` line is missing or the file was cut at ``maxFileSize``: the report is partial.
    public var isTruncated: Bool
    /// What the reader skipped.
    public var diagnostics = Diagnostics()
    /// `true` when the report was written by a child made with `fork()` (no `exec`) after install: its file is
    /// `<run_id>-<pid>.crash` while the parent's is `<run_id>.crash` (docs/report-format.md). The format has no
    /// line for it, so it comes from the file name (``init(contentsOf:)``, ``init(data:fileName:)``); `false`
    /// when no file name was given. The event id of a fork child's report is then derived from run id and pid
    /// (``FatalEventBuilder/eventID(forRunID:forkChildPID:)``), so parent and child never share one.
    public var isForkChild = false

    /// The report file name for `runID`: `<run_id>.crash`, or `<run_id>-<pid>.crash` for a fork child's report.
    public static func fileName(runID: String, forkChildPID pid: Int64? = nil) -> String {
        pid.map { "\(runID)-\($0).crash" } ?? "\(runID).crash"
    }

    /// Creates a report value directly (for tests and tools); parsing is done by ``init(data:)``.
    public init(version: Int = CrashReport.supportedVersion, signal: Signal, isTruncated: Bool = false) {
        self.version = version
        self.signal = signal
        self.isTruncated = isTruncated
    }

    /// Reads and parses the report file at `path` (at most ``maxFileSize`` bytes are read; a longer file is
    /// parsed as far as that and marked truncated).
    /// - Throws: ``CrashReportError/cannotRead(path:errno:)`` when it cannot be opened or read,
    ///   ``CrashReportError/notARegularFile(path:)`` for directories, FIFOs and devices, and every error of
    ///   ``init(data:)``.
    /// ``isForkChild`` is set from the file's name.
    public init(contentsOf path: String) throws {
        let (data, cut) = try CrashReport.readCapped(path)
        try self.init(data: data, cutAtSizeLimit: cut)
        markForkChild(fileName: CrashReport.lastComponent(of: path))
    }

    /// Parses report bytes. Only the first ``maxFileSize`` bytes are used; more marks the report truncated.
    /// `fileName` (the last path component the bytes were read from, if any) sets ``isForkChild``: a report
    /// whose `run_id` is R and `pid` is P read from `R-P.crash` is a fork child's.
    /// - Throws: ``CrashReportError/empty``, ``CrashReportError/notAReport(firstLine:)``,
    ///   ``CrashReportError/unsupportedVersion(_:)``, or ``CrashReportError/missingSignal(truncated:problem:)``.
    public init(data: Data, fileName: String? = nil) throws {
        try self.init(data: data, cutAtSizeLimit: false)
        if let fileName { markForkChild(fileName: fileName) }
    }

    private mutating func markForkChild(fileName: String) {
        guard let runID, let pid else { return }
        isForkChild = fileName == CrashReport.fileName(runID: runID, forkChildPID: pid)
    }

    /// The part of `path` after its last `/`.
    static func lastComponent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    private init(data: Data, cutAtSizeLimit: Bool) throws {
        var cut = cutAtSizeLimit
        var bytes = data
        if bytes.count > CrashReport.maxFileSize {
            bytes = bytes.prefix(CrashReport.maxFileSize)
            cut = true
        }
        var parser = Parser()
        try bytes.withUnsafeBytes { raw in
            try parser.run(UnsafeRawBufferPointer(raw))
        }
        guard let signal = parser.signal else {
            throw CrashReportError.missingSignal(truncated: !parser.sawEnd || cut, problem: parser.signalProblem)
        }
        self = parser.report(signal: signal, truncated: cut || !parser.sawEnd)
    }

    private static func readCapped(_ path: String) throws -> (Data, Bool) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw CrashReportError.cannotRead(path: path, errno: errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw CrashReportError.cannotRead(path: path, errno: errno) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw CrashReportError.notARegularFile(path: path) }
        // Read at most limit + 1 bytes: one more than allowed tells that the file goes on.
        let limit = CrashReport.maxFileSize
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while data.count <= limit {
            let want = min(chunk.count, limit + 1 - data.count)
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress!, want) }
            if n < 0 {
                if errno == EINTR { continue }
                throw CrashReportError.cannotRead(path: path, errno: errno)
            }
            if n == 0 { break }
            data.append(contentsOf: chunk[0..<n])
        }
        let cut = data.count > limit
        return (cut ? data.prefix(limit) : data, cut)
    }
}

/// Why a crash report could not be turned into a ``CrashReport``.
public enum CrashReportError: Error, Equatable, CustomStringConvertible {
    /// The file could not be opened or read; `errno` says why.
    case cannotRead(path: String, errno: Int32)
    /// The path is a directory, FIFO, socket or device, not a report file.
    case notARegularFile(path: String)
    /// The input has no bytes at all (the process died before writing anything).
    case empty
    /// The first line is not `VAKA-CRASH <version>`: this is not a Vaka crash report. `firstLine` is the
    /// start of that line (at most 40 bytes, control bytes escaped) for the message.
    case notAReport(firstLine: String)
    /// A Vaka report, but of a version this reader does not know (the header's value as written).
    case unsupportedVersion(String)
    /// The header line holds a carriage return (`\r`) not followed by `\n`: the file's lines end in `\r`
    /// alone (converted by some tool); the format's lines end in `\n`.
    case carriageReturnLineEnds
    /// No valid `signal` line: the minimum for an event is the header and the signal. `truncated` is
    /// `true` when the report also has no `end` (it was cut before the signal was written); `problem`
    /// describes a `signal` line that was there but did not parse.
    case missingSignal(truncated: Bool, problem: String?)

    /// A one-line explanation for people.
    public var description: String {
        switch self {
        case .cannotRead(let path, let code):
            return "cannot read \(path): \(String(cString: strerror(code)))"
        case .notARegularFile(let path):
            return "\(path) is not a regular file"
        case .empty:
            return "the report is empty"
        case .notAReport(let firstLine):
            return "not a Vaka crash report (the first line is \"\(firstLine)\", expected \"VAKA-CRASH \(CrashReport.supportedVersion)\")"
        case .unsupportedVersion(let version):
            return "unsupported report format version \"\(version)\" (this reader knows version \(CrashReport.supportedVersion))"
        case .carriageReturnLineEnds:
            return "the report's lines end in carriage returns (\\r); crash reports use \\n line ends"
        case .missingSignal(let truncated, let problem):
            var text = truncated ? "the report is truncated before its signal line" : "the report has no signal line"
            if let problem { text += " (\(problem))" }
            return text
        }
    }
}

// MARK: - Parsing

private struct Parser {
    var sawHeader = false
    var sawEnd = false
    var lineNumber = 0
    var signal: CrashReport.Signal?
    var signalProblem: String?
    var version = 0
    var fields = Fields()
    var seen = Set<String>()
    var diagnostics = CrashReport.Diagnostics()

    struct Fields {
        var runID: String?
        var pid: Int64?
        var tid: Int64?
        var threadName: String?
        var timestampNs: UInt64?
        var arch: String?
        var executable: String?
        var code: CrashReport.SignalCode?
        var faultAddress: UInt64?
        var sender: CrashReport.Sender?
        var fatalMessage: String?
        var abortMessage: String?
        var registers: [CrashReport.Register] = []
        var frames: [CrashReport.Frame] = []
        var framesTruncated: Int?
        var images: [CrashReport.Image] = []
        var captureNs: UInt64?
    }

    func report(signal: CrashReport.Signal, truncated: Bool) -> CrashReport {
        var report = CrashReport(version: version, signal: signal, isTruncated: truncated)
        report.runID = fields.runID
        report.pid = fields.pid
        report.tid = fields.tid
        report.threadName = fields.threadName
        report.timestampNs = fields.timestampNs
        report.arch = fields.arch
        report.executable = fields.executable
        report.code = fields.code
        report.faultAddress = fields.faultAddress
        report.sender = fields.sender
        report.fatalMessage = fields.fatalMessage
        report.abortMessage = fields.abortMessage
        report.registers = fields.registers
        report.frames = fields.frames
        report.framesTruncated = fields.framesTruncated
        report.images = fields.images
        report.captureNs = fields.captureNs
        report.diagnostics = diagnostics
        return report
    }

    mutating func run(_ bytes: UnsafeRawBufferPointer) throws {
        guard !bytes.isEmpty else { throw CrashReportError.empty }
        var start = 0
        let count = bytes.count
        while start < count && !sawEnd {
            // Find the end of this line without looking further than the length cap + 1.
            var end = start
            let scanLimit = min(count, start + CrashReport.maxLineLength + 1)
            while end < scanLimit && bytes[end] != 0x0A { end += 1 }
            lineNumber += 1
            if end < count && bytes[end] == 0x0A {
                try line(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), terminated: true)
                start = end + 1
            } else if end == count {
                // Last line, no '\n': the cut happened here.
                try line(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), terminated: false)
                start = end
            } else {
                // Longer than the cap: skip to the next '\n' (or the end of the input).
                var next = end
                while next < count && bytes[next] != 0x0A { next += 1 }
                if !sawHeader {
                    throw CrashReportError.notAReport(firstLine: preview(UnsafeRawBufferPointer(rebasing: bytes[start..<end])))
                }
                diagnostics.skippedLongLines += 1
                note("line \(lineNumber): longer than \(CrashReport.maxLineLength) bytes, skipped")
                start = next + 1
            }
        }
    }

    mutating func note(_ problem: String) {
        if diagnostics.problems.count < 20 { diagnostics.problems.append(problem) }
    }

    mutating func malformed(_ problem: String) {
        diagnostics.malformedLines += 1
        note("line \(lineNumber): \(problem)")
    }

    func preview(_ line: UnsafeRawBufferPointer) -> String {
        escapeForDisplay(line.prefix(40))
    }

    mutating func line(_ raw: UnsafeRawBufferPointer, terminated: Bool) throws {
        // A CRLF line end: the '\r' is not part of the value (the writer escapes every real '\r').
        let line = raw.last == 0x0D ? UnsafeRawBufferPointer(rebasing: raw.dropLast()) : raw
        if !sawHeader {
            try header(line)
            return
        }
        if !terminated {
            // The writer ends every line, `end` included, with '\n': a line without it was cut while being
            // written (`en`, `end` before its newline, half a frame address), so its value cannot be trusted.
            note("line \(lineNumber): no line end (cut while written), ignored")
            return
        }
        let text = Array(line)
        if text.contains(0) {
            malformed("contains a NUL byte, skipped")
            return
        }
        let key: String
        let value: ArraySlice<UInt8>
        if let space = text.firstIndex(of: 0x20) {
            key = String(decoding: text[..<space], as: UTF8.self)
            value = text[(space + 1)...]
        } else {
            key = String(decoding: text, as: UTF8.self)
            value = []
        }
        field(key, value)
    }

    mutating func header(_ line: UnsafeRawBufferPointer) throws {
        let magic = Array("VAKA-CRASH".utf8)
        let text = Array(line)
        guard text.starts(with: magic), text.count == magic.count || text[magic.count] == 0x20 else {
            throw CrashReportError.notAReport(firstLine: preview(line))
        }
        if text.contains(0x0D) { throw CrashReportError.carriageReturnLineEnds }
        let versionText = text.count > magic.count ? String(decoding: text[(magic.count + 1)...], as: UTF8.self) : ""
        guard let number = Int(versionText), number == CrashReport.supportedVersion,
              versionText == String(number) else {
            throw CrashReportError.unsupportedVersion(escapeForDisplay(Array(versionText.utf8).prefix(40)))
        }
        version = number
        sawHeader = true
    }

    /// Single-value keys: the first valid line wins, later ones are malformed.
    mutating func once(_ key: String) -> Bool {
        if seen.contains(key) {
            malformed("repeated \(key), ignored")
            return false
        }
        return true
    }

    mutating func field(_ key: String, _ value: ArraySlice<UInt8>) {
        let string = String(decoding: value, as: UTF8.self)
        switch key {
        case "end":
            sawEnd = true
        case "signal":
            guard once(key) else { return }
            let parts = words(string, max: 2)
            guard let number = Int32(parts[0]), (1...64).contains(number) else {
                signalProblem = "line \(lineNumber): bad signal \"\(escapeForDisplay(value.prefix(40)))\""
                malformed("bad signal value")
                return
            }
            let name = parts.count > 1 && !parts[1].isEmpty ? parts[1] : signalName(number)
            signal = CrashReport.Signal(number: number, name: name)
            seen.insert(key)
        case "code":
            guard once(key) else { return }
            let parts = words(string, max: 2)
            guard let number = Int32(parts[0]) else { return malformed("bad si_code") }
            fields.code = CrashReport.SignalCode(value: number,
                                                 name: parts.count > 1 && !parts[1].isEmpty ? parts[1] : "UNKNOWN")
            seen.insert(key)
        case "run_id":
            setText(key, value) { $0.runID = $1 }
        case "thread_name":
            setText(key, value) { $0.threadName = $1 }
        case "arch":
            setText(key, value) { $0.arch = $1 }
        case "executable":
            setText(key, value) { $0.executable = $1 == "-" || $1.contains("\u{0}") ? nil : $1 }
        case "fatal_message":
            setText(key, value) { $0.fatalMessage = $1 }
        case "abort_message":
            setText(key, value) { $0.abortMessage = $1 }
        case "pid":
            setNumber(key, string, Int64.self, nonNegative: true) { $0.pid = $1 }
        case "tid":
            setNumber(key, string, Int64.self, nonNegative: true) { $0.tid = $1 }
        case "timestamp_ns":
            setNumber(key, string, UInt64.self) { $0.timestampNs = $1 }
        case "capture_ns":
            setNumber(key, string, UInt64.self) { $0.captureNs = $1 }
        case "frames_truncated":
            setNumber(key, string, Int.self, nonNegative: true) { $0.framesTruncated = $1 }
        case "fault_addr":
            guard once(key) else { return }
            guard let address = hex(string) else { return malformed("bad fault_addr") }
            fields.faultAddress = address
            seen.insert(key)
        case "sender":
            guard once(key) else { return }
            let parts = words(string, max: 2)
            guard parts.count == 2, let pid = Int64(parts[0]), let uid = UInt32(parts[1]) else {
                return malformed("bad sender")
            }
            fields.sender = CrashReport.Sender(pid: pid, uid: uid)
            seen.insert(key)
        case "register":
            guard fields.registers.count < CrashReport.maxRegisters else { return malformed("too many registers") }
            let parts = words(string, max: 2)
            guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 16,
                  parts[0].utf8.allSatisfy({ isAlnum($0) }), let number = hex(parts[1]) else {
                return malformed("bad register")
            }
            fields.registers.append(CrashReport.Register(name: parts[0], value: number))
        case "frame":
            guard fields.frames.count < CrashReport.maxFrames else { return malformed("too many frames") }
            let parts = words(string, max: 2)
            guard let address = hex(parts[0]) else { return malformed("bad frame address") }
            var method: String?
            if parts.count > 1, !parts[1].isEmpty, parts[1].utf8.count <= 32, parts[1].utf8.allSatisfy({ isAlnum($0) || $0 == 0x5F }) {
                method = parts[1]
            }
            fields.frames.append(CrashReport.Frame(address: address, method: method))
        case "image":
            guard fields.images.count < CrashReport.maxImages else { return malformed("too many images") }
            // <base> <size> <build-id> <path>; the path is the rest of the line and may contain spaces.
            var rest = value[...]
            var parts: [ArraySlice<UInt8>] = []
            for _ in 0..<3 {
                guard let space = rest.firstIndex(of: 0x20) else { break }
                parts.append(rest[..<space])
                rest = rest[(space + 1)...]
            }
            guard parts.count == 3,
                  let base = hex(String(decoding: parts[0], as: UTF8.self)),
                  let size = hex(String(decoding: parts[1], as: UTF8.self)) else {
                return malformed("bad image")
            }
            let idText = String(decoding: parts[2], as: UTF8.self)
            var buildID: String?
            if idText != "-" {
                if idText.utf8.count <= 256, let bytes = hexBytes(idText), !bytes.isEmpty {
                    buildID = idText.lowercased()
                } else {
                    note("line \(lineNumber): image build ID is not hex, ignored")
                }
            }
            var path = Array(rest) == [0x2D] || rest.isEmpty ? nil : unescape(rest)
            if let text = path, text.contains("\u{0}") {
                // A NUL would cut the path short when it is opened: some other file. Unknown instead.
                note("line \(lineNumber): image path holds a NUL byte, treated as unknown")
                path = nil
            }
            fields.images.append(CrashReport.Image(base: base, size: size, buildID: buildID, path: path))
        default:
            break  // unknown keys are later additions: ignore them
        }
    }

    mutating func setText(_ key: String, _ value: ArraySlice<UInt8>, _ apply: (inout Fields, String) -> Void) {
        guard once(key) else { return }
        apply(&fields, unescape(value))
        seen.insert(key)
    }

    mutating func setNumber<T: FixedWidthInteger>(_ key: String, _ value: String, _ type: T.Type,
                                                  nonNegative: Bool = false, _ apply: (inout Fields, T) -> Void) {
        guard once(key) else { return }
        guard let number = T(value), !nonNegative || number >= 0 else { return malformed("bad \(key) \"\(escapeForDisplay(Array(value.utf8).prefix(40)))\"") }
        apply(&fields, number)
        seen.insert(key)
    }
}

private func words(_ text: String, max: Int) -> [String] {
    text.split(separator: " ", maxSplits: max - 1, omittingEmptySubsequences: false).map(String.init)
}

private func isAlnum(_ c: UInt8) -> Bool {
    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
}

/// `0x`-prefixed hex, 1 to 16 digits.
private func hex(_ text: String) -> UInt64? {
    guard text.hasPrefix("0x") else { return nil }
    let digits = text.dropFirst(2)
    guard (1...16).contains(digits.utf8.count), digits.utf8.allSatisfy({ isHexDigit($0) }) else { return nil }
    return UInt64(digits, radix: 16)
}

private func isHexDigit(_ c: UInt8) -> Bool {
    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66)
}

private func hexBytes(_ text: String) -> [UInt8]? {
    let digits = Array(text.utf8)
    guard digits.count % 2 == 0, digits.allSatisfy(isHexDigit) else { return nil }
    return stride(from: 0, to: digits.count, by: 2).map {
        UInt8(String(decoding: digits[$0..<($0 + 2)], as: UTF8.self), radix: 16)!
    }
}

/// Undoes the format's escaping: `\\`, `\n`, `\t`, `\xHH`; other backslashes are kept as they are.
/// Invalid UTF-8 becomes U+FFFD.
func unescape<Bytes: Collection>(_ value: Bytes) -> String where Bytes.Element == UInt8 {
    let input = Array(value)
    var out: [UInt8] = []
    out.reserveCapacity(input.count)
    var index = 0
    while index < input.count {
        let byte = input[index]
        if byte == 0x5C, index + 1 < input.count {
            let next = input[index + 1]
            switch next {
            case 0x5C: out.append(0x5C); index += 2; continue
            case UInt8(ascii: "n"): out.append(0x0A); index += 2; continue
            case UInt8(ascii: "t"): out.append(0x09); index += 2; continue
            case UInt8(ascii: "x"):
                if index + 3 < input.count, isHexDigit(input[index + 2]), isHexDigit(input[index + 3]),
                   let decoded = UInt8(String(decoding: input[(index + 2)...(index + 3)], as: UTF8.self), radix: 16) {
                    out.append(decoded)
                    index += 4
                    continue
                }
            default: break
            }
        }
        out.append(byte)
        index += 1
    }
    return String(decoding: out, as: UTF8.self)
}

/// Printable form of raw bytes for error messages: ASCII as is, anything else as `\xHH`.
func escapeForDisplay<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
    var text = ""
    for byte in bytes {
        if byte >= 0x20 && byte < 0x7F && byte != 0x5C {
            text.unicodeScalars.append(Unicode.Scalar(byte))
        } else {
            text += "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
        }
    }
    return text
}

/// Linux signal names by number (x86_64 and aarch64 agree on these), for a `signal` line without a name.
func signalName(_ number: Int32) -> String {
    let names: [Int32: String] = [
        1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
        8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM",
        15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP",
        21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM",
        27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS",
    ]
    return names[number] ?? "SIG\(number)"
}
