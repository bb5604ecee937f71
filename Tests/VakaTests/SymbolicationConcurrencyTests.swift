import Foundation
import Synchronization
import XCTest
import VakaTestSupport
import VakaSymbolication

/// Symbolication from several threads at once: one ``ElfFile`` and one ``Symbolicator`` shared by all, the
/// symbol tables and DWARF read on first use while other threads look up. `scripts/test` runs this class
/// again under ThreadSanitizer (`swift test --sanitize=thread`), where a data race fails the run.
final class SymbolicationConcurrencyTests: XCTestCase {
    private static let threads = 4

    /// Runs `body(thread)` on `threads` new threads that all start it together (after a spinning barrier,
    /// so no thread finishes before another begins), and returns when all have finished.
    private func onSeveralThreads(_ body: @escaping @Sendable (Int) -> Void) {
        final class Barrier: Sendable {
            let arrived = Atomic<Int>(0)
        }
        let barrier = Barrier()
        let group = DispatchGroup()
        for index in 0..<Self.threads {
            group.enter()
            let thread = Thread {
                barrier.arrived.add(1, ordering: .relaxed)
                while barrier.arrived.load(ordering: .relaxed) < Self.threads { sched_yield() }
                body(index)
                group.leave()
            }
            thread.start()
        }
        group.wait()
    }

