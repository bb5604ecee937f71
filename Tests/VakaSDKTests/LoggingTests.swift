import XCTest
import VakaTestSupport
@testable import Vaka

/// A sink collecting what it is given.
final class CollectingLogSink: LogSink {
    let records = Locked<[LogRecord]>([])
    func write(_ record: LogRecord) { records.withLock { $0.append(record) } }
    var all: [LogRecord] { records.withLock { $0 } }
}

/// `Vaka.logger`: the minimum level, breadcrumbs from a level on, the sinks, the console line.
final class LoggingTests: XCTestCase {
    struct Appended: Equatable {
        var level: LogLevel
        var body: String
        var attributes: [String]
    }
    let journal = Locked<[Appended]>([])
    let crumbs = Locked<[Breadcrumb]>([])

    override func tearDown() { LogRouter.deactivate() }

    private func activate(level: LogLevel = .info, breadcrumbs: LogLevel? = .info, sinks: [any LogSink] = []) {
        var options = Vaka.Options()
        options.logLevel = level
        options.logBreadcrumbLevel = breadcrumbs
        options.logSinks = sinks
        let journal = self.journal, crumbs = self.crumbs
        LogRouter.activate(options: options, journal: { _, level, body, attributes in
            journal.withLock { $0.append(Appended(level: level, body: body, attributes: attributes.map { "\($0.key)=\($0.value.breadcrumbString)" })) }
        }, addBreadcrumb: { crumb in crumbs.withLock { $0.append(crumb) } })
    }

    func testOptionsDefaults() {
        let options = Vaka.Options()
        XCTAssertEqual(options.logLevel, .info)
        XCTAssertEqual(options.logBreadcrumbLevel, .info)
        XCTAssertTrue(options.logSinks.isEmpty)
    }

    func testNothingBelowTheMinimumLevelIsEvaluatedOrRecorded() {
        let sink = CollectingLogSink()
        activate(level: .warn, breadcrumbs: .trace, sinks: [sink])
        let evaluated = Locked(0)
        func body(_ s: String) -> String { evaluated.withLock { $0 += 1 }; return s }
        func attrs() -> [String: LogAttribute] { evaluated.withLock { $0 += 1 }; return ["k": 1] }
        Vaka.logger.trace(body("t"), attributes: attrs())
        Vaka.logger.debug(body("d"), attributes: attrs())
        Vaka.logger.info(body("i"), attributes: attrs())
        Vaka.logger.log(.info, body("i2"))
        XCTAssertEqual(evaluated.withLock { $0 }, 0, "a log below the minimum evaluated its body or attributes")
        XCTAssertEqual(journal.withLock { $0 }, [])
        XCTAssertEqual(crumbs.withLock { $0 }, [])
        XCTAssertEqual(sink.all, [])
        Vaka.logger.warn(body("w"), attributes: attrs())
        Vaka.logger.error(body("e"))
        Vaka.logger.fatal(body("f"))
        XCTAssertEqual(evaluated.withLock { $0 }, 4)
        XCTAssertEqual(journal.withLock { $0 }.map(\.body), ["w", "e", "f"])
        XCTAssertEqual(journal.withLock { $0 }.map(\.level), [.warn, .error, .fatal])
        XCTAssertEqual(sink.all.map(\.body), ["w", "e", "f"])
    }

    func testOffBeforeStartAndAfterDeactivate() {
        let sink = CollectingLogSink()
        activate(level: .trace, sinks: [sink])
        Vaka.logger.trace("on")
        LogRouter.deactivate()
        var evaluated = false
        Vaka.logger.fatal({ evaluated = true; return "off" }())
        XCTAssertFalse(evaluated)
        XCTAssertEqual(sink.all.map(\.body), ["on"])
        XCTAssertEqual(journal.withLock { $0 }.map(\.body), ["on"])
    }

