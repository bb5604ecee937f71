import Foundation
import XCTest
@testable import Vaka

/// A fresh directory under the system temp dir; removed by `removeTemporaryDirectories()`.
final class TempDirs {
    private var dirs: [URL] = []
    func make(_ name: String = "vaka-delivery") -> URL {
        let url = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("\(name)-\(UUID().uuidString)", isDirectory: true)
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        dirs.append(url)
        return url
    }
    func removeAll() {
        for d in dirs { try? FileManager.default.removeItem(at: d) }
        dirs.removeAll()
    }
}

/// A 32-hex event id derived from `n` (deterministic, so tests can look it up).
func eventID(_ n: Int) -> String { String(format: "%032x", n + 0xabc000) }

/// An envelope with one small event (`logentry` message "event n").
func eventEnvelope(_ n: Int, extra: [EnvelopeItem] = []) -> Envelope {
    let json = #"{"event_id":"\#(eventID(n))","platform":"native","level":"info","logentry":{"formatted":"event \#(n)"}}"#
    return Envelope.event(id: eventID(n), payload: Data(json.utf8), extraItems: extra)
}

/// An envelope with one session update.
func sessionEnvelope(_ n: Int) -> Envelope {
    let json = #"{"sid":"\#(eventID(n))","status":"ok","seq":\#(n),"attrs":{"release":"t@1"}}"#
    return Envelope(header: .init(), items: [.session(Data(json.utf8))])
}

/// The envelope a test server received (gunzipped and parsed).
func receivedEnvelope(_ r: TestHTTPServer.Request, file: StaticString = #filePath, line: UInt = #line) -> Envelope? {
    do {
        return try Envelope(data: try Gzip.decompress(r.body))
    } catch {
        XCTFail("request body is not a gzip envelope: \(error)", file: file, line: line)
        return nil
    }
}

/// The event ids (envelope header) of the received requests, in order.
func receivedEventIDs(_ server: TestHTTPServer) -> [String?] {
    server.requests.map { receivedEnvelope($0)?.header.eventID }
}

/// Names of the batch files in `<storage>/pending` (sorted).
func batchFiles(_ storage: URL) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: storage.appendingPathComponent("pending").path)) ?? [])
        .filter { $0.hasSuffix(".batch") }.sorted()
}

/// A logger that collects lines (and checks that the key never appears).
final class LogSink {
    private let lock = NSLock()
    private var _lines: [String] = []
    var lines: [String] { lock.lock(); defer { lock.unlock() }; return _lines }
    func callAsFunction(_ s: String) { lock.lock(); _lines.append(s); lock.unlock() }
    var sink: (String) -> Void { { [self] in self($0) } }
}
