import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The end of a run's session, kept on disk for a later launch to send: what a run that exits before the
/// background part of its start ran (a program that is done within a millisecond or two) writes at exit instead
/// of its session update, so that its exit encodes no JSON and writes no envelope (`JSONEncoder`'s first use in a
/// process and an outbox write cost such a run about half a millisecond).
///
/// One file per run, `<storage>/sessions/<end>-<run-id>.session` (`<end>` the run's end in whole seconds since the
/// Unix epoch, so that the oldest record's age is known from a listing; mode 0600, written atomically), seven lines
/// of `key value`:
///
/// ```
/// vaka-session 1
/// sid 0c0ffee0-0000-4000-8000-000000000001
/// started_us 1764567890123456
/// ended_us 1764567890125012
/// errors 0
/// release shop@1.2.3
/// environment production
/// ```
///
/// `started_us` and `ended_us` are microseconds since the Unix epoch; `release` and `environment` are the run's,
/// already within Sentry's limits (``Vaka/Options/boundedRelease(_:)``: no control characters, so no line breaks). A
/// later launch's background part sends every record it finds (``Client/sendDeferredSessions(atLeast:)``), each as
/// the one update its run never made: `init: true`, `exited`, the run's `sid`, `started`, `duration`, `errors` and
/// attributes, `timestamp` and `seq` its end, `did` the storage directory's anon id. A run that exits early
/// itself sends them only once ``Client/maxDeferredSessions`` are waiting or the oldest ended
/// ``Client/maxDeferredSessionAge`` ago, so a program that always exits at once sends them in batches, and none
/// waits long enough for the server to refuse it (Relay drops sessions that started more than five days ago).
struct SessionRecord: Equatable {
    /// `sid`: the session's id (lower-case UUID with dashes).
    var sid: String
    /// When the session started, seconds since the Unix epoch.
    var started: Double
    /// When the run ended, seconds since the Unix epoch.
    var ended: Double
    /// Handled errors counted in the session.
    var errors: Int
    /// The run's release.
    var release: String
    /// The run's environment.
    var environment: String?

    /// The first line of a record, with its format version.
    static let magic = "vaka-session 1"
    /// File-name suffix of a record: `<end>-<run-id>.session`.
    static let suffix = ".session"
    /// Most bytes a record file is read up to (a larger one is not a record): release and environment at their
    /// byte limits plus the other lines, rounded up.
    static let maxBytes = 4096

    /// `<storage>/sessions`.
    static func directory(_ storage: URL) -> URL { storage.appendingFileComponent("sessions", isDirectory: true) }

    /// `<storage>/sessions`, for the storage directory at `storagePath`.
    static func directory(_ storagePath: String) -> String { PrivateFiles.path(storagePath, "sessions") }

    /// The record of `session` ending at `ended` in a run of `release` and `environment`.
    init(session: SessionState, ended: Date, release: String, environment: String?) {
        sid = session.sid
        started = session.started
        self.ended = ended.timeIntervalSince1970
        errors = session.errors
        self.release = release
        self.environment = environment
    }

    /// The file's text (see the type's documentation). Composed by concatenation, the times as integers: it is
    /// made at exit, where the first use of an array join or of a `Double`'s text costs more than the rest (the
    /// integers by ``NumberText``).
    var text: String {
        var text = SessionRecord.magic + "\nsid " + sid
        text += "\nstarted_us " + NumberText.decimal(SessionRecord.microseconds(started))
        text += "\nended_us " + NumberText.decimal(SessionRecord.microseconds(ended))
        text += "\nerrors " + NumberText.decimal(errors)
        text += "\nrelease " + Vaka.Options.boundedRelease(release)
        if let environment { text += "\nenvironment " + Vaka.Options.boundedEnvironment(environment) }
        return text + "\n"
    }

    /// `seconds` since the epoch as whole microseconds (saturating; NaN as 0).
    static func microseconds(_ seconds: Double) -> Int64 { Bounded.int64((seconds * 1_000_000).rounded()) }