    func testLogsFromTheBreadcrumbLevelOnBecomeBreadcrumbs() throws {
        activate(level: .debug, breadcrumbs: .warn)
        Vaka.logger.debug("d")
        Vaka.logger.info("i")
        Vaka.logger.warn("disk low", attributes: ["free_mb": 12, "mount": "/var", "ratio": 0.25, "alarm": true])
        Vaka.logger.error("e")
        Vaka.logger.fatal("f")
        let got = crumbs.withLock { $0 }
        XCTAssertEqual(got.map(\.message), ["disk low", "e", "f"])
        XCTAssertEqual(got.map(\.level), ["warning", "error", "fatal"])
        XCTAssertEqual(got.map(\.category), ["log", "log", "log"])
        XCTAssertEqual(got.map(\.type), ["default", "default", "default"])
        XCTAssertEqual(got[0].data, ["free_mb": 12, "mount": "/var", "ratio": 0.25, "alarm": true], "typed, as the log's attributes")
        XCTAssertNil(got[1].data)
        XCTAssertEqual(journal.withLock { $0 }.count, 5, "every recorded log is journalled, breadcrumb or not")
        XCTAssertEqual(journal.withLock { $0 }[2].attributes, ["alarm=true", "free_mb=12", "mount=/var", "ratio=0.25"],
                       "attributes sorted by key")
        let now = Date().timeIntervalSince1970
        XCTAssertLessThan(abs(got[0].timestamp - now), 60)

        crumbs.withLock { $0 = [] }
        activate(level: .trace, breadcrumbs: .trace)
        Vaka.logger.trace("t")
        Vaka.logger.debug("d")
        XCTAssertEqual(crumbs.withLock { $0 }.map(\.level), ["debug", "debug"])

        crumbs.withLock { $0 = [] }
        activate(level: .trace, breadcrumbs: nil)
        Vaka.logger.fatal("none")
        XCTAssertEqual(crumbs.withLock { $0 }, [])
    }

    func testEachSinkGetsEachRecordOnceInOrder() {
        let a = CollectingLogSink(), b = CollectingLogSink()
        activate(level: .debug, sinks: [a, b])
        let before = Date().timeIntervalSince1970
        Vaka.logger.debug("one", attributes: ["n": 1])
        Vaka.logger.info("two")
        Vaka.logger.trace("below")
        Vaka.logger.error("three", attributes: ["s": "x", "ok": false])
        let after = Date().timeIntervalSince1970
        for sink in [a, b] {
            XCTAssertEqual(sink.all.map(\.body), ["one", "two", "three"])
            XCTAssertEqual(sink.all.map(\.level), [.debug, .info, .error])
            XCTAssertEqual(sink.all[0].attributes, ["n": .integer(1)])
            XCTAssertEqual(sink.all[2].attributes, ["s": .string("x"), "ok": .boolean(false)])
            XCTAssertTrue(sink.all.allSatisfy { $0.timestamp >= before - 0.001 && $0.timestamp <= after + 0.001 })
        }
        XCTAssertEqual(a.all, b.all)
    }

