import Foundation
import Synchronization
import XCTest
@testable import Vaka
#if canImport(Glibc)
import Glibc
#endif

/// A tiny HTTP/1.1 server on 127.0.0.1, or on the IPv6 loopback `::1` (``init(ipv6:)``), port chosen by the
/// kernel, for delivery tests.
///
/// Each accepted connection reads one request (headers, then a `Content-Length` or chunked body; answers
/// `Expect: 100-continue`), records it, and replies with the next scripted ``Reply`` (default: 200 `{}`),
/// then closes the connection. ``Reply/silent`` keeps the connection open without answering (until
/// ``stop()``); ``Reply/garbage(_:)`` writes the given bytes instead of an HTTP response and closes.
///
/// `@unchecked Sendable`: the test thread, the accept thread and one thread per connection share it. Every
/// `var` is read and written only with `lock` held (an `NSCondition`, which ``waitForRequests(_:timeout:)``
/// waits on, so `Synchronization.Mutex` does not fit); the `let`s are set in `init` before the accept thread
/// starts.
final class TestHTTPServer: @unchecked Sendable {
    /// What to answer to one request.
    enum Reply {
        /// A normal response: status, extra headers, body.
        case status(Int, headers: [String: String] = [:], body: String = "{}")
        /// Never answer (the connection stays open until the server stops).
        case silent
        /// Write these bytes and close.
        case garbage(String)
    }

    /// One received request.
    struct Request {
        var method: String
        var path: String
        /// Header names lower-cased.
        var headers: [String: String]
        var body: Data
    }

    /// The port listened on (chosen by the kernel).
    let port: UInt16
    private let listenFD: Int32
    private let lock = NSCondition()
    private var script: [Reply] = []
    private var _responder: (@Sendable (Request) -> Reply?)?
    private var _requests: [Request] = []
    private var openFDs: Set<Int32> = []
    private var stopped = false
    private var _hangUpAfterHeaders = false
    /// When set, each connection is closed as soon as the request headers are read, without reading the body
    /// or answering (the unread body makes the kernel send a reset): the client's writes then fail (EPIPE).
    var hangUpAfterHeaders: Bool {
        get { lock.lock(); defer { lock.unlock() }; return _hangUpAfterHeaders }
        set { lock.lock(); _hangUpAfterHeaders = newValue; lock.unlock() }
    }
    private let acceptDone = DispatchSemaphore(value: 0)

    /// The address listened on, as written in a URL: `127.0.0.1` or `[::1]`.
    let hostLiteral: String

    /// Starts listening on 127.0.0.1, or on `::1` when `ipv6` (IPv6-only socket).
    /// - Throws: `XCTSkip` when `ipv6` and this machine has no IPv6 loopback (no `::1`, or IPv6 disabled:
    ///   socket/bind fail with EAFNOSUPPORT or EADDRNOTAVAIL); ``TestServerError`` when socket/bind/listen fail
    ///   otherwise.
    init(ipv6: Bool = false) throws {
        hostLiteral = ipv6 ? "[::1]" : "127.0.0.1"
        let listenFD = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listenFD = listenFD
        if listenFD < 0, ipv6, errno == EAFNOSUPPORT { throw XCTSkip("no IPv6 on this machine (socket: EAFNOSUPPORT)") }
        guard listenFD >= 0 else { throw TestServerError("socket: \(errno)") }
        var one: Int32 = 1
        setsockopt(listenFD, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var rc: Int32
        if ipv6 {
            setsockopt(listenFD, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
            var addr = sockaddr_in6()
            addr.sin6_family = sa_family_t(AF_INET6)
            addr.sin6_port = 0
            addr.sin6_addr = in6addr_loopback
            rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listenFD, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
            if rc != 0, errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT {
                let e = errno
                close(listenFD)
                throw XCTSkip("no IPv6 loopback address ::1 on this machine (bind: \(String(cString: strerror(e))))")
            }
        } else {
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = 0
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listenFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard rc == 0 else { throw TestServerError("bind: \(errno)") }
        guard listen(listenFD, 64) == 0 else { throw TestServerError("listen: \(errno)") }
        var bound = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listenFD, $0, &len) }
        }
        // sin_port and sin6_port sit at the same offset (2) of their structures.
        port = withUnsafeBytes(of: &bound) { UInt16(bigEndian: $0.load(fromByteOffset: 2, as: UInt16.self)) }
        let t = Thread { self.acceptLoop() }  // strong: the server lives until stop()
        t.name = "test-http-server"
        t.start()
    }

    /// `http://127.0.0.1:PORT` (or `http://[::1]:PORT`).
    var baseURL: String { "http://\(hostLiteral):\(port)" }

    /// A DSN pointing at this server with key `testkey` and project 42.
    var dsn: String { "http://testkey@\(hostLiteral):\(port)/42" }

    /// Appends replies to the script (consumed one per request, in order).
    func enqueue(_ replies: Reply...) {
        lock.lock(); script += replies; lock.unlock()
    }

