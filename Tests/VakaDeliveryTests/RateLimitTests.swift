import XCTest
@testable import Vaka

final class RateLimitTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    func testCategories() {
        XCTAssertEqual(RateLimits.category(for: .event), "error")
        XCTAssertEqual(RateLimits.category(for: .session), "session")
        XCTAssertEqual(RateLimits.category(for: .log), "log_item")
    }

    func testRetryAfterSecondsAndDate() {
        XCTAssertEqual(RateLimits.parseRetryAfter("120", now: t0), 120)
        XCTAssertEqual(RateLimits.parseRetryAfter(" 2.5 ", now: t0), 2.5)
        XCTAssertEqual(RateLimits.parseRetryAfter("Tue, 14 Nov 2023 22:15:00 GMT", now: t0), 100)  // t0 = 22:13:20
        XCTAssertEqual(RateLimits.parseRetryAfter("Tue, 14 Nov 2023 22:00:00 GMT", now: t0), 0)  // in the past
        XCTAssertNil(RateLimits.parseRetryAfter("-1", now: t0))
        XCTAssertNil(RateLimits.parseRetryAfter("later", now: t0))
    }

    func test429WithoutHeadersIs60sForAll() {
        var r = RateLimits()
        XCTAssertTrue(r.update(status: 429, headers: [:], now: t0))
        XCTAssertTrue(r.isLimited("error", at: t0 + 59.9))
        XCTAssertTrue(r.isLimited("session", at: t0 + 59.9))
        XCTAssertFalse(r.isLimited("error", at: t0 + 60))
        var unparsable = RateLimits()
        unparsable.update(status: 429, headers: ["retry-after": "whenever"], now: t0)
        XCTAssertEqual(unparsable.limitedUntil("log_item", at: t0), t0 + 60)
    }

    func test429RetryAfterLimitsAll() {
        var r = RateLimits()
        r.update(status: 429, headers: ["retry-after": "30"], now: t0)
        XCTAssertEqual(r.limitedUntil("error", at: t0), t0 + 30)
        XCTAssertEqual(r.limitedUntil("anything", at: t0), t0 + 30)
        // Retry-After is not a rate limit on other statuses
        var s = RateLimits()
        XCTAssertFalse(s.update(status: 503, headers: ["retry-after": "30"], now: t0))
        XCTAssertFalse(s.isLimited("error", at: t0))
    }

    func testSentryHeaderPerCategoryLongestWins() {
        var r = RateLimits()
        r.update(status: 429, headers: ["x-sentry-rate-limits": "60:error;transaction:organization:quota_exceeded, 2700:session:project, 10:error:key",
                                        "retry-after": "5000"], now: t0)
        XCTAssertEqual(r.limitedUntil("error", at: t0), t0 + 60, "longest limit for error; Retry-After ignored")
        XCTAssertEqual(r.limitedUntil("transaction", at: t0), t0 + 60)
        XCTAssertEqual(r.limitedUntil("session", at: t0), t0 + 2700)
        XCTAssertNil(r.limitedUntil("log_item", at: t0))
        // a later, shorter limit does not shorten it
        r.update(status: 200, headers: ["x-sentry-rate-limits": "5:error:key"], now: t0 + 1)
        XCTAssertEqual(r.limitedUntil("error", at: t0), t0 + 60)
        // on 200 too, and empty categories = all; namespaces ignored
        r.update(status: 200, headers: ["x-sentry-rate-limits": "100::organization:reason:ns1;ns2"], now: t0)
        XCTAssertEqual(r.limitedUntil("log_item", at: t0), t0 + 100)
        XCTAssertEqual(r.limitedUntil("session", at: t0), t0 + 2700)
        XCTAssertEqual(r.nextExpiry(after: t0), t0 + 60)
    }

    func testBackoffDoublesToFiveMinutesAndResets() {
        var b = Backoff()
        var delays: [TimeInterval] = []
        var now = t0
        for _ in 0..<9 {
            let next = b.recordFailure(now: now)
            delays.append(next.timeIntervalSince(now))
            XCTAssertTrue(b.isWaiting(at: next - 0.001))
            XCTAssertFalse(b.isWaiting(at: next))
            now = next
        }
        XCTAssertEqual(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300])
        b.reset()
        XCTAssertFalse(b.isWaiting(at: now))
        XCTAssertEqual(b.recordFailure(now: now).timeIntervalSince(now), 5)
    }
}
