import Foundation
import XCTest
import VakaTestSupport
@testable import Vaka
import VakaSymbolication

/// CrashReport → Sentry fatal event, per the JSON contract in the team brief.
final class FatalEventBuilderTests: XCTestCase {
    private func event(_ text: String, symbolicator: Symbolicator? = nil) throws -> Event {
        FatalEventBuilder(symbolicator: symbolicator).event(from: try CrashReport(data: Data(text.utf8)))
    }

    private func frames(_ event: Event) -> [Frame] {
        event.exception?.values.first?.stacktrace?.frames ?? []
    }

    func testTheExampleBecomesTheContractedEvent() throws {
        let event = try event(try exampleCrashReport())
        XCTAssertEqual(event.eventID, "5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b")
        XCTAssertEqual(try XCTUnwrap(event.timestamp), 1_796_040_000.123_456_789, accuracy: 1e-6)
        XCTAssertEqual(event.platform, "native")
        XCTAssertEqual(event.level, .fatal)
        XCTAssertEqual(event.sdk, SDKInfo(name: "vaka.swift", version: "0.1.0"))
        XCTAssertEqual(event.contexts?.device?.arch, "x86_64")

        let exception = try XCTUnwrap(event.exception?.values.first)
        XCTAssertEqual(event.exception?.values.count, 1)
        XCTAssertEqual(exception.type, "SIGSEGV")
        XCTAssertEqual(exception.value, "EXC_BAD_ACCESS / SIGSEGV (SEGV_MAPERR) at 0x0")
        XCTAssertEqual(exception.threadID, 41872)
        XCTAssertEqual(exception.mechanism, Mechanism(
            type: "signalhandler", handled: false,
            meta: MechanismMeta(signal: SignalMeta(number: 11, code: 1, name: "SIGSEGV", codeName: "SEGV_MAPERR")),
            data: ["relevant_address": .string("0x0")]))

        // Oldest first: the report's frames reversed, crash site last.
        let frames = frames(event)
        XCTAssertEqual(frames.map(\.instructionAddr.value), [0x7f3b1a229d90, 0x55d4c2a0c210, 0x55d4c2a0b3a0, 0x55d4c2a0b1c4])
        XCTAssertEqual(frames.map(\.trust), ["cfi", "cfi", "cfi", "context"])
        XCTAssertEqual(frames.map(\.inApp), [false, true, true, true])
        XCTAssertEqual(frames.first?.package, "/usr/lib/x86_64-linux-gnu/libc.so.6")
        XCTAssertEqual(frames.first?.imageAddr, HexAddress(0x7f3b1a200000))
        XCTAssertEqual(frames.last?.package, "/work/main/.build/debug/vaka-crashme")
        XCTAssertNil(frames.last?.function, "the example's files are not on disk with these build IDs")
        XCTAssertEqual(exception.stacktrace?.registers?["rip"], HexAddress(0x55d4c2a0b1c4))
        XCTAssertEqual(exception.stacktrace?.registers?.count, 4)

        let thread = try XCTUnwrap(event.threads?.values.first)
        XCTAssertEqual(thread, SentryThread(id: 41872, name: "vaka-crashme", crashed: true, current: true,
                                            stacktrace: exception.stacktrace))

        // The vDSO is not referenced (and has no build ID): only two images.
        XCTAssertEqual(event.debugMeta?.images, [
            DebugImage(type: "elf", codeFile: "/work/main/.build/debug/vaka-crashme", imageAddr: HexAddress(0x55d4c2a00000),
                       imageSize: 0x3c000, codeID: "68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434",
                       debugID: "e20a2268-5dc6-c165-b6aa-a12fa6765a6e", arch: "x86_64"),
            DebugImage(type: "elf", codeFile: "/usr/lib/x86_64-linux-gnu/libc.so.6", imageAddr: HexAddress(0x7f3b1a200000),
                       imageSize: 0x1e8000, codeID: "6e4250d99632b8031d64f7107b94ff9c4737db1a",
                       debugID: "d950426e-3296-03b8-1d64-f7107b94ff9c", arch: "x86_64"),
        ])
        XCTAssertEqual(event.extra, [
            "run_id": .string("5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B"), "pid": .int(41872),
            "capture_ns": .int(183211), "report_truncated": .bool(false),
        ])
        XCTAssertNil(event.tags)
    }

