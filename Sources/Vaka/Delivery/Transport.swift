import CVakaCurl
import Dispatch
import Foundation
import Synchronization

/// One HTTP request as the uploader builds it.
struct HTTPRequest {
    /// Target URL (the DSN's envelope URL).
    var url: URL
    /// Method; always `POST` for envelopes.
    var method = "POST"
    /// Header fields in sending order.
    var headers: [(name: String, value: String)]
    /// Body bytes (the envelope, gzip-compressed unless zlib could not be loaded).
    var body: Data
    /// Bound on the whole exchange, seconds (connect, send, wait for and read the response).
    var timeout: TimeInterval
}

/// An HTTP response: status and headers (names lower-cased; repeated fields joined with `, `).
struct HTTPResponse {
    /// Status code, e.g. 200.
    var status: Int
    /// Header fields, names lower-cased.
    var headers: [String: String]
}

/// Why no HTTP response was obtained (offline, refused, timed out, unparsable response...).
struct TransportError: Error, CustomStringConvertible {
    /// A short reason from the transport.
    var reason: String
    /// `true` when retrying can never work in this process (unsupported scheme, a URL libcurl cannot parse,
    /// libcurl not installed...): the uploader stops sending until the next launch instead of backing off.
    var isPermanent = false
    /// The status a proxy answered `CONNECT` with when it refused the tunnel (e.g. 407 Proxy Authentication
    /// Required, 403 of its ACL), `nil` otherwise. Never the server's answer: the envelope did not reach it.
    var proxyStatus: Int? = nil
    /// The reason.
    var description: String { reason }
}

/// Something that can POST a request and report the response. Implementations must call `completion`
/// exactly once, on any thread, and must bound the exchange by `request.timeout`. Used from the delivery thread
/// (and from the caller's, in tests), hence `Sendable`.
protocol HTTPTransport: AnyObject, Sendable {
    /// Sends `request`; calls `completion` with the response or a ``TransportError``.
    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, TransportError>) -> Void)
    /// Ends the exchange in progress soon (a transient ``TransportError``) and every later one at once: the
    /// delivery is closing and will not wait for a server that does not answer. Default: nothing (the exchange
    /// ends by its timeout).
    func abortAll()
}

extension HTTPTransport {
    func abortAll() {}
}

extension HTTPTransport {
    /// Sends and blocks the calling thread until the response, or until `request.timeout` + 5 s pass
    /// (a guard against a transport that never calls back), which is reported as a ``TransportError``.
    func sendSynchronously(_ request: HTTPRequest) -> Result<HTTPResponse, TransportError> {
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox()
        send(request) { result in
            box.set(result)
            done.signal()
        }
        if done.wait(timeout: .now() + request.timeout + 5) == .timedOut {
            return .failure(TransportError(reason: "no answer within \(Int(request.timeout + 5)) s"))
        }
        return box.get() ?? .failure(TransportError(reason: "transport gave no result"))
    }
}

/// The result handed from the transport's completion to the waiting ``HTTPTransport/sendSynchronously(_:)``.
private final class ResultBox: Sendable {
    private let value = Mutex<Result<HTTPResponse, TransportError>?>(nil)
    func set(_ v: Result<HTTPResponse, TransportError>) { value.withLock { $0 = v } }
    func get() -> Result<HTTPResponse, TransportError>? { value.withLock { $0 } }
}

