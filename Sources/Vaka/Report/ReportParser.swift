import Foundation
#if canImport(Glibc)
import Glibc
#endif
import VakaCrash
import VakaSymbolication

/// The keys of the report format (docs/report-format.md, *Keys*), one case each: the reader's one table of what
/// a report line can say. The key strings are the writer's, the `VAKA_REPORT_KEY_*` macros of the report contract
/// header `include/vaka/vaka_report_format.h`; ``ReportParser`` switches over the cases exhaustively, so a key
/// added here must be handled there.
enum ReportKey: CaseIterable, Sendable {
    case runID, pid, tid, threadName, timestampNs, arch, executable, signal, code, faultAddress, sender
    case fatalMessage, abortMessage, journalSeq, register, frame, framesTruncated, image
    case threads, thread, threadProc, threadFrames, memoryRead, captureNs, pad, end

    /// The key as the report writes it, e.g. `fault_addr`.
    var name: String {
        switch self {
        case .runID: VAKA_REPORT_KEY_RUN_ID
        case .pid: VAKA_REPORT_KEY_PID
        case .tid: VAKA_REPORT_KEY_TID
        case .threadName: VAKA_REPORT_KEY_THREAD_NAME
        case .timestampNs: VAKA_REPORT_KEY_TIMESTAMP_NS
        case .arch: VAKA_REPORT_KEY_ARCH
        case .executable: VAKA_REPORT_KEY_EXECUTABLE
        case .signal: VAKA_REPORT_KEY_SIGNAL
        case .code: VAKA_REPORT_KEY_CODE
        case .faultAddress: VAKA_REPORT_KEY_FAULT_ADDR
        case .sender: VAKA_REPORT_KEY_SENDER
        case .fatalMessage: VAKA_REPORT_KEY_FATAL_MESSAGE
        case .abortMessage: VAKA_REPORT_KEY_ABORT_MESSAGE
        case .journalSeq: VAKA_REPORT_KEY_JOURNAL_SEQ
        case .register: VAKA_REPORT_KEY_REGISTER
        case .frame: VAKA_REPORT_KEY_FRAME
        case .framesTruncated: VAKA_REPORT_KEY_FRAMES_TRUNCATED
        case .image: VAKA_REPORT_KEY_IMAGE
        case .threads: VAKA_REPORT_KEY_THREADS
        case .thread: VAKA_REPORT_KEY_THREAD
        case .threadProc: VAKA_REPORT_KEY_THREAD_PROC
        case .threadFrames: VAKA_REPORT_KEY_THREAD_FRAMES
        case .memoryRead: VAKA_REPORT_KEY_MEMORY_READ
        case .captureNs: VAKA_REPORT_KEY_CAPTURE_NS
        case .pad: VAKA_REPORT_KEY_PAD
        case .end: VAKA_REPORT_KEY_END
        }
    }

    /// Every key by its ``name``.
    static let byName: [String: ReportKey] = Dictionary(uniqueKeysWithValues: allCases.map { ($0.name, $0) })

    /// Whether the ``CrashReport`` field this key's lines fill holds a value in `report` (`end`: the report is
    /// not truncated); `true` for the keys the reader takes nothing from (`memory_read`, `pad`). The contract
    /// tests check with it that every key the writer writes reaches its field.
    func isFilled(in report: CrashReport) -> Bool {
        switch self {
        case .runID: report.runID != nil
        case .pid: report.pid != nil
        case .tid: report.tid != nil
        case .threadName: report.threadName != nil
        case .timestampNs: report.timestampNs != nil
        case .arch: report.arch != nil
        case .executable: report.executable != nil
        case .signal: report.signal.number != 0
        case .code: report.code != nil
        case .faultAddress: report.faultAddress != nil
        case .sender: report.sender != nil
        case .fatalMessage: report.fatalMessage != nil
        case .abortMessage: report.abortMessage != nil
        case .journalSeq: report.journalSeq != nil
        case .register: !report.registers.isEmpty
        case .frame: !report.frames.isEmpty
        case .framesTruncated: report.framesTruncated != nil
        case .image: !report.images.isEmpty
        case .threads: report.threadCount != nil
        case .thread: !report.threads.isEmpty
        case .threadProc: report.threads.contains { $0.proc != nil }
        case .threadFrames: report.threads.contains { !$0.frames.isEmpty }
        case .captureNs: report.captureNs != nil
        case .end: !report.isTruncated
        case .memoryRead, .pad: true
        }
    }
}

