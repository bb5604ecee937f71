import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The scope of one run as persisted for the crash join: what the next launch needs to turn this run's crash
/// report into a complete fatal event. Written to `<storage>/runs/<run-id>/scope.json` (atomically, mode 0600)
/// whenever it changes; breadcrumbs live next to it (``BreadcrumbStore``).
struct RunScope: Codable, Equatable {
    /// The run id (a UUID string; also the crash report's file name).
    var runID: String
    /// `release`.
    var release: String
    /// `environment`.
    var environment: String
    /// `tags` (options' tags plus ``Vaka/setTag(_:_:)``).
    var tags: [String: String]
    /// `user.id` from ``Vaka/identify(_:)`` or ``Vaka/setUser(_:)``, or `nil`.
    var userID: String?
    /// The run's session, when session tracking is on.
    var session: SessionState?
    /// `user.email`, `user.username`, `user.ip_address` from ``Vaka/setUser(_:)``.
    var userEmail: String? = nil
    var username: String? = nil
    var userIPAddress: String? = nil
    /// Contexts by name from ``Vaka/setContext(_:_:)``; with ``extra`` at most ``maxDataBytes`` encoded.
    var contexts: [String: [String: JSONValue]]? = nil
    /// `extra` from ``Vaka/setExtra(_:_:)``.
    var extra: [String: JSONValue]? = nil
    /// The file attachments of ``Vaka/addAttachment(path:filename:contentType:)`` (at most
    /// ``Attachment/maxRegistered``), read by the crash join when this run crashed.
    var attachments: [AttachmentRef]? = nil

    /// The user of this scope (`nil` when no field is set).
    var user: User? {
        get {
            let user = User(id: userID, email: userEmail, username: username, ipAddress: userIPAddress)
            return user.isEmpty ? nil : user
        }
        set {
            userID = newValue?.id
            userEmail = newValue?.email
            username = newValue?.username
            userIPAddress = newValue?.ipAddress
        }
    }

    /// Most bytes `contexts` and `extra` take together in `scope.json`, encoded: 64 KiB. A
    /// ``Vaka/setContext(_:_:)`` or ``Vaka/setExtra(_:_:)`` that would pass it is left out (a debug line).
    static let maxDataBytes = 64 * 1024

    /// The encoded size of `contexts` and `extra` (as `scope.json` holds them), bytes.
    var dataBytes: Int {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return ((try? encoder.encode(contexts))?.count ?? 0) + ((try? encoder.encode(extra))?.count ?? 0)
    }

    /// Most tags a run keeps (options' tags plus ``Vaka/setTag(_:_:)``): 200. A further new key removes the
    /// tag set longest ago (with a debug line): the newest tags win. Bounds `scope.json` (see
    /// ``maxEncodedBytes``) and the cost of rewriting it on every scope change.
    static let maxTags = 200

    /// Most bytes `scope.json` can take, derived from the limits: ``maxTags`` tags of key and value at most
    /// ``Vaka/Options/maxTagChars`` scalars each, four user fields of as many, release and environment at their
    /// byte limits, every scalar escaped at worst as `\u00XX` (6 bytes), ``maxDataBytes`` of contexts and extra,
    /// ``Attachment/maxRegistered`` attachments of a path and a file name of ``Attachment/maxPathBytes`` and a
    /// content type of ``Vaka/Options/maxTagChars`` (escaped at worst), plus 16 KiB for the run id, session
    /// and JSON syntax: 973,232 B, under ``RunDirectory/maxScopeBytes`` (1 MiB), so the next launch always
    /// reads it.
    static let maxEncodedBytes = maxTags * (2 * Vaka.Options.maxTagChars * 6 + 8) + 4 * Vaka.Options.maxTagChars * 6
        + (Vaka.Options.maxReleaseBytes + Vaka.Options.maxEnvironmentBytes) * 6 + maxDataBytes
        + Attachment.maxRegistered * ((2 * Attachment.maxPathBytes + Vaka.Options.maxTagChars) * 6 + 64) + 16 * 1024

    /// The `scope.json` bytes: the `Codable` form (what the next launch decodes), keys sorted.
    func jsonData() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    /// `tags` with at most ``maxTags`` entries (the first by key order) and each key and value cut to
    /// ``Vaka/Options/maxTagChars`` scalars; `dropped` is how many tags were left out.
    static func bounded(tags: [String: String]) -> (tags: [String: String], dropped: Int) {
        var out: [String: String] = [:]
        for key in tags.keys.sorted() {
            let k = Vaka.Options.cut(key, maxChars: Vaka.Options.maxTagChars)
            if out[k] == nil, out.count >= maxTags { continue }
            out[k] = Vaka.Options.cut(tags[key]!, maxChars: Vaka.Options.maxTagChars)
        }
        return (out, tags.count - out.count)
    }
}