    /// Decides the reply to a request when the script is empty (`nil` from it: 200 `{}`), e.g. 413 for any
    /// envelope item over a size.
    var responder: (@Sendable (Request) -> Reply?)? {
        get { lock.lock(); defer { lock.unlock() }; return _responder }
        set { lock.lock(); _responder = newValue; lock.unlock() }
    }

    /// Requests received so far.
    var requests: [Request] {
        lock.lock(); defer { lock.unlock() }
        return _requests
    }

    /// Waits until at least `count` requests arrived or `timeout` seconds pass; returns the requests.
    @discardableResult
    func waitForRequests(_ count: Int, timeout: TimeInterval = 20) -> [Request] {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock(); defer { lock.unlock() }
        while _requests.count < count, lock.wait(until: deadline) {}
        return _requests
    }

    /// Stops accepting and shuts every connection down (also silent ones). The listening socket is closed
    /// by the accept thread itself, and this waits for it: a descriptor number is never freed while a thread
    /// of this server may still use it (otherwise the next test's server could reuse the number and have
    /// its connections stolen by this one).
    func stop() {
        lock.lock()
        if stopped { lock.unlock(); return }
        stopped = true
        shutdown(listenFD, Int32(SHUT_RDWR))  // wakes accept()
        for fd in openFDs { shutdown(fd, Int32(SHUT_RDWR)) }
        lock.unlock()
        acceptDone.wait()
    }

    deinit { stop() }

    private func acceptLoop() {
        defer {
            close(listenFD)
            acceptDone.signal()
        }
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            lock.lock()
            if stopped { lock.unlock(); close(fd); return }
            openFDs.insert(fd)
            lock.unlock()
            let t = Thread { self.serve(fd) }
            t.start()
        }
    }

    private func serve(_ fd: Int32) {
        defer {
            lock.lock(); openFDs.remove(fd); close(fd); lock.unlock()
        }
        guard let request = readRequest(fd) else { return }
        lock.lock()
        _requests.append(request)
        let reply = script.isEmpty ? (_responder?(request) ?? Reply.status(200)) : script.removeFirst()
        lock.broadcast()
        lock.unlock()
        switch reply {
        case .status(let code, let headers, let body):
            var head = "HTTP/1.1 \(code) \(reason(code))\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n"
            for (k, v) in headers { head += "\(k): \(v)\r\n" }
            writeAll(fd, Array((head + "\r\n" + body).utf8))
        case .garbage(let text):
            writeAll(fd, Array(text.utf8))
        case .silent:
            // Hold the connection open until the client gives up or the server stops.
            var b = [UInt8](repeating: 0, count: 512)
            while true {
                let n = recv(fd, &b, b.count, 0)
                if n <= 0 { break }
            }
        }
    }

    private func readRequest(_ fd: Int32) -> Request? {
        var buf = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        func fill() -> Bool {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return false }
            buf += chunk[0..<n]
            return true
        }
        var headerEnd: Int? = nil
        while headerEnd == nil {
            if let r = find(buf, [13, 10, 13, 10]) { headerEnd = r; break }
            guard fill() else { return nil }
        }
        if hangUpAfterHeaders { return nil }
        let head = String(decoding: buf[0..<headerEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for l in lines {
            guard let c = l.firstIndex(of: ":") else { continue }
            headers[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(buf[(headerEnd! + 4)...])
        if headers["expect"]?.lowercased() == "100-continue" {
            writeAll(fd, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
        }
        if let lenText = headers["content-length"], let len = Int(lenText) {
            while body.count < len {
                let before = buf.count
                guard fill() else { return nil }
                body += buf[before...]
            }
            body = Array(body[0..<len])
        } else if headers["transfer-encoding"]?.lowercased().contains("chunked") == true {
            var decoded = [UInt8]()
            var pos = 0
            while true {
                while find(Array(body[pos...]), [13, 10]) == nil {
                    let before = buf.count
                    guard fill() else { return nil }
                    body += buf[before...]
                }
                let rel = find(Array(body[pos...]), [13, 10])!
                let sizeText = String(decoding: body[pos..<(pos + rel)], as: UTF8.self).split(separator: ";")[0]
                guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else { return nil }
                pos += rel + 2
                while body.count < pos + size + 2 {
                    let before = buf.count
                    guard fill() else { return nil }
                    body += buf[before...]
                }
                if size == 0 { break }
                decoded += body[pos..<(pos + size)]
                pos += size + 2
            }
            body = decoded
        }
        return Request(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers, body: Data(body))
    }

    private func find(_ hay: [UInt8], _ needle: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i] == needle[0] && Array(hay[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            off += n
        }
    }

    private func reason(_ code: Int) -> String {
        switch code {
        case 200: return "OK"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 413: return "Payload Too Large"
        case 429: return "Too Many Requests"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Status"
        }
    }
}

struct TestServerError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// A clock moved by hand.
final class ManualClock: DeliveryClock {
    private let current: Mutex<Date>
    init(_ start: Date = Date(timeIntervalSince1970: 1_700_000_000)) { current = Mutex(start) }
    var now: Date { current.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { current.withLock { $0 += seconds } }
    func set(_ date: Date) { current.withLock { $0 = date } }
}