/// Reads report bytes line by line into a ``CrashReport`` with the rules documented there (strict header and
/// `signal`, lenient elsewhere, caps on lines, frames, images and registers).
///
/// Every field but the signal is written straight into ``report``; the signal, the one required field, is kept
/// aside in ``signal`` until the end, where ``parse(_:cutAtSizeLimit:)`` throws when there is none.
struct ReportParser {
    private var sawHeader = false
    private var sawEnd = false
    private var lineNumber = 0
    private var signal: CrashReport.Signal?
    /// Why a `signal` line did not parse, for ``CrashReportError/missingSignal(truncated:problem:)``.
    private var signalProblem: String?
    /// The report read so far; its `signal` is a placeholder (see ``signal``).
    private var report = CrashReport(version: 0, signal: CrashReport.Signal(number: 0, name: ""))
    /// Single-value keys already set: a repeated one is malformed.
    private var seen = Set<ReportKey>()
    /// The frames of `thread_frames` lines as written (`<image>:<offset>` or an address), by index into
    /// ``CrashReport/threads``: resolved against the `image` lines once the whole report is read.
    private var pendingThreadFrames: [Int: [ThreadFrameToken]] = [:]

    /// One frame of a `thread_frames` line before the images are known.
    private enum ThreadFrameToken {
        case address(UInt64)
        case imageOffset(image: Int, offset: UInt64)
    }

    /// Parses report bytes; only the first ``CrashReport/maxFileSize`` are used. The result is truncated when
    /// the bytes have no `end` line, were longer than that, or `cutAtSizeLimit` says the file was.
    /// - Throws: ``CrashReportError`` as ``CrashReport/init(data:fileName:)`` documents.
    static func parse(_ data: Data, cutAtSizeLimit: Bool) throws -> CrashReport {
        var cut = cutAtSizeLimit
        var bytes = data
        if bytes.count > CrashReport.maxFileSize {
            bytes = bytes.prefix(CrashReport.maxFileSize)
            cut = true
        }
        var parser = ReportParser()
        try bytes.withUnsafeBytes { raw in
            try parser.run(UnsafeRawBufferPointer(raw))
        }
        guard let signal = parser.signal else {
            throw CrashReportError.missingSignal(truncated: !parser.sawEnd || cut, problem: parser.signalProblem)
        }
        var report = parser.report
        report.signal = signal
        parser.resolveThreadFrames(into: &report)
        report.isTruncated = cut || !parser.sawEnd
        return report
    }

