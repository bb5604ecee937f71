import XCTest
import VakaTestSupport
@testable import Vaka

/// `PrivateFiles.makeDirectory` on the storage paths a program may give: missing parents under a umask that takes
/// the owner's own bits, a symlink loop, trailing slashes and `.`/`..` components, a symlink to a directory.
final class MakeDirectoryEdgeTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// Under umask 0277 the missing parents still get the owner's write and search bits (as `mkdir -p` gives them):
    /// without them a process that is not root cannot make the next directory down (Vaka.start then runs without
    /// storage: "mkdir ...: Permission denied"). The directory itself is 0700 either way.
    func testParentsMadeUnderAStrictUmaskStayUsableByTheOwner() throws {
        let root = dirs.make("umask")
        let deep = root.appendingPathComponent("a/b/c", isDirectory: true)
        let saved = umask(0o277)
        defer { umask(saved) }
        try PrivateFiles.makeDirectory(deep)
        umask(saved)
        var info = stat()
        for (path, mode) in [("a", 0o700), ("a/b", 0o700), ("a/b/c", 0o700)] as [(String, mode_t)] {
            XCTAssertEqual(stat(root.appendingPathComponent(path).path, &info), 0, path)
            XCTAssertEqual(info.st_mode & S_IFMT, S_IFDIR, path)
            XCTAssertEqual(info.st_mode & 0o7777, mode, path)
        }
    }

    /// A parent that was there already keeps its mode, whatever the umask (only parents made by the call get u+wx).
    func testExistingParentKeepsItsMode() throws {
        let root = dirs.make("keep")
        let parent = root.appendingPathComponent("p")
        XCTAssertEqual(mkdir(parent.path, 0o755), 0)
        XCTAssertEqual(chmod(parent.path, 0o555), 0)
        defer { chmod(parent.path, 0o755) }
        try PrivateFiles.makeDirectory(parent.appendingPathComponent("x/y"))  // root may write into 0555; others fail with EACCES
        var info = stat()
        XCTAssertEqual(stat(parent.path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o7777, 0o555)
        XCTAssertEqual(stat(parent.appendingPathComponent("x").path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o300, 0o300)
    }

    /// A symlink loop is named as what it is (`stat`, ELOOP), not as `mkdir`'s EEXIST on the link.
    func testSymlinkLoopIsNamedByStat() throws {
        let root = dirs.make("loop")
        let one = root.appendingPathComponent("one"), two = root.appendingPathComponent("two")
        XCTAssertEqual(symlink(two.path, one.path), 0)
        XCTAssertEqual(symlink(one.path, two.path), 0)
        XCTAssertThrowsError(try PrivateFiles.makeDirectory(one)) { error in
            let failure = error as? DeliveryIOError
            XCTAssertEqual(failure?.operation, "stat", "\(error)")
            XCTAssertEqual(failure?.code, ELOOP, "\(error)")
            XCTAssertEqual(failure?.path, one.path)
        }
    }

    /// Trailing slashes, `.` and `..` components with missing directories on the way, and a symlink to a
    /// directory (followed: the directory it names becomes 0700).
    func testOddButValidPaths() throws {
        let root = dirs.make("odd")
        try PrivateFiles.makeDirectory(URL(fileURLWithPath: root.path + "/t/u///"))
        try PrivateFiles.makeDirectory(URL(fileURLWithPath: root.path + "/m/../n/./o"))
        var info = stat()
        for path in ["t/u", "m", "n/o"] {
            XCTAssertEqual(stat(root.appendingPathComponent(path).path, &info), 0, path)
            XCTAssertEqual(info.st_mode & S_IFMT, S_IFDIR, path)
        }
        XCTAssertEqual(stat(root.appendingPathComponent("n/o").path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o7777, 0o700)
        let target = root.appendingPathComponent("target"), link = root.appendingPathComponent("link")
        XCTAssertEqual(mkdir(target.path, 0o755), 0)
        XCTAssertEqual(chmod(target.path, 0o755), 0)
        XCTAssertEqual(symlink(target.path, link.path), 0)
        try PrivateFiles.makeDirectory(link)
        XCTAssertEqual(stat(target.path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o7777, 0o700)
    }
}
