import XCTest
@testable import Vaka

final class DSNTests: XCTestCase {
    func testParsesPlainDSN() throws {
        let dsn = try DSN("https://abc123@o1.ingest.example.com/42")
        XCTAssertEqual(dsn.scheme, "https")
        XCTAssertEqual(dsn.host, "o1.ingest.example.com")
        XCTAssertNil(dsn.port)
        XCTAssertEqual(dsn.pathPrefix, "")
        XCTAssertEqual(dsn.projectID, "42")
        XCTAssertEqual(dsn.publicKey, "abc123")
        XCTAssertEqual(dsn.envelopeURL.absoluteString, "https://o1.ingest.example.com/api/42/envelope/")
        XCTAssertEqual(dsn.authHeader, "Sentry sentry_version=7, sentry_key=abc123, sentry_client=vaka.swift/0.1.0")
    }

    func testParsesPortPrefixAndSecret() throws {
        let dsn = try DSN("http://pub:secret@127.0.0.1:8000/sentry/sub/7/")
        XCTAssertEqual(dsn.publicKey, "pub")
        XCTAssertEqual(dsn.port, 8000)
        XCTAssertEqual(dsn.pathPrefix, "/sentry/sub")
        XCTAssertEqual(dsn.projectID, "7")
        XCTAssertEqual(dsn.envelopeURL.absoluteString, "http://127.0.0.1:8000/sentry/sub/api/7/envelope/")
    }

    /// Every DSN form a Sentry SDK accepts, with the envelope URL it must give.
    func testEveryAcceptedFormGivesItsEnvelopeURL() throws {
        let cases: [(dsn: String, url: String, host: String, port: Int?)] = [
            ("http://key@[::1]:8123/1", "http://[::1]:8123/api/1/envelope/", "::1", 8123),
            ("https://key@[2001:DB8::1]/5", "https://[2001:db8::1]/api/5/envelope/", "2001:db8::1", nil),
            ("http://key@[::ffff:127.0.0.1]:9000/3", "http://[::ffff:127.0.0.1]:9000/api/3/envelope/", "::ffff:127.0.0.1", 9000),
            ("https://key@host/prefix/sub/42", "https://host/prefix/sub/api/42/envelope/", "host", nil),
            ("HTTPS://key@Sentry.Example.COM/42", "https://sentry.example.com/api/42/envelope/", "sentry.example.com", nil),
            ("Http://key@127.0.0.1:9000/42", "http://127.0.0.1:9000/api/42/envelope/", "127.0.0.1", 9000),
            ("https://key:secret@o1.ingest.example.com/42", "https://o1.ingest.example.com/api/42/envelope/", "o1.ingest.example.com", nil),
            ("https://key@host.example.com/42/", "https://host.example.com/api/42/envelope/", "host.example.com", nil),
            ("https://key@host:443/p/42/", "https://host:443/p/api/42/envelope/", "host", 443),
            ("  https://key@my_host-1.example.com/42?x=1#y \n", "https://my_host-1.example.com/api/42/envelope/", "my_host-1.example.com", nil),
        ]
        for c in cases {
            let dsn = try DSN(c.dsn)
            XCTAssertEqual(dsn.envelopeURL.absoluteString, c.url, c.dsn)
            XCTAssertEqual(dsn.host, c.host, c.dsn)
            XCTAssertEqual(dsn.port, c.port, c.dsn)
            XCTAssertEqual(dsn.publicKey, "key", c.dsn)
            XCTAssertEqual(dsn.authHeader, "Sentry sentry_version=7, sentry_key=key, sentry_client=vaka.swift/0.1.0", c.dsn)
        }
        XCTAssertEqual(try DSN("http://key@[::1]:8123/1").description, "http://***@[::1]:8123/1")
        XCTAssertEqual(try DSN(key: "key", endpoint: "HTTP://[::1]:8123/x/api/7/").envelopeURL.absoluteString,
                       "http://[::1]:8123/x/api/7/envelope/")
    }

