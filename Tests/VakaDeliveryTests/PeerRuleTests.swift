import Foundation
import XCTest
import VakaTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The one rule of VakaTestSupport for a missing peer or tool: a skip that says what is missing, or a failure
/// when `VAKA_REQUIRE_PEERS=1`.
final class PeerRuleTests: XCTestCase {
    private var saved: String?

    override func setUp() { saved = ProcessInfo.processInfo.environment["VAKA_REQUIRE_PEERS"] }

    override func tearDown() {
        if let saved { setenv("VAKA_REQUIRE_PEERS", saved, 1) } else { unsetenv("VAKA_REQUIRE_PEERS") }
    }

    func testAMissingPeerIsASkipWithItsReason() {
        unsetenv("VAKA_REQUIRE_PEERS")
        XCTAssertThrowsError(try Peers.environment("VAKA_NO_SUCH_PEER", "test peer")) { error in
            XCTAssertTrue(error is XCTSkip, "\(error)")
            XCTAssertTrue("\(error)".contains("VAKA_NO_SUCH_PEER is not set: no test peer"), "\(error)")
        }
        XCTAssertThrowsError(try Peers.tool("vaka-no-such-tool", install: "nowhere")) { error in
            XCTAssertTrue(error is XCTSkip, "\(error)")
            XCTAssertTrue("\(error)".contains("vaka-no-such-tool not found (nowhere)"), "\(error)")
        }
    }

    func testAMissingPeerFailsWhenPeersAreRequired() {
        setenv("VAKA_REQUIRE_PEERS", "1", 1)
        XCTAssertThrowsError(try Peers.environment("VAKA_NO_SUCH_PEER", "test peer")) { error in
            XCTAssertEqual((error as? MissingPeer)?.description,
                           "VAKA_REQUIRE_PEERS=1 but VAKA_NO_SUCH_PEER is not set: no test peer (run scripts/test, which sets it)")
        }
        XCTAssertThrowsError(try Peers.tool("vaka-no-such-tool")) { error in
            XCTAssertTrue(error is MissingPeer, "\(error)")
        }
    }

    func testAPresentToolIsFound() throws {
        XCTAssertEqual(try Peers.tool("sh"), "/usr/bin/sh")
        setenv("VAKA_NO_SUCH_PEER", "/bin/true", 1)
        defer { unsetenv("VAKA_NO_SUCH_PEER") }
        XCTAssertEqual(try Peers.environment("VAKA_NO_SUCH_PEER", "test peer"), "/bin/true")
    }
}
