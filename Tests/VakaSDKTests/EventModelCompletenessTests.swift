import XCTest
import Vaka

/// Every field of every event-model type is both encoded and decoded. For each type a fixture sets every stored
/// property (the test fails, naming the property, when one is `nil`, so a new property forces its fixture to be
/// updated); the fixture is encoded in the wire and the report encodings and decoded back, and must come back
/// equal; and the keys of the JSON object must be exactly the JSON names of the properties (`snake_case` of the
/// property name, e.g. `debugMeta` → `debug_meta`, `codeID` → `code_id`), plus the members kept in `other`. A
/// property whose encode or decode line is missing fails here instead of being silently dropped.
final class EventModelCompletenessTests: XCTestCase {
    /// Fully populated fixtures; frames carry `trust` only when `trust` is given (the wire encoding leaves it out,
    /// so the value expected back from the wire is the fixture built with `trust: nil`).
    struct Fixtures {
        let frame: Frame
        let stacktrace: Stacktrace
        let signalMeta: SignalMeta
        let nsErrorMeta: NSErrorMeta
        let mechanismMeta: MechanismMeta
        let mechanism: Mechanism
        let exception: Exception
        let thread: SentryThread
        let debugImage: DebugImage
        let debugMeta: DebugMeta
        let logEntry: LogEntry
        let user: User
        let sdkPackage: SDKPackage
        let sdk: SDKInfo
        let device: DeviceContext
        let os: OSContext
        let app: AppContext
        let contexts: Contexts
        let breadcrumb: Breadcrumb
        let event: Event

        static func other(_ type: String) -> [String: JSONValue] {
            ["x_\(type)_member": .object(["nested": .array([.int(1), .string("two"), .bool(true), .null])])]
        }

