import Foundation

/// A release-health session update (the payload of a `session` envelope item), Sentry semantics.
///
/// On Linux one session covers one process run: `ok` from ``Vaka/start(_:)`` (with `init: true` on the first
/// update), then one final status: `exited` (``Vaka/close()`` or normal exit; a run that exits before its start's
/// background part began leaves it as a ``SessionRecord`` that a later launch sends), `crashed` (sent by the crash
/// join of the next launch, in the envelope of the fatal event), or `abnormal` (the run ended without either,
/// e.g. SIGKILL; sent at the next launch). `errors` counts the handled errors captured in the run, and for
/// `crashed` the fatal event too (so a crashed session always has `errors` ≥ 1, as Sentry counts it and as
/// sentry-python's `errors + (errored or crashed)` sends it); `exited` and `abnormal` carry the count of
/// handled errors the run persisted (no event accompanies them).
struct SessionUpdate: Codable, Equatable {
    /// Session status values.
    enum Status: String, Codable {
        /// Running.
        case ok
        /// Ended normally (final).
        case exited
        /// Ended by a crash (final).
        case crashed
        /// Ended without an exit or crash being seen, e.g. killed (final).
        case abnormal
    }

    /// `attrs`: the release (required by Sentry) and environment.
    struct Attributes: Codable, Equatable {
        /// `release`.
        var release: String
        /// `environment`.
        var environment: String?
    }

    /// Session id: a random UUID, lower-case with dashes (`sid`).
    var sid: String
    /// Distinct id: the installation's anon id, a UUID kept in `<storage>/anon_id` (`did`).
    var did: String?
    /// Sequence number: milliseconds since the Unix epoch when the update was made, so later updates win (`seq`).
    var seq: Int64
    /// `true` only on the first update of the session (`init`).
    var `init`: Bool
    /// When the session started, RFC 3339 UTC with milliseconds (`started`).
    var started: String
    /// When this update was made, RFC 3339 UTC with milliseconds (`timestamp`).
    var timestamp: String
    /// Seconds from `started` to `timestamp`, for final updates (`duration`).
    var duration: Double?
    /// `status`.
    var status: Status
    /// Errors seen in the session (`errors`): handled errors, plus 1 for the fatal event when `status` is `crashed`.
    var errors: Int
    /// `attrs`.
    var attrs: Attributes

    /// The JSON payload (sorted keys).
    func jsonData() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(self)) ?? Data("{}".utf8)
    }
}

/// The session state of one run as kept in the run's `scope.json`; makes ``SessionUpdate``s.
struct SessionState: Codable, Equatable {
    /// `sid`.
    var sid: String
    /// `did`.
    var did: String?
    /// Start time, seconds since the Unix epoch.
    var started: Double
    /// Handled errors so far.
    var errors: Int
    /// The last status recorded (`ok` until the run ends).
    var status: SessionUpdate.Status
    /// Whether the `init: true` update was already made.
    var initSent: Bool

    /// A new running session.
    init(did: String?, started: Date) {
        sid = RandomID.uuid(lowercase: true)
        self.did = did
        self.started = started.timeIntervalSince1970
        errors = 0
        status = .ok
        initSent = false
    }

    /// The update for `status` at `now`; marks `init` as sent. `crashed` counts the fatal event as one more
    /// error (once: a session that is already `crashed` is not counted again). `release` and `environment` are
    /// made what Sentry accepts (``Vaka/Options/boundedRelease(_:)``): for the crash join they come from an
    /// earlier run's `scope.json`.
    mutating func update(_ status: SessionUpdate.Status, now: Date, release: String, environment: String?) -> SessionUpdate {
        // For the crash join `errors` comes from a run's scope.json on disk: a negative count (which Relay would
        // refuse) is taken as none, and one that would overflow saturates instead of trapping the launch that
        // joins it (the report stays, so every launch would).
        errors = max(errors, 0)
        if status == .crashed && self.status != .crashed && errors < Int.max { errors += 1 }
        self.status = status
        let first = !initSent
        initSent = true
        let start = Date(timeIntervalSince1970: started)
        // `started` comes from a run's scope.json on disk for the crash join: any number must format.
        let duration = now.timeIntervalSince(start)
        return SessionUpdate(sid: sid, did: did, seq: Bounded.int64(now.timeIntervalSince1970 * 1000), init: first,
                             started: Timestamps.rfc3339(start), timestamp: Timestamps.rfc3339(now),
                             duration: status == .ok || !duration.isFinite ? nil : max(0, duration),
                             status: status, errors: errors,
                             attrs: .init(release: Vaka.Options.boundedRelease(release),
                                            environment: environment.map(Vaka.Options.boundedEnvironment)))
    }
}