/// ``HTTPTransport`` over libcurl, which is opened with `dlopen` (``library``, default `libcurl.so.4`) at the
/// first ``send(_:completion:)`` — on the delivery thread, never at process start — and used through function
/// pointers (the `CVakaCurl` C target; Vaka does not link libcurl).
///
/// One CURL easy handle is reused, so connections are kept alive between requests. Each request: POST, only
/// `http`/`https`, redirects not followed (a 3xx goes back to the uploader as is), no cookies, the response
/// body discarded and read only up to 64 KiB (`VAKA_CURL_MAX_BODY`: a huge or endless body is cut off there),
/// bounded by `request.timeout` (whole exchange and connect), no signals (`CURLOPT_NOSIGNAL`). A response
/// whose status line and headers arrived is judged by its status even when the body then fails (cut at the
/// cap, cut short, timed out): a 200 with an endless body is a delivery, logged with a note. Only the origin
/// server's final response counts: a proxy's answer to `CONNECT` is kept out of the headers
/// (`CURLOPT_SUPPRESS_CONNECT_HEADERS`), and a failure after a `CONNECT` (the proxy's `200 Connection
/// established` then a failed TLS handshake, or a refused tunnel: 407, 403) is a transient ``TransportError``
/// (with ``TransportError/proxyStatus`` when the proxy refused), never a status.
/// libcurl brings IPv6 literal hosts (`http://[::1]:8000`), TLS and the standard proxy variables (`http_proxy`,
/// `https_proxy`, `all_proxy`, `no_proxy`).
///
/// Errors: no HTTP answer is a ``TransportError``; it ``TransportError/isPermanent`` when libcurl cannot be
/// loaded (a machine without libcurl: envelopes stay queued) or its error code means the request can never
/// work (unsupported protocol, malformed URL, unknown or refused option); otherwise (cannot resolve or connect,
/// timeout, reset, TLS failure...) it is transient and the uploader backs off. Thread-safe: requests are
/// serialised on one lock; `send` calls `completion` before it returns, on the caller's thread.
final class CurlTransport: HTTPTransport {
    /// The library opened by default: Debian's `libcurl4` (OpenSSL flavour), soname `libcurl.so.4`.
    static let defaultLibrary = "libcurl.so.4"

    /// The file name given to `dlopen` (a soname looked up the usual way, or a path).
    let library: String
    /// Default bound on each exchange, seconds (requests carry their own).
    let timeout: TimeInterval

    /// The libcurl session, opened at the first request; its mutex also serialises the requests.
    private struct Session {
        /// The easy handle kept between requests, `nil` until opened (or after ``invalidate()``).
        var handle: OpaquePointer?
        /// Why libcurl could not be loaded, once that failed (not tried again).
        var loadFailure: String?

        /// Opens `library` and the session once; a failure to load is remembered. `loaded` is the line to log
        /// when this call loaded libcurl (its version).
        mutating func open(_ library: String) -> (handle: Result<OpaquePointer, TransportError>, loaded: String?) {
            if let handle { return (.success(handle), nil) }
            if let loadFailure { return (.failure(TransportError(reason: loadFailure, isPermanent: true)), nil) }
            var error = [CChar](repeating: 0, count: 512)
            guard let lib = vaka_curl_open(library, &error, error.count) else {
                let why = String(decoding: error.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                // Not logged here: the uploader stops on this permanent error and says so in one line.
                let reason = "cannot load \(library) (\(why)); install libcurl4 to send"
                loadFailure = reason
                return (.failure(TransportError(reason: reason, isPermanent: true)), nil)
            }
            guard let s = vaka_curl_session_new(lib) else {
                return (.failure(TransportError(reason: "out of memory for a libcurl session")), nil)
            }
            handle = s
            return (.success(s), "HTTP client: \(String(cString: vaka_curl_version(lib))) (\(library))")
        }
    }
    private let session = Mutex(Session())
    private let log: @Sendable (String) -> Void
    /// Set by ``abortAll()`` (from any thread, while a request holds `session`): read by libcurl's progress
    /// callback of every request (`vaka_curl_post`'s `abort_flag`). Allocated for the transport's life.
    private nonisolated(unsafe) let abortFlag: UnsafeMutablePointer<Int32> = {
        let flag = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        flag.initialize(to: 0)
        return flag
    }()

