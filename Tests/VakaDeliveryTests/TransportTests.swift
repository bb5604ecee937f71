import Synchronization
import XCTest
import VakaTestSupport
import CVakaCurl
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// The libcurl transport: every DSN form delivered to a real loopback server (IPv6 `::1` and
/// 127.0.0.1), permanent transport errors stop the uploader instead of looping, libcurl missing keeps
/// envelopes queued, response headers, proxies.
final class TransportTests: XCTestCase {
    let dirs = ScratchDirs()
    var servers: [TestHTTPServer] = []
    var clock: ManualClock!
    var log: LogSink!

    override func setUp() {
        clock = ManualClock()
        log = LogSink()
    }

    override func tearDown() {
        servers.forEach { $0.stop() }
        servers.removeAll()
        dirs.removeAll()
    }

    private func server(ipv6: Bool = false) throws -> TestHTTPServer {
        let s = try TestHTTPServer(ipv6: ipv6)
        servers.append(s)
        return s
    }

    private func uploader(_ dsn: DSN, storage: URL, transport: HTTPTransport? = nil) throws -> (PersistentQueue, Uploader) {
        let q = try PersistentQueue(storageDirectory: storage, maxBatchSize: 50, log: log.sink)
        let u = Uploader(queue: q, dsn: dsn, transport: transport ?? CurlTransport(timeout: 5, log: log.sink),
                         clock: clock, requestTimeout: 5, log: log.sink)
        return (q, u)
    }

    /// Sends one event with `dsn` to `server` and checks what arrived.
    private func assertDelivered(_ dsn: String, to server: TestHTTPServer, path: String,
                                 file: StaticString = #filePath, line: UInt = #line) throws {
        let storage = dirs.make()
        let (q, u) = try uploader(try DSN(dsn), storage: storage)
        try q.enqueue(eventEnvelope(7))
        XCTAssertEqual(u.pump(), .idle, "\(log.lines)", file: file, line: line)
        let requests = server.requests
        XCTAssertEqual(requests.count, 1, file: file, line: line)
        guard let r = requests.first else { return }
        XCTAssertEqual(r.method, "POST", file: file, line: line)
        XCTAssertEqual(r.path, path, file: file, line: line)
        XCTAssertEqual(r.headers["content-encoding"], "gzip", file: file, line: line)
        XCTAssertEqual(r.headers["content-type"], "application/x-sentry-envelope", file: file, line: line)
        XCTAssertEqual(r.headers["x-sentry-auth"], "Sentry sentry_version=7, sentry_key=testkey, sentry_client=vaka.swift/0.1.0",
                       file: file, line: line)
        XCTAssertEqual(r.headers["user-agent"], "vaka.swift/0.1.0", file: file, line: line)
        XCTAssertNil(r.headers["expect"], file: file, line: line)
        XCTAssertEqual(receivedEnvelope(r)?.header.eventID, eventID(7), file: file, line: line)
        XCTAssertEqual(batchFiles(storage), [], file: file, line: line)
        XCTAssertEqual(u.stats.sent, 1, file: file, line: line)
    }

    // MARK: - DSN forms, delivered

    /// `http://key@[::1]:PORT/1` (an IPv6 literal host) is accepted and delivered.
    func testIPv6LiteralDSNIsDelivered() throws {
        let s = try server(ipv6: true)
        try assertDelivered("http://testkey@[::1]:\(s.port)/1", to: s, path: "/api/1/envelope/")
    }

    func testIPv6WithPathPrefixSecretUpperCaseSchemeAndTrailingSlashIsDelivered() throws {
        let s = try server(ipv6: true)
        try assertDelivered("HTTP://testkey:oldsecret@[0:0:0:0:0:0:0:1]:\(s.port)/sentry/sub/9/", to: s,
                            path: "/sentry/sub/api/9/envelope/")
    }

    func testPathPrefixAndUpperCaseSchemeAreDeliveredOverIPv4() throws {
        let s = try server()
        try assertDelivered("HTTP://testkey@127.0.0.1:\(s.port)/prefix/sub/42", to: s, path: "/prefix/sub/api/42/envelope/")
    }

