import Foundation
import XCTest

/// The example report of docs/report-format.md (its fenced block under `## Example`): a real, complete report.
/// - Parameter runID: replaces the example's run id (`5D7E4C1A-...`) when given, for tests that plant crashes
///   of a run of their own in a storage directory.
/// - Throws: when the document or its example block is missing.
public func exampleCrashReport(runID: String? = nil) throws -> String {
    let doc = try String(contentsOf: Paths.repositoryRoot.appendingPathComponent("docs/report-format.md"), encoding: .utf8)
    let example = try XCTUnwrap(doc.range(of: "## Example").map { doc[$0.upperBound...] }, "no ## Example in docs/report-format.md")
    let open = try XCTUnwrap(example.range(of: "```\n"), "no code block under ## Example")
    let close = try XCTUnwrap(example[open.upperBound...].range(of: "```"), "unterminated code block under ## Example")
    let report = String(example[open.upperBound..<close.lowerBound])
    guard let runID else { return report }
    return report.replacingOccurrences(of: "5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B", with: runID)
}

/// Walks decoded JSON (`JSONSerialization` output): a `String` key indexes a dictionary, an `Int` an array
/// (negative counts from the end). `nil` when any step is missing or of the wrong kind.
public func dig(_ root: Any?, _ path: Any...) -> Any? {
    var current = root
    for step in path {
        if let key = step as? String {
            current = (current as? [String: Any])?[key]
        } else if let index = step as? Int {
            guard let array = current as? [Any] else { return nil }
            let position = index < 0 ? array.count + index : index
            current = array.indices.contains(position) ? array[position] : nil
        } else {
            return nil
        }
    }
    return current
}