    /// Creates a transport; nothing is loaded until the first request.
    /// - Parameters:
    ///   - timeout: default bound on each exchange, seconds (default 15).
    ///   - library: what to `dlopen` (default ``defaultLibrary``; tests pass a missing name).
    ///   - log: debug sink: one line when libcurl is loaded (its version). A failure to load is not logged
    ///     here: it is returned as a permanent ``TransportError`` (the uploader logs it when it stops).
    init(timeout: TimeInterval = 15, library: String = CurlTransport.defaultLibrary,
         log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.timeout = timeout
        self.library = library
        self.log = log
    }

    deinit {
        session.withLock { vaka_curl_session_free($0.handle) }
        abortFlag.deallocate()
    }

    /// Ends the request in progress within about a second (libcurl's progress callback sees the flag: a
    /// transient failure, curl 42) and makes every later one fail before it connects.
    func abortAll() { vaka_curl_abort(abortFlag) }

    /// Closes the kept-alive connections. A later request opens new ones.
    func invalidate() {
        session.withLock { session in
            vaka_curl_session_free(session.handle)
            session.handle = nil
        }
    }

    func send(_ request: HTTPRequest, completion: @escaping @Sendable (Result<HTTPResponse, TransportError>) -> Void) {
        completion(perform(request))
    }

    private func perform(_ request: HTTPRequest) -> Result<HTTPResponse, TransportError> {
        session.withLock { state in
            let handle: OpaquePointer
            let (opened, loaded) = state.open(library)
            if let loaded { log(loaded) }
            switch opened {
            case .success(let s): handle = s
            case .failure(let e): return .failure(e)
            }
            // Header values come from the DSN and the SDK; CR/LF would split a header line: dropped.
            let lines = request.headers.map { header in
                String(String.UnicodeScalarView("\(header.name): \(header.value)".unicodeScalars.filter { $0 != "\r" && $0 != "\n" }))
            }
            let cLines = lines.map { strdup($0) }
            defer { cLines.forEach { free($0) } }
            let bound = request.timeout.isFinite && request.timeout > 0 ? min(request.timeout, 86_400) : timeout
            let timeoutMS = Int(max(1, (bound * 1000).rounded()))
            var result = vaka_curl_result()
            defer { vaka_curl_result_free(&result) }
            let failure: vaka_curl_failure = cLines.map { UnsafePointer($0) }.withUnsafeBufferPointer { headers in
                request.body.withUnsafeBytes { body in
                    vaka_curl_post(handle, request.url.absoluteString, headers.baseAddress, headers.count,
                                   body.baseAddress, body.count, timeoutMS, abortFlag, &result)
                }
            }
            guard failure == VAKA_CURL_OK else {
                let reason = withUnsafeBytes(of: result.error) { bytes in
                    String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
                }
                let proxy = result.proxy_status > 0 && result.proxy_status != 200 ? Int(result.proxy_status) : nil
                return .failure(TransportError(reason: reason, isPermanent: failure == VAKA_CURL_PERMANENT, proxyStatus: proxy))
            }
            // A status with a note: the body was not read to its end (capped, or cut after the headers).
            let note = withUnsafeBytes(of: result.error) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            if !note.isEmpty { log("HTTP \(result.status): \(note); the status counts") }
            var headerBlock = ""
            if let raw = result.headers {
                headerBlock = String(decoding: UnsafeRawBufferPointer(start: raw, count: result.headers_length), as: UTF8.self)
            }
            return .success(HTTPResponse(status: Int(result.status), headers: CurlTransport.parseHeaders(headerBlock)))
        }
    }

    /// Parses a header block (`Name: value` lines, CRLF or LF) into lower-cased names; repeated fields are
    /// joined with `, `; lines without a `:` (or with an empty name) are skipped.
    static func parseHeaders(_ block: String) -> [String: String] {
        var headers: [String: String] = [:]
        for line in block.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }) {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            guard !name.isEmpty else { continue }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[name] = headers[name].map { "\($0), \(value)" } ?? value
        }
        return headers
    }
}