/// `<storage>/runs/<run-id>/`: the persisted scope, the breadcrumbs and a lock file held (`flock`) for as
/// long as the run's process lives, so a later launch can tell a finished run (lock free) from a live one.
///
/// `@unchecked Sendable`: its mutable state (the lock descriptor, whether `scope.json` was written) is touched
/// by one thread at a time: the client's ``Client/setUp()`` until it hands the directory over, then only under
/// the client's state lock.
final class RunDirectory: @unchecked Sendable {
    /// The directory as a file URL (made at each use: ``path`` is what the SDK's own file work uses).
    var url: URL { URL(fileURLWithPath: path, isDirectory: true) }
    /// The run id (directory name).
    let runID: String
    /// The directory's file-system path (its files' paths are made from it as strings: a `URL` on the start and
    /// exit paths costs more than the system calls it names, and pages of Foundation made resident).
    let path: String
    private var lockFD: Int32 = -1
    /// Whether `scope.json` was written once (later writes replace it atomically).
    private var wroteScope = false

    /// Largest `scope.json` read back, bytes: 1 MiB (a scope is release, environment, tags, user id and
    /// session: a few KiB). A bigger file is ignored with a debug line, without being read.
    static let maxScopeBytes = 1 << 20

    /// `<storage>/runs`.
    static func root(_ storage: URL) -> URL { storage.appendingFileComponent("runs", isDirectory: true) }

    /// `<storage>/runs` for the storage directory at `storagePath`.
    static func root(_ storagePath: String) -> String { PrivateFiles.path(storagePath, "runs") }

    /// Whether the run lock file at `path` is held (`flock`) by a process, i.e. that run's process lives. A lock
    /// that cannot be opened (missing, unreadable) is not held. Probes with `flock` and closes at once.
    static func lockHeld(at path: String) -> Bool {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        return flock(fd, LOCK_EX | LOCK_NB) != 0
    }

    /// The run id in `name` when it is the name of a run directory being made (`.<run-id>`, a UUID: see
    /// ``init(storagePath:runID:)``), else `nil`.
    static func stagedRunID(_ name: String) -> String? {
        guard name.hasPrefix(".") else { return nil }
        let id = String(name.dropFirst())
        return RandomID.isUUID(id) ? id : nil
    }

    /// Creates the directory (mode 0700) for `runID` and takes its lock: made as `runs/.<run-id>` (a name the
    /// crash join skips), its lock taken there, then renamed to `runs/<run-id>`, so that another launch's join
    /// never sees the directory without its lock held (it would take it for a run that died before writing
    /// anything, and delete it). When that rename cannot be done (a non-empty `runs/<run-id>` is there), the
    /// directory is made in place.
    /// - Throws: ``DeliveryIOError`` when it cannot be created.
    convenience init(storage: URL, runID: String) throws {
        try self.init(storagePath: storage.fileSystemPath, runID: runID)
    }

    /// ``init(storage:runID:)`` for the storage directory at `storagePath` (absolute).
    init(storagePath: String, runID: String) throws {
        self.runID = runID
        let root = RunDirectory.root(storagePath)
        path = PrivateFiles.path(root, runID)
        // `runs/` first: each level is then one mkdir(2) (see PrivateFiles.makeDirectory).
        try PrivateFiles.makeDirectory(path: root)
        let staging = PrivateFiles.path(root, "." + runID)
        if (try? PrivateFiles.makeDirectory(path: staging)) != nil {
            lockFD = RunDirectory.openLock(staging + "/lock")
            if lockFD >= 0 && rename(staging, path) == 0 { return }
            if lockFD >= 0 { Glibc.close(lockFD); lockFD = -1 }
            unlink(staging + "/lock")
            rmdir(staging)
        }
        try PrivateFiles.makeDirectory(path: path)
        lockFD = RunDirectory.openLock(path + "/lock")
    }

    /// Opens (``PrivateFiles/openLockFile(_:)``: another launch opens it read-write to tell whether this run is
    /// alive) the lock file at `path` and takes its lock; -1 when it cannot be opened.
    private static func openLock(_ path: String) -> Int32 {
        let fd = PrivateFiles.openLockFile(path)
        if fd >= 0 { takeLock(fd) }
        return fd
    }

    deinit { if lockFD >= 0 { Glibc.close(lockFD) } }

