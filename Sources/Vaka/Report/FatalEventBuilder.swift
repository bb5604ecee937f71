import Foundation
import VakaCrash
import VakaSymbolication

/// Turns a ``CrashReport`` into a Sentry fatal ``Event`` (the JSON contract of `vaka report convert`).
///
/// What comes from where:
/// - `event_id`: the report's run id without dashes, lower-case, when that gives 32 hex digits; otherwise
///   a stable hash of the run id; for a fork child's report (``CrashReport/isForkChild``) a stable hash of
///   run id and pid, so the parent's and each child's crash get distinct ids and a re-send keeps its id
///   (see ``eventID(forRunID:forkChildPID:)``).
/// - `timestamp`: `timestamp_ns` in seconds. `platform` `native`, `level` `fatal`, `sdk` ``sdk``.
/// - `exception.values[0]`: `type` the signal name, `value` ``exceptionValue(for:)``, mechanism
///   `signalhandler` with `meta.signal` and `data.relevant_address` (the fault address, when recorded).
/// - `threads.values`: the crashed thread first (tid, name, `crashed` and `current` `true`), with the same stack
///   trace as the exception; then every other thread of the report (version 2: ``CrashReport/threads``), in report
///   order, with its own stack trace mapped and symbolicated like the crashed one's (the same ``symbolicator``,
///   hence the same symbol cache; one image admission over all threads, the crashed one first). A thread that was
///   not unwound from its own registers gets a `state` saying why and what its frames are
///   (``threadState(_:)``). At most ``maxThreads`` threads and ``maxThreadFrames`` frames per thread (before
///   inlined frames are expanded) are kept; `extra.threads_total`/`threads_listed` say when the report or this
///   cap left threads out, `extra.thread_frames_truncated` lists the ids of threads whose frames were cut, and
///   `extra.threads_unknown` says when the crashed process could not list its threads (a `threads` total of 0).
/// - Stack trace: the report's frames reversed (oldest first, crash site last). A frame gets `package`,
///   `image_addr` and `in_app` from the image it lies in (``isInApp(imagePath:executable:)``; the executable
///   is the `executable` line or else the first image; frames in the first image are in-app also when its
///   path is unknown). The ``symbolicator`` finds the image's files by
///   build ID (the file on disk if its build ID still matches, else debug files) and fills `function`
///   (demangled), `symbol` (raw) and `symbol_addr` from the ELF symbol tables or DWARF, and `filename`,
///   `lineno`, `colno` from DWARF; an address in inlined code becomes several frames with the same
///   `instruction_addr`, the real function first and the innermost inlined function last (only the real
///   function has `symbol_addr`). Caller frames are looked up at `address - 1` (the call instruction), the
///   crash site at its address.
/// - `debug_meta.images`: the images some frame points into, in report order, with `code_id` (build ID)
///   and `debug_id` (``DebugID/fromBuildID(_:)``; for an image without build ID the `.text` hash of its
///   file, and an image without either, such as the vDSO, is left out); an image with an unknown path gets
///   `code_file` ``unknownCodeFile``.
/// - At most ``Symbolicator/maxImagesPerReport`` distinct images (the first ones in frame order) are
///   symbolicated; frames in further images keep address, package and image only, and `extra` counts those
///   images in `images_not_symbolicated`.
/// - `extra`: `run_id`, `pid`, `fork_child` (only `true`, for a fork child's report), `fatal_message`, `abort_message`, `capture_ns`, `report_truncated`, and when
///   present `frames_truncated`, `sender_pid`/`sender_uid`, `report_skipped_lines`, `images_not_symbolicated`. A truncated report also
///   gets the tag `vaka.report_truncated: "true"`.
public struct FatalEventBuilder {
    /// The SDK info put in every event: `vaka.swift` `0.1.0`.
    public static let sdk = SDKInfo.vaka

    /// The `code_file` of a `debug_meta` image whose path the report does not know (`-`): `<unknown>`
    /// (Relay rejects native images without `code_file`).
    public static let unknownCodeFile = "<unknown>"

