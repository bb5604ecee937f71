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

    /// `input` with `edit` applied to the members of its first exception (`.object` values only).
    private func editingException(_ input: JSONValue, _ edit: (inout [String: JSONValue]) -> Void) -> JSONValue {
        guard case .object(var root) = input, case .object(var exception)? = root["exception"],
              case .array(var values)? = exception["values"], case .object(var first)? = values.first else { return input }
        edit(&first)
        values[0] = .object(first)
        exception["values"] = .array(values)
        root["exception"] = .object(exception)
        return .object(root)
    }

    /// Events as other SDKs write them, with values the Sentry protocol allows but Vaka does not build: a frame
    /// without `instruction_addr` (an interpreter's frame beside the native ones), a frame whose `lineno` is a
    /// string, a decimal-string address, a string `thread_id`. The frames that can be resolved still are, in
    /// the exceptions and in the threads, and every odd value is written back as it was.
    func testOddValuesOfOtherSDKsDoNotStopSymbolication() throws {
        let input = try event()
        let symbolicator = EventSymbolicator(symbolicator: Symbolicator(systemDebugDirectory: nil))
        let interpreterFrame: JSONValue = .object(["filename": .string("app.py"), "function": .string("main"),
                                                   "lineno": .int(3), "vars": .object(["x": .int(1)])])
        let oddLineFrame: JSONValue = .object(["instruction_addr": .string("0x20"), "lineno": .string("12")])
        let variants: [(String, JSONValue)] = [
            ("a frame without instruction_addr", editingException(input) { exception in
                guard case .object(var stack)? = exception["stacktrace"], case .array(let frames)? = stack["frames"] else { return }
                stack["frames"] = .array([interpreterFrame] + frames)
                exception["stacktrace"] = .object(stack)
            }),
            ("a frame with a string lineno", editingException(input) { exception in
                guard case .object(var stack)? = exception["stacktrace"], case .array(let frames)? = stack["frames"] else { return }
                stack["frames"] = .array([oddLineFrame] + frames)
                exception["stacktrace"] = .object(stack)
            }),
            ("a decimal-string instruction_addr", editingException(input) { exception in
                guard case .object(var stack)? = exception["stacktrace"], case .array(var frames)? = stack["frames"],
                      case .object(var last)? = frames.last, let hex = last["instruction_addr"]?.stringValue,
                      let value = UInt64(hex.dropFirst(2), radix: 16) else { return }
                last["instruction_addr"] = .string(String(value))
                frames[frames.count - 1] = .object(last)
                stack["frames"] = .array(frames)
                exception["stacktrace"] = .object(stack)
            }),
            ("a string thread_id", editingException(input) { exception in exception["thread_id"] = .string("main") }),
            ("a string lineno in the frame resolved", editingException(input) { exception in
                guard case .object(var stack)? = exception["stacktrace"], case .array(var frames)? = stack["frames"],
                      case .object(var last)? = frames.last else { return }
                last["lineno"] = .string("12")
                last["function"] = .int(5)
                frames[frames.count - 1] = .object(last)
                stack["frames"] = .array(frames)
                exception["stacktrace"] = .object(stack)
            }),
        ]
        for (name, variant) in variants {
            let (symbolicated, counts) = symbolicator.symbolicate(variant)
            XCTAssertEqual(counts.resolved, 1, name)
            guard case .object(let root) = symbolicated, case .object(let exception)? = root["exception"],
                  case .array(let values)? = exception["values"], case .object(let first)? = values.first,
                  case .object(let stack)? = first["stacktrace"], case .array(let frames)? = stack["frames"],
                  case .object(let crashSite)? = frames.last else {
                XCTFail("\(name): shape changed: \(symbolicated)")
                continue
            }
            XCTAssertEqual(crashSite["function"]?.stringValue, "vaka_test_marker_function", name)
            // What symbolication writes replaces an odd value of the same field.
            XCTAssertNotEqual(crashSite["lineno"], .string("12"), name)
            // Everything but what symbolication writes into frames (and the address it writes as "0x…") is as it was.
            if name != "a decimal-string instruction_addr" {
                XCTAssertEqual(withoutWrittenFields(symbolicated), withoutWrittenFields(variant), name)
            }
        }
        // A thread whose id is a string (the protocol allows it) keeps it, and its frames are resolved too.
        guard case .object(var root) = input, case .object(let exception)? = root["exception"],
              case .array(let values)? = exception["values"], case .object(let first)? = values.first else {
            return XCTFail("shape")
        }
        root["threads"] = .object(["values": .array([.object(["id": .string("main"), "crashed": .bool(true),
                                                               "stacktrace": first["stacktrace"] ?? .null])])])
        let (symbolicated, counts) = symbolicator.symbolicate(.object(root))
        XCTAssertEqual(counts.resolved, 2)
        guard case .object(let out) = symbolicated, case .object(let threads)? = out["threads"],
              case .array(let list)? = threads["values"], case .object(let thread)? = list.first,
              case .object(let stack)? = thread["stacktrace"], case .array(let frames)? = stack["frames"],
              case .object(let crashSite)? = frames.last else {
            return XCTFail("threads shape changed: \(symbolicated)")
        }
        XCTAssertEqual(thread["id"], .string("main"))
        XCTAssertEqual(crashSite["function"]?.stringValue, "vaka_test_marker_function")
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
