import Synchronization
import XCTest
import VakaTestSupport
@testable import Vaka

/// A run's session ends once, as that run's: hostile contents of a session record and processes that end while
/// others look at their run directories.
final class SessionEndAdversaryTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// A release or environment that begins with a combining mark (or another scalar that joins the space before
    /// it into one grapheme cluster) parses back from the record's text unchanged: the record is not taken for a
    /// broken one and deleted (the session lost), nor sent without its environment.
    func testARecordKeepsAReleaseAndEnvironmentThatBeginWithACombiningMark() throws {
        let session = SessionState(did: nil, started: Date(timeIntervalSince1970: 1_764_000_000))
        for value in ["\u{301}app@1", "\u{200D}x", "\u{FE0F}1.0", "\u{1F3FB}skin", "a b  c "] {
            let record = SessionRecord(session: session, ended: Date(timeIntervalSince1970: 1_764_000_001),
                                       release: value, environment: value)
            let parsed = try XCTUnwrap(SessionRecord(data: Data(record.text.utf8)), "release \(value.unicodeScalars.map { $0.value })")
            XCTAssertEqual(parsed, record)
            XCTAssertEqual(parsed.update(did: nil).attrs.release, value)
            XCTAssertEqual(parsed.update(did: nil).attrs.environment, value)
        }
    }
}
