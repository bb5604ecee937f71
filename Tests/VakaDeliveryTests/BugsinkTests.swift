import Synchronization
import XCTest
import VakaTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import Vaka

/// Delivery to a real Sentry-compatible server (Bugsink 2.6.2, see scripts/bugsink), verified through its
/// read API: the event must be STORED (Bugsink answers 200 before validating, then may drop the event).
///
/// Server selection: BUGSINK_URL, BUGSINK_DSN, BUGSINK_TOKEN and BUGSINK_PROJECT_ID from the environment
/// (a server someone already started); else, when VAKA_BUGSINK is set, one is started with scripts/bugsink
/// (or with the script VAKA_BUGSINK names) and stopped afterwards. Otherwise the tests are skipped, unless
/// VAKA_REQUIRE_PEERS=1, which turns the skip into a failure.
final class BugsinkTests: XCTestCase {
    struct Peer { var url: String; var dsn: String; var token: String; var project: String }

    /// The server the tests of this class share: found or started by the first test, stopped in the class
    /// `tearDown`.
    struct Shared {
        var peer: Peer?
        /// The directory of the server started here (nil when none was started).
        var startedDir: URL?
        /// The script that started it.
        var script: String?
        /// Why starting failed (the later tests fail with it at once).
        var startError: String?
    }
    static let shared = Mutex(Shared())

    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    override class func tearDown() {
        shared.withLock { shared in
            if let dir = shared.startedDir, let script = shared.script {
                _ = runTool(script, ["stop", dir.path])
                try? FileManager.default.removeItem(at: dir)
            }
            shared.startedDir = nil
            shared.peer = nil
        }
    }

    private func requirePeer() throws -> Peer {
        try BugsinkTests.shared.withLock { shared in
            if let p = shared.peer { return p }
            let env = ProcessInfo.processInfo.environment
            if let url = env["BUGSINK_URL"], let dsn = env["BUGSINK_DSN"], let token = env["BUGSINK_TOKEN"],
               let project = env["BUGSINK_PROJECT_ID"] {
                let peer = Peer(url: url, dsn: dsn, token: token, project: project)
                shared.peer = peer
                return peer
            }
            guard let flag = env["VAKA_BUGSINK"], !flag.isEmpty else {
                throw Peers.missing("no Bugsink: set VAKA_BUGSINK=1 (or BUGSINK_URL/DSN/TOKEN/PROJECT_ID; scripts/test does)")
            }
            if let e = shared.startError { throw TestServerError(e) }
            let script = FileManager.default.isExecutableFile(atPath: flag) ? flag : Paths.repositoryRoot.appendingPathComponent("scripts/bugsink").path
            let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("vaka-bugsink-\(UUID().uuidString)")
            shared.script = script
            shared.startedDir = dir
            let (status, out) = runTool(script, ["start", dir.path])
            var values: [String: String] = [:]
            for line in out.split(separator: "\n") {
                guard let eq = line.firstIndex(of: "=") else { continue }
                values[String(line[..<eq])] = String(line[line.index(after: eq)...])
            }
            guard status == 0, let url = values["BUGSINK_URL"], let dsn = values["BUGSINK_DSN"],
                  let token = values["BUGSINK_TOKEN"], let project = values["BUGSINK_PROJECT_ID"] else {
                let e = "scripts/bugsink start failed (status \(status)); see \(dir.path)/server.log"
                shared.startError = e
                throw TestServerError(e)
            }
            let peer = Peer(url: url, dsn: dsn, token: token, project: project)
            shared.peer = peer
            return peer
        }
    }

    /// GET {url}/api/canonical/0/events/lookup/?project=ID&event_id=HEX with the Bearer token.
    private func lookup(_ peer: Peer, _ eventID: String) -> (Int, Data) {
        var r = URLRequest(url: URL(string: "\(peer.url)/api/canonical/0/events/lookup/?project=\(peer.project)&event_id=\(eventID)")!)
        r.setValue("Bearer \(peer.token)", forHTTPHeaderField: "Authorization")
        r.timeoutInterval = 15
        let done = DispatchSemaphore(value: 0)
        let answer = Locked<(Int, Data)>((-1, Data()))
        URLSession.shared.dataTask(with: r) { data, response, _ in
            let value = ((response as? HTTPURLResponse)?.statusCode ?? -1, data ?? Data())
            answer.withLock { $0 = value }
            done.signal()
        }.resume()
        _ = done.wait(timeout: .now() + 20)
        return answer.withLock { $0 }
    }