    /// Looks up function names in the images' ELF files; `nil` leaves `function`/`symbol` out.
    /// Reuse one symbolicator across reports of one run so each image is opened once.
    public var symbolicator: Symbolicator?

    /// Creates a builder. Pass `symbolicator: nil` to skip symbolication.
    public init(symbolicator: Symbolicator? = Symbolicator()) {
        self.symbolicator = symbolicator
    }

    /// Most threads an event lists (128, the writer's `VAKA_REPORT_MAX_THREADS`), the crashed one included.
    public static let maxThreads = Int(VAKA_REPORT_MAX_THREADS)
    /// Most frames kept for a thread other than the crashed one (64, the writer's `VAKA_REPORT_MAX_THREAD_FRAMES`),
    /// the newest ones.
    public static let maxThreadFrames = Int(VAKA_REPORT_MAX_THREAD_FRAMES)

    /// The fatal event for `report`. Never fails: a partial report gives a partial event, marked truncated.
    public func event(from report: CrashReport) -> Event {
        var reportFrames = report.frames
        if reportFrames.isEmpty, let pc = report.registers.first(where: { ["rip", "pc"].contains($0.name) }) {
            // Cut before the first frame line: the PC from the signal context is still the crash site.
            reportFrames = [CrashReport.Frame(address: pc.value, method: "context")]
        }
        // The main executable: the `executable` line, else the first image (the writer lists it first).
        let executable = report.executable ?? report.images.first?.path
        // The other threads (version 2), at most maxThreads in all, each at most maxThreadFrames frames.
        var others = report.threads.filter { $0.tid != report.tid && $0.status != VAKA_REPORT_THREAD_CRASHED }
        let othersCut = others.count > FatalEventBuilder.maxThreads - 1
        others = Array(others.prefix(FatalEventBuilder.maxThreads - 1))
        var framesCut: [Int64] = []
        for index in others.indices where others[index].framesTruncated || others[index].frames.count > FatalEventBuilder.maxThreadFrames {
            others[index].frames = Array(others[index].frames.prefix(FatalEventBuilder.maxThreadFrames))
            framesCut.append(others[index].tid)
        }
        let stacks = [reportFrames] + others.map(\.frames)
        let mapped = mapThreads(stacks.map { NativeStack(frames: $0, images: report.images, executable: executable,
                                                         arch: report.arch) })
        let frames = mapped.frames[0]
        let images = mapped.images
        let skippedImages = mapped.imagesNotSymbolicated
        let registers = Dictionary(report.registers.map { ($0.name, HexAddress($0.value)) },
                                   uniquingKeysWith: { first, _ in first })
        let stacktrace = frames.isEmpty ? nil : Stacktrace(frames: frames, registers: registers.isEmpty ? nil : registers)

        var data: [String: JSONValue]?
        if let fault = report.faultAddress {
            data = ["relevant_address": .string(HexAddress(fault).description)]
        }
        let mechanism = Mechanism(
            type: "signalhandler", handled: false,
            meta: MechanismMeta(signal: SignalMeta(number: report.signal.number, code: report.code?.value,
                                                   name: report.signal.name, codeName: report.code?.name)),
            data: data)
        let exception = Exception(type: report.signal.name, value: FatalEventBuilder.exceptionValue(for: report),
                                  threadID: report.tid, mechanism: mechanism, stacktrace: stacktrace)
        let thread = SentryThread(id: report.tid, name: report.threadName, crashed: true, current: true,
                                  stacktrace: stacktrace)
        var threadValues = [thread]
        for (index, entry) in others.enumerated() {
            let threadFrames = mapped.frames[index + 1]
            threadValues.append(SentryThread(id: entry.tid, name: entry.name, crashed: false, current: false,
                                             stacktrace: threadFrames.isEmpty ? nil : Stacktrace(frames: threadFrames),
                                             state: FatalEventBuilder.threadState(entry)))
        }
        var threadsTotal: Int?
        if let count = report.threadCount, count.total > min(count.listed, FatalEventBuilder.maxThreads) || othersCut {
            threadsTotal = max(count.total, report.threads.count)
        } else if othersCut {
            threadsTotal = report.threads.count
        }

        let skipped = report.diagnostics.skippedLongLines + report.diagnostics.malformedLines
        // The report's facts the Sentry event has no field for, as `extra` (an entry without a value is left out).
        let notes: [String: JSONValue?] = [
            "report_truncated": .bool(report.isTruncated),
            "run_id": report.runID.map(JSONValue.string),
            "pid": report.pid.map(JSONValue.int),
            "fork_child": report.isForkChild ? .bool(true) : nil,
            "fatal_message": report.fatalMessage.map(JSONValue.string),
            "abort_message": report.abortMessage.map(JSONValue.string),
            "capture_ns": report.captureNs.map { .int(Int64(clamping: $0)) },
            "frames_truncated": report.framesTruncated.map { .int(Int64($0)) },
            "sender_pid": report.sender.map { .int($0.pid) },
            "sender_uid": report.sender.map { .int(Int64($0.uid)) },
            "report_skipped_lines": skipped > 0 ? .int(Int64(skipped)) : nil,
            "images_not_symbolicated": symbolicator != nil && skippedImages > 0 ? .int(Int64(skippedImages)) : nil,
            "threads_total": threadsTotal.map { .int(Int64($0)) },
            "threads_listed": threadsTotal != nil ? .int(Int64(threadValues.count)) : nil,
            "thread_frames_truncated": framesCut.isEmpty ? nil : .array(framesCut.map { .int($0) }),
            "threads_wait_ns": report.threadCount.map { .int(Int64(clamping: $0.waitNs)) },
            "threads_unknown": report.threadCount?.total == 0
                ? .string("the threads could not be listed (/proc/self/task unreadable at the crash): only the crashed thread") : nil,
        ]
        let extra = notes.compactMapValues { $0 }

        return Event(
            eventID: FatalEventBuilder.eventID(forRunID: report.runID, forkChildPID: report.isForkChild ? report.pid : nil),
            timestamp: report.timestampNs.map { Double($0) / 1_000_000_000 },
            platform: "native",
            level: .fatal,
            sdk: FatalEventBuilder.sdk,
            contexts: Contexts(device: DeviceContext(arch: report.arch), os: OSContext(name: "Linux")),
            exception: ValueList([exception]),
            threads: ValueList(threadValues),
            debugMeta: images.isEmpty ? nil : DebugMeta(images: images),
            extra: extra,
            tags: report.isTruncated ? ["vaka.report_truncated": "true"] : nil)
    }

