import XCTest
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import VakaSymbolication
@testable import Vaka

/// What the start and exit paths use instead of `URL`, `Data` and the standard library's integer text (so that a
/// program using Vaka does not get those pages of Foundation and libswiftCore resident, docs/cost.md) gives the
/// same paths, bytes and text as what it replaces.
final class StartPathTextTests: XCTestCase {
    /// ``NumberText/decimal(_:)-(Int64)`` is `String(_:)`, at the edges and for values of every length.
    func testDecimalIsWhatStringGives() {
        var values: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.min + 1, 1_796_112_066_123_456]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let bits = Int64.random(in: 0...62, using: &generator)
            values.append(Int64.random(in: -(1 << bits)...(1 << bits), using: &generator))
        }
        for value in values {
            XCTAssertEqual(NumberText.decimal(value), String(value), "\(value)")
            XCTAssertEqual(NumberText.decimal(Int(value)), String(Int(value)), "\(value)")
        }
    }

    /// ``NumberText/hex(_:width:)`` is `String(_:radix: 16)` padded with zeros to `width`, keeping the low
    /// digits when the value has more; ``NumberText/hex(bytes:)`` is `DebugID.hexString`.
    func testHexIsWhatStringAndDebugIDGive() {
        XCTAssertEqual(NumberText.hex(0xbeef, width: 8), "0000beef")
        XCTAssertEqual(NumberText.hex(0, width: 8), "00000000")
        XCTAssertEqual(NumberText.hex(0x1_2345_6789, width: 8), "23456789")
        XCTAssertEqual(NumberText.hex(7, width: 0), "")
        for value: UInt32 in [1, 0xf, 0x10, 0x811C_9DC5, UInt32.max] + (0..<500).map({ _ in UInt32.random(in: 0...UInt32.max) }) {
            let text = String(value, radix: 16)
            XCTAssertEqual(NumberText.hex(UInt64(value), width: 8), String(repeating: "0", count: 8 - text.count) + text)
        }
        for count in [0, 1, 6, 20, 32] {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255) }
            XCTAssertEqual(bytes.withUnsafeBytes { NumberText.hex(bytes: $0) }, DebugID.hexString(bytes))
        }
    }

    /// ``PrivateFiles/path(_:_:)`` on a storage path as ``URL/fileSystemPath`` gives it is the path of
    /// ``URL/appendingFileComponent(_:isDirectory:)``, for the storage directories users give (spaces, `%`,
    /// non-ASCII names, trailing `/`s, the root).
    func testPathsAreWhatTheURLsGave() {
        let storages = ["/var/lib/app", "/var/lib/app/", "/var/lib/app//", "/", "/tmp/a b/c%20d", "/tmp/ünï/çödé",
                        "/tmp/x?y#z", "/tmp/.hidden/..dots"]
        for storage in storages {
            let url = URL(fileURLWithPath: storage, isDirectory: true)
            let base = url.fileSystemPath
            XCTAssertEqual(PrivateFiles.trimmingTrailingSlashes(storage), base, storage)
            for component in ["crashes", "runs", "anon_id", "sessions/123-ABC.session", ".tmp-x"] {
                XCTAssertEqual(PrivateFiles.path(base, component),
                               url.appendingFileComponent(component).fileSystemPath, "\(storage) + \(component)")
            }
        }
        XCTAssertEqual(PrivateFiles.trimmingTrailingSlashes("///"), "/")
        XCTAssertEqual(PrivateFiles.trimmingTrailingSlashes(""), "")
    }

    /// The default storage directory `Vaka.start` uses (a path) is ``Vaka/defaultStorageDirectory()``'s, with
    /// `XDG_STATE_HOME` or `HOME` ending in `/`s or not.
    func testDefaultStoragePathIsTheDefaultStorageDirectorysPath() {
        let saved: [(String, String?)] = ["XDG_STATE_HOME", "HOME"].map { name in (name, getenv(name).map { String(cString: $0) }) }
        defer { for (name, value) in saved { if let value { setenv(name, value, 1) } else { unsetenv(name) } } }
        for (xdg, home) in [("/tmp/vaka-state", "/root"), ("/tmp/vaka-state//", "/root"), (nil, "/home/ü b/"),
                            (nil, "/home/user"), ("relative/not/used", "/home/user//")] as [(String?, String)] {
            if let xdg { setenv("XDG_STATE_HOME", xdg, 1) } else { unsetenv("XDG_STATE_HOME") }
            setenv("HOME", home, 1)
            for argv0 in ["/srv/billing/server", "worker", nil] as [String?] {
                XCTAssertEqual(Vaka.defaultStoragePath(argv0: argv0),
                               Vaka.defaultStorageDirectory(argv0: argv0).fileSystemPath, "\(xdg ?? "-") \(home) \(argv0 ?? "-")")
            }
        }
    }

    /// ``PrivateFiles/readCappedBytes(_:maxBytes:)`` reads what ``PrivateFiles/readCapped(_:maxBytes:)`` reads,
    /// and fails as it does: missing, not a regular file, over the cap; at the cap and empty are read.
    func testReadCappedBytesReadsAndFailsAsReadCapped() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vaka-capped-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let files: [(String, [UInt8]?)] = [("empty", []), ("four", Array("abcd".utf8)), ("five", Array("abcde".utf8)),
                                           ("missing", nil)]
        for (name, bytes) in files {
            if let bytes { _ = FileManager.default.createFile(atPath: dir + "/" + name, contents: Data(bytes)) }
        }
        for (name, bytes) in files {
            let path = dir + "/" + name
            switch (PrivateFiles.readCappedBytes(path, maxBytes: 4), PrivateFiles.readCapped(path, maxBytes: 4)) {
            case (.success(let read), .data(let data)):
                XCTAssertEqual(read, bytes, name)
                XCTAssertEqual(Data(read), data, name)
            case (.failure(let failure), let whole):
                XCTAssertEqual(String(describing: failure.read), String(describing: whole), name)
                if name == "five" { guard case .tooLarge(5) = whole else { return XCTFail("five: \(whole)") } }
                if name == "missing" { guard case .unreadable(ENOENT) = whole else { return XCTFail("missing: \(whole)") } }
            default:
                XCTFail("\(name): the two reads disagree")
            }
        }
        guard case .failure(let failure) = PrivateFiles.readCappedBytes(dir, maxBytes: 4), case .notRegular = failure.read else {
            return XCTFail("a directory is not a regular file")
        }
    }

    /// ``PrivateFiles/writeAtomically(text:toPath:sync:)`` leaves the text's UTF-8 bytes at mode 0600, replaces a
    /// file there, and names the failed call (no temporary file left) when the directory is missing.
    func testWriteAtomicallyTextWritesBytesAndFailsByName() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vaka-text-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/anon_id"
        try PrivateFiles.writeAtomically(text: "old", toPath: path, sync: false)
        try PrivateFiles.writeAtomically(text: "ünï-\u{1F600}\n", toPath: path, sync: true)
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("ünï-\u{1F600}\n".utf8))
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o7777, 0o600)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["anon_id"])
        XCTAssertThrowsError(try PrivateFiles.writeAtomically(text: "x", toPath: dir + "/missing/anon_id", sync: false)) { error in
            XCTAssertEqual((error as? DeliveryIOError)?.operation, "open")
            XCTAssertEqual((error as? DeliveryIOError)?.code, ENOENT)
        }
    }

    /// A session record's text and file name, with the integers written by ``NumberText``: as before.
    func testSessionRecordTextAndFileNameAreUnchanged() {
        var session = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_796_112_066.123456))
        session.sid = "0f4c3a1e-7b2d-4c6e-9a8f-1d2e3f4a5b6c"
        session.errors = 12
        let record = SessionRecord(session: session, ended: Date(timeIntervalSince1970: 1_796_112_067.5),
                                   release: "app@1.0", environment: "production")
        XCTAssertEqual(record.text, "vaka-session 1\nsid 0f4c3a1e-7b2d-4c6e-9a8f-1d2e3f4a5b6c\nstarted_us 1796112066123456\n"
                       + "ended_us 1796112067500000\nerrors 12\nrelease app@1.0\nenvironment production\n")
        XCTAssertEqual(record.fileName(runID: "RUN"), "1796112067-RUN.session")
    }
}
