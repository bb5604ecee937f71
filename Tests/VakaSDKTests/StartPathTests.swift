import XCTest
import VakaTestSupport
import VakaSymbolication
@testable import Vaka

/// The pieces `Vaka.start` and a run's exit use instead of heavier Foundation calls: the hand-written JSON of
/// `scope.json`, session updates and envelope headers (byte-equal to `JSONEncoder`'s), RFC 3339 times (equal to
/// glibc's `gmtime_r`), random ids, file paths and directory listings, the default release from the loaded image list, and the single session
/// update of a run that ends before its start's background part made the first one.
final class StartPathTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private func encoderBytes<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// Strings that need escaping (quotes, backslashes, every control character), slashes and non-ASCII text.
    private let awkward = "a\"b\\c/d\u{0}\u{1}\u{8}\u{9}\u{A}\u{C}\u{D}\u{1F}\u{7F} é 日本 🙂"

    func testScopeJSONIsWhatJSONEncoderWrites() throws {
        var session = SessionState(did: "d1d1d1d1-0000-4000-8000-000000000000", started: Date(timeIntervalSince1970: 1_764_530_441.444_318))
        session.errors = 3
        _ = session.update(.ok, now: Date(), release: "r", environment: "e")
        let scopes = [
            RunScope(runID: "0C0FFEE0-0000-4000-8000-000000000002", release: "shop@1.2.3", environment: "staging",
                     tags: [awkward: awkward, "b": "2", "a": "1"], userID: awkward, session: session),
            RunScope(runID: "R", release: "", environment: "production", tags: [:], userID: nil, session: nil),
            RunScope(runID: "R", release: "x", environment: "y", tags: ["k": "v"], userID: "u",
                     session: SessionState(did: nil, started: Date(timeIntervalSince1970: 1_700_000_000))),
        ]
        for scope in scopes {
            XCTAssertEqual(String(decoding: scope.jsonData(), as: UTF8.self), try encoderBytes(scope))
            XCTAssertEqual(try JSONDecoder().decode(RunScope.self, from: scope.jsonData()), scope)
        }
        // A stored property the writer does not know would be missing from scope.json: count them.
        XCTAssertEqual(Mirror(reflecting: scopes[0]).children.count, 6, "RunScope changed: add the field to RunScope.jsonData()")
        XCTAssertEqual(Mirror(reflecting: session).children.count, 6, "SessionState changed: add the field to SessionState.json")
    }

    func testSessionUpdateJSONIsWhatJSONEncoderWrites() throws {
        var session = SessionState(did: "d1d1d1d1-0000-4000-8000-000000000000", started: Date(timeIntervalSince1970: 1_764_530_441.444_318))
        let first = session.update(.ok, now: Date(timeIntervalSince1970: 1_764_530_441.5), release: awkward, environment: "production")
        session.errors = 2
        let last = session.update(.exited, now: Date(timeIntervalSince1970: 1_764_530_452.123_456), release: "app@1", environment: nil)
        var anonymous = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_700_000_000))
        let crashed = anonymous.update(.crashed, now: Date(timeIntervalSince1970: 1_700_000_011), release: "a", environment: "b")
        for update in [first, last, crashed] {
            XCTAssertEqual(String(decoding: update.jsonData(), as: UTF8.self), try encoderBytes(update))
        }
        XCTAssertEqual(Mirror(reflecting: first).children.count, 10, "SessionUpdate changed: add the field to jsonData()")
    }

    func testEnvelopeHeaderLinesAreWhatJSONEncoderWrites() throws {
        let header = Envelope.Header(eventID: "0123456789abcdef0123456789abcdef", sentAt: Date(timeIntervalSince1970: 1_714_566_896.789))
        var withDSN = header
        withDSN.dsn = "https://key@example.com/1"
        var bare = Envelope.Header(eventID: nil, sentAt: nil)
        bare.sdk = nil
        for h in [header, withDSN, bare] {
            let line = String(decoding: Envelope(header: h, items: []).serialized(), as: UTF8.self)
            var expected: [String: Any] = [:]
            if let id = h.eventID { expected["event_id"] = id }
            if let dsn = h.dsn { expected["dsn"] = dsn }
            if let sent = h.sentAt { expected["sent_at"] = Timestamps.rfc3339(sent) }
            if let sdk = h.sdk { expected["sdk"] = ["name": sdk.name, "version": sdk.version] }
            let reference = try JSONSerialization.data(withJSONObject: expected, options: [.sortedKeys, .withoutEscapingSlashes])
            XCTAssertEqual(line, String(decoding: reference, as: UTF8.self) + "\n")
        }
    }

    /// Every millisecond is written as glibc's `gmtime_r` names its second (proleptic Gregorian, UTC), over years
    /// 1 to 9999, with the millisecond rounded down.
    func testRFC3339AgreesWithGmtime() {
        var generator = SystemRandomNumberGenerator()
        var wrong: [String] = []
        let samples: [Int64] = [0, -1, 951_782_400_000, 4_107_542_399_999, -62_135_596_800_000, 253_402_300_799_999]
            + (0..<20_000).map { _ in Int64.random(in: -62_135_596_800_000...253_402_300_799_999, using: &generator) }
        for ms in samples {
            var seconds = time_t(ms >= 0 ? ms / 1000 : (ms - 999) / 1000)
            var parts = tm()
            gmtime_r(&seconds, &parts)
            let expected = String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                                  Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(((ms % 1000) + 1000) % 1000))
            let text = Timestamps.rfc3339(Date(timeIntervalSince1970: Double(ms) / 1000))
            if text != expected { wrong.append("\(ms): \(text) != \(expected)") }
        }
        XCTAssertEqual(Array(wrong.prefix(5)), [])
    }

    func testRandomIDsAreVersion4UUIDs() {
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = RandomID.uuid()
            XCTAssertTrue(RandomID.isUUID(id), id)
            XCTAssertNotNil(UUID(uuidString: id), id)
            XCTAssertEqual(id, id.uppercased())
            let chars = Array(id)
            XCTAssertEqual(chars[14], "4", id)
            XCTAssertTrue("89AB".contains(chars[19]), id)
            seen.insert(id)
            let hex = RandomID.hex32()
            XCTAssertEqual(hex.count, 32)
            XCTAssertTrue(hex.allSatisfy { "0123456789abcdef".contains($0) }, hex)
            let lower = RandomID.uuid(lowercase: true)
            XCTAssertEqual(lower, lower.lowercased())
        }
        XCTAssertEqual(seen.count, 1000)
        XCTAssertFalse(RandomID.isUUID("0F8D4E2A-3B1C-4D5E-9F60-718293A4B5C"))
        XCTAssertFalse(RandomID.isUUID("0F8D4E2A-3B1C-4D5E-9F60-718293A4B5CG"))
        XCTAssertFalse(RandomID.isUUID("0F8D4E2A_3B1C-4D5E-9F60-718293A4B5C6"))
    }

    /// `fileSystemPath` is `path` for every file URL the SDK makes: absolute and relative, with spaces, `%`, `?`,
    /// `#`, non-ASCII names, trailing slashes, directories and the root.
    func testFileSystemPathIsPath() {
        let names = ["/", "/tmp", "/tmp/", "/a b/c d", "/a%b/%20", "/q?x=1", "/h#frag", "/é/日本/🙂", "relative/dir",
                     "rel", "/x//y", "/a/./b/../c", "/trailing//", "/semi;colon", "/plus+and&amp", "/\\back"]
        var urls: [URL] = []
        for name in names {
            urls.append(URL(fileURLWithPath: name))
            urls.append(URL(fileURLWithPath: name, isDirectory: true))
            urls.append(URL(fileURLWithPath: name).appendingPathComponent("runs", isDirectory: true).appendingPathComponent("lock"))
            urls.append(URL(fileURLWithPath: name).appendingPathComponent("a b%c?d#e"))
        }
        urls.append(URL(string: "https://example.com/a/b")!)
        urls.append(URL(string: "file://host/share/x")!)
        for url in urls { XCTAssertEqual(url.fileSystemPath, url.path, url.absoluteString) }
    }

    /// `PrivateFiles.directoryNames` lists what `FileManager` lists (hidden files, spaces, non-ASCII names,
    /// directories), and nothing for a directory that is not there.
    func testDirectoryNamesAreFileManagersNames() throws {
        let dir = dirs.make("names")
        for name in [".hidden", "a b", "é日本🙂", "x.crash", String(repeating: "n", count: 255)] {
            XCTAssertTrue(FileManager.default.createFile(atPath: dir.appendingPathComponent(name).path, contents: Data()))
        }
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("sub"), withIntermediateDirectories: false)
        XCTAssertEqual(PrivateFiles.directoryNames(dir.path).sorted(), try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted())
        XCTAssertEqual(PrivateFiles.directoryNames(dir.path).count, 6)
        XCTAssertEqual(PrivateFiles.directoryNames(dir.appendingPathComponent("missing").path), [])
    }

    /// The default release's build ID is the executable's, as libelf reads it from the file.
    func testDefaultReleaseCarriesTheExecutablesBuildID() throws {
        let path = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let buildID = try XCTUnwrap(try ElfFile(path: path).buildID)
        let name = (path as NSString).lastPathComponent
        XCTAssertEqual(Vaka.defaultRelease(), Vaka.Options.boundedRelease("\(name)@0.0.0+\(buildID.prefix(12))"))
    }

    /// A run that ends before the background part of its start made the first session update sends one update,
    /// `init: true` and `exited`; its run directory is gone.
    func testRunEndingBeforeItsFirstUpdateSendsOneSessionUpdate() throws {
        let storage = dirs.make("one-update")
        let options = Vaka.Options(release: "shop@1.2.3", environment: "staging", sessionTracking: true, storageDirectory: storage)
        let runID = "0C0FFEE0-0000-4000-8000-000000000003"
        let client = try Client(options: options, storage: storage, runID: runID, dsn: nil, log: nil)
        client.markEndingForTesting()
        client.begin()
        client.end(timeout: 1)
        let sessions = try readOutbox(storage).flatMap(\.sessions)
        XCTAssertEqual(sessions.count, 1, "\(sessions)")
        XCTAssertEqual(sessions.first?["status"] as? String, "exited")
        XCTAssertEqual(sessions.first?["init"] as? Bool, true)
        XCTAssertNotNil(sessions.first?["duration"] as? Double)
        XCTAssertFalse(FileManager.default.fileExists(atPath: RunDirectory.root(storage).appendingPathComponent(runID).path))
    }
}
