import Foundation
import VakaCrash

/// A crash report file (`docs/report-format.md`, versions 1 and 2) parsed into typed values.
///
/// The reader (`ReportParser`) takes the format's magic, keys, special values and limits from the report contract
/// header `include/vaka/vaka_report_format.h`, which the C writer uses too, and names signals with the writer's
/// table (`vaka_signal_name`).
///
/// Reports come from a process that was dying, so the reader is lenient where it can be and strict
/// where it must be:
/// - Required: the header line `VAKA-CRASH 2` (or `VAKA-CRASH 1`, written before thread lines existed) and a
///   valid `signal` line. Without them parsing throws
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
    /// The newest report format version this reader understands (`VAKA-CRASH 2`): the writer's
    /// `VAKA_REPORT_VERSION`.
    public static let supportedVersion = Int(VAKA_REPORT_VERSION)
    /// Every version this reader understands: `VAKA_REPORT_VERSION_MIN` (1, reports without thread lines) up to
    /// ``supportedVersion``.
    public static let supportedVersions = Int(VAKA_REPORT_VERSION_MIN)...Int(VAKA_REPORT_VERSION)
    /// Most `thread` lines kept (1024): eight times what the writer lists (`VAKA_REPORT_MAX_THREADS`, 128); later
    /// ones count as malformed.
    public static let maxThreads = 8 * Int(VAKA_REPORT_MAX_THREADS)
    /// Most frames kept from one `thread_frames` line (512): eight times what the writer records
    /// (`VAKA_REPORT_MAX_THREAD_FRAMES`, 64); the rest are dropped and the thread marked truncated.
    public static let maxThreadFrames = 8 * Int(VAKA_REPORT_MAX_THREAD_FRAMES)
    /// Longest line accepted, in bytes without the `\n` (64 KiB): the contract's `VAKA_REPORT_MAX_LINE`
    /// (`include/vaka/vaka_report_format.h`). A valid report line is far shorter (paths and messages are capped
    /// at 4096 bytes before escaping).
    public static let maxLineLength = Int(VAKA_REPORT_MAX_LINE)
    /// Most bytes read from a report file (8 MiB). A valid report is far smaller (≤ 512 images with
    /// ≤ 4 KiB paths); a longer file is read up to this size and treated as truncated.
    public static let maxFileSize = 8 * 1024 * 1024
    /// Most `frame` lines kept (1024): eight times what the writer records (`VAKA_REPORT_MAX_FRAMES`, 128), so a
    /// report of a runtime with a higher limit still reads whole; later ones count as malformed.
    public static let maxFrames = 8 * Int(VAKA_REPORT_MAX_FRAMES)
    /// Most `image` lines kept (4096): eight times what the writer records (`VAKA_MAX_IMAGES`, 512); later ones
    /// count as malformed.
    public static let maxImages = 8 * Int(VAKA_MAX_IMAGES)
    /// Most `register` lines kept; later ones count as malformed.
    public static let maxRegisters = 256
    /// Longest build ID accepted on an `image` line, in hex digits (256): twice the digits of the longest one the
    /// writer records (`VAKA_REPORT_BUILD_ID_MAX`, 64 bytes); a longer one is ignored (the image gets none).
    static let maxBuildIDDigits = 4 * Int(VAKA_REPORT_BUILD_ID_MAX)

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

    /// One general register of the crashed thread at the fault: a `<name> <hex>` pair of the `register` line
    /// (version 2 writes every register on one line, version 1 one line each).
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

    /// The `threads` line: how many threads the process had and how many are listed (version 2).
    public struct ThreadCount: Equatable, Sendable {
        /// Threads of the process at the crash (entries of `/proc/self/task`).
        public var total: Int
        /// Threads listed in `thread` lines (at most `VAKA_REPORT_MAX_THREADS`); fewer than ``total`` means capped.
        public var listed: Int
        /// How long the crashed thread waited for the others to unwind themselves, in nanoseconds.
        public var waitNs: UInt64
    }

    /// What `/proc/self/task/<tid>/{stat,syscall}` said of a thread that did not unwind itself (`thread_proc`).
    public struct ProcState: Equatable, Sendable {
        /// The state letter of `stat` (`R` running, `S` sleeping, `D` disk sleep, `T` stopped, `t` traced,
        /// `Z` zombie...; `?` when unreadable).
        public var state: String
        /// The system call it sits in (its number), `-1` blocked outside one, `nil` running (none to report).
        public var syscall: Int64?
        /// Its stack pointer, when the kernel gave one.
        public var stackPointer: UInt64?
        /// Its PC (user space), when the kernel gave one.
        public var pc: UInt64?
    }

    /// One thread of the process at the crash (`thread`, `thread_proc`, `thread_frames` lines; version 2).
    public struct ThreadEntry: Equatable, Sendable {
        /// Kernel thread id.
        public var tid: Int64
        /// How it was captured: `crashed` (its frames are ``CrashReport/frames``), `ok` (it unwound itself from its
        /// own registers), `partial` (it had not finished at the deadline), `blocked` (it blocks the thread signal),
        /// `missed` (no answer in time), `gone` (it ended meanwhile), or a later status.
        public var status: String
        /// Its name (`comm`, at most 15 bytes).
        public var name: String
        /// What `/proc` said of it, for `blocked` and `missed` threads.
        public var proc: ProcState?
        /// Its frames, newest first, the first its PC (empty for the crashed thread: see ``CrashReport/frames``).
        public var frames: [Frame] = []
        /// The walk stopped at `VAKA_REPORT_MAX_THREAD_FRAMES` (a `+` after the frames), or the reader's cap.
        public var framesTruncated = false
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

    /// Format version from the header line; one of ``supportedVersions`` after a successful parse.
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
    /// The run journal's last sequence number at the crash (`journal_seq`): the journal records with a sequence
    /// number up to it were appended before the crash (a record being written then may be torn). `nil` when no
    /// journal was registered with the crash handler.
    public var journalSeq: UInt64?
    /// General registers at the fault, in report order.
    public var registers: [Register] = []
    /// Frames of the crashed thread, **newest first** as in the report (the first is the crash site).
    public var frames: [Frame] = []
    /// Set when the unwinder stopped at its frame limit: the count of frames it wrote.
    public var framesTruncated: Int?
    /// Loaded images, in report order.
    public var images: [Image] = []
    /// The `threads` line (version 2): total and listed threads, and the wait; `nil` in a version 1 report or one
    /// cut before it.
    public var threadCount: ThreadCount?
    /// Every listed thread, in report order: the crashed one first (version 2; empty in a version 1 report).
    public var threads: [ThreadEntry] = []
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
        pid.map { "\(runID)-\($0)\(VAKA_REPORT_FILE_SUFFIX)" } ?? "\(runID)\(VAKA_REPORT_FILE_SUFFIX)"
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
        let (data, cut) = try ReportParser.readFile(path)
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
        self = try ReportParser.parse(data, cutAtSizeLimit: cutAtSizeLimit)
    }
}
