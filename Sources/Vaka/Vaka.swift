import Foundation
import VakaCrash

/// The Vaka SDK facade: crash capture and event reporting for Swift programs on Linux.
///
/// Call ``start(_:)`` once, as early as possible in `main`. From then on every fatal signal
/// (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE, SIGSYS, Swift runtime traps) is recorded
/// by the C crash runtime into `<storageDirectory>/crashes/<run-id>.crash`.
public enum Vaka {
    /// Settings for ``Vaka/start(_:)``.
    public struct Options: Sendable {
        /// Where Vaka keeps its files (crash reports in `crashes/`). `nil` selects the default:
        /// `$XDG_STATE_HOME/vaka/<executable name>`, else `~/.local/state/vaka/<executable name>`.
        /// Directories are created with mode 0700.
        public var storageDirectory: URL?
        /// Install the crash handlers. Default `true`.
        public var crashReporting: Bool
        /// Log what the SDK does to stderr. Default `false`.
        public var debug: Bool

        /// Creates options; every parameter has the default described on its property.
        public init(storageDirectory: URL? = nil, crashReporting: Bool = true, debug: Bool = false) {
            self.storageDirectory = storageDirectory
            self.crashReporting = crashReporting
            self.debug = debug
        }
    }

    private static let lock = NSLock()
    nonisolated(unsafe) private static var state: (options: Options, storage: URL, runID: String)?

    /// Starts Vaka: creates the storage directory and installs the crash handlers under a fresh run id
    /// (a random UUID). Calling it again while started does nothing. Never throws: failures are
    /// logged to stderr when `options.debug` is set, and leave crash capture off.
    public static func start(_ options: Options) {
        lock.lock(); defer { lock.unlock() }
        guard state == nil else { return }
        let storage = options.storageDirectory ?? defaultStorageDirectory()
        let runID = UUID().uuidString
        let crashes = storage.appendingPathComponent("crashes", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: crashes, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            log(options, "cannot create \(crashes.path): \(error)")
            return
        }
        if options.crashReporting {
            let rc = crashes.path.withCString { dir in
                runID.withCString { id in
                    var config = vaka_crash_config(report_dir: dir, run_id: id, signals: nil,
                                                   signal_count: 0, alt_stack_size: 0)
                    return vaka_crash_install(&config)
                }
            }
            if rc != 0 {
                log(options, "crash handlers not installed: \(String(cString: strerror(rc)))")
            } else {
                log(options, "crash handlers installed; reports go to \(crashes.path)/\(runID).crash")
            }
        }
        state = (options, storage, runID)
    }

    /// Stops Vaka: restores the signal handlers that were installed before ``start(_:)``.
    /// Does nothing when not started.
    public static func close() {
        lock.lock(); defer { lock.unlock() }
        guard state != nil else { return }
        _ = vaka_crash_uninstall()
        state = nil
    }

    /// The id of the current run (a UUID string, also the crash report's file name), or `nil` before start.
    public static var runID: String? {
        lock.lock(); defer { lock.unlock() }
        return state?.runID
    }

    /// The storage directory in use, or `nil` before start.
    public static var storageDirectory: URL? {
        lock.lock(); defer { lock.unlock() }
        return state?.storage
    }

    /// Gives the calling thread its own alternate signal stack so a stack overflow on it is still
    /// reported. Threads other than the one that called ``start(_:)`` need this (see docs/crash-handling.md).
    /// - Returns: `true` on success or when the thread already has an alternate stack.
    @discardableResult
    public static func attachCurrentThread() -> Bool {
        vaka_crash_thread_attach() == 0
    }

    static func defaultStorageDirectory() -> URL {
        let env = ProcessInfo.processInfo.environment
        let app = URL(fileURLWithPath: CommandLine.arguments.first ?? "app").lastPathComponent
        if let xdg = env["XDG_STATE_HOME"], xdg.hasPrefix("/") {
            return URL(fileURLWithPath: xdg).appendingPathComponent("vaka").appendingPathComponent(app)
        }
        let home = env["HOME"] ?? NSHomeDirectory()
        return URL(fileURLWithPath: home).appendingPathComponent(".local/state/vaka").appendingPathComponent(app)
    }

    private static func log(_ options: Options, _ message: String) {
        guard options.debug else { return }
        FileHandle.standardError.write(Data("[vaka] \(message)\n".utf8))
    }
}
