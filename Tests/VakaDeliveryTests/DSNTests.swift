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