    func testJSONUsesTheWireNamesHexStringsAndOmitsNil() throws {
        let data = try event(try exampleCrashReport()).jsonData()
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let exception = try XCTUnwrap(((json["exception"] as? [String: Any])?["values"] as? [[String: Any]])?.first)
        let stacktrace = try XCTUnwrap(exception["stacktrace"] as? [String: Any])
        let last = try XCTUnwrap((stacktrace["frames"] as? [[String: Any]])?.last)
        XCTAssertEqual(last["instruction_addr"] as? String, "0x55d4c2a0b1c4")
        XCTAssertEqual(last["image_addr"] as? String, "0x55d4c2a00000")
        XCTAssertEqual(last["in_app"] as? Bool, true)
        XCTAssertNil(last["function"])
        XCTAssertFalse(last.keys.contains("symbol_addr"))
        XCTAssertEqual((stacktrace["registers"] as? [String: String])?["eflags"], "0x10246")
        let signal = ((exception["mechanism"] as? [String: Any])?["meta"] as? [String: Any])?["signal"] as? [String: Any]
        XCTAssertEqual(signal?["code_name"] as? String, "SEGV_MAPERR")
        let image = try XCTUnwrap(((json["debug_meta"] as? [String: Any])?["images"] as? [[String: Any]])?.first)
        XCTAssertEqual(image["image_size"] as? Int, 0x3c000)
        XCTAssertEqual(image["debug_id"] as? String, "e20a2268-5dc6-c165-b6aa-a12fa6765a6e")
        XCTAssertEqual(json["event_id"] as? String, "5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b")
        XCTAssertNil(json["tags"])
        // Round trip through the Codable types.
        XCTAssertEqual(try JSONDecoder().decode(Event.self, from: data), try event(try exampleCrashReport()))
        // Pretty printing only changes whitespace.
        let pretty = try event(try exampleCrashReport()).jsonData(pretty: true)
        XCTAssertTrue(String(decoding: pretty, as: UTF8.self).contains("\n  "))
        XCTAssertEqual(try JSONDecoder().decode(Event.self, from: pretty), try JSONDecoder().decode(Event.self, from: data))
    }

    func testExceptionSentencesNameTheMachExceptionSignalCodeAndMessage() throws {
        func value(_ lines: String) throws -> String? {
            try event("VAKA-CRASH 1\n\(lines)\nend\n").exception?.values.first?.value
        }
        XCTAssertEqual(try value("signal 4 SIGILL\ncode 2 ILL_ILLOPN\nfault_addr 0x5555\nfatal_message main.swift:7: Fatal error: Unexpectedly found nil while unwrapping an Optional value\\n"),
                       "EXC_BAD_INSTRUCTION / SIGILL (ILL_ILLOPN): main.swift:7: Fatal error: Unexpectedly found nil while unwrapping an Optional value")
        XCTAssertEqual(try value("signal 7 SIGBUS\ncode 2 BUS_ADRERR\nfault_addr 0x7f0000001000"),
                       "EXC_BAD_ACCESS / SIGBUS (BUS_ADRERR) at 0x7f0000001000")
        XCTAssertEqual(try value("signal 11 SIGSEGV\ncode 1 SEGV_MAPERR\nfault_addr 0xDEADBEEF008"),
                       "EXC_BAD_ACCESS / SIGSEGV (SEGV_MAPERR) at 0xdeadbeef008")
        XCTAssertEqual(try value("signal 8 SIGFPE\ncode 1 FPE_INTDIV\nfault_addr 0x401000"),
                       "EXC_ARITHMETIC / SIGFPE (FPE_INTDIV)")
        XCTAssertEqual(try value("signal 5 SIGTRAP\ncode 128 SI_KERNEL"), "EXC_BREAKPOINT / SIGTRAP (SI_KERNEL)")
        XCTAssertEqual(try value("signal 6 SIGABRT\ncode -6 SI_TKILL\nabort_message app: main.c:5: f: Assertion `x' failed.\\n"),
                       "EXC_CRASH / SIGABRT (SI_TKILL): app: main.c:5: f: Assertion `x' failed.")
        XCTAssertEqual(try value("signal 31 SIGSYS\ncode 1 SYS_SECCOMP"), "SIGSYS (SYS_SECCOMP)")
        XCTAssertEqual(try value("signal 11 SIGSEGV\ncode 77 UNKNOWN"), "EXC_BAD_ACCESS / SIGSEGV (si_code 77)")
        XCTAssertEqual(try value("signal 11 SIGSEGV"), "EXC_BAD_ACCESS / SIGSEGV")
    }

