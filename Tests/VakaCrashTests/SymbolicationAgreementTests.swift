import Foundation
import XCTest
import VakaTestSupport

/// Function/file/line of the harness's frames, checked against independent tools on the same addresses,
/// and offline symbolication of a stripped copy of the harness with the collected debug files.
///
/// Oracles: binutils `addr2line -f -i -a -e BINARY ADDR…` (full agreement on every app frame, inlined
/// frames included; the one exception is the name of Swift's artificial "Swift runtime failure: …" trap
/// function, which binutils does not print), and elfutils `eu-addr2line -f -i -a -e BINARY ADDR…`. elfutils 0.188 (Debian 12)
/// finds compile units only through `.debug_aranges`, which Swift and clang do not emit, so there it
/// answers `??:0` with the symbol table's name; whenever it does give a location, it must agree in full,
/// and otherwise its name must be our real (outermost) function. Addresses are file-relative (the harness
/// is a PIE whose first `PT_LOAD` is at virtual address 0): `instruction_addr − image_addr`, minus 1 for
/// caller frames.
final class SymbolicationAgreementTests: XCTestCase {
    /// One resolved location: raw symbol (mangled), file, line.
    typealias Location = Addr2lineLocation

    /// An app frame of an event with its inlined frames: the address looked up and our locations,
    /// innermost first.
    struct AppAddress {
        var relative: UInt64
        var ours: [Location]
    }

    /// The event's frames in the harness, grouped by instruction_addr (inlined frames together).
    static func appAddresses(_ event: [String: Any], binary: String) -> [AppAddress] {
        let frames = dig(event, "exception", "values", 0, "stacktrace", "frames") as? [[String: Any]] ?? []
        var groups: [[[String: Any]]] = []
        for frame in frames {
            // An inlined frame follows its caller with the same instruction_addr, a function and no symbol_addr
            // (recursion repeats addresses too, but every real frame has its symbol_addr).
            if let last = groups.last?.last, last["instruction_addr"] as? String == frame["instruction_addr"] as? String,
               frame["function"] != nil, frame["symbol_addr"] == nil {
                groups[groups.count - 1].append(frame)
            } else {
                groups.append([frame])
            }
        }
        var result: [AppAddress] = []
        for group in groups {
            let first = group[0]
            guard let package = first["package"] as? String, Paths.resolved(package) == Paths.resolved(binary),
                  let address = parseHexAddress(first["instruction_addr"]), let base = parseHexAddress(first["image_addr"])
            else { continue }
            let relative = address - base - (first["trust"] as? String == "context" ? 0 : 1)
            let ours = group.reversed().map {
                Location(symbol: $0["symbol"] as? String, file: $0["filename"] as? String, line: $0["lineno"] as? Int)
            }
            result.append(AppAddress(relative: relative, ours: ours))
        }
        return result
    }

    /// Runs an addr2line-like tool with `-f -i -a` and parses its answer: per address, the locations
    /// innermost first (`??` / `?` / `0` become `nil`).
    static func addr2line(_ tool: String, binary: String, addresses: [UInt64], scratch: URL) throws -> [UInt64: [Location]] {
        let arguments = ["-f", "-i", "-a", "-e", binary] + addresses.map { "0x" + String($0, radix: 16) }
        let result = try runChild(URL(fileURLWithPath: tool), arguments, label: "\((tool as NSString).lastPathComponent)-\(UUID().uuidString.prefix(6))",
                                  outputDirectory: scratch)
        // eu-addr2line exits with status 1 when some address had no source location; its answer still counts.
        guard result.outcome == "exit 0" || (result.outcome == "exit 1" && !result.stdout.isEmpty) else { throw ChildError(description: "\(tool): \(result.outcome) \(result.stderrTail())") }
        return parseAddr2line(result.stdout)
    }

