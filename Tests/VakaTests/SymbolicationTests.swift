import Foundation
import XCTest
import VakaTestSupport
import VakaSymbolication

/// A C-callable function with a known name in the test executable, for symbol lookups.
@_cdecl("vaka_test_marker_function")
@inline(never)
public func vakaTestMarkerFunction(_ value: Int32) -> Int32 {
    value &* 3 &+ 1
}

/// The runtime address of `vaka_test_marker_function`.
func markerFunctionAddress() -> UInt64 {
    let function: @convention(c) (Int32) -> Int32 = vakaTestMarkerFunction
    return UInt64(UInt(bitPattern: unsafeBitCast(function, to: UnsafeRawPointer.self)))
}

/// The runtime address of an exported symbol, from `dlsym(RTLD_DEFAULT, name)`.
func exportedSymbolAddress(_ name: String) -> UInt64? {
    guard let address = dlsym(nil, name) else { return nil }
    return UInt64(UInt(bitPattern: address))
}

/// The test bundle's marker function and libc's `getpid`: each address, the image it is in (path, load
/// address) and that image's build ID (hex).
struct MarkerAndLibc {
    let marker: UInt64, getpid: UInt64
    let own: (path: String, base: UInt64), libc: (path: String, base: UInt64)
    let ownID: String, libcID: String

    init() throws {
        marker = markerFunctionAddress()
        getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        own = try XCTUnwrap(try TestSupport.image(containing: marker))
        libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        ownID = try XCTUnwrap(try ElfFile(path: own.path).buildID)
        libcID = try XCTUnwrap(try ElfFile(path: libc.path).buildID)
    }
}

final class DebugIDTests: XCTestCase {
    func testDebugIDVectorsFromTheNotes() {
        XCTAssertEqual(DebugID.fromBuildID("68220ae2c65d65c1b6aaa12fa6765a6ec2f5f434"), "e20a2268-5dc6-c165-b6aa-a12fa6765a6e")
        XCTAssertEqual(DebugID.fromBuildID("6e4250d99632b8031d64f7107b94ff9c4737db1a"), "d950426e-3296-03b8-1d64-f7107b94ff9c")
        XCTAssertEqual(DebugID.fromBuildID("6E4250D99632B8031D64F7107B94FF9C4737DB1A"), "d950426e-3296-03b8-1d64-f7107b94ff9c")
    }

    func testShortBuildIDsArePaddedWithZeros() {
        XCTAssertEqual(DebugID.fromBuildID("0102030405060708"), "04030201-0605-0807-0000-000000000000")
        XCTAssertEqual(DebugID.fromBuildID("ab"), "000000ab-0000-0000-0000-000000000000")
    }

    func testBadBuildIDsGiveNil() {
        XCTAssertNil(DebugID.fromBuildID(""))
        XCTAssertNil(DebugID.fromBuildID("abc"))
        XCTAssertNil(DebugID.fromBuildID("zz"))
    }

    func testTextSectionHashXorsSixteenByteChunks() {
        var text = [UInt8](repeating: 0, count: 32)
        text[0] = 0x01; text[16] = 0x03   // byte 0: 1 ^ 3 = 2
        text[15] = 0xff
        XCTAssertEqual(DebugID.fromTextSection(text), "00000002-0000-0000-0000-0000000000ff")
        // Only the first page counts.
        XCTAssertEqual(DebugID.fromTextSection(text + [UInt8](repeating: 0, count: 4096 - 32) + [0x55]),
                       DebugID.fromTextSection(text))
        XCTAssertNil(DebugID.fromTextSection([UInt8]()))
    }
}

final class ElfFileTests: XCTestCase {
    func testBuildIDOfTheTestExecutableEqualsReadelf() throws {
        let path = TestSupport.selfExecutable
        let expected = try XCTUnwrap(try TestSupport.readelfBuildID(path), "readelf -n shows no build ID for \(path)")
        let file = try ElfFile(path: path)
        XCTAssertEqual(file.buildID, expected)
        XCTAssertGreaterThan(file.loadSpan, 0)
        XCTAssertTrue(file.hasSymtab, "debug test executable should not be stripped")
    }

    func testBuildIDOfLibcEqualsReadelf() throws {
        let getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        let libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        let expected = try XCTUnwrap(try TestSupport.readelfBuildID(libc.path))
        XCTAssertEqual(try ElfFile(path: libc.path).buildID, expected)
    }