    func testManyThreadsEveryRecordOnce() {
        let sink = CollectingLogSink()
        activate(level: .info, breadcrumbs: nil, sinks: [sink])
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for i in 0..<500 { Vaka.logger.info("t\(t) \(i)") }
        }
        XCTAssertEqual(sink.all.count, 4000)
        XCTAssertEqual(Set(sink.all.map(\.body)).count, 4000)
        XCTAssertEqual(journal.withLock { $0 }.count, 4000)
    }

    func testConsoleLine() {
        let lines = Locked<[String]>([])
        let console = ConsoleLogSink(output: { line in lines.withLock { $0.append(line) } })
        console.write(LogRecord(timestamp: 1_796_055_897.1239, level: .info, body: "checkout done",
                                attributes: ["user": "ana", "items": 3, "ratio": 0.5, "retry": true]))
        console.write(LogRecord(timestamp: 1_796_055_897, level: .error, body: "two\nlines",
                                attributes: ["path": "a b", "q": "say \"hi\"", "empty": ""]))
        console.write(LogRecord(timestamp: 0, level: .warn, body: "w"))
        XCTAssertEqual(lines.withLock { $0 }, [
            "2026-11-30T16:24:57.123Z info  checkout done items=3 ratio=0.5 retry=true user=ana\n",
            "2026-11-30T16:24:57.000Z error two\\nlines empty=\"\" path=\"a b\" q=\"say \\\"hi\\\"\"\n",
            "1970-01-01T00:00:00.000Z warn  w\n",
        ])
    }

    /// Through `Vaka.start` with its real client: a log becomes a breadcrumb of the next event, a sink of the
    /// options gets it, and nothing is recorded after `close`.
    func testStartedVakaRoutesLogs() throws {
        let dirs = ScratchDirs()
        defer { dirs.removeAll() }
        let storage = dirs.make("logging-start")
        let sink = CollectingLogSink()
        var options = Vaka.Options(sessionTracking: false, storageDirectory: storage)
        options.crashReporting = false
        options.logSinks = [sink]
        options.logLevel = .debug
        Vaka.start(options)
        Vaka.logger.trace("not recorded")
        Vaka.logger.debug("debug, not a breadcrumb")
        Vaka.logger.info("cart loaded", attributes: ["items": 3])
        Vaka.capture(message: "after the log")
        Vaka.close(timeout: 5)
        Vaka.logger.error("after close")
        XCTAssertEqual(sink.all.map(\.body), ["debug, not a breadcrumb", "cart loaded"])
        let envelopes = try readOutbox(storage)
        let events = envelopes.flatMap(\.events)
        XCTAssertEqual(events.count, 1)
        let event = events[0]
        let values = try XCTUnwrap((event["breadcrumbs"] as? [String: Any])?["values"] as? [[String: Any]])
        let logCrumbs = values.filter { $0["category"] as? String == "log" }
        XCTAssertEqual(logCrumbs.map { $0["message"] as? String }, ["cart loaded"])
        XCTAssertEqual((logCrumbs.first?["data"] as? [String: Int]), ["items": 3], "the attribute's integer, through the journal")
    }

    /// The journal route with a real journal, mapped and in the write(2) fallback (mmap refused): the
    /// recorded logs are the journal's log records, in order, with their levels and typed attributes; the
    /// mover's reading of them gives the log item; the file read offline (the next launch) holds them too.
    func testLogsAreJournalRecords() throws {
        let dirs = ScratchDirs()
        defer { dirs.removeAll() }
        for allowMmap in [true, false] {
            let url = dirs.make("log-journal").appendingPathComponent("journal")
            let journal = try Journal(path: url, allowMmap: allowMmap)
            XCTAssertEqual(journal.isMapped, allowMmap)
            var options = Vaka.Options()
            options.logLevel = .debug
            LogRouter.activate(options: options, journal: LogRouter.journalSink(journal), addBreadcrumb: { _ in })
            Vaka.logger.trace("below")
            Vaka.logger.debug("one", attributes: ["n": 1, "s": "x", "d": 0.5, "b": false])
            Vaka.logger.fatal("two")
            LogRouter.deactivate()
            Vaka.logger.fatal("after")

            var records: [Journal.Record] = []
            while let r = journal.next(.log, after: records.last) { records.append(r) }
            XCTAssertEqual(records.map(\.text), ["one", "two"], "mmap \(allowMmap)")
            XCTAssertEqual(records.map(\.level), [LogLevel.debug.rawValue, LogLevel.fatal.rawValue])
            XCTAssertEqual(records.map(\.kind), [.log, .log])
            XCTAssertEqual(records[0].attributes, [Journal.Attribute(key: "b", value: false), Journal.Attribute(key: "d", value: 0.5),
                                                   Journal.Attribute(key: "n", value: 1), Journal.Attribute(key: "s", value: "x")])
            let now = UInt64(Date().timeIntervalSince1970 * 1e9)
            XCTAssertLessThan(now - min(now, records[0].timeNs), 60_000_000_000)

            var batcher = LogBatcher()
            let scope = LogScope(release: "r", environment: "e", traceID: String(repeating: "a", count: 32))
            for r in records { _ = batcher.add(r, scope: scope) }
            let item = try XCTUnwrap(batcher.takeItem())
            let logs = try XCTUnwrap((JSONSerialization.jsonObject(with: item.payload) as? [String: Any])?["items"] as? [[String: Any]])
            XCTAssertEqual(logs.map { $0["body"] as? String }, ["one", "two"])
            XCTAssertEqual(logs.map { $0["level"] as? String }, ["debug", "fatal"])
            let attrs = try XCTUnwrap(logs[0]["attributes"] as? [String: [String: Any]])
            XCTAssertEqual(attrs["n"]?["type"] as? String, "integer")
            XCTAssertEqual(attrs["d"]?["type"] as? String, "double")
            XCTAssertEqual(attrs["b"]?["type"] as? String, "boolean")
            XCTAssertEqual(attrs["s"]?["value"] as? String, "x")
            XCTAssertEqual(logs[0]["timestamp"] as? Double ?? 0, Double(records[0].timeNs) / 1e9, accuracy: 1e-6)

            journal.close()
            let offline = try Journal.read(url)
            XCTAssertEqual(offline.records.filter { $0.kind == .log }.map(\.text), ["one", "two"], "mmap \(allowMmap)")
        }
    }
}