    /// Takes the new run's lock on `fd`. Another launch's join may hold it at that moment, for the `flock` and
    /// `close` with which it tells whether the run lives (``finishedRuns(storage:except:live:log:)``): a refusal is
    /// tried again, every 100 µs for up to about 100 ms, rather than leaving the run without its lock (it would
    /// then be joined as a finished run while it lives). Nothing else ever holds a new run's lock.
    private static func takeLock(_ fd: Int32) {
        for _ in 0..<1000 {
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return }
            guard errno == EWOULDBLOCK || errno == EINTR else { return }
            usleep(100)
        }
    }

    /// Writes `scope.json` atomically. Failures are returned as an error for debug logging. A scope that would
    /// encode over ``maxScopeBytes`` (never, within ``RunScope``'s limits; a guard) is written without its tags
    /// rather than as a file the next launch would refuse.
    /// The first write creates the file in place (`O_EXCL`, no temporary file and rename: the directory is new
    /// and no other process reads it while this run's lock is held; a file torn by a crash during that write
    /// gives the next launch no scope, as no file would).
    func write(_ scope: RunScope) throws {
        var data = try scope.jsonData()
        if data.count > RunDirectory.maxScopeBytes {
            var smaller = scope
            smaller.tags = [:]
            data = try smaller.jsonData()
        }
        let file = PrivateFiles.path(path, "scope.json")
        if !wroteScope {
            let fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 {
                _ = fchmod(fd, 0o600)  // the next launch reads it, whatever the umask
                let code = PrivateFiles.withFileSizeSignalBlocked { PrivateFiles.writeAll(fd, data) }
                Glibc.close(fd)
                if code == 0 { wroteScope = true; return }
                unlink(file)
            }
        }
        try data.withUnsafeBytes { try PrivateFiles.writeAtomically($0, toPath: file, sync: false) }
        wroteScope = true
    }

    /// The files a run directory holds: `scope.json`, the journal and its spill file, the lock (the order
    /// ``remove()`` deletes them in: once `scope.json` is gone, a process killed during the rest leaves no
    /// session for the next launch to end again).
    static let fileNames = ["scope.json", "journal", "journal.spill", "lock"]

    /// Deletes the directory (the run ended and everything about it was sent or queued): its known files with
    /// `unlink(2)` and the directory with `rmdir(2)`; anything else in it through `FileManager`.
    func remove() {
        // Every file goes while the lock is held: a launch that takes the lock once it is released finds no
        // `scope.json` still saying `ok` (it would end the session again, `abnormal`) and no journal (it would
        // move its entries again).
        for name in RunDirectory.fileNames { unlink(path + "/" + name) }
        if lockFD >= 0 { Glibc.close(lockFD); lockFD = -1 }
        if rmdir(path) != 0 && errno != ENOENT { try? FileManager.default.removeItem(at: url) }
    }

    /// A run directory left by an earlier process.
    struct Previous {
        /// The directory.
        var url: URL
        /// Its run id.
        var runID: String
        /// The scope it persisted, if readable.
        var scope: RunScope?
    }

    /// The run directories under `<storage>/runs` whose process is gone (their lock can be taken), except
    /// `current`. A directory whose lock is held belongs to a live process and is left alone. A `scope.json`
    /// over ``maxScopeBytes`` or not a regular file gives no scope (logged to `log`).
    static func finishedRuns(storage: URL, except current: String, log: ((String) -> Void)? = nil) -> [Previous] {
        var live = Set<String>()
        return finishedRuns(storage: storage, except: current, live: &live, log: log)
    }

    /// ``finishedRuns(storage:except:log:)``, also collecting in `live` the run ids whose lock is held (a
    /// process of that run still runs: its crash report, if any, may be half written).
    static func finishedRuns(storage: URL, except current: String, live: inout Set<String>,
                             log: ((String) -> Void)? = nil) -> [Previous] {
        let root = root(storage)
        let names = PrivateFiles.directoryNames(root.fileSystemPath)
        var runs: [Previous] = []
        for name in names.sorted() where name != current && !name.hasPrefix(".") {
            let dir = root.appendingFileComponent(name, isDirectory: true)
            if lockHeld(at: dir.appendingFileComponent("lock").fileSystemPath) { live.insert(name); continue }
            var scope: RunScope? = nil
            switch PrivateFiles.readCapped(dir.appendingFileComponent("scope.json").fileSystemPath, maxBytes: RunDirectory.maxScopeBytes) {
            case .data(let data): scope = try? JSONDecoder().decode(RunScope.self, from: data)
            case .tooLarge(let size): log?("run \(name): scope.json is \(size) B, over \(RunDirectory.maxScopeBytes) B; ignored")
            case .notRegular: log?("run \(name): scope.json is not a regular file; ignored")
            case .unreadable: break  // none: the run never wrote one
            }
            runs.append(Previous(url: dir, runID: name, scope: scope))
        }
        return runs
    }
}
