import XCTest
@testable import Vaka

/// The coding of `scope.json` and of the session update, written member by member (StartPathCoding.swift):
/// every stored property of each type is written under its own name, and read back equal. A property added to
/// one of these types without its line in the coding fails here.
final class StartPathCodingTests: XCTestCase {
    /// The JSON object `value` encodes to, and the names of `value`'s stored properties.
    private func members<T: Codable>(_ value: T) throws -> (json: [String: Any], properties: Set<String>) {
        let data = try JSONEncoder().encode(value)
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
        return (json, Set(Mirror(reflecting: value).children.compactMap(\.label)))
    }

    func testScopeWithEveryMemberSetRoundTrips() throws {
        var session = SessionState(did: "d9f8c1a2-0000-4000-8000-000000000001", started: Date(timeIntervalSince1970: 1_700_000_000.25))
        session.errors = 3
        session.initSent = true
        var scope = RunScope(runID: "R-1", release: "app@1.0", environment: "staging", tags: ["a": "b"],
                             userID: "u1", session: session)
        scope.userEmail = "u@example.com"
        scope.username = "user"
        scope.userIPAddress = "127.0.0.1"
        scope.contexts = ["gpu": ["name": .string("x"), "n": .int(2)]]
        scope.extra = ["k": .bool(true)]
        scope.attachments = [AttachmentRef(path: "/tmp/a", filename: "a.txt", contentType: "text/plain")]

        let (json, properties) = try members(scope)
        XCTAssertEqual(Set(json.keys), properties, "every stored property of RunScope is written, by its name")
        XCTAssertEqual(try JSONDecoder().decode(RunScope.self, from: JSONEncoder().encode(scope)), scope)

        let (sessionJSON, sessionProperties) = try members(session)
        XCTAssertEqual(Set(sessionJSON.keys), sessionProperties)
        XCTAssertEqual(sessionJSON["sid"] as? String, session.sid)
        XCTAssertEqual(sessionJSON["started"] as? Double, 1_700_000_000.25)
    }

    func testScopeWithOnlyTheRequiredMembersRoundTrips() throws {
        let scope = RunScope(runID: "R-2", release: "r", environment: "production", tags: [:], userID: nil, session: nil)
        let data = try JSONEncoder().encode(scope)
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
        XCTAssertEqual(Set(json.keys), ["runID", "release", "environment", "tags"], "nil members are left out")
        XCTAssertEqual(try JSONDecoder().decode(RunScope.self, from: data), scope)
        // A required member missing is an error (the join then treats the file as unreadable).
        XCTAssertThrowsError(try JSONDecoder().decode(RunScope.self, from: Data(#"{"runID":"R","release":"r","tags":{}}"#.utf8)))
    }

    func testSessionUpdateWritesEveryMemberUnderItsProtocolName() throws {
        var session = SessionState(did: "d", started: Date(timeIntervalSince1970: 1_700_000_000))
        let update = session.update(.exited, now: Date(timeIntervalSince1970: 1_700_000_002.5), release: "app@2", environment: "prod")
        let (json, properties) = try members(update)
        XCTAssertEqual(Set(json.keys), properties)
        XCTAssertEqual(properties, ["sid", "did", "seq", "init", "started", "timestamp", "duration", "status", "errors", "attrs"])
        XCTAssertEqual(json["init"] as? Bool, true)
        XCTAssertEqual(json["status"] as? String, "exited")
        XCTAssertEqual(json["duration"] as? Double, 2.5)
        XCTAssertEqual(json["attrs"] as? [String: String], ["release": "app@2", "environment": "prod"])
        XCTAssertEqual(try JSONDecoder().decode(SessionUpdate.self, from: update.jsonData()), update)

        let (attrs, attrProperties) = try members(update.attrs)
        XCTAssertEqual(Set(attrs.keys), attrProperties)
        let running = session.update(.ok, now: Date(timeIntervalSince1970: 1_700_000_003), release: "r", environment: nil)
        let runningJSON = try XCTUnwrap(JSONSerialization.jsonObject(with: running.jsonData()) as? [String: Any])
        XCTAssertNil(runningJSON["duration"], "an ok update has no duration")
        XCTAssertEqual(runningJSON["attrs"] as? [String: String], ["release": "r"])
    }
}