    /// Destinations that can never work are refused by the parser (so `Vaka.start` says so at once).
    func testRefusesDestinationsThatCanNeverWork() {
        let cases: [(String, DSNError)] = [
            ("   ", .notAURL),
            ("gopher://k@host/1", .unsupportedScheme("gopher")),
            ("FILE://k@host/1", .unsupportedScheme("file")),
            ("https://:secret@host/1", .missingPublicKey),
            ("https://k@host:0/1", .invalidPort),
            ("https://k@host:70000/1", .invalidPort),
            ("https://k@[zz::1]/1", .invalidHost),
            ("https://k@[::1::2]/1", .invalidHost),
            ("https://k@-host/1", .invalidHost),
            ("https://k@a..b/1", .invalidHost),
            ("https://k@ho%20st/1", .invalidHost),
            ("https://k@ho!st/1", .invalidHost),
        ]
        for (input, expected) in cases {
            XCTAssertThrowsError(try DSN(input), input) { XCTAssertEqual($0 as? DSNError, expected, input) }
        }
        // Not even a URL: whatever the reason given, it must throw.
        for input in ["https://k@[::1/1", "https://k@ho st/1", "https://k@host:port/1", "//k@host/1"] {
            XCTAssertThrowsError(try DSN(input), input)
        }
    }

    /// A DSN built from parts no URL can hold does not trap: its URL is one the transport refuses.
    func testMemberwiseDSNWithImpossibleHostDoesNotTrap() {
        let dsn = DSN(scheme: "http", host: "a b\u{0}", port: nil, pathPrefix: "", projectID: "1", publicKey: "k")
        XCTAssertEqual(dsn.envelopeURL.absoluteString, "file:///invalid-dsn")
    }

    func testKeyAndEndpoint() throws {
        for endpoint in ["https://sentry.example.com/api/42", "https://sentry.example.com/api/42/",
                         "https://sentry.example.com/api/42/envelope/"] {
            let dsn = try DSN(key: "k1", endpoint: endpoint)
            XCTAssertEqual(dsn.envelopeURL.absoluteString, "https://sentry.example.com/api/42/envelope/", endpoint)
            XCTAssertEqual(dsn.publicKey, "k1")
        }
        let prefixed = try DSN(key: "k1", endpoint: "http://host:9000/errors/api/5")
        XCTAssertEqual(prefixed.envelopeURL.absoluteString, "http://host:9000/errors/api/5/envelope/")
        XCTAssertEqual(try DSN(key: "k1", endpoint: "http://host:9000/errors/api/5"), try DSN("http://k1@host:9000/errors/5"))
    }

    func testRejectsBadInput() {
        let cases: [(String, DSNError)] = [
            ("", .notAURL),
            ("not a url", .notAURL),
            ("ftp://k@host/1", .unsupportedScheme("ftp")),
            ("https://host/1", .missingPublicKey),
            ("https://k@host", .missingProjectID),
            ("https://k@host/", .missingProjectID),
            ("https://k@host/1.2", .invalidProjectID),
            ("https://k@:80/1", .missingHost),
        ]
        for (input, expected) in cases {
            XCTAssertThrowsError(try DSN(input), input) { XCTAssertEqual($0 as? DSNError, expected, input) }
        }
        XCTAssertThrowsError(try DSN(key: "", endpoint: "https://h/api/1")) { XCTAssertEqual($0 as? DSNError, .missingPublicKey) }
        XCTAssertThrowsError(try DSN(key: "a b", endpoint: "https://h/api/1")) { XCTAssertEqual($0 as? DSNError, .invalidPublicKey) }
        XCTAssertThrowsError(try DSN(key: "a,b", endpoint: "https://h/api/1")) { XCTAssertEqual($0 as? DSNError, .invalidPublicKey) }
        XCTAssertThrowsError(try DSN(key: "k", endpoint: "https://h/42")) { XCTAssertEqual($0 as? DSNError, .endpointPathNotAPI) }
        XCTAssertThrowsError(try DSN(key: "k", endpoint: "https://h/api/")) { XCTAssertEqual($0 as? DSNError, .endpointPathNotAPI) }
    }