        init(trust: String?) {
            var frame = Frame(instructionAddr: HexAddress(0x5555_0000_1010), trust: trust, package: "/opt/shop/bin/shop",
                              imageAddr: HexAddress(0x5555_0000_0000), function: "shop.step() -> ()",
                              symbol: "$s4shop4stepyyF", symbolAddr: HexAddress(0x5555_0000_1000), inApp: true,
                              filename: "Step.swift", lineno: 12, colno: 5)
            frame.absPath = "/src/shop/Step.swift"
            frame.other = Self.other("frame")
            self.frame = frame

            var stacktrace = Stacktrace(frames: [frame], registers: ["rip": HexAddress(0x5555_0000_1010)])
            stacktrace.other = Self.other("stacktrace")
            self.stacktrace = stacktrace

            var signalMeta = SignalMeta(number: 11, code: 1, name: "SIGSEGV", codeName: "SEGV_MAPERR")
            signalMeta.other = Self.other("signal")
            self.signalMeta = signalMeta

            var nsErrorMeta = NSErrorMeta(code: 260, domain: "NSCocoaErrorDomain")
            nsErrorMeta.other = Self.other("ns_error")
            self.nsErrorMeta = nsErrorMeta

            var mechanismMeta = MechanismMeta(signal: signalMeta, nsError: nsErrorMeta)
            mechanismMeta.other = Self.other("meta")
            self.mechanismMeta = mechanismMeta

            var mechanism = Mechanism(type: "signalhandler", handled: false, meta: mechanismMeta,
                                      data: ["relevant_address": .string("0x10")], source: "NSUnderlyingErrorKey")
            mechanism.other = Self.other("mechanism")
            self.mechanism = mechanism

            var exception = Exception(type: "SIGSEGV", value: "Segmentation fault", threadID: 4242, mechanism: mechanism,
                                      stacktrace: stacktrace)
            exception.other = Self.other("exception")
            self.exception = exception

            var thread = SentryThread(id: 4242, name: "worker", crashed: true, current: true, stacktrace: stacktrace,
                                      state: "sleeping in system call 0")
            thread.other = Self.other("thread")
            self.thread = thread

            var debugImage = DebugImage(type: "elf", codeFile: "/opt/shop/bin/shop", imageAddr: HexAddress(0x5555_0000_0000),
                                        imageSize: 0x2000, codeID: "0011223344556677", debugID: "33221100-5544-7766-0000-000000000000",
                                        arch: "x86_64")
            debugImage.other = Self.other("image")
            self.debugImage = debugImage

            var debugMeta = DebugMeta(images: [debugImage])
            debugMeta.other = Self.other("debug_meta")
            self.debugMeta = debugMeta

            var logEntry = LogEntry(formatted: "checkout failed")
            logEntry.other = Self.other("logentry")
            self.logEntry = logEntry

            var user = User(id: "user-7", email: "ana@example.com", username: "ana", ipAddress: "203.0.113.7")
            user.other = Self.other("user")
            self.user = user

            sdkPackage = SDKPackage(name: "swiftpm:vaka", version: "0.1.0")
            var sdk = SDKInfo(name: "vaka.swift", version: "0.1.0", packages: [sdkPackage], integrations: ["signals"])
            sdk.other = Self.other("sdk")
            self.sdk = sdk

            var device = DeviceContext(arch: "x86_64")
            device.other = Self.other("device")
            self.device = device

            var os = OSContext(name: "Linux", version: "6.1.0", kernelVersion: "6.1.0-18-amd64", build: "#1 SMP",
                               distributionName: "debian", distributionVersion: "12",
                               distributionPrettyName: "Debian GNU/Linux 12 (bookworm)")
            os.other = Self.other("os")
            self.os = os

            var app = AppContext(appName: "shop", appVersion: "shop@1.2.3", appStartTime: "2026-01-02T03:04:05Z",
                                 appIdentifier: "/opt/shop/bin/shop")
            app.other = Self.other("app")
            self.app = app

            var contexts = Contexts(device: device, os: os, app: app)
            contexts.other = ["runtime": .object(["name": .string("swift")])]
            self.contexts = contexts

            breadcrumb = Breadcrumb(timestamp: 1_700_000_000.25, type: "navigation", category: "navigation",
                                    message: "Checkout", level: "info",
                                    data: ["from": "Cart", "to": "Checkout", "n": 2, "ok": true, "list": [1.5, "x"], "none": .null])

            var event = Event(eventID: "0123456789abcdef0123456789abcdef", timestamp: 1_700_000_001.5, platform: "native",
                              level: .fatal, sdk: sdk, contexts: contexts, exception: ValueList([exception]),
                              threads: ValueList([thread]), debugMeta: debugMeta, extra: ["attempt": .int(2)],
                              tags: ["region": "eu"], release: "shop@1.2.3", environment: "staging",
                              logentry: logEntry, user: user, breadcrumbs: ValueList([breadcrumb]))
            event.dist = "42"
            event.serverName = "host-1"
            event.type = "error"
            event.fingerprint = ["checkout", "{{ default }}"]
            event.other = Self.other("event")
            self.event = event
        }
    }

    /// Properties that are not a JSON member of their own: `other` (its members are written in its stead) and
    /// `Frame.hasInstructionAddr` (whether `instruction_addr` is written).
    static let notMembers: Set<String> = ["other", "hasInstructionAddr"]

    /// The JSON name of a property: its name in `snake_case`, with `ID` as one word (`eventID` → `event_id`).
    static func jsonName(_ property: String) -> String {
        var name = ""
        let chars = Array(property.replacingOccurrences(of: "ID", with: "Id"))
        for char in chars {
            if char.isUppercase {
                name += "_" + char.lowercased()
            } else {
                name.append(char)
            }
        }
        return name
    }