    /// Parses a record's bytes; `nil` when they are not one (another first line, a missing or malformed `sid`,
    /// `started_us`, `ended_us`, `errors` or `release`, negative errors). Unknown keys are skipped (a later
    /// version may add some).
    init?(data: Data) {
        guard data.count <= SessionRecord.maxBytes else { return nil }
        // Split on the bytes of `\n` and of the first space, not on `Character`s: a value that begins with a
        // combining mark (or a joiner, a variation selector...) makes one grapheme cluster with the space before
        // it, which a `Character` search would not find.
        let text = String(decoding: data, as: UTF8.self)
        let lines = text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).map { Substring($0) }
        guard lines.first == Substring(SessionRecord.magic) else { return nil }
        var values: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let space = line.utf8.firstIndex(of: UInt8(ascii: " ")) else { continue }
            values[String(line[..<space])] = String(line[line.utf8.index(after: space)...])
        }
        guard let sid = values["sid"], RandomID.isUUID(sid),
              let started = values["started_us"].flatMap({ Int64($0) }),
              let ended = values["ended_us"].flatMap({ Int64($0) }),
              let errors = values["errors"].flatMap(Int.init), errors >= 0,
              let release = values["release"], !release.isEmpty else { return nil }
        self.sid = sid.lowercased()
        self.started = Double(started) / 1_000_000
        self.ended = Double(ended) / 1_000_000
        self.errors = errors
        self.release = release
        environment = values["environment"]
    }

    /// The session update this record stands for: the run's only one (`init: true`, `exited`), made as the run
    /// would have made it at its end, with `did` the storage directory's anon id.
    func update(did: String?) -> SessionUpdate {
        var state = SessionState(did: did, started: Date(timeIntervalSince1970: started))
        state.sid = sid
        state.errors = errors
        return state.update(.exited, now: Date(timeIntervalSince1970: ended), release: release, environment: environment)
    }

    /// The record's file name: `<end>-<runID>.session`, `<end>` its end in whole seconds since the Unix epoch.
    func fileName(runID: String) -> String {
        NumberText.decimal(Bounded.int64(ended.rounded(.down))) + "-" + runID + SessionRecord.suffix
    }

    /// The end in seconds since the Unix epoch that a record's file name starts with (``fileName(runID:)``), or
    /// `nil` when the name does not start with one.
    static func end(ofFileName name: String) -> Int64? {
        guard let dash = name.utf8.firstIndex(of: UInt8(ascii: "-")) else { return nil }
        return Int64(name[..<dash])
    }

    /// Writes the record to `<storage>/sessions/<end>-<runID>.session` (the directory made first when missing, 0700).
    /// - Throws: ``DeliveryIOError`` naming the failed call (a full disk, a read-only storage directory...).
    func write(storage: URL, runID: String) throws {
        try write(storagePath: storage.fileSystemPath, runID: runID)
    }

    /// ``write(storage:runID:)`` for the storage directory at `storagePath`, made with paths and the text's bytes
    /// (no `URL` or `Data`: this runs at exit).
    func write(storagePath: String, runID: String) throws {
        let directory = SessionRecord.directory(storagePath)
        try PrivateFiles.makeDirectory(path: directory)
        try PrivateFiles.writeAtomically(text: text, toPath: PrivateFiles.path(directory, fileName(runID: runID)), sync: false)
    }
}

extension Client {
    /// Deferred session records (``SessionRecord``) a run that exits before its start's background part ran lets
    /// wait in `<storage>/sessions/` before it sends them itself: 32. A run whose background part runs sends every
    /// one it finds.
    static let maxDeferredSessions = 32

    /// How long, seconds, the oldest deferred session record may wait before a run that exits at once sends the
    /// records even though fewer than ``maxDeferredSessions`` wait: one day (Relay drops sessions that started more
    /// than five days ago, and a program that always exits at once may run rarely).
    static let maxDeferredSessionAge: Int64 = 86_400

    /// A temporary file in `sessions/` (`.tmp-*`, left by a writer killed before its `rename`) older than this,
    /// seconds, is deleted by the pass that sends the records: ``PrivateFiles/staleTemporaryAge``, one hour.
    static let staleTemporaryAge: Int64 = PrivateFiles.staleTemporaryAge

    /// Most session updates one envelope carries when deferred records are sent: 100 (Relay's limit of session
    /// items per envelope).
    static let maxSessionsPerEnvelope = 100