    /// The parts are read as `URLComponents` gives them: user, host and path percent-decoded, the password,
    /// query and fragment dropped, an empty port absent, leading zeros of a port ignored.
    func testPartsArePercentDecodedAsURLComponentsGivesThem() throws {
        let cases: [(dsn: String, key: String, host: String, port: Int?, prefix: String, project: String)] = [
            ("https://k%41@host/1", "kA", "host", nil, "", "1"),
            ("https://k@ho%2Dst/1", "k", "ho-st", nil, "", "1"),
            ("https://k@host/p%61th/1", "k", "host", nil, "/path", "1"),
            ("https://k:s:t@host/1", "k", "host", nil, "", "1"),
            ("https://k@host:/1", "k", "host", nil, "", "1"),
            ("https://k@[::1]:/1", "k", "::1", nil, "", "1"),
            ("https://k@host:00080/1", "k", "host", 80, "", "1"),
            ("https://k@host/a/1?x=@/b#frag/c", "k", "host", nil, "/a", "1"),
            ("http://k@host/9#x", "k", "host", nil, "", "9"),
        ]
        for c in cases {
            let dsn = try DSN(c.dsn)
            XCTAssertEqual(dsn.publicKey, c.key, c.dsn)
            XCTAssertEqual(dsn.host, c.host, c.dsn)
            XCTAssertEqual(dsn.port, c.port, c.dsn)
            XCTAssertEqual(dsn.pathPrefix, c.prefix, c.dsn)
            XCTAssertEqual(dsn.projectID, c.project, c.dsn)
        }
    }

    /// What no URL can be is refused (`notAURL`), and a port too long for any number is out of range.
    func testRefusesWhatIsNotAURL() {
        for input in ["1http://k@host/1", "ht tp://k@host/1", "https:/k@host/1", "https://k@[::1]x/1", "https://k@host/1%2",
                      "https://k@host/1%zz", "https://k@h@st/1", "https://k\"@host/1", "https://k@host/{1}", "https://k@hôst/1",
                      "https://k@host:8a/1"] {
            XCTAssertThrowsError(try DSN(input), input) { XCTAssertEqual($0 as? DSNError, .notAURL, input) }
        }
        XCTAssertThrowsError(try DSN("https://k@host:99999999999999999999/1")) { XCTAssertEqual($0 as? DSNError, .invalidPort) }
        XCTAssertThrowsError(try DSN("https://k@host:65536/1")) { XCTAssertEqual($0 as? DSNError, .invalidPort) }
        XCTAssertEqual(try DSN("https://k@host:65535/1").port, 65535)
        XCTAssertThrowsError(try DSN("https://k%20x@host/1")) { XCTAssertEqual($0 as? DSNError, .invalidPublicKey) }
        XCTAssertThrowsError(try DSN("https://k%C2%A0@host/1")) { XCTAssertEqual($0 as? DSNError, .invalidPublicKey) }  // no-break space
        XCTAssertThrowsError(try DSN("https://k@host/1%2E2")) { XCTAssertEqual($0 as? DSNError, .invalidProjectID) }
    }

    func testKeyIsNeverPrinted() throws {
        let key = "s3cr3tpublickey0123456789abcdef"
        let dsn = try DSN("https://\(key)@example.com:8443/p/9")
        var dumped = ""
        dump(dsn, to: &dumped)
        for text in [dsn.description, dsn.debugDescription, "\(dsn)", String(reflecting: dsn), dumped] {
            XCTAssertFalse(text.contains(key), text)
        }
        XCTAssertEqual(dsn.description, "https://***@example.com:8443/p/9")
        // errors don't echo input either
        XCTAssertThrowsError(try DSN("https://\(key)@example.com/a.b")) { XCTAssertFalse("\($0)".contains(key)) }
    }
}
