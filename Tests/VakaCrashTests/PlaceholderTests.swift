import XCTest
final class PlaceholderCrashTests: XCTestCase { func testNothing() {} }
