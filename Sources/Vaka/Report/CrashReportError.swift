import Foundation
#if canImport(Glibc)
import Glibc
#endif

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
            return "unsupported report format version \"\(version)\" (this reader knows versions \(CrashReport.supportedVersions.lowerBound) to \(CrashReport.supportedVersion))"
        case .carriageReturnLineEnds:
            return "the report's lines end in carriage returns (\\r); crash reports use \\n line ends"
        case .missingSignal(let truncated, let problem):
            var text = truncated ? "the report is truncated before its signal line" : "the report has no signal line"
            if let problem { text += " (\(problem))" }
            return text
        }
    }
}