    func testFindsAFunctionOfTheTestExecutableByRuntimeAddress() throws {
        let address = markerFunctionAddress()
        XCTAssertEqual(vakaTestMarkerFunction(2), 7)
        let image = try XCTUnwrap(try TestSupport.image(containing: address))
        XCTAssertEqual(image.path, TestSupport.selfExecutable)
        let file = try ElfFile(path: image.path)
        for offset: UInt64 in [0, 1, 4] {
            let symbol = try XCTUnwrap(file.symbol(containing: file.vaddr(ofRuntimeAddress: address + offset, imageBase: image.base)))
            XCTAssertEqual(symbol.name, "vaka_test_marker_function")
            XCTAssertEqual(file.runtimeAddress(ofVaddr: symbol.address, imageBase: image.base), address)
            XCTAssertGreaterThan(symbol.size, offset)
        }
    }

    func testFallsBackToDynsymForStrippedLibc() throws {
        let getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        let libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        let symbolicator = Symbolicator()
        let buildID = try XCTUnwrap(try ElfFile(path: libc.path).buildID)
        let info = try XCTUnwrap(symbolicator.lookup(address: getpid + 1, imagePath: libc.path, imageBase: libc.base, buildID: buildID))
        XCTAssertTrue(["getpid", "__getpid"].contains(info.symbol), info.symbol)
        XCTAssertEqual(info.function, info.symbol)
        XCTAssertEqual(info.symbolAddress, getpid)
    }

    /// A symbol table answers its first lookups by scanning its entries and sorts them at a later one
    /// (``ElfFile/symbol(containing:)``): both ways give the same symbol for every address. Two opens of libc
    /// (its `.dynsym` has GLOBAL and WEAK aliases at one address, so the tie-breaks are exercised) look up the
    /// same 96 addresses spread over its code, one first to last and one last to first, so each address is
    /// answered by a scan in one file and by the sorted table in the other.
    func testScannedAndSortedSymbolTablesGiveTheSameSymbols() throws {
        let getpid = try XCTUnwrap(exportedSymbolAddress("getpid"))
        let libc = try XCTUnwrap(try TestSupport.image(containing: getpid))
        let forward = try ElfFile(path: libc.path)
        let backward = try ElfFile(path: libc.path)
        let step = forward.loadSpan / 97
        let addresses = (1...96).map { forward.firstLoadVaddr + UInt64($0) * step } + [forward.vaddr(ofRuntimeAddress: getpid, imageBase: libc.base)]
        let scannedFirst = addresses.map { forward.symbol(containing: $0) }
        let sortedFirst = Array(addresses.reversed().map { backward.symbol(containing: $0) }.reversed())
        XCTAssertEqual(scannedFirst, sortedFirst)
        XCTAssertGreaterThan(scannedFirst.compactMap { $0 }.count, 16, "addresses in exported functions")
        // getpid is exported at one address as GLOBAL __getpid and WEAK getpid: the GLOBAL one wins both ways.
        let last = try XCTUnwrap(scannedFirst.last ?? nil)
        XCTAssertEqual(last.address, forward.vaddr(ofRuntimeAddress: getpid, imageBase: libc.base))
        XCTAssertEqual(last.name, "__getpid")
    }

    /// ``Symbolicator/preload(addresses:)`` looks the addresses up ahead; a later
    /// ``Symbolicator/symbolicate(address:imagePath:imageBase:buildID:debugID:)`` answers with the same frames
    /// (function, file, line, symbol address) as a symbolicator that looks them up itself, also for an
    /// address asked with another image base than the one preloaded.
    func testPreloadedAddressesGiveTheFramesOfALookup() throws {
        let images = try MarkerAndLibc()
        let (marker, getpid, own, libc, ownID, libcID) = (images.marker, images.getpid, images.own, images.libc, images.ownID, images.libcID)
        let asked: [(path: String, base: UInt64, buildID: String, address: UInt64)] = [
            (own.path, own.base, ownID, marker + 2), (libc.path, libc.base, libcID, getpid + 1),
            (own.path, own.base, ownID, marker), (libc.path, libc.base, libcID, getpid),
        ]
        let ahead = Symbolicator(systemDebugDirectory: nil)
        ahead.preload(addresses: asked.map { (imagePath: $0.path, buildID: $0.buildID, imageBase: $0.base, address: $0.address) })
        let direct = Symbolicator(systemDebugDirectory: nil)
        // First the marker's address in a process where the image was loaded 3 bytes lower: another lookup
        // than the preloaded one (its frames differ), asked before the preloaded answer is taken.
        let shifted = own.base - 3
        let shiftedFrames = ahead.symbolicate(address: marker + 2, imagePath: own.path, imageBase: shifted, buildID: ownID)
        XCTAssertEqual(shiftedFrames, direct.symbolicate(address: marker + 2, imagePath: own.path, imageBase: shifted, buildID: ownID))
        XCTAssertNotEqual(shiftedFrames.last?.symbolAddress, marker)
        for item in asked {
            let expected = direct.symbolicate(address: item.address, imagePath: item.path, imageBase: item.base, buildID: item.buildID)
            XCTAssertFalse(expected.isEmpty)
            XCTAssertEqual(ahead.symbolicate(address: item.address, imagePath: item.path, imageBase: item.base, buildID: item.buildID),
                           expected)
        }
        let markerFrame = try XCTUnwrap(direct.symbolicate(address: marker + 2, imagePath: own.path, imageBase: own.base,
                                                           buildID: ownID).last)
        XCTAssertEqual(markerFrame.symbolAddress, marker)
        XCTAssertNotNil(markerFrame.file, "the test executable's DWARF gives a file: \(markerFrame)")
        // A second call (another thread of a report) with images resolved by the first: looked up too.
        ahead.preload(addresses: [(imagePath: own.path, buildID: ownID, imageBase: own.base, address: marker + 4),
                                  (imagePath: libc.path, buildID: libcID, imageBase: libc.base, address: getpid + 2)])
        XCTAssertEqual(ahead.symbolicate(address: marker + 4, imagePath: own.path, imageBase: own.base, buildID: ownID),
                       direct.symbolicate(address: marker + 4, imagePath: own.path, imageBase: own.base, buildID: ownID))
        XCTAssertEqual(ahead.symbolicate(address: getpid + 2, imagePath: libc.path, imageBase: libc.base, buildID: libcID),
                       direct.symbolicate(address: getpid + 2, imagePath: libc.path, imageBase: libc.base, buildID: libcID))
    }

