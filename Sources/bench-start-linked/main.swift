// scripts/bench: bench-start-foundation with Vaka linked but `Vaka.start` not called (the call is there,
// behind an argument the bench never passes, so that the linker keeps Vaka): what linking alone costs.
// `bench-start-linked crash` dereferences NULL instead (bench_null_deref, SIGSEGV).
import Foundation
import Vaka
import BenchNullDeref

let started = Date()
let environment = ProcessInfo.processInfo.environment
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "crash" { _ = bench_null_deref() }
bench_report_memory()  // $BENCH_START_MEMORY: resident memory now, for scripts/bench
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "start" { Vaka.start(Vaka.Options()) }
if environment["BENCH_START_PRINT"] != nil { print(started.timeIntervalSince1970) }