    func testOnlyImagesThatFramesPointIntoAreListed() throws {
        let event = try event("""
            VAKA-CRASH 1
            executable /app/bin/app
            signal 11 SIGSEGV
            frame 0x10050 context
            frame 0x30000 cfi
            frame 0x99999999 cfi
            image 0x10000 0x1000 aa01 /app/bin/app
            image 0x20000 0x8000 bb02 /app/bin/libunused.so
            image 0x28000 0x8000 cc03 /app/bin/libplugin.so
            image 0x40000 0x1000 dd04 /usr/lib/libother.so
            end

            """)
        // 0x30000 is a return address one past libplugin's end: the caller is looked up at 0x2ffff.
        XCTAssertEqual(event.debugMeta?.images.map(\.codeFile), ["/app/bin/app", "/app/bin/libplugin.so"])
        XCTAssertEqual(event.debugMeta?.images.map(\.debugID), ["000001aa-0000-0000-0000-000000000000",
                                                                "000003cc-0000-0000-0000-000000000000"])
        let frames = frames(event)
        XCTAssertEqual(frames.map(\.package), [nil, "/app/bin/libplugin.so", "/app/bin/app"])
        XCTAssertEqual(frames.map(\.inApp), [false, true, true])
        XCTAssertEqual(frames.map(\.imageAddr), [nil, HexAddress(0x28000), HexAddress(0x10000)])
    }

    func testWithoutAnExecutableLineTheFirstImageIsTheApp() throws {
        let event = try event("""
            VAKA-CRASH 1
            executable -
            signal 11 SIGSEGV
            frame 0x10050 context
            frame 0x40050 cfi
            frame 0x50050 cfi
            image 0x10000 0x1000 aa01 /app/bin/app
            image 0x40000 0x1000 dd04 /app/bin/libmine.so
            image 0x50000 0x1000 dd05 /usr/lib/libother.so
            end

            """)
        XCTAssertEqual(frames(event).map(\.inApp), [false, true, true])
    }

    func testTruncatedReportsAreMarkedAndKeepTheContextPC() throws {
        let event = try event("VAKA-CRASH 1\nrun_id demo-run\nsignal 11 SIGSEGV\nregister rip 0x1234\nregister rsp 0x7ff")
        XCTAssertEqual(event.extra?["report_truncated"], .bool(true))
        XCTAssertEqual(event.tags, ["vaka.report_truncated": "true"])
        XCTAssertEqual(frames(event), [Frame(instructionAddr: HexAddress(0x1234), trust: "context", inApp: false)])
        XCTAssertEqual(event.exception?.values.first?.stacktrace?.registers, ["rip": HexAddress(0x1234)])
        XCTAssertNil(event.debugMeta)
        XCTAssertEqual(event.eventID, FatalEventBuilder.eventID(forRunID: "demo-run"))
    }

    func testEventIDs() {
        XCTAssertEqual(FatalEventBuilder.eventID(forRunID: "5D7E4C1A-2B8F-4F0E-9A51-0C2D3E4F5A6B"), "5d7e4c1a2b8f4f0e9a510c2d3e4f5a6b")
        let hashed = FatalEventBuilder.eventID(forRunID: "not-a-uuid")
        XCTAssertEqual(hashed, FatalEventBuilder.eventID(forRunID: "not-a-uuid"))
        XCTAssertNotEqual(hashed, FatalEventBuilder.eventID(forRunID: "not-a-uuid2"))
        for id in [hashed, FatalEventBuilder.eventID(forRunID: nil), FatalEventBuilder.eventID(forRunID: "")] {
            XCTAssertEqual(id.count, 32)
            XCTAssertTrue(id.allSatisfy { "0123456789abcdef".contains($0) }, id)
        }
    }

