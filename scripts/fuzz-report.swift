// libFuzzer entry for the crash report reader (compiled by scripts/fuzz together with
// Sources/Vaka/Report and Sources/Vaka/Protocol; not part of the package build).
// Every input is parsed as a report; a parsed report is turned into a fatal event (without symbolication)
// and encoded to JSON, as `vaka report convert` does. Any trap or sanitizer error is a finding.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func vakaFuzzReportReader(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let data = start.map { Data(bytes: $0, count: count) } ?? Data()
    guard let report = try? CrashReport(data: data) else { return 0 }
    let event = FatalEventBuilder(symbolicator: nil).event(from: report)
    _ = try? JSONEncoder().encode(event)
    return 0
}
