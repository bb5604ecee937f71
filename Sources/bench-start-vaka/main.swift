// scripts/bench: bench-start-foundation calling `Vaka.start` first.
//   bench-start-vaka STORAGE [DSN]         Vaka.start on STORAGE (outbox mode without DSN), then the baseline's own
//                                          work (the time, the environment), then exit (the atexit hook ends the
//                                          session and flushes). STORAGE `-`: the default storage directory
//                                          (`Vaka.Options()` without storageDirectory, as README's snippet)
//   With $BENCH_START_MEMORY set (every bench-start-* program): /proc/self/smaps_rollup copied to that file
//   before exiting (bench_report_memory; here after `Vaka.flush(timeout: 0)`, which waits for the background part
//   of start).
//   bench-start-vaka STORAGE crash [DSN]   the same, dereferencing NULL where bench-start-foundation crash does
//                                          (bench_null_deref, SIGSEGV)
//   bench-start-vaka STORAGE crash-settled [DSN]
//                                          the same after bench_settle (BENCH_SETTLE_MS, as bench-start-foundation
//                                          crash-settled): a crash once start's background part is done
//   bench-start-vaka STORAGE deliver DSN N captures N messages, then Vaka.flush(timeout: 120); prints one JSON
//                                          object: {"events","seconds","events_per_s","flushed"} (seconds from
//                                          the first capture to the end of the flush)
import Foundation
import Vaka
import BenchNullDeref

let arguments = Array(CommandLine.arguments.dropFirst())
guard let storage = arguments.first else {
    FileHandle.standardError.write(Data("usage: bench-start-vaka STORAGE [crash|deliver DSN N] [DSN]\n".utf8))
    exit(2)
}
let mode = arguments.count > 1 ? arguments[1] : ""
if mode == "deliver", arguments.count == 4, let count = Int(arguments[3]) {
    Vaka.start(Vaka.Options(dsn: arguments[2], sessionTracking: false,
                            storageDirectory: URL(fileURLWithPath: storage)))
    let t0 = DispatchTime.now().uptimeNanoseconds
    for i in 0..<count { Vaka.capture(message: "bench delivery \(i)", level: .info) }
    let flushed = Vaka.flush(timeout: 120)
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e9
    print("{\"events\":\(count),\"seconds\":\(seconds),\"events_per_s\":\(Double(count) / seconds),\"flushed\":\(flushed)}")
    Vaka.close(timeout: 0)
    exit(0)
}
let crashes = mode == "crash" || mode == "crash-settled"
let dsn = crashes ? (arguments.count > 2 ? arguments[2] : nil) : (arguments.count > 1 ? arguments[1] : nil)
Vaka.start(Vaka.Options(dsn: dsn, storageDirectory: storage == "-" ? nil : URL(fileURLWithPath: storage)))
// Then what bench-start-foundation does (the baseline's own work), so that the two rows differ by Vaka alone.
let started = Date()
let environment = ProcessInfo.processInfo.environment
if mode == "crash" { _ = bench_null_deref() }
if mode == "crash-settled" {
    bench_settle()
    _ = bench_null_deref()
}
if environment["BENCH_START_MEMORY"] != nil {
    // Resident memory of a started Vaka for scripts/bench: after the background part of start (flush waits for
    // it), before the exit path.
    Vaka.flush(timeout: 0)
    bench_report_memory()
}
if environment["BENCH_START_PRINT"] != nil { print(started.timeIntervalSince1970) }
