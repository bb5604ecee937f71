import XCTest
import VakaTestSupport
import VakaSymbolication
@testable import Vaka

/// The pieces `Vaka.start` and a run's exit use instead of heavier Foundation calls: RFC 3339 times (equal to
/// glibc's `gmtime_r`), random ids, file paths and names, directory listings and creation, outbox file names, the crash join's
/// check for earlier runs, the default release from the loaded image list, and the single session
/// update of a run that ends before its start's background part made the first one.
final class StartPathTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

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
        // Escapes a program may write into a storage URL: `path` keeps `%2F` and `%00` (a decoded `/` would name
        // another directory, a NUL cut the C string short), decodes the others.
        for text in ["file:///tmp/a%2Fb", "file:///tmp/a%2fb/c", "file:///tmp/a%00b", "file:///tmp/a%20b%C3%A9", "file:///tmp/%41/"] {
            urls.append(URL(string: text)!)
        }
        for url in urls { XCTAssertEqual(url.fileSystemPath, url.path, url.absoluteString) }
    }

    /// `appendingFileComponent` names the file `appendingPathComponent` names (the same path, but for a doubled
    /// `/` after a base that ends in `//`), with the same `hasDirectoryPath`,
    /// for every directory URL the SDK appends to (absolute and relative, the root, trailing slashes, spaces,
    /// `%`, `?`, `#`, non-ASCII) and every component kind it appends (a name, an escape-needing name, a
    /// `/`-joined relative path, a dot name).
    func testAppendingFileComponentIsAppendingPathComponent() {
        let bases = ["/", "/tmp", "/tmp/", "/a b/c d", "/a%b/%20", "/q?x=1", "/h#frag", "/é/日本/🙂", "relative/dir",
                     "rel", "/x//y", "/trailing//", "/semi;colon", "/plus+and&amp"]
        let components = ["crashes", "scope.json", "a b%c?d#e", "runs/0F8D4E2A-3B1C-4D5E-9F60-718293A4B5C6/lock",
                          ".local/state/vaka/app-3f2a9c1e", "日本 🙂", ".tmp-x"]
        for base in bases {
            for url in [URL(fileURLWithPath: base), URL(fileURLWithPath: base, isDirectory: true)] {
                for component in components {
                    for isDirectory in [false, true] {
                        let ours = url.appendingFileComponent(component, isDirectory: isDirectory)
                        let foundation = url.appendingPathComponent(component, isDirectory: isDirectory)
                        let what = "\(url.absoluteString) + \(component) (\(isDirectory))"
                        // The same path, but for the doubled `/` Foundation keeps after a base ending in `//`
                        // (`/trailing//crashes`): the same file.
                        func collapsed(_ path: String) -> String {
                            var p = path
                            while p.contains("//") { p = p.replacingOccurrences(of: "//", with: "/") }
                            return p
                        }
                        if base.hasSuffix("//") {
                            XCTAssertEqual(collapsed(ours.path), collapsed(foundation.path), what)
                        } else {
                            XCTAssertEqual(ours.path, foundation.path, what)
                        }
                        XCTAssertEqual(ours.fileSystemPath, ours.path, what)
                        XCTAssertEqual(ours.hasDirectoryPath, foundation.hasDirectoryPath, what)
                        XCTAssertEqual(ours.standardizedFileURL, foundation.standardizedFileURL, what)
                    }
                }
            }
        }
    }

    /// `PrivateFiles.lexicallyNormalised` (by byte) gives what splitting on `/`, dropping `.`, popping at `..` and joining
    /// gives, for dots inside names, runs of `/`, `..` past the root and non-ASCII names.
    func testLexicallyNormalisedIsSplitAndJoin() {
        func reference(_ path: String) -> String {
            var parts: [Substring] = []
            for part in path.split(separator: "/") {
                if part == "." { continue }
                if part == ".." { _ = parts.popLast(); continue }
                parts.append(part)
            }
            return "/" + parts.joined(separator: "/")
        }
        for path in ["/", "//", "/a/b/../c", "//x///y/", "/..", "/../..", "/./.", "/a/./b/.", "/é/日本/../🙂",
                     "/a..b/.c/..d/...", "/srv/billing/server", "/x/..", "/a/b/c/../../..", "/.hidden/./x", ""] {
            XCTAssertEqual(PrivateFiles.lexicallyNormalised(path), reference(path), path)
        }
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

    /// `fileSystemName` is `lastPathComponent` for every file URL the SDK makes (the root, trailing slashes,
    /// escapes, non-ASCII names), and `lastComponent` the last part `split` gives.
    func testFileSystemNameIsLastPathComponent() {
        let names = ["/", "/tmp", "/tmp/", "/a b/c d", "/a%b/%20", "/é/日本/🙂", "relative/dir", "/x//y", "/trailing//"]
        var urls: [URL] = []
        for name in names {
            urls.append(URL(fileURLWithPath: name))
            urls.append(URL(fileURLWithPath: name, isDirectory: true))
            urls.append(URL(fileURLWithPath: name).appendingPathComponent("20260101T000000.000Z-000001-ab.envelope"))
            urls.append(URL(fileURLWithPath: name).appendingPathComponent("a b%c?d#e"))
        }
        for url in urls { XCTAssertEqual(url.fileSystemName, url.lastPathComponent, url.absoluteString) }
        for path in names + ["", "//", "a", "/usr/bin/my-app", "a/b//"] {
            XCTAssertEqual(PrivateFiles.lastComponent(path), path.split(separator: "/").last.map(String.init) ?? path, path)
        }
    }

    /// `PrivateFiles.makeDirectory` with system calls: missing parents made, the directory itself 0700 (also when
    /// it was there with another mode), and errors that name the call, the path and errno: a file in the way,
    /// a file in the way of a parent.
    func testMakeDirectoryMakesParentsAndMode0700AndNamesItsErrors() throws {
        let root = dirs.make("mkdir")
        let deep = root.appendingPathComponent("a/b/c", isDirectory: true)
        try PrivateFiles.makeDirectory(deep)
        var info = stat()
        XCTAssertEqual(stat(deep.path, &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFDIR)
        XCTAssertEqual(info.st_mode & 0o7777, 0o700)
        XCTAssertEqual(stat(root.appendingPathComponent("a/b").path, &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFDIR)
        try PrivateFiles.makeDirectory(deep)  // there already: nothing to do

        let open = root.appendingPathComponent("open")
        XCTAssertEqual(mkdir(open.path, 0o755), 0)
        XCTAssertEqual(chmod(open.path, 0o755), 0)
        try PrivateFiles.makeDirectory(open)
        XCTAssertEqual(stat(open.path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o7777, 0o700)

        let file = root.appendingPathComponent("file")
        XCTAssertTrue(FileManager.default.createFile(atPath: file.path, contents: Data("x".utf8)))
        XCTAssertThrowsError(try PrivateFiles.makeDirectory(file)) { error in
            let failure = error as? DeliveryIOError
            XCTAssertEqual(failure?.operation, "mkdir")
            XCTAssertEqual(failure?.path, file.path)
            XCTAssertEqual(failure?.code, EEXIST)
        }
        let under = file.appendingPathComponent("sub/dir")
        XCTAssertThrowsError(try PrivateFiles.makeDirectory(under)) { error in
            let failure = error as? DeliveryIOError
            XCTAssertEqual(failure?.operation, "stat")
            XCTAssertEqual(failure?.code, ENOTDIR, "\(error)")
            XCTAssertTrue(String(describing: error).contains(file.path), "\(error)")
        }
    }

    /// The crash join's "nothing to do" check: only this run's directory and files (its report, its spare, its
    /// directory being made) is nothing; another run's directory, report, spare or directory left half made is
    /// something.
    func testEarlierRunsLeftSomethingSeesOnlyOtherRuns() throws {
        let storage = dirs.make("left")
        let runID = "0C0FFEE0-0000-4000-8000-000000000004"
        let client = try Client(options: Vaka.Options(storageDirectory: storage), storage: storage, runID: runID, dsn: nil, log: nil)
        let crashes = storage.appendingPathComponent("crashes")
        try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true)
        XCTAssertFalse(client.earlierRunsLeftSomething(), "fresh storage")
        try FileManager.default.createDirectory(at: RunDirectory.root(storage).appendingPathComponent(runID), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: RunDirectory.root(storage).appendingPathComponent(".tmp"), withIntermediateDirectories: true)
        // This run's own directory being made (`.<run-id>`) is nothing either.
        try FileManager.default.createDirectory(at: RunDirectory.root(storage).appendingPathComponent(".\(runID)"), withIntermediateDirectories: true)
        for own in ["\(runID).crash", ".\(runID)-42.spare", "old.crash.invalid", "old.crash.dropped"] {
            XCTAssertTrue(FileManager.default.createFile(atPath: crashes.appendingPathComponent(own).path, contents: Data()))
        }
        XCTAssertFalse(client.earlierRunsLeftSomething(), "\(PrivateFiles.directoryNames(crashes.path))")
        for other in ["runs/other-run", "runs/.0C0FFEE0-0000-4000-8000-000000000005", "crashes/other-run.crash", "crashes/.other-run-7.spare"] {
            let url = storage.appendingPathComponent(other)
            if other.hasPrefix("runs/") {
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            } else {
                XCTAssertTrue(FileManager.default.createFile(atPath: url.path, contents: Data()))
            }
            XCTAssertTrue(client.earlierRunsLeftSomething(), other)
            try FileManager.default.removeItem(at: url)
            XCTAssertFalse(client.earlierRunsLeftSomething(), other)
        }
    }

    /// Outbox file names: the time without `-` and `:`, a 6-digit sequence number, the event id's letters and
    /// digits (non-ASCII letters kept, anything else left out), `.envelope`.
    func testOutboxFileNames() {
        let outbox = Outbox(storageDirectory: dirs.make("names-outbox"))
        let date = Date(timeIntervalSince1970: 1_767_225_600.123)
        let first = outbox.newFileURL(for: Envelope(header: .init(eventID: "ab/../Cé-9_x"), items: []), at: date)
        let second = outbox.newFileURL(for: Envelope(header: .init(eventID: "ab/../Cé-9_x"), items: []), at: date)
        XCTAssertEqual(first.deletingLastPathComponent().path, outbox.directory.path)
        let parts = first.lastPathComponent.split(separator: "-").map(String.init)
        XCTAssertEqual(parts.count, 3, first.lastPathComponent)
        XCTAssertEqual(parts.first, "20260101T000000.123Z")
        XCTAssertEqual(parts.last, "abCé9x.envelope")
        let number = Int(parts[1]) ?? -1
        XCTAssertEqual(parts[1].count, 6)
        XCTAssertEqual(second.lastPathComponent, "20260101T000000.123Z-\(String(format: "%06d", (number + 1) % 1_000_000))-abCé9x.envelope")
        let random = outbox.newFileURL(for: Envelope(header: .init(eventID: nil), items: []), at: date).lastPathComponent
        XCTAssertEqual(random.count, "20260101T000000.123Z-000000-".count + 32 + ".envelope".count, random)
        let tag = RandomID.hex8()
        XCTAssertEqual(tag.count, 8)
        XCTAssertTrue(tag.allSatisfy { "0123456789abcdef".contains($0) }, tag)
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
        XCTAssertNotNil(sessions.first?["did"] as? String, "the anon id, read even when the run ends before start's background part")
        XCTAssertFalse(FileManager.default.fileExists(atPath: RunDirectory.root(storage).appendingPathComponent(runID).path))
    }
}
