// libFuzzer entry for what the uploader reads from a server's answer (compiled by scripts/fuzz together with
// Sources/Vaka/Delivery/{RateLimits,Timestamps,Clock,Backoff,Envelope}.swift and Sources/Vaka/Protocol; not
// part of the package build).
//
// Input: line 1 is the HTTP status (any text; not a number → 429), the other lines are `name: value`
// response headers. Every input goes through what `Uploader.send` and `Uploader.fail` do with an answer:
// `RateLimits.update` (X-Sentry-Rate-Limits, Retry-After, the 60 s default), `RateLimits.parseRetryAfter`,
// `Timestamps.parseHTTPDate` on every value, the backoff with the Retry-After applied, the log line's whole
// seconds, a bounded condition-wait deadline and the RFC 3339 form of every deadline; also
// `RateLimits.parseSentryHeader` and `Timestamps.parseRFC3339` on every value. Any trap is a finding.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func vakaFuzzResponseHeaders(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let data = start.map { Data(bytes: $0, count: count) } ?? Data()
    let text = String(decoding: data, as: UTF8.self)
    var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let statusLine = lines.isEmpty ? "" : lines.removeFirst()
    let status = Int(statusLine.trimmingCharacters(in: .whitespaces)) ?? 429
    var headers: [String: String] = [:]
    for line in lines {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers[line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()] =
            line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    // A fixed "now" and the real one: dates far from both ends of the range.
    for now in [Date(timeIntervalSince1970: 1_700_000_000), Date()] {
        var limits = RateLimits()
        limits.update(status: status, headers: headers, now: now)
        for category in ["", "error", "session", "log_item", "attachment"] {
            _ = limits.isLimited(category, at: now)
            if let until = limits.limitedUntil(category, at: now) { check(until, now: now) }
        }
        if let next = limits.nextExpiry(after: now) { check(next, now: now) }
        var backoff = Backoff()
        for _ in 0..<3 {
            var until = backoff.recordFailure(now: now)
            if let value = headers["retry-after"], let r = RateLimits.parseRetryAfter(value, now: now) {
                precondition(r >= 0 && r <= Bounded.maxDelay, "Retry-After delay out of range: \(r)")
                until = max(until, now.addingTimeInterval(r))
            }
            check(until, now: now)
        }
        for value in headers.values {
            for (delay, categories) in RateLimits.parseSentryHeader(value) {
                precondition(delay >= 0 && delay <= Bounded.maxDelay && !categories.isEmpty)
            }
            if let date = Timestamps.parseHTTPDate(value) { check(date, now: now) }
            if let date = Timestamps.parseRFC3339(value) { check(date, now: now) }
            if let r = RateLimits.parseRetryAfter(value, now: now) { precondition(r >= 0 && r <= Bounded.maxDelay) }
        }
    }
    return 0
}

/// What the SDK does with a deadline: log its whole seconds, wait on it, format it.
private func check(_ date: Date, now: Date) {
    _ = Bounded.wholeSeconds(date.timeIntervalSince(now))
    let wait = Bounded.waitDeadline(date, now: now)
    precondition(wait.timeIntervalSince(now) >= 0 && wait.timeIntervalSince(now) <= Bounded.maxDelay)
    _ = Timestamps.rfc3339(date)
}
