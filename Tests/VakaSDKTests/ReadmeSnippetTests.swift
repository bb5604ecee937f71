import XCTest
import Vaka

/// README's logging snippet, compiled with a plain `import Vaka` (public API only, no `@testable`): when an
/// option stops being a settable property or a logger call changes shape, this file stops compiling.
final class ReadmeSnippetTests: XCTestCase {
    func testLoggingSnippetCompiles() {
        // Compiled, not run: starting Vaka here would send to the example DSN.
        let snippet: () -> Void = {
            var options = Vaka.Options(dsn: "https://KEY@sentry.example.com/42")
            options.logLevel = .debug
            options.logSinks = [ConsoleLogSink()]
            Vaka.start(options)
            let user = "ana", items = 3, level: LogLevel = .warn
            Vaka.logger.debug("cart loaded", attributes: ["user": .string(user), "items": .integer(Int64(items))])
            Vaka.logger.log(level, "slow checkout", attributes: ["ms": 812, "retry": true])
            Vaka.logger.info("checkout done", attributes: ["user": "ana", "items": 3, "ratio": 0.5, "retry": true])
        }
        _ = snippet
        var options = Vaka.Options()
        options.logBreadcrumbLevel = nil
        options.journalSize = 1 << 20
        XCTAssertNil(options.logBreadcrumbLevel)
        XCTAssertEqual(options.journalSize, 1 << 20)
    }

    /// README's scope lines, compiled against the public API (literals as `JSONValue`, the per-call closure).
    func testScopeSnippetCompiles() {
        struct CheckoutFailed: Error {}
        func checkout() throws { throw CheckoutFailed() }
        let report = Data("{}".utf8)
        let snippet: () -> Void = {
            Vaka.addBreadcrumb(Breadcrumb(type: "query", category: "db", message: "SELECT orders", level: "warning",
                                          data: ["rows": 3, "tables": ["orders"]]))
            Vaka.setUser(User(id: "user-123", email: "ana@example.com", username: "ana", ipAddress: "203.0.113.7"))
            Vaka.setContext("order", ["id": 1042, "plan": "pro"])
            Vaka.setExtra("cart_size", 3)
            Vaka.addAttachment(path: "/var/log/myapp.log")
            Vaka.addAttachment(data: report, filename: "cart.json", contentType: "application/json")
            do { try checkout() } catch {
                Vaka.capture(error, fingerprint: ["checkout", "declined"]) { scope in
                    scope.setTag("payment", "card")
                    scope.setContext("payment", ["provider": "acme"])
                }
            }
            Vaka.capture(message: "Cache rebuilt", level: .warning)
        }
        _ = snippet
    }

    /// README's demo output quotes the force-unwrap's `file:line` in `vaka-crashme swift-force-unwrap`'s fatal
    /// message: that line of Sources/vaka-crashme/Scenarios.swift must still be the force-unwrap of
    /// `swiftForceUnwrap()`.
    func testDemoOutputQuotesTheForceUnwrapsLine() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let marker = "vaka_crashme/Scenarios.swift:"
        let range = try XCTUnwrap(readme.range(of: marker), "README quotes the demo's fatal message")
        let number = readme[range.upperBound...].prefix { $0.isNumber }
        let line = try XCTUnwrap(Int(number), "a line number after \(marker)")
        XCTAssertTrue(readme[range.upperBound...].dropFirst(number.count).hasPrefix(": Fatal error:"))
        let source = try String(contentsOf: root.appendingPathComponent("Sources/vaka-crashme/Scenarios.swift"),
                                encoding: .utf8)
        let lines = source.components(separatedBy: "\n")
        XCTAssertGreaterThan(lines.count, line)
        let quoted = lines[line - 1]
        XCTAssertTrue(quoted.contains("value!"), "README's line \(line) is `\(quoted)`, not the force-unwrap")
        XCTAssertTrue(lines[max(0, line - 4)..<line].contains { $0.contains("func swiftForceUnwrap()") },
                      "line \(line) is not in swiftForceUnwrap()")
    }
}