    /// Sends the session records earlier runs left in `<storage>/sessions/` (``SessionRecord``) when there are at
    /// least `minimum`, or when the oldest (by the end its file name starts with) ended
    /// ``maxDeferredSessionAge`` ago or more: each becomes its update (`did` this storage directory's anon id), up to
    /// ``maxSessionsPerEnvelope`` per envelope, oldest run first (by the record's end). A record is deleted once
    /// the envelope carrying it is written to `pending/` or the outbox; one that cannot be read or parsed is
    /// deleted with a debug line. Processes sharing the storage directory take turns: the directory is locked
    /// (`flock`) for the pass, and a process that finds it locked leaves the records to the one holding it.
    /// The run's own record (none before it ends) is never among them. The pass also deletes temporary files older
    /// than ``staleTemporaryAge``.
    func sendDeferredSessions(atLeast minimum: Int) {
        let directory = SessionRecord.directory(storagePath)
        let ownSuffix = "-" + runID + SessionRecord.suffix
        var names = PrivateFiles.directoryNames(directory).filter { $0.hasSuffix(SessionRecord.suffix) && !$0.hasSuffix(ownSuffix) }
        guard !names.isEmpty else { return }
        if names.count < minimum {
            // Fewer than asked: sent anyway when the oldest waited too long. A name without an end (not a record's)
            // does not count: a pass that comes for the others deletes it, or says it cannot.
            let now = Int64(time(nil))
            guard names.contains(where: { name in
                SessionRecord.end(ofFileName: name).map { now - $0 >= Client.maxDeferredSessionAge } ?? false
            }) else { return }
        }
        let lock = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard lock >= 0 else { return }
        defer { close(lock) }
        guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
            logLine("\(names.count) deferred session(s) in \(directory) are being sent by another process")
            return
        }
        // Listed again under the lock: another process may have sent some meanwhile.
        let listed = PrivateFiles.directoryNames(directory)
        names = listed.filter { $0.hasSuffix(SessionRecord.suffix) && !$0.hasSuffix(ownSuffix) }
        removeStaleTemporaries(listed.filter { $0.hasPrefix(".tmp-") }, in: directory)
        var records: [(path: String, record: SessionRecord)] = []
        for name in names {
            let path = directory + "/" + name
            guard case .data(let data) = PrivateFiles.readCapped(path, maxBytes: SessionRecord.maxBytes),
                  let record = SessionRecord(data: data) else {
                if unlink(path) == 0 {
                    logLine("deferred session \(name) is not a session record; removed")
                } else {
                    logLine("deferred session \(name) is not a session record and cannot be removed (\(String(cString: strerror(errno)))); left")
                }
                continue
            }
            records.append((path, record))
        }
        guard !records.isEmpty else { return }
        records.sort { $0.record.ended < $1.record.ended }
        let did = Client.anonID(storagePath: storagePath, log: { [weak self] in self?.logLine($0) })
        var start = 0
        while start < records.count {
            let batch = records[start..<min(start + Client.maxSessionsPerEnvelope, records.count)]
            start = batch.endIndex
            let items = batch.map { EnvelopeItem.session($0.record.update(did: did).jsonData()) }
            do {
                try delivery.submit(Envelope(items: items), durable: true)
            } catch {
                // Kept for a later launch (outbox mode dropped the envelope; with a DSN it is held in memory and
                // may still go out, in which case the server sees these updates twice).
                logLine("could not persist \(batch.count) deferred session update(s): \(error); kept for a later launch")
                return
            }
            for entry in batch { unlink(entry.path) }
            logLine("sent \(batch.count) deferred session update(s) of earlier runs")
        }
    }

    /// Deletes the temporary files `names` of `directory` (`sessions/`) whose modification time is
    /// ``staleTemporaryAge`` or more ago: left by writers killed between writing and renaming a record.
    private func removeStaleTemporaries(_ names: [String], in directory: String) {
        let now = Int64(time(nil))
        for name in names where PrivateFiles.removeIfStaleTemporary(name, in: directory, now: now) {
            logLine("removed \(name), a session record's temporary file left by a killed writer")
        }
    }
}
