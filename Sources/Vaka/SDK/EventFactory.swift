import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Builds the JSON of the SDK's events (handled errors, messages, custom events, and the scope added to
/// fatal events by the crash join). Events are `[String: JSONValue]` objects so fields the ``Event`` type does
/// not model (`logentry`, `breadcrumbs`, `user`, `release`, `environment`, `contexts.app`) can be added.
///
/// Every event has: `event_id` (32 hex), `timestamp` (seconds since the epoch), `platform: "native"`, `level`,
/// `sdk` (`vaka.swift` / version), `release`, `environment`, `tags` (when any), `user: {id}` (when identified),
/// `breadcrumbs.values` (last 100, oldest first, when any), and `contexts`:
/// - `os`: `name` `"Linux"`, `version` and `kernel_version` = `uname -r`, `build` = `uname -v`,
///   `distribution_name` / `distribution_version` / `distribution_pretty_name` = `ID` / `VERSION_ID` /
///   `PRETTY_NAME` of `/etc/os-release`;
/// - `device`: `arch` (`uname -m`, e.g. `x86_64`);
/// - `app`: `app_name` (executable name), `app_version` (the release), `app_start_time` (RFC 3339, the
///   `Vaka.start` time), `app_identifier` (the executable's path).
struct EventFactory {
    /// The `contexts` object (computed once per start).
    let contexts: [String: JSONValue]
    /// `contexts.device.arch`.
    let arch: String