    func testSymbolicatorNeedsTheSameBuildIDAndOpensEachFileOnce() throws {
        let address = markerFunctionAddress()
        let image = try XCTUnwrap(try TestSupport.image(containing: address))
        let symbolicator = Symbolicator()
        let buildID = try XCTUnwrap(try ElfFile(path: image.path).buildID)
        let info = try XCTUnwrap(symbolicator.lookup(address: address + 2, imagePath: image.path, imageBase: image.base,
                                                     buildID: buildID.uppercased()))
        XCTAssertEqual(info, SymbolInfo(symbol: "vaka_test_marker_function", function: "vaka_test_marker_function",
                                        symbolAddress: address))
        XCTAssertNil(symbolicator.lookup(address: address, imagePath: image.path, imageBase: image.base,
                                         buildID: "00" + buildID.dropFirst(2)))
        XCTAssertNil(symbolicator.lookup(address: address, imagePath: "/nonexistent/file", imageBase: image.base, buildID: buildID))
        XCTAssertNil(symbolicator.lookup(address: address, imagePath: "/nonexistent/file", imageBase: image.base, buildID: buildID))
        XCTAssertEqual(symbolicator.openedFileCount, 2)
    }

    func testRefusesFilesThatAreNotELF() throws {
        let dir = try ScratchDirs.directory(for: self)
        let file = dir.appendingPathComponent("not-elf")
        try Data("hello, this is not ELF".utf8).write(to: file)
        XCTAssertThrowsError(try ElfFile(path: file.path)) { error in
            guard case .notELF? = error as? ElfError else { return XCTFail("\(error)") }
        }
        XCTAssertThrowsError(try ElfFile(path: dir.path)) { error in
            XCTAssertEqual(error as? ElfError, .notARegularFile(path: dir.path))
        }
        XCTAssertThrowsError(try ElfFile(path: dir.appendingPathComponent("missing").path)) { error in
            XCTAssertEqual(error as? ElfError, .cannotOpen(path: dir.appendingPathComponent("missing").path, errno: ENOENT))
        }
    }
}

final class DemanglerTests: XCTestCase {
    func testDemanglesSwiftNamesWithTheSwiftRuntime() {
        XCTAssertEqual(Demangler.demangle("$s4demo9crashHereySiSaySiGF"), "demo.crashHere(Swift.Array<Swift.Int>) -> Swift.Int")
        XCTAssertEqual(Demangler.demangleSwift("$sSS5countSivg"), "Swift.String.count.getter : Swift.Int")
    }

    func testLeavesCNamesAlone() {
        XCTAssertEqual(Demangler.demangle("main"), "main")
        XCTAssertEqual(Demangler.demangle("crashme_null_deref"), "crashme_null_deref")
        XCTAssertNil(Demangler.demangleSwift("$notmangled"))
    }

    func testDemanglesCxxNamesWhenTheCxxRuntimeIsLoaded() throws {
        guard dlsym(nil, "__cxa_demangle") != nil else {
            throw XCTSkip("no C++ runtime loaded in this process")
        }
        XCTAssertEqual(Demangler.demangle("_ZN3foo3barEi"), "foo::bar(int)")
        XCTAssertEqual(Demangler.demangle("_Zgarbage"), "_Zgarbage")
    }
}

