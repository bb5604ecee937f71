import Foundation
import Synchronization
import VakaCrash
#if canImport(Glibc)
import Glibc
#endif

/// Builds the SDK's events as ``Event`` values (handled errors, messages, custom events, and the scope added to
/// fatal events by the crash join), and their JSON (``finalize(_:budget:log:)``).
///
/// Every event has: `event_id` (32 hex), `timestamp` (seconds since the epoch), `platform: "native"`, `level`,
/// `sdk` (`vaka.swift` / version), `release`, `environment`, `tags` (when any), `user` (when set), `contexts`
/// and `extra` of ``Vaka/setContext(_:_:)`` and ``Vaka/setExtra(_:_:)`` (when any),
/// `breadcrumbs.values` (last 100, oldest first, when any), and `contexts`:
/// - `os`: `name` `"Linux"`, `version` and `kernel_version` = `uname -r`, `build` = `uname -v`,
///   `distribution_name` / `distribution_version` / `distribution_pretty_name` = `ID` / `VERSION_ID` /
///   `PRETTY_NAME` of `/etc/os-release`;
/// - `device`: `arch` (`uname -m`, e.g. `x86_64`);
/// - `app`: `app_name` (executable name), `app_version` (the release), `app_start_time` (RFC 3339, the
///   `Vaka.start` time), `app_identifier` (the executable's path).
struct EventFactory: Sendable {
    /// The `contexts` of every event: computed at the first read (once per start, usually on a background
    /// thread: the mover's first event or the crash join), so that `Vaka.start` does not read `/etc/os-release`
    /// or format the start time on the caller's thread.
    var contexts: Contexts { lazyContexts.value }
    /// `contexts.device.arch`.
    let arch: String
    private let lazyContexts: LazyContexts