    /// The first ``CrashReport/maxFileSize`` bytes of the regular file at `path`, and whether it goes on beyond.
    /// - Throws: ``CrashReportError/cannotRead(path:errno:)``, ``CrashReportError/notARegularFile(path:)``.
    static func readFile(_ path: String) throws -> (data: Data, cut: Bool) {
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

    // MARK: - Lines

    private mutating func run(_ bytes: UnsafeRawBufferPointer) throws {
        guard !bytes.isEmpty else { throw CrashReportError.empty }
        var start = 0
        let count = bytes.count
        while start < count && !sawEnd {
            // Find the end of this line without looking further than the length cap + 1.
            var end = start
            let scanLimit = min(count, start + CrashReport.maxLineLength + 1)
            while end < scanLimit && bytes[end] != 0x0A { end += 1 }
            lineNumber += 1
            if end < count && bytes[end] == 0x0A && end - start <= CrashReport.maxLineLength {
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
                report.diagnostics.skippedLongLines += 1
                note("line \(lineNumber): longer than \(CrashReport.maxLineLength) bytes, skipped")
                start = next + 1
            }
        }
    }

    private mutating func note(_ problem: String) {
        if report.diagnostics.problems.count < 20 { report.diagnostics.problems.append(problem) }
    }

    private mutating func malformed(_ problem: String) {
        report.diagnostics.malformedLines += 1
        note("line \(lineNumber): \(problem)")
    }

    private func preview(_ line: UnsafeRawBufferPointer) -> String {
        ReportText.escapeForDisplay(line.prefix(40))
    }

    private mutating func line(_ raw: UnsafeRawBufferPointer, terminated: Bool) throws {
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
        let name: String
        let value: ArraySlice<UInt8>
        if let space = text.firstIndex(of: 0x20) {
            name = String(decoding: text[..<space], as: UTF8.self)
            value = text[(space + 1)...]
        } else {
            name = String(decoding: text, as: UTF8.self)
            value = []
        }
        // Unknown keys are later additions to the format: ignore them.
        guard let key = ReportKey.byName[name] else { return }
        field(key, value)
    }

    private mutating func header(_ line: UnsafeRawBufferPointer) throws {
        let magic = Array(VAKA_REPORT_MAGIC.utf8)
        let text = Array(line)
        guard text.starts(with: magic), text.count == magic.count || text[magic.count] == 0x20 else {
            throw CrashReportError.notAReport(firstLine: preview(line))
        }
        if text.contains(0x0D) { throw CrashReportError.carriageReturnLineEnds }
        let versionText = text.count > magic.count ? String(decoding: text[(magic.count + 1)...], as: UTF8.self) : ""
        guard let number = Int(versionText), CrashReport.supportedVersions.contains(number),
              versionText == String(number) else {
            throw CrashReportError.unsupportedVersion(ReportText.escapeForDisplay(Array(versionText.utf8).prefix(40)))
        }
        report.version = number
        sawHeader = true
    }

    // MARK: - Fields

    /// Single-value keys: the first valid line wins, later ones are malformed.
    private mutating func once(_ key: ReportKey) -> Bool {
        if seen.contains(key) {
            malformed("repeated \(key.name), ignored")
            return false
        }
        return true
    }

    private mutating func field(_ key: ReportKey, _ value: ArraySlice<UInt8>) {
        let string = String(decoding: value, as: UTF8.self)
        switch key {
        case .end:
            sawEnd = true
        case .memoryRead, .pad:
            break  // informational and filler: nothing for the event
        case .signal:
            guard once(key) else { return }
            let parts = ReportText.words(string, max: 2)
            guard let number = Int32(parts[0]), (1...64).contains(number) else {
                signalProblem = "line \(lineNumber): bad signal \"\(ReportText.escapeForDisplay(value.prefix(40)))\""
                malformed("bad signal value")
                return
            }
            let name = parts.count > 1 && !parts[1].isEmpty ? parts[1] : signalName(number)
            signal = CrashReport.Signal(number: number, name: name)
            seen.insert(key)
        case .code:
            guard once(key) else { return }
            let parts = ReportText.words(string, max: 2)
            guard let number = Int32(parts[0]) else { return malformed("bad si_code") }
            report.code = CrashReport.SignalCode(value: number,
                                                 name: parts.count > 1 && !parts[1].isEmpty ? parts[1] : VAKA_REPORT_NAME_UNKNOWN)
            seen.insert(key)
        case .runID:
            setText(key, value, \.runID)
        case .threadName:
            setText(key, value, \.threadName)
        case .arch:
            setText(key, value, \.arch)
        case .executable:
            setText(key, value, \.executable) { $0 == VAKA_REPORT_VALUE_UNKNOWN || $0.contains("\u{0}") ? nil : $0 }
        case .fatalMessage:
            setText(key, value, \.fatalMessage)
        case .abortMessage:
            setText(key, value, \.abortMessage)
        case .pid:
            setNumber(key, string, \.pid, nonNegative: true)
        case .tid:
            setNumber(key, string, \.tid, nonNegative: true)
        case .timestampNs:
            setNumber(key, string, \.timestampNs)
        case .captureNs:
            setNumber(key, string, \.captureNs)
        case .journalSeq:
            setNumber(key, string, \.journalSeq)
        case .framesTruncated:
            setNumber(key, string, \.framesTruncated, nonNegative: true)
        case .faultAddress:
            guard once(key) else { return }
            guard let address = ReportText.hex(string) else { return malformed("bad \(key.name)") }
            report.faultAddress = address
            seen.insert(key)
        case .sender:
            guard once(key) else { return }
            let parts = ReportText.words(string, max: 2)
            guard parts.count == 2, let pid = Int64(parts[0]), let uid = UInt32(parts[1]) else {
                return malformed("bad \(key.name)")
            }
            report.sender = CrashReport.Sender(pid: pid, uid: uid)
            seen.insert(key)
        case .register:
            // `<name> <hex>` pairs: one per line in version 1, all on one line in version 2.
            let parts = string.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            guard parts.count >= 2, parts.count % 2 == 0 else { return malformed("bad \(key.name)") }
            var pairs: [CrashReport.Register] = []
            for index in stride(from: 0, to: parts.count, by: 2) {
                let name = parts[index]
                guard !name.isEmpty, name.utf8.count <= 16, name.utf8.allSatisfy({ ReportText.isAlnum($0) }),
                      let number = ReportText.hex(parts[index + 1]) else { return malformed("bad \(key.name)") }
                pairs.append(CrashReport.Register(name: name, value: number))
            }
            guard report.registers.count + pairs.count <= CrashReport.maxRegisters else { return malformed("too many registers") }
            report.registers.append(contentsOf: pairs)
        case .frame:
            guard report.frames.count < CrashReport.maxFrames else { return malformed("too many frames") }
            let parts = ReportText.words(string, max: 2)
            guard let address = ReportText.hex(parts[0]) else { return malformed("bad frame address") }
            var method: String?
            if parts.count > 1, !parts[1].isEmpty, parts[1].utf8.count <= 32,
               parts[1].utf8.allSatisfy({ ReportText.isAlnum($0) || $0 == 0x5F }) {
                method = parts[1]
            }
            report.frames.append(CrashReport.Frame(address: address, method: method))
        case .image:
            guard report.images.count < CrashReport.maxImages else { return malformed("too many images") }
            image(value)
        case .threads:
            guard once(key) else { return }
            let parts = ReportText.words(string, max: 3)
            guard parts.count == 3, let total = Int(parts[0]), let listed = Int(parts[1]), let wait = UInt64(parts[2]),
                  total >= 0, listed >= 0 else { return malformed("bad \(key.name)") }
            report.threadCount = CrashReport.ThreadCount(total: total, listed: listed, waitNs: wait)
            seen.insert(key)
        case .thread:
            guard report.threads.count < CrashReport.maxThreads else { return malformed("too many threads") }
            thread(value)
        case .threadProc:
            threadProc(string)
        case .threadFrames:
            threadFrames(string)
        }
    }

    /// A `thread` line: `<tid> <status> <name>`; the name is the rest of the line (escaped text, may be empty).
    private mutating func thread(_ value: ArraySlice<UInt8>) {
        var rest = value[...]
        var parts: [ArraySlice<UInt8>] = []
        for _ in 0..<2 {
            guard let space = rest.firstIndex(of: 0x20) else { break }
            parts.append(rest[..<space])
            rest = rest[(space + 1)...]
        }
        if parts.count == 1, rest.elementsEqual(VAKA_REPORT_THREAD_CRASHED.utf8) {
            parts.append(rest)  // `<tid> crashed`: the crashed thread's name is the `thread_name` line
            rest = rest[rest.endIndex...]
        }
        guard parts.count == 2, let tid = Int64(String(decoding: parts[0], as: UTF8.self)), tid >= 0, !parts[1].isEmpty,
              parts[1].count <= 32, parts[1].allSatisfy({ ReportText.isAlnum($0) || $0 == 0x5F }) else {
            return malformed("bad thread")
        }
        guard !report.threads.contains(where: { $0.tid == tid }) else { return malformed("repeated thread \(tid)") }
        let status = String(decoding: parts[1], as: UTF8.self)
        let name = status == VAKA_REPORT_THREAD_CRASHED && rest.isEmpty ? report.threadName ?? "" : ReportText.unescape(rest)
        report.threads.append(CrashReport.ThreadEntry(tid: tid, status: status, name: name))
    }

    /// A `thread_proc` line: `<tid> <state> <syscall|running> <sp|-> <pc|->`, for a thread listed before it.
    private mutating func threadProc(_ value: String) {
        let parts = ReportText.words(value, max: 5)
        guard parts.count == 5, let tid = Int64(parts[0]), let index = report.threads.lastIndex(where: { $0.tid == tid }),
              report.threads[index].proc == nil, parts[1].utf8.count == 1 else { return malformed("bad thread_proc") }
        let syscall: Int64? = parts[2] == "running" ? nil : Int64(parts[2])
        guard parts[2] == "running" || syscall != nil else { return malformed("bad thread_proc") }
        func address(_ text: String) -> UInt64?? {
            text == VAKA_REPORT_VALUE_UNKNOWN ? .some(nil) : ReportText.hex(text).map { .some($0) }
        }
        guard let sp = address(parts[3]), let pc = address(parts[4]) else { return malformed("bad thread_proc") }
        report.threads[index].proc = CrashReport.ProcState(state: parts[1], syscall: syscall, stackPointer: sp, pc: pc)
    }

    /// A `thread_frames` line: `<tid> <method> <frame>... [+]`, for a thread listed before it. A frame is
    /// `<image>:<offset>` or a bare hex address.
    private mutating func threadFrames(_ value: String) {
        let parts = value.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count >= 3, let tid = Int64(parts[0]), let index = report.threads.lastIndex(where: { $0.tid == tid }),
              pendingThreadFrames[index] == nil, !parts[1].isEmpty, parts[1].utf8.count <= 32,
              parts[1].utf8.allSatisfy({ ReportText.isAlnum($0) || $0 == 0x5F }) else {
            return malformed("bad thread_frames")
        }
        var tokens: [ThreadFrameToken] = []
        var truncated = false
        var lastImage: Int?
        for (position, part) in parts.dropFirst(2).enumerated() {
            if part == VAKA_REPORT_THREAD_FRAMES_MORE, position == parts.count - 3 {
                truncated = true
                break
            }
            guard tokens.count < CrashReport.maxThreadFrames else {
                truncated = true
                break
            }
            if let colon = part.firstIndex(of: ":") {
                // `:<offset>`: the same image as the previous frame.
                let image = colon == part.startIndex ? lastImage : Int(part[..<colon])
                guard let image, image >= 0, let offset = ReportText.bareHex(part[part.index(after: colon)...]) else {
                    return malformed("bad thread_frames frame")
                }
                tokens.append(.imageOffset(image: image, offset: offset))
                lastImage = image
            } else {
                guard let address = ReportText.bareHex(part) else { return malformed("bad thread_frames frame") }
                tokens.append(.address(address))
                lastImage = nil
            }
        }
        pendingThreadFrames[index] = tokens
        report.threads[index].framesTruncated = truncated
        // The first frame is the thread's PC; the method says how the others were found.
        methodByThread[index] = String(parts[1])
    }

    /// How the frames of each `thread_frames` line after its first were found, by thread index.
    private var methodByThread: [Int: String] = [:]

    /// The `thread_frames` frames as addresses, now that every `image` line is read: `<image>:<offset>` is that
    /// image's base plus the offset; a frame naming an image the report does not have is dropped (counted as
    /// malformed).
    mutating func resolveThreadFrames(into report: inout CrashReport) {
        for (index, tokens) in pendingThreadFrames where index < report.threads.count {
            var frames: [CrashReport.Frame] = []
            for (position, token) in tokens.enumerated() {
                let method = position == 0 ? VAKA_REPORT_FRAME_METHOD_CONTEXT : methodByThread[index]
                switch token {
                case .address(let address):
                    frames.append(CrashReport.Frame(address: address, method: method))
                case .imageOffset(let image, let offset):
                    guard image < report.images.count else {
                        report.diagnostics.malformedLines += 1
                        continue
                    }
                    frames.append(CrashReport.Frame(address: report.images[image].base &+ offset, method: method))
                }
            }
            report.threads[index].frames = frames
        }
    }

    /// An `image` line: `<base> <size> <build-id> <path>`; the path is the rest of the line and may hold spaces.
    private mutating func image(_ value: ArraySlice<UInt8>) {
        var rest = value[...]
        var parts: [ArraySlice<UInt8>] = []
        for _ in 0..<3 {
            guard let space = rest.firstIndex(of: 0x20) else { break }
            parts.append(rest[..<space])
            rest = rest[(space + 1)...]
        }
        guard parts.count == 3,
              let base = ReportText.hex(String(decoding: parts[0], as: UTF8.self)),
              let size = ReportText.hex(String(decoding: parts[1], as: UTF8.self)) else {
            return malformed("bad image")
        }
        let idText = String(decoding: parts[2], as: UTF8.self)
        var buildID: String?
        if idText != VAKA_REPORT_VALUE_UNKNOWN {
            if idText.utf8.count <= CrashReport.maxBuildIDDigits, let bytes = DebugID.hexBytes(idText), !bytes.isEmpty {
                buildID = idText.lowercased()
            } else {
                note("line \(lineNumber): image build ID is not hex, ignored")
            }
        }
        var path = rest.elementsEqual(VAKA_REPORT_VALUE_UNKNOWN.utf8) || rest.isEmpty ? nil : ReportText.unescape(rest)
        if let text = path, text.contains("\u{0}") {
            // A NUL would cut the path short when it is opened: some other file. Unknown instead.
            note("line \(lineNumber): image path holds a NUL byte, treated as unknown")
            path = nil
        }
        report.images.append(CrashReport.Image(base: base, size: size, buildID: buildID, path: path))
    }

    /// A single-value text field: unescaped, then `transform`ed (`nil` leaves the field unknown).
    private mutating func setText(_ key: ReportKey, _ value: ArraySlice<UInt8>,
                                  _ field: WritableKeyPath<CrashReport, String?>,
                                  _ transform: (String) -> String? = { $0 }) {
        guard once(key) else { return }
        report[keyPath: field] = transform(ReportText.unescape(value))
        seen.insert(key)
    }

    /// A single-value decimal field; a value that does not parse (or is negative when `nonNegative`) is malformed.
    private mutating func setNumber<T: FixedWidthInteger>(_ key: ReportKey, _ value: String,
                                                          _ field: WritableKeyPath<CrashReport, T?>,
                                                          nonNegative: Bool = false) {
        guard once(key) else { return }
        guard let number = T(value), !nonNegative || number >= 0 else {
            return malformed("bad \(key.name) \"\(ReportText.escapeForDisplay(Array(value.utf8).prefix(40)))\"")
        }
        report[keyPath: field] = number
        seen.insert(key)
    }
}

/// The name of signal `number` from the runtime's table (`vaka_signal_name`, the one the writer uses), or
/// `SIG<number>` for a number the table does not know (real-time signals, e.g. `SIG40`); for a `signal` line
/// without a name.
func signalName(_ number: Int32) -> String {
    vaka_signal_name(number).map { String(cString: $0) } ?? "SIG\(number)"
}