    func testKeyWithSecretAndTrailingSlashAreDeliveredOverIPv4() throws {
        let s = try server()
        try assertDelivered("Http://testkey:secret@127.0.0.1:\(s.port)/42/", to: s, path: "/api/42/envelope/")
    }

    /// The whole SDK delivery path (queue file, delivery thread, flush) with the IPv6 DSN.
    func testDeliveryFlushesToIPv6Loopback() throws {
        let s = try server(ipv6: true)
        let storage = dirs.make()
        let config = Delivery.Configuration(storageDirectory: storage, dsn: try DSN("http://testkey@[::1]:\(s.port)/3"),
                                            requestTimeout: 5, log: log.sink)
        let d = try Delivery(configuration: config)
        for n in 1...3 { try d.submit(eventEnvelope(n)) }
        XCTAssertTrue(d.flush(timeout: 20), "\(log.lines)")
        XCTAssertEqual(Set(receivedEventIDs(s).compactMap { $0 }), Set((1...3).map(eventID)))
        XCTAssertTrue(s.requests.allSatisfy { $0.path == "/api/3/envelope/" })
        XCTAssertTrue(d.close(timeout: 1))
        XCTAssertTrue(log.lines.contains { $0.hasPrefix("HTTP client: libcurl/") }, "\(log.lines)")
    }

    // MARK: - Permanent errors stop, transient ones back off

