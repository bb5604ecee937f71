import XCTest
import VakaTestSupport

/// `Vaka.start` refuses a destination that can never work: one `[vaka]` line on stderr,
/// always (no debug), nothing sent, the envelopes kept in the outbox; the program runs on.
final class DSNRefusalTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    func testUnusableDSNIsRefusedAtStartWithOneStderrLine() throws {
        let refused: [(dsn: String, reason: String)] = [
            ("ftp://testkey@127.0.0.1:9/1", "scheme 'ftp' is not http or https"),
            ("https://127.0.0.1:9/1", "no public key"),
            ("https://testkey@127.0.0.1:9", "no project id"),
            ("https://testkey@[zz::1]:9/1", "host is not a host name"),
            ("", "not an absolute URL"),
        ]
        for (dsn, reason) in refused {
            let storage = dirs.make("refused")
            let logs = dirs.make("refused-logs")
            let child = try runHarness(["message", "--dsn", dsn, "--storage", storage.path],
                                       environment: ["VAKA_FLUSH_TIMEOUT": "5"], logDirectory: logs)
            XCTAssertEqual(child.outcome, "exit 0", "\(dsn): \(child.stderr)")
            let lines = child.stderr.split(separator: "\n")
            XCTAssertEqual(lines.count, 1, "\(dsn): exactly one line, without debug: \(child.stderr)")
            let line = String(lines.first ?? "")
            XCTAssertTrue(line.hasPrefix("[vaka] invalid DSN ("), line)
            XCTAssertTrue(line.contains(reason), "\(dsn): \(line)")
            XCTAssertTrue(line.contains("nothing will be sent"), line)
            XCTAssertFalse(line.contains("testkey"), "the key is never printed: \(line)")
            XCTAssertFalse(try readOutbox(storage).flatMap(\.events).isEmpty, "\(dsn): the event is kept in the outbox")
            XCTAssertFalse(FileManager.default.fileExists(atPath: storage.appendingPathComponent("pending").path),
                           "\(dsn): nothing queued for sending")
        }
    }

    /// Every accepted form starts without a line on stderr (no debug): nothing is refused that would work.
    func testAcceptedFormsStartQuietly() throws {
        for dsn in ["http://testkey@[::1]:9/1", "HTTPS://testkey:secret@127.0.0.1:9/prefix/sub/42/"] {
            let storage = dirs.make("accepted")
            let logs = dirs.make("accepted-logs")
            let child = try runHarness(["message", "--dsn", dsn, "--storage", storage.path],
                                       environment: ["VAKA_FLUSH_TIMEOUT": "0"], logDirectory: logs)
            XCTAssertEqual(child.outcome, "exit 0", child.stderr)
            XCTAssertFalse(child.stderr.contains("[vaka]"), "\(dsn): \(child.stderr)")
            XCTAssertTrue(FileManager.default.fileExists(atPath: storage.appendingPathComponent("pending").path), dsn)
        }
    }
}