/// `Symbolicator(cacheDirectory:)`: answers kept per build ID between instances (as between processes).
final class SymbolCacheTests: XCTestCase {
    /// A second instance answers from the cache what the first resolved from the files, with the same
    /// frames and without reading more than the image file's headers; another list of debug directories
    /// makes the cached answers stale (resolved from the files again).
    func testSecondInstanceAnswersFromTheCacheUntilTheDebugDirectoriesChange() throws {
        let address = markerFunctionAddress() + 2
        let image = try XCTUnwrap(try TestSupport.image(containing: address))
        let buildID = try XCTUnwrap(try ElfFile(path: image.path).buildID)
        let directory = NSTemporaryDirectory() + "vaka-symcache-\(UUID().uuidString)"
        let emptyDebugDirectory = directory + "-debug"
        try FileManager.default.createDirectory(atPath: emptyDebugDirectory, withIntermediateDirectories: true)
        defer {
            try? FileManager.default.removeItem(atPath: directory)
            try? FileManager.default.removeItem(atPath: emptyDebugDirectory)
        }
        func frames(_ symbolicator: Symbolicator) -> [SymbolicatedFrame] {
            symbolicator.symbolicate(address: address, imagePath: image.path, imageBase: image.base, buildID: buildID.uppercased())
        }
        let expected = frames(Symbolicator(systemDebugDirectory: nil))
        XCTAssertEqual(expected.last?.symbol, "vaka_test_marker_function")

        let first = Symbolicator(systemDebugDirectory: nil, cacheDirectory: directory)
        XCTAssertEqual(frames(first), expected)
        XCTAssertEqual(first.cacheHitCount, 0)
        // Written under umask 0777 into its directory: the file is still 0600, not mode 0.
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let saved = umask(0o777)
        first.saveCache()
        umask(saved)
        let file = directory + "/\(buildID).symcache"
        XCTAssertTrue(FileManager.default.fileExists(atPath: file))
        let header = String(decoding: try XCTUnwrap(FileManager.default.contents(atPath: file)).prefix(16), as: UTF8.self)
        XCTAssertEqual(header, "VAKA-SYMCACHE 2 ")
        // Private like the rest of the storage directory, whatever the umask leaves.
        let fileMode = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int)
        let directoryMode = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: directory)[.posixPermissions] as? Int)
        XCTAssertEqual(fileMode, 0o600)
        XCTAssertEqual(directoryMode, 0o700)

        let second = Symbolicator(systemDebugDirectory: nil, cacheDirectory: directory)
        XCTAssertEqual(frames(second), expected)
        XCTAssertEqual(second.cacheHitCount, 1)
        XCTAssertEqual(second.openedFileCount, 1, "more than the image file's headers were read")

        let other = Symbolicator(debugDirectories: [emptyDebugDirectory], systemDebugDirectory: nil, cacheDirectory: directory)
        XCTAssertEqual(frames(other), expected)
        XCTAssertEqual(other.cacheHitCount, 0, "an answer made with other debug directories was used")
    }
    /// Saving trims the directory to 256 cache files, removing the least recently written ones (older
    /// files of other build IDs here), never the file just written; other files are left alone.
    func testSavingKeepsAtMost256CacheFilesRemovingTheOldest() throws {
        let address = markerFunctionAddress() + 2
        let image = try XCTUnwrap(try TestSupport.image(containing: address))
        let buildID = try XCTUnwrap(try ElfFile(path: image.path).buildID)
        let directory = NSTemporaryDirectory() + "vaka-symcache-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for index in 0..<300 {
            let path = directory + "/" + String(format: "%040x", index) + ".symcache"
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("old".utf8)))
            var times = [timeval(tv_sec: 1_000_000 + index, tv_usec: 0), timeval(tv_sec: 1_000_000 + index, tv_usec: 0)]
            XCTAssertEqual(utimes(path, &times), 0)
        }
        XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/notes.txt", contents: Data("kept".utf8)))
        let symbolicator = Symbolicator(systemDebugDirectory: nil, cacheDirectory: directory)
        XCTAssertFalse(symbolicator.symbolicate(address: address, imagePath: image.path, imageBase: image.base, buildID: buildID).isEmpty)
        symbolicator.saveCache()
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        XCTAssertEqual(names.filter { $0.hasSuffix(".symcache") }.count, 256)
        XCTAssertTrue(names.contains("\(buildID).symcache"))
        XCTAssertTrue(names.contains("notes.txt"))
        XCTAssertFalse(names.contains(String(format: "%040x", 0) + ".symcache"), "the oldest file was kept")
        XCTAssertTrue(names.contains(String(format: "%040x", 299) + ".symcache"), "the newest old file was removed")
    }
}