    private func event(_ id: String, message: String) -> Data {
        let json: [String: Any] = [
            "event_id": id,
            "timestamp": Date().timeIntervalSince1970,
            "platform": "native",
            "level": "warning",
            "logger": "vaka.tests",
            "logentry": ["formatted": message],
            "release": "vaka-delivery-tests@0.1.0",
            "environment": "test",
            "sdk": ["name": SDKInfo.vaka.name, "version": SDKInfo.vaka.version],
            "tags": ["suite": "BugsinkTests"],
            "contexts": ["os": ["name": "Linux"], "device": ["arch": "x86_64"]],
        ]
        return try! JSONSerialization.data(withJSONObject: json, options: [.sortedKeys])
    }

    func testEventsSentThroughDeliveryAreStored() throws {
        let peer = try requirePeer()
        let storage = dirs.make()
        let ids = (0..<3).map { _ in UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }
        let log = LogSink()
        let delivery = try Delivery(configuration: .init(storageDirectory: storage, dsn: try DSN(peer.dsn),
                                                         maxBatchSize: 2, log: log.sink))
        for (n, id) in ids.enumerated() {
            let session = #"{"sid":"\#(UUID().uuidString.lowercased())","did":"tester","init":true,"started":"\#(Timestamps.rfc3339(Date()))","status":"ok","errors":0,"attrs":{"release":"vaka-delivery-tests@0.1.0","environment":"test"}}"#
            let env = Envelope.event(id: id, payload: event(id, message: "Vaka delivery test \(n)"),
                                     extraItems: n == 0 ? [.session(Data(session.utf8))] : [])
            try delivery.submit(env, durable: n == 0)
        }
        XCTAssertTrue(delivery.flush(timeout: 60), log.lines.joined(separator: "\n"))
        XCTAssertTrue(delivery.close(timeout: 5))
        XCTAssertEqual(batchFiles(storage), [])
        for (n, id) in ids.enumerated() {
            let (status, body) = lookup(peer, id)
            XCTAssertEqual(status, 200, "event \(id) not stored: \(String(decoding: body, as: UTF8.self))")
            let text = String(decoding: body, as: UTF8.self)
            XCTAssertTrue(text.contains("Vaka delivery test \(n)"), text)
        }
        XCTAssertFalse(log.lines.joined().contains(try DSN(peer.dsn).publicKey), "key never logged")
    }

    /// Without zlib the uploader sends the envelope uncompressed (no Content-Encoding): the server takes it
    /// and stores the event.
    func testUncompressedEnvelopeWithoutZlibIsStored() throws {
        let peer = try requirePeer()
        let id = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let log = LogSink()
        let queue = try PersistentQueue(storageDirectory: dirs.make(), log: log.sink)
        let uploader = Uploader(queue: queue, dsn: try DSN(peer.dsn), transport: CurlTransport(timeout: 15),
                                clock: SystemDeliveryClock(), log: log.sink, zlibLibrary: "libz-vaka-missing.so.1")
        try queue.enqueue(Envelope.event(id: id, payload: event(id, message: "Vaka uncompressed delivery test")))
        XCTAssertEqual(uploader.pump(), .idle, log.lines.joined(separator: "\n"))
        XCTAssertEqual(uploader.stats.sent, 1, log.lines.joined(separator: "\n"))
        XCTAssertTrue(log.lines.contains { $0.contains("envelopes are sent uncompressed") }, log.lines.joined(separator: "\n"))
        let (status, body) = lookup(peer, id)
        XCTAssertEqual(status, 200, "event \(id) not stored: \(String(decoding: body, as: UTF8.self))")
        XCTAssertTrue(String(decoding: body, as: UTF8.self).contains("Vaka uncompressed delivery test"))
    }

    func testSchemaInvalidEventGets200ButIsNotStored() throws {
        // Why the test above looks the events up: Bugsink answers 200, then drops events that fail the
        // schema (here the unknown top-level key `message`). The uploader counts it as delivered.
        let peer = try requirePeer()
        let id = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        var json = try XCTUnwrap(JSONSerialization.jsonObject(with: event(id, message: "invalid")) as? [String: Any])
        json["message"] = "not allowed at the top level"
        let delivery = try Delivery(configuration: .init(storageDirectory: dirs.make(), dsn: try DSN(peer.dsn)))
        try delivery.submit(Envelope.event(id: id, payload: try JSONSerialization.data(withJSONObject: json)))
        XCTAssertTrue(delivery.flush(timeout: 60))
        XCTAssertEqual(delivery.uploader?.stats.sent, 1, "ingest answered 2xx")
        delivery.close(timeout: 5)
        XCTAssertEqual(lookup(peer, id).0, 404, "but the event was not stored")
    }

    func testUnknownEventIsNotFound() throws {
        // The lookup must be able to say "no": otherwise the test above could not fail.
        let peer = try requirePeer()
        XCTAssertEqual(lookup(peer, String(repeating: "0", count: 31) + "1").0, 404)
    }
}