    /// A fresh ``ElfFile`` used by several threads at once: each finds the same symbol.
    func testOneElfFileFromSeveralThreads() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libinline.so", in: dir)
        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_fixture_outer", in: library))
        let file = try ElfFile(path: library)
        let names = PerThread(count: Self.threads)
        onSeveralThreads { thread in
            let name = file.symbol(containing: outer.value + 4)?.name
            _ = file.hasDynsym
            names.append(name ?? "nil", thread: thread)
        }
        XCTAssertEqual(names.all, Array(repeating: "vaka_fixture_outer", count: Self.threads))
    }

    /// One ``Symbolicator`` used by several threads at once: each looks up in one resolved image's files
    /// (``Symbolicator/resolve(imagePath:buildID:)``), preloads (``Symbolicator/preload(_:)``)
    /// several images that share one file (the library by path, and by build ID through a debug directory
    /// whose build-ID entry links to it), opened before but not read, then symbolicates every address of a
    /// function in them. All get the frames a fresh single-threaded ``Symbolicator`` gives.
    func testSymbolicatesTheSameImagesFromSeveralThreads() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libinline.so", in: dir)
        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_fixture_outer", in: library))
        let buildID = try XCTUnwrap(try ElfFile(path: library).buildID)
        let debug = dir.appendingPathComponent("debug")
        let entry = debug.appendingPathComponent(".build-id/\(buildID.prefix(2))/\(buildID.dropFirst(2)).debug")
        try FileManager.default.createDirectory(at: entry.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: entry.path, withDestinationPath: library)

        let base: UInt64 = 0x7f20_0000_0000
        let addresses = (0..<outer.size).map { base + outer.value + $0 }
        let reference = Symbolicator(systemDebugDirectory: nil)
        let expected = addresses.map { reference.symbolicate(address: $0, imagePath: library, imageBase: base, buildID: buildID) }
        XCTAssertEqual(expected.first?.last?.symbol, "vaka_fixture_outer")
        XCTAssertNotNil(expected.first?.last?.line)

        // The image by its path, without a path, and at paths that no longer exist (found by build ID).
        let images: [String?] = [library, nil] + (0..<14).map { dir.appendingPathComponent("moved-\($0)/libinline.so").path }
        let symbolicator = Symbolicator(debugDirectories: [debug.path], systemDebugDirectory: nil)
        guard case .success = symbolicator.file(atPath: library) else { return XCTFail("cannot open \(library)") }
        let resolved = try XCTUnwrap(symbolicator.resolve(imagePath: library, buildID: buildID))
        let mismatches = PerThread(count: Self.threads)
        onSeveralThreads { thread in
            // The resolved image's files, shared by every thread, read by each.
            if resolved.symbolFile?.symbol(containing: outer.value)?.name != "vaka_fixture_outer" {
                mismatches.append("resolved image: no vaka_fixture_outer", thread: thread)
            }
            symbolicator.preload(images.map { (imagePath: $0, buildID: buildID) })
            for (index, address) in addresses.enumerated() {
                let image = images[(index + thread) % images.count]
                let frames = symbolicator.symbolicate(address: address, imagePath: image, imageBase: base, buildID: buildID)
                if frames != expected[index] {
                    mismatches.append("\(image ?? "nil") 0x\(String(address, radix: 16)): \(frames)", thread: thread)
                }
            }
        }
        XCTAssertEqual(mismatches.all, [])
    }

    /// ``Symbolicator/preload(addresses:)`` from several threads at once on one ``Symbolicator``: each thread
    /// preloads every address of a function at several paths of one library (images some other thread may
    /// have resolved already, whose lookups then run in tasks of their own), then symbolicates them. All get
    /// the frames a fresh single-threaded ``Symbolicator`` gives.
    func testPreloadsAddressesFromSeveralThreads() throws {
        let dir = try ScratchDirs.directory(for: self)
        let library = try NativeFixture.compile("libinline.so", in: dir)
        let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_fixture_outer", in: library))
        let buildID = try XCTUnwrap(try ElfFile(path: library).buildID)
        var copies = [library]
        for index in 0..<3 {
            let copy = dir.appendingPathComponent("copy-\(index)/libinline.so")
            try FileManager.default.createDirectory(at: copy.deletingLastPathComponent(), withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: library, toPath: copy.path)
            copies.append(copy.path)
        }
        let paths = copies
        let base: UInt64 = 0x7f30_0000_0000
        let addresses = (0..<outer.size).map { base + outer.value + $0 }
        let reference = Symbolicator(systemDebugDirectory: nil)
        let expected = addresses.map { reference.symbolicate(address: $0, imagePath: library, imageBase: base, buildID: buildID) }
        XCTAssertEqual(expected.first?.last?.symbol, "vaka_fixture_outer")
        XCTAssertNotNil(expected.first?.last?.line)

        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        let mismatches = PerThread(count: Self.threads)
        onSeveralThreads { thread in
            let mine = paths.indices.map { paths[($0 + thread) % paths.count] }
            symbolicator.preload(addresses: mine.flatMap { path in
                addresses.map { (imagePath: path, buildID: buildID, imageBase: base, address: $0) }
            })
            for path in mine {
                for (index, address) in addresses.enumerated() {
                    let frames = symbolicator.symbolicate(address: address, imagePath: path, imageBase: base, buildID: buildID)
                    if frames != expected[index] {
                        mismatches.append("\(path) 0x\(String(address, radix: 16)): \(frames)", thread: thread)
                    }
                }
            }
        }
        XCTAssertEqual(mismatches.all, [])
    }

    /// Two libraries with zlib-compressed DWARF (`objcopy --compress-debug-sections=zlib`) symbolicated from
    /// several threads at once, each inflating its sections with a second thread of its own
    /// (`vaka_dw_inflate_sections`): through one shared ``Symbolicator`` (preloading both) and through one
    /// fresh ``Symbolicator`` per thread (the same files inflated side by side). All get the frames a
    /// single-threaded ``Symbolicator`` gives for the uncompressed libraries.
    func testSymbolicatesCompressedDebugSectionsFromSeveralThreads() throws {
        let dir = try ScratchDirs.directory(for: self)
        let objcopy = try Peers.tool("objcopy", install: "binutils: scripts/bootstrap")
        var images: [(path: String, buildID: String, addresses: [UInt64], expected: [[SymbolicatedFrame]])] = []
        let base: UInt64 = 0x7f30_0000_0000
        for (name, flags) in [("libinline.so", [String]()), ("libinline-O1.so", ["-O1"])] {
            let build = dir.appendingPathComponent("build-\(name)")
            try FileManager.default.createDirectory(at: build, withIntermediateDirectories: true)
            let library = try NativeFixture.compile(name, in: build, extraFlags: flags)
            let compressed = dir.appendingPathComponent(name).path
            let result = try runProcess(objcopy, ["--compress-debug-sections=zlib", library, compressed])
            XCTAssertEqual(result.status, 0, result.stderrText)
            // `readelf -S -W`: .debug_info's flags column has C (SHF_COMPRESSED).
            let sections = try runProcess(try Peers.tool("readelf", install: "binutils: scripts/bootstrap"), ["-S", "-W", compressed])
            let info = sections.stdoutText.split(separator: "\n").first { $0.contains(" .debug_info ") }
            XCTAssertEqual(info.flatMap { $0.split(separator: " ").dropLast(3).last.map(String.init) }, "C", info.map(String.init) ?? "no .debug_info")
            let buildID = try XCTUnwrap(try ElfFile(path: library).buildID)
            let outer = try XCTUnwrap(try NativeFixture.symbol("vaka_fixture_outer", in: library))
            let addresses = (0..<outer.size).map { base + outer.value + $0 }
            let reference = Symbolicator(systemDebugDirectory: nil)
            let expected = addresses.map { reference.symbolicate(address: $0, imagePath: library, imageBase: base, buildID: buildID) }
            XCTAssertEqual(expected.first?.last?.symbol, "vaka_fixture_outer")
            XCTAssertNotNil(expected.first?.last?.line)
            images.append((compressed, buildID, addresses, expected))
        }
        let all = images
        let shared = Symbolicator(systemDebugDirectory: nil)
        let mismatches = PerThread(count: Self.threads)
        onSeveralThreads { thread in
            let own = Symbolicator(systemDebugDirectory: nil)
            shared.preload(all.map { (imagePath: $0.path, buildID: $0.buildID) })
            for (offset, symbolicator) in [shared, own].enumerated() {
                let image = all[(thread + offset) % all.count]
                for (index, address) in image.addresses.enumerated() {
                    let frames = symbolicator.symbolicate(address: address, imagePath: image.path, imageBase: base,
                                                          buildID: image.buildID)
                    if frames != image.expected[index] {
                        mismatches.append("\(image.path) 0x\(String(address, radix: 16)): \(frames)", thread: thread)
                    }
                }
            }
        }
        XCTAssertEqual(mismatches.all, [])
    }

    /// One ``Symbolicator`` and one ``ElfFile`` for libc, each looked up from several threads at once, 48
    /// addresses per thread (half of the threads through ``Symbolicator/preload(addresses:)`` and
    /// ``Symbolicator/symbolicate(address:imagePath:imageBase:buildID:debugID:)``): the symbol tables are
    /// scanned for their first lookups and sorted at a later one while the other threads look up. Every
    /// answer is the one a table sorted before gives, and no preloaded frame is left behind.
    func testSymbolTablesSortedWhileOtherThreadsLookUp() throws {
        let getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        let libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        let reference = try ElfFile(path: libc.path)
        let buildID = try XCTUnwrap(reference.buildID)
        for _ in 0...32 { _ = reference.symbol(containing: reference.firstLoadVaddr) }  // sorted from here
        let perThread = 48
        let step = reference.loadSpan / UInt64(Self.threads * perThread + 1)
        let vaddrs = (1...(Self.threads * perThread)).map { reference.firstLoadVaddr + UInt64($0) * step }
        let expected = vaddrs.map { reference.symbol(containing: $0) }
        XCTAssertGreaterThan(expected.compactMap { $0 }.count, 16, "addresses in exported functions")
        let symbolicator = Symbolicator(systemDebugDirectory: nil)
        let shared = try ElfFile(path: libc.path)
        let mismatches = PerThread(count: Self.threads)
        onSeveralThreads { thread in
            // Interleaved, so every thread asks throughout the table's scanning lookups. Odd threads first
            // preload their addresses (looked up in preload tasks while the others look up) and then
            // symbolicate them.
            let mine = Array(stride(from: thread, to: vaddrs.count, by: Self.threads))
            let runtime = { (vaddr: UInt64) in vaddr &- reference.firstLoadVaddr &+ libc.base }
            if thread % 2 == 1 {
                symbolicator.preload(addresses: mine.map {
                    (imagePath: libc.path, buildID: buildID, imageBase: libc.base, address: runtime(vaddrs[$0]))
                })
            }
            for index in mine {
                let vaddr = vaddrs[index]
                let info = thread % 2 == 1
                    ? symbolicator.symbolicate(address: runtime(vaddr), imagePath: libc.path, imageBase: libc.base, buildID: buildID).last
                    : symbolicator.lookup(address: runtime(vaddr), imagePath: libc.path, imageBase: libc.base, buildID: buildID)
                let symbol = shared.symbol(containing: vaddr)
                let want = expected[index]
                if info?.symbol != want?.name || info?.symbolAddress != want.map({ runtime($0.address) }) || symbol != want {
                    mismatches.append("0x\(String(vaddr, radix: 16)): \(String(describing: info)) \(String(describing: symbol))",
                                      thread: thread)
                }
            }
        }
        XCTAssertEqual(mismatches.all, [])
        XCTAssertEqual(symbolicator.preloadedAnswerCount, 0)
    }
}

/// Strings collected from several threads, one list per thread (no lock, so the test's own bookkeeping adds
/// no ordering between the threads for ThreadSanitizer). `@unchecked Sendable` is safe: each thread appends
/// only to its own list, and ``all`` is read after every thread has finished (`DispatchGroup.wait`).
private final class PerThread: @unchecked Sendable {
    private let lists: UnsafeMutableBufferPointer<[String]>

    init(count: Int) {
        lists = .allocate(capacity: count)
        lists.initialize(repeating: [])
    }

    deinit {
        _ = lists.deinitialize()
        lists.deallocate()
    }

    func append(_ text: String, thread: Int) {
        lists[thread].append(text)
    }

    var all: [String] { lists.flatMap { $0 } }
}
