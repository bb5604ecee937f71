import XCTest
import VakaTestSupport
@testable import Vaka

final class EnvelopeTests: XCTestCase {
    func testSerializesExactly() {
        let sent = Date(timeIntervalSince1970: 1_714_566_896.789)
        let env = Envelope(header: .init(eventID: "0123456789abcdef0123456789abcdef", sentAt: sent),
                           items: [.event(Data(#"{"a":1}"#.utf8)),
                                   .logs(Data("{\"items\":[]}".utf8), count: 0)])
        let text = String(decoding: env.serialized(), as: UTF8.self)
        XCTAssertEqual(text, """
        {"event_id":"0123456789abcdef0123456789abcdef","sdk":{"name":"vaka.swift","version":"0.1.0"},"sent_at":"2024-05-01T12:34:56.789Z"}
        {"content_type":"application/json","length":7,"type":"event"}
        {"a":1}
        {"content_type":"application/vnd.sentry.items.log+json","item_count":0,"length":12,"type":"log"}
        {"items":[]}

        """)
    }

    func testRoundTripWithNewlinesAndBinaryPayloads() throws {
        let payload = Data([0x7B, 0x0A, 0x0A, 0x00, 0xFF, 0x7D])
        let env = Envelope(header: .init(eventID: eventID(1), sentAt: Date(timeIntervalSince1970: 1_700_000_000.25),
                                         dsn: "https://k@h/1"),
                           items: [.event(payload), .session(Data("{}".utf8)),
                                   EnvelopeItem(type: .init(rawValue: "custom"), payload: Data(), contentType: nil)])
        let back = try Envelope(data: env.serialized())
        XCTAssertEqual(back, env)
        XCTAssertEqual(back.items.map(\.type), [.event, .session, .init(rawValue: "custom")])
    }

    /// Every member of the envelope header and of an item header is written under its protocol name and read
    /// back (the header lines are coded member by member, not by a synthesized `CodingKeys`); the header's `sdk`
    /// carries the name and version only.
    func testEveryHeaderMemberIsWrittenAndReadBack() throws {
        var attachment = EnvelopeItem(type: .attachment, payload: Data("log".utf8), contentType: "text/plain")
        attachment.filename = "app.log"
        attachment.attachmentType = "event.attachment"
        let env = Envelope(header: .init(eventID: eventID(7), sentAt: Date(timeIntervalSince1970: 1_700_000_000.5),
                                         dsn: "https://k@h/1", sdk: SDKInfo(name: "other.sdk", version: "9.8.7")),
                           items: [.event(Data("{}".utf8)), .logs(Data("{}".utf8), count: 3), attachment])
        let data = env.serialized()
        let back = try Envelope(data: data)
        XCTAssertEqual(back, env)
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        func keys(_ line: String) throws -> Set<String> {
            Set(try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]).keys)
        }
        XCTAssertEqual(try keys(lines[0]), ["event_id", "sent_at", "dsn", "sdk"])
        XCTAssertTrue(lines[0].contains(#""sdk":{"name":"other.sdk","version":"9.8.7"}"#), lines[0])
        XCTAssertEqual(try keys(lines[3]), ["type", "length", "content_type", "item_count"])
        XCTAssertEqual(try keys(lines[5]), ["type", "length", "content_type", "filename", "attachment_type"])

        var withIntegrations = SDKInfo.vaka
        withIntegrations.integrations = ["x"]
        let header = String(decoding: Envelope(header: .init(sdk: withIntegrations), items: []).serialized(), as: UTF8.self)
        XCTAssertEqual(header, #"{"sdk":{"name":"vaka.swift","version":"\#(SDKInfo.vaka.version)"}}"# + "\n")
    }

    func testParsesItemsWithoutLengthAndForeignHeaders() throws {
        let text = "{\"event_id\":\"9ec79c33ec9942ab8353589fcb2e04dc\",\"dsn\":\"https://e12d836b15bb49d7bbf99e64295d995b:@sentry.io/42\",\"unknown\":true}\n" +
            "{\"type\":\"attachment\",\"length\":10,\"content_type\":\"text/plain\",\"filename\":\"hello.txt\"}\n\u{FEFF}Hello\r\n\n" +
            "{\"type\":\"event\",\"content_type\":\"application/json\",\"filename\":\"application.log\"}\n{\"message\":\"hello world\",\"level\":\"error\"}\n"
        let env = try Envelope(data: Data(text.utf8))
        XCTAssertEqual(env.header.eventID, "9ec79c33ec9942ab8353589fcb2e04dc")
        XCTAssertEqual(env.items.count, 2)
        XCTAssertEqual(env.items[0].payload.count, 10)
        XCTAssertEqual(String(decoding: env.items[1].payload, as: UTF8.self), #"{"message":"hello world","level":"error"}"#)
    }

    func testRejectsMalformed() {
        XCTAssertThrowsError(try Envelope(data: Data())) { XCTAssertEqual($0 as? EnvelopeError, .empty) }
        XCTAssertThrowsError(try Envelope(data: Data("not json\n".utf8)))
        XCTAssertThrowsError(try Envelope(data: Data("{}\n{\"length\":3}\nabc\n".utf8)))  // no type
        XCTAssertThrowsError(try Envelope(data: Data("{}\n{\"type\":\"event\",\"length\":30}\nabc\n".utf8))) {
            XCTAssertEqual($0 as? EnvelopeError, .truncatedPayload(index: 0, expected: 30, available: 4))
        }
        XCTAssertThrowsError(try Envelope(data: Data("{\"sent_at\":\"yesterday\"}\n".utf8)))
    }

    func testSplitKeepsEventIDOnlyWithEvent() {
        let env = eventEnvelope(3, extra: [.session(Data("{}".utf8))])
        XCTAssertEqual(env.with(items: [env.items[0]]).header.eventID, eventID(3))
        XCTAssertNil(env.with(items: [env.items[1]]).header.eventID)
    }

    func testGzipRoundTrip() throws {
        let inputs = [Data(), Data("hello".utf8), Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ ($0 >> 7)) }),
                      Data(repeating: 0x41, count: 1 << 20)]
        for input in inputs {
            let gz = try Gzip.compress(input)
            XCTAssertEqual(Array(gz.prefix(2)), [0x1F, 0x8B], "gzip magic")
            XCTAssertEqual(try Gzip.decompress(gz), input)
        }
        XCTAssertLessThan(try Gzip.compress(Data(repeating: 0x41, count: 1 << 20)).count, 10_000)
    }

    /// zlib is opened with dlopen: a library that cannot be opened is an error that says so (and which library),
    /// and one named by path is as good as the default one.
    func testGzipWithAMissingZlibThrowsLibraryMissingAndANamedOneCompresses() throws {
        let input = Data((0..<50_000).map { UInt8(truncatingIfNeeded: $0 % 251) })
        XCTAssertThrowsError(try Gzip.compress(input, library: "libz-vaka-missing.so.1")) { error in
            let gzip = error as? GzipError
            XCTAssertEqual(gzip?.isLibraryMissing, true, "\(error)")
            XCTAssertTrue("\(error)".contains("libz-vaka-missing.so.1"), "\(error)")
        }
        XCTAssertEqual(try? Gzip.compress(Data(), library: "libz-vaka-missing.so.1"), nil, "even for an empty body")
        let real = try Gzip.compress(input, library: "/lib/x86_64-linux-gnu/libz.so.1")
        XCTAssertEqual(real, try Gzip.compress(input), "the same zlib, opened by path, gives the same bytes")
        XCTAssertEqual(try Gzip.decompress(real), input)
        XCTAssertFalse(GzipError(operation: "inflate", code: -3, message: nil).isLibraryMissing, "a zlib error is not a missing zlib")
    }

    func testGunzipRejectsCorruptAndTruncated() throws {
        let gz = try Gzip.compress(Data(repeating: 7, count: 5000))
        XCTAssertThrowsError(try Gzip.decompress(gz.prefix(gz.count / 2)))
        var bad = gz
        bad[12] ^= 0xFF
        XCTAssertThrowsError(try Gzip.decompress(bad))
        XCTAssertThrowsError(try Gzip.decompress(Data("plain text".utf8)))
    }

    /// `compressedSize(of:upTo:)` is the size `compress` produces, or `nil` once the output passes the limit.
    func testGzipCompressedSizeAgreesWithCompressAndStopsAtTheLimit() throws {
        let random = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) })
        for input in [Data(), Data("hello".utf8), random, Data(repeating: 0x41, count: 1 << 20)] {
            let size = try Gzip.compress(input).count
            XCTAssertEqual(try Gzip.compressedSize(of: input, upTo: Int.max), size)
            XCTAssertEqual(try Gzip.compressedSize(of: input, upTo: size), size, "exactly at the limit fits")
            XCTAssertNil(try Gzip.compressedSize(of: input, upTo: size - 1), "one byte over does not")
        }
    }

    func testGzipIsReadableByAnIndependentDecoder() throws {
        // python3's gzip module (zlib-based but not our code path) must read what we write.
        let input = eventEnvelope(7).serialized()
        let dir = ScratchDirs(); defer { dir.removeAll() }
        let file = dir.make().appendingPathComponent("body.gz")
        try Gzip.compress(input).write(to: file)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try Peers.tool("python3"))
        p.arguments = ["-c", "import gzip,sys; sys.stdout.buffer.write(gzip.open(sys.argv[1]).read())", file.path]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        let out = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertEqual(out, input)
    }

    func testBatchFileRoundTripAndDamage() {
        let records = [eventEnvelope(1).serialized(), Data(), Data("x\ny\n".utf8)]
        let data = BatchFile.encode(records)
        XCTAssertTrue(String(decoding: data.prefix(13), as: UTF8.self) == "VAKA-BATCH 1\n")
        let (back, damaged) = BatchFile.decode(data)
        XCTAssertEqual(back, records)
        XCTAssertFalse(damaged)
        let (partial, damaged2) = BatchFile.decode(data.prefix(data.count - 3))
        XCTAssertEqual(partial, Array(records.prefix(2)))
        XCTAssertTrue(damaged2)
        XCTAssertTrue(BatchFile.decode(Data("garbage".utf8)).damaged)
    }

    func testTimestamps() {
        XCTAssertEqual(Timestamps.rfc3339(Date(timeIntervalSince1970: 0)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(Timestamps.parseRFC3339("2024-05-01T12:34:56.789Z")?.timeIntervalSince1970 ?? 0, 1_714_566_896.789, accuracy: 0.0005)
        XCTAssertEqual(Timestamps.parseRFC3339("2024-05-01T14:34:56+02:00")?.timeIntervalSince1970, 1_714_566_896)
        XCTAssertNil(Timestamps.parseRFC3339("2024-05-01 12:34:56Z"))
        XCTAssertEqual(Timestamps.parseHTTPDate("Sun, 06 Nov 1994 08:49:37 GMT")?.timeIntervalSince1970, 784_111_777)
        XCTAssertEqual(Timestamps.parseHTTPDate("Sunday, 06-Nov-94 08:49:37 GMT")?.timeIntervalSince1970, 784_111_777)
        XCTAssertEqual(Timestamps.parseHTTPDate("Sun Nov  6 08:49:37 1994")?.timeIntervalSince1970, 784_111_777)
        XCTAssertNil(Timestamps.parseHTTPDate("soon"))
    }
}