    /// Counts the requests that reach the transport.
    final class CountingTransport: HTTPTransport {
        let inner: HTTPTransport
        private let sent = Mutex(0)
        var count: Int { sent.withLock { $0 } }
        init(_ inner: HTTPTransport) { self.inner = inner }
        func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, TransportError>) -> Void) {
            sent.withLock { $0 += 1 }
            inner.send(request, completion: completion)
        }
    }

    /// A DSN that parses (built by hand) but that libcurl refuses (scheme not http/https): the uploader stops
    /// after one attempt, keeps the envelopes, and a later run with a working destination sends them.
    func testSchemeTheTransportRefusesStopsTheUploaderAndKeepsEnvelopes() throws {
        let s = try server()
        let storage = dirs.make()
        let ftp = DSN(scheme: "ftp", host: "127.0.0.1", port: Int(s.port), pathPrefix: "", projectID: "42", publicKey: "testkey")
        let counting = CountingTransport(CurlTransport(timeout: 5, log: log.sink))
        let (q, u) = try uploader(ftp, storage: storage, transport: counting)
        try q.enqueue(eventEnvelope(1))
        try q.enqueue(eventEnvelope(2))
        XCTAssertEqual(u.pump(), .stopped)
        XCTAssertTrue(u.isStopped)
        for _ in 0..<5 {
            clock.advance(3600)
            XCTAssertEqual(u.pump(), .stopped)
        }
        XCTAssertEqual(counting.count, 1, "a permanent error is not retried")
        XCTAssertEqual(s.requests.count, 0)
        XCTAssertEqual(u.stats.failures, 0, "no backoff loop")
        let stopLines = log.lines.filter { $0.contains("cannot send") && $0.contains("sending stopped until the next launch") }
        XCTAssertEqual(stopLines.count, 1, "\(log.lines)")
        XCTAssertTrue(stopLines[0].contains("curl 1:"), stopLines[0])
        XCTAssertEqual(batchFiles(storage).count, 1, "envelopes stay on disk for a later run")

        // The next launch, with a destination that works, sends them.
        let (_, later) = try uploader(try DSN(s.dsn), storage: storage)
        XCTAssertEqual(later.pump(), .idle)
        XCTAssertEqual(receivedEventIDs(s), [eventID(1), eventID(2)])
        XCTAssertEqual(batchFiles(storage), [])
    }

    /// A URL Foundation accepts and libcurl cannot parse (port out of range) is permanent too.
    func testURLLibcurlCannotParseIsPermanent() throws {
        let t = CurlTransport(timeout: 5)
        for url in ["http://127.0.0.1:99999/api/1/envelope/", "gopher://127.0.0.1:1/api/1/envelope/"] {
            let request = HTTPRequest(url: try XCTUnwrap(URL(string: url)), headers: [], body: Data("x".utf8), timeout: 5)
            switch t.sendSynchronously(request) {
            case .success(let r): XCTFail("\(url): got \(r.status)")
            case .failure(let e): XCTAssertTrue(e.isPermanent, "\(url): \(e)")
            }
        }
    }

    /// A machine without libcurl: one clear line, the uploader stops, envelopes stay queued; flush returns
    /// `false` at once instead of waiting out its timeout.
    func testMissingLibcurlKeepsEnvelopesQueuedAndStops() throws {
        let s = try server()
        let storage = dirs.make()
        let missing = CurlTransport(timeout: 5, library: "libcurl-vaka-test-missing.so.4", log: log.sink)
        let config = Delivery.Configuration(storageDirectory: storage, dsn: try DSN(s.dsn), requestTimeout: 5, log: log.sink)
        let d = try Delivery(configuration: config, transport: missing)
        try d.submit(eventEnvelope(1))
        let started = Date()
        XCTAssertFalse(d.flush(timeout: 20))
        XCTAssertLessThan(Date().timeIntervalSince(started), 15, "flush returns when sending stopped, not at its timeout")
        XCTAssertFalse(d.close(timeout: 1))
        let loadLines = log.lines.filter { $0.contains("cannot load libcurl-vaka-test-missing.so.4") }
        XCTAssertEqual(loadLines.count, 1, "one line: \(log.lines)")
        XCTAssertTrue(loadLines.first?.contains("sending stopped until the next launch; 1 batch file(s) kept") == true, "\(loadLines)")
        XCTAssertTrue(loadLines.first?.contains("install libcurl4") == true, "\(loadLines)")
        XCTAssertEqual(s.requests.count, 0)
        XCTAssertEqual(batchFiles(storage).count, 1)
    }

    /// No server listening on ::1 (connection refused) and a server that never answers are transient: back off.
    func testRefusedAndSilentAreTransientNotPermanent() throws {
        let dead = try server(ipv6: true)
        let port = dead.port
        dead.stop()
        let storage = dirs.make()
        let (q, u) = try uploader(try DSN("http://testkey@[::1]:\(port)/1"), storage: storage)
        try q.enqueue(eventEnvelope(1))
        guard case .waiting = u.pump() else { return XCTFail("refused must back off: \(log.lines)") }
        XCTAssertFalse(u.isStopped)
        XCTAssertTrue(log.lines.contains { $0.contains("curl 7:") }, "\(log.lines)")

        let silent = try server()
        silent.enqueue(.silent)
        let t = CurlTransport(timeout: 1)
        let request = HTTPRequest(url: try DSN(silent.dsn).envelopeURL, headers: [], body: Data(), timeout: 1)
        switch t.sendSynchronously(request) {
        case .success(let r): XCTFail("got \(r.status)")
        case .failure(let e):
            XCTAssertFalse(e.isPermanent, "\(e)")
            XCTAssertTrue(e.reason.hasPrefix("curl 28:"), e.reason)
        }
    }

    /// A server that hangs up in the middle of an 8 MiB upload (reset): a transient error (here `curl 55/56:
    /// ... Connection reset by peer`), with SIGPIPE at its default action for the duration, so a send that raised
    /// it would kill the test process (CURLOPT_NOSIGNAL makes libcurl leave SIGPIPE alone; its sends use
    /// MSG_NOSIGNAL).
    func testServerHangingUpMidUploadIsTransientAndDoesNotKillTheProcess() throws {
        let s = try server()
        s.hangUpAfterHeaders = true
        let previous = signal(SIGPIPE, SIG_DFL)  // a SIGPIPE now would kill the test process
        defer { signal(SIGPIPE, previous) }
        let t = CurlTransport(timeout: 10)
        let body = Data(repeating: 0x5a, count: 8 << 20)
        for _ in 0..<3 {
            let request = HTTPRequest(url: try DSN(s.dsn).envelopeURL, headers: [], body: body, timeout: 10)
            switch t.sendSynchronously(request) {
            case .success(let r): XCTFail("got \(r.status)")
            case .failure(let e):
                XCTAssertFalse(e.isPermanent, "\(e)")
                // 55 send failed (EPIPE / reset), 56 receive failed, 52 empty reply.
                XCTAssertTrue(["curl 55:", "curl 56:", "curl 52:"].contains { e.reason.hasPrefix($0) }, e.reason)
            }
        }
    }

    func testCurlCodeClassification() {
        for permanent: Int32 in [1, 3, 4, 41, 43, 48] { XCTAssertEqual(vaka_curl_code_is_permanent(permanent), 1, "\(permanent)") }
        // couldn't resolve proxy/host, couldn't connect, weird reply, timeout, TLS connect, send, recv, peer cert
        for transient: Int32 in [0, 5, 6, 7, 8, 28, 35, 52, 55, 56, 60] {
            XCTAssertEqual(vaka_curl_code_is_permanent(transient), 0, "\(transient)")
        }
    }

    // MARK: - Responses, headers, proxies

    func testResponseStatusAndHeadersAreReturnedLowerCased() throws {
        let s = try server(ipv6: true)
        s.enqueue(.status(429, headers: ["X-Sentry-Rate-Limits": "60:error:organization", "Retry-After": "7"]))
        let t = CurlTransport(timeout: 5)
        let request = HTTPRequest(url: try DSN(s.dsn).envelopeURL, headers: [("X-Test", "a\r\nInjected: yes")],
                                  body: Data(repeating: 0x41, count: 2 << 20), timeout: 10)
        let response = try t.sendSynchronously(request).get()
        XCTAssertEqual(response.status, 429)
        XCTAssertEqual(response.headers["x-sentry-rate-limits"], "60:error:organization")
        XCTAssertEqual(response.headers["retry-after"], "7")
        XCTAssertEqual(response.headers["content-length"], "2")
        XCTAssertEqual(s.requests.first?.body.count, 2 << 20, "a 2 MiB body arrives whole")
        XCTAssertNil(s.requests.first?.headers["injected"], "CR/LF in a header value cannot add a header")
        XCTAssertEqual(s.requests.first?.headers["x-test"], "aInjected: yes")
    }

    /// Only the final response's headers count: an interim `100 Continue` block before it is dropped.
    func testInterimResponseHeadersAreNotMixedIntoTheFinalOnes() throws {
        let s = try server()
        s.enqueue(.garbage("HTTP/1.1 100 Continue\r\nX-Interim: 1\r\nRetry-After: 1\r\n\r\n" +
                           "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 9\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
        let request = HTTPRequest(url: try DSN(s.dsn).envelopeURL, headers: [], body: Data("x".utf8), timeout: 5)
        let response = try CurlTransport(timeout: 5).sendSynchronously(request).get()
        XCTAssertEqual(response.status, 503)
        XCTAssertEqual(response.headers["retry-after"], "9")
        XCTAssertNil(response.headers["x-interim"])
    }

    func testHeaderBlockParsing() {
        let h = CurlTransport.parseHeaders("Content-Type: a\r\nX-A:  1 \r\nx-a: 2\r\nnot a header\r\n: empty\r\nRetry-After:5\n")
        XCTAssertEqual(h, ["content-type": "a", "x-a": "1, 2", "retry-after": "5"])
        XCTAssertEqual(CurlTransport.parseHeaders(""), [:])
    }

    /// libcurl honours the standard proxy variables: with `http_proxy` set, the request goes to the proxy
    /// (here the loopback server) in absolute form, even for a host that does not resolve.
    func testHTTPProxyVariableIsHonoured() throws {
        let proxy = try server()
        let names = ["http_proxy", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"]
        let saved: [(String, String?)] = names.map { name in (name, getenv(name).map { String(cString: $0) }) }
        defer { for (name, value) in saved { if let value { setenv(name, value, 1) } else { unsetenv(name) } } }
        for (name, _) in saved { unsetenv(name) }
        setenv("http_proxy", "http://127.0.0.1:\(proxy.port)", 1)
        let storage = dirs.make()
        let (q, u) = try uploader(try DSN("http://testkey@sentry.example.invalid/42"), storage: storage)
        try q.enqueue(eventEnvelope(1))
        XCTAssertEqual(u.pump(), .idle, "\(log.lines)")
        XCTAssertEqual(proxy.requests.first?.path, "http://sentry.example.invalid/api/42/envelope/")
        XCTAssertEqual(receivedEventIDs(proxy), [eventID(1)])
    }
}