    /// The event id for a run id: the run id without dashes, lower-case, when that is 32 hex digits (a UUID);
    /// otherwise 32 hex digits hashed from the run id (FNV-1a, two seeds), so converting a report twice gives
    /// the same id. With `forkChildPID` (the report of a child made with `fork()`, file `<run_id>-<pid>.crash`)
    /// the id is hashed from run id and pid instead, so it differs from the parent's and from every other
    /// child's, and stays the same when the report is converted again. A missing run id gives a random id.
    public static func eventID(forRunID runID: String?, forkChildPID: Int64? = nil) -> String {
        guard let runID else { return RandomID.hex32() }
        let compact = runID.replacingOccurrences(of: "-", with: "").lowercased()
        if forkChildPID == nil, compact.utf8.count == 32,
           compact.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) {
            return compact
        }
        // A NUL between them: a run id "R-P" of its own never hashes like the child P of run R.
        let key = forkChildPID.map { "\(runID)\u{0}\($0)" } ?? runID
        func fnv(_ seed: UInt64) -> UInt64 {
            var hash = seed
            for byte in key.utf8 {
                hash ^= UInt64(byte)
                hash = hash &* 0x100000001b3
            }
            return hash
        }
        let high = String(fnv(0xcbf29ce484222325), radix: 16)
        let low = String(fnv(0x84222325cbf29ce4), radix: 16)
        return String(repeating: "0", count: 16 - high.count) + high + String(repeating: "0", count: 16 - low.count) + low
    }

    /// The Mach exception macOS developers know for a signal name: SIGSEGV and SIGBUS → `EXC_BAD_ACCESS`,
    /// SIGTRAP → `EXC_BREAKPOINT`, SIGILL → `EXC_BAD_INSTRUCTION`, SIGFPE → `EXC_ARITHMETIC`,
    /// SIGABRT → `EXC_CRASH`; `nil` for other signals.
    public static func machException(forSignal name: String) -> String? {
        switch name {
        case "SIGSEGV", "SIGBUS": return "EXC_BAD_ACCESS"
        case "SIGTRAP": return "EXC_BREAKPOINT"
        case "SIGILL": return "EXC_BAD_INSTRUCTION"
        case "SIGFPE": return "EXC_ARITHMETIC"
        case "SIGABRT": return "EXC_CRASH"
        default: return nil
        }
    }

    /// The exception's human sentence: `<Mach exception> / <signal> (<si_code name>)`, then ` at <fault address>`
    /// for SIGSEGV and SIGBUS (where it is a data address), then `: <message>` with the Swift fatal-error
    /// message or else glibc's abort message. E.g. `EXC_BAD_ACCESS / SIGSEGV (SEGV_MAPERR) at 0x0`,
    /// `EXC_BAD_INSTRUCTION / SIGILL (ILL_ILLOPN): Fatal error: Unexpectedly found nil while unwrapping an
    /// Optional value`. An unknown si_code shows as `si_code <n>`.
    public static func exceptionValue(for report: CrashReport) -> String {
        var text = ""
        if let mach = machException(forSignal: report.signal.name) { text = mach + " / " }
        text += report.signal.name
        if let code = report.code {
            text += code.name == "UNKNOWN" ? " (si_code \(code.value))" : " (\(code.name))"
        }
        if let fault = report.faultAddress, report.signal.name == "SIGSEGV" || report.signal.name == "SIGBUS" {
            text += " at \(HexAddress(fault))"
        }
        let message = (report.fatalMessage ?? report.abortMessage)?.trimmingCharacters(in: .whitespacesAndNewlines)
        if let message, !message.isEmpty { text += ": " + message }
        return text
    }

    // MARK: - Frames and images

    /// The address to look up for the report frame at `index` (newest first): the crash site as is,
    /// callers at return address - 1.
    private static func lookupAddress(_ frame: CrashReport.Frame, index: Int) -> UInt64 {
        index == 0 || frame.address == 0 ? frame.address : frame.address - 1
    }

    /// The directory part of `path`: everything before its last `/` ("" when there is none).
    /// Not `NSString.deletingLastPathComponent`: swift-corelibs-foundation (Swift 6.3.1) traps on a
    /// one-character path such as "1" (found by scripts/fuzz; see Tests/VakaCrashTests/FuzzRegressionTests).
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return String(path[..<slash])
    }

    /// The native stack of one thread as the frame mapping takes it, from a crash report or from a capture in the
    /// running process (``StackCapture``).
    struct NativeStack: Sendable {
        /// The frames, newest first: the crash site (or the newest caller) first, then return addresses.
        var frames: [CrashReport.Frame]
        /// The loaded images, the main executable first when known.
        var images: [CrashReport.Image]
        /// Path of the main executable (for `in_app`); `nil` when unknown.
        var executable: String?
        /// CPU architecture of the images (`debug_meta.images[].arch`), e.g. `"x86_64"`.
        var arch: String?

        /// Creates a native stack; every field is described on its property.
        init(frames: [CrashReport.Frame], images: [CrashReport.Image], executable: String?, arch: String?) {
            self.frames = frames
            self.images = images
            self.executable = executable
            self.arch = arch
        }
    }

    /// Sentry's thread `state` for a thread of the report that was not unwound from its own registers: what it was
    /// doing (from `/proc`) and where its frames come from; `nil` for a thread that unwound itself (`ok`).
    public static func threadState(_ entry: CrashReport.ThreadEntry) -> String? {
        var where_ = ""
        if let proc = entry.proc {
            let states = ["R": "running", "S": "sleeping", "D": "in uninterruptible sleep", "T": "stopped",
                          "t": "stopped by a tracer", "Z": "a zombie", "X": "dead", "I": "idle"]
            where_ = states[proc.state] ?? "in state \(proc.state)"
            if let call = proc.syscall { where_ += call >= 0 ? " in system call \(call)" : " outside a system call" }
        }
        // How the callers were found: the method of the frames after the PC (`cfi` from the PC and stack pointer,
        // else a stack scan).
        let callers = entry.frames.count < 2 ? "no callers found"
            : entry.frames[1].method == VAKA_REPORT_FRAME_METHOD_SCAN ? "callers from a stack scan (may include stale return addresses)"
            : "callers unwound from them (\(entry.frames[1].method ?? VAKA_REPORT_FRAME_METHOD_CFI))"
        let frames = entry.proc?.pc != nil ? "PC and stack pointer from /proc/self/task/\(entry.tid)/syscall, \(callers)"
                                           : "no frames (the kernel gave no registers)"
        switch entry.status {
        case VAKA_REPORT_THREAD_OK:
            return nil
        case VAKA_REPORT_THREAD_PARTIAL:
            return "did not finish unwinding itself before the deadline: the frames it had"
        case VAKA_REPORT_THREAD_BLOCKED:
            return "\(where_.isEmpty ? "" : where_ + "; ")blocks the signal that asks a thread to unwind itself: \(frames)"
        case VAKA_REPORT_THREAD_MISSED:
            return "\(where_.isEmpty ? "" : where_ + "; ")did not answer before the deadline: \(frames)"
        case VAKA_REPORT_THREAD_UNASKED:
            return "\(where_.isEmpty ? "" : where_ + "; ")not asked to unwind itself (the program had taken over the signal that asks, or it could not be sent): \(frames)"
        case VAKA_REPORT_THREAD_OWN:
            // Listed by the name the SDK gave it; a report of an earlier build may still describe it from /proc.
            return entry.proc == nil ? "Vaka's own thread: not unwound (the crash does not wait for it)"
                : "\(where_.isEmpty ? "" : where_ + "; ")Vaka's own thread, not asked to unwind itself (the crash does not wait for it): \(frames)"
        case VAKA_REPORT_THREAD_GONE:
            return "ended during the capture"
        default:
            return entry.status
        }
    }

    /// ``map(_:)`` for the threads of one report: `stacks` share their images; one image admission over all of
    /// them, in order (the crashed thread first), so the first images met are symbolicated; the `debug_meta`
    /// images are those any thread's frames point into. The frames come back per stack, in the order given.
    func mapThreads(_ stacks: [NativeStack]) -> (frames: [[Frame]], images: [DebugImage], imagesNotSymbolicated: Int) {
        guard let first = stacks.first else { return ([], [], 0) }
        var admission = ImageAdmission()
        var used = Set<Int>()
        for stack in stacks {
            for address in FatalEventBuilder.lookupAddresses(stack) {
                guard let index = first.images.firstIndex(where: { $0.contains(address) }) else { continue }
                _ = admission.admits(index)
                used.insert(index)
            }
        }
        let frames = stacks.map { stackFrames($0, symbolicating: admission.allowed) }
        let combined = NativeStack(frames: stacks.flatMap(\.frames), images: first.images, executable: first.executable,
                                   arch: first.arch)
        return (frames, debugImages(combined, symbolicating: admission.allowed, used: used), admission.skipped.count)
    }

    /// The event frames (oldest first, inlined functions expanded) and the `debug_meta` images of `stack`, and how
    /// many images frames point into were not symbolicated (beyond ``Symbolicator/maxImagesPerReport``). The one
    /// frame mapping of fatal and handled events (see the type's documentation for the fields).
    func map(_ stack: NativeStack) -> (frames: [Frame], images: [DebugImage], imagesNotSymbolicated: Int) {
        let (allowed, skipped) = FatalEventBuilder.imagesToSymbolicate(stack)
        return (stackFrames(stack, symbolicating: allowed), debugImages(stack, symbolicating: allowed), skipped)
    }

    private func image(for address: UInt64, in stack: NativeStack) -> (index: Int, image: CrashReport.Image)? {
        guard let index = stack.images.firstIndex(where: { $0.contains(address) }) else { return nil }
        return (index, stack.images[index])
    }

    /// The lookup addresses of the stack's frames (newest first).
    private static func lookupAddresses(_ stack: NativeStack) -> [UInt64] {
        stack.frames.enumerated().map { lookupAddress($1, index: $0) }
    }

    /// Indexes (into `stack.images`) of the images frames point into that are symbolicated: the first
    /// ``Symbolicator/maxImagesPerReport`` in frame order; and how many further images are left out.
    private static func imagesToSymbolicate(_ stack: NativeStack) -> (Set<Int>, Int) {
        var admission = ImageAdmission()
        for address in lookupAddresses(stack) {
            guard let index = stack.images.firstIndex(where: { $0.contains(address) }) else { continue }
            _ = admission.admits(index)
        }
        return (admission.allowed, admission.skipped.count)
    }

    private func stackFrames(_ stack: NativeStack, symbolicating allowed: Set<Int>) -> [Frame] {
        let reportFrames = stack.frames
        let executable = stack.executable
        var frames: [Frame] = []
        frames.reserveCapacity(reportFrames.count)
        if let symbolicator {
            // Open the images' files (symbol tables, DWARF) and look the frames up, several images at a time.
            var used: [(imagePath: String?, buildID: String, imageBase: UInt64, address: UInt64?)] = []
            for (index, reportFrame) in reportFrames.enumerated() {
                let lookup = FatalEventBuilder.lookupAddress(reportFrame, index: index)
                if let (imageIndex, image) = image(for: lookup, in: stack), allowed.contains(imageIndex),
                   let buildID = image.buildID {
                    used.append((image.path, buildID, image.base, lookup))
                }
            }
            symbolicator.preload(addresses: used)
        }
        for (index, reportFrame) in reportFrames.enumerated() {
            let lookup = FatalEventBuilder.lookupAddress(reportFrame, index: index)
            var frame = Frame(instructionAddr: HexAddress(reportFrame.address), trust: reportFrame.method, inApp: false)
            guard let (imageIndex, image) = image(for: lookup, in: stack) else {
                frames.append(frame)
                continue
            }
            frame.imageAddr = HexAddress(image.base)
            frame.package = image.path
            if let path = image.path {
                frame.inApp = FatalEventBuilder.isInApp(imagePath: path, executable: executable)
            } else if imageIndex == 0 {
                frame.inApp = true  // the writer lists the main executable first, even when its path is unknown
            }
            var symbolicated: [SymbolicatedFrame] = []
            if let symbolicator, allowed.contains(imageIndex), let path = image.path {
                let debugID = image.buildID == nil && path.hasPrefix("/") ? symbolicator.textHashDebugID(imagePath: path) : nil
                symbolicated = symbolicator.symbolicate(address: lookup, imagePath: path, imageBase: image.base,
                                                        buildID: image.buildID, debugID: debugID)
            }
            // Newest first here (reversed below): the innermost inlined function first.
            frames.append(contentsOf: FatalEventBuilder.expand(frame, with: symbolicated).reversed())
        }
        return frames.reversed()
    }

    /// `frame` filled in from `symbolicated` (innermost first, as ``Symbolicator/symbolicate(address:imagePath:imageBase:buildID:debugID:)``
    /// returns it), as event frames OLDEST FIRST: the real function first, then the functions inlined into
    /// it, the innermost last. Every frame keeps `frame`'s address, trust, package, image and in_app; only
    /// the real function gets `symbol_addr`. `[frame]` unchanged when `symbolicated` is empty.
    /// A frame whose function is support code linked into the app (``isLinkedSupportCode(symbol:)``) gets
    /// `in_app` `false` even when `frame` had `true`.
    public static func expand(_ frame: Frame, with symbolicated: [SymbolicatedFrame]) -> [Frame] {
        guard !symbolicated.isEmpty else { return [frame] }
        return symbolicated.reversed().map { info in
            var result = frame
            if result.inApp == true, isLinkedSupportCode(symbol: info.symbol) { result.inApp = false }
            result.function = info.function
            result.symbol = info.symbol
            result.symbolAddr = info.symbolAddress.map(HexAddress.init)
            result.filename = info.file
            result.lineno = info.line
            result.colno = info.column
            return result
        }
    }

    /// Whether an image is the application's own code (`in_app`): the main executable itself, and libraries
    /// that live in its directory or below it (the app's build or install directory), except the Swift
    /// runtime and toolchain libraries shipped beside an app (`libswift*`, `libFoundation*`,
    /// `lib_FoundationICU`, `libdispatch`, `libBlocksRuntime`, `libXCTest`, `libTesting`) and anything
    /// under the system directories `/lib`, `/lib64`, `/usr/lib`, `/usr/lib64`, `/usr/libexec`. Paths are
    /// compared as written in the report. `false` when the executable is unknown.
    /// This is the image half of the `in_app` rule; the function half is ``isLinkedSupportCode(symbol:)``:
    /// a frame is in-app when its image is and its function (when known) is not linked-in support code.
    public static func isInApp(imagePath: String, executable: String?) -> Bool {
        guard let executable, imagePath.hasPrefix("/") else { return false }
        if imagePath == executable { return true }
        for prefix in ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/libexec/"] where imagePath.hasPrefix(prefix) {
            return false
        }
        let name = (imagePath as NSString).lastPathComponent
        let runtimePrefixes = ["libswift", "libFoundation", "lib_FoundationICU", "libdispatch.", "libBlocksRuntime.",
                               "libXCTest.", "libTesting.", "ld-linux", "libc.so", "libstdc++", "libgcc_s"]
        if runtimePrefixes.contains(where: { name.hasPrefix($0) }) { return false }
        let directory = FatalEventBuilder.directory(of: executable)
        guard !directory.isEmpty, directory != "/" else { return false }
        return imagePath.hasPrefix(directory + "/")
    }

    /// Symbols that the toolchain links into the app's own executable or libraries but that are not the
    /// app's code, so their frames are never `in_app` (the function half of the `in_app` rule, used by
    /// ``expand(_:with:)`` for fatal and handled events and by ``EventSymbolicator``). `symbol` is the raw
    /// (mangled) name:
    /// - the C runtime's start-up and tear-down glue from `crt1.o`, `crti.o`, `crtbegin.o`: `_start`,
    ///   `_init`, `_fini`, `__libc_csu_init`, `__libc_csu_fini`, `frame_dummy`, `__do_global_dtors_aux`,
    ///   `register_tm_clones`, `deregister_tm_clones`, `_dl_relocate_static_pie`, `call_weak_fn`, and
    ///   glibc's `__libc_start_main` / `__libc_start_call_main` (in the executable when libc is linked
    ///   statically);
    /// - the Swift runtime and standard library when linked statically (`--static-swift-stdlib`): C-named
    ///   runtime entry points (`swift_…`, `_swift_…`), the runtime's C++ (`_ZN5swift…`, `_ZNK5swift…`),
    ///   Swift symbols of the modules `Swift` (`$ss…`), `Foundation`, `FoundationEssentials`,
    ///   `FoundationInternationalization` and `Dispatch`, and the C++ standard library (`_ZSt…`, `_ZNSt…`,
    ///   `_ZNKSt…`);
    /// - Vaka itself, as Sentry SDKs treat their own frames: the Swift modules `Vaka` and `VakaSymbolication`
    ///   (`$s4Vaka…`, `$s17VakaSymbolication…`) and the C crash runtime's named functions: the public API
    ///   (`vaka_crash_…`, `vaka_signal_name`, `vaka_si_code_name`), the handler's (`vaka_sig_…`, `vaka_w_…`,
    ///   `vaka_uc_…`, `vaka_safe_read…`, `vaka_fp_walk`, `vaka_scan_stack`, `vaka_find_build_id`) and the
    ///   install-time code's (`vaka_rt_…`, `vaka_thread_stack_…`, `vaka_images_collect`).
    ///
    /// Swift's `main` stays in-app: it holds a program's top-level code (`main.swift`), or calls its
    /// `@main` type's `main()`.
    public static func isLinkedSupportCode(symbol: String) -> Bool {
        if FatalEventBuilder.startupGlue.contains(symbol) { return true }
        return FatalEventBuilder.supportCodePrefixes.contains { symbol.hasPrefix($0) }
    }

    private static let startupGlue: Set<String> = [
        "_start", "_init", "_fini", "__libc_csu_init", "__libc_csu_fini", "frame_dummy", "__do_global_dtors_aux",
        "register_tm_clones", "deregister_tm_clones", "_dl_relocate_static_pie", "call_weak_fn",
        "__libc_start_main", "__libc_start_call_main",
    ]

    private static let supportCodePrefixes = [
        "swift_", "_swift_", "_ZN5swift", "_ZNK5swift", "$ss", "$s10Foundation", "$s20FoundationEssentials",
        "$s30FoundationInternationalization", "$s8Dispatch", "_ZSt", "_ZNSt", "_ZNKSt",
        "$s4Vaka", "$s17VakaSymbolication", "vaka_crash_", "vaka_sig_", "vaka_w_", "vaka_uc_", "vaka_safe_read",
        "vaka_thread_stack_", "vaka_fp_walk", "vaka_scan_stack", "vaka_images_collect", "vaka_find_build_id",
        "vaka_signal_name", "vaka_si_code_name", "vaka_rt_", "vaka_journal_", "vaka_jr_",
    ]

    private func debugImages(_ stack: NativeStack, symbolicating allowed: Set<Int>, used known: Set<Int>? = nil) -> [DebugImage] {
        var used = known ?? Set<Int>()
        if known == nil {
            for address in FatalEventBuilder.lookupAddresses(stack) {
                if let index = stack.images.firstIndex(where: { $0.contains(address) }) { used.insert(index) }
            }
        }
        var images: [DebugImage] = []
        for (index, image) in stack.images.enumerated() where used.contains(index) {
            var debugID: String?
            if let buildID = image.buildID {
                debugID = DebugID.fromBuildID(buildID)
            } else if let path = image.path, path.hasPrefix("/"), allowed.contains(index) {
                debugID = symbolicator?.textHashDebugID(imagePath: path)
            }
            guard let debugID else { continue }
            // Relay requires code_file; an image whose path is unknown keeps its debug_id (a server with the
            // debug file can still symbolicate it) under a placeholder name.
            images.append(DebugImage(type: "elf", codeFile: image.path ?? FatalEventBuilder.unknownCodeFile,
                                     imageAddr: HexAddress(image.base),
                                     imageSize: image.size, codeID: image.buildID, debugID: debugID, arch: stack.arch))
        }
        return images
    }
}

/// Which images of a stack are symbolicated: the first ``Symbolicator/maxImagesPerReport`` distinct images in
/// frame order; further images are left out (their frames keep address, package and image). The one image
/// policy of ``FatalEventBuilder`` (fatal and handled events) and ``EventSymbolicator``.
struct ImageAdmission {
    /// Indexes of the images admitted so far.
    private(set) var allowed = Set<Int>()
    /// Indexes of the images left out so far.
    private(set) var skipped = Set<Int>()

    /// Whether the image at `index` (the next one met in frame order) is symbolicated; admits it while there is room.
    mutating func admits(_ index: Int) -> Bool {
        if allowed.contains(index) { return true }
        if skipped.contains(index) { return false }
        if allowed.count < Symbolicator.maxImagesPerReport {
            allowed.insert(index)
            return true
        }
        skipped.insert(index)
        return false
    }
}