    /// The `[start, end)` ranges of `binary`'s function symbols of non-zero size, from `readelf -sW`.
    static func functionRanges(_ binary: String, scratch: URL) throws -> [(start: UInt64, end: UInt64)] {
        let readelf = try Peers.tool("readelf", install: "binutils: scripts/bootstrap")
        let result = try runChild(URL(fileURLWithPath: readelf), ["-sW", binary], label: "readelf-\(UUID().uuidString.prefix(6))",
                                  outputDirectory: scratch)
        guard result.outcome == "exit 0" else { throw ChildError(description: "readelf: \(result.outcome) \(result.stderrTail())") }
        var ranges: [(start: UInt64, end: UInt64)] = []
        for line in String(decoding: result.stdout, as: UTF8.self).split(separator: "\n") {
            // "Num: Value Size Type Bind Vis Ndx Name"; the size is decimal, or hex with 0x when large.
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 8, fields[3] == "FUNC", let start = UInt64(fields[1], radix: 16) else { continue }
            let sizeText = fields[2]
            guard let size = sizeText.hasPrefix("0x") ? UInt64(sizeText.dropFirst(2), radix: 16) : UInt64(sizeText), size > 0 else { continue }
            ranges.append((start, start + size))
        }
        return ranges
    }

    /// Every app frame of every scenario: our function/file/line (with inlined frames) equal binutils
    /// addr2line's; eu-addr2line agrees wherever it resolves a location and otherwise names our function.
    func testAppFramesAgreeWithAddr2line() throws {
        let addr2line = try Peers.tool("addr2line", install: "binutils: scripts/bootstrap")
        let euAddr2line = try Peers.tool("eu-addr2line", install: "elfutils: scripts/bootstrap")
        let binary = Paths.harness.path
        let scratch = Paths.freshDirectory("addr2line")
        let functions = try Self.functionRanges(binary, scratch: scratch)
        XCTAssertGreaterThan(functions.count, 1000, "readelf listed the harness's functions")
        var checked = 0
        var agreed = 0
        var withLines = 0
        var euResolved = 0
        var disagreements: [String] = []
        for expectation in scenarioExpectations {
            guard let event = ScenarioRuns.all[expectation.name]?.event else {
                disagreements.append("\(expectation.name): no event")
                continue
            }
            let app = Self.appAddresses(event, binary: binary)
            // crash-in-handler faults inside the capture right after the header: its report has no frames.
            if app.isEmpty && expectation.name != "crash-in-handler" {
                disagreements.append("\(expectation.name): no app frames")
            }
            let addresses = app.map(\.relative)
            let binutils = try Self.addr2line(addr2line, binary: binary, addresses: addresses, scratch: scratch)
            let elfutils = try Self.addr2line(euAddr2line, binary: binary, addresses: addresses, scratch: scratch)
            for frame in app {
                checked += 1
                let where_ = "\(expectation.name) 0x\(String(frame.relative, radix: 16))"
                var ok = true
                var expected = binutils[frame.relative] ?? []
                // Swift emits a runtime trap's reason as an artificial function inlined at the trap
                // ("Swift runtime failure: Index out of range"; lldb and the Swift backtracer show it too).
                // binutils prints the enclosing function's name for that entry instead: compare its file/line.
                if let first = frame.ours.first, first.symbol?.hasPrefix("Swift runtime failure: ") == true,
                   !expected.isEmpty {
                    expected[0].symbol = first.symbol
                }
                // A file without a line is no location: binutils then names the compile unit ("X.swift.o") where
                // the line table has no row (seen for a function merged by the optimiser, `…Tm`).
                let fileWithLine = { (l: Location) in Location(symbol: l.symbol, file: l.line == nil ? nil : l.file, line: l.line) }
                // An address no function's symbol covers (readelf's FUNC sizes): the padding after a function
                // that ends in a call to a noreturn function, reached by a frame a stack scan found. binutils
                // then names the nearest preceding symbol, without a line; we name none. Both say that no
                // function holds the address.
                if frame.ours.allSatisfy({ $0.symbol == nil }), expected.count == 1, expected[0].line == nil,
                   !functions.contains(where: { $0.start <= frame.relative && frame.relative < $0.end }) {
                    expected = frame.ours
                }
                if expected.map(fileWithLine) != frame.ours.map(fileWithLine) {
                    ok = false
                    disagreements.append("\(where_): ours \(frame.ours) vs addr2line \(expected)")
                }
                let eu = elfutils[frame.relative] ?? []
                if eu.contains(where: { $0.line != nil }) {
                    euResolved += 1
                    if eu != frame.ours {
                        ok = false
                        disagreements.append("\(where_): ours \(frame.ours) vs eu-addr2line \(eu)")
                    }
                } else if eu.first?.symbol != frame.ours.last?.symbol {
                    ok = false
                    disagreements.append("\(where_): eu-addr2line names \(eu.first?.symbol ?? "nothing"), our function is \(frame.ours.last?.symbol ?? "nothing")")
                }
                if frame.ours.last?.line != nil { withLines += 1 }
                if ok { agreed += 1 }
            }
        }
        XCTAssertGreaterThan(checked, scenarioExpectations.count, "too few app frames checked")
        XCTAssertGreaterThan(withLines, checked / 2, "most app frames should have a line (DWARF): \(withLines)/\(checked)")
        XCTAssertTrue(disagreements.isEmpty, "agreement \(agreed)/\(checked) app frames (eu-addr2line gave a location for \(euResolved)):\n"
                      + disagreements.joined(separator: "\n"))
        print("symbolication agreement: \(agreed)/\(checked) app frames agree with addr2line; \(withLines) with file/line; eu-addr2line resolved \(euResolved)")
    }