    /// Reads `uname` now; `/etc/os-release`, the executable's path and the app facts at the first ``contexts`` read.
    init(release: String, startTime: Date) {
        var name = utsname()
        uname(&name)
        func field<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
        }
        let kernel = field(name.release), build = field(name.version)
        let arch = field(name.machine)
        self.arch = arch
        lazyContexts = LazyContexts {
            let distro = EventFactory.osRelease()
            let os = OSContext(name: "Linux", version: kernel, kernelVersion: kernel, build: build,
                               distributionName: distro["ID"], distributionVersion: distro["VERSION_ID"],
                               distributionPrettyName: distro["PRETTY_NAME"])
            let executable = EventFactory.executablePath()
            let app = AppContext(appName: (executable as NSString).lastPathComponent, appVersion: release,
                                 appStartTime: Timestamps.rfc3339(startTime), appIdentifier: executable)
            return Contexts(device: DeviceContext(arch: arch), os: os, app: app)
        }
    }

    /// A value computed once, at its first read, by whichever thread reads first (the others wait for it).
    private final class LazyContexts: Sendable {
        private let compute: @Sendable () -> Contexts
        private let stored = Mutex<Contexts?>(nil)
        init(_ compute: @escaping @Sendable () -> Contexts) { self.compute = compute }
        var value: Contexts {
            stored.withLock { stored in
                if let stored { return stored }
                let made = compute()
                stored = made
                return made
            }
        }
    }

    /// The path of the running executable (`/proc/self/exe`, as the crash runtime read it at install:
    /// `vaka_crash_executable_path`), else `argv[0]`, else `app`.
    static func executablePath() -> String {
        runtimeExecutablePath() ?? CommandLine.arguments.first ?? "app"
    }

    /// `/proc/self/exe`'s target from the crash runtime (read once, at install; read now when not installed), or
    /// `nil` when unknown.
    static func runtimeExecutablePath() -> String? {
        let size = Int(PATH_MAX) + 1
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: size) { buffer -> String? in
            guard let base = buffer.baseAddress else { return nil }
            let length = vaka_crash_executable_path(base, size)
            guard length > 0 else { return nil }
            return String(decoding: UnsafeRawBufferPointer(start: base, count: length), as: UTF8.self)
        }
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
        RandomID.hex32()
    }

    /// The common fields of every event (see the type's documentation), for `scope` and `breadcrumbs` at `date`.
    func base(eventID: String, level: Event.Level, date: Date, scope: RunScope, breadcrumbs: [Breadcrumb]) -> Event {
        var event = Event(eventID: eventID, timestamp: date.timeIntervalSince1970, platform: "native", level: level,
                          sdk: .vaka, contexts: contexts, release: scope.release, environment: scope.environment)
        EventFactory.apply(scope: scope, breadcrumbs: breadcrumbs, to: &event)
        return event
    }

    /// The event of a capture call as it is written to the journal: the common fields with `scope` at `date`,
    /// **without** `contexts` and breadcrumbs (run constants and the journal's breadcrumbs: the mover adds
    /// them with ``completed(_:breadcrumbs:)``, so the capture path encodes only what the call changed).
    func captured(eventID: String, level: Event.Level, date: Date, scope: RunScope) -> Event {
        var event = Event(eventID: eventID, timestamp: date.timeIntervalSince1970, platform: "native", level: level,
                          sdk: .vaka, contexts: nil, release: scope.release, environment: scope.environment)
        EventFactory.apply(scope: scope, breadcrumbs: [], to: &event)
        return event
    }

    /// `event` (from ``captured(eventID:level:date:scope:)``) with this run's `contexts` (the contexts the event
    /// carries, from ``Vaka/setContext(_:_:)`` or a per-call ``Scope``, laid over them: ``Contexts/set(_:_:)``) and
    /// `breadcrumbs` (oldest first; none leaves `breadcrumbs` out).
    func completed(_ event: Event, breadcrumbs: [Breadcrumb]) -> Event {
        var event = event
        var merged = contexts
        if let own = event.contexts { merged.overlay(own) }
        event.contexts = merged
        if !breadcrumbs.isEmpty { event.breadcrumbs = ValueList(breadcrumbs) }
        return event
    }

    /// Adds the scope's tags (kept where the event already has the same tag), user, contexts (laid over those the
    /// event has: ``Contexts/set(_:_:)``), extra (kept where the event already has the same key, e.g. the
    /// properties of ``Vaka/track(_:_:)``) and breadcrumbs to `event`.
    static func apply(scope: RunScope, breadcrumbs: [Breadcrumb], to event: inout Event) {
        var tags = event.tags ?? [:]
        for (key, value) in scope.tags where tags[key] == nil { tags[key] = value }
        if !tags.isEmpty { event.tags = tags }
        if let user = scope.user { event.user = user }
        if let contexts = scope.contexts, !contexts.isEmpty {
            var merged = event.contexts ?? Contexts()
            for (name, value) in contexts.sorted(by: { $0.key < $1.key }) { merged.set(name, value) }
            event.contexts = merged
        }
        if let extra = scope.extra, !extra.isEmpty {
            var merged = event.extra ?? [:]
            for (key, value) in extra where merged[key] == nil { merged[key] = value }
            event.extra = merged
        }
        if !breadcrumbs.isEmpty { event.breadcrumbs = ValueList(breadcrumbs) }
    }

    /// The JSON bytes put in an envelope for an event: its ``Event/Encoding/wire`` encoding (no frame `trust`),
    /// within the per-field limits and the byte `budget` (``EventBudget``). Every event the SDK sends goes through
    /// here: handled errors, messages, `track`/`screen` and the crash join's fatal events. A trimmed event gets
    /// one debug line (`log`) saying what was removed.
    static func finalize(_ event: Event, budget: EventBudget = .standard, log: ((String) -> Void)? = nil) -> Data {
        let outcome = budget.fit(event)
        if outcome.trimmed {
            log?("event \(event.eventID) trimmed to the size budget: \(outcome.summary)")
        }
        return outcome.data
    }
}
