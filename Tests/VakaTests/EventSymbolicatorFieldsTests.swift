import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaSymbolication

/// An event made elsewhere, symbolicated again (`vaka symbolicate EVENT.json`): the fields Vaka does not model,
/// at every level a symbolicated event passes through, are written back as they were.
final class EventSymbolicatorFieldsTests: XCTestCase {
    /// Keys symbolication writes into a frame.
    private static let written: Set<String> = ["function", "symbol", "symbol_addr", "filename", "lineno", "colno", "in_app",
                                               "package", "image_addr"]

    /// An event with a frame in this test binary (resolved to `vaka_test_marker_function`), a frame in no image,
    /// and a member Vaka does not model in every object.
    private func event() throws -> JSONValue {
        let address = markerFunctionAddress()
        let image = try XCTUnwrap(try TestSupport.image(containing: address))
        let file = try ElfFile(path: image.path)
        let hex = { (value: UInt64) in "0x" + String(value, radix: 16) }
        let vendor: JSONValue = .object(["nested": .array([.int(1), .string("two"), .bool(true), .null])])
        return .object([
            "event_id": .string(String(repeating: "b", count: 32)), "level": .string("fatal"), "platform": .string("native"),
            "timestamp": .double(1_700_000_000.25), "fingerprint": .array([.string("{{ default }}")]),
            "request": .object(["url": .string("https://example.invalid/x")]), "vendor_root": vendor,
            "sdk": .object(["name": .string("other.sdk"), "version": .string("9.9"), "vendor_sdk": vendor,
                            "integrations": .array([.string("a")])]),
            "user": .object(["id": .string("u1"), "email": .string("u1@example.invalid")]),
            "logentry": .object(["formatted": .string("boom"), "params": .array([.int(1)])]),
            "contexts": .object(["runtime": .object(["name": .string("swift")]),
                                 "os": .object(["name": .string("Linux"), "raw_description": .string("Debian 12")])]),
            "exception": .object(["values": .array([.object([
                "type": .string("SIGSEGV"), "module": .string("m"),
                "mechanism": .object(["type": .string("signalhandler"), "synthetic": .bool(false),
                                      "meta": .object(["errno": .object(["number": .int(2)]),
                                                       "signal": .object(["number": .int(11), "vendor_signal": vendor])])]),
                "stacktrace": .object(["vendor_stack": vendor, "frames": .array([
                    .object(["instruction_addr": .string("0x10"), "vars": .object(["x": .int(1)]), "in_app": .bool(true)]),
                    .object(["instruction_addr": .string(hex(address + 2)), "trust": .string("context"),
                             "vendor_frame": vendor, "in_app": .bool(true)]),
                ])]),
            ])])]),
            "threads": .object(["values": .array([.object(["id": .int(7), "main": .bool(true)])])]),
            "debug_meta": .object(["vendor_meta": vendor, "images": .array([.object([
                "type": .string("elf"), "code_file": .string(image.path), "image_addr": .string(hex(image.base)),
                "image_size": .int(Int64(file.loadSpan)), "code_id": .string(try XCTUnwrap(file.buildID)),
                "vendor_image": vendor,
            ])])]),
        ])
    }

    /// `event` without the keys symbolication writes into frames.
    private func withoutWrittenFields(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members):
            var kept: [String: JSONValue] = [:]
            let isFrame = members["instruction_addr"] != nil
            for (key, member) in members where !(isFrame && Self.written.contains(key)) { kept[key] = withoutWrittenFields(member) }
            return .object(kept)
        case .array(let items):
            return .array(items.map(withoutWrittenFields))
        default:
            return value
        }
    }

    /// The resolved frame's function, and that nothing else changed.
    private func check(_ symbolicated: JSONValue, against input: JSONValue, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(withoutWrittenFields(symbolicated), withoutWrittenFields(input), file: file, line: line)
        guard case .object(let root) = symbolicated, case .object(let exception)? = root["exception"],
              case .array(let values)? = exception["values"], case .object(let first)? = values.first,
              case .object(let stacktrace)? = first["stacktrace"], case .array(let frames)? = stacktrace["frames"],
              case .object(let crashSite)? = frames.last else {
            return XCTFail("shape changed: \(symbolicated)", file: file, line: line)
        }
        XCTAssertEqual(crashSite["function"]?.stringValue, "vaka_test_marker_function", file: file, line: line)
        XCTAssertEqual(frames.count, 2, file: file, line: line)
    }

    func testEventSymbolicatorKeepsFieldsVakaDoesNotModel() throws {
        let input = try event()
        let (symbolicated, counts) = EventSymbolicator(symbolicator: Symbolicator(systemDebugDirectory: nil)).symbolicate(input)
        XCTAssertEqual(counts.resolved, 1)
        check(symbolicated, against: input)
    }

    func testVakaSymbolicateKeepsFieldsVakaDoesNotModel() throws {
        let input = try event()
        let file = try ScratchDirs.directory(for: self).appendingPathComponent("event.json")
        try JSONEncoder().encode(input).write(to: file)
        let result = try vaka(["symbolicate", file.path])
        XCTAssertEqual(result.status, 0, result.stderrText)
        check(try JSONDecoder().decode(JSONValue.self, from: result.stdout), against: input)
    }
}