    /// A stripped copy of the harness crashes; without debug files its report has no file/line for app
    /// frames; `vaka symbolicate --debug-dir` with the collected debug files gives the same
    /// function/file/line as the unstripped build's event.
    func testStrippedHarnessSymbolicatesWithCollectedDebugFiles() throws {
        let objcopy = try Peers.tool("objcopy", install: "binutils: scripts/bootstrap")
        let work = Paths.freshDirectory("stripped")
        let stripped = work.appendingPathComponent("vaka-crashme-stripped")
        let strip = try runChild(URL(fileURLWithPath: objcopy), ["--strip-all", Paths.harness.path, stripped.path],
                                 label: "objcopy", outputDirectory: work)
        XCTAssertEqual(strip.outcome, "exit 0", strip.stderrTail())
        let collected = work.appendingPathComponent("debug-files")
        let collect = try runChild(Paths.cli, ["debug-files", "collect", Paths.harness.path, "--out", collected.path],
                                   label: "collect", outputDirectory: work)
        XCTAssertEqual(collect.outcome, "exit 0", collect.stderrTail())

        for name in ["null-deref", "swift-force-unwrap", "background-thread"] {
            guard let unstrippedEvent = ScenarioRuns.all[name]?.event else { XCTFail("\(name): no event"); continue }
            let storage = work.appendingPathComponent("storage-\(name)")
            let run = try runChild(stripped, [name, "--storage", storage.path], label: "crash-\(name)", outputDirectory: work,
                                   environment: ScenarioRuns.childEnvironment)
            XCTAssertTrue(run.diedBySignal, "\(name): stripped harness did not crash: \(run.outcome)")
            let reports = ScenarioRuns.crashFiles(in: storage)
            guard reports.count == 1 else { XCTFail("\(name): \(reports.count) reports"); continue }

            let convert = try runChild(Paths.cli, ["report", "convert", reports[0].path], label: "convert-\(name)", outputDirectory: work)
            guard let plain = decodeJSONObject(convert.stdout) else { XCTFail("\(name): convert: \(convert.stderrTail())"); continue }
            let plainApp = Self.appAddresses(plain, binary: stripped.path)
            XCTAssertFalse(plainApp.isEmpty, "\(name): no app frames in the stripped build's event")
            for frame in plainApp {
                XCTAssertTrue(frame.ours.allSatisfy { $0.file == nil && $0.line == nil },
                              "\(name): stripped build without debug files has file/line: \(frame.ours)")
            }

            let symbolicate = try runChild(Paths.cli, ["symbolicate", reports[0].path, "--debug-dir", collected.path],
                                           label: "symbolicate-\(name)", outputDirectory: work)
            guard let resolved = decodeJSONObject(symbolicate.stdout) else {
                XCTFail("\(name): symbolicate: \(symbolicate.stderrTail())"); continue
            }
            let expected = Self.appAddresses(unstrippedEvent, binary: Paths.harness.path)
            let got = Self.appAddresses(resolved, binary: stripped.path)
            XCTAssertEqual(got.map(\.relative), expected.map(\.relative), "\(name): app frame addresses differ")
            XCTAssertEqual(got.map { $0.ours.description }, expected.map { $0.ours.description },
                           "\(name): stripped + debug files vs unstripped")
            XCTAssertTrue(got.contains { $0.ours.contains { $0.line != nil } }, "\(name): no file/line after symbolicate")

            // The event JSON (made without debug files) re-symbolicated gives the same frames again.
            let eventFile = work.appendingPathComponent("\(name)-plain.json")
            try convert.stdout.write(to: eventFile)
            let again = try runChild(Paths.cli, ["symbolicate", eventFile.path, "--debug-dir", collected.path],
                                     label: "resymbolicate-\(name)", outputDirectory: work)
            guard let againEvent = decodeJSONObject(again.stdout) else { XCTFail("\(name): symbolicate JSON: \(again.stderrTail())"); continue }
            XCTAssertEqual(Self.appAddresses(againEvent, binary: stripped.path).map { $0.ours.description },
                           expected.map { $0.ours.description }, "\(name): event JSON re-symbolicated")
        }
    }
    /// `vaka symbolicate --cache DIR` prints the very bytes it prints without a cache, both on the run that
    /// fills DIR and on the next one, which answers the frames from it; a cache file whose bytes were
    /// changed (a function name altered, so the JSON stays valid; another file truncated) is not trusted:
    /// the output stays the same, nothing is answered from it, and it is written again.
    func testCachedSymbolicationIsByteIdenticalAndADamagedCacheIsIgnored() throws {
        let work = Paths.freshDirectory("symcache")
        let storage = work.appendingPathComponent("storage")
        let run = try runChild(Paths.harness, ["null-deref", "--storage", storage.path], label: "crash", outputDirectory: work,
                               environment: ScenarioRuns.childEnvironment)
        XCTAssertTrue(run.diedBySignal, run.outcome)
        let report = try XCTUnwrap(ScenarioRuns.crashFiles(in: storage).first)
        let cache = work.appendingPathComponent("cache")
        var runs = 0
        func symbolicate(_ extra: [String]) throws -> (output: Data, stats: [String: Any]) {
            runs += 1
            let result = try runChild(Paths.cli, ["symbolicate", report.path, "--stats"] + extra, label: "symbolicate-\(runs)",
                                      outputDirectory: work)
            XCTAssertEqual(result.outcome, "exit 0", result.stderrTail())
            let line = result.stderrText.split(separator: "\n").last.map(String.init) ?? ""
            return (result.stdout, decodeJSONObject(Data(line.utf8)) ?? [:])
        }
        func cacheFiles() -> [URL] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: cache.path)) ?? []
            return names.filter { $0.hasSuffix(".symcache") }.sorted().map { cache.appendingPathComponent($0) }
        }

        let plain = try symbolicate([])
        let resolved = try XCTUnwrap(plain.stats["resolved_frames"] as? Int)
        XCTAssertGreaterThan(resolved, 0)
        XCTAssertNotNil(decodeJSONObject(plain.output))
        let cold = try symbolicate(["--cache", cache.path])
        XCTAssertEqual(cold.output, plain.output, "the run filling the cache prints other bytes")
        XCTAssertEqual(cold.stats["cache_hits"] as? Int, 0)
        let files = cacheFiles()
        XCTAssertGreaterThanOrEqual(files.count, 2, "one cache file per image with frames")
        let warm = try symbolicate(["--cache", cache.path])
        XCTAssertEqual(warm.output, plain.output, "the run answered from the cache prints other bytes")
        XCTAssertGreaterThanOrEqual(warm.stats["cache_hits"] as? Int ?? 0, resolved)

        // Damage every file: alter a function name inside the JSON of all but the last, truncate the last.
        let originals = try files.map { try Data(contentsOf: $0) }
        for file in files.dropLast() {
            var bytes = try Data(contentsOf: file)
            let marker = Data("\"function\":\"".utf8)
            let range = try XCTUnwrap(bytes.range(of: marker), "\(file.lastPathComponent) has no function")
            bytes[range.upperBound] = bytes[range.upperBound] == UInt8(ascii: "Z") ? UInt8(ascii: "Y") : UInt8(ascii: "Z")
            try bytes.write(to: file)
        }
        let last = try XCTUnwrap(files.last)
        let lastBytes = try Data(contentsOf: last)
        try lastBytes.prefix(lastBytes.count / 2).write(to: last)
        let damaged = try symbolicate(["--cache", cache.path])
        XCTAssertEqual(damaged.output, plain.output, "a damaged cache file changed the output")
        XCTAssertEqual(damaged.stats["cache_hits"] as? Int, 0, "frames were answered from damaged cache files")
        for (file, original) in zip(files, originals) {
            XCTAssertEqual(try Data(contentsOf: file), original, "\(file.lastPathComponent) was not written again")
        }
        let again = try symbolicate(["--cache", cache.path])
        XCTAssertEqual(again.output, plain.output)
        XCTAssertGreaterThanOrEqual(again.stats["cache_hits"] as? Int ?? 0, resolved, "the rewritten cache is not used")
    }
}