    /// Checks one fixture: no stored property `nil`, the keys of its JSON in both encodings, and that it decodes
    /// back equal (`wireExpected` from the wire encoding, `fixture` from the report encoding).
    /// `reportOnly` names members only the report encoding writes.
    func check<T: Codable & Equatable>(_ fixture: T, wireExpected: T, reportOnly: Set<String> = [],
                                       file: StaticString = #filePath, line: UInt = #line) throws {
        let typeName = String(describing: T.self)
        var names: Set<String> = []
        var otherMembers: Set<String> = []
        for child in Mirror(reflecting: fixture).children {
            guard let label = child.label else { continue }
            let value = Mirror(reflecting: child.value)
            if value.displayStyle == .optional, value.children.isEmpty {
                XCTFail("\(typeName).\(label) is nil in the fixture: set every property so that it is checked",
                        file: file, line: line)
            }
            if label == "other", let other = child.value as? [String: JSONValue]? {
                otherMembers = Set(other.map { Array($0.keys) } ?? [])
            }
            if !Self.notMembers.contains(label) { names.insert(Self.jsonName(label)) }
        }

        for encoding in [Event.Encoding.wire, .report] {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            encoder.userInfo[Event.Encoding.userInfoKey] = encoding
            let data = try encoder.encode(fixture)
            let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any],
                                       "\(typeName) does not encode as a JSON object", file: file, line: line)
            var expectedKeys = names.union(otherMembers)
            if encoding == .wire { expectedKeys.subtract(reportOnly) }
            let keys = Set(object.keys)
            XCTAssertEqual(keys.subtracting(expectedKeys).sorted(), [],
                           "\(typeName), \(encoding): JSON members without a property", file: file, line: line)
            XCTAssertEqual(expectedKeys.subtracting(keys).sorted(), [],
                           "\(typeName), \(encoding): properties not encoded", file: file, line: line)

            let decoded = try JSONDecoder().decode(T.self, from: data)
            XCTAssertEqual(decoded, encoding == .wire ? wireExpected : fixture,
                           "\(typeName), \(encoding): decoded back differs (a field not decoded?)\n\(String(decoding: data, as: UTF8.self))",
                           file: file, line: line)
        }
    }

    func testEveryFieldOfEveryEventModelTypeIsEncodedAndDecoded() throws {
        let full = Fixtures(trust: "cfi")
        let wire = Fixtures(trust: nil)
        try check(full.frame, wireExpected: wire.frame, reportOnly: ["trust"])
        try check(full.stacktrace, wireExpected: wire.stacktrace)
        try check(full.signalMeta, wireExpected: wire.signalMeta)
        try check(full.nsErrorMeta, wireExpected: wire.nsErrorMeta)
        try check(full.mechanismMeta, wireExpected: wire.mechanismMeta)
        try check(full.mechanism, wireExpected: wire.mechanism)
        try check(full.exception, wireExpected: wire.exception)
        try check(full.thread, wireExpected: wire.thread)
        try check(full.debugImage, wireExpected: wire.debugImage)
        try check(full.debugMeta, wireExpected: wire.debugMeta)
        try check(full.logEntry, wireExpected: wire.logEntry)
        try check(full.user, wireExpected: wire.user)
        try check(full.sdkPackage, wireExpected: wire.sdkPackage)
        try check(full.sdk, wireExpected: wire.sdk)
        try check(full.device, wireExpected: wire.device)
        try check(full.os, wireExpected: wire.os)
        try check(full.app, wireExpected: wire.app)
        try check(full.contexts, wireExpected: wire.contexts)
        try check(full.breadcrumb, wireExpected: wire.breadcrumb)
        try check(full.event, wireExpected: wire.event)
    }

    /// Property names map to their wire names as the protocol types name them.
    func testJSONNamesOfProperties() {
        XCTAssertEqual(Self.jsonName("eventID"), "event_id")
        XCTAssertEqual(Self.jsonName("codeID"), "code_id")
        XCTAssertEqual(Self.jsonName("distributionPrettyName"), "distribution_pretty_name")
        XCTAssertEqual(Self.jsonName("debugMeta"), "debug_meta")
        XCTAssertEqual(Self.jsonName("id"), "id")
    }
}

/// Every string the event model carries is bounded by the size budget: each string of the fully populated
/// fixture event (every property set, so a new field is in it) is made 100 000 characters long in turn, and
/// ``EventBudget/fit(_:)`` must bring every string of the result within the largest per-field limit
/// (``EventBudget/maxExtraValueChars``; identity fields within ``EventBudget/maxTagChars``). A new `String`
/// field the budget's lists do not cap fails here, named by its JSON path.
extension EventModelCompletenessTests {
    static let long = String(repeating: "x", count: 100_000)

