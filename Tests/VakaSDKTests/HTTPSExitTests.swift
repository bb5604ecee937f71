import XCTest
import VakaTestSupport

/// HTTPS delivery through the harness, including the sends Vaka makes from its `atexit` hook (the `exited`
/// session update). libcurl, and with it OpenSSL, is loaded at the first send — after `Vaka.start` registered
/// that hook — so OpenSSL must not register its own `atexit` cleanup: it would run first and the exit-time
/// send would crash the program (SIGSEGV in OpenSSL). The server is Python's `ssl` on
/// 127.0.0.1 with a throw-away self-signed certificate (`openssl req`), trusted through `SSL_CERT_FILE`.
final class HTTPSExitTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    private static let server = #"""
    import http.server, os, ssl, sys
    log, port_file, cert, key, close = sys.argv[1:6]
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with open(log, "a") as f: f.write("POST %s %d\n" % (self.path, len(body)))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            if close == "1":
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(b"{}")
        def log_message(self, *a): pass
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
    open(port_file + ".tmp", "w").write(str(s.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    s.serve_forever()
    """#

    private func runOnce(closeEachConnection: Bool) throws {
        let python = try Peers.tool("python3", install: "the HTTPS peer")
        let openssl = try Peers.tool("openssl", install: "makes the test certificate")
        let work = dirs.make("https")
        let storage = dirs.make("https-storage")
        let cert = work.appendingPathComponent("cert.pem").path, key = work.appendingPathComponent("key.pem").path
        let gen = try RunningChild(URL(fileURLWithPath: openssl),
                                   ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                                   logDirectory: work)
        XCTAssertEqual(gen.wait(timeout: 60)?.outcome, "exit 0")
        let script = work.appendingPathComponent("server.py")
        try Self.server.write(to: script, atomically: true, encoding: .utf8)
        let log = work.appendingPathComponent("requests.log"), portFile = work.appendingPathComponent("port")
        let server = try RunningChild(URL(fileURLWithPath: python),
                                      [script.path, log.path, portFile.path, cert, key, closeEachConnection ? "1" : "0"],
                                      logDirectory: work)
        defer { server.sigkill(); _ = server.wait(timeout: 10) }
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: portFile.path), Date() < deadline { usleep(20_000) }
        let port = try XCTUnwrap(try? String(contentsOf: portFile, encoding: .utf8), "HTTPS server did not start")

        let child = try runHarness(["message", "--dsn", "https://testkey@127.0.0.1:\(port)/1", "--storage", storage.path],
                                   environment: ["SSL_CERT_FILE": cert, "VAKA_DEBUG": "1", "VAKA_FLUSH_TIMEOUT": "20"],
                                   logDirectory: work)
        XCTAssertEqual(child.outcome, "exit 0", child.stderr)
        let requests = ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n")
        XCTAssertEqual(requests.count, 3, "session init, the message event, and at exit the session update: \(child.stderr)")
        XCTAssertTrue(requests.allSatisfy { $0.hasPrefix("POST /api/1/envelope/ ") }, "\(requests)")
        let pending = (try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("pending").path)) ?? []
        XCTAssertEqual(pending.filter { $0.hasSuffix(".batch") }, [], "everything sent, also at exit")
    }

    /// A new TLS connection for every request: the exit-time send makes a TLS handshake after `exit()` began.
    func testExitTimeSendOverNewHTTPSConnectionDoesNotCrash() throws {
        try runOnce(closeEachConnection: true)
    }

    /// Kept-alive TLS connection reused by the exit-time send.
    func testExitTimeSendOverKeptAliveHTTPSConnection() throws {
        try runOnce(closeEachConnection: false)
    }
}
