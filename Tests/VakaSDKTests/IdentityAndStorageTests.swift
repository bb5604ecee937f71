import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// Bounded identity fields and the default storage directory, through the public facade:
/// - every value from options or calls that goes into an event is bounded as Sentry/Relay keep it (release,
///   environment, tags, user id), cut at `start` with one `[vaka]` line on stderr;
/// - the default storage directory is one per program (name plus a hash of its absolute path), never the
///   shared `vaka/` root or a parent of it.
final class IdentityAndStorageTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// Runs `body` with fd 2 on a temporary file; returns what was written to stderr.
    private func capturingStandardError(_ body: () throws -> Void) rethrows -> String {
        let file = dirs.make("stderr").appendingPathComponent("stderr.txt")
        let fd = open(file.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let saved = dup(2)
        dup2(fd, 2)
        close(fd)
        defer { dup2(saved, 2); close(saved) }
        try body()
        return (try? String(contentsOf: file, encoding: .utf8)) ?? ""
    }

    /// The events written to `<storage>/outbox/` (outbox mode: no DSN).
    private func outboxEvents(_ storage: URL) throws -> [[String: Any]] {
        let outbox = storage.appendingPathComponent("outbox")
        return try FileManager.default.contentsOfDirectory(atPath: outbox.path).sorted().flatMap { name -> [[String: Any]] in
            let envelope = try Envelope(data: Data(contentsOf: outbox.appendingPathComponent(name)))
            return try envelope.items.filter { $0.type == .event }.map {
                try XCTUnwrap(try JSONSerialization.jsonObject(with: $0.payload) as? [String: Any])
            }
        }
    }

    // MARK: - Bounded identity fields

    /// A 1.2 M-character release with a newline and a `/`, a 100,000-character environment, 1,000 tags with
    /// 1,000-character keys and values, a 1 MB user id and a 1 MB tag through `setTag`: the started client cuts
    /// them with one stderr line per option (made by the `vaka.start` thread, or by the first call that needs
    /// it), and the event written is within the budget with every field as Relay accepts it.
    func testHugeOptionsAndFacadeValuesAreCutAtStartAndTheEventFits() throws {
        let storage = dirs.make("identity")
        let release = "app@1.0/" + String(repeating: "r", count: 1_200_000) + "\n"
        var tags: [String: String] = [:]
        for i in 0..<1_000 { tags["k\(i)-" + String(repeating: "k", count: 1_000)] = String(repeating: "v", count: 1_000) }
        let stderr = capturingStandardError {
            Vaka.start(Vaka.Options(release: release, environment: String(repeating: "e", count: 100_000),
                                    crashReporting: false, sessionTracking: false, tags: tags, storageDirectory: storage))
            // The options are bounded where the client is made (the `vaka.start` thread, or this first call).
            XCTAssertNotNil(Vaka.runID)
        }
        defer { Vaka.close() }
        let lines = stderr.split(separator: "\n")
        XCTAssertEqual(lines.filter { $0.hasPrefix(#"[vaka] release "app@1.0/\#(String(repeating: "r", count: 32))…" (1200009 bytes) changed to "app@1.0_\#(String(repeating: "r", count: 32))…" (200 bytes)"#) }.count, 1, stderr)
        XCTAssertEqual(lines.filter { $0.hasPrefix(#"[vaka] environment "\#(String(repeating: "e", count: 40))…" (100000 bytes) changed to "\#(String(repeating: "e", count: 40))…" (64 bytes)"#) }.count, 1, stderr)
        XCTAssertEqual(lines.filter { $0.hasPrefix("[vaka] 1000 tag(s) cut to 200 characters") }.count, 1, stderr)
        XCTAssertLessThan(stderr.utf8.count, 2_000, "one short line each, not the values: \(stderr.prefix(500))")

        Vaka.identify(String(repeating: "u", count: 1_000_000))
        Vaka.setTag(String(repeating: "t", count: 1_000_000), String(repeating: "w", count: 1_000_000))
        Vaka.capture(message: "boom", level: .error)
        Vaka.close()

        let events = try outboxEvents(storage)
        XCTAssertEqual(events.count, 1)
        let event = try XCTUnwrap(events.first)
        let data = try JSONSerialization.data(withJSONObject: event)
        XCTAssertLessThanOrEqual(data.count, EventBudget.standard.maxEventBytes)
        let cutRelease = try XCTUnwrap(event["release"] as? String)
        XCTAssertEqual(cutRelease.utf8.count, 200)
        XCTAssertTrue(cutRelease.hasPrefix("app@1.0_rrr"), "`/` replaced: \(cutRelease.prefix(20))")
        XCTAssertEqual((event["environment"] as? String)?.utf8.count, 64)
        let user = try XCTUnwrap((event["user"] as? [String: Any])?["id"] as? String)
        XCTAssertEqual(user.count, 200)
        let eventTags = try XCTUnwrap(event["tags"] as? [String: String])
        XCTAssertFalse(eventTags.isEmpty)
        for (key, value) in eventTags {
            XCTAssertLessThanOrEqual(key.count, 200)
            XCTAssertLessThanOrEqual(value.count, 200)
        }
        XCTAssertEqual(eventTags[String(repeating: "t", count: 200)], String(repeating: "w", count: 200), "setTag cut, not dropped")
        XCTAssertEqual(((event["contexts"] as? [String: Any])?["app"] as? [String: Any])?["app_version"] as? String, cutRelease)
    }

    /// `$VAKA_RELEASE` with control characters, a backslash and 300 two-byte characters: the default release
    /// is cut to 200 UTF-8 bytes (not 200 characters: Relay counts bytes) with `_` for the refused characters.
    func testDefaultReleaseFromTheEnvironmentIsBoundedInBytes() {
        let saved = getenv("VAKA_RELEASE").map { String(cString: $0) }
        defer { if let saved { setenv("VAKA_RELEASE", saved, 1) } else { unsetenv("VAKA_RELEASE") } }
        setenv("VAKA_RELEASE", "a\tb\\c@" + String(repeating: "é", count: 300), 1)
        let release = Vaka.defaultRelease()
        XCTAssertEqual(release.utf8.count, 200)
        XCTAssertTrue(release.hasPrefix("a_b_c@é"), release)
        XCTAssertEqual(Vaka.Options.boundedRelease("ok@1.2.3+abc"), "ok@1.2.3+abc", "a good release is left alone")
        XCTAssertEqual(Vaka.Options.boundedEnvironment("staging"), "staging")
        XCTAssertEqual(Vaka.Options.boundedEnvironment(String(repeating: "é", count: 40)).utf8.count, 64)
    }

    // MARK: - One default storage directory per program

    private func withState(_ body: () throws -> Void) rethrows {
        let savedXDG = getenv("XDG_STATE_HOME").map { String(cString: $0) }
        defer { if let savedXDG { setenv("XDG_STATE_HOME", savedXDG, 1) } else { unsetenv("XDG_STATE_HOME") } }
        setenv("XDG_STATE_HOME", "/tmp/vaka-identity-state", 1)
        try body()
    }

    /// The default storage directory a process with `argv[0]` = `argv0` gets (`$XDG_STATE_HOME/vaka/` and
    /// ``Vaka/programDirectoryName(argv0:)``, as ``Vaka/defaultStorageDirectory()`` composes them; see
    /// ``testDefaultStorageDirectoryIsTheProgramDirectoryUnderXDGState()``), normalized.
    private func storage(argv0: String) -> String {
        URL(fileURLWithPath: "/tmp/vaka-identity-state/vaka").appendingPathComponent(Vaka.programDirectoryName(argv0: argv0))
            .standardizedFileURL.path
    }

    /// `defaultStorageDirectory()` = `$XDG_STATE_HOME/vaka/<programDirectoryName(argv[0])>`.
    func testDefaultStorageDirectoryIsTheProgramDirectoryUnderXDGState() {
        withState {
            XCTAssertEqual(Vaka.defaultStorageDirectory().path,
                           "/tmp/vaka-identity-state/vaka/" + Vaka.programDirectoryName(argv0: CommandLine.arguments.first))
        }
    }

    /// `argv[0]` values an `execve` caller may choose: `/`, empty, `.`, `..`, `//`, `a/`, `/..`, `../..`: the
    /// directory is always a named child of `vaka/`, never `vaka/` itself or a parent.
    func testOddArgv0NeverGivesTheSharedRootOrAParent() {
        withState {
            let root = "/tmp/vaka-identity-state/vaka"
            for argv0 in ["/", "", ".", "..", "//", "a/", "/..", "../..", "./", "\n", "x/.."] {
                let path = storage(argv0: argv0)
                XCTAssertEqual((path as NSString).deletingLastPathComponent, root, "argv[0] \(argv0.debugDescription) gives \(path)")
                let name = (path as NSString).lastPathComponent
                XCTAssertNotNil(name.range(of: "^[^/\\x00-\\x1f]+-[0-9a-f]{8}$", options: .regularExpression),
                                "argv[0] \(argv0.debugDescription) gives the name \(name.debugDescription)")
            }
        }
    }

    /// One program reached by different `argv[0]` (its absolute path, a path with `.` and `..`) gets one
    /// directory; another file with the same base name gets another. A symbolic link to a program is hashed
    /// as the link's own path, not resolved (so a deploy switching a `current` link keeps the directory:
    /// StoredScopeAndReportTests): it gets its own directory. The hash is FNV-1a of the path, so it
    /// is the same in every Vaka version and process.
    func testSameProgramSameDirectoryOtherProgramOtherDirectory() throws {
        let dir = dirs.make("programs")
        for sub in ["a", "b", "links"] {
            try FileManager.default.createDirectory(at: dir.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        let a = dir.appendingPathComponent("a/server"), b = dir.appendingPathComponent("b/server")
        for file in [a, b] { XCTAssertTrue(FileManager.default.createFile(atPath: file.path, contents: Data("x".utf8))) }
        let link = dir.appendingPathComponent("links/server")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: a)
        withState {
            let viaPath = storage(argv0: a.path)
            XCTAssertNotEqual(storage(argv0: link.path), viaPath, "a symbolic link is hashed as its own path, not resolved")
            XCTAssertEqual(storage(argv0: link.path), storage(argv0: dir.path + "/links/./server"), "the link by another spelling")
            XCTAssertEqual(storage(argv0: dir.path + "/b/../a/./server"), viaPath, "with . and ..")
            XCTAssertNotEqual(storage(argv0: b.path), viaPath, "another program named server")
            XCTAssertTrue((viaPath as NSString).lastPathComponent.hasPrefix("server-"), viaPath)
        }
        // FNV-1a 32 of "/srv/billing/server", computed independently: python3 -c 'h=0x811c9dc5
        // for c in b"/srv/billing/server": h=((h^c)*0x01000193)&0xffffffff
        // print("%08x"%h)'
        XCTAssertEqual(Vaka.programDirectoryName(argv0: "/srv/billing/server"), "server-43831043")
    }

    /// A name without `/` (found through `PATH`) is hashed from `/proc/self/exe`: the same directory as the
    /// executable's own path would give.
    func testNameFoundThroughPATHUsesTheExecutablesPath() throws {
        let exe = try XCTUnwrap(realpath("/proc/self/exe", nil).map { p -> String in defer { free(p) }; return String(cString: p) })
        let viaPATH = Vaka.programDirectoryName(argv0: "myserver")
        XCTAssertEqual(viaPATH, "myserver-\(Self.fnv1a(exe))")
        XCTAssertEqual(String(Vaka.programDirectoryName(argv0: exe).suffix(9)), String(viaPATH.suffix(9)))
        XCTAssertEqual(Vaka.programDirectoryName(argv0: nil), "\((exe as NSString).lastPathComponent)-\(Self.fnv1a(exe))")
    }

    /// The name's rules at their edges (vaka_crash_program_directory_name, in C since it runs on `start`'s caller):
    /// `.`/`..`/`//` removed by name (a `..` at the root stays there), control characters and `\` as `_`, the
    /// name cut to 64 bytes at a UTF-8 sequence's start, a relative `argv0` against `$PWD` when that names the
    /// working directory, `PATH` searched in order with an empty entry as the working directory and a
    /// non-executable file passed over, an `argv0` ending in `/` hashed from `/proc/self/exe`.
    func testProgramDirectoryNameAtItsEdges() throws {
        let name = Vaka.programDirectoryName(argv0:)
        XCTAssertEqual(name("/a/./b/..//srv///billing/server"), "server-\(Self.fnv1a("/a/srv/billing/server"))")
        XCTAssertEqual(name("/../../x/../y/z"), "z-\(Self.fnv1a("/y/z"))")
        XCTAssertEqual(name("/p/a\tb\u{7F}"), "a_b_-\(Self.fnv1a("/p/a\tb\u{7F}"))")
        XCTAssertEqual(name("/p/a\\b"), "a_b-\(Self.fnv1a("/p/a\\b"))")
        let accents = String(repeating: "é", count: 40) + "x"  // 81 bytes: cut to 32 é (64 bytes)
        XCTAssertEqual(name("/p/" + accents), String(repeating: "é", count: 32) + "-\(Self.fnv1a("/p/" + accents))")
        let exe = try XCTUnwrap(realpath("/proc/self/exe", nil).map { p -> String in defer { free(p) }; return String(cString: p) })
        XCTAssertEqual(name("x/"), "x-\(Self.fnv1a(exe))")

        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vaka-names-\(UUID().uuidString)").path
        let real = try XCTUnwrap(realpath(FileManager.default.temporaryDirectory.path, nil).map { p -> String in
            defer { free(p) }; return String(cString: p) }) + "/" + (dir as NSString).lastPathComponent
        try FileManager.default.createDirectory(atPath: dir + "/bin", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        XCTAssertTrue(FileManager.default.createFile(atPath: dir + "/bin/tool", contents: Data(), attributes: [.posixPermissions: 0o755]))
        XCTAssertTrue(FileManager.default.createFile(atPath: dir + "/bin/plain", contents: Data(), attributes: [.posixPermissions: 0o644]))
        let cwd = FileManager.default.currentDirectoryPath
        let saved: [(String, String?)] = ["PATH", "PWD"].map { key in (key, getenv(key).map { String(cString: $0) }) }
        defer {
            FileManager.default.changeCurrentDirectoryPath(cwd)
            for (key, value) in saved { if let value { setenv(key, value, 1) } else { unsetenv(key) } }
        }
        XCTAssertTrue(FileManager.default.changeCurrentDirectoryPath(dir + "/bin"))
        setenv("PWD", dir + "/bin", 1)  // names the working directory by the unresolved spelling: kept
        XCTAssertEqual(name("../bin/./tool"), "tool-\(Self.fnv1a(dir + "/bin/tool"))")
        setenv("PWD", "/nonexistent", 1)  // names another directory: getcwd(3), resolved
        XCTAssertEqual(name("./tool"), "tool-\(Self.fnv1a(real + "/bin/tool"))")
        setenv("PATH", "/nonexistent::/usr/bin", 1)  // the empty entry is the working directory
        XCTAssertEqual(name("tool"), "tool-\(Self.fnv1a(real + "/bin/tool"))")
        setenv("PATH", dir + "/bin", 1)  // not executable: passed over, so /proc/self/exe
        XCTAssertEqual(name("plain"), "plain-\(Self.fnv1a(exe))")
    }

    /// The reference FNV-1a (32 bit), 8 hex digits.
    private static func fnv1a(_ s: String) -> String {
        var h: UInt32 = 2_166_136_261
        for c in s.utf8 { h = (h ^ UInt32(c)) &* 16_777_619 }
        return String(format: "%08x", h)
    }

    /// The crash join builds session updates from an earlier run's `scope.json`: a huge or refused release and
    /// environment there are bounded in the update as in events (`crashed`, `abnormal`, `exited` alike).
    func testSessionUpdatesBoundReleaseAndEnvironmentFromDisk() throws {
        for status in [SessionUpdate.Status.crashed, .abnormal, .exited] {
            var state = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_700_000_000))
            let update = state.update(status, now: Date(timeIntervalSince1970: 1_700_000_100),
                                      release: "x/" + String(repeating: "r", count: 400_000),
                                      environment: String(repeating: "e", count: 100))
            XCTAssertEqual(update.attrs.release.utf8.count, 200, "\(status)")
            XCTAssertFalse(update.attrs.release.contains("/"), "\(status)")
            XCTAssertEqual(update.attrs.environment?.utf8.count, 64, "\(status)")
        }
        var state = SessionState(did: nil, started: Date())
        let plain = state.update(.exited, now: Date(), release: "app@1.0", environment: "production")
        XCTAssertEqual(plain.attrs.release, "app@1.0")
        XCTAssertEqual(plain.attrs.environment, "production")
    }
}
