import Foundation
import XCTest
@testable import Vaka

/// The `other` catch-alls of the typed event model on encoding: a member held both by a property and by
/// `other` (an odd value kept by lenient decoding, or set by hand) is written once, so the JSON stays valid
/// and has no duplicate keys, and members no property models are written as they were.
final class EventOtherFieldsTests: XCTestCase {
    /// How many times `"key":` occurs in `json` (keys are written without spaces).
    private func occurrences(_ key: String, _ json: String) -> Int {
        json.components(separatedBy: "\"\(key)\":").count - 1
    }

    /// An event and a frame whose `other` name modeled fields (`level`, `extra`, `event_id`, `function`) besides
    /// their properties, plus members nothing models: in both encodings each key is written once, the JSON
    /// parses, the unmodeled members are there, and decoding the output and encoding it again gives the same bytes.
    func testAKeyInBothThePropertyAndOtherIsWrittenOnce() throws {
        var frame = Frame(instructionAddr: HexAddress(0x1234), trust: "cfi")
        frame.function = "real_function"
        frame.other = ["function": .string("odd"), "vendor_frame": .int(2), "trust": .int(7)]
        var event = Event(eventID: String(repeating: "a", count: 32), timestamp: 1_700_000_000.5, level: .fatal,
                          exception: ValueList([Exception(type: "SIGSEGV", value: "boom",
                                                          stacktrace: Stacktrace(frames: [frame]))]),
                          extra: ["a": .int(1)])
        event.other = ["level": .string("warn"), "extra": .object(["b": .int(2)]), "event_id": .string("x"),
                       "vendor_root": .array([.int(1), .null])]
        for encoding in [Event.Encoding.report, .wire] {
            let data = try event.jsonData(encoding: encoding)
            let json = String(decoding: data, as: UTF8.self)
            XCTAssertNoThrow(try JSONSerialization.jsonObject(with: data), json)
            for key in ["level", "extra", "event_id", "function", "vendor_root", "vendor_frame"] {
                XCTAssertEqual(occurrences(key, json), 1, "\(encoding) \(key): \(json)")
            }
            XCTAssertLessThanOrEqual(occurrences("trust", json), encoding == .report ? 1 : 0, "\(encoding): \(json)")
            let again = try JSONDecoder().decode(Event.self, from: data).jsonData(encoding: encoding)
            XCTAssertEqual(String(decoding: again, as: UTF8.self), json, "\(encoding): not stable across a round trip")
        }
    }
}