    /// An encoder of the ``Event/Encoding/wire`` encoding.
    static var wireEncoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.userInfo[Event.Encoding.userInfoKey] = Event.Encoding.wire
        return encoder
    }

    /// Each string of `value` (object keys excepted) with its JSON path.
    static func strings(_ value: JSONValue, _ path: String = "") -> [(path: String, value: String)] {
        switch value {
        case .string(let s): return [(path, s)]
        case .array(let items): return items.indices.flatMap { strings(items[$0], "\(path)[\($0)]") }
        case .object(let object):
            return object.keys.sorted().flatMap { strings(object[$0]!, path.isEmpty ? $0 : "\(path).\($0)") }
        default: return []
        }
    }

    /// `value` with the string at `path` (as ``strings(_:_:)`` names it) replaced by `replacement`.
    static func replacing(_ value: JSONValue, at target: String, with replacement: String, _ path: String = "") -> JSONValue {
        switch value {
        case .string: return path == target ? .string(replacement) : value
        case .array(let items):
            return .array(items.indices.map { replacing(items[$0], at: target, with: replacement, "\(path)[\($0)]") })
        case .object(let object):
            var out: [String: JSONValue] = [:]
            for (key, member) in object {
                out[key] = replacing(member, at: target, with: replacement, path.isEmpty ? key : "\(path).\(key)")
            }
            return .object(out)
        default: return value
        }
    }

    /// The longest string of the fitted event, in Unicode scalars, with its path.
    static func longest(_ data: Data) throws -> (path: String, count: Int) {
        let value = try JSONDecoder().decode(JSONValue.self, from: data)
        return strings(value).map { ($0.path, $0.value.unicodeScalars.count) }.max { $0.1 < $1.1 } ?? ("", 0)
    }

    static let identityMembers: Set<String> = ["event_id", "platform", "release", "environment", "dist", "type",
                                               "server_name"]

    func testEveryStringFieldIsCappedByTheBudget() throws {
        let fixture = Fixtures(trust: nil).event
        let json = try JSONDecoder().decode(JSONValue.self, from: Self.wireEncoder.encode(fixture))
        let paths = Self.strings(json).map(\.path)
        XCTAssertGreaterThan(paths.count, 40, "the fixture event's strings: \(paths)")
        var checked = 0
        for path in paths {
            let data = try JSONEncoder().encode(Self.replacing(json, at: path, with: Self.long))
            // A string that is not a `String` field of the model (an address, the level) may not decode.
            guard let event = try? JSONDecoder().decode(Event.self, from: data) else { continue }
            checked += 1
            let outcome = EventBudget.standard.fit(event)
            XCTAssertTrue(outcome.fits, "\(path): \(outcome.summary)")
            let (longestPath, count) = try Self.longest(outcome.data)
            XCTAssertLessThanOrEqual(count, EventBudget.maxExtraValueChars,
                                     "\(path) made 100 000 characters long: \(longestPath) not capped by the budget")
            let member = path.split(separator: ".").first.map(String.init) ?? path
            if Self.identityMembers.contains(member) || path.hasPrefix("sdk.") {
                XCTAssertLessThanOrEqual(count, EventBudget.maxTagChars, "\(path): an identity field over its limit")
            }
        }
        XCTAssertGreaterThan(checked, 40, "strings checked")
    }

    /// All strings long at once: the byte budget's steps still bring every one within its limit.
    func testAllStringFieldsLongAtOnceAreCappedByTheBudget() throws {
        let fixture = Fixtures(trust: nil).event
        var json = try JSONDecoder().decode(JSONValue.self, from: Self.wireEncoder.encode(fixture))
        for (path, _) in Self.strings(json) {
            let candidate = Self.replacing(json, at: path, with: Self.long)
            if (try? JSONDecoder().decode(Event.self, from: JSONEncoder().encode(candidate))) != nil { json = candidate }
        }
        let event = try JSONDecoder().decode(Event.self, from: JSONEncoder().encode(json))
        let outcome = EventBudget.standard.fit(event)
        XCTAssertTrue(outcome.fits, outcome.summary)
        let (longestPath, count) = try Self.longest(outcome.data)
        XCTAssertLessThanOrEqual(count, EventBudget.maxExtraValueChars, "\(longestPath) not capped by the budget")
    }
}
