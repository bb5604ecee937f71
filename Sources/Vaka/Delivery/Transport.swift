import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One HTTP request as the uploader builds it.
struct HTTPRequest {
    /// Target URL (the DSN's envelope URL).
    var url: URL
    /// Method; always `POST` for envelopes.
    var method = "POST"
    /// Header fields in sending order.
    var headers: [(name: String, value: String)]
    /// Body bytes (gzip-compressed envelope).
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
    /// The reason.
    var description: String { reason }
}

/// Something that can POST a request and report the response. Implementations must call `completion`
/// exactly once, on any thread, and must bound the exchange by `request.timeout`.
protocol HTTPTransport: AnyObject {
    /// Sends `request`; calls `completion` with the response or a ``TransportError``.
    func send(_ request: HTTPRequest, completion: @escaping (Result<HTTPResponse, TransportError>) -> Void)
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

private final class ResultBox {
    private let lock = NSLock()
    private var value: Result<HTTPResponse, TransportError>?
    func set(_ v: Result<HTTPResponse, TransportError>) { lock.lock(); value = v; lock.unlock() }
    func get() -> Result<HTTPResponse, TransportError>? { lock.lock(); defer { lock.unlock() }; return value }
}

/// ``HTTPTransport`` over `URLSession` (FoundationNetworking, libcurl on Linux). No cookies, no cache,
/// no redirects followed (a 3xx is returned to the uploader as is), bounded timeouts.
final class URLSessionTransport: HTTPTransport {
    private let session: URLSession

    /// Creates a transport with its own session.
    /// - Parameter timeout: default bound on each exchange, seconds (requests carry their own; default 15).
    ///   Values below 1 s are raised to 1 s (FoundationNetworking fires sub-second timeouts at once).
    init(timeout: TimeInterval = 15) {
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = max(1, timeout)
        config.timeoutIntervalForResource = max(1, timeout)
        config.httpShouldSetCookies = false
        config.httpCookieAcceptPolicy = .never
        config.urlCache = nil
        config.requestCachePolicy = .reloadIgnoringLocalCacheData
        config.httpMaximumConnectionsPerHost = 1
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        session = URLSession(configuration: config, delegate: RedirectRefuser(), delegateQueue: queue)
    }

    /// Stops the session; outstanding requests are cancelled.
    func invalidate() { session.invalidateAndCancel() }

    func send(_ request: HTTPRequest, completion: @escaping (Result<HTTPResponse, TransportError>) -> Void) {
        // FoundationNetworking on Linux fires sub-second timeouts at once (0.5 s timed out after ~40 ms): at least 1 s.
        var r = URLRequest(url: request.url, cachePolicy: .reloadIgnoringLocalCacheData,
                           timeoutInterval: max(1, request.timeout))
        r.httpMethod = request.method
        for (name, value) in request.headers { r.setValue(value, forHTTPHeaderField: name) }
        r.httpBody = request.body
        let task = session.dataTask(with: r) { _, response, error in
            if let error = error {
                completion(.failure(TransportError(reason: URLSessionTransport.describe(error))))
                return
            }
            guard let http = response as? HTTPURLResponse else {
                completion(.failure(TransportError(reason: "response is not HTTP")))
                return
            }
            var headers: [String: String] = [:]
            for (k, v) in http.allHeaderFields {
                guard let name = (k as? String)?.lowercased(), let value = v as? String else { continue }
                headers[name] = headers[name].map { "\($0), \(value)" } ?? value
            }
            completion(.success(HTTPResponse(status: http.statusCode, headers: headers)))
        }
        task.resume()
    }

    private static func describe(_ error: Error) -> String {
        let ns = error as NSError
        return "\(ns.domain) \(ns.code): \(ns.localizedDescription)"
    }
}

/// Refuses redirects: envelopes are only POSTed to the DSN's URL.
private final class RedirectRefuser: NSObject, URLSessionTaskDelegate {
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }
}
