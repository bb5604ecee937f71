// scripts/bench's baseline for a Swift program using Foundation: reads the time and the environment, then
// exits. `bench-start-foundation crash` dereferences NULL instead (bench_null_deref, SIGSEGV): the crash
// baseline without Vaka (and, with the Swift runtime's backtracer on, the backtracer's cost);
// `bench-start-foundation crash-settled` waits BENCH_SETTLE_MS (bench_settle) first: the settled crash baseline.
import Foundation
import BenchNullDeref

let started = Date()
let environment = ProcessInfo.processInfo.environment
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "crash" { _ = bench_null_deref() }
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "crash-settled" {
    bench_settle()
    _ = bench_null_deref()
}
bench_report_memory()  // $BENCH_START_MEMORY: resident memory now, for scripts/bench
if environment["BENCH_START_PRINT"] != nil { print(started.timeIntervalSince1970) }