    private static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// Collects the machine facts (uname, /etc/os-release) and the app facts.
    init(release: String, startTime: Date) {
        var name = utsname()
        uname(&name)
        func field<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
        }
        let kernel = field(name.release), build = field(name.version)
        arch = field(name.machine)
        var os: [String: JSONValue] = ["name": .string("Linux"), "version": .string(kernel),
                                       "kernel_version": .string(kernel), "build": .string(build)]
        let distro = EventFactory.osRelease()
        os["distribution_name"] = distro["ID"].map(JSONValue.string)
        os["distribution_version"] = distro["VERSION_ID"].map(JSONValue.string)
        os["distribution_pretty_name"] = distro["PRETTY_NAME"].map(JSONValue.string)
        let executable = EventFactory.executablePath()
        let app: [String: JSONValue] = ["app_name": .string((executable as NSString).lastPathComponent),
                                        "app_start_time": .string(Timestamps.rfc3339(startTime)),
                                        "app_identifier": .string(executable),
                                        "app_version": .string(release)]
        contexts = ["os": .object(os), "device": .object(["arch": .string(arch)]), "app": .object(app)]
    }

    /// The path of the running executable (`/proc/self/exe`), else `argv[0]`.
    static func executablePath() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments.first ?? "app"
    }

    /// `KEY=value` pairs of `/etc/os-release` (quotes removed); empty when unreadable.
    static func osRelease(path: String = "/etc/os-release") -> [String: String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [:] }
        var out: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let eq = line.firstIndex(of: "="), !line.hasPrefix("#") else { continue }
            var value = line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, let q = value.first, q == "\"" || q == "'", value.last == q {
                value = String(value.dropFirst().dropLast())
            }
            out[String(line[..<eq])] = value
        }
        return out
    }

    /// A new event id: a random UUID as 32 lower-case hex digits.
    static func newEventID() -> String {
        UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }

    /// The common fields of every event (see the type's documentation), for `scope` and `breadcrumbs` at `date`.
    func base(eventID: String, level: Event.Level, date: Date, scope: RunScope, breadcrumbs: [Breadcrumb]) -> [String: JSONValue] {
        var event: [String: JSONValue] = [
            "event_id": .string(eventID),
            "timestamp": .double(date.timeIntervalSince1970),
            "platform": .string("native"),
            "level": .string(level.rawValue),
            "sdk": .object(["name": .string(SDKInfo.vaka.name), "version": .string(SDKInfo.vaka.version)]),
            "release": .string(scope.release),
            "environment": .string(scope.environment),
            "contexts": .object(contexts),
        ]
        apply(scope: scope, breadcrumbs: breadcrumbs, to: &event)
        return event
    }

    /// Adds the scope's tags (kept where the event already has the same tag), user and breadcrumbs to `event`.
    func apply(scope: RunScope, breadcrumbs: [Breadcrumb], to event: inout [String: JSONValue]) {
        var tags: [String: JSONValue] = [:]
        if case .object(let existing)? = event["tags"] { tags = existing }
        for (key, value) in scope.tags where tags[key] == nil { tags[key] = .string(value) }
        if !tags.isEmpty { event["tags"] = .object(tags) }
        if let user = scope.userID { event["user"] = .object(["id": .string(user)]) }
        if !breadcrumbs.isEmpty {
            event["breadcrumbs"] = .object(["values": .array(breadcrumbs.map(EventFactory.json))])
        }
    }

    /// A breadcrumb as JSON.
    static func json(_ crumb: Breadcrumb) -> JSONValue {
        var object: [String: JSONValue] = ["timestamp": .double(crumb.timestamp), "type": .string(crumb.type)]
        object["category"] = crumb.category.map(JSONValue.string)
        object["message"] = crumb.message.map(JSONValue.string)
        object["level"] = crumb.level.map(JSONValue.string)
        if let data = crumb.data { object["data"] = .object(data.mapValues(JSONValue.string)) }
        return .object(object)
    }

    /// Any `Encodable` value as JSON (through `JSONEncoder`); `.null` when it cannot be encoded.
    static func json<T: Encodable>(_ value: T) -> JSONValue {
        guard let data = try? encoder.encode(value), let json = try? JSONDecoder().decode(JSONValue.self, from: data) else { return .null }
        return json
    }

    /// The JSON bytes of an event object (sorted keys, `/` unescaped).
    static func encode(_ event: [String: JSONValue]) -> Data {
        (try? encoder.encode(event)) ?? Data("{}".utf8)
    }

    /// The JSON bytes put in an envelope for an event: the frame field `trust` removed
    /// (``removeFrameTrust(_:)``), then the per-field limits and the byte `budget` applied (``EventBudget``).
    /// Every event the SDK sends goes through here: handled errors, messages, `track`/`screen` and the crash
    /// join's fatal events. A trimmed event gets one debug line (`log`) saying what was removed.
    static func finalize(_ event: [String: JSONValue], budget: EventBudget = .standard,
                         log: ((String) -> Void)? = nil) -> Data {
        var e = event
        removeFrameTrust(&e)
        let outcome = budget.fit(e)
        if outcome.trimmed {
            log?("event \(e["event_id"]?.stringValue ?? "-") trimmed to the size budget: \(outcome.summary)")
        }
        return outcome.data
    }

    /// `logentry`: the Sentry message interface `{"formatted": text}` (the top-level key `message` is an alias
    /// some servers, such as Bugsink with strict validation, reject).
    static func logentry(_ text: String) -> JSONValue {
        .object(["formatted": .string(text)])
    }

    /// Removes the frame field `trust` (kept in `vaka report convert` output) from every stack trace of the
    /// event: the Sentry event schema has no such frame field, and servers validating strictly against it
    /// (Bugsink with `VALIDATE_ON_DIGEST: strict`) drop the whole event.
    static func removeFrameTrust(_ event: inout [String: JSONValue]) {
        for key in ["exception", "threads"] {
            guard case .object(var list)? = event[key], case .array(var values)? = list["values"] else { continue }
            for i in values.indices {
                guard case .object(var value) = values[i], case .object(var stacktrace)? = value["stacktrace"],
                      case .array(var frames)? = stacktrace["frames"] else { continue }
                for j in frames.indices {
                    if case .object(var frame) = frames[j] { frame["trust"] = nil; frames[j] = .object(frame) }
                }
                stacktrace["frames"] = .array(frames)
                value["stacktrace"] = .object(stacktrace)
                values[i] = .object(value)
            }
            list["values"] = .array(values)
            event[key] = .object(list)
        }
    }
}
