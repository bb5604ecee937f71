import XCTest
@testable import Vaka

/// An `extra` of many small entries is trimmed to its budget in reasonable time, and a proxy's answer to
/// `CONNECT` (tunnel established then failed, or refused) is never taken for the server's answer.
final class ProxyAndExtraBudgetTests: XCTestCase {
    /// `Vaka.track(name, properties)` puts `properties` in `extra`. With many small entries (here 30,000, a
    /// dictionary of counters or a parsed query string) `extra` is over 256 KiB and `EventBudget.limitExtra`
    /// drops the largest entry one at a time, scanning every remaining entry each time (quadratic: ~3e8 steps
    /// for 30,000 entries, ~5e9 for 100,000; 12 s in a debug build). The budget runs on the caller's thread
    /// (`track`, `capture`). Also, each entry is measured as `{"v":value}`, without its key, so "all of `extra`
    /// at most 256 KiB" (docs/ingest.md) is not kept: here 540 KB of `extra` stay.
    func testExtraWithManySmallEntriesIsTrimmedInReasonableTime() throws {
        var extra: [String: JSONValue] = [:]
        for i in 0..<30_000 { extra["counter_\(i)"] = .string("v\(i % 10)") }
        let event: [String: JSONValue] = ["event_id": .string(String(repeating: "a", count: 32)), "level": .string("info"),
                                          "platform": .string("native"), "extra": .object(extra)]
        let started = Date()
        let outcome = try EventBudget.standard.fit(json: event)
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertTrue(outcome.fits)
        XCTAssertLessThan(outcome.data.count, 300 * 1024)
        XCTAssertLessThan(elapsed, 10, "fitting an event with 30,000 extra entries took \(elapsed) s")
    }

    /// An HTTPS DSN through a proxy (`https_proxy`): the proxy answers the `CONNECT` with `200 Connection
    /// established`, then the tunnel fails (closed here; equally a TLS-intercepting proxy whose CA is not trusted,
    /// or an upstream that resets). libcurl hands the CONNECT answer's header block to the header callback, so
    /// `vaka_curl_post` sees a complete final `200` block and, as "the status counts once headers arrived",
    /// reports the request as answered 200 although the TLS handshake failed (curl 35) and nothing reached a
    /// server. The uploader then settles a crash event as accepted and deletes its report: the crash is lost.
    func testAProxysConnectAnswerIsNotTheServersAnswer() throws {
        switch try sendThroughProxy(answeringConnectWith: "200 Connection established") {
        case .success(let r): XCTAssertFalse((200..<300).contains(r.status), "no server was reached, yet the transport says \(r.status)")
        case .failure(let e): XCTAssertFalse(e.isPermanent, "\(e)")
        }
    }

    /// Same root: a proxy refusing the `CONNECT` (`407 Proxy Authentication Required`: credentials missing or
    /// expired; or a `403` of its ACL) comes back as the server's 407, a permanent 4xx: the crash event is given
    /// up, its report becomes `.crash.dropped`, never sent again, though the server never saw it.
    func testAProxyRefusingTheTunnelDoesNotGiveTheEventUp() throws {
        switch try sendThroughProxy(answeringConnectWith: "407 Proxy Authentication Required") {
        case .success(let r): XCTAssertFalse((400..<500).contains(r.status), "the proxy's \(r.status) is taken for the server's verdict")
        case .failure(let e): XCTAssertFalse(e.isPermanent, "\(e)")
        }
    }

    /// Sends one request to an HTTPS URL through a loopback proxy that answers `CONNECT` with `status`, then closes.
    private func sendThroughProxy(answeringConnectWith status: String) throws -> Result<HTTPResponse, TransportError> {
        let proxy = Process()
        proxy.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        let script = """
        import socket, threading, time, sys
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8); s.settimeout(1)
        print(s.getsockname()[1], flush=True)
        end = time.time() + 20
        def handle(c):
            data = b""
            while b"\\r\\n\\r\\n" not in data:
                d = c.recv(4096)
                if not d: break
                data += d
            c.sendall(b"HTTP/1.1 \(status)\\r\\nContent-Length: 0\\r\\n\\r\\n"); time.sleep(0.2); c.close()
        while time.time() < end:
            try: c, _ = s.accept()
            except socket.timeout: continue
            threading.Thread(target=handle, args=(c,), daemon=True).start()
        """
        proxy.arguments = ["-c", script]
        let out = Pipe()
        proxy.standardOutput = out
        try proxy.run()
        defer { proxy.terminate(); proxy.waitUntilExit() }
        var portLine = Data()
        while !portLine.contains(0x0A) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            portLine.append(chunk)
        }
        let port = try XCTUnwrap(Int(String(decoding: portLine, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        setenv("https_proxy", "http://127.0.0.1:\(port)", 1)
        defer { unsetenv("https_proxy") }
        let t = CurlTransport(timeout: 5)
        let request = HTTPRequest(url: try XCTUnwrap(URL(string: "https://sentry.example.invalid/api/1/envelope/")),
                                  headers: [], body: Data("x".utf8), timeout: 5)
        return t.sendSynchronously(request)
    }
}
