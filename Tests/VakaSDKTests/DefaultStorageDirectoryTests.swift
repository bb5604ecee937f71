import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import Vaka

/// The SDK's default storage directory tells programs apart.
final class DefaultStorageDirectoryTests: XCTestCase {
    /// The default storage directory is `$XDG_STATE_HOME/vaka/<basename of argv[0]>`. Two different programs
    /// whose executables share a base name (`/srv/billing/server` and `/srv/search/server`, `main`, `app`,
    /// `worker`...) get the same directory: the second one's `Vaka.start` joins the first one's crash
    /// reports and `pending/` batches and sends them **to its own DSN** (a batch file does not record its
    /// destination), then deletes the reports — the first program's crash never reaches its project. And an
    /// `argv[0]` of `/` (any `execve` caller chooses it) gives the shared `vaka/` root itself.
    /// Expected: a default that tells programs apart (e.g. the executable's full path or build ID hashed into
    /// the name, from `/proc/self/exe` rather than `argv[0]`).
    func testDefaultStorageSeparatesProgramsWithTheSameBaseName() throws {
        let savedXDG = getenv("XDG_STATE_HOME").map { String(cString: $0) }
        defer {
            if let savedXDG { setenv("XDG_STATE_HOME", savedXDG, 1) } else { unsetenv("XDG_STATE_HOME") }
        }
        setenv("XDG_STATE_HOME", "/tmp/vaka-xdg-state", 1)
        func storage(argv0: String) -> String {
            Vaka.defaultStorageDirectory(argv0: argv0).standardizedFileURL.path
        }
        let billing = storage(argv0: "/srv/billing/server")
        let search = storage(argv0: "/srv/search/server")
        XCTAssertNotEqual(billing, search, "two different programs named `server` share \(billing)")
        let root = URL(fileURLWithPath: "/tmp/vaka-xdg-state/vaka").standardizedFileURL.path
        XCTAssertNotEqual(storage(argv0: "/"), root, "argv[0] \"/\" makes the storage the shared vaka/ root")
    }
}