    /// A report about this very process, so the images are on disk with the right build IDs.
    func testSymbolicatesFramesFromTheImagesOnDisk() throws {
        let marker = markerFunctionAddress()
        let exe = try XCTUnwrap(try TestSupport.image(containing: marker))
        let exeFile = try ElfFile(path: exe.path)
        let exeBuildID = try XCTUnwrap(exeFile.buildID)
        let markerSymbol = try XCTUnwrap(exeFile.symbol(containing: exeFile.vaddr(ofRuntimeAddress: marker, imageBase: exe.base)))
        let markerEnd = marker + markerSymbol.size

        let getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        let libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        let libcFile = try ElfFile(path: libc.path)
        let countGetter = try XCTUnwrap(exportedSymbolAddress("$sSS5countSivg"), "String.count getter not exported")
        let swiftCore = try XCTUnwrap(try TestSupport.image(containing: countGetter))
        let swiftCoreFile = try ElfFile(path: swiftCore.path)

        func hex(_ value: UInt64) -> String { "0x" + String(value, radix: 16) }
        let report = """
            VAKA-CRASH 1
            run_id 00000000-0000-4000-8000-000000000001
            tid 7
            arch x86_64
            executable \(exe.path)
            signal 11 SIGSEGV
            code 1 SEGV_MAPERR
            fault_addr 0x0
            frame \(hex(marker)) context
            frame \(hex(markerEnd)) cfi
            frame \(hex(countGetter + 4)) cfi
            frame \(hex(getpid + 2)) cfi
            frame 0x10 fp
            image \(hex(exe.base)) \(hex(exeFile.loadSpan)) \(exeBuildID) \(exe.path)
            image \(hex(libc.base)) \(hex(libcFile.loadSpan)) \(libcFile.buildID ?? "-") \(libc.path)
            image \(hex(swiftCore.base)) \(hex(swiftCoreFile.loadSpan)) \(swiftCoreFile.buildID ?? "-") \(swiftCore.path)
            end

            """
        // Image files only: not /usr/lib/debug (libc6-dbg would give libc's DWARF names such as __GI_getpid).
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        let event = try event(report, symbolicator: symbolicator)
        let frames = frames(event)
        XCTAssertEqual(frames.count, 5)
        // Crash site (last): looked up at its own address, which is the first byte of the function.
        XCTAssertEqual(frames[4].function, "vaka_test_marker_function")
        XCTAssertEqual(frames[4].symbol, "vaka_test_marker_function")
        XCTAssertEqual(frames[4].symbolAddr, HexAddress(marker))
        XCTAssertEqual(frames[4].inApp, true)
        XCTAssertEqual(frames[4].package, exe.path)
        // A return address just past the function's end is looked up at address - 1: still that function.
        XCTAssertEqual(frames[3].symbol, "vaka_test_marker_function")
        XCTAssertEqual(frames[3].instructionAddr, HexAddress(markerEnd))
        // Swift names are demangled, the mangled name is kept in `symbol`.
        XCTAssertEqual(frames[2].symbol, "$sSS5countSivg")
        XCTAssertEqual(frames[2].function, "Swift.String.count.getter : Swift.Int")
        XCTAssertEqual(frames[2].symbolAddr, HexAddress(countGetter))
        XCTAssertEqual(frames[2].inApp, false)
        // libc: .dynsym only.
        XCTAssertTrue(["getpid", "__getpid"].contains(frames[1].function ?? ""), "\(frames[1])")
        XCTAssertEqual(frames[1].inApp, false)
        // Outside every image.
        XCTAssertEqual(frames[0], Frame(instructionAddr: HexAddress(0x10), trust: "fp", inApp: false))

        let images = try XCTUnwrap(event.debugMeta?.images)
        XCTAssertEqual(images.map(\.codeFile), [exe.path, libc.path, swiftCore.path])
        XCTAssertEqual(images[0].codeID, try TestSupport.readelfBuildID(exe.path))
        XCTAssertEqual(images[0].debugID, DebugID.fromBuildID(exeBuildID))
        XCTAssertEqual(images[1].codeID, try TestSupport.readelfBuildID(libc.path))
        XCTAssertEqual(symbolicator.openedFileCount, 3, "each image file is opened once")

        // A different build ID in the report: the file on disk is not that image, so no names.
        let mismatched = report.replacingOccurrences(of: " \(exeBuildID) ", with: " 0000\(exeBuildID.dropFirst(4)) ")
        let unnamed = self.frames(try self.event(mismatched, symbolicator: Symbolicator(systemDebugDirectory: nil)))
        XCTAssertNil(unnamed[4].function)
        XCTAssertNil(unnamed[4].symbol)
        XCTAssertEqual(unnamed[4].package, exe.path)
    }
}
